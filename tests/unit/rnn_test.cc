// RNN, GRU and LSTM: the rnn kernel, run by the interpreter (its plain loops) and compiled
// into artifacts (the GEMM core, fast activations), against the independent reference
// (compiler/reference/ref_rnn.cc), over directions, activations, clip, sequence lengths,
// layouts, peepholes and odd sizes.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "artifact_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

struct Case {
  std::string op;
  int64_t seq = 5, batch = 3, input = 7, hidden = 5;
  std::string direction = "forward";
  int64_t layout = 0;
  bool bias = true, seq_lens = false, initial_h = false, initial_c = false, peephole = false;
  std::map<std::string, AttrValue> attrs;
  size_t outputs = 3;  // at most the op's
  DType dtype = DType::kFloat32;
};

std::shared_ptr<Tensor> Typed(std::shared_ptr<Tensor> t, DType dtype) {
  if (dtype == DType::kFloat32) return t;
  auto d = std::make_shared<Tensor>(DType::kFloat64, t->dims());
  for (int64_t i = 0; i < t->num_elements(); ++i) d->data_as<double>()[i] = t->data_as<float>()[i];
  return d;
}

// X [seq, batch, input] (layout 1: [batch, seq, input]) is the graph's input; the rest are
// constants. Sequence lengths run from seq down (batch entry b: seq - 2b, at least 0).
std::unique_ptr<Graph> Build(const Case& c) {
  const int64_t gates = c.op == "LSTM" ? 4 : (c.op == "GRU" ? 3 : 1);
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1;
  auto g = std::make_unique<Graph>();
  const std::vector<int64_t> x_dims =
      c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input} : std::vector<int64_t>{c.batch, c.seq, c.input};
  Value* x = g->AddValue("x", TensorType::Static(c.dtype, x_dims));
  g->AddInput(x);
  uint32_t seed = 7;
  auto constant = [&](const char* name, std::vector<int64_t> dims, float scale) {
    return g->AddConstant(name, Typed(Random(std::move(dims), seed++, scale), c.dtype));
  };
  std::vector<Value*> inputs = {x, constant("w", {dirs, gates * c.hidden, c.input}, 0.4f),
                                constant("r", {dirs, gates * c.hidden, c.hidden}, 0.4f)};
  inputs.push_back(c.bias ? constant("b", {dirs, 2 * gates * c.hidden}, 0.3f) : nullptr);
  if (c.seq_lens) {
    auto lens = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{c.batch});
    for (int64_t b = 0; b < c.batch; ++b)
      lens->data_as<int32_t>()[b] = static_cast<int32_t>(std::max<int64_t>(0, c.seq - 2 * b));
    inputs.push_back(g->AddConstant("lens", lens));
  } else {
    inputs.push_back(nullptr);
  }
  const std::vector<int64_t> state =
      c.layout == 0 ? std::vector<int64_t>{dirs, c.batch, c.hidden} : std::vector<int64_t>{c.batch, dirs, c.hidden};
  inputs.push_back(c.initial_h ? constant("h0", state, 0.5f) : nullptr);
  if (c.op == "LSTM") {
    inputs.push_back(c.initial_c ? constant("c0", state, 0.5f) : nullptr);
    inputs.push_back(c.peephole ? constant("p", {dirs, 3 * c.hidden}, 0.5f) : nullptr);
  }
  while (inputs.back() == nullptr) inputs.pop_back();
  std::vector<std::string> names = {"y", "y_h", "y_c"};
  names.resize(std::min(c.outputs, c.op == "LSTM" ? size_t{3} : size_t{2}));
  Node* node = g->AddNode(c.op, "rnn", inputs, names, 14);
  node->mutable_attrs() = c.attrs;
  node->mutable_attrs()["direction"] = c.direction;
  node->mutable_attrs()["layout"] = c.layout;
  node->mutable_attrs()["hidden_size"] = c.hidden;
  for (Value* out : node->outputs()) g->AddOutput(out);
  EXPECT_TRUE(InferTypes(*g).ok());
  return g;
}

// max |got - want| over the outputs, relative to max(1, max |want|).
double RelativeError(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  EXPECT_EQ(got.size(), want.size());
  double error = 0, scale = 1;
  for (size_t k = 0; k < got.size() && k < want.size(); ++k) {
    EXPECT_EQ(got[k].dims(), want[k].dims()) << "output " << k;
    if (got[k].dims() != want[k].dims()) return 1e9;
    for (int64_t i = 0; i < want[k].num_elements(); ++i) {
      scale = std::max(scale, std::fabs(want[k].GetAsDouble(i)));
      const double e = std::fabs(got[k].GetAsDouble(i) - want[k].GetAsDouble(i));
      error = std::max(error, std::isnan(e) ? 1e9 : e);
    }
  }
  return error / scale;
}

// The interpreter and the artifact (one and two threads) against the reference.
void Check(const Case& c, const std::string& target = "host") {
  std::unique_ptr<Graph> g = Build(c);
  const std::vector<int64_t> x_dims = g->inputs()[0]->type().StaticDims();
  const Tensor x = *Typed(Random(x_dims, 3, 1.0f), c.dtype);
  auto reference = ReferenceRunGraph(*g, {x});
  ASSERT_TRUE(reference.ok()) << reference.status();
  double y_scale = 0;
  for (int64_t i = 0; i < (*reference)[0].num_elements(); ++i)
    y_scale = std::max(y_scale, std::fabs((*reference)[0].GetAsDouble(i)));
  EXPECT_GT(y_scale, 0.05) << "the outputs are too small to compare";
  auto interpreted = RunGraph(*g, {x});
  ASSERT_TRUE(interpreted.ok()) << interpreted.status();
  EXPECT_LT(RelativeError(*interpreted, *reference), 1e-5) << "interpreter";
  std::unique_ptr<Graph> compiled = Build(c);
  const auto runs = RunArtifactOutputs(*compiled, kDefaultPipeline, {x}, {1, 2}, target);
  ASSERT_EQ(runs.size(), 2u);
  for (const std::vector<Tensor>& run : runs) EXPECT_LT(RelativeError(run, *reference), 1e-4) << "artifact";
}

TEST(RnnTest, SimpleRnnForwardDefaults) { Check(Case{.op = "RNN"}); }

TEST(RnnTest, SimpleRnnBidirectionalWithLengthsClipAndActivations) {
  Case c{.op = "RNN", .direction = "bidirectional", .seq_lens = true, .initial_h = true};
  c.batch = 4;
  c.attrs["activations"] = std::vector<std::string>{"LeakyRelu", "Affine"};
  c.attrs["activation_alpha"] = std::vector<double>{0.2, 0.7};
  c.attrs["activation_beta"] = std::vector<double>{0.1};
  c.attrs["clip"] = 1.5;
  Check(c);
}

TEST(RnnTest, GruReverseLinearBeforeReset) {
  Case c{.op = "GRU", .direction = "reverse", .seq_lens = true, .initial_h = true};
  c.attrs["linear_before_reset"] = int64_t{1};
  Check(c);
}

TEST(RnnTest, GruBidirectionalWithOtherActivations) {
  Case c{.op = "GRU", .direction = "bidirectional", .seq_lens = true};
  c.attrs["activations"] = std::vector<std::string>{"HardSigmoid", "ScaledTanh", "Sigmoid", "Softsign"};
  c.attrs["activation_alpha"] = std::vector<double>{0.3, 1.2};
  c.attrs["activation_beta"] = std::vector<double>{0.4, 0.8};
  Check(c);
}

TEST(RnnTest, GruOnlyYAndF64) { Check(Case{.op = "GRU", .initial_h = true, .outputs = 1, .dtype = DType::kFloat64}); }

TEST(RnnTest, LstmBidirectionalPeepholesLengthsClip) {
  Case c{.op = "LSTM",
         .direction = "bidirectional",
         .seq_lens = true,
         .initial_h = true,
         .initial_c = true,
         .peephole = true};
  c.attrs["clip"] = 0.8;
  Check(c);
}

TEST(RnnTest, LstmBatchMajorInputForgetAndActivations) {
  Case c{.op = "LSTM",
         .direction = "bidirectional",
         .layout = 1,
         .bias = false,
         .seq_lens = true,
         .initial_h = true,
         .initial_c = true,
         .peephole = true};
  c.attrs["input_forget"] = int64_t{1};
  // One direction's list serves both; the reverse Elu finds the one alpha taken (default 1).
  c.attrs["activations"] = std::vector<std::string>{"Sigmoid", "Elu", "Softplus"};
  c.attrs["activation_alpha"] = std::vector<double>{0.9};
  Check(c);
}

TEST(RnnTest, LstmYhOnlyAndThresholdedRelu) {
  Case c{.op = "LSTM", .seq = 4, .batch = 2, .outputs = 2};
  c.attrs["activations"] = std::vector<std::string>{"Sigmoid", "ThresholdedRelu", "Relu"};
  c.attrs["activation_alpha"] = std::vector<double>{0.1};
  Check(c);
}

// Sizes that cross the GEMM core's tiles: 13 batch rows (a 12-row tile and one row on the
// wide tile), 4 x 37 = 148 gate columns (two 64-column jobs and a partial one), K = 70 and
// 37, on each register tile this CPU runs; 24 steps make the input projection (312 rows)
// big enough to be split across threads.
TEST(RnnTest, LstmAndGruAcrossGemmTiles) {
  for (const std::string& target : TileTargets()) {
    for (const char* op : {"LSTM", "GRU"}) {
      SCOPED_TRACE(::testing::Message() << target << " " << op);
      Case c{.op = op, .direction = "bidirectional", .seq_lens = true, .initial_h = true};
      c.seq = 24;
      c.batch = 13;
      c.input = 70;
      c.hidden = 37;
      Check(c, target);
    }
  }
}

// Inputs that do not fit the sizes, and unknown activations, are errors naming the node,
// the input and what was expected.
TEST(RnnTest, ErrorsNameTheNodeAndInput) {
  auto error_of = [](const std::vector<int64_t>& b_dims, const std::string& activation) {
    Graph g;
    Value* x = g.AddValue("x", TensorType::Static(DType::kFloat32, {4, 2, 3}));
    g.AddInput(x);
    Node* node = g.AddNode("LSTM", "lstm_7",
                           {x, g.AddConstant("w", Random({1, 20, 3}, 1)), g.AddConstant("r", Random({1, 20, 5}, 2)),
                            g.AddConstant("b", Random(b_dims, 3))},
                           {"y"}, 14);
    node->mutable_attrs()["activations"] = std::vector<std::string>{"Sigmoid", activation, "Tanh"};
    g.AddOutput(node->output(0));
    return std::string(InferTypes(g).message());
  };
  EXPECT_EQ(error_of({1, 40}, "Tanh"), "");
  EXPECT_EQ(error_of({1, 20}, "Tanh"), "node 'lstm_7' (LSTM, opset 14): input 3 (B) has shape [1,20]; expected [1,40]");
  EXPECT_THAT(error_of({1, 40}, "Swish"), ::testing::HasSubstr("node 'lstm_7' (LSTM, opset 14): activation 'Swish'"));
}

}  // namespace
}  // namespace kiln
