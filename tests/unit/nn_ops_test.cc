// The losses, sampling, spatial (Col2Im, DeformConv, ...) and linear-algebra ops, MeanVarianceNormalization,
// ReverseSequence and training-mode Dropout on odd shapes (primes, 1, broadcast '...' dims): the interpreter's kernels
// and a compiled artifact against the independent reference (compiler/reference). Then what the node tests leave out:
// bfloat16 NaN, MaxPool's column-major indices beyond 2-D, training-mode BatchNormalization through the default
// pipeline.
#include <cmath>
#include <cstring>
#include <random>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/pipeline.h"
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
  const std::vector<Tensor> artifact = RunArtifact(*g, "", *c.inputs[0], {1, 3});
  ASSERT_EQ(artifact.size(), 2u);
  for (const Tensor& t : artifact) ExpectClose(t, (*want)[0], c.op + " artifact");
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
    // Logits far past exp's range: the log-softmax must shift by the maximum.
    CheckAgainstReference({"SoftmaxCrossEntropyLoss",
                           {Uniform({4, 6}, -900, 900, 15), Integers({4}, 0, 5, 16)},
                           {{"reduction", std::string(reduction)}},
                           2});
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
    // 17 x 16 bins of 2 x 2 samples: more than the kernel tabulates once per ROI (1024).
    CheckAgainstReference({"RoiAlign",
                           {Uniform({2, 3, 11, 9}, -1, 1, 15), rois, Integers({4}, 0, 1, 16)},
                           {{"mode", std::string(mode)},
                            {"output_height", int64_t{17}},
                            {"output_width", int64_t{16}},
                            {"sampling_ratio", int64_t{2}}}});
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
  auto constant_groups = Uniform({2, 3, 4}, -2, 3, 38);  // axis 1 then holds a constant value per group
  for (int64_t i = 0; i < 24; ++i) constant_groups->data_as<float>()[i] = 0.1f * static_cast<float>(i / 12 * 4 + i % 4);
  CheckAgainstReference({"MeanVarianceNormalization", {constant_groups}, {{"axes", std::vector<int64_t>{1}}}, 1, 13});
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

TEST(NnOpsTest, TrainingDropoutMatchesTheReference) {
  auto ratio = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{});
  ratio->data_as<float>()[0] = 0.3f;
  auto training = std::make_shared<Tensor>(DType::kBool, std::vector<int64_t>{});
  training->data_as<uint8_t>()[0] = 1;
  CheckAgainstReference({"Dropout", {Uniform({3, 7, 5}, -1, 1, 40), ratio, training}, {{"seed", int64_t{7}}}, 2, 13});
  training->data_as<uint8_t>()[0] = 0;
  CheckAgainstReference({"Dropout", {Uniform({3, 7, 5}, -1, 1, 41), ratio, training}, {}, 2, 13});
}

// One node on constant inputs, evaluated by the interpreter.
std::vector<Tensor> Evaluate(const std::string& op, std::vector<std::shared_ptr<Tensor>> inputs,
                             std::map<std::string, AttrValue> attrs, int num_outputs, int opset) {
  Graph g;
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) values.push_back(g.AddConstant("in" + std::to_string(i), inputs[i]));
  std::vector<std::string> outputs;
  for (int i = 0; i < num_outputs; ++i) outputs.push_back("y" + std::to_string(i));
  Node* node = g.AddNode(op, "node", values, outputs, opset);
  node->mutable_attrs() = std::move(attrs);
  for (Value* out : node->outputs()) g.AddOutput(out);
  EXPECT_TRUE(InferTypes(g).ok());
  std::vector<const Tensor*> args;
  for (const auto& t : inputs) args.push_back(t.get());
  absl::StatusOr<std::vector<Tensor>> results = EvaluateNode(*g.nodes()[0], args);
  EXPECT_TRUE(results.ok()) << results.status().message();
  return results.ok() ? *results : std::vector<Tensor>{};
}

// Narrowing to bfloat16 rounds to nearest even (the specification; ONNX 1.12's node tests
// truncated, tests/conformance/deviations.txt), keeps a NaN quiet and overflows to infinity.
TEST(NnOpsTest, CastToBfloat16RoundsToNearestEvenAndKeepsNaNQuiet) {
  constexpr int kCount = 8;
  auto x = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{kCount});
  const uint32_t bits[kCount] = {0x3f800000u, 0x3f80ffffu, 0x3f808000u, 0x3f818000u,
                                 0xbf7f0001u, 0x7f800001u, 0xff800000u, 0x7f7fffffu};
  std::memcpy(x->data(), bits, sizeof(bits));
  const std::vector<Tensor> y = Evaluate("Cast", {x}, {{"to", int64_t{16}}}, 1, 13);
  ASSERT_EQ(y.size(), 1u);
  // 1.0; up; a tie to the even 0x3f80; a tie to the even 0x3f82; down; NaN; -inf; to +inf.
  const uint16_t want[kCount] = {0x3f80, 0x3f81, 0x3f80, 0x3f82, 0xbf7f, 0x7fc0, 0xff80, 0x7f80};
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(y[0].data_as<uint16_t>()[i], want[i]) << i;
  const std::vector<Tensor> back = Evaluate("Cast", {std::make_shared<Tensor>(y[0])}, {{"to", int64_t{1}}}, 1, 13);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].data_as<float>()[0], 1.0f);
  EXPECT_TRUE(std::isnan(back[0].data_as<float>()[5]));
}

// Narrowing to float16 below its normal range: multiples of 2^-24, rounded to nearest even
// (the conversion once shifted one place too far and halved every subnormal).
TEST(NnOpsTest, CastToFloat16RoundsSubnormalsToNearestEven) {
  constexpr int kCount = 6;
  auto x = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{kCount});
  // 2^-24; 2^-25 (a tie to 0); just above 2^-25; 1e-5; 6e-5 (below 2^-14); -3 * 2^-24.
  const float values[kCount] = {5.9604644775390625e-08f,  2.98023223876953125e-08f, 3.0e-08f, 1e-5f, 6e-5f,
                                -1.78813934326171875e-07f};
  std::memcpy(x->data(), values, sizeof(values));
  const std::vector<Tensor> y = Evaluate("Cast", {x}, {{"to", int64_t{10}}}, 1, 13);
  ASSERT_EQ(y.size(), 1u);
  const uint16_t want[kCount] = {0x0001, 0x0000, 0x0001, 0x00a8, 0x03ef, 0x8003};
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(y[0].data_as<uint16_t>()[i], want[i]) << i;
}

// MaxPool's Indices with storage_order 1 over 1-D and 3-D windows: each output's argmax in
// its window, the spatial position numbered column-major (the first spatial dim fastest).
TEST(NnOpsTest, MaxPoolColumnMajorIndicesInEveryRank) {
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{2, 3, 7}, std::vector<int64_t>{1, 2, 5, 4, 3}}) {
    const size_t rank = dims.size() - 2;
    auto x = Uniform(dims, -1, 1, 50);
    const std::vector<Tensor> y = Evaluate("MaxPool", {x},
                                           {{"kernel_shape", std::vector<int64_t>(rank, 2)},
                                            {"strides", std::vector<int64_t>(rank, 1)},
                                            {"storage_order", int64_t{1}}},
                                           2, 12);
    ASSERT_EQ(y.size(), 2u);
    const std::vector<int64_t> in(dims.begin() + 2, dims.end()), out(y[0].dims().begin() + 2, y[0].dims().end());
    int64_t in_size = 1, out_size = 1;
    for (size_t d = 0; d < rank; ++d) {
      in_size *= in[d];
      out_size *= out[d];
    }
    for (int64_t plane = 0; plane < dims[0] * dims[1]; ++plane) {
      for (int64_t o = 0; o < out_size; ++o) {
        std::vector<int64_t> pos(rank);  // row-major position of output o
        for (int64_t r = o, d = static_cast<int64_t>(rank) - 1; d >= 0; r /= out[d], --d) pos[d] = r % out[d];
        float best = -INFINITY;
        int64_t best_col = 0;
        for (int64_t k = 0; k < (int64_t{1} << rank); ++k) {  // the 2 x ... x 2 window
          int64_t row = 0, col = 0, stride = 1;
          for (size_t d = 0; d < rank; ++d) {
            const int64_t i = pos[d] + ((k >> d) & 1);
            row = row * in[d] + i;
            col += i * stride;
            stride *= in[d];
          }
          const float v = x->data_as<float>()[plane * in_size + row];
          if (v > best) {
            best = v;
            best_col = col;
          }
        }
        EXPECT_EQ(y[1].data_as<int64_t>()[plane * out_size + o], plane * in_size + best_col);
      }
    }
  }
}

// A constant int64 tensor of `values`.
std::shared_ptr<Tensor> Int64s(const std::vector<int64_t>& values) {
  auto t = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t->data_as<int64_t>());
  return t;
}

TEST(NnOpsTest, LpPoolAndLpNormalizationMatchTheReferenceOnOddShapes) {
  for (int64_t p : {1, 2, 3}) {
    SCOPED_TRACE(p);
    CheckAgainstReference({"GlobalLpPool", {Uniform({2, 3, 7, 1}, -2, 2, 70)}, {{"p", p}}, 1, 17});
    CheckAgainstReference({"GlobalLpPool", {Uniform({1, 1, 1, 1}, -2, 2, 71)}, {{"p", p}}, 1, 17});
    CheckAgainstReference({"GlobalLpPool", {Uniform({3, 5, 11}, -2, 2, 72)}, {{"p", p}}, 1, 17});
  }
  for (int64_t p : {1, 2}) {
    SCOPED_TRACE(p);
    CheckAgainstReference(
        {"LpNormalization", {Uniform({7, 1, 5}, -2, 2, 73)}, {{"p", p}, {"axis", int64_t{1}}}, 1, 17});
    CheckAgainstReference({"LpNormalization", {Uniform({13}, -2, 2, 74)}, {{"p", p}, {"axis", int64_t{0}}}, 1, 17});
    CheckAgainstReference(
        {"LpNormalization", {Uniform({2, 3, 5, 7}, -2, 2, 75)}, {{"p", p}, {"axis", int64_t{-2}}}, 1, 17});
  }
}

TEST(NnOpsTest, MaxRoiPoolMatchesTheReference) {
  auto rois = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{4, 5});
  const float boxes[20] = {0, 0, 0, 6, 10, 1, 1.4f, 2.6f, 6, 5, 1, 3, 7, 3.5f, 7.2f, 0, -2, -3, 12, 13};
  std::copy(boxes, boxes + 20, rois->data_as<float>());
  for (double scale : {1.0, 0.5}) {
    SCOPED_TRACE(scale);
    CheckAgainstReference({"MaxRoiPool",
                           {Uniform({2, 3, 11, 7}, -1, 1, 76), rois},
                           {{"pooled_shape", std::vector<int64_t>{3, 2}}, {"spatial_scale", scale}},
                           1,
                           17});
  }
}

TEST(NnOpsTest, Col2ImMatchesTheReferenceOnOddShapes) {
  // 2-D: image 7 x 5, block 2 x 3, strides 2, 1, pads (1, 0) (0, 2), dilations 1, 2: the
  // blocks lie on a 4 x 3 grid.
  CheckAgainstReference({"Col2Im",
                         {Uniform({2, 3 * 6, 12}, -1, 1, 77), Int64s({7, 5}), Int64s({2, 3})},
                         {{"strides", std::vector<int64_t>{2, 1}},
                          {"pads", std::vector<int64_t>{1, 0, 0, 2}},
                          {"dilations", std::vector<int64_t>{1, 2}}},
                         1,
                         18});
  CheckAgainstReference({"Col2Im", {Uniform({1, 1, 1}, -1, 1, 78), Int64s({1}), Int64s({1})}, {}, 1, 18});
  CheckAgainstReference(
      {"Col2Im", {Uniform({1, 2 * 4, 3 * 1 * 2}, -1, 1, 79), Int64s({4, 1, 3}), Int64s({2, 1, 2})}, {}, 1, 18});
}

TEST(NnOpsTest, AffineGridMatchesTheReference) {
  for (int64_t align : {0, 1}) {
    SCOPED_TRACE(align);
    CheckAgainstReference(
        {"AffineGrid", {Uniform({3, 2, 3}, -1, 1, 80), Int64s({3, 1, 7, 1})}, {{"align_corners", align}}, 1, 20});
    CheckAgainstReference(
        {"AffineGrid", {Uniform({1, 3, 4}, -1, 1, 81), Int64s({1, 2, 1, 5, 3})}, {{"align_corners", align}}, 1, 20});
  }
}

TEST(NnOpsTest, DeformConvMatchesTheReference) {
  // X [1, 3, 7, 5], W [6, 1, 3, 2] in 3 groups, pads 1, strides 2, 1: Y [1, 6, 4, 6].
  CheckAgainstReference(
      {"DeformConv",
       {Uniform({1, 3, 7, 5}, -1, 1, 82), Uniform({6, 1, 3, 2}, -1, 1, 83), Uniform({1, 3 * 6 * 2, 4, 6}, -2, 2, 84),
        Uniform({6}, -1, 1, 85), Uniform({1, 3 * 6, 4, 6}, 0, 1, 86)},
       {{"group", int64_t{3}},
        {"offset_group", int64_t{3}},
        {"strides", std::vector<int64_t>{2, 1}},
        {"pads", std::vector<int64_t>{1, 1, 1, 1}}},
       1,
       19});
  CheckAgainstReference(
      {"DeformConv",
       {Uniform({2, 1, 1, 1}, -1, 1, 87), Uniform({1, 1, 1, 1}, -1, 1, 88), Uniform({2, 2, 1, 1}, -1, 1, 89)},
       {},
       1,
       19});
}

// The spatial ops' type inference refuses what their kernels cannot run, saying why.
TEST(NnOpsTest, SpatialOpsRejectBadOperandsWithReasons) {
  struct Bad {
    OpCase c;
    const char* reason;
  };
  const Bad cases[] = {
      {{"LpNormalization", {Uniform({2, 3}, -1, 1, 90)}, {{"p", int64_t{3}}}, 1, 17}, "takes 1 or 2"},
      {{"Col2Im", {Uniform({1, 6, 10}, -1, 1, 91), Int64s({5, 5}), Int64s({2, 3})}, {}, 1, 18},
       "must be [N, C * 6, 12]"},
      {{"AffineGrid", {Uniform({2, 2, 3}, -1, 1, 92), Int64s({3, 1, 4, 4})}, {}, 1, 20}, "must be [N, 2, 3]"},
      {{"MaxRoiPool", {Uniform({1, 2, 5, 5}, -1, 1, 93), Uniform({3, 4}, 0, 4, 94)}, {}, 1, 17}, "[R, 5]"},
      {{"DeformConv",
        {Uniform({1, 2, 5, 5}, -1, 1, 95), Uniform({3, 2, 2, 2}, -1, 1, 96), Uniform({1, 8, 3, 3}, -1, 1, 97)},
        {},
        1,
        19},
       "offset is [1,8,3,3]; expected [1,8,4,4]"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.c.op);
    auto g = std::make_unique<Graph>();
    Value* x = g->AddValue("x", TensorType::Static(bad.c.inputs[0]->dtype(), bad.c.inputs[0]->dims()));
    g->AddInput(x);
    std::vector<Value*> inputs = {x};
    for (size_t i = 1; i < bad.c.inputs.size(); ++i) {
      inputs.push_back(g->AddConstant("in" + std::to_string(i), bad.c.inputs[i]));
    }
    Node* node = g->AddNode(bad.c.op, "node", inputs, {"y"}, bad.c.opset);
    node->mutable_attrs() = bad.c.attrs;
    if (bad.c.op == "MaxRoiPool") node->mutable_attrs()["pooled_shape"] = std::vector<int64_t>{2, 2};
    g->AddOutput(node->output(0));
    const absl::Status status = InferTypes(*g);
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find(bad.reason), std::string::npos) << status.message();
  }
}

// fold-batchnorm must leave a training-mode BatchNormalization alone: it normalizes with
// the batch's statistics, not its constant inputs.
TEST(NnOpsTest, TrainingBatchNormSurvivesTheDefaultPipeline) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {3, 5, 4, 2}));
  g->AddInput(x);
  Node* bn = g->AddNode("BatchNormalization", "bn",
                        {x, g->AddConstant("s", Uniform({5}, 0.5, 2, 60)), g->AddConstant("b", Uniform({5}, -1, 1, 61)),
                         g->AddConstant("m", Uniform({5}, -1, 1, 62)), g->AddConstant("v", Uniform({5}, 0.5, 2, 63))},
                        {"y"}, 15);
  bn->mutable_attrs()["training_mode"] = int64_t{1};
  g->AddOutput(bn->output(0));
  ASSERT_TRUE(InferTypes(*g).ok());
  auto input = Uniform({3, 5, 4, 2}, -3, 3, 64);
  std::vector<const Tensor*> args = {input.get()};
  for (size_t i = 1; i < 5; ++i) args.push_back(bn->input(i)->constant().get());
  absl::StatusOr<std::vector<Tensor>> want = EvaluateNode(*bn, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  // The batch statistics: each channel of Y has mean b and variance s^2 (eps aside).
  const std::vector<Tensor> got = RunArtifact(*g, kDefaultPipeline, *input, {1, 2});
  for (const Tensor& t : got) ExpectClose(t, (*want)[0], "training BatchNormalization");
  double mean = 0;
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t i = 0; i < 8; ++i) mean += (*want)[0].data_as<float>()[(n * 5 + 2) * 8 + i];
  }
  EXPECT_NEAR(mean / 24, args[2]->data_as<float>()[2], 1e-5);
}

}  // namespace
}  // namespace kiln
