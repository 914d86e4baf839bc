// Resize-18 features libonnx 1.12 cannot import (antialias, half_pixel_symmetric,
// keep_aspect_ratio_policy, axes), built as IR and compiled into artifacts, against the
// expected outputs tests/conformance/make_resize_cases.py computes with its numpy
// reference of the specification ($KILN_RESIZE_CASES/opset18), and the independent
// reference (compiler/reference) against those and the suite's cases
// ($KILN_RESIZE_CASES/suite). TopK's ties and shapes against the reference; CumSum's axis
// read by its kernel at run time.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/common/file.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

Tensor ReadTensor(const fs::path& path) {
  auto bytes = ReadFile(path.string());
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto tensor = bytes.ok() ? ParseTensorProto(*bytes) : absl::StatusOr<Tensor>(bytes.status());
  EXPECT_TRUE(tensor.ok()) << path << ": " << tensor.status();
  return tensor.ok() ? *tensor : Tensor();
}

std::shared_ptr<Tensor> Vector1D(DType dtype, const std::vector<double>& values) {
  auto t = std::make_shared<Tensor>(dtype, std::vector<int64_t>{static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kInt64) {
      t->data_as<int64_t>()[i] = static_cast<int64_t>(values[i]);
    } else {
      t->data_as<float>()[i] = static_cast<float>(values[i]);
    }
  }
  return t;
}

// A Resize-18 node over x from attributes.txt: one "key value..." line per attribute,
// and scales, sizes and roi as constant inputs.
std::unique_ptr<Graph> ResizeGraph(std::istream& attributes, const Tensor& x) {
  auto graph = std::make_unique<Graph>();
  Value* input = graph->AddValue("X", TensorType::Static(x.dtype(), x.dims()));
  graph->AddInput(input);
  std::vector<Value*> inputs = {input, nullptr, nullptr, nullptr};
  std::map<std::string, AttrValue> attrs;
  std::string line;
  while (std::getline(attributes, line)) {
    std::istringstream words(line);
    std::string key, word;
    words >> key;
    std::vector<std::string> values;
    while (words >> word) values.push_back(word);
    std::vector<double> numbers;
    for (const std::string& v : values) numbers.push_back(std::strtod(v.c_str(), nullptr));
    const std::map<std::string, std::pair<int, DType>> constant_inputs = {
        {"roi", {1, DType::kFloat32}}, {"scales", {2, DType::kFloat32}}, {"sizes", {3, DType::kInt64}}};
    if (auto it = constant_inputs.find(key); it != constant_inputs.end()) {
      inputs[it->second.first] = graph->AddConstant(key, Vector1D(it->second.second, numbers));
    } else if (key == "axes") {
      attrs[key] = std::vector<int64_t>(numbers.begin(), numbers.end());
    } else if (key == "antialias" || key == "exclude_outside") {
      attrs[key] = static_cast<int64_t>(numbers[0]);
    } else if (key == "cubic_coeff_a" || key == "extrapolation_value") {
      attrs[key] = numbers[0];
    } else {
      attrs[key] = values[0];
    }
  }
  Node* node = graph->AddNode("Resize", "resize", inputs, {"Y"}, 18);
  node->mutable_attrs() = attrs;
  graph->AddOutput(node->output(0));
  EXPECT_TRUE(InferTypes(*graph).ok());
  return graph;
}

double MaxError(const Tensor& got, const Tensor& want) {
  if (got.dims() != want.dims()) return 1e9;
  double worst = 0;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double w = want.data_as<float>()[i];
    worst = std::max(worst, std::fabs(got.data_as<float>()[i] - w) / (1 + std::fabs(w)));
  }
  return worst;
}

// The cases make_resize_cases.py wrote under $KILN_RESIZE_CASES/<kind>; empty when unset.
std::vector<fs::path> Cases(const char* kind) {
  std::vector<fs::path> cases;
  const char* root = std::getenv("KILN_RESIZE_CASES");
  if (root == nullptr) return cases;
  for (const auto& entry : fs::directory_iterator(fs::path(root) / kind)) cases.push_back(entry.path());
  return cases;
}

TEST(ResizeTest, Opset18CasesMatchTheSpecification) {
  if (std::getenv("KILN_RESIZE_CASES") == nullptr) GTEST_SKIP() << "KILN_RESIZE_CASES is not set (ctest sets it)";
  int cases = 0;
  for (const fs::path& dir : Cases("opset18")) {
    SCOPED_TRACE(dir.filename().string());
    const Tensor x = ReadTensor(dir / "input_0.pb");
    const Tensor want = ReadTensor(dir / "output_0.pb");
    std::ifstream attributes(dir / "attributes.txt");
    std::unique_ptr<Graph> graph = ResizeGraph(attributes, x);
    ASSERT_EQ(graph->outputs()[0]->type().StaticDims(), want.dims());
    auto reference = ReferenceRunGraph(*graph, {x});
    ASSERT_TRUE(reference.ok()) << reference.status();
    EXPECT_LT(MaxError((*reference)[0], want), 1e-5);
    for (const Tensor& got : RunArtifact(*graph, kDefaultPipeline, x, {1, 3})) EXPECT_LT(MaxError(got, want), 1e-5);
    ++cases;
  }
  EXPECT_GT(cases, 10);
}

TEST(ResizeTest, RefusesAnAntialiasedFilterWiderThanTheKernelHolds) {
  std::istringstream attributes("mode cubic\nantialias 1\nsizes 1 1 1 2\n");
  std::unique_ptr<Graph> graph = ResizeGraph(attributes, Tensor(DType::kFloat32, {1, 1, 1, 200}));
  auto artifact = GenerateFor(*graph, "host");
  ASSERT_FALSE(artifact.ok());
  EXPECT_NE(artifact.status().message().find("antialiased downscale of axis 3 from 200 to 2"), std::string::npos)
      << artifact.status();
}

// Each output of a graph run by the independent reference against the expected outputs.
void ExpectReferenceMatches(const Graph& graph, const std::vector<Tensor>& inputs, const std::vector<Tensor>& want) {
  auto got = ReferenceRunGraph(graph, inputs);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ((*got)[i].dims(), want[i].dims());
    ASSERT_EQ((*got)[i].dtype(), want[i].dtype());
    for (int64_t j = 0; j < want[i].num_elements(); ++j) {
      EXPECT_NEAR((*got)[i].GetAsDouble(j), want[i].GetAsDouble(j), 1e-5 * (1 + std::fabs(want[i].GetAsDouble(j))))
          << "output " << i << " element " << j;
    }
  }
}

TEST(ResizeTest, ReferenceMatchesTheSuite) {
  if (std::getenv("KILN_RESIZE_CASES") == nullptr) GTEST_SKIP() << "KILN_RESIZE_CASES is not set (ctest sets it)";
  int cases = 0;
  for (const fs::path& dir : Cases("suite")) {
    SCOPED_TRACE(dir.filename().string());
    auto bytes = ReadFile((dir / "model.onnx").string());
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto graph = ImportOnnxModel(*bytes, ImportOptions{});
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::vector<Tensor> want;
    for (int i = 0; fs::exists(dir / "test_data_set_0" / absl::StrCat("output_", i, ".pb")); ++i) {
      want.push_back(ReadTensor(dir / "test_data_set_0" / absl::StrCat("output_", i, ".pb")));
    }
    ExpectReferenceMatches(**graph, {ReadTensor(dir / "test_data_set_0" / "input_0.pb")}, want);
    ++cases;
  }
  EXPECT_GT(cases, 30);
}

// TopK(x, k) on axis with largest/smallest, compiled, against the reference: ties (x has
// few distinct values) must keep the lower index first.
void CheckTopK(std::vector<int64_t> dims, int64_t axis, int64_t k, int64_t largest) {
  SCOPED_TRACE(absl::StrCat("axis ", axis, " k ", k, " largest ", largest));
  Graph graph;
  Value* x = graph.AddValue("x", TensorType::Static(DType::kFloat32, dims));
  graph.AddInput(x);
  Value* kv = graph.AddConstant("k", Vector1D(DType::kInt64, {static_cast<double>(k)}));
  Node* node = graph.AddNode("TopK", "topk", {x, kv}, {"values", "indices"}, 11);
  node->mutable_attrs()["axis"] = axis;
  node->mutable_attrs()["largest"] = largest;
  graph.AddOutput(node->output(1));
  ASSERT_TRUE(InferTypes(graph).ok());
  Tensor input(DType::kFloat32, dims);
  for (int64_t i = 0; i < input.num_elements(); ++i) input.data_as<float>()[i] = static_cast<float>((i * 7919) % 5);
  auto reference = ReferenceRunGraph(graph, {input});
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const Tensor& got : RunArtifact(graph, kDefaultPipeline, input, {1, 2})) {
    ASSERT_EQ(got.dims(), (*reference)[0].dims());
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      EXPECT_EQ(got.data_as<int64_t>()[i], (*reference)[0].data_as<int64_t>()[i]) << "index " << i;
    }
  }
}

TEST(TopKTest, TiesKeepTheLowerIndexOnEveryAxis) {
  CheckTopK({3, 17, 5}, 1, 6, 1);
  CheckTopK({3, 17, 5}, 1, 17, 0);
  CheckTopK({4, 31}, -1, 1, 1);
  CheckTopK({13, 2}, 0, 13, 1);
  CheckTopK({2, 3, 11}, 2, 2, 0);
}

// CumSum with its axis a graph input: the kernel reads it, a negative one counted from the
// end, and refuses one out of range (KILN_KERR_INDEX, an error from the interpreter).
TEST(RuntimeInputsTest, CumSumReadsItsAxisAtRunTime) {
  Graph graph;
  Value* x = graph.AddValue("x", TensorType::Static(DType::kFloat32, {2, 3}));
  Value* axis = graph.AddValue("axis", TensorType::Static(DType::kInt64, {}));
  graph.AddInput(x);
  graph.AddInput(axis);
  graph.AddOutput(graph.AddNode("CumSum", "cumsum", {x, axis}, {"y"}, 14)->output(0));
  ASSERT_TRUE(InferTypes(graph).ok());
  Tensor input(DType::kFloat32, {2, 3});
  for (int64_t i = 0; i < 6; ++i) input.data_as<float>()[i] = static_cast<float>(i + 1);
  auto run = [&](int64_t a) {
    Tensor axis_value(DType::kInt64, {});
    axis_value.data_as<int64_t>()[0] = a;
    return RunGraph(graph, {input, axis_value});
  };
  const float rows[] = {1, 3, 6, 4, 9, 15}, columns[] = {1, 2, 3, 5, 7, 9};
  for (auto [a, want] : {std::pair<int64_t, const float*>{1, rows}, {-1, rows}, {0, columns}, {-2, columns}}) {
    auto y = run(a);
    ASSERT_TRUE(y.ok()) << y.status();
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ((*y)[0].data_as<float>()[i], want[i]) << "axis " << a << " at " << i;
  }
  EXPECT_FALSE(run(2).ok());
  EXPECT_FALSE(run(-3).ok());
}

}  // namespace
}  // namespace kiln
