// The interpreter (RunGraph) on graphs it once refused: control flow (If, Loop, Scan,
// SequenceMap, bodies reading captured values), shapes known only at run time (a symbolic
// batch, shapes computed from Shape, data-dependent outputs) and sequences/optionals, each
// result held against the independent reference (ReferenceRunGraph).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Graph> Parse(const std::string& text) {
  auto graph = ParseGraph(text);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return nullptr;
  absl::Status typed = InferTypes(**graph);
  EXPECT_TRUE(typed.ok()) << typed;
  return std::move(*graph);
}

Tensor Random(std::vector<int64_t> dims, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<float>()[i] = dist(rng);
  return t;
}

template <typename T>
Tensor Scalar(DType dtype, T value) {
  Tensor t(dtype, {});
  *t.data_as<T>() = value;
  return t;
}

void ExpectSameValue(const Tensor& got, const Tensor& want, const std::string& where) {
  ASSERT_EQ(got.kind(), want.kind()) << where;
  if (!got.is_tensor()) {
    ASSERT_EQ(got.elements().size(), want.elements().size()) << where;
    for (size_t i = 0; i < got.elements().size(); ++i) {
      ExpectSameValue(got.elements()[i], want.elements()[i], where + "[" + std::to_string(i) + "]");
    }
    return;
  }
  ASSERT_EQ(got.dtype(), want.dtype()) << where;
  ASSERT_EQ(got.dims(), want.dims()) << where;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    ASSERT_NEAR(g, w, 1e-4 * std::max(1.0, std::fabs(w))) << where << " element " << i;
  }
}

// Runs `graph` in the interpreter and in the reference; both must succeed and agree.
std::vector<Tensor> ExpectMatchesReference(const Graph& graph, const std::vector<Tensor>& inputs) {
  absl::StatusOr<std::vector<Tensor>> got = RunGraph(graph, inputs);
  EXPECT_TRUE(got.ok()) << got.status();
  absl::StatusOr<std::vector<Tensor>> want = ReferenceRunGraph(graph, inputs);
  EXPECT_TRUE(want.ok()) << want.status();
  if (!got.ok() || !want.ok()) return {};
  EXPECT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size() && i < want->size(); ++i) {
    ExpectSameValue((*got)[i], (*want)[i], "output " + std::to_string(i));
  }
  return *got;
}

// An If choosing a branch that reads captured values, inside a Loop whose body also reads
// a main-graph weight; the loop emits each iteration's value as a scan output.
constexpr char kIfInLoop[] = R"(
graph main(%x: f32[2,3], %n: i64[], %go: bool[]) {
  %w = constant f32[3,3] random(1)
  %zero = constant f32[] [0]
  %acc, %steps = Loop(%n, %go, %x, %w, %zero) {body=graph body, kiln.captured=2} : f32[2,3], f32[?,2,3]
    body: graph body(%i: i64[], %c: bool[], %a: f32[2,3], %w: f32[3,3], %zero: f32[]) {
      %m = MatMul(%a, %w) : f32[2,3]
      %s = ReduceSum(%m) {keepdims=0} : f32[]
      %up = Greater(%s, %zero) : bool[]
      %next = If(%up, %m, %a) {kiln.captured=2, then_branch=graph then, else_branch=graph else} : f32[2,3]
        else_branch: graph else(%m: f32[2,3], %a: f32[2,3]) {
          %e = Sub(%a, %m) : f32[2,3]
          return %e
        }
        then_branch: graph then(%m: f32[2,3], %a: f32[2,3]) {
          %t = Tanh(%m) : f32[2,3]
          return %t
        }
      return %c, %next, %next
    }
  return %acc, %steps
}
)";

TEST(InterpreterControlFlowTest, IfInsideLoopMatchesReference) {
  auto graph = Parse(kIfInLoop);
  ASSERT_NE(graph, nullptr);
  for (int64_t n : {0, 1, 4}) {
    SCOPED_TRACE("trip count " + std::to_string(n));
    std::vector<Tensor> out =
        ExpectMatchesReference(*graph, {Random({2, 3}, 5 + static_cast<uint32_t>(n)), Scalar<int64_t>(DType::kInt64, n),
                                        Scalar<uint8_t>(DType::kBool, 1)});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{n, 2, 3}));
  }
  // The condition input false: no iteration at all.
  std::vector<Tensor> out = ExpectMatchesReference(
      *graph, {Random({2, 3}, 9), Scalar<int64_t>(DType::kInt64, 5), Scalar<uint8_t>(DType::kBool, 0)});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{0, 2, 3}));
}

// The body's condition decides when to stop, and the carried value grows every iteration:
// the body's shapes are known only at run time.
constexpr char kGrowingLoop[] = R"(
graph main(%x: f32[1,3], %n: i64[]) {
  %yes = constant bool[] [1]
  %limit = constant f32[] [20]
  %y = Loop(%n, %yes, %x, %limit) {body=graph body, kiln.captured=1} : f32[?,3]
    body: graph body(%i: i64[], %c: bool[], %a: f32[?,3], %limit: f32[]) {
      %minus1 = constant i64[1] [-1]
      %big = constant i64[1] [1000000]
      %zero = constant i64[1] [0]
      %half = constant f32[] [1.5]
      %last = Slice(%a, %minus1, %big, %zero) : f32[?,3]
      %grown = Mul(%last, %half) : f32[?,3]
      %b = Concat(%a, %grown) {axis=0} : f32[?,3]
      %total = ReduceSum(%b) {keepdims=0} : f32[]
      %more = Less(%total, %limit) : bool[]
      return %more, %b
    }
  return %y
}
)";

TEST(InterpreterControlFlowTest, LoopWithGrowingCarriedValueMatchesReference) {
  auto graph = Parse(kGrowingLoop);
  ASSERT_NE(graph, nullptr);
  Tensor x(DType::kFloat32, {1, 3});
  for (int i = 0; i < 3; ++i) x.data_as<float>()[i] = 1.0f;
  for (int64_t n : {0, 2, 100}) {
    SCOPED_TRACE("trip count " + std::to_string(n));
    std::vector<Tensor> out = ExpectMatchesReference(*graph, {x, Scalar<int64_t>(DType::kInt64, n)});
    ASSERT_EQ(out.size(), 1u);
    if (n == 100) EXPECT_GT(out[0].dims()[0], 2);  // stopped by the body's condition
  }
}

// Scan over axis 1 of its input, read in reverse, its output stacked along axis 1 in
// reverse, with a running-sum state and a captured bias.
constexpr char kScan[] = R"(
graph main(%x: f32[2,5,3], %s0: f32[2,3]) {
  %bias = constant f32[3] [0.5, -1, 2]
  %state, %ys = Scan(%s0, %x, %bias) {body=graph body, kiln.captured=1, num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1], scan_output_directions=[1]} : f32[2,3], f32[2,5,3]
    body: graph body(%s: f32[2,3], %xt: f32[2,3], %bias: f32[3]) {
      %sum = Add(%s, %xt) : f32[2,3]
      %y = Add(%sum, %bias) : f32[2,3]
      return %sum, %y
    }
  return %state, %ys
}
)";

TEST(InterpreterControlFlowTest, ScanWithAxesAndDirectionsMatchesReference) {
  auto graph = Parse(kScan);
  ASSERT_NE(graph, nullptr);
  ExpectMatchesReference(*graph, {Random({2, 5, 3}, 3), Random({2, 3}, 4)});
}

// Observation: a body value is seen once per iteration (an observer widening a range gets
// the union over iterations).
TEST(InterpreterControlFlowTest, ObserverSeesBodyValuesEveryIteration) {
  auto graph = Parse(kIfInLoop);
  ASSERT_NE(graph, nullptr);
  const Node* loop = graph->nodes().back();
  ASSERT_EQ(loop->op(), "Loop");
  const Value* body_matmul = nullptr;
  for (const Node* node : loop->GetGraph("body")->nodes()) {
    if (node->op() == "MatMul") body_matmul = node->output(0);
  }
  ASSERT_NE(body_matmul, nullptr);
  int seen = 0;
  double lo = INFINITY, hi = -INFINITY;
  std::vector<std::pair<double, double>> per_iteration;
  auto run = RunGraph(*graph, {Random({2, 3}, 5), Scalar<int64_t>(DType::kInt64, 3), Scalar<uint8_t>(DType::kBool, 1)},
                      [&](const Value* v, const Tensor& t) {
                        if (v != body_matmul) return;
                        ++seen;
                        double a = INFINITY, b = -INFINITY;
                        for (int64_t i = 0; i < t.num_elements(); ++i) {
                          a = std::min(a, t.GetAsDouble(i));
                          b = std::max(b, t.GetAsDouble(i));
                        }
                        per_iteration.emplace_back(a, b);
                        lo = std::min(lo, a);
                        hi = std::max(hi, b);
                      });
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(seen, 3);
  for (const auto& [a, b] : per_iteration) {
    EXPECT_LE(lo, a);
    EXPECT_GE(hi, b);
  }
}

TEST(InterpreterControlFlowTest, ErrorInsideABodyNamesTheNodes) {
  // The body's Reshape cannot hold the value it is given at run time.
  auto graph = Parse(R"(
graph main(%x: f32[?,3], %n: i64[]) {
  %yes = constant bool[] [1]
  %y = Loop(%n, %yes, %x) {body=graph body} : f32[?,3]
    body: graph body(%i: i64[], %c: bool[], %a: f32[?,3]) {
      %shape = constant i64[2] [4, 3]
      %r = Reshape(%a, %shape) : f32[4,3]
      return %c, %r
    }
  return %y
}
)");
  ASSERT_NE(graph, nullptr);
  auto run = RunGraph(*graph, {Random({2, 3}, 1), Scalar<int64_t>(DType::kInt64, 2)});
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(), HasSubstr("(Loop, opset"));
  EXPECT_THAT(run.status().message(), HasSubstr("subgraph 'body'"));
  EXPECT_THAT(run.status().message(), HasSubstr("(Reshape, opset"));
}

// Shapes known only at run time: a symbolic batch through MatMul, a Reshape whose shape is
// computed from Shape, Softmax, and a Flatten.
constexpr char kSymbolicBatch[] = R"(
graph main(%x: f32[N,4]) {
  %w = constant f32[4,6] random(2)
  %b = constant f32[6] random(3)
  %m = MatMul(%x, %w) : f32[N,6]
  %a = Add(%m, %b) : f32[N,6]
  %s = Shape(%x) : i64[2]
  %i0 = constant i64[1] [0]
  %n = Gather(%s, %i0) {axis=0} : i64[1]
  %tail = constant i64[2] [3, 2]
  %shape = Concat(%n, %tail) {axis=0} : i64[3]
  %r = Reshape(%a, %shape) : f32[N,3,2]
  %p = Softmax(%r) {axis=-1} : f32[N,3,2]
  %f = Flatten(%p) {axis=1} : f32[N,6]
  %rl = Relu(%f) : f32[N,6]
  return %rl
}
)";

TEST(InterpreterRunTimeShapesTest, SymbolicBatchMatchesReference) {
  auto graph = Parse(kSymbolicBatch);
  ASSERT_NE(graph, nullptr);
  for (int64_t n : {1, 4, 7}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    std::vector<Tensor> out = ExpectMatchesReference(*graph, {Random({n, 4}, 10 + static_cast<uint32_t>(n))});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{n, 6}));
  }
}

// Outputs whose dims follow from input data: NonZero's count, TopK with k an input, and
// NonMaxSuppression's selection, then a Gather by what they chose.
constexpr char kDataDependent[] = R"(
graph main(%x: f32[5,4], %k: i64[1], %boxes: f32[1,6,4], %scores: f32[1,1,6]) {
  %zero = constant f32[] [0]
  %pos = Greater(%x, %zero) : bool[5,4]
  %nz = NonZero(%pos) : i64[2,?]
  %values, %indices = TopK(%x, %k) {axis=1} : f32[5,?], i64[5,?]
  %max = constant i64[1] [3]
  %iou = constant f32[1] [0.5]
  %thr = constant f32[1] [0.0]
  %sel = NonMaxSuppression(%boxes, %scores, %max, %iou, %thr) : i64[?,3]
  %col = constant i64[] [2]
  %picked = Gather(%sel, %col) {axis=1} : i64[?]
  return %nz, %values, %indices, %sel, %picked
}
)";

TEST(InterpreterRunTimeShapesTest, DataDependentOutputsMatchReference) {
  auto graph = Parse(kDataDependent);
  ASSERT_NE(graph, nullptr);
  Tensor boxes(DType::kFloat32, {1, 6, 4});
  const float coords[6][4] = {{0, 0, 1, 1},   {0, 0.1f, 1, 1.1f},   {0, -0.1f, 1, 0.9f},
                              {0, 10, 1, 11}, {0, 10.1f, 1, 11.1f}, {0, 100, 1, 101}};
  for (int b = 0; b < 6; ++b) {
    for (int c = 0; c < 4; ++c) boxes.data_as<float>()[b * 4 + c] = coords[b][c];
  }
  Tensor scores(DType::kFloat32, {1, 1, 6});
  const float s[6] = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};
  for (int i = 0; i < 6; ++i) scores.data_as<float>()[i] = s[i];
  for (int64_t k : {1, 3}) {
    SCOPED_TRACE("k " + std::to_string(k));
    Tensor kt(DType::kInt64, {1});
    kt.data_as<int64_t>()[0] = k;
    std::vector<Tensor> out = ExpectMatchesReference(*graph, {Random({5, 4}, 21), kt, boxes, scores});
    ASSERT_EQ(out.size(), 5u);
    EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{5, k}));
    EXPECT_EQ(out[3].dims(), (std::vector<int64_t>{3, 3}));
  }
}

// Sequences and optionals as values: a split into a sequence, SequenceMap over it (its body
// reading a captured weight), reads back, and an optional's presence.
constexpr char kSequences[] = R"(
graph main(%x: f32[4,3], %o: opt<f32[2]>) {
  %w = constant f32[3] [1, 2, 3]
  %seq = SplitToSequence(%x) {axis=0, keepdims=0} : seq<f32[3]>
  %mapped = SequenceMap(%seq, %w) {body=graph body, kiln.captured=1} : seq<f32[3]>
    body: graph body(%e: f32[3], %w: f32[3]) {
      %p = Mul(%e, %w) : f32[3]
      return %p
    }
  %n = SequenceLength(%mapped) : i64[]
  %one = constant i64[] [1]
  %second = SequenceAt(%mapped, %one) : f32[3]
  %stacked = ConcatFromSequence(%mapped) {axis=0, new_axis=1} : f32[4,3]
  %has = OptionalHasElement(%o) : bool[]
  return %mapped, %n, %second, %stacked, %has
}
)";

TEST(InterpreterSequenceTest, SequenceMapAndOptionalsMatchReference) {
  auto graph = Parse(kSequences);
  ASSERT_NE(graph, nullptr);
  Tensor value = Random({2}, 8);
  ExpectMatchesReference(*graph, {Random({4, 3}, 7), Tensor::Optional(ValueKind::kOptional, DType::kFloat32, &value)});
  std::vector<Tensor> out = ExpectMatchesReference(
      *graph, {Random({4, 3}, 7), Tensor::Optional(ValueKind::kOptional, DType::kFloat32, nullptr)});
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].kind(), ValueKind::kSequence);
  EXPECT_EQ(out[0].elements().size(), 4u);
  EXPECT_EQ(out[4].GetAsInt64(0), 0);
}

// A sequence carried through a Loop (SequenceInsert each iteration), then stacked; and an
// If whose branches return different shapes.
constexpr char kSequenceLoop[] = R"(
graph main(%x: f32[3], %n: i64[], %pick: bool[]) {
  %yes = constant bool[] [1]
  %empty = SequenceEmpty() {dtype=1} : seq<f32[*]>
  %seq = Loop(%n, %yes, %empty, %x) {body=graph body, kiln.captured=1} : seq<f32[*]>
    body: graph body(%i: i64[], %c: bool[], %s: seq<f32[*]>, %x: f32[3]) {
      %fi = Cast(%i) {to=1} : f32[]
      %v = Mul(%x, %fi) : f32[3]
      %t = SequenceInsert(%s, %v) : seq<f32[3]>
      return %c, %t
    }
  %stacked = ConcatFromSequence(%seq) {axis=0, new_axis=1} : f32[?,3]
  %r = If(%pick, %x) {kiln.captured=1, then_branch=graph then, else_branch=graph else} : f32[?]
    else_branch: graph else(%x: f32[3]) {
      %starts = constant i64[1] [1]
      %ends = constant i64[1] [3]
      %e = Slice(%x, %starts, %ends) : f32[2]
      return %e
    }
    then_branch: graph then(%x: f32[3]) {
      %t = Neg(%x) : f32[3]
      return %t
    }
  return %seq, %stacked, %r
}
)";

TEST(InterpreterSequenceTest, SequenceCarriedThroughLoopAndIfOfTwoShapesMatchReference) {
  auto graph = Parse(kSequenceLoop);
  ASSERT_NE(graph, nullptr);
  for (int64_t n : {1, 3}) {
    for (uint8_t pick : {0, 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " pick " + std::to_string(pick));
      std::vector<Tensor> out = ExpectMatchesReference(
          *graph, {Random({3}, 2), Scalar<int64_t>(DType::kInt64, n), Scalar<uint8_t>(DType::kBool, pick)});
      ASSERT_EQ(out.size(), 3u);
      EXPECT_EQ(out[0].elements().size(), static_cast<size_t>(n));
      EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{n, 3}));
      EXPECT_EQ(out[2].dims(), (std::vector<int64_t>{pick ? 3 : 2}));
    }
  }
}

// Scan at opset 8: a batch dim before everything (one scan per batch entry).
TEST(InterpreterControlFlowTest, Opset8ScanMatchesReference) {
  auto graph = Parse(R"(
graph main(%s0: f32[2,3], %x: f32[2,4,3]) opset 8 {
  %state, %ys = Scan(_, %s0, %x) {body=graph body, num_scan_inputs=1} : f32[2,3], f32[2,4,3]
    body: graph body(%s: f32[3], %xt: f32[3]) {
      %sum = Add(%s, %xt) : f32[3]
      %y = Mul(%sum, %xt) : f32[3]
      return %sum, %y
    }
  return %state, %ys
}
)");
  ASSERT_NE(graph, nullptr);
  ExpectMatchesReference(*graph, {Random({2, 3}, 1), Random({2, 4, 3}, 2)});
}

}  // namespace
}  // namespace kiln
