// The independent reference (compiler/reference): it covers every ONNX op Kiln accepts,
// rounds to narrow floats once, and evaluates ResNet-50-sized layers in seconds.
#include <chrono>
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

TEST(ReferenceTest, CoversEveryOnnxOpKilnSupports) {
  std::vector<std::string> missing;
  for (const std::string& op : SupportedOps()) {
    if (op.rfind("kiln.", 0) == 0) continue;  // internal ops never reach validation
    if (!HasReference(op)) missing.push_back(op);
  }
  EXPECT_TRUE(missing.empty()) << "no reference evaluation of: " << ::testing::PrintToString(missing);
}

// A one-node graph over the given inputs, run through ReferenceRunGraph.
absl::StatusOr<std::vector<Tensor>> RunOne(const std::string& op, std::vector<Tensor> inputs,
                                           const std::map<std::string, AttrValue>& attrs = {}) {
  Graph graph;
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Value* v = graph.AddValue("in" + std::to_string(i), TensorType::Static(inputs[i].dtype(), inputs[i].dims()));
    graph.AddInput(v);
    values.push_back(v);
  }
  Node* node = graph.AddNode(op, "node", values, {"out"}, 17);
  node->mutable_attrs() = attrs;
  graph.AddOutput(node->output(0));
  return ReferenceRunGraph(graph, inputs);
}

TEST(ReferenceTest, HalfResultsRoundOnceToNearestEven) {
  // 1 + 2^-11 is halfway between two halves (1 and 1 + 2^-10): ties go to the even one, 1.
  // 1 + 2^-11 + 2^-30 is just above halfway: it must round up, which rounding to float
  // first (1 + 2^-11 exactly) and then to half would get wrong.
  Tensor a(DType::kFloat64, {2}), b(DType::kFloat64, {2});
  a.data_as<double>()[0] = 1.0, b.data_as<double>()[0] = 0x1p-11;
  a.data_as<double>()[1] = 1.0, b.data_as<double>()[1] = 0x1p-11 + 0x1p-30;
  auto sum = RunOne("Add", {a, b});
  ASSERT_TRUE(sum.ok()) << sum.status();
  std::map<std::string, AttrValue> to_half = {{"to", int64_t{10}}};
  auto half = RunOne("Cast", {(*sum)[0]}, to_half);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->at(0).data_as<uint16_t>()[0], 0x3C00);  // 1.0
  EXPECT_EQ(half->at(0).data_as<uint16_t>()[1], 0x3C01);  // 1 + 2^-10
}

Tensor Floats(std::vector<int64_t> dims, std::vector<float> values) {
  Tensor t(DType::kFloat32, std::move(dims));
  for (size_t i = 0; i < values.size(); ++i) t.data_as<float>()[i] = values[i];
  return t;
}

// Gelu and LpPool have no node test in the ONNX test data Kiln runs: values from the
// specification's formulas, worked by hand.
TEST(ReferenceTest, GeluFollowsTheSpecification) {
  auto exact = RunOne("Gelu", {Floats({2}, {1.0f, -1.0f})});
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_NEAR(exact->at(0).data_as<float>()[0], 0.8413447460685429, 1e-7);  // 0.5 x (1 + erf(x / sqrt 2))
  EXPECT_NEAR(exact->at(0).data_as<float>()[1], -0.15865525393145707, 1e-7);
  std::map<std::string, AttrValue> tanh = {{"approximate", std::string("tanh")}};
  auto approximate = RunOne("Gelu", {Floats({1}, {1.0f})}, tanh);
  ASSERT_TRUE(approximate.ok()) << approximate.status();
  EXPECT_NEAR(approximate->at(0).data_as<float>()[0], 0.8411919906082768, 1e-7);
}

TEST(ReferenceTest, LpPoolFollowsTheSpecification) {
  std::map<std::string, AttrValue> attrs = {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"p", int64_t{2}}};
  auto y = RunOne("LpPool", {Floats({1, 1, 2, 3}, {1, 2, -3, 4, 5, 6})}, attrs);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->at(0).dims(), (std::vector<int64_t>{1, 1, 1, 2}));
  EXPECT_NEAR(y->at(0).data_as<float>()[0], std::sqrt(1.0 + 4 + 16 + 25), 1e-6);
  EXPECT_NEAR(y->at(0).data_as<float>()[1], std::sqrt(4.0 + 9 + 25 + 36), 1e-6);
}

TEST(ReferenceTest, UnknownOpIsNamedInTheError) {
  Tensor x(DType::kFloat32, {1});
  auto result = RunOne("NoSuchOp", {x});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.status().message()).find("NoSuchOp"), std::string::npos) << result.status();
  EXPECT_NE(std::string(result.status().message()).find("node 'node'"), std::string::npos) << result.status();
}

TEST(ReferenceTest, ResNetSizedConvFinishesInSeconds) {
  // ResNet-50's heaviest 3x3 layer shape: 256 -> 256 channels at 14x14 (about 116M MACs).
  Tensor x(DType::kFloat32, {1, 256, 14, 14}), w(DType::kFloat32, {256, 256, 3, 3});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = static_cast<float>(i % 7) * 0.1f;
  for (int64_t i = 0; i < w.num_elements(); ++i) w.data_as<float>()[i] = static_cast<float>(i % 5) * 0.01f;
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, AttrValue> same = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  auto y = RunOne("Conv", {x, w}, same);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->at(0).dims(), (std::vector<int64_t>{1, 256, 14, 14}));
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace kiln
