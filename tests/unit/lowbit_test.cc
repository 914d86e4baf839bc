// Float8 and int4 / uint4 at the edges of Kiln: the float8 conversions kernels and host
// tensors share (kiln/kernels/float8.h) against the formats' defining values, and int4
// TensorProtos (two per byte, low nibble first) unpacked to one element per byte and packed
// back. The ops themselves are checked against ONNX Runtime by tests/models/make_lowbit_models.py.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/tensor.h"
#include "kiln/kernels/float8.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

constexpr int32_t kE4M3FN = 17, kE4M3FNUZ = 18, kE5M2 = 19, kE5M2FNUZ = 20;

TEST(Float8Test, DecodesEachFormatsDefiningValues) {
  EXPECT_EQ(kiln_float8_to_float(0x7e, kE4M3FN), 448.f);
  EXPECT_TRUE(std::isnan(kiln_float8_to_float(0x7f, kE4M3FN)));
  EXPECT_TRUE(std::isnan(kiln_float8_to_float(0xff, kE4M3FN)));
  EXPECT_EQ(kiln_float8_to_float(0x01, kE4M3FN), std::ldexp(1.f, -9));
  EXPECT_EQ(kiln_float8_to_float(0x7f, kE4M3FNUZ), 240.f);
  EXPECT_TRUE(std::isnan(kiln_float8_to_float(0x80, kE4M3FNUZ)));
  EXPECT_EQ(kiln_float8_to_float(0x01, kE4M3FNUZ), std::ldexp(1.f, -10));
  EXPECT_EQ(kiln_float8_to_float(0x7b, kE5M2), 57344.f);
  EXPECT_EQ(kiln_float8_to_float(0xfc, kE5M2), -INFINITY);
  EXPECT_TRUE(std::isnan(kiln_float8_to_float(0x7d, kE5M2)));
  EXPECT_EQ(kiln_float8_to_float(0x01, kE5M2), std::ldexp(1.f, -16));
  EXPECT_EQ(kiln_float8_to_float(0x7f, kE5M2FNUZ), 57344.f);
  EXPECT_EQ(kiln_float8_to_float(0x01, kE5M2FNUZ), std::ldexp(1.f, -17));
}

TEST(Float8Test, EveryFiniteCodeRoundTripsAndSpecialsFollowTheCastTable) {
  for (int32_t format : {kE4M3FN, kE4M3FNUZ, kE5M2, kE5M2FNUZ}) {
    const bool uz = format == kE4M3FNUZ || format == kE5M2FNUZ;
    for (int code = 0; code < 256; ++code) {
      const float v = kiln_float8_to_float(static_cast<uint8_t>(code), format);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(kiln_float_to_float8(v, format, 1), code) << "format " << format << " code " << code;
    }
    const uint8_t largest = format == kE4M3FN ? 0x7e : format == kE5M2 ? 0x7b : 0x7f;
    const uint8_t nan = uz ? 0x80 : 0x7f;
    EXPECT_EQ(kiln_float_to_float8(INFINITY, format, 1), largest);
    EXPECT_EQ(kiln_float_to_float8(-1e30f, format, 1), largest | 0x80);
    EXPECT_EQ(kiln_float_to_float8(INFINITY, format, 0), format == kE5M2 ? 0x7c : nan);
    EXPECT_EQ(kiln_float_to_float8(1e30f, format, 0), format == kE5M2 ? 0x7c : nan);
    EXPECT_EQ(kiln_float_to_float8(NAN, format, 1), nan);
    EXPECT_EQ(kiln_float_to_float8(-0.f, format, 1), uz ? 0 : 0x80);
  }
  // ties to even: 464 lies halfway between 448 (0x7e, even) and the overflow step
  EXPECT_EQ(kiln_float_to_float8(464.f, kE4M3FN, 0), 0x7e);
  EXPECT_EQ(kiln_float_to_float8(465.f, kE4M3FN, 0), 0x7f);
  EXPECT_EQ(kiln_float_to_float8(61440.f, kE5M2, 0), 0x7c);    // 57344 is odd: the tie overflows
  EXPECT_EQ(kiln_float_to_float8(1.0625f, kE4M3FN, 1), 0x38);  // 1 + 1/16: between 1 and 1.125
}

TEST(Int4Test, TensorProtosUnpackLowNibbleFirstAndPackBack) {
  for (const auto& [type, values] :
       {std::pair<int32_t, std::vector<int>>{22, {-8, 7, -1, 0, 3}}, {21, {15, 0, 9, 1, 6}}}) {
    onnx::TensorProto proto;
    proto.set_data_type(type);
    proto.add_dims(5);
    std::string packed(3, '\0');
    for (size_t i = 0; i < values.size(); ++i) packed[i / 2] |= static_cast<char>((values[i] & 0xf) << (i % 2 * 4));
    proto.set_raw_data(packed);
    auto tensor = ParseTensorProto(proto.SerializeAsString());
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(tensor->size_bytes(), 5);
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(tensor->GetAsInt64(static_cast<int64_t>(i)), values[i]);
    onnx::TensorProto back;
    ASSERT_TRUE(back.ParseFromString(SerializeTensorProto(*tensor, "t")));
    EXPECT_EQ(back.raw_data(), packed);
    // int32_data holds one packed byte per value too
    proto.clear_raw_data();
    for (char byte : packed) proto.add_int32_data(static_cast<uint8_t>(byte));
    auto from_ints = ParseTensorProto(proto.SerializeAsString());
    ASSERT_TRUE(from_ints.ok()) << from_ints.status();
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(from_ints->GetAsInt64(static_cast<int64_t>(i)), values[i]);
  }
  onnx::TensorProto short_proto;
  short_proto.set_data_type(22);
  short_proto.add_dims(5);
  short_proto.set_raw_data(std::string(2, '\0'));
  EXPECT_FALSE(ParseTensorProto(short_proto.SerializeAsString()).ok());
}

}  // namespace
}  // namespace kiln
