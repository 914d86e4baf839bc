// The signal ops (DFT, STFT, MelWeightMatrix) and MaxUnpool, TfIdfVectorizer compiled and
// run against the independent reference (compiler/reference/ref_signal.cc) on odd sizes:
// once with every input a graph input (run-time shapes where inputs decide them) and once
// with the deciding inputs constants (static shapes from the same rules).
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

struct Case {
  std::string op;
  int opset = 17;
  std::map<std::string, AttrValue> attrs;
  std::vector<std::optional<Tensor>> inputs;  // nullopt: an omitted input
};

// The case's node, input i a graph input unless bit i of `constants` makes it a constant.
std::unique_ptr<Graph> Build(const Case& c, uint32_t constants, std::vector<Tensor>& graph_inputs) {
  auto g = std::make_unique<Graph>();
  std::vector<Value*> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i]) {
      ins.push_back(nullptr);
    } else if (constants & (1u << i)) {
      ins.push_back(g->AddConstant("c" + std::to_string(i), std::make_shared<Tensor>(*c.inputs[i])));
    } else {
      ins.push_back(
          g->AddValue("in" + std::to_string(i), TensorType::Static(c.inputs[i]->dtype(), c.inputs[i]->dims())));
      g->AddInput(ins.back());
      graph_inputs.push_back(*c.inputs[i]);
    }
  }
  Node* node = g->AddNode(c.op, "node", ins, {"y"}, c.opset);
  node->mutable_attrs() = c.attrs;
  g->AddOutput(node->output(0));
  absl::Status inferred = InferTypes(*g);
  EXPECT_TRUE(inferred.ok()) << c.op << ": " << inferred;
  return g;
}

void CheckAgainstReference(const Case& c, uint32_t constants) {
  const std::string what = c.op + " (constants mask " + std::to_string(constants) + ")";
  std::vector<Tensor> inputs;
  std::unique_ptr<Graph> g = Build(c, constants, inputs);
  auto want = ReferenceRunGraph(*g, inputs);
  ASSERT_TRUE(want.ok()) << what << ": " << want.status();
  const std::vector<Tensor> got = RunShapedArtifact(*g, kDefaultPipeline, inputs);
  ASSERT_EQ(got.size(), 1u) << what;
  ASSERT_EQ(got[0].dtype(), (*want)[0].dtype()) << what;
  ASSERT_EQ(got[0].dims(), (*want)[0].dims()) << what;
  for (int64_t i = 0; i < got[0].num_elements(); ++i) {
    const double g_i = got[0].GetAsDouble(i), w_i = (*want)[0].GetAsDouble(i);
    ASSERT_NEAR(g_i, w_i, 1e-4 + 1e-4 * std::fabs(w_i)) << what << " element " << i;
  }
}

// Both forms: all graph inputs, and the inputs in `deciding` constants.
void Check(const Case& c, uint32_t deciding) {
  CheckAgainstReference(c, 0);
  CheckAgainstReference(c, deciding);
}

Tensor Ramp(DType dtype, std::vector<int64_t> dims, double scale = 0.37) {
  Tensor t(dtype, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = std::sin(scale * static_cast<double>(i * i % 23)) * 3;
    if (dtype == DType::kFloat32) t.data_as<float>()[i] = static_cast<float>(v);
    if (dtype == DType::kFloat64) t.data_as<double>()[i] = v;
  }
  return t;
}

template <typename T>
Tensor Scalar(DType dtype, T value) {
  Tensor t(dtype, {});
  t.data_as<T>()[0] = value;
  return t;
}

template <typename T>
Tensor Vector(DType dtype, std::vector<T> values) {
  Tensor t(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data_as<T>()[i] = values[i];
  return t;
}

TEST(SignalTest, DftRealComplexOnesidedInverseAndLength) {
  const Tensor real = Ramp(DType::kFloat32, {2, 7, 3, 1}), complex = Ramp(DType::kFloat64, {3, 5, 2});
  for (int64_t axis : {1, 2, -2}) {
    for (int64_t onesided : {0, 1}) {
      Check({"DFT", 17, {{"axis", axis}, {"onesided", onesided}}, {real}}, 0);
      for (int64_t length : {4, 7, 9}) {
        Check({"DFT", 17, {{"axis", axis}, {"onesided", onesided}}, {real, Scalar<int64_t>(DType::kInt64, length)}},
              0b10);
      }
    }
  }
  for (int64_t inverse : {0, 1}) {
    Check({"DFT", 17, {{"axis", int64_t{1}}, {"inverse", inverse}}, {complex}}, 0);
    Check({"DFT", 17, {{"axis", int64_t{0}}, {"inverse", inverse}}, {complex, Scalar<int32_t>(DType::kInt32, 6)}},
          0b10);
  }
  // Opset 20: axis is input 2 (a constant), counted from the back when negative.
  CheckAgainstReference({"DFT", 20, {}, {complex, std::nullopt, Scalar<int64_t>(DType::kInt64, -3)}}, 0b100);
  CheckAgainstReference({"DFT", 20, {{"onesided", int64_t{1}}}, {real, Scalar<int64_t>(DType::kInt64, 5)}}, 0);
}

TEST(SignalTest, StftWindowsLengthsAndComplexSignals) {
  const Tensor real = Ramp(DType::kFloat32, {2, 37, 1}), complex = Ramp(DType::kFloat32, {1, 29, 2});
  const Tensor step = Scalar<int64_t>(DType::kInt64, 5), window = Ramp(DType::kFloat32, {8}, 0.11);
  for (int64_t onesided : {0, 1}) {
    Check({"STFT", 17, {{"onesided", onesided}}, {real, step, window}}, 0b10);
    Check({"STFT", 17, {{"onesided", onesided}}, {real, step, std::nullopt, Scalar<int64_t>(DType::kInt64, 7)}},
          0b1010);
    Check({"STFT", 17, {{"onesided", onesided}}, {real, step, window, Scalar<int64_t>(DType::kInt64, 8)}}, 0b1010);
  }
  Check({"STFT", 17, {{"onesided", int64_t{0}}}, {complex, Scalar<int32_t>(DType::kInt32, 3), window}}, 0b10);
}

TEST(SignalTest, MelWeightMatrix) {
  for (int64_t dtype : {1, 11}) {
    for (const auto& [bins, length] : {std::pair<int32_t, int32_t>{5, 31}, {8, 16}, {13, 64}}) {
      Check({"MelWeightMatrix",
             17,
             {{"output_datatype", dtype}},
             {Scalar<int32_t>(DType::kInt32, bins), Scalar<int32_t>(DType::kInt32, length),
              Scalar<int32_t>(DType::kInt32, 16000), Scalar<float>(DType::kFloat32, 100.0f),
              Scalar<float>(DType::kFloat32, 7000.0f)}},
            0b11);
    }
  }
}

TEST(SignalTest, MaxUnpoolDefaultAndLargerOutputShape) {
  const Tensor x = Ramp(DType::kFloat32, {1, 2, 3});
  // A kernel of 3, stride 2, pads 1 and 0: the unpooled length is (3 - 1) * 2 + 3 - 1 = 6.
  const Tensor indices = Vector<int64_t>(DType::kInt64, {0, 3, 5, 6, 8, 11});
  Tensor idx(DType::kInt64, {1, 2, 3});
  std::copy(indices.data_as<int64_t>(), indices.data_as<int64_t>() + 6, idx.data_as<int64_t>());
  const std::map<std::string, AttrValue> attrs = {{"kernel_shape", std::vector<int64_t>{3}},
                                                  {"strides", std::vector<int64_t>{2}},
                                                  {"pads", std::vector<int64_t>{1, 0}}};
  Check({"MaxUnpool", 11, attrs, {x, idx}}, 0);
  Check({"MaxUnpool", 11, attrs, {x, idx, Vector<int64_t>(DType::kInt64, {1, 2, 9})}}, 0b100);
}

TEST(SignalTest, TfIdfVectorizerModesAndWeights) {
  // Unigrams 2, 3, 5; bigrams (5, 6), (3, 2); trigram (2, 3, 5).
  const std::map<std::string, AttrValue> pool = {
      {"pool_int64s", std::vector<int64_t>{2, 3, 5, 5, 6, 3, 2, 2, 3, 5}},
      {"ngram_counts", std::vector<int64_t>{0, 3, 7}},
      {"ngram_indexes", std::vector<int64_t>{5, 0, 2, 1, 4, 3}},
      {"weights", std::vector<double>{0.5, 2, 1.5, 3, 0.25, 4}},
  };
  Tensor rows(DType::kInt32, {3, 11});
  const int32_t items[] = {2, 3, 5, 6, 3, 2, 7, 2, 3, 5, 5};
  for (int64_t i = 0; i < rows.num_elements(); ++i) rows.data_as<int32_t>()[i] = items[(i * 5) % 11];
  const Tensor flat = Vector<int64_t>(DType::kInt64, {3, 2, 3, 5, 6, 2, 3, 5, 6, 5, 3, 2, 2});
  for (const char* mode : {"TF", "IDF", "TFIDF"}) {
    for (int64_t skip : {0, 2}) {
      for (const auto& [low, high] : {std::pair<int64_t, int64_t>{1, 3}, {2, 3}, {1, 1}}) {
        std::map<std::string, AttrValue> attrs = pool;
        attrs["mode"] = std::string(mode);
        attrs["max_skip_count"] = skip;
        attrs["min_gram_length"] = low;
        attrs["max_gram_length"] = high;
        CheckAgainstReference({"TfIdfVectorizer", 9, attrs, {rows}}, 0);
        CheckAgainstReference({"TfIdfVectorizer", 9, attrs, {flat}}, 0);
      }
    }
  }
}

}  // namespace
}  // namespace kiln
