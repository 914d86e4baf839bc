// The losses, sampling and linear-algebra ops, MeanVarianceNormalization and
// ReverseSequence on odd shapes (primes, 1, broadcast '...' dims): the interpreter's
// kernels and a compiled artifact against the independent reference (compiler/reference).
#include <cmath>
#include <random>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

// Uniform floats in [lo, hi] as f32.
std::shared_ptr<Tensor> Uniform(std::vector<int64_t> dims, double lo, double hi, uint32_t seed) {
  auto t = std::make_shared<Tensor>(DType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t->num_elements(); ++i) t->data_as<float>()[i] = static_cast<float>(dist(rng));
  return t;
}

// Uniform integers in [lo, hi] as int64 (int32 when asked).
std::shared_ptr<Tensor> Integers(std::vector<int64_t> dims, int64_t lo, int64_t hi, uint32_t seed,
                                 DType dtype = DType::kInt64) {
  auto t = std::make_shared<Tensor>(dtype, dims);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (int64_t i = 0; i < t->num_elements(); ++i) {
    if (dtype == DType::kInt32) {
      t->data_as<int32_t>()[i] = static_cast<int32_t>(dist(rng));
    } else {
      t->data_as<int64_t>()[i] = dist(rng);
    }
  }
  return t;
}

struct OpCase {
  std::string op;
  std::vector<std::shared_ptr<Tensor>> inputs;  // input 0 becomes the graph input
  std::map<std::string, AttrValue> attrs;
  int num_outputs = 1;
  int opset = 16;
};

void ExpectClose(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    ASSERT_NEAR(g, w, 1e-4 + 1e-4 * std::fabs(w)) << what << " element " << i;
  }
}

// The case's node evaluated by the interpreter, by a compiled artifact (output 0) and by the
// reference; each must match the reference.
void CheckAgainstReference(const OpCase& c) {
  auto g = std::make_unique<Graph>();
  std::vector<Value*> inputs;
  Value* x = g->AddValue("x", TensorType::Static(c.inputs[0]->dtype(), c.inputs[0]->dims()));
  g->AddInput(x);
  inputs.push_back(x);
  for (size_t i = 1; i < c.inputs.size(); ++i) inputs.push_back(g->AddConstant("in" + std::to_string(i), c.inputs[i]));
  std::vector<std::string> outputs;
  for (int i = 0; i < c.num_outputs; ++i) outputs.push_back("y" + std::to_string(i));
  Node* node = g->AddNode(c.op, "node", inputs, outputs, c.opset);
  node->mutable_attrs() = c.attrs;
  g->AddOutput(node->output(0));
  ASSERT_TRUE(InferTypes(*g).ok()) << InferTypes(*g).message();
  std::vector<const Tensor*> args;
  for (const auto& t : c.inputs) args.push_back(t.get());
  absl::StatusOr<std::vector<Tensor>> want = ReferenceEvaluateNode(*node, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  absl::StatusOr<std::vector<Tensor>> got = EvaluateNode(*node, args);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) ExpectClose((*got)[i], (*want)[i], c.op + " interpreter");
  const std::vector<Tensor> artifact = RunArtifact(*g, "", *c.inputs[0], {1});
  ASSERT_EQ(artifact.size(), 1u);
  ExpectClose(artifact[0], (*want)[0], c.op + " artifact");
}

TEST(NnOpsTest, LossesMatchTheReference) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    SCOPED_TRACE(reduction);
    // Log-probabilities [3, 7, 5], some targets ignored, class weights.
    CheckAgainstReference({"NegativeLogLikelihoodLoss",
                           {Uniform({3, 7, 5}, -4, 0, 1), Integers({3, 5}, 0, 6, 2), Uniform({7}, 0.2, 2, 3)},
                           {{"reduction", std::string(reduction)}, {"ignore_index", int64_t{2}}}});
    // int32 targets, no weights, no ignore_index.
    CheckAgainstReference({"NegativeLogLikelihoodLoss",
                           {Uniform({1, 3}, -3, 0, 4), Integers({1}, 0, 2, 5, DType::kInt32)},
                           {{"reduction", std::string(reduction)}}});
    // Scores [2, 4, 3, 2] with log_prob, an ignore_index outside the classes.
    CheckAgainstReference({"SoftmaxCrossEntropyLoss",
                           {Uniform({2, 4, 3, 2}, -5, 5, 6), Integers({2, 3, 2}, 0, 3, 7), Uniform({4}, 0.5, 1.5, 8)},
                           {{"reduction", std::string(reduction)}, {"ignore_index", int64_t{-1}}},
                           2});
    CheckAgainstReference({"SoftmaxCrossEntropyLoss",
                           {Uniform({5, 3}, -2, 2, 9), Integers({5}, 0, 2, 10)},
                           {{"reduction", std::string(reduction)}}});
  }
}

TEST(NnOpsTest, GridSampleMatchesTheReferenceInEveryMode) {
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    for (const char* padding : {"zeros", "border", "reflection"}) {
      for (int64_t align : {0, 1}) {
        SCOPED_TRACE(std::string(mode) + " " + padding + " " + std::to_string(align));
        CheckAgainstReference(
            {"GridSample",
             {Uniform({2, 3, 5, 7}, -1, 1, 11), Uniform({2, 4, 6, 2}, -1.4, 1.4, 12)},
             {{"mode", std::string(mode)}, {"padding_mode", std::string(padding)}, {"align_corners", align}}});
      }
    }
  }
}

TEST(NnOpsTest, RoiAlignMatchesTheReference) {
  auto rois = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{4, 4});
  const float boxes[16] = {0, 0, 8, 10, 1.5f, 2.25f, 6, 5, 3, 7, 3.5f, 7.2f, -1, -2, 12, 13};
  std::copy(boxes, boxes + 16, rois->data_as<float>());
  for (const char* mode : {"avg", "max"}) {
    for (const char* transform : {"half_pixel", "output_half_pixel"}) {
      for (int64_t ratio : {0, 2}) {
        SCOPED_TRACE(std::string(mode) + " " + transform + " " + std::to_string(ratio));
        CheckAgainstReference({"RoiAlign",
                               {Uniform({2, 3, 11, 9}, -1, 1, 13), rois, Integers({4}, 0, 1, 14)},
                               {{"mode", std::string(mode)},
                                {"coordinate_transformation_mode", std::string(transform)},
                                {"output_height", int64_t{3}},
                                {"output_width", int64_t{2}},
                                {"sampling_ratio", ratio},
                                {"spatial_scale", 0.75}}});
      }
    }
  }
}

TEST(NnOpsTest, EinsumMatchesTheReference) {
  const std::vector<std::pair<std::string, std::vector<std::vector<int64_t>>>> cases = {
      {"bij,bjk->bik", {{3, 4, 5}, {3, 5, 2}}},
      {"...ii->...i", {{2, 3, 4, 4}}},
      {"ij->", {{3, 7}}},
      {"i,i", {{5}, {5}}},
      {"ii", {{4, 4}}},
      {"ba,ac", {{2, 3}, {3, 5}}},
      {"ab...,b...->a...", {{3, 2, 1, 4}, {2, 5, 4}}},
      {"Ab,bC->CA", {{2, 3}, {3, 4}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 1}, {1, 5}}},
  };
  for (const auto& [equation, shapes] : cases) {
    SCOPED_TRACE(equation);
    OpCase c{"Einsum", {}, {{"equation", equation}}, 1, 12};
    uint32_t seed = 20;
    for (const auto& dims : shapes) c.inputs.push_back(Uniform(dims, -1, 1, seed++));
    CheckAgainstReference(c);
  }
}

TEST(NnOpsTest, DetMvnAndReverseSequenceMatchTheReference) {
  CheckAgainstReference({"Det", {Uniform({2, 3, 5, 5}, -1, 1, 30)}, {}, 1, 11});
  CheckAgainstReference({"Det", {Uniform({1, 1}, -1, 1, 31)}, {}, 1, 11});
  CheckAgainstReference({"MeanVarianceNormalization", {Uniform({3, 4, 5, 2}, -2, 3, 32)}, {}, 1, 13});
  CheckAgainstReference(
      {"MeanVarianceNormalization", {Uniform({3, 4, 5}, -2, 3, 33)}, {{"axes", std::vector<int64_t>{0, -1}}}, 1, 13});
  CheckAgainstReference({"ReverseSequence",
                         {Uniform({5, 3, 2}, -1, 1, 34), Integers({3}, 0, 5, 35)},
                         {{"time_axis", int64_t{0}}, {"batch_axis", int64_t{1}}},
                         1,
                         10});
  CheckAgainstReference({"ReverseSequence",
                         {Uniform({3, 5, 2}, -1, 1, 36), Integers({3}, 1, 5, 37)},
                         {{"time_axis", int64_t{1}}, {"batch_axis", int64_t{0}}},
                         1,
                         10});
}

}  // namespace
}  // namespace kiln
