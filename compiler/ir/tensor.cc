// DType tables and the host Tensor.
#include "kiln/compiler/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  int64_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kFloat32, "f32", 4}, {DType::kUInt8, "u8", 1},      {DType::kInt8, "i8", 1},
    {DType::kUInt16, "u16", 2},  {DType::kInt16, "i16", 2},     {DType::kInt32, "i32", 4},
    {DType::kInt64, "i64", 8},   {DType::kString, "string", 0}, {DType::kBool, "bool", 1},
    {DType::kFloat16, "f16", 2}, {DType::kFloat64, "f64", 8},   {DType::kUInt32, "u32", 4},
    {DType::kUInt64, "u64", 8},  {DType::kBFloat16, "bf16", 2},
};

}  // namespace

int64_t DTypeSize(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "undefined";
}

absl::StatusOr<DType> DTypeFromName(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown element type '", std::string(name), "'"));
}

bool IsFloat(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 || d == DType::kBFloat16;
}
bool IsSignedInt(DType d) {
  return d == DType::kInt8 || d == DType::kInt16 || d == DType::kInt32 || d == DType::kInt64;
}
bool IsUnsignedInt(DType d) {
  return d == DType::kUInt8 || d == DType::kUInt16 || d == DType::kUInt32 || d == DType::kUInt64;
}

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  storage_.resize((size_bytes() + sizeof(Block) - 1) / sizeof(Block));
}

double Tensor::GetAsDouble(int64_t i) const {
  switch (dtype_) {
    case DType::kFloat32: return data_as<float>()[i];
    case DType::kFloat64: return data_as<double>()[i];
    case DType::kFloat16: return HalfToFloat(data_as<uint16_t>()[i]);
    default: return static_cast<double>(GetAsInt64(i));
  }
}

int64_t Tensor::GetAsInt64(int64_t i) const {
  switch (dtype_) {
    case DType::kInt8: return data_as<int8_t>()[i];
    case DType::kUInt8: return data_as<uint8_t>()[i];
    case DType::kBool: return data_as<uint8_t>()[i];
    case DType::kInt16: return data_as<int16_t>()[i];
    case DType::kUInt16: return data_as<uint16_t>()[i];
    case DType::kInt32: return data_as<int32_t>()[i];
    case DType::kUInt32: return data_as<uint32_t>()[i];
    case DType::kInt64: return data_as<int64_t>()[i];
    case DType::kUInt64: return static_cast<int64_t>(data_as<uint64_t>()[i]);
    case DType::kFloat32: return static_cast<int64_t>(data_as<float>()[i]);
    case DType::kFloat64: return static_cast<int64_t>(data_as<double>()[i]);
    case DType::kFloat16: return static_cast<int64_t>(HalfToFloat(data_as<uint16_t>()[i]));
    default: return 0;
  }
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    int shift = 126 - static_cast<int>(abs >> 23);
    uint32_t half = mantissa >> (shift + 1);
    uint32_t rest = mantissa & ((1u << (shift + 1)) - 1);
    uint32_t halfway = 1u << shift;
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

}  // namespace kiln
