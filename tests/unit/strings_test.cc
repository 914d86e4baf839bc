// String tensors: the host Tensor keeps its texts through copies, and the string kernels
// (run natively through the interpreter) agree with the independent reference on odd
// cases: empty strings, non-ASCII bytes that case changes leave alone, stopwords compared
// ignoring case, and floats at the edges of numpy's formatting.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

Tensor Strings(const std::vector<std::string>& texts) {
  Tensor t(DType::kString, {static_cast<int64_t>(texts.size())});
  for (size_t i = 0; i < texts.size(); ++i) t.SetString(static_cast<int64_t>(i), texts[i]);
  return t;
}

std::vector<std::string> Texts(const Tensor& t) {
  std::vector<std::string> texts;
  for (int64_t i = 0; i < t.num_elements(); ++i) texts.emplace_back(t.GetString(i));
  return texts;
}

// One node over a constant input, typed; `kernel` picks the interpreter (the string
// kernels) or the reference. Returns output 0.
absl::StatusOr<Tensor> RunOne(const std::string& op, const Tensor& input, const std::map<std::string, AttrValue>& attrs,
                              bool kernel) {
  Graph graph;
  Value* in = graph.AddConstant("in", std::make_shared<const Tensor>(input));
  Node* node = graph.AddNode(op, "node", {in}, {"out"}, 13);
  node->mutable_attrs() = attrs;
  graph.AddOutput(node->output(0));
  if (absl::Status s = InferTypes(graph); !s.ok()) return s;
  auto out = kernel ? EvaluateNode(*node, {&input}) : ReferenceEvaluateNode(*node, {&input});
  if (!out.ok()) return out.status();
  return (*out)[0];
}

TEST(StringsTest, TensorCopiesKeepTheirTexts) {
  Tensor copy;
  {
    Tensor original = Strings({"a", "", "a longer text than any small-string buffer holds"});
    copy = original;
  }
  EXPECT_EQ(Texts(copy), (std::vector<std::string>{"a", "", "a longer text than any small-string buffer holds"}));
  EXPECT_EQ(std::string(copy.data_as<const char*>()[2]), "a longer text than any small-string buffer holds");
}

TEST(StringsTest, NormalizerKeepsNonAsciiAndDropsStopwordsIgnoringCase) {
  const Tensor x = Strings({"",
                            "Stra\xc3\x9f"
                            "e",
                            "MONDAY", "h\xc3\xa9llo", "monday"});
  for (bool kernel : {true, false}) {
    std::map<std::string, AttrValue> attrs = {{"case_change_action", std::string("UPPER")},
                                              {"stopwords", std::vector<std::string>{"Monday"}}};
    auto upper = RunOne("StringNormalizer", x, attrs, kernel);
    ASSERT_TRUE(upper.ok()) << upper.status();
    EXPECT_EQ(Texts(*upper), (std::vector<std::string>{"",
                                                       "STRA\xc3\x9f"
                                                       "E",
                                                       "H\xc3\xa9LLO"}))
        << kernel;
    attrs["case_change_action"] = std::string("LOWER");
    attrs["is_case_sensitive"] = int64_t{1};
    auto lower = RunOne("StringNormalizer", x, attrs, kernel);
    ASSERT_TRUE(lower.ok()) << lower.status();
    EXPECT_EQ(Texts(*lower), (std::vector<std::string>{"",
                                                       "stra\xc3\x9f"
                                                       "e",
                                                       "monday", "h\xc3\xa9llo", "monday"}));
    attrs["stopwords"] = std::vector<std::string>{"",
                                                  "Stra\xc3\x9f"
                                                  "e",
                                                  "MONDAY", "h\xc3\xa9llo", "monday"};
    auto none = RunOne("StringNormalizer", x, attrs, kernel);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(Texts(*none), (std::vector<std::string>{""}));  // all dropped: one empty string
  }
}

TEST(StringsTest, FloatsFormatLikeNumpyInKernelAndReference) {
  const std::vector<float> f32 = {1e-5f,
                                  100.0f,
                                  1.5e20f,
                                  0.1f,
                                  -0.0f,
                                  1e-45f,
                                  std::numeric_limits<float>::max(),
                                  1e16f,
                                  9.9999e-5f,
                                  1e-4f,
                                  123456789.0f,
                                  0.039187793f,
                                  std::numeric_limits<float>::infinity(),
                                  std::nanf("")};
  Tensor x(DType::kFloat32, {static_cast<int64_t>(f32.size())});
  for (size_t i = 0; i < f32.size(); ++i) x.data_as<float>()[i] = f32[i];
  auto kernel = RunOne("Cast", x, {{"to", int64_t{8}}}, true);
  auto reference = RunOne("Cast", x, {{"to", int64_t{8}}}, false);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(Texts(*kernel), Texts(*reference));
  EXPECT_EQ(Texts(*kernel)[0], "1e-05");
  EXPECT_EQ(Texts(*kernel)[1], "100.0");
  EXPECT_EQ(Texts(*kernel)[2], "1.5e+20");
  EXPECT_EQ(Texts(*kernel)[3], "0.1");
  EXPECT_EQ(Texts(*kernel)[4], "-0.0");
  EXPECT_EQ(Texts(*kernel)[5], "1e-45");
  EXPECT_EQ(Texts(*kernel)[11], "0.039187793");

  Tensor d(DType::kFloat64, {4});
  d.data_as<double>()[0] = 0.1;
  d.data_as<double>()[1] = 5e-324;
  d.data_as<double>()[2] = std::numeric_limits<double>::max();
  d.data_as<double>()[3] = 1.0 / 3;
  auto kernel64 = RunOne("Cast", d, {{"to", int64_t{8}}}, true);
  auto reference64 = RunOne("Cast", d, {{"to", int64_t{8}}}, false);
  ASSERT_TRUE(kernel64.ok() && reference64.ok());
  EXPECT_EQ(Texts(*kernel64), Texts(*reference64));
  EXPECT_EQ(Texts(*kernel64),
            (std::vector<std::string>{"0.1", "5e-324", "1.7976931348623157e+308", "0.3333333333333333"}));
}

TEST(StringsTest, TextParsesToTheNearestFloatInKernelAndReference) {
  // 1 + 1.5 * 2^-23 is halfway between two floats (ties to even: up); with one more digit
  // below it, down.
  const Tensor x = Strings({"1e-5", "+INF", "-inf", "NaN", "0.1", "1.000000178813934326171875",
                            "1.0000001788139343261718749", "3.4028236e38", ".5", "7.", "1E8", "1e-50"});
  auto kernel = RunOne("Cast", x, {{"to", int64_t{1}}}, true);
  auto reference = RunOne("Cast", x, {{"to", int64_t{1}}}, false);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const float k = kernel->data_as<float>()[i], r = reference->data_as<float>()[i];
    EXPECT_TRUE((std::isnan(k) && std::isnan(r)) || k == r) << x.GetString(i) << ": " << k << " vs " << r;
  }
  EXPECT_EQ(kernel->data_as<float>()[5], 1.0f + 0x1p-22f);
  EXPECT_EQ(kernel->data_as<float>()[6], 1.0f + 0x1p-23f);
  for (const char* bad : {" 1", "1e", "abc", "", "0x10", "1.2.3"}) {
    EXPECT_FALSE(RunOne("Cast", Strings({bad}), {{"to", int64_t{1}}}, true).ok()) << bad;
    EXPECT_FALSE(RunOne("Cast", Strings({bad}), {{"to", int64_t{1}}}, false).ok()) << bad;
  }
}

TEST(StringsTest, MovementOpsCarryTheTexts) {
  const Tensor x = Strings({"a", "", "d\xc3\xa9", "a text longer than a pointer"});
  for (bool kernel : {true, false}) {
    for (const char* op : {"Identity", "Flatten"}) {
      auto y = RunOne(op, x, {}, kernel);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(Texts(*y), Texts(x)) << op << " " << kernel;
    }
  }
  EXPECT_FALSE(RunOne("Neg", x, {}, false).ok());  // no op reads a text as a number
}

// Random bit patterns of every exponent: the kernel's exact formatting (big integers) and
// the reference's (snprintf and strtod) print the same text, and it parses back exactly.
TEST(StringsTest, RandomFloatsFormatAlikeAndRoundTrip) {
  std::mt19937_64 random(7);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor x(dtype, {3000});
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const uint64_t bits = random();
      if (dtype == DType::kFloat32) {
        const uint32_t narrow = static_cast<uint32_t>(bits);
        std::memcpy(&x.data_as<float>()[i], &narrow, 4);
      } else {
        std::memcpy(&x.data_as<double>()[i], &bits, 8);
      }
    }
    auto kernel = RunOne("Cast", x, {{"to", int64_t{8}}}, true);
    auto reference = RunOne("Cast", x, {{"to", int64_t{8}}}, false);
    ASSERT_TRUE(kernel.ok() && reference.ok());
    EXPECT_EQ(Texts(*kernel), Texts(*reference));
    auto back = RunOne("Cast", *kernel, {{"to", static_cast<int64_t>(dtype)}}, true);
    ASSERT_TRUE(back.ok()) << back.status();
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const double want = x.GetAsDouble(i), got = back->GetAsDouble(i);
      EXPECT_TRUE((std::isnan(want) && std::isnan(got)) || want == got) << kernel->GetString(i);
    }
  }
}

}  // namespace
}  // namespace kiln
