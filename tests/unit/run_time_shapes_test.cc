// Run-time shapes: the data-dependent ops (NonZero, Compress, Unique, NonMaxSuppression,
// TopK, the window functions) compiled and run through kiln_session_run_shaped against the
// independent reference (compiler/reference/ref_dynamic.cc); and ops whose shapes follow
// from a symbolic dim, run at several sizes against the same graph compiled with those
// dims static.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/reference.h"
#include "kiln/compiler/runtime_tensor.h"

namespace kiln {
namespace {

struct OneOp {
  std::string op;
  int opset = 13;
  std::map<std::string, AttrValue> attrs;
  size_t outputs = 1;
};

// `op` over graph inputs of `input_types`, each with its data in `inputs`; constant
// operands follow as constants (nullptr: an omitted input).
std::unique_ptr<Graph> Build(const OneOp& c, const std::vector<TensorType>& input_types,
                             const std::vector<std::shared_ptr<Tensor>>& constants = {}) {
  auto g = std::make_unique<Graph>();
  std::vector<Value*> ins;
  for (size_t i = 0; i < input_types.size(); ++i) {
    ins.push_back(g->AddValue("in" + std::to_string(i), input_types[i]));
    g->AddInput(ins.back());
  }
  for (size_t i = 0; i < constants.size(); ++i) {
    ins.push_back(constants[i] ? g->AddConstant("c" + std::to_string(i), constants[i]) : nullptr);
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < c.outputs; ++i) names.push_back("y" + std::to_string(i));
  Node* node = g->AddNode(c.op, "node", ins, names, c.opset);
  node->mutable_attrs() = c.attrs;
  for (Value* out : node->outputs()) g->AddOutput(out);
  absl::Status inferred = InferTypes(*g);
  EXPECT_TRUE(inferred.ok()) << inferred;
  return g;
}

std::vector<TensorType> TypesOf(const std::vector<Tensor>& inputs) {
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) types.push_back(TensorType::Static(t.dtype(), t.dims()));
  return types;
}

void ExpectNear(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].dtype(), want[k].dtype()) << what << " output " << k;
    ASSERT_EQ(got[k].dims(), want[k].dims()) << what << " output " << k;
    for (int64_t i = 0; i < want[k].num_elements(); ++i) {
      const double g = got[k].GetAsDouble(i), w = want[k].GetAsDouble(i);
      if (std::isnan(g) && std::isnan(w)) continue;
      ASSERT_NEAR(g, w, 1e-6 * (1 + std::fabs(w))) << what << " output " << k << " element " << i;
    }
  }
}

// The graph's inputs are all data (none a constant): the artifact against the reference.
void CheckAgainstReference(const OneOp& c, const std::vector<Tensor>& inputs) {
  std::unique_ptr<Graph> g = Build(c, TypesOf(inputs));
  auto reference = ReferenceRunGraph(*g, inputs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ExpectNear(RunShapedArtifact(*g, kDefaultPipeline, inputs), *reference, c.op);
}

// A tensor of `dims` from `values` repeated (cast to `dtype`).
Tensor Filled(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values) {
  Tensor t(dtype, dims);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = values[i % values.size()];
    switch (dtype) {
      case DType::kFloat32: t.data_as<float>()[i] = static_cast<float>(v); break;
      case DType::kInt32: t.data_as<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::kInt64: t.data_as<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::kBool: t.data_as<bool>()[i] = v != 0; break;
      default: ADD_FAILURE() << "no filler for this dtype";
    }
  }
  return t;
}

TEST(RunTimeShapesTest, NonZeroCountsAtRunTime) {
  CheckAgainstReference({"NonZero"}, {Filled(DType::kFloat32, {5, 3, 7}, {0, 1.5, 0, 0, -2, 0.25, 0})});
  CheckAgainstReference({"NonZero"}, {Filled(DType::kInt32, {13}, {3, 0, 0, 7, 0})});
  CheckAgainstReference({"NonZero"}, {Filled(DType::kFloat32, {2, 3}, {0})});  // none
}

// With the deciding input a constant, the same rule gives a static shape and the node folds.
// A detector's boolean-mask selection (torchvision's SSD exports it so): GatherND(data,
// Transpose(NonZero(mask))), its tuple count known only at run time; tuples of one and of
// two entries, and none selected.
TEST(RunTimeShapesTest, GatherNDOfRunTimeIndices) {
  const Tensor data = Filled(DType::kFloat32, {4, 5, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  for (const Tensor& mask : {Filled(DType::kFloat32, {4}, {0, 1, 1, 0}), Filled(DType::kFloat32, {4, 5}, {1, 0, 0}),
                             Filled(DType::kFloat32, {4}, {0})}) {
    SCOPED_TRACE(::testing::Message() << "mask of rank " << mask.rank());
    auto g = std::make_unique<Graph>();
    Value* x = g->AddValue("data", TensorType::Static(DType::kFloat32, data.dims()));
    Value* m = g->AddValue("mask", TensorType::Static(DType::kFloat32, mask.dims()));
    g->AddInput(x);
    g->AddInput(m);
    Node* nonzero = g->AddNode("NonZero", "nonzero", {m}, {"nz"}, 13);
    Node* transpose = g->AddNode("Transpose", "transpose", {nonzero->output(0)}, {"idx"}, 13);
    transpose->mutable_attrs()["perm"] = std::vector<int64_t>{1, 0};
    Node* gather = g->AddNode("GatherND", "gather", {x, transpose->output(0)}, {"y"}, 13);
    g->AddOutput(gather->output(0));
    absl::Status inferred = InferTypes(*g);
    ASSERT_TRUE(inferred.ok()) << inferred;
    auto reference = ReferenceRunGraph(*g, {data, mask});
    ASSERT_TRUE(reference.ok()) << reference.status();
    ExpectNear(RunShapedArtifact(*g, kDefaultPipeline, {data, mask}), *reference, "GatherND");
  }
}

TEST(RunTimeShapesTest, DataDependentOpsOfConstantsAreStatic) {
  auto x = std::make_shared<Tensor>(Filled(DType::kInt64, {4, 3}, {0, 5, 0, 0, 2}));
  auto size = std::make_shared<Tensor>(Filled(DType::kInt64, {}, {9}));
  for (const auto& [op, input] :
       {std::pair<const char*, std::shared_ptr<Tensor>>{"NonZero", x}, {"HannWindow", size}}) {
    std::unique_ptr<Graph> g = Build({op, 17}, {}, {input});
    ASSERT_TRUE(g->outputs()[0]->type().IsStatic()) << op;
    auto reference = ReferenceRunGraph(*g, {});
    ASSERT_TRUE(reference.ok()) << reference.status();
    ExpectNear(RunShapedArtifact(*g, kDefaultPipeline, {}), *reference, op);
  }
}

TEST(RunTimeShapesTest, CompressAlongAnAxisAndFlattened) {
  const Tensor x = Filled(DType::kFloat32, {4, 5, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CheckAgainstReference({"Compress", 11, {{"axis", int64_t{1}}}}, {x, Filled(DType::kBool, {5}, {1, 0, 0, 1, 1})});
  CheckAgainstReference({"Compress", 11, {{"axis", int64_t{-1}}}}, {x, Filled(DType::kBool, {2}, {0, 1})});
  CheckAgainstReference({"Compress", 11, {{"axis", int64_t{0}}}}, {x, Filled(DType::kBool, {4}, {0})});
  CheckAgainstReference({"Compress", 11}, {x, Filled(DType::kBool, {37}, {1, 0, 1, 1, 0, 0, 1})});
}

TEST(RunTimeShapesTest, UniqueSortedAndInOrderOfOccurrence) {
  const Tensor x = Filled(DType::kFloat32, {6, 5, 3}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4});
  const Tensor rows = Filled(DType::kInt64, {7, 3}, {1, 2, 3, -4, 1, 2, 3, 1, 2, 3, -4, 1, 2, 3, 1, 2, 3, -4, 9, 9, 9});
  for (int64_t sorted : {0, 1}) {
    CheckAgainstReference({"Unique", 11, {{"sorted", sorted}}, 4}, {x});
    CheckAgainstReference({"Unique", 11, {{"sorted", sorted}, {"axis", int64_t{0}}}, 4}, {rows});
    CheckAgainstReference({"Unique", 11, {{"sorted", sorted}, {"axis", int64_t{-1}}}, 3}, {x});
    CheckAgainstReference({"Unique", 11, {{"sorted", sorted}, {"axis", int64_t{1}}}, 1}, {x});
  }
}

TEST(RunTimeShapesTest, NonMaxSuppressionKeepsWhatTheReferenceKeeps) {
  // 2 batches of 11 boxes on a jittered grid, overlapping their neighbours, 3 classes.
  Tensor boxes(DType::kFloat32, {2, 11, 4});
  const std::shared_ptr<Tensor> jitter = Random({2, 11, 4}, 5, 0.15f);
  for (int64_t i = 0; i < 2 * 11; ++i) {
    const float x = static_cast<float>(i % 4) * 0.6f, y = static_cast<float>(i % 11 / 4) * 0.6f;
    const float corners[4] = {y, x, y + 1.0f, x + 1.0f};
    for (int k = 0; k < 4; ++k) boxes.data_as<float>()[i * 4 + k] = corners[k] + jitter->data_as<float>()[i * 4 + k];
  }
  Tensor scores(DType::kFloat32, {2, 3, 11});
  const std::shared_ptr<Tensor> noise = Random({2, 3, 11}, 9, 1.0f);
  for (int64_t i = 0; i < scores.num_elements(); ++i)
    scores.data_as<float>()[i] = std::fabs(noise->data_as<float>()[i]);
  for (int64_t center : {0, 1}) {
    for (double iou : {0.0, 0.3, 0.7}) {
      CheckAgainstReference({"NonMaxSuppression", 11, {{"center_point_box", center}}},
                            {boxes, scores, Filled(DType::kInt64, {1}, {4}), Filled(DType::kFloat32, {1}, {iou}),
                             Filled(DType::kFloat32, {1}, {0.4})});
    }
  }
  CheckAgainstReference({"NonMaxSuppression", 11}, {boxes, scores, Filled(DType::kInt64, {1}, {20})});
}

// SSDlite batches its 90 classes' 300 candidates into one class of 27000 boxes: more than
// the 16384 the kernel once took. Boxes on a 150 x 180 grid, each overlapping its right
// neighbour; the best 6 kept.
TEST(RunTimeShapesTest, NonMaxSuppressionOfADetectorsCandidates) {
  const int64_t count = 27000;
  Tensor boxes(DType::kFloat32, {1, count, 4});
  Tensor scores(DType::kFloat32, {1, 1, count});
  for (int64_t i = 0; i < count; ++i) {
    const float x = static_cast<float>(i % 180) * 0.5f, y = static_cast<float>(i / 180) * 2.0f;
    const float corners[4] = {y, x, y + 1.0f, x + 1.0f};
    for (int k = 0; k < 4; ++k) boxes.data_as<float>()[i * 4 + k] = corners[k];
    scores.data_as<float>()[i] = static_cast<float>((i * 7919) % count) / static_cast<float>(count);
  }
  CheckAgainstReference({"NonMaxSuppression", 11},
                        {boxes, scores, Filled(DType::kInt64, {1}, {6}), Filled(DType::kFloat32, {1}, {0.2})});
}

// In a graph with run-time shapes, an elementwise chain whose shapes are all known (a
// detector's backbone before its NMS) fuses and compiles to the static glue's generated
// loop: x * sigmoid(x) + b with b broadcast over rows, 3 x 37 x 129 (rows longer than one
// vector, a ragged tail), then NonZero of it: both outputs against the reference.
TEST(RunTimeShapesTest, StaticElementwiseChainInARunTimeShapedGraph) {
  const std::shared_ptr<Tensor> x = Random({3, 37, 129}, 31, 2.0f);
  const std::shared_ptr<Tensor> b = Random({129}, 37, 1.0f);
  auto g = std::make_unique<Graph>();
  Value* in = g->AddValue("x", TensorType::Static(DType::kFloat32, x->dims()));
  Value* bias = g->AddValue("b", TensorType::Static(DType::kFloat32, b->dims()));
  g->AddInput(in);
  g->AddInput(bias);
  Node* sigmoid = g->AddNode("Sigmoid", "sigmoid", {in}, {"s"}, 13);
  Node* mul = g->AddNode("Mul", "mul", {in, sigmoid->output(0)}, {"m"}, 13);
  Node* add = g->AddNode("Add", "add", {mul->output(0), bias}, {"y"}, 13);
  Node* relu = g->AddNode("Relu", "relu", {add->output(0)}, {"r"}, 13);
  Node* nonzero = g->AddNode("NonZero", "nonzero", {relu->output(0)}, {"nz"}, 13);
  g->AddOutput(add->output(0));
  g->AddOutput(nonzero->output(0));
  absl::Status inferred = InferTypes(*g);
  ASSERT_TRUE(inferred.ok()) << inferred;
  const std::vector<Tensor> inputs = {*x, *b};
  auto reference = ReferenceRunGraph(*g, inputs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ExpectNear(RunShapedArtifact(*g, kDefaultPipeline, inputs), *reference, "fused chain and NonZero");
}

// Many boxes kept (the kernel then checks each candidate only against kept boxes whose
// ymin lies within the tallest box's height of its own): 3000 boxes of random place and
// size in four bands offset apart, as torchvision's batched NMS offsets its classes, each
// class's boxes crowded so that some are suppressed. Then one tall box, which widens every
// search, and one NaN box, which turns the ordered search off: the same selection as the
// reference's in each case.
TEST(RunTimeShapesTest, NonMaxSuppressionOfManyKeptBoxes) {
  const int64_t count = 3000;
  const std::shared_ptr<Tensor> place = Random({count, 4}, 17, 1.0f);
  const std::shared_ptr<Tensor> noise = Random({count}, 23, 1.0f);
  Tensor boxes(DType::kFloat32, {1, count, 4});
  Tensor scores(DType::kFloat32, {1, 1, count});
  for (int64_t i = 0; i < count; ++i) {
    const float* r = place->data_as<float>() + 4 * i;
    const float band = static_cast<float>(i % 4) * 1000.0f;
    const float y = band + std::fabs(r[0]) * 60.0f, x = band + std::fabs(r[1]) * 60.0f;
    const float h = 2.0f + std::fabs(r[2]) * 8.0f, w = 2.0f + std::fabs(r[3]) * 8.0f;
    const float corners[4] = {y, x, y + h, x + w};
    for (int k = 0; k < 4; ++k) boxes.data_as<float>()[i * 4 + k] = corners[k];
    scores.data_as<float>()[i] = std::fabs(noise->data_as<float>()[i]);
  }
  auto check = [&](const Tensor& b) {
    CheckAgainstReference({"NonMaxSuppression", 11},
                          {b, scores, Filled(DType::kInt64, {1}, {count}), Filled(DType::kFloat32, {1}, {0.3})});
  };
  check(boxes);
  Tensor tall = boxes;
  const float tall_box[4] = {-50.0f, 10.0f, 3000.0f, 20.0f};
  for (int k = 0; k < 4; ++k) tall.data_as<float>()[4 * 7 + k] = tall_box[k];
  check(tall);
  Tensor nan = boxes;
  nan.data_as<float>()[4 * 11] = std::nanf("");
  check(nan);
}

// RoiAlign over a run-time count of rois (Faster R-CNN's proposals after NMS): rois and
// batch_indices of symbolic length, against the reference; none at all too.
TEST(RunTimeShapesTest, RoiAlignOfRunTimeRois) {
  TensorType rois_type = TensorType::Static(DType::kFloat32, {1, 4});
  TensorType batch_type = TensorType::Static(DType::kInt64, {1});
  rois_type.shape[0] = batch_type.shape[0] = Dim::Symbolic("r");
  const Tensor x = *Random({2, 3, 10, 12}, 4, 1.0f);
  for (int64_t r : {5, 0}) {
    SCOPED_TRACE(::testing::Message() << r << " rois");
    Tensor rois(DType::kFloat32, {r, 4});
    for (int64_t i = 0; i < r; ++i) {
      const float corners[4] = {0.5f * static_cast<float>(i), 1.0f, 4.0f + static_cast<float>(i), 9.5f};
      for (int k = 0; k < 4; ++k) rois.data_as<float>()[i * 4 + k] = corners[k];
    }
    const Tensor batch = Filled(DType::kInt64, {r}, {0, 1, 1});
    std::unique_ptr<Graph> g = Build(
        {"RoiAlign", 16, {{"output_height", int64_t{3}}, {"output_width", int64_t{2}}, {"sampling_ratio", int64_t{2}}}},
        {TensorType::Static(DType::kFloat32, x.dims()), rois_type, batch_type});
    auto reference = ReferenceRunGraph(*g, {x, rois, batch});
    ASSERT_TRUE(reference.ok()) << reference.status();
    ExpectNear(RunShapedArtifact(*g, kDefaultPipeline, {x, rois, batch}), *reference, "RoiAlign");
  }
}

TEST(RunTimeShapesTest, TopKOfARunTimeK) {
  const Tensor x = Filled(DType::kFloat32, {3, 7, 5}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6});
  const Tensor ints = Filled(DType::kInt32, {4, 9}, {7, -2, 7, 0, 11, -2, 5});
  for (int64_t largest : {0, 1}) {
    for (int64_t k : {0, 1, 3}) {
      const Tensor k_input = Filled(DType::kInt64, {1}, {static_cast<double>(k)});
      CheckAgainstReference({"TopK", 11, {{"axis", int64_t{1}}, {"largest", largest}}, 2}, {x, k_input});
      CheckAgainstReference({"TopK", 11, {{"largest", largest}}, 2}, {x, k_input});
      CheckAgainstReference({"TopK", 11, {{"axis", int64_t{0}}, {"largest", largest}}, 2}, {ints, k_input});
    }
  }
  CheckAgainstReference({"TopK", 11, {}, 2}, {ints, Filled(DType::kInt64, {1}, {9})});
}

TEST(RunTimeShapesTest, WindowFunctionsOfARunTimeSize) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    for (int64_t periodic : {0, 1}) {
      for (int64_t dtype : {1, 11}) {
        for (int64_t size : {2, 7, 16}) {
          CheckAgainstReference({op, 17, {{"periodic", periodic}, {"output_datatype", dtype}}},
                                {Filled(DType::kInt64, {}, {static_cast<double>(size)})});
        }
      }
    }
  }
}

// x [n, 6, 5] with n symbolic, run at several n, against x with n static; `constants`
// are the op's other operands.
void CheckSymbolicBatch(const OneOp& c, const std::vector<std::shared_ptr<Tensor>>& constants = {}) {
  TensorType symbolic = TensorType::Static(DType::kFloat32, {1, 6, 5});
  symbolic.shape[0] = Dim::Symbolic("n");
  std::unique_ptr<Graph> dynamic = Build(c, {symbolic}, constants);
  for (int64_t n : {1, 7}) {
    const Tensor x = *Random({n, 6, 5}, static_cast<uint32_t>(n), 1.0f);
    std::unique_ptr<Graph> fixed = Build(c, {TensorType::Static(DType::kFloat32, {n, 6, 5})}, constants);
    const std::vector<std::vector<Tensor>> want = RunArtifactOutputs(*fixed, kDefaultPipeline, {x}, {1});
    ASSERT_EQ(want.size(), 1u);
    std::unique_ptr<Graph> g = Build(c, {symbolic}, constants);
    ExpectNear(RunShapedArtifact(*g, kDefaultPipeline, {x}), want[0], c.op + " at n = " + std::to_string(n));
  }
}

std::shared_ptr<Tensor> Ints(std::vector<int64_t> values) {
  auto t = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t->data_as<int64_t>());
  return t;
}

TEST(RunTimeShapesTest, ReductionsOverASymbolicDim) {
  CheckSymbolicBatch({"ReduceMean", 13, {{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{0}}}});
  CheckSymbolicBatch({"ReduceSum", 13, {{"keepdims", int64_t{1}}}}, {Ints({-1})});
  CheckSymbolicBatch({"ReduceMax", 13});
  CheckSymbolicBatch({"ArgMax", 13, {{"axis", int64_t{0}}, {"keepdims", int64_t{0}}}});
  CheckSymbolicBatch({"ArgMin", 13, {{"axis", int64_t{-1}}}});
}

// [n, 6, 5] times a constant [5, 3]: one [n * 6, 5] product whatever n is at run time.
TEST(RunTimeShapesTest, MatMulOfASymbolicBatchByOneMatrix) {
  CheckSymbolicBatch({"MatMul", 13}, {Random({5, 3}, 11, 0.5f)});
}

TEST(RunTimeShapesTest, MovementOverASymbolicDim) {
  CheckSymbolicBatch({"Slice"}, {Ints({-1, 4}), Ints({-100, 0}), Ints({0, 2}), Ints({-1, -2})});
  CheckSymbolicBatch({"Slice"}, {Ints({1}), Ints({5}), Ints({1})});
  CheckSymbolicBatch({"Pad", 13, {{"mode", std::string("reflect")}}}, {Ints({1, 2, 0, 0, 1, 3})});
  CheckSymbolicBatch({"Expand"}, {Ints({2, 1, 1, 5})});
  CheckSymbolicBatch({"Tile"}, {Ints({2, 1, 3})});
  CheckSymbolicBatch({"Split", 13, {{"axis", int64_t{2}}}, 2}, {Ints({2, 3})});
  CheckSymbolicBatch({"Unsqueeze"}, {Ints({-1, 0})});
  CheckSymbolicBatch({"Transpose", 13, {{"perm", std::vector<int64_t>{2, 0, 1}}}});
  CheckSymbolicBatch({"Gather", 13, {{"axis", int64_t{2}}}}, {Ints({4, 0, -1, 4})});
  auto indices = std::make_shared<Tensor>(Filled(DType::kInt64, {1, 6, 2}, {0, 4, 2, 1, 3}));
  CheckSymbolicBatch({"GatherElements", 13, {{"axis", int64_t{2}}}}, {indices});
  CheckSymbolicBatch({"ScatterElements", 13, {{"axis", int64_t{2}}}}, {indices, Random({1, 6, 2}, 3, 1.0f)});
  CheckSymbolicBatch({"CumSum", 14, {{"reverse", int64_t{1}}}}, {Ints({1})});
  CheckSymbolicBatch({"Trilu", 14}, {std::make_shared<Tensor>(Filled(DType::kInt64, {}, {1}))});
}

TEST(RunTimeShapesTest, ElementwiseAndShapeOfASymbolicDim) {
  CheckSymbolicBatch({"Pow"}, {std::make_shared<Tensor>(Filled(DType::kInt32, {5}, {0, 1, 2, 3, 2}))});
  CheckSymbolicBatch({"Softmax", 13, {{"axis", int64_t{0}}}});
  CheckSymbolicBatch({"Hardmax", 13, {{"axis", int64_t{1}}}});
  CheckSymbolicBatch({"Size"});
  CheckSymbolicBatch({"Shape", 15, {{"start", int64_t{-3}}}});
}

TEST(RunTimeShapesTest, ResizeByRunTimeScalesAndSizes) {
  const Tensor x = Filled(DType::kFloat32, {1, 2, 3, 5}, {0.5, -1, 2, 3.25, 0, 7, -4});
  const Tensor up = Filled(DType::kFloat32, {4}, {1, 1, 2.5, 0.6});
  CheckAgainstReference({"Resize", 10, {{"mode", std::string("linear")}}}, {x, up});
  CheckAgainstReference({"Upsample", 9, {{"mode", std::string("nearest")}}},
                        {x, Filled(DType::kFloat32, {4}, {1, 2, 2, 3})});
  auto scales = std::make_shared<Tensor>(Filled(DType::kFloat32, {3}, {1, 2.5, 0.6}));
  CheckSymbolicBatch({"Resize", 13, {{"mode", std::string("cubic")}}}, {nullptr, scales});
  CheckSymbolicBatch({"Resize", 13}, {nullptr, nullptr, Ints({1, 4, 11})});
}

// The symbolic memory plan: intermediate buffers whose lifetimes do not overlap share a
// slot, each slot sized by the largest run so far. A chain MatMul, Relu, MatMul, Add
// (residual), Relu, MatMul over a batch known only at run time: its five intermediates
// need fewer slots than buffers, smaller runs fit the slots, and runs at sizes seen before
// call no allocator at all.
TEST(RunTimeShapesTest, PlannedSlotsAreReusedAndSizedPerCall) {
  auto g = std::make_unique<Graph>();
  TensorType x_type{DType::kFloat32, {Dim::Symbolic("N"), Dim::Known(256)}, true};
  Value* x = g->AddValue("x", x_type);
  g->AddInput(x);
  auto layer = [&](const std::string& name, Value* in, uint32_t seed) {
    return g->AddNode("MatMul", name, {in, g->AddConstant(name + ".w", Random({256, 256}, seed, 0.06f))}, {name}, 13)
        ->output(0);
  };
  Value* h1 = g->AddNode("Relu", "relu1", {layer("mm1", x, 1)}, {"h1"}, 13)->output(0);
  Value* sum = g->AddNode("Add", "residual", {layer("mm2", h1, 2), h1}, {"sum"}, 13)->output(0);
  Value* h2 = g->AddNode("Relu", "relu2", {sum}, {"h2"}, 13)->output(0);
  std::unique_ptr<Graph> graph = WithOutput(std::move(g), layer("mm3", h2, 3));
  kiln_module* module = CompileAndLoad(*graph, "fold-constants,cse,dce", "host");
  ASSERT_NE(module, nullptr);
  kiln_session* session = nullptr;
  kiln_session_options options{sizeof(kiln_session_options), 1};
  ASSERT_EQ(kiln_session_create(module, &options, &session), KILN_OK) << kiln_last_error();
  auto run = [&](int64_t batch) -> kiln_memory_stats {
    const Tensor input = *Random({batch, 256}, static_cast<uint32_t>(batch), 1.0f);
    kiln_tensor in = RuntimeView(input), out{};
    EXPECT_EQ(kiln_session_run_shaped(session, &in, &out), KILN_OK) << kiln_last_error();
    auto reference = ReferenceRunGraph(*graph, {input});
    EXPECT_TRUE(reference.ok()) << reference.status();
    const Tensor got = FromRuntime(out);
    if (reference.ok()) {
      EXPECT_EQ(got.dims(), (*reference)[0].dims());
      for (int64_t i = 0; i < got.num_elements() && got.dims() == (*reference)[0].dims(); ++i) {
        const double w = (*reference)[0].GetAsDouble(i);  // three 256-term dot products deep
        EXPECT_NEAR(got.GetAsDouble(i), w, 1e-4 * (1 + std::fabs(w))) << "batch " << batch << " element " << i;
      }
    }
    kiln_memory_stats stats{sizeof(kiln_memory_stats), 0, 0, 0};
    EXPECT_EQ(kiln_session_memory_stats(session, &stats), KILN_OK);
    return stats;
  };
  const kiln_memory_stats first = run(64);
  const int64_t buffer_bytes = 64 * 256 * 4;
  EXPECT_GE(first.planned_bytes, 2 * buffer_bytes);  // a residual keeps two alive at once
  EXPECT_LT(first.planned_bytes, 5 * buffer_bytes);  // the five intermediates share slots
  // Smaller runs fit the slots; the graph output's buffer comes from the pool, which may
  // make a block of a new size class once. After that, no run calls the allocator.
  EXPECT_EQ(run(3).planned_bytes, first.planned_bytes);
  const kiln_memory_stats warm = run(1);
  EXPECT_EQ(warm.planned_bytes, first.planned_bytes);
  for (int64_t batch : {64, 3, 1, 64}) {
    const kiln_memory_stats again = run(batch);
    EXPECT_EQ(again.allocations, warm.allocations) << "batch " << batch;
    EXPECT_EQ(again.planned_bytes, first.planned_bytes) << "batch " << batch;
  }
  EXPECT_GT(run(100).planned_bytes, first.planned_bytes);  // a larger run grows the slots
  kiln_session_destroy(session);
  kiln_module_unload(module);
}

// A run-time-shape graph of 603 nodes compiles to ten part functions over two modules:
// values cross parts through the entry's frame (the input, read in the first and last
// parts; an early Tanh, read by the last node; each part's last result, read by the next
// part's first node), with dims known only at run time.
TEST(RunTimeShapesTest, LongGraphsRunInPartsAcrossModules) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType{DType::kFloat32, {Dim::Symbolic("N"), Dim::Known(16)}, true});
  g->AddInput(x);
  Value* early = g->AddNode("Tanh", "early", {x}, {"early"}, 13)->output(0);
  Value* h = early;
  // Elementwise steps (exact in both runtimes, so errors do not compound over 300 layers),
  // a MatMul every 50th.
  for (int i = 0; i < 300; ++i) {
    const std::string name = "step" + std::to_string(i);
    if (i % 50 == 0) {
      h = g->AddNode("MatMul", name, {h, g->AddConstant(name + ".w", Random({16, 16}, 100 + i, 0.3f))}, {name}, 13)
              ->output(0);
    } else {
      h = g->AddNode("Add", name, {h, g->AddConstant(name + ".c", Random({16}, 100 + i, 0.05f))}, {name}, 13)
              ->output(0);
    }
    h = g->AddNode("Relu", name + ".relu", {h}, {name + ".relu"}, 13)->output(0);
  }
  Value* sum = g->AddNode("Add", "last", {h, early}, {"sum"}, 13)->output(0);
  Value* y = g->AddNode("Add", "plus_x", {sum, x}, {"y"}, 13)->output(0);
  std::unique_ptr<Graph> graph = WithOutput(std::move(g), y);
  ASSERT_GT(graph->num_nodes(), 9 * 64u);
  for (int64_t batch : {5, 1, 33}) {
    SCOPED_TRACE(batch);
    const Tensor input = *Random({batch, 16}, static_cast<uint32_t>(batch), 1.0f);
    auto reference = ReferenceRunGraph(*graph, {input});
    ASSERT_TRUE(reference.ok()) << reference.status();
    EXPECT_GT(std::fabs((*reference)[0].GetAsDouble(0)), 1e-3);
    const std::vector<Tensor> got = RunShapedArtifact(*graph, "fold-constants,cse,dce", {input});
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].dims(), (*reference)[0].dims());
    for (int64_t i = 0; i < got[0].num_elements(); ++i) {
      const double w = (*reference)[0].GetAsDouble(i);
      ASSERT_NEAR(got[0].GetAsDouble(i), w, 1e-5 * (1 + std::fabs(w))) << "element " << i;
    }
  }
}

// A block-sparse weight (what --prune-weights leaves) under rows known only at run time:
// the sparse kernel takes its rows from its parameters, so the dense kernel runs it there.
TEST(RunTimeShapesTest, BlockSparseWeightWithRunTimeRows) {
  auto w = Random({64, 32}, 17, 0.3f);
  for (int64_t k = 0; k < 64; ++k) {
    for (int64_t j = 0; j < 32; ++j) {
      if (k % 10 != 3 || j >= 16) w->data_as<float>()[k * 32 + j] = 0.f;  // 7 of 128 blocks kept
    }
  }
  for (int64_t n : {1, 7, 40}) {
    auto g = std::make_unique<Graph>();
    TensorType x_type{DType::kFloat32, {Dim::Symbolic("n"), Dim::Known(64)}, true};
    Value* x = g->AddValue("x", x_type);
    g->AddInput(x);
    Value* y = g->AddNode("MatMul", "mm", {x, g->AddConstant("w", w)}, {"y"}, 13)->output(0);
    std::unique_ptr<Graph> graph = WithOutput(std::move(g), y);
    const Tensor input = *Random({n, 64}, static_cast<uint32_t>(n), 1.0f);
    auto reference = ReferenceRunGraph(*graph, {input});
    ASSERT_TRUE(reference.ok()) << reference.status();
    ExpectNear(RunShapedArtifact(*graph, kDefaultPipeline, {input}), *reference, "n = " + std::to_string(n));
  }
}

// The thread pool hands out chunks to whoever claims them first: any thread count gives the
// reference's results, also with more threads than cores (workers the OS has not scheduled
// when a region starts, stale workers waking during the next region), over many runs.
TEST(RuntimeTest, ThreadCountsAgreeOversubscribed) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {96, 128}));
  g->AddInput(x);
  Value* h = x;
  for (uint32_t i = 0; i < 6; ++i) {
    const std::string name = "mm" + std::to_string(i);
    h = g->AddNode("MatMul", name, {h, g->AddConstant(name + ".w", Random({128, 128}, i + 1, 0.09f))}, {name}, 13)
            ->output(0);
    h = g->AddNode("Relu", "relu" + std::to_string(i), {h}, {"r" + std::to_string(i)}, 13)->output(0);
  }
  std::unique_ptr<Graph> graph = WithOutput(std::move(g), h);
  const Tensor input = *Random({96, 128}, 5, 1.0f);
  auto reference = ReferenceRunGraph(*graph, {input});  // before the passes rewrite the graph
  ASSERT_TRUE(reference.ok()) << reference.status();
  kiln_module* module = CompileAndLoad(*graph, "fold-constants,fuse", "host");
  ASSERT_NE(module, nullptr);
  for (int32_t threads : {1, 2, 3, 8}) {
    kiln_session* session = nullptr;
    kiln_session_options options{sizeof(kiln_session_options), threads};
    ASSERT_EQ(kiln_session_create(module, &options, &session), KILN_OK) << kiln_last_error();
    for (int run = 0; run < (threads == 8 ? 200 : 20); ++run) {
      kiln_tensor in = RuntimeView(input), out{};
      ASSERT_EQ(kiln_session_run_shaped(session, &in, &out), KILN_OK) << kiln_last_error();
      const Tensor got = FromRuntime(out);
      ASSERT_EQ(got.dims(), (*reference)[0].dims());
      double worst = 0;
      for (int64_t i = 0; i < got.num_elements(); ++i) {
        const double w = (*reference)[0].GetAsDouble(i);
        worst = std::max(worst, std::fabs(got.GetAsDouble(i) - w) / (1 + std::fabs(w)));
      }
      ASSERT_LT(worst, 1e-4) << threads << " threads, run " << run;
    }
    kiln_session_destroy(session);
  }
  kiln_module_unload(module);
}

}  // namespace
}  // namespace kiln
