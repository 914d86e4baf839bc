// Unit tests for the IR, passes and codegen: graphs built in C++, compiled with real LLVM
// and LLD, loaded with the runtime, and compared with the independent reference (artifacts)
// or the interpreter (graphs before and after a pass, internal kiln.* ops included).
#include <unistd.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "absl/strings/str_join.h"
#include "artifact_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/reference.h"
#include "kiln/compiler/tune.h"
#include "kiln/kernels/conv.h"
#include "kiln/kernels/gemm.h"
#include "kiln/runtime.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// A constant f32 scalar (shape []) named `name` in g.
Value* ScalarConstant(Graph& g, const std::string& name, float v) {
  auto t = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{});
  t->data_as<float>()[0] = v;
  return g.AddConstant(name, t);
}

// x[1,3,7,9] -> Conv(5 out, 3x3, pad 1) -> BN -> Relu -> Reshape -> MatMul -> Add(bias)
std::unique_ptr<Graph> ConvNet() {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, 3, 7, 9}));
  g->AddInput(x);
  Node* conv =
      g->AddNode("Conv", "conv", {x, g->AddConstant("w", Random({5, 3, 3, 3}, 1)), g->AddConstant("b", Random({5}, 2))},
                 {"c"}, 13);
  conv->mutable_attrs()["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  auto positive = Random({5}, 3);
  for (int i = 0; i < 5; ++i) positive->data_as<float>()[i] = std::fabs(positive->data_as<float>()[i]) + 0.5f;
  Node* bn = g->AddNode("BatchNormalization", "bn",
                        {conv->output(0), g->AddConstant("s", Random({5}, 4)), g->AddConstant("t", Random({5}, 5)),
                         g->AddConstant("m", Random({5}, 6)), g->AddConstant("v", positive)},
                        {"n"}, 13);
  Node* relu = g->AddNode("Relu", "relu", {bn->output(0)}, {"r"}, 13);
  Node* reshape = AddReshape(*g, "flat", relu->output(0), {5, 63});
  Node* mm =
      g->AddNode("MatMul", "mm", {reshape->output(0), g->AddConstant("proj", Random({63, 11}, 7, 0.2f))}, {"p"}, 13);
  Node* add = g->AddNode("Add", "bias", {mm->output(0), g->AddConstant("pb", Random({11}, 8))}, {"y"}, 13);
  return WithOutput(std::move(g), add->output(0));
}

TEST(IrTest, PrinterIsStable) {
  auto g = ConvNet();
  std::string text = PrintGraph(*g);
  EXPECT_NE(text.find("%c = Conv(%x, %w, %b) {pads=[1,1,1,1]} : f32[1,5,7,9]"), std::string::npos) << text;
  EXPECT_NE(text.find("%y = Add(%p, %pb) : f32[5,11]"), std::string::npos) << text;
  EXPECT_EQ(text, PrintGraph(*g));
  EXPECT_TRUE(VerifyGraph(*g).ok());
}

TEST(PassTest, FoldConstantsEvaluatesShapeArithmetic) {
  Graph g;
  Value* x = g.AddValue("x", TensorType::Static(DType::kFloat32, {2, 3}));
  g.AddInput(x);
  Node* shape = g.AddNode("Shape", "shape", {x}, {"s"}, 13);
  Node* twice = g.AddNode("Add", "twice", {shape->output(0), shape->output(0)}, {"t"}, 13);
  g.AddOutput(twice->output(0));
  ASSERT_TRUE(InferTypes(g).ok());
  PassContext ctx;
  auto stats = RunPipeline(g, "fold-constants,dce", {}, ctx);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(g.num_nodes(), 0u);
  ASSERT_TRUE(g.outputs()[0]->is_constant());
  EXPECT_EQ(g.outputs()[0]->constant()->GetAsInt64(0), 4);
  EXPECT_EQ(g.outputs()[0]->constant()->GetAsInt64(1), 6);
}

// The IR text reads integers exactly: 64-bit values past a double's 53 bits of mantissa
// (INT64_MAX, Slice's "to the end") in constants and attributes, and prints them back so.
TEST(IrTextTest, IntegersReadExactlyPastADoublesMantissa) {
  const std::string text =
      "graph main(%x: i64[3]) {\n"
      "  %c = constant i64[3] [9223372036854775807, -9223372036854775807, 9007199254740993]\n"
      "  %u = constant u64[1] [18446744073709551615]\n"
      "  %s = constant i64[2] splat(9007199254740993)\n"
      "  %y = Add(%x, %c) {big=9223372036854775807, list=[9007199254740993, -2]} : i64[3]\n"
      "  return %y, %u, %s\n"
      "}\n";
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  const Node* add = (*g)->nodes().back();
  EXPECT_EQ(add->GetInt("big", 0), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(add->GetInts("list", {}), (std::vector<int64_t>{9007199254740993, -2}));
  const Tensor& c = *add->input(1)->constant();
  EXPECT_EQ(c.data_as<int64_t>()[0], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(c.data_as<int64_t>()[1], -std::numeric_limits<int64_t>::max());
  EXPECT_EQ(c.data_as<int64_t>()[2], 9007199254740993);
  EXPECT_EQ((*g)->outputs()[1]->constant()->data_as<uint64_t>()[0], std::numeric_limits<uint64_t>::max());
  EXPECT_EQ((*g)->outputs()[2]->constant()->data_as<int64_t>()[1], 9007199254740993);
  EXPECT_THAT(PrintGraph(**g), HasSubstr("[9223372036854775807, -9223372036854775807, 9007199254740993]"));
  // Past 64 bits, or a fraction where an integer is due, is an error naming the token.
  EXPECT_THAT(std::string(ParseGraph("graph main(%x: i64[3]) {\n  %c = constant i64[1] [99999999999999999999]\n"
                                     "  return %c\n}\n")
                              .status()
                              .message()),
              HasSubstr("'99999999999999999999' is not a 64-bit integer"));
  EXPECT_FALSE(ParseGraph("graph main(%x: f32[2.5]) {\n  return %x\n}\n").ok());
}

TEST(PassTest, PipelineRejectsUnknownPass) {
  auto g = ConvNet();
  PassContext ctx;
  auto stats = RunPipeline(*g, "dce,no-such-pass", {}, ctx);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(std::string(stats.status().message()).find("unknown pass 'no-such-pass'"), std::string::npos);
}

std::string PipelineError(absl::string_view text) {
  auto pipeline = ParsePipeline(text);
  return pipeline.ok() ? "(parsed)" : std::string(pipeline.status().message());
}

TEST(PassTest, PipelineTextParsesOptionsAndPrintsCanonically) {
  auto pipeline =
      ParsePipeline(" fold-constants , fuse,prune{channels=0.30},quantize{method=entropy keep-float=b,a,a}");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(PrintPipeline(*pipeline),
            "fold-constants,fuse,prune{channels=0.3},quantize{method=entropy keep-float=a,b}");
  EXPECT_EQ((*pipeline)[2].Number("channels"), 0.3);
  EXPECT_EQ((*pipeline)[2].Number("weights"), 0.0);  // the default
  EXPECT_EQ((*pipeline)[3].Choice("method"), "entropy");
  EXPECT_EQ((*pipeline)[3].List("keep-float"), (std::vector<std::string>{"a", "b"}));
  // Options separated by commas or spaces, in any order; defaults are not printed.
  EXPECT_EQ(*CanonicalPipeline("prune{weights=0.5,channels=0.25}"), "prune{channels=0.25 weights=0.5}");
  EXPECT_EQ(*CanonicalPipeline("quantize{method=minmax},cse{}"), "quantize,cse");
  EXPECT_EQ(*CanonicalPipeline(""), "");
  // Names with the grammar's characters are quoted and read back whole.
  PassInvocation quantize(*FindPass("quantize"));
  ASSERT_TRUE(quantize.SetList("keep-float", {"c d", "a,b"}).ok());
  EXPECT_EQ(quantize.Print(), "quantize{keep-float=\"a,b\",\"c d\"}");
  auto again = ParsePipeline(quantize.Print());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].List("keep-float"), (std::vector<std::string>{"a,b", "c d"}));
}

TEST(PassTest, PipelineErrorsNameThePassOptionAndPosition) {
  EXPECT_THAT(PipelineError("cse,fuze"), HasSubstr("at character 5: unknown pass 'fuze'; passes: bf16, cse, dce"));
  EXPECT_THAT(
      PipelineError("prune{chanels=0.3}"),
      HasSubstr("at character 7: pass 'prune' has no option 'chanels'; options: channels, weights, weight-unit, skip"));
  EXPECT_THAT(PipelineError("prune{channels=abc}"),
              HasSubstr("at character 16: option 'channels' of pass 'prune': 'abc' is not a number"));
  EXPECT_THAT(PipelineError("quantize{method=best}"), HasSubstr("'best' is not one of minmax|percentile|entropy"));
  EXPECT_THAT(PipelineError("prune{weights=1}"), HasSubstr("option 'weights' of pass 'prune': 1 is not in [0, 1)"));
  EXPECT_THAT(PipelineError("quantize{percentile=50}"), HasSubstr("50 is not in (50, 100]"));
  EXPECT_THAT(PipelineError("cse,"), HasSubstr("expected a pass name after ','"));
  EXPECT_THAT(PipelineError("prune{channels=0.3"), HasSubstr("the options of 'prune' are not closed by '}'"));
  EXPECT_THAT(PipelineError("cse dce"), HasSubstr("at character 5: expected ',' between passes"));
}

// Canonical text is a fixed point: printing what it parses to gives it back, and any
// text either parses or fails with a message (never crashes).
TEST(PassTest, PipelineTextRoundTripsAndSurvivesGarbage) {
  std::mt19937 random(7);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz-_,{}=\" \\.0123456789";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int length = static_cast<int>(random() % 40);
    for (int i = 0; i < length; ++i) text += alphabet[random() % alphabet.size()];
    if (trial % 2 == 0) text = "prune{skip=" + text + "}";  // reach the value parser too
    auto pipeline = ParsePipeline(text);
    if (!pipeline.ok()) {
      EXPECT_FALSE(pipeline.status().message().empty());
      continue;
    }
    const std::string printed = PrintPipeline(*pipeline);
    auto again = ParsePipeline(printed);
    ASSERT_TRUE(again.ok()) << text << " -> " << printed << ": " << again.status();
    EXPECT_EQ(PrintPipeline(*again), printed) << text;
  }
}

// The table's defaults must be canonical values of their type, or printing would differ.
TEST(PassTest, PassTableDefaultsAreCanonical) {
  for (const PassInfo& pass : RegisteredPasses()) {
    for (const PassOptionInfo& option : pass.options) {
      PassInvocation invocation(pass);
      ASSERT_TRUE(invocation.Set(option.name, option.default_value).ok()) << pass.name << " " << option.name;
      EXPECT_TRUE(invocation.options().empty()) << pass.name << " " << option.name;
    }
  }
}

// Pruning's options come from the spec into prune{...} right after fold-batchnorm.
TEST(PassTest, PipelineForPutsTheSpecIntoPassOptions) {
  v1::CompileSpec spec;
  spec.mutable_pruning()->set_channels(0.5);
  spec.mutable_pruning()->add_skip("conv1");
  spec.mutable_quantization()->set_precision("int8");
  spec.mutable_quantization()->set_method("entropy");
  auto pipeline = PipelineFor(spec);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(PrintPipeline(*pipeline),
            "fold-constants,simplify,cse,dce,fold-batchnorm,prune{channels=0.5 skip=conv1},quantize{method=entropy},"
            "fold-qdq,fold-constants,dce,fuse,dce,layout,plan-memory");
  spec.set_pipeline("cse,dce");
  EXPECT_THAT(std::string(PipelineFor(spec).status().message()),
              HasSubstr("pruning needs a pipeline with fold-batchnorm"));
}

// Analyses stay cached while passes only read the graph and go when one changes it.
TEST(PassTest, AnalysesAreCachedUntilAPassChangesTheGraph) {
  auto g = ConvNet();
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "plan-memory", {}, ctx).ok());
  const MemoryPlan* plan = ctx.analyses.GetIfCached<MemoryPlanAnalysis>();
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(&ctx.analyses.Get<MemoryPlanAnalysis>(*g), plan);  // not computed again
  auto unchanged = RunPipeline(*g, "dce", {}, ctx);
  ASSERT_TRUE(unchanged.ok());
  ASSERT_FALSE((*unchanged)[0].changed);
  EXPECT_EQ(ctx.analyses.GetIfCached<MemoryPlanAnalysis>(), plan);
  auto folded = RunPipeline(*g, "fold-batchnorm", {}, ctx);
  ASSERT_TRUE(folded.ok());
  ASSERT_TRUE((*folded)[0].changed);
  EXPECT_EQ(ctx.analyses.GetIfCached<MemoryPlanAnalysis>(), nullptr);
  EXPECT_EQ(PlannedOrNaiveMemory(*g, ctx).in_place, 0);  // the naive plan reuses nothing
}

TEST(PassTest, LivenessAndKernelCallsAreAnalysesTheMemoryPlanShares) {
  auto g = ConvNet();
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "plan-memory", {}, ctx).ok());
  // The plan asked the manager for liveness and the kernel calls: both are cached now.
  const Liveness* liveness = ctx.analyses.GetIfCached<LivenessAnalysis>();
  const KernelCalls* calls = ctx.analyses.GetIfCached<KernelCallAnalysis>();
  ASSERT_NE(liveness, nullptr);
  ASSERT_NE(calls, nullptr);
  const std::vector<Node*> nodes = g->nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Value* out : nodes[i]->outputs()) EXPECT_EQ(liveness->defined.at(out), i);
    for (const Value* in : nodes[i]->inputs()) {
      if (in != nullptr) EXPECT_GE(liveness->last_read.at(in), i);
    }
  }
  EXPECT_EQ(liveness->last_read.count(g->outputs()[0]), 0u);  // no node reads the result
  // The plan keeps the very calls it was made with, one per node, for codegen.
  const MemoryPlan& plan = ctx.analyses.Get<MemoryPlanAnalysis>(*g);
  EXPECT_EQ(plan.calls.get(), calls);
  EXPECT_EQ(calls->size(), nodes.size());
  for (const Node* node : nodes) EXPECT_TRUE(calls->at(node).ok()) << NodeLabel(*node);
}

TEST(PassTest, DefaultPipelineFoldsBatchNormAndFusesEpilogues) {
  auto g = ConvNet();
  PassContext ctx;
  auto stats = RunPipeline(*g, kDefaultPipeline, {}, ctx);
  ASSERT_TRUE(stats.ok()) << stats.status();
  std::string text = PrintGraph(*g);
  EXPECT_EQ(text.find("BatchNormalization"), std::string::npos) << text;
  EXPECT_EQ(text.find("Relu("), std::string::npos) << text;
  EXPECT_NE(text.find("kiln.activation"), std::string::npos) << text;
  EXPECT_EQ(g->num_nodes(), 3u) << text;  // Conv(+BN+Relu), Reshape, MatMul(+bias)
  const MemoryPlan* plan = ctx.analyses.GetIfCached<MemoryPlanAnalysis>();
  ASSERT_NE(plan, nullptr);
  EXPECT_LE(plan->arena_bytes, plan->naive_bytes);
  EXPECT_EQ(plan->views, 1);
}

// Compiles the graph, runs the artifact and returns max |compiled - reference| relative
// to the reference's largest magnitude. The reference is the independent one
// (compiler/reference), so a kernel cannot agree with itself.
double CompiledVsReference(std::unique_ptr<Graph> reference, std::unique_ptr<Graph> compiled_graph,
                           const std::string& pipeline, const std::string& target = "host") {
  auto input = Random(reference->inputs()[0]->type().StaticDims(), 99);
  auto expected = ReferenceRunGraph(*reference, {*input});
  EXPECT_TRUE(expected.ok()) << expected.status();
  if (!expected.ok()) return 1e9;
  // One thread (kernels run serially, exec is NULL) and two (jobs split for the pool).
  const std::vector<Tensor> outputs = RunArtifact(*compiled_graph, pipeline, *input, {1, 2}, target);
  if (outputs.size() != 2) return 1e9;
  double max_error = 0, scale = 0;
  for (const Tensor& out : outputs) {
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      max_error = std::max(max_error, std::fabs(double(out.data_as<float>()[i]) - (*expected)[0].data_as<float>()[i]));
      scale = std::max(scale, std::fabs(double((*expected)[0].data_as<float>()[i])));
    }
  }
  EXPECT_GT(scale, 0.1);  // the comparison means something only if outputs are not tiny
  return max_error / scale;
}

// x[n] -> op -> y, compiled for the host and run once on `input`: the artifact's own
// kernels (FastExp and friends), not the interpreter's.
Tensor RunUnaryArtifact(const std::string& op, const Tensor& input) {
  Graph g;
  Value* x = g.AddValue("x", TensorType::Static(DType::kFloat32, input.dims()));
  g.AddInput(x);
  g.AddOutput(g.AddNode(op, "op", {x}, {"y"}, 13)->output(0));
  EXPECT_TRUE(InferTypes(g).ok());
  std::vector<Tensor> outputs = RunArtifact(g, kDefaultPipeline, input, {1});
  return outputs.empty() ? Tensor(DType::kFloat32, input.dims()) : std::move(outputs[0]);
}

// The artifact's exp, sigmoid and erf (vectorized approximations that may use FMA there)
// against libm in double on dense sweeps: the bounds fast_math.h states.
TEST(CodegenTest, ArtifactFastMathMatchesLibm) {
  struct Sweep {
    const char* op;
    double lo, hi, step, bound;
    bool relative;
    double (*f)(double);
  };
  const Sweep sweeps[] = {
      {"Exp", -87.0, 88.7, 1.0 / 64, 2.4e-7, true, [](double v) { return std::exp(v); }},
      {"Sigmoid", -30.0, 30.0, 1.0 / 256, 3.0e-7, true, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"Erf", -6.0, 6.0, 1.0 / 512, 3.0e-7, false, [](double v) { return std::erf(v); }},
      {"Tanh", -12.0, 12.0, 1.0 / 512, 3.0e-7, true, [](double v) { return std::tanh(v); }},
  };
  for (const Sweep& sw : sweeps) {
    SCOPED_TRACE(sw.op);
    const int64_t n = static_cast<int64_t>((sw.hi - sw.lo) / sw.step) + 1;
    Tensor x(DType::kFloat32, {n});
    for (int64_t i = 0; i < n; ++i) x.data_as<float>()[i] = static_cast<float>(sw.lo + i * sw.step);
    Tensor y = RunUnaryArtifact(sw.op, x);
    double worst = 0, at = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x.data_as<float>()[i], want = sw.f(v), got = y.data_as<float>()[i];
      const double err = sw.relative ? std::fabs(got - want) / std::fabs(want) : std::fabs(got - want);
      if (err > worst) {
        worst = err;
        at = v;
      }
    }
    EXPECT_LT(worst, sw.bound) << "worst at x = " << at;
  }
}

// x[4,64,130] -> Mul(x, scale[64,1]) -> Add(bias[130]) -> Sigmoid -> Mul(x, .) -> Sub(., 0.25)
// then a Reshape (a view) and Tanh: the chain fuses into one kiln.Elementwise whose loop
// broadcasts two operands, uses x twice and has enough rows to run through the pool.
std::unique_ptr<Graph> ChainNet() {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {4, 64, 130}));
  g->AddInput(x);
  Node* scale = g->AddNode("Mul", "scale", {x, g->AddConstant("scale_w", Random({64, 1}, 11))}, {"a"}, 13);
  Node* bias = g->AddNode("Add", "bias", {scale->output(0), g->AddConstant("bias_w", Random({130}, 12))}, {"b"}, 13);
  Node* sig = g->AddNode("Sigmoid", "sig", {bias->output(0)}, {"c"}, 13);
  Node* gate = g->AddNode("Mul", "gate", {x, sig->output(0)}, {"d"}, 13);
  Node* shift = g->AddNode("Sub", "shift", {gate->output(0), ScalarConstant(*g, "q", 0.25f)}, {"e"}, 13);
  Node* flat = AddReshape(*g, "flat", shift->output(0), {256, 130});
  Node* tanh = g->AddNode("Tanh", "tanh", {flat->output(0)}, {"y"}, 13);
  return WithOutput(std::move(g), tanh->output(0));
}

TEST(PassTest, FuseTurnsElementwiseChainIntoOneLoop) {
  auto g = ChainNet();
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
  std::string text = PrintGraph(*g);
  EXPECT_NE(text.find("%e = kiln.Elementwise(%x, %scale_w, %bias_w, %q) {operands=[0,1,4,2,5,0,0,6,7,3], "
                      "ops=[\"Mul\",\"Add\",\"Sigmoid\",\"Mul\",\"Sub\"]"),
            std::string::npos)
      << text;
  EXPECT_EQ(g->num_nodes(), 3u) << text;  // fused chain, Reshape, Tanh
  EXPECT_TRUE(VerifyGraph(*g).ok());
}

// x[1,16,64,70] -> Relu(x * 3 - 1) + x: one fused loop whose operands all collapse into a
// single dimension of 71680, split into rows of 7168 so the pool can share it out (run on
// 1 and 2 threads by CompiledVsReference).
std::unique_ptr<Graph> ResidualReluNet() {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, 16, 64, 70}));
  g->AddInput(x);
  Node* scale = g->AddNode("Mul", "scale", {x, ScalarConstant(*g, "three", 3.f)}, {"a"}, 13);
  Node* shift = g->AddNode("Sub", "shift", {scale->output(0), ScalarConstant(*g, "one", 1.f)}, {"b"}, 13);
  Node* relu = g->AddNode("Relu", "relu", {shift->output(0)}, {"c"}, 13);
  Node* add = g->AddNode("Add", "residual", {relu->output(0), x}, {"y"}, 13);
  return WithOutput(std::move(g), add->output(0));
}

TEST(CodegenTest, LongFusedLoopSplitIntoRowsMatchesInterpreter) {
  EXPECT_LT(CompiledVsReference(ResidualReluNet(), ResidualReluNet(), kDefaultPipeline), 1e-6);
}

TEST(CodegenTest, FusedLoopMatchesUnfusedInterpreter) {
  EXPECT_LT(CompiledVsReference(ChainNet(), ChainNet(), kDefaultPipeline), 1e-6);
}

TEST(CodegenTest, OptimisedArtifactMatchesInterpreter) {
  EXPECT_LT(CompiledVsReference(ConvNet(), ConvNet(), kDefaultPipeline), 1e-5);
}

TEST(CodegenTest, UnoptimisedArtifactMatchesInterpreter) {
  EXPECT_LT(CompiledVsReference(ConvNet(), ConvNet(), "fold-constants"), 1e-5);
}

// x[2,5,13,11] -> MaxPool or AveragePool with the given window: odd sizes, padding that
// clips taps at every edge, strides that skip, ceil mode that adds a partial window.
std::unique_ptr<Graph> PoolNet(const std::string& op, std::vector<int64_t> kernel, std::vector<int64_t> strides,
                               std::vector<int64_t> pads, int64_t ceil_mode,
                               std::vector<int64_t> shape = {2, 5, 13, 11}) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, shape));
  g->AddInput(x);
  Node* pool = g->AddNode(op, "pool", {x}, {"y"}, 13);
  pool->mutable_attrs()["kernel_shape"] = kernel;
  pool->mutable_attrs()["strides"] = strides;
  pool->mutable_attrs()["pads"] = pads;
  pool->mutable_attrs()["ceil_mode"] = ceil_mode;
  return WithOutput(std::move(g), pool->output(0));
}

TEST(CodegenTest, PoolingMatchesInterpreterOnOddShapes) {
  struct Case {
    std::vector<int64_t> kernel, strides, pads;
    int64_t ceil_mode;
  };
  const Case cases[] = {{{3, 3}, {2, 2}, {0, 0, 0, 0}, 1},
                        {{3, 3}, {1, 1}, {1, 1, 1, 1}, 0},
                        {{2, 3}, {2, 1}, {1, 0, 0, 2}, 0},
                        {{5, 4}, {3, 2}, {2, 1, 2, 1}, 1},
                        {{1, 1}, {2, 3}, {0, 0, 0, 0}, 0}};
  for (const char* op : {"MaxPool", "AveragePool"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << op << " kernel " << c.kernel[0] << "x" << c.kernel[1] << " stride "
                                        << c.strides[0] << "x" << c.strides[1] << " ceil " << c.ceil_mode);
      EXPECT_LT(CompiledVsReference(PoolNet(op, c.kernel, c.strides, c.pads, c.ceil_mode),
                                    PoolNet(op, c.kernel, c.strides, c.pads, c.ceil_mode), "fold-constants"),
                1e-6);
    }
  }
  // 3x3 stride-2 max pooling: rows of 8 or more outputs by the row walk (ResNet's 112x112
  // with pads 1, a 261-wide row, a 33-wide one whose 16 outputs are one vector exactly or
  // one vector and an overlapping one, 27x27 ceil mode as in SqueezeNet and 23 wide: rows
  // of 11 to 14 outputs in 8-lane vectors, the left pad and the ceil-mode column in the
  // same vector), narrower rows with 8 or 16 channels per vector (13 channels of 13x13: a
  // partial block).
  const std::vector<int64_t> shapes[] = {{1, 20, 112, 112}, {2, 13, 27, 27}, {1, 3, 9, 261},
                                         {1, 2, 7, 33},     {1, 3, 23, 23},  {2, 13, 13, 13}};
  for (const std::vector<int64_t>& shape : shapes) {
    for (int64_t ceil_mode : {0, 1}) {
      for (int64_t pad : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << "MaxPool 3x3/2 over " << shape[1] << "x" << shape[2] << "x" << shape[3]
                                          << " ceil " << ceil_mode << " pads " << pad);
        const std::vector<int64_t> pads(4, pad);
        for (const std::string& target : TileTargets()) {  // 8 or 16 channels per vector
          SCOPED_TRACE(target);
          EXPECT_LT(
              CompiledVsReference(PoolNet("MaxPool", {3, 3}, {2, 2}, pads, ceil_mode, shape),
                                  PoolNet("MaxPool", {3, 3}, {2, 2}, pads, ceil_mode, shape), "fold-constants", target),
              1e-6);
        }
      }
    }
  }
  // 3x3 stride-1 max pooling (GoogLeNet's pooling branches, pads 1), 8 or 16 channels per
  // vector: 20 channels (a partial second block) at 28x28, 13 at 7x7 without padding.
  for (const auto& [shape, pad] :
       std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{1, 20, 28, 28}, 1}, {{2, 13, 7, 7}, 0}}) {
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(::testing::Message() << "MaxPool 3x3/1 over " << shape[2] << "x" << shape[3] << " " << target);
      const std::vector<int64_t> pads(4, pad);
      EXPECT_LT(CompiledVsReference(PoolNet("MaxPool", {3, 3}, {1, 1}, pads, 0, shape),
                                    PoolNet("MaxPool", {3, 3}, {1, 1}, pads, 0, shape), "fold-constants", target),
                1e-6);
    }
  }
  // The row walk's other windows: 2x2 stride 2, and 4 rows x 3 columns at row stride 3 with
  // uneven pads and ceil mode (a last window past the image on both axes).
  const Case row_cases[] = {
      {{2, 2}, {2, 2}, {0, 0, 0, 0}, 0}, {{2, 2}, {2, 2}, {0, 1, 1, 0}, 1}, {{4, 3}, {3, 2}, {1, 2, 0, 1}, 1}};
  for (const Case& c : row_cases) {
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(::testing::Message() << "MaxPool " << c.kernel[0] << "x" << c.kernel[1] << " ceil " << c.ceil_mode
                                        << " " << target);
      EXPECT_LT(CompiledVsReference(PoolNet("MaxPool", c.kernel, c.strides, c.pads, c.ceil_mode, {1, 3, 20, 51}),
                                    PoolNet("MaxPool", c.kernel, c.strides, c.pads, c.ceil_mode, {1, 3, 20, 51}),
                                    "fold-constants", target),
                1e-6);
    }
  }
}

// x[2,c,h,w] -> depthwise Conv (group c, bias) -> Relu with pads {top, left, bottom, right}.
std::unique_ptr<Graph> DepthwiseNet(int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride,
                                    std::vector<int64_t> pads, const std::string& activation = "Relu") {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {2, c, h, w}));
  g->AddInput(x);
  Node* conv =
      g->AddNode("Conv", "dw", {x, g->AddConstant("w", Random({c, 1, k, k}, 21)), g->AddConstant("b", Random({c}, 22))},
                 {"c"}, 13);
  conv->mutable_attrs()["group"] = c;
  conv->mutable_attrs()["strides"] = std::vector<int64_t>{stride, stride};
  conv->mutable_attrs()["pads"] = pads;
  std::vector<Value*> operands = {conv->output(0)};
  if (activation == "Clip") {  // ReLU6's form, bounds 0 and 1
    operands.push_back(ScalarConstant(*g, "lo", 0.f));
    operands.push_back(ScalarConstant(*g, "hi", 1.f));
  }
  Node* act = g->AddNode(activation, "act", operands, {"y"}, 13);
  return WithOutput(std::move(g), act->output(0));
}

// Both artifact paths: 8 (AVX2) or 16 (AVX-512) channels per vector for padded rows up to
// 64 wide, 128 at stride 2 with 16 lanes or a 5x5 window (7 channels: one partial block; 20: two full and one of 4, or
// one of 16 and one of 4; 9 at stride 2: 16 lanes, the second transpose one channel; 60
// rows of 45: several strips), and the per-plane rows beyond that (70 wide at stride 1,
// 140 at either); windows of 3 and 5, both strides, padding none, symmetric or lopsided
// (taken in turn: one compile per case), clipped at every edge. The fused activation, in
// turn too: ReLU and Clip (applied in registers by the blocked kernel), Sigmoid (a pass after).
TEST(CodegenTest, DepthwiseConvMatchesInterpreterOnOddShapes) {
  struct Shape {
    int64_t c, h, w;
  };
  int turn = 0;
  for (Shape shape : {Shape{7, 13, 11}, Shape{20, 60, 45}, Shape{9, 10, 70}, Shape{5, 9, 140}}) {
    for (int64_t k : {3, 5, 7}) {
      for (int64_t stride : {1, 2}) {
        const int64_t p = k / 2;
        const std::vector<int64_t> choices[3] = {{0, 0, 0, 0}, {p, p, p, p}, {p, 0, 0, p + 1}};
        const std::vector<int64_t>& pads = choices[turn % 3];
        const std::string activation = turn % 4 == 3 ? "Sigmoid" : (turn % 2 == 1 ? "Clip" : "Relu");
        ++turn;
        SCOPED_TRACE(::testing::Message() << shape.c << "x" << shape.h << "x" << shape.w << ", " << k << "x" << k
                                          << " stride " << stride << " pads " << pads[0] << "," << pads[1] << ","
                                          << pads[2] << "," << pads[3] << ", " << activation);
        for (const std::string& target : TileTargets()) {  // 8 or 16 channels per vector
          SCOPED_TRACE(target);
          EXPECT_LT(CompiledVsReference(DepthwiseNet(shape.c, shape.h, shape.w, k, stride, pads, activation),
                                        DepthwiseNet(shape.c, shape.h, shape.w, k, stride, pads, activation),
                                        kDefaultPipeline, target),
                    1e-5);
        }
      }
    }
  }
}

// x[n,c,h,w] -> Conv 3x3 stride 1 (pads top, left, bottom, right; bias optional) -> Relu:
// the shapes the Winograd F(4x4, 3x3) lowering takes in artifacts. Its rounding error is
// inherently larger than a direct sum's (the transforms scale values by up to 100 before the
// products): a float64 simulation of 50 tiles with 256 input channels gives 8e-6 x scale
// against an exact result where a direct float32 sum gives 4e-7; the bounds allow for that.
struct WinogradCase {
  int64_t n, c, oc, h, w;
  std::vector<int64_t> pads;
  bool bias;
  double tolerance;  // relative to the output scale
};

std::unique_ptr<Graph> WinogradNet(const WinogradCase& t) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {t.n, t.c, t.h, t.w}));
  g->AddInput(x);
  std::vector<Value*> inputs = {x, g->AddConstant("w", Random({t.oc, t.c, 3, 3}, 41))};
  if (t.bias) inputs.push_back(g->AddConstant("b", Random({t.oc}, 42)));
  Node* conv = g->AddNode("Conv", "conv", inputs, {"c"}, 13);
  conv->mutable_attrs()["pads"] = t.pads;
  Node* relu = g->AddNode("Relu", "relu", {conv->output(0)}, {"y"}, 13);
  return WithOutput(std::move(g), relu->output(0));
}

TEST(CodegenTest, WinogradConvMatchesInterpreter) {
  const WinogradCase cases[] = {
      {2, 8, 16, 13, 11, {1, 1, 1, 1}, true, 1e-5},     // partial tiles at the bottom and right, two images
      {1, 16, 32, 9, 10, {0, 2, 1, 0}, false, 1e-5},    // asymmetric padding, no bias
      {1, 256, 256, 30, 30, {1, 1, 1, 1}, true, 3e-5},  // 64 tiles: more than one chunk of V and M
      // Three images of 64 tiles in chunks of 24 + 24 + 16 tiles of each, each chunk's jobs
      // in blocks of 12 tiles.
      {3, 128, 256, 30, 30, {1, 1, 1, 1}, true, 3e-5},
      // 16 tiles and 4.5 MiB of U: the transforms' jobs go by (8 channels, tile) instead.
      {1, 128, 256, 14, 14, {1, 1, 1, 1}, true, 3e-5},
  };
  for (const WinogradCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << "x [" << t.n << "," << t.c << "," << t.h << "," << t.w << "] oc " << t.oc);
    // The case must really take the Winograd kernel in the artifact.
    std::unique_ptr<Graph> g = WinogradNet(t);
    const Node* conv = g->nodes()[0];
    auto call = LowerForArtifact(*FindOp("Conv"), *conv);
    ASSERT_TRUE(call.ok()) << call.status();
    EXPECT_EQ(call->kernel, "conv_winograd");
    EXPECT_GT(call->scratch_bytes, 0);
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference(WinogradNet(t), WinogradNet(t), kDefaultPipeline, target), t.tolerance);
    }
  }
}

// x[n, c, d, h, w] -> Conv 3x3x3 stride 1 (pads front, top, left, back, bottom, right) (+ x,
// the residual, when asked: same-size padding and c == oc) -> Relu: the 3-D Winograd, F(2, 3)
// along depth times F(4x4, 3x3) across the planes (144 points).
struct Winograd3dCase {
  int64_t n, c, oc, d, h, w;
  std::vector<int64_t> pads;
  bool residual;
};

std::unique_ptr<Graph> Winograd3dNet(const Winograd3dCase& t) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {t.n, t.c, t.d, t.h, t.w}));
  g->AddInput(x);
  Node* conv = g->AddNode(
      "Conv", "conv",
      {x, g->AddConstant("w", Random({t.oc, t.c, 3, 3, 3}, 43)), g->AddConstant("b", Random({t.oc}, 44))}, {"c"}, 13);
  conv->mutable_attrs()["pads"] = t.pads;
  Value* y = conv->output(0);
  if (t.residual) y = g->AddNode("Add", "add", {y, x}, {"a"}, 13)->output(0);
  Node* relu = g->AddNode("Relu", "relu", {y}, {"y"}, 13);
  return WithOutput(std::move(g), relu->output(0));
}

TEST(CodegenTest, Winograd3dConvMatchesInterpreter) {
  const Winograd3dCase cases[] = {
      {1, 8, 16, 5, 9, 10, {1, 1, 1, 1, 1, 1}, false},   // partial tiles in depth (5 planes), rows and columns
      {2, 16, 32, 4, 7, 6, {0, 1, 2, 1, 0, 1}, false},   // asymmetric padding, two images
      {2, 16, 16, 3, 6, 5, {1, 1, 1, 1, 1, 1}, true},    // a residual (the fuse pass's Conv -> Add), two images
      {1, 8, 16, 3, 12, 11, {0, 1, 1, 0, 1, 1}, false},  // one output plane: half of each depth tile unused
      // R3D-18's layer1 shape at a smaller map: 64 channels, 4 x 12 x 12, 18 tiles.
      {1, 64, 64, 4, 12, 12, {1, 1, 1, 1, 1, 1}, true},
  };
  for (const Winograd3dCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << "x [" << t.n << "," << t.c << "," << t.d << "," << t.h << "," << t.w << "] oc "
                                      << t.oc);
    std::unique_ptr<Graph> g = Winograd3dNet(t);
    auto call = LowerForArtifact(*FindOp("Conv"), *g->nodes()[0]);
    ASSERT_TRUE(call.ok()) << call.status();
    ASSERT_EQ(call->kernel, "conv_winograd");
    ASSERT_EQ(call->inputs[1].constant->dims()[0], 144);
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference(Winograd3dNet(t), Winograd3dNet(t), kDefaultPipeline, target), 1e-5);
    }
  }
}

// x[3, 5, 40, 41] -> Relu, Sigmoid -> Concat (axis 1) -> y: parts whose rows (5 x 40 x 41
// floats per image) are long enough that the copy's pieces go image by image.
std::unique_ptr<Graph> ChannelConcatNet() {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {3, 5, 40, 41}));
  g->AddInput(x);
  Node* a = g->AddNode("Relu", "a", {x}, {"a"}, 13);
  Node* b = g->AddNode("Sigmoid", "b", {x}, {"b"}, 13);
  Node* concat = g->AddNode("Concat", "concat", {a->output(0), b->output(0), a->output(0)}, {"y"}, 13);
  concat->mutable_attrs()["axis"] = int64_t{1};
  return WithOutput(std::move(g), concat->output(0));
}

TEST(CodegenTest, ChannelConcatOfLongRowsMatchesInterpreter) {
  EXPECT_LT(CompiledVsReference(ChannelConcatNet(), ChannelConcatNet(), "fold-constants"), 1e-6);
}

// x[1,10,9,11] -> Conv (k x k, stride s, 13 output channels, bias) -> activation: the
// implicit GEMM with pre-packed weights, partial row panels and column tiles, and the
// epilogue in the micro-kernel (ReLU, Clip) or after it (LeakyRelu, none).
std::unique_ptr<Graph> EpilogueNet(int64_t k, int64_t stride, const std::string& activation, int64_t c = 10,
                                   int64_t h = 9, int64_t w = 11) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, c, h, w}));
  g->AddInput(x);
  Node* conv =
      g->AddNode("Conv", "conv",
                 {x, g->AddConstant("w", Random({13, c, k, k}, 51)), g->AddConstant("b", Random({13}, 52))}, {"c"}, 13);
  conv->mutable_attrs()["strides"] = std::vector<int64_t>{stride, stride};
  conv->mutable_attrs()["pads"] = std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2};
  Value* y = conv->output(0);
  if (activation == "Clip") {
    y = g->AddNode("Clip", "act", {y, ScalarConstant(*g, "lo", -0.25f), ScalarConstant(*g, "hi", 0.5f)}, {"y"}, 13)
            ->output(0);
  } else if (!activation.empty()) {
    y = g->AddNode(activation, "act", {y}, {"y"}, 13)->output(0);
  }
  return WithOutput(std::move(g), y);
}

TEST(CodegenTest, ConvEpiloguesMatchInterpreter) {
  // Rounding differs from the reference by FMA and blocked sums; Clip's bound (0.5) is the
  // output scale there, hence 1e-5.
  struct Case {
    int64_t k, stride, c, h, w;
  };
  // 1x1 over 9x11 (99 positions: six 16-column tiles and three columns), 3x3 stride 2; then
  // 1x1 Convs whose last one or two columns take gemm::PanelColumn: 7x7 with 300 input
  // channels (two K blocks, so the column accumulates) and 3x6.
  // 3x3 stride 1 over 13x12 with 10 channels (not Winograd's): 156 positions, split into two
  // equal column chunks (80 + 76) when a pool runs it. 3x3 stride 2 over 9x37: output rows
  // of 19, packed eight at a time by the stride-2 vector copy up to the row's end.
  const Case cases[] = {{1, 1, 10, 9, 11}, {3, 2, 10, 9, 11},  {1, 1, 300, 7, 7},
                        {1, 1, 20, 3, 6},  {3, 1, 10, 13, 12}, {3, 2, 10, 9, 37}};
  for (const std::string activation : {"", "Relu", "Clip", "LeakyRelu"}) {
    for (const Case& cs : cases) {
      // The column cases: the activations applied in registers. Clip's output scale (0.5)
      // says little about sums of 300 products (~17 before the clip), so that one runs Relu.
      if (cs.c != 10 && activation != "Relu" && (activation != "Clip" || cs.c == 300)) continue;
      SCOPED_TRACE(::testing::Message() << cs.k << "x" << cs.k << " stride " << cs.stride << " over " << cs.c << "x"
                                        << cs.h << "x" << cs.w << " activation '" << activation << "'");
      std::unique_ptr<Graph> g = EpilogueNet(cs.k, cs.stride, activation, cs.c, cs.h, cs.w);
      auto call = LowerForArtifact(*FindOp("Conv"), *g->nodes()[0]);
      ASSERT_TRUE(call.ok()) << call.status();
      EXPECT_EQ(call->inputs[1].node_input, -1);  // the pre-packed weight
      for (const std::string& target : TileTargets()) {
        SCOPED_TRACE(target);
        EXPECT_LT(
            CompiledVsReference(EpilogueNet(cs.k, cs.stride, activation, cs.c, cs.h, cs.w),
                                EpilogueNet(cs.k, cs.stride, activation, cs.c, cs.h, cs.w), kDefaultPipeline, target),
            1e-5);
      }
    }
  }
}

// x[1,c,h,w] -> Conv k x k (c -> oc, bias, same padding; group c when depthwise) -> Add
// with a residual -> activation. The residual: x itself (oc == c), a 1x1 shortcut Conv of
// x placed after the main Conv (ResNet's downsampling block: the Add's later operand), or a
// constant [1, oc, 1, 1] (a broadcast, not a residual). `swap` puts the residual first.
enum class Residual { kInput, kShortcutConv, kBroadcast };
std::unique_ptr<Graph> ResidualNet(int64_t k, int64_t c, int64_t oc, int64_t h, int64_t w, Residual residual,
                                   const std::string& activation, bool swap = false, bool depthwise = false) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, c, h, w}));
  g->AddInput(x);
  Node* main = g->AddNode(
      "Conv", "main",
      {x, g->AddConstant("w", Random({oc, depthwise ? 1 : c, k, k}, 81)), g->AddConstant("b", Random({oc}, 82))}, {"c"},
      13);
  main->mutable_attrs()["pads"] = std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2};
  if (depthwise) main->mutable_attrs()["group"] = c;
  Value* r = x;
  if (residual == Residual::kShortcutConv) {
    r = g->AddNode("Conv", "shortcut", {x, g->AddConstant("ws", Random({oc, c, 1, 1}, 83))}, {"s"}, 13)->output(0);
  } else if (residual == Residual::kBroadcast) {
    r = g->AddConstant("r", Random({1, oc, 1, 1}, 84));
  }
  std::vector<Value*> operands = {main->output(0), r};
  if (swap) std::swap(operands[0], operands[1]);
  Value* y = g->AddNode("Add", "add", operands, {"a"}, 13)->output(0);
  if (!activation.empty()) y = g->AddNode(activation, "act", {y}, {"y"}, 13)->output(0);
  return WithOutput(std::move(g), y);
}

// fuse adds a residual in the Conv's epilogue (then the activation fuses too), in every
// kernel path a Conv takes: Winograd, the implicit GEMM's full tiles, half tiles, panel
// columns and partial tiles (scalar), and an activation applied after the product.
TEST(PassTest, FuseAddsResidualInConvEpilogue) {
  struct Case {
    int64_t k, c, oc, h, w;
    Residual residual;
    const char* activation;
    bool swap;
    const char* fused_into;  // the Conv that takes the residual
  };
  const Case cases[] = {
      {3, 16, 16, 13, 12, Residual::kInput, "Relu", false, "main"},           // Winograd
      {1, 24, 20, 7, 7, Residual::kShortcutConv, "Relu", false, "shortcut"},  // 49 columns: 32 + 16 + 1
      {3, 10, 13, 9, 37, Residual::kShortcutConv, "", true, "shortcut"},      // partial tiles
      {1, 16, 16, 9, 11, Residual::kInput, "Sigmoid", true, "main"},          // activation after the product
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(::testing::Message() << cs.k << "x" << cs.k << " " << cs.c << "->" << cs.oc << " over " << cs.h << "x"
                                      << cs.w << " activation '" << cs.activation << "'"
                                      << (cs.swap ? " swapped" : ""));
    auto net = [&] { return ResidualNet(cs.k, cs.c, cs.oc, cs.h, cs.w, cs.residual, cs.activation, cs.swap); };
    std::unique_ptr<Graph> g = net();
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
    const Node* fused = nullptr;
    for (const Node* node : g->nodes()) {
      EXPECT_NE(node->op(), "Add") << PrintGraph(*g);
      if (node->GetInt("kiln.residual", 0) == 1) fused = node;
    }
    ASSERT_NE(fused, nullptr) << PrintGraph(*g);
    EXPECT_EQ(fused->name(), cs.fused_into);
    ASSERT_EQ(fused->inputs().size(), 5u);
    EXPECT_EQ(fused->input(3), nullptr);  // no input scale
    EXPECT_EQ(fused->GetString("kiln.activation", ""), std::string(cs.activation) == "Relu"      ? "relu"
                                                       : std::string(cs.activation) == "Sigmoid" ? "sigmoid"
                                                                                                 : "");
    EXPECT_EQ(g->outputs()[0], fused->output(0));
    // The interpreter runs the fused Conv's reference loop (the same sums, then the
    // residual, as Conv then Add), the artifact its fast kernels.
    auto input = Random({1, cs.c, cs.h, cs.w}, 85);
    auto fused_run = RunGraph(*g, {*input});
    auto plain_run = RunGraph(*net(), {*input});
    ASSERT_TRUE(fused_run.ok()) << fused_run.status();
    ASSERT_TRUE(plain_run.ok()) << plain_run.status();
    for (int64_t i = 0; i < (*plain_run)[0].num_elements(); ++i) {
      ASSERT_EQ((*fused_run)[0].data_as<float>()[i], (*plain_run)[0].data_as<float>()[i]) << i;
    }
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference(net(), net(), kDefaultPipeline, target), 1e-5);
    }
  }
  // Not residuals: a broadcast constant, and a depthwise Conv's result (its kernels have no
  // residual epilogue). Both stay an Add.
  for (bool depthwise : {false, true}) {
    std::unique_ptr<Graph> g = depthwise ? ResidualNet(3, 16, 16, 9, 9, Residual::kInput, "Relu", false, true)
                                         : ResidualNet(1, 16, 16, 9, 9, Residual::kBroadcast, "Relu");
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
    for (const Node* node : g->nodes()) EXPECT_EQ(node->GetInt("kiln.residual", 0), 0) << PrintGraph(*g);
  }
}

// x[2, 125, n] -> MatMul by a constant [n, n] (+ bias) -> Add x (a transformer's skip
// connection, either operand order) -> optional Relu: the Add goes into the MatMul, whose
// kernel adds the residual to each block of rows after the bias and before the activation.
// n = 48: B pre-packed in panels; n = 40: B packed per call; 250 rows: a 240-row block and
// 10 rows. Not fused: a residual that broadcasts ([n]).
TEST(PassTest, FuseAddsResidualInMatMulEpilogue) {
  auto net = [](int64_t n, bool bias, bool swap, const char* activation, bool broadcast) {
    auto g = std::make_unique<Graph>();
    Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {2, 125, n}));
    g->AddInput(x);
    Value* y = g->AddNode("MatMul", "mm", {x, g->AddConstant("w", Random({n, n}, 51, 0.2f))}, {"m"}, 13)->output(0);
    if (bias) y = g->AddNode("Add", "bias", {y, g->AddConstant("b", Random({n}, 52))}, {"mb"}, 13)->output(0);
    Value* r = broadcast ? g->AddConstant("r", Random({n}, 53)) : x;
    y = g->AddNode("Add", "skip", swap ? std::vector<Value*>{r, y} : std::vector<Value*>{y, r}, {"s"}, 13)->output(0);
    if (*activation) y = g->AddNode(activation, "act", {y}, {"y"}, 13)->output(0);
    return WithOutput(std::move(g), y);
  };
  struct Case {
    int64_t n;
    bool bias, swap;
    const char* activation;
  };
  for (const Case& cs : {Case{48, true, false, "Relu"}, Case{40, true, true, ""}, Case{48, false, true, "Sigmoid"}}) {
    SCOPED_TRACE(::testing::Message() << "n " << cs.n << (cs.bias ? " bias" : "") << (cs.swap ? " swapped" : "")
                                      << " activation '" << cs.activation << "'");
    std::unique_ptr<Graph> g = net(cs.n, cs.bias, cs.swap, cs.activation, false);
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "fuse,dce", {}, ctx).ok());
    ASSERT_EQ(g->num_nodes(), 1u) << PrintGraph(*g);
    const Node* fused = g->nodes()[0];
    EXPECT_EQ(fused->op(), "MatMul");
    EXPECT_EQ(fused->GetInt("kiln.residual", 0), 1);
    ASSERT_EQ(fused->inputs().size(), 4u);
    EXPECT_EQ(fused->input(2) != nullptr, cs.bias);
    EXPECT_EQ(fused->input(3), g->inputs()[0]);
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference(net(cs.n, cs.bias, cs.swap, cs.activation, false),
                                    net(cs.n, cs.bias, cs.swap, cs.activation, false), kDefaultPipeline, target),
                1e-5);
    }
  }
  std::unique_ptr<Graph> g = net(48, true, false, "Relu", true);
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
  for (const Node* node : g->nodes()) EXPECT_EQ(node->GetInt("kiln.residual", 0), 0) << PrintGraph(*g);
}

// split-batch: a batch of 3 through a small CNN (conv, pool, two branches concatenated
// on channels, pool, flatten, a Linear layer: the logits, as a softmax would saturate and
// give every image the same probabilities) becomes three
// copies at batch 1 between Slices and a Concat on axis 0, and computes what the batched
// graph does. A node that mixes images (a softmax over the batch, a transpose that moves
// it) is an error naming it; a graph at batch 1 is left as it is.
std::unique_ptr<Graph> SplitBatchNet(int64_t batch, const std::string& blocker = "") {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {batch, 3, 12, 12}));
  g->AddInput(x);
  auto conv = [&](Value* in, int64_t oc, int64_t ic, int64_t k, const std::string& name) {
    Node* c = g->AddNode("Conv", name, {in, g->AddConstant(name + ".w", Random({oc, ic, k, k}, 40 + oc + k, 0.5f))},
                         {name + "_out"}, 13);
    c->mutable_attrs()["pads"] = std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2};
    return g->AddNode("Relu", name + ".relu", {c->output(0)}, {name + "_relu"}, 13)->output(0);
  };
  Node* pool = g->AddNode("MaxPool", "pool", {conv(x, 16, 3, 3, "stem")}, {"pooled"}, 13);
  pool->mutable_attrs()["kernel_shape"] = std::vector<int64_t>{2, 2};
  pool->mutable_attrs()["strides"] = std::vector<int64_t>{2, 2};
  Value* p = pool->output(0);
  Node* cat = g->AddNode("Concat", "cat", {conv(p, 8, 16, 1, "a"), conv(p, 8, 16, 3, "b")}, {"cat_out"}, 13);
  cat->mutable_attrs()["axis"] = int64_t{1};
  // (A second pool, not a global one: averaged over the map, every image's features would
  // be about the same, and a mix-up of images would pass.)
  Node* pool2 = g->AddNode("MaxPool", "pool2", {cat->output(0)}, {"pooled2"}, 13);
  pool2->mutable_attrs()["kernel_shape"] = std::vector<int64_t>{2, 2};
  pool2->mutable_attrs()["strides"] = std::vector<int64_t>{2, 2};
  Value* v = g->AddNode("Flatten", "flat", {pool2->output(0)}, {"flat_out"}, 13)->output(0);
  Node* fc = g->AddNode(
      "Gemm", "fc", {v, g->AddConstant("fc.w", Random({10, 144}, 44, 0.2f)), g->AddConstant("fc.b", Random({10}, 45))},
      {"logits"}, 13);
  fc->mutable_attrs()["transB"] = int64_t{1};
  v = fc->output(0);
  if (blocker == "Transpose") {
    Node* t = g->AddNode("Transpose", "swap", {v}, {"swapped"}, 13);
    t->mutable_attrs()["perm"] = std::vector<int64_t>{1, 0};
    Node* back = g->AddNode("Transpose", "back", {g->AddNode("Relu", "r", {t->output(0)}, {"r_out"}, 13)->output(0)},
                            {"back_out"}, 13);
    back->mutable_attrs()["perm"] = std::vector<int64_t>{1, 0};
    v = back->output(0);
  }
  if (blocker == "Softmax") {
    Node* softmax = g->AddNode("Softmax", "softmax", {v}, {"probs"}, 13);
    softmax->mutable_attrs()["axis"] = int64_t{0};
    v = softmax->output(0);
  }
  return WithOutput(std::move(g), v);
}

TEST(PassTest, SplitBatchRunsImagesOneAtATime) {
  const std::string pipeline = "fold-constants,simplify,cse,dce,fold-batchnorm,split-batch,fuse,dce,layout,plan-memory";
  std::unique_ptr<Graph> g = SplitBatchNet(3);
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "split-batch", {}, ctx).ok());
  int slices = 0, convs = 0, batch_concats = 0;
  for (const Node* node : g->nodes()) {
    slices += node->op() == "Slice";
    convs += node->op() == "Conv";
    batch_concats += node->op() == "Concat" && node->GetInt("axis", 1) == 0;
    if (node->op() == "Conv") EXPECT_EQ(node->output(0)->type().StaticDims()[0], 1) << PrintGraph(*g);
  }
  EXPECT_EQ(slices, 3);
  EXPECT_EQ(convs, 9);
  EXPECT_EQ(batch_concats, 1);
  EXPECT_EQ(g->outputs()[0]->name(), "logits");
  EXPECT_EQ(g->outputs()[0]->type().StaticDims(), (std::vector<int64_t>{3, 10}));
  for (const std::string& target : TileTargets()) {
    SCOPED_TRACE(target);
    EXPECT_LT(CompiledVsReference(SplitBatchNet(3), SplitBatchNet(3), pipeline, target), 1e-5);
  }
  for (const std::string blocker : {"Softmax", "Transpose"}) {
    SCOPED_TRACE(blocker);
    std::unique_ptr<Graph> mixed = SplitBatchNet(3, blocker);
    PassContext mixed_ctx;
    auto run = RunPipeline(*mixed, "split-batch", {}, mixed_ctx);
    ASSERT_FALSE(run.ok());
    EXPECT_THAT(std::string(run.status().message()),
                ::testing::HasSubstr(blocker == "Softmax" ? "node 'softmax' (Softmax, opset 13): it works along axis 0"
                                                          : "node 'swap' (Transpose, opset 13)"));
  }
  std::unique_ptr<Graph> one = SplitBatchNet(1);
  const size_t nodes = one->num_nodes();
  PassContext one_ctx;
  auto run = RunPipeline(*one, "split-batch", {}, one_ctx);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(one->num_nodes(), nodes);
  // Each copy's conv and Gemm pack their weights anew; the artifact holds the bytes once.
  auto split = GenerateFor(*g, "x86-64-v4");
  auto single = GenerateFor(*one, "x86-64-v4");
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_GT(single->size.weights_added, 0);
  EXPECT_EQ(split->size.weights_added, single->size.weights_added);
  EXPECT_EQ(split->size.weights_given, single->size.weights_given);
}

// until= names the last node run image by image: the convolutions and pools per image,
// their result put together on axis 0, and the Gemm (weights read once for the batch) and
// a Softmax over the batch after it, which the whole-graph split refuses.
TEST(PassTest, SplitBatchUntilLeavesTheRestBatched) {
  std::unique_ptr<Graph> g = SplitBatchNet(3, "Softmax");
  PassContext ctx;
  auto run = RunPipeline(*g, "split-batch{until=pool2}", {}, ctx);
  ASSERT_TRUE(run.ok()) << run.status();
  int convs = 0, batch_concats = 0;
  for (const Node* node : g->nodes()) {
    convs += node->op() == "Conv";
    batch_concats += node->op() == "Concat" && node->GetInt("axis", 1) == 0;
    const int64_t batch = node->output(0)->type().StaticDims()[0];
    if (node->op() == "Conv" || node->op() == "MaxPool") EXPECT_EQ(batch, 1) << NodeLabel(*node);
    if (node->op() == "Gemm" || node->op() == "Softmax" || node->op() == "Flatten") {
      EXPECT_EQ(batch, 3) << NodeLabel(*node);
    }
  }
  EXPECT_EQ(convs, 9);
  EXPECT_EQ(batch_concats, 1);
  const std::string pipeline =
      "fold-constants,simplify,cse,dce,fold-batchnorm,split-batch{until=pool2},fuse,dce,layout,plan-memory";
  for (const std::string& target : TileTargets()) {
    SCOPED_TRACE(target);
    EXPECT_LT(CompiledVsReference(SplitBatchNet(3, "Softmax"), SplitBatchNet(3, "Softmax"), pipeline, target), 1e-5);
  }
  const std::pair<const char*, const char*> errors[] = {
      {"split-batch{until=softmax}", "up to softmax: node 'softmax' (Softmax, opset 13): it works along axis 0"},
      {"split-batch{until=nope}", "until=nope: the graph has no such node"},
      {"split-batch{until=pool,pool2}", "until takes one node name, not 2"},
  };
  for (const auto& [passes, message] : errors) {
    SCOPED_TRACE(passes);
    std::unique_ptr<Graph> bad = SplitBatchNet(3, "Softmax");
    PassContext bad_ctx;
    auto status = RunPipeline(*bad, passes, {}, bad_ctx);
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(std::string(status.status().message()), ::testing::HasSubstr(message));
  }
}

// Attention's transposes fold into its products: scores = q . k^T and out = scores . v
// with q, k and v Transposes of x (ViT's [seq, batch x heads, width] -> heads-major, and
// BERT's [batch, seq, heads, width] -> [batch, heads, seq, width] with k^T as perm
// (0, 2, 3, 1)), the output transposed back. Every Transpose goes (A strided, B strided
// or transposed, C strided); against the reference on both tiles, one and two threads.
// Not folded: a Transpose with another reader.
TEST(PassTest, FuseFoldsAttentionTransposesIntoMatMul) {
  auto net = [](const std::vector<int64_t>& dims, const std::vector<int64_t>& qv, const std::vector<int64_t>& kt,
                bool shared) {
    auto g = std::make_unique<Graph>();
    Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, dims));
    g->AddInput(x);
    auto transpose = [&](Value* v, const std::vector<int64_t>& perm, const std::string& name) {
      Node* t = g->AddNode("Transpose", name, {v}, {name + "_out"}, 13);
      t->mutable_attrs()["perm"] = perm;
      return t->output(0);
    };
    Value* q = transpose(x, qv, "q");
    Value* k = transpose(x, kt, "k");
    Value* v = transpose(x, qv, "v");
    Value* s = g->AddNode("MatMul", "scores", {q, k}, {"s"}, 13)->output(0);
    Value* p = g->AddNode("Softmax", "softmax", {s}, {"p"}, 13)->output(0);
    Value* o = g->AddNode("MatMul", "context", {p, v}, {"o"}, 13)->output(0);
    Value* y = transpose(o, qv, "back");
    if (shared) y = g->AddNode("Add", "twice", {y, transpose(q, qv, "q_back")}, {"y2"}, 13)->output(0);
    EXPECT_TRUE(InferTypes(*g).ok());
    return WithOutput(std::move(g), y);
  };
  struct Case {
    std::vector<int64_t> dims, qv, kt;
  };
  // (The third: keys 64 x 16 floats apart, 4 KiB, the aliased stride of ViT's at batch 8.)
  for (const Case& cs : {Case{{37, 6, 24}, {1, 0, 2}, {1, 2, 0}}, Case{{2, 19, 3, 40}, {0, 2, 1, 3}, {0, 2, 3, 1}},
                         Case{{37, 64, 16}, {1, 0, 2}, {1, 2, 0}}}) {
    SCOPED_TRACE(::testing::Message() << "rank " << cs.dims.size());
    std::unique_ptr<Graph> g = net(cs.dims, cs.qv, cs.kt, false);
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
    int matmuls = 0;
    for (const Node* node : g->nodes()) {
      EXPECT_NE(node->op(), "Transpose") << PrintGraph(*g);
      if (node->op() != "MatMul") continue;
      ++matmuls;
      EXPECT_EQ(node->input(node->name() == "scores" ? 0 : 1), g->inputs()[0]);
    }
    EXPECT_EQ(matmuls, 2);
    EXPECT_EQ(g->outputs()[0]->producer()->GetInts("kiln.c_perm"), cs.qv);
    // The interpreter runs the strided product through the kernels' plain loop.
    auto input = Random(cs.dims, 87);
    auto fused_run = RunGraph(*g, {*input});
    auto plain_run = RunGraph(*net(cs.dims, cs.qv, cs.kt, false), {*input});
    ASSERT_TRUE(fused_run.ok()) << fused_run.status();
    ASSERT_TRUE(plain_run.ok()) << plain_run.status();
    ASSERT_EQ((*fused_run)[0].dims(), (*plain_run)[0].dims());
    for (int64_t i = 0; i < (*plain_run)[0].num_elements(); ++i) {
      ASSERT_NEAR((*fused_run)[0].data_as<float>()[i], (*plain_run)[0].data_as<float>()[i], 1e-5) << i;
    }
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference(net(cs.dims, cs.qv, cs.kt, false), net(cs.dims, cs.qv, cs.kt, false),
                                    kDefaultPipeline, target),
                1e-5);
    }
  }
  std::unique_ptr<Graph> g = net({37, 6, 24}, {1, 0, 2}, {1, 2, 0}, true);
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
  for (const Node* node : g->nodes()) {
    if (node->name() == "scores") EXPECT_FALSE(node->has_attr("kiln.a_perm")) << PrintGraph(*g);
  }
  // Nor in a graph with a run-time shape anywhere (its glue completes a MatMul's shape from
  // the operands as they lie).
  std::unique_ptr<Graph> dynamic = net({37, 6, 24}, {1, 0, 2}, {1, 2, 0}, false);
  TensorType runtime;
  runtime.dtype = DType::kFloat32;
  runtime.has_shape = true;
  runtime.shape = {Dim::Symbolic("n"), Dim::Known(4)};
  Value* d = dynamic->AddValue("d", runtime);
  dynamic->AddInput(d);
  Node* neg = dynamic->AddNode("Neg", "neg", {d}, {"nd"}, 13);
  neg->output(0)->set_type(runtime);
  dynamic->AddOutput(neg->output(0));
  ASSERT_TRUE(RunPipeline(*dynamic, "fuse", {}, ctx).ok());
  int transposes = 0;
  for (const Node* node : dynamic->nodes()) transposes += node->op() == "Transpose";
  EXPECT_EQ(transposes, 4) << PrintGraph(*dynamic);
}

// Three MobileNet-style inverted residual blocks on x[2, 24, 13, 11]: pointwise expand,
// depthwise, pointwise project; channel counts that leave a last block of 16 partly
// padding (24, 40, 36, 20) and fill output-block groups of 4 plus 1, 3 and 2; 143 and 42
// pixels (tiles plus leftovers); activations in registers (Clip, Relu) and after (Sigmoid,
// HardSwish); a residual into the first projection; squeeze-and-excitation in the second
// block; 3x3 and 5x5 windows, stride 2, and lopsided padding. With `stem`, x is
// [2, 3, 26, 21] and a 3x3 stride-2 Conv to 24 channels (Clip) comes first.
std::unique_ptr<Graph> InvertedResidualNet(bool stem) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, stem ? std::vector<int64_t>{2, 3, 26, 21}
                                                                       : std::vector<int64_t>{2, 24, 13, 11}));
  g->AddInput(x);
  uint32_t seed = 300;
  auto conv = [&](Value* in, int64_t c, int64_t oc, int64_t k, int64_t stride, std::vector<int64_t> pads,
                  const std::string& act, const std::string& name) {
    const bool depthwise = k > 1 && c == oc && name != "stem";
    // Weights scaled so every layer's output keeps a magnitude near 1.
    const float scale = 1.0f / std::sqrt(static_cast<float>(depthwise ? k * k : c * k * k));
    Node* n = g->AddNode("Conv", name,
                         {in, g->AddConstant(name + ".w", Random({oc, depthwise ? 1 : c, k, k}, seed++, scale)),
                          g->AddConstant(name + ".b", Random({oc}, seed++, 0.3f))},
                         {name + ".y"}, 13);
    if (depthwise) n->mutable_attrs()["group"] = c;
    n->mutable_attrs()["strides"] = std::vector<int64_t>{stride, stride};
    n->mutable_attrs()["pads"] = pads;
    Value* y = n->output(0);
    if (act == "Clip") {
      y = g->AddNode("Clip", name + ".act",
                     {y, ScalarConstant(*g, name + ".lo", 0.f), ScalarConstant(*g, name + ".hi", 6.f)}, {name + ".a"},
                     13)
              ->output(0);
    } else if (!act.empty()) {
      y = g->AddNode(act, name + ".act", {y}, {name + ".a"}, 13)->output(0);
    }
    return y;
  };
  const std::vector<int64_t> none = {0, 0, 0, 0};
  if (stem) x = conv(x, 3, 24, 3, 2, {1, 1, 1, 1}, "Clip", "stem");
  Value* a = conv(x, 24, 72, 1, 1, none, "Clip", "a.expand");
  a = conv(a, 72, 72, 3, 1, {1, 1, 1, 1}, "Clip", "a.dw");
  a = conv(a, 72, 24, 1, 1, none, "", "a.project");
  a = g->AddNode("Add", "a.residual", {a, x}, {"a.out"}, 13)->output(0);
  Value* b = conv(a, 24, 40, 1, 1, none, "Relu", "b.expand");
  b = conv(b, 40, 40, 5, 2, {2, 2, 2, 2}, "Relu", "b.dw");
  // Squeeze-and-excitation (EfficientNet's): pool, two 1x1 convs, scale b's channels.
  Value* e = g->AddNode("GlobalAveragePool", "b.pool", {b}, {"b.pooled"}, 13)->output(0);
  e = conv(e, 40, 10, 1, 1, none, "Relu", "b.squeeze");
  e = conv(e, 10, 40, 1, 1, none, "Sigmoid", "b.excite");
  b = g->AddNode("Mul", "b.scale", {b, e}, {"b.scaled"}, 13)->output(0);
  b = conv(b, 40, 20, 1, 1, none, "", "b.project");
  Value* c = conv(b, 20, 36, 1, 1, none, "Sigmoid", "c.expand");
  c = conv(c, 36, 36, 3, 1, {1, 0, 0, 1}, "HardSwish", "c.dw");
  c = conv(c, 36, 20, 1, 1, none, "", "c.project");
  return WithOutput(std::move(g), c);
}

// layout runs the whole chain blocked, with one layout change at each end (none at the
// start when a stem conv reads the image and writes blocked), and the result matches the
// plain graph: in the interpreter (the blocked kernels' reference loops) and in artifacts
// for AVX2 and AVX-512 (their register-blocked kernels), on 1 and 2 threads.
void CheckBlockedChain(bool stem) {
  SCOPED_TRACE(stem ? "with a stem" : "from a 24-channel input");
  std::unique_ptr<Graph> g = InvertedResidualNet(stem);
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, kDefaultPipeline, {}, ctx).ok());
  std::map<std::string, int> ops;
  for (const Node* node : g->nodes()) ++ops[node->op()];
  EXPECT_EQ(ops["kiln.BlockedConv"], stem ? 12 : 11) << PrintGraph(*g);
  EXPECT_EQ(ops["kiln.BlockedMean"], 1) << PrintGraph(*g);
  EXPECT_EQ(ops["kiln.BlockedScale"], 1) << PrintGraph(*g);
  EXPECT_EQ(ops["kiln.ToBlocked"], stem ? 0 : 1) << PrintGraph(*g);
  EXPECT_EQ(ops["kiln.FromBlocked"], 1) << PrintGraph(*g);
  EXPECT_EQ(g->num_nodes(), 15u) << PrintGraph(*g);  // nothing else
  EXPECT_EQ(ops["Add"], 0) << PrintGraph(*g);        // the residual is in a.project's epilogue

  auto input = Random(g->inputs()[0]->type().StaticDims(), 301);
  auto blocked = RunGraph(*g, {*input});
  auto plain = RunGraph(*InvertedResidualNet(stem), {*input});
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  double error = 0, scale = 0;
  for (int64_t i = 0; i < (*plain)[0].num_elements(); ++i) {
    error = std::max(error, std::fabs(double((*blocked)[0].data_as<float>()[i]) - (*plain)[0].data_as<float>()[i]));
    scale = std::max(scale, std::fabs(double((*plain)[0].data_as<float>()[i])));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(error / scale, 1e-5);
  for (const std::string& target : TileTargets()) {
    SCOPED_TRACE(target);
    EXPECT_LT(CompiledVsReference(InvertedResidualNet(stem), InvertedResidualNet(stem), kDefaultPipeline, target),
              1e-5);
  }
}

TEST(PassTest, LayoutRunsConvChainsBlocked) {
  CheckBlockedChain(false);
  CheckBlockedChain(true);
}

// Two ResNet bottlenecks, x[2, 256, 4, 4] -> 1x1 (256 -> 64, ReLU) -> 3x3 (64 -> 64, ReLU)
// -> 1x1 (64 -> 256) + the block's input -> ReLU. The first block's expand and the second's
// reduce and expand join into one run through the residual (70 multiply-adds per element of
// the tensors it changes: x, two 3x3 results in, a reduce result and the output out); the
// first reduce alone would change x and its result for 51.
std::unique_ptr<Graph> BottleneckNet() {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {2, 256, 4, 4}));
  g->AddInput(x);
  uint32_t seed = 400;
  auto conv = [&](Value* in, int64_t c, int64_t oc, int64_t k, const std::string& name, Value* residual) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c * k * k));
    Node* n = g->AddNode("Conv", name,
                         {in, g->AddConstant(name + ".w", Random({oc, c, k, k}, seed++, scale)),
                          g->AddConstant(name + ".b", Random({oc}, seed++, 0.3f))},
                         {name + ".y"}, 13);
    n->mutable_attrs()["pads"] = std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2};
    Value* y = n->output(0);
    if (residual != nullptr) y = g->AddNode("Add", name + ".add", {y, residual}, {name + ".sum"}, 13)->output(0);
    return g->AddNode("Relu", name + ".act", {y}, {name + ".a"}, 13)->output(0);
  };
  for (const std::string block : {"b1", "b2"}) {
    Value* reduced = conv(x, 256, 64, 1, block + ".reduce", nullptr);
    Value* mixed = conv(reduced, 64, 64, 3, block + ".mix", nullptr);
    x = conv(mixed, 64, 256, 1, block + ".expand", x);
  }
  return WithOutput(std::move(g), x);
}

// dense-runs=on: a run with no depthwise conv that does enough work per changed element
// (the bottlenecks' 1x1 convs) runs blocked, its 3x3 convs between layout changes, and
// computes what the plain graph does on every tile target; off (the default), it stays NCHW.
TEST(PassTest, LayoutDenseRunsBlockBottlenecks) {
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "dense-runs=on" : "dense-runs=off");
    const std::string pipeline = on ? "fuse,dce,layout{dense-runs=on}" : "fuse,dce,layout";
    std::unique_ptr<Graph> g = BottleneckNet();
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, pipeline, {}, ctx).ok());
    std::map<std::string, int> ops;
    for (const Node* node : g->nodes()) ++ops[node->op()];
    EXPECT_EQ(ops["kiln.BlockedConv"], on ? 3 : 0) << PrintGraph(*g);
    EXPECT_EQ(ops["Conv"], on ? 3 : 6) << PrintGraph(*g);
    EXPECT_EQ(ops["kiln.ToBlocked"], on ? 3 : 0) << PrintGraph(*g);
    EXPECT_EQ(ops["kiln.FromBlocked"], on ? 2 : 0) << PrintGraph(*g);
  }
  for (const std::string& target : TileTargets()) {
    SCOPED_TRACE(target);
    EXPECT_LT(CompiledVsReference(BottleneckNet(), BottleneckNet(), "fuse,dce,layout{dense-runs=on}", target), 1e-5);
  }
  // A squeeze-sized run (two 1x1 convs of 16 channels over 81 positions: 16 multiply-adds
  // per changed element) stays NCHW even so.
  std::unique_ptr<Graph> small = ResidualNet(1, 16, 16, 9, 9, Residual::kShortcutConv, "Relu");
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*small, "fuse,dce,layout{dense-runs=on}", {}, ctx).ok());
  for (const Node* node : small->nodes()) EXPECT_EQ(node->op().rfind("kiln.", 0), std::string::npos);
}

// The driver turns dense-runs on for targets with AVX-512 and leaves it off elsewhere, and
// a pipeline that sets it keeps its choice.
TEST(PassTest, PipelineForTurnsDenseRunsOnWithAvx512) {
  for (const auto& [preset, layout] : std::vector<std::pair<std::string, std::string>>{
           {"znver4", "layout{dense-runs=on}"}, {"x86-64-v3", "layout"}, {"aarch64", "layout"}}) {
    SCOPED_TRACE(preset);
    v1::CompileSpec spec;
    spec.mutable_target()->set_preset(preset);
    *spec.mutable_target() = *ResolveTarget(spec.target());
    absl::StatusOr<Pipeline> pipeline = PipelineFor(spec);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    EXPECT_THAT(PrintPipeline(*pipeline), HasSubstr("," + layout + ",plan-memory"));
    for (const std::string choice : {"on", "off"}) {
      spec.set_pipeline("fuse,layout{dense-runs=" + choice + "},plan-memory");
      EXPECT_EQ(PrintPipeline(*PipelineFor(spec)), "fuse,layout{dense-runs=" + choice + "},plan-memory");
    }
  }
}

// Runs without a depthwise conv (ResNet's) while dense-runs is off, and runs with too few
// convs for the layout changes they need (a lone depthwise conv), stay in NCHW.
TEST(PassTest, LayoutLeavesShortOrPointwiseRunsAlone) {
  for (int which = 0; which < 2; ++which) {
    std::unique_ptr<Graph> g = which == 0 ? ResidualNet(1, 16, 16, 9, 9, Residual::kShortcutConv, "Relu")
                                          : DepthwiseNet(16, 9, 9, 3, 1, {1, 1, 1, 1});
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "fuse,dce,layout", {}, ctx).ok());
    for (const Node* node : g->nodes()) EXPECT_EQ(node->op().rfind("kiln.", 0), std::string::npos) << PrintGraph(*g);
  }
}

// --tune: the first tuning of a shape measures every candidate and writes the cache, the
// second reads it back without measuring, a zero budget leaves the node untuned, and each
// GEMM job width a tuner may pick computes the same result.
// The kernel contract: the fuse pass names the activation, the Conv lowering maps the
// name into kiln_conv_params, and a name it does not know is an error naming the node.
TEST(KernelContractTest, ActivationNameReachesTheParameterStruct) {
  std::unique_ptr<Graph> g = EpilogueNet(3, 1, "Relu");
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
  Node* conv = g->nodes()[0];
  ASSERT_EQ(conv->GetString("kiln.activation", ""), "relu");
  absl::StatusOr<KernelCall> call = FindOp("Conv")->lower(*conv);
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->params.size_bytes(), static_cast<int64_t>(sizeof(kiln_conv_params)));
  const kiln_conv_params params = call->params.Get<kiln_conv_params>();
  EXPECT_GE(params.activation.code, 0);
  EXPECT_EQ(params.window.rank, 2);
  EXPECT_EQ(params.window.kernel[0], 3);
  EXPECT_EQ(params.group, 1);

  conv->mutable_attrs().erase("kiln.activation");
  call = FindOp("Conv")->lower(*conv);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->params.Get<kiln_conv_params>().activation.code, -1);

  conv->mutable_attrs()["kiln.activation"] = std::string("swishy");
  call = FindOp("Conv")->lower(*conv);
  ASSERT_FALSE(call.ok());
  EXPECT_NE(call.status().message().find("'swishy'"), std::string::npos) << call.status();
  EXPECT_NE(call.status().message().find("conv"), std::string::npos) << call.status();
}

TEST(TuneTest, MeasuresOnceThenReadsTheCache) {
  const WinogradCase shape{1, 16, 32, 20, 20, {1, 1, 1, 1}, true, 1e-5};
  const std::string cache = "/tmp/kiln-unit-tune-" + std::to_string(getpid()) + ".tsv";
  auto target = ResolveTarget("host");
  ASSERT_TRUE(target.ok());
  TuneOptions options;
  options.enabled = true;
  options.cache_path = cache;
  options.iterations = 2;
  auto tuned_graph = [&]() {
    std::unique_ptr<Graph> g = WinogradNet(shape);
    PassContext ctx;
    EXPECT_TRUE(RunPipeline(*g, kDefaultPipeline, {}, ctx).ok());
    return g;
  };
  std::unique_ptr<Graph> first = tuned_graph();
  auto measured = TuneGraph(*first, *target, options);
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_EQ(measured->measured, 1);
  ASSERT_EQ(measured->decisions.size(), 1u);
  const TuneDecision& d = measured->decisions[0];
  EXPECT_NE(d.timings.find("winograd="), std::string::npos) << d.timings;
  EXPECT_NE(d.timings.find("gemm256="), std::string::npos) << d.timings;  // 400 positions fill 256-wide jobs
  EXPECT_EQ(first->nodes()[0]->GetString("kiln.algorithm", ""), d.choice);

  std::unique_ptr<Graph> second = tuned_graph();
  auto cached = TuneGraph(*second, *target, options);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(cached->measured, 0);
  EXPECT_EQ(cached->from_cache, 1);
  EXPECT_EQ(second->nodes()[0]->GetString("kiln.algorithm", ""), d.choice);
  std::remove(cache.c_str());

  options.budget_seconds = 0;
  std::unique_ptr<Graph> third = tuned_graph();
  auto untuned = TuneGraph(*third, *target, options);
  ASSERT_TRUE(untuned.ok()) << untuned.status();
  EXPECT_EQ(untuned->over_budget, 1);
  EXPECT_TRUE(untuned->decisions.empty());
  EXPECT_FALSE(third->nodes()[0]->has_attr("kiln.algorithm"));
  std::remove(cache.c_str());

  for (const std::string choice : {"gemm64", "gemm256"}) {
    SCOPED_TRACE(choice);
    std::unique_ptr<Graph> g = WinogradNet(shape);
    g->nodes()[0]->mutable_attrs()["kiln.algorithm"] = choice;
    auto call = LowerForArtifact(*FindOp("Conv"), *g->nodes()[0]);
    ASSERT_TRUE(call.ok());
    EXPECT_EQ(call->kernel, "conv");
    EXPECT_EQ(call->params.Get<kiln_conv_params>().job_cols, std::stoi(choice.substr(4)));
    EXPECT_LT(CompiledVsReference(WinogradNet(shape), std::move(g), kDefaultPipeline), 1e-5);
  }
}

// x[rows,37] -> Gemm(x, B, c) with B [37,N] or transposed [N,37], alpha 0.5, beta 2, and C
// of `c_dims` (none when empty). `c_computed`: C computed from x (beta 1), [1,N] as
// ReduceMean(x over rows) x W or [rows,1] as ReduceMean(x over columns).
std::unique_ptr<Graph> GemmNet(int64_t rows, int64_t n, bool trans_b, std::vector<int64_t> c_dims,
                               bool c_computed = false) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {rows, 37}));
  g->AddInput(x);
  std::vector<Value*> inputs = {
      x, g->AddConstant("B", Random(trans_b ? std::vector<int64_t>{n, 37} : std::vector<int64_t>{37, n}, 31))};
  if (c_computed) {
    const bool row = c_dims[0] == 1;
    Node* mean = g->AddNode("ReduceMean", "mean", {x}, {"m"}, 13);
    mean->mutable_attrs()["axes"] = std::vector<int64_t>{row ? 0 : 1};
    Value* c = mean->output(0);
    if (row) c = g->AddNode("MatMul", "mm", {c, g->AddConstant("w", Random({37, n}, 33))}, {"c"}, 13)->output(0);
    inputs.push_back(c);
  } else if (!c_dims.empty()) {
    inputs.push_back(g->AddConstant("c", Random(c_dims, 32)));
  }
  Node* gemm = g->AddNode("Gemm", "fc", inputs, {"y"}, 13);
  gemm->mutable_attrs()["transB"] = int64_t{trans_b ? 1 : 0};
  gemm->mutable_attrs()["alpha"] = 0.5;
  gemm->mutable_attrs()["beta"] = c_computed ? 1.0 : 2.0;
  return WithOutput(std::move(g), gemm->output(0));
}

// The one-row path.
std::unique_ptr<Graph> GemvNet(bool trans_b) { return GemmNet(1, 29, trans_b, {29}); }

TEST(CodegenTest, OneRowGemmMatchesInterpreter) {
  for (bool trans_b : {false, true}) {
    SCOPED_TRACE(trans_b ? "transB" : "B");
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference(GemvNet(trans_b), GemvNet(trans_b), "fold-constants", target), 1e-5);
    }
  }
}

// A Gemm of a constant B with N a multiple of 16 runs as MatMul's kernel on B pre-packed,
// alpha folded into it and beta * C as its bias, for each C that is a row of N (or none, or
// a scalar); a C of other shapes keeps the Gemm kernel.
TEST(CodegenTest, PackedGemmMatchesInterpreter) {
  struct Case {
    std::vector<int64_t> c_dims;
    bool c_computed;
    std::string kernel;
  };
  for (const Case& c : std::vector<Case>{{{48}, false, "matmul"},
                                         {{1, 48}, false, "matmul"},
                                         {{1}, false, "matmul"},
                                         {{}, false, "matmul"},
                                         {{1, 48}, true, "matmul"},
                                         {{5, 48}, false, "gemm"},
                                         {{5, 1}, true, "gemm"}}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "C [" << absl::StrJoin(c.c_dims, ",") << "]"
                                        << (c.c_computed ? " computed" : "") << (trans_b ? " transB" : ""));
      std::unique_ptr<Graph> g = GemmNet(5, 48, trans_b, c.c_dims, c.c_computed);
      auto call = LowerForArtifact(*FindOp("Gemm"), *g->nodes().back());
      ASSERT_TRUE(call.ok()) << call.status();
      EXPECT_EQ(call->kernel, c.kernel);
      for (const std::string& target : TileTargets()) {
        SCOPED_TRACE(target);
        EXPECT_LT(CompiledVsReference(GemmNet(5, 48, trans_b, c.c_dims, c.c_computed),
                                      GemmNet(5, 48, trans_b, c.c_dims, c.c_computed), "fold-constants", target),
                  1e-5);
      }
    }
  }
}

// More rows than the few-row path takes, B an activation (x itself) under transB: the Gemm
// kernel's blocked path packs B^T on every call (gemm::PackTransposedColumns), in partial
// blocks of columns (40 = 16 + 16 + 8) and of K (70 = 4 x 16 + 6).
TEST(CodegenTest, GemmOfActivationsTransBMatchesInterpreter) {
  auto net = [] {
    auto g = std::make_unique<Graph>();
    Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {40, 70}));
    g->AddInput(x);
    Node* gemm = g->AddNode("Gemm", "xxt", {x, x}, {"y"}, 13);
    gemm->mutable_attrs()["transB"] = int64_t{1};
    gemm->mutable_attrs()["alpha"] = 0.5;
    return WithOutput(std::move(g), gemm->output(0));
  };
  std::unique_ptr<Graph> g = net();
  auto call = LowerForArtifact(*FindOp("Gemm"), *g->nodes().back());
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->kernel, "gemm");
  for (const std::string& target : TileTargets()) {
    SCOPED_TRACE(target);
    EXPECT_LT(CompiledVsReference(net(), net(), kDefaultPipeline, target), 1e-5);
  }
}

// More rows than the few-row path takes, N off the panels (a classifier head at batch 17
// and 40): a constant transB weight is stored transposed, [K, N], and run with transB = 0
// (ops/nn_ops.cc LowerGemmTransposedWeight).
TEST(CodegenTest, ManyRowGemmWithATransposedWeightMatchesInterpreter) {
  for (int64_t rows : {17, 40}) {
    SCOPED_TRACE(rows);
    std::unique_ptr<Graph> g = GemmNet(rows, 29, true, {29});
    auto call = LowerForArtifact(*FindOp("Gemm"), *g->nodes().back());
    ASSERT_TRUE(call.ok()) << call.status();
    EXPECT_EQ(call->params.Get<kiln_gemm_params>().trans_b, 0);
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(
          CompiledVsReference(GemmNet(rows, 29, true, {29}), GemmNet(rows, 29, true, {29}), "fold-constants", target),
          1e-5);
    }
  }
}

// A Gemm of a few rows with B transposed and N off the 16-column panels (a classifier
// head at batch 8) runs the Gemm kernel's dot products; C of each broadcast shape.
TEST(CodegenTest, FewRowsGemmMatchesInterpreter) {
  for (int64_t rows : {2, 5, 16, 17}) {
    for (const std::vector<int64_t>& c_dims : std::vector<std::vector<int64_t>>{{29}, {rows, 29}, {rows, 1}, {}}) {
      SCOPED_TRACE(::testing::Message() << rows << " rows, C [" << absl::StrJoin(c_dims, ",") << "]");
      EXPECT_LT(CompiledVsReference(GemmNet(rows, 29, true, c_dims), GemmNet(rows, 29, true, c_dims), "fold-constants"),
                1e-5);
    }
  }
}

// x[4,24,7,7] -> GlobalAveragePool -> Conv 1x1 to OC channels (+ bias) -> Relu:
// squeeze-and-excitation's first conv, which runs as one MatMul over the batch (B in panels
// for OC = 48, stored transposed for OC = 40); at batch 1 it stays a conv.
TEST(CodegenTest, PooledPointConvMatchesReference) {
  for (int64_t batch : {4, 1}) {
    for (int64_t oc : {40, 48}) {
      SCOPED_TRACE(::testing::Message() << "batch " << batch << ", " << oc << " channels");
      auto make = [&]() {
        auto g = std::make_unique<Graph>();
        Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {batch, 24, 7, 7}));
        g->AddInput(x);
        Node* pool = g->AddNode("GlobalAveragePool", "pool", {x}, {"p"}, 13);
        Node* conv = g->AddNode(
            "Conv", "fc1",
            {pool->output(0), g->AddConstant("w", Random({oc, 24, 1, 1}, 71)), g->AddConstant("b", Random({oc}, 72))},
            {"c"}, 13);
        Node* relu = g->AddNode("Relu", "relu", {conv->output(0)}, {"y"}, 13);
        return WithOutput(std::move(g), relu->output(0));
      };
      std::unique_ptr<Graph> g = make();
      PassContext ctx;
      ASSERT_TRUE(RunPipeline(*g, kDefaultPipeline, {}, ctx).ok());
      const Node* conv = nullptr;
      for (const Node* node : g->nodes()) {
        if (node->op() == "Conv") conv = node;
      }
      ASSERT_NE(conv, nullptr);
      auto call = LowerForArtifact(*FindOp("Conv"), *conv);
      ASSERT_TRUE(call.ok()) << call.status();
      EXPECT_EQ(call->kernel, batch > 1 ? "matmul" : "conv");
      EXPECT_LT(CompiledVsReference(make(), make(), kDefaultPipeline), 1e-5);
    }
  }
}

// x[2,5,L] + 3 -> GlobalAveragePool (as [2,5,L/7,7] when L % 7 == 0), ReduceMean or ReduceMax
// over the last axis: the trailing-axes fast path, rows shorter and longer than 16.
std::unique_ptr<Graph> ReduceNet(const std::string& op, int64_t len) {
  auto g = std::make_unique<Graph>();
  const bool pool = op == "GlobalAveragePool";
  std::vector<int64_t> dims = pool ? std::vector<int64_t>{2, 5, len / 7, 7} : std::vector<int64_t>{2, 5, len};
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, dims));
  g->AddInput(x);
  Node* shift = g->AddNode("Add", "shift", {x, ScalarConstant(*g, "three", 3.f)}, {"s"}, 13);
  Node* reduce = g->AddNode(op, "reduce", {shift->output(0)}, {"y"}, 13);
  if (!pool) reduce->mutable_attrs()["axes"] = std::vector<int64_t>{-1};
  return WithOutput(std::move(g), reduce->output(0));
}

TEST(CodegenTest, TrailingReductionsMatchInterpreter) {
  for (const std::string op : {"GlobalAveragePool", "ReduceMean", "ReduceMax"}) {
    for (int64_t len : {7, 63, 1001}) {
      SCOPED_TRACE(::testing::Message() << op << " over " << len);
      EXPECT_LT(CompiledVsReference(ReduceNet(op, len), ReduceNet(op, len), "fold-constants"), 1e-6);
    }
  }
}

// x[1,16,9,9] -> Conv (dense 3x3 or depthwise 3x3) -> Sigmoid and Mul: SiLU as EfficientNet
// writes it, fused into the Conv as one activation. (`combine` "Add": Sigmoid(c) + c, not
// SiLU, and the Conv's result has a second reader.) `gate` "HardSigmoid": HardSwish as
// MobileNetV3 writes it (alpha 1/6, `alpha` other than that: not HardSwish).
std::unique_ptr<Graph> SiluNet(bool depthwise, const std::string& combine = "Mul", const std::string& gate = "Sigmoid",
                               float alpha = 1.f / 6) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, 16, 9, 9}));
  g->AddInput(x);
  Node* conv =
      g->AddNode("Conv", "conv", {x, g->AddConstant("w", Random({16, depthwise ? 1 : 16, 3, 3}, 61))}, {"c"}, 13);
  conv->mutable_attrs()["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  if (depthwise) conv->mutable_attrs()["group"] = int64_t{16};
  Node* sigmoid = g->AddNode(gate, "sigmoid", {conv->output(0)}, {"s"}, 13);
  if (gate == "HardSigmoid") sigmoid->mutable_attrs()["alpha"] = alpha;
  Node* mul = g->AddNode(combine, "mul", {sigmoid->output(0), conv->output(0)}, {"y"}, 13);
  return WithOutput(std::move(g), mul->output(0));
}

TEST(PassTest, FuseFoldsSiluIntoConv) {
  for (bool depthwise : {false, true}) {
    SCOPED_TRACE(depthwise ? "depthwise" : "dense");
    std::unique_ptr<Graph> g = SiluNet(depthwise);
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
    ASSERT_EQ(g->num_nodes(), 1u);
    EXPECT_EQ(g->nodes()[0]->op(), "Conv");
    EXPECT_EQ(g->nodes()[0]->GetString("kiln.activation", ""), "silu");
    EXPECT_EQ(g->outputs()[0], g->nodes()[0]->output(0));
    EXPECT_LT(CompiledVsReference(SiluNet(depthwise), SiluNet(depthwise), kDefaultPipeline), 1e-5);
  }
  // Sigmoid(c) + c: the Sigmoid cannot become the Conv's activation (the Add reads c too).
  std::unique_ptr<Graph> g = SiluNet(false, "Add");
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
  for (const Node* node : g->nodes()) EXPECT_EQ(node->GetInt("kiln.activation", -1), -1) << PrintGraph(*g);
  EXPECT_LT(CompiledVsReference(SiluNet(false, "Add"), SiluNet(false, "Add"), kDefaultPipeline), 1e-5);
}

TEST(PassTest, FuseFoldsHardSwishIntoConv) {
  for (bool depthwise : {false, true}) {
    SCOPED_TRACE(depthwise ? "depthwise" : "dense");
    std::unique_ptr<Graph> g = SiluNet(depthwise, "Mul", "HardSigmoid");
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
    ASSERT_EQ(g->num_nodes(), 1u);
    EXPECT_EQ(g->nodes()[0]->GetString("kiln.activation", ""), "hard_swish");
    EXPECT_LT(CompiledVsReference(SiluNet(depthwise, "Mul", "HardSigmoid"), SiluNet(depthwise, "Mul", "HardSigmoid"),
                                  kDefaultPipeline),
              1e-5);
  }
  // HardSigmoid's default slope 0.2: c * HardSigmoid(c) is not HardSwish.
  std::unique_ptr<Graph> g = SiluNet(false, "Mul", "HardSigmoid", 0.2f);
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
  for (const Node* node : g->nodes()) EXPECT_NE(node->GetString("kiln.activation", ""), "hard_swish");
  EXPECT_LT(CompiledVsReference(SiluNet(false, "Mul", "HardSigmoid", 0.2f), SiluNet(false, "Mul", "HardSigmoid", 0.2f),
                                kDefaultPipeline),
            1e-5);
}

// Squeeze-and-excitation as EfficientNet writes it, then a 1x1 Conv:
// x[n,16,6,5] -> GlobalAveragePool -> Conv 1x1 -> Sigmoid -> Mul(x, .) -> Conv 1x1 (16 -> 12,
// bias optional, stride 1 or 2). With n = 2 each image has its own scale. `residual`: the
// projection's result plus a shortcut (a 1x1 Conv of x computed first), as EfficientNet's
// blocks end.
std::unique_ptr<Graph> SqueezeExciteNet(int64_t n, bool bias, int64_t stride, int64_t h = 6, int64_t w = 5,
                                        bool residual = false) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {n, 16, h, w}));
  g->AddInput(x);
  Node* shortcut = nullptr;
  if (residual) {
    shortcut = g->AddNode("Conv", "shortcut", {x, g->AddConstant("ws", Random({12, 16, 1, 1}, 75))}, {"r"}, 13);
    shortcut->mutable_attrs()["strides"] = std::vector<int64_t>{stride, stride};
  }
  Node* pool = g->AddNode("GlobalAveragePool", "pool", {x}, {"p"}, 13);
  Node* excite =
      g->AddNode("Conv", "excite", {pool->output(0), g->AddConstant("we", Random({16, 16, 1, 1}, 71))}, {"e"}, 13);
  Node* sigmoid = g->AddNode("Sigmoid", "sigmoid", {excite->output(0)}, {"s"}, 13);
  Node* mul = g->AddNode("Mul", "mul", {x, sigmoid->output(0)}, {"m"}, 13);
  std::vector<Value*> inputs = {mul->output(0), g->AddConstant("wp", Random({12, 16, 1, 1}, 72))};
  if (bias) inputs.push_back(g->AddConstant("bp", Random({12}, 73)));
  Node* project = g->AddNode("Conv", "project", inputs, {"proj"}, 13);
  project->mutable_attrs()["strides"] = std::vector<int64_t>{stride, stride};
  Value* y = project->output(0);
  if (residual) y = g->AddNode("Add", "add", {y, shortcut->output(0)}, {"y"}, 13)->output(0);
  return WithOutput(std::move(g), y);
}

// x[2,5,48] -> LayerNorm over the last axis as PyTorch exports it before opset 17:
// ReduceMean, Sub, Pow(2) (or Mul(d, d)), ReduceMean, Add eps, Sqrt, Div, then (affine)
// Mul gamma, Add beta. `axis` other than -1 makes it a pattern the pass must leave alone.
std::unique_ptr<Graph> LayerNormNet(bool affine, bool pow, int64_t axis = -1) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {2, 5, 48}));
  g->AddInput(x);
  Node* mean = g->AddNode("ReduceMean", "mean", {x}, {"m"}, 13);
  mean->mutable_attrs()["axes"] = std::vector<int64_t>{axis};
  Node* sub = g->AddNode("Sub", "sub", {x, mean->output(0)}, {"d"}, 13);
  Node* square = pow ? g->AddNode("Pow", "pow", {sub->output(0), ScalarConstant(*g, "two", 2.f)}, {"p"}, 13)
                     : g->AddNode("Mul", "square", {sub->output(0), sub->output(0)}, {"p"}, 13);
  Node* var = g->AddNode("ReduceMean", "var", {square->output(0)}, {"v"}, 13);
  var->mutable_attrs()["axes"] = std::vector<int64_t>{axis};
  Node* add = g->AddNode("Add", "eps", {var->output(0), ScalarConstant(*g, "eps", 1e-5f)}, {"a"}, 13);
  Node* root = g->AddNode("Sqrt", "sqrt", {add->output(0)}, {"s"}, 13);
  Node* y = g->AddNode("Div", "div", {sub->output(0), root->output(0)}, {"n"}, 13);
  if (affine) {
    y = g->AddNode("Mul", "gamma", {y->output(0), g->AddConstant("g", Random({48}, 61))}, {"gy"}, 13);
    y = g->AddNode("Add", "beta", {g->AddConstant("b", Random({48}, 62)), y->output(0)}, {"y"}, 13);
  }
  return WithOutput(std::move(g), y->output(0));
}

TEST(PassTest, FuseFoldsLayerNormIntoOneKernel) {
  for (bool affine : {false, true}) {
    for (bool pow : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (affine ? "affine" : "plain") << (pow ? ", Pow" : ", Mul"));
      std::unique_ptr<Graph> g = LayerNormNet(affine, pow);
      PassContext ctx;
      ASSERT_TRUE(RunPipeline(*g, "fuse", {}, ctx).ok());
      ASSERT_EQ(g->num_nodes(), 1u) << PrintGraph(*g);
      const Node* norm = g->nodes()[0];
      EXPECT_EQ(norm->op(), "LayerNormalization");
      EXPECT_EQ(norm->inputs().size(), affine ? 3u : 2u);
      EXPECT_NEAR(norm->GetFloat("epsilon", 0), 1e-5, 1e-12);
      // The fused kernel (f32, vectorized in the artifact) against the unfused graph.
      EXPECT_LT(CompiledVsReference(LayerNormNet(affine, pow), LayerNormNet(affine, pow), kDefaultPipeline), 1e-5);
    }
  }
  // A mean over another axis is not a LayerNorm over the last one.
  std::unique_ptr<Graph> other = LayerNormNet(true, true, 1);
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*other, "fuse", {}, ctx).ok());
  EXPECT_EQ(PrintGraph(*other).find("LayerNormalization"), std::string::npos);
}

// fuse folds the Mul into the project Conv as an input scale; the interpreter runs the
// fused Conv exactly as the two nodes (the product rounded, then the sum), and the artifact
// (which scales as it packs) matches it.
// With a residual the Conv takes that too (EfficientNet's projections).
TEST(PassTest, FuseFoldsChannelScaleIntoConv) {
  for (int64_t n : {1, 2}) {
    for (bool bias : {true, false}) {
      for (bool residual : {false, true}) {
        const int64_t stride = bias ? 1 : 2;
        SCOPED_TRACE(::testing::Message() << "batch " << n << (bias ? ", bias" : ", no bias") << ", stride " << stride
                                          << (residual ? ", residual" : ""));
        auto net = [&] { return SqueezeExciteNet(n, bias, stride, 6, 5, residual); };
        std::unique_ptr<Graph> g = net();
        PassContext ctx;
        auto fuse = RunPipeline(*g, "fuse", {}, ctx);
        ASSERT_TRUE(fuse.ok()) << fuse.status();
        const Node* project = g->nodes().back();
        ASSERT_EQ(project->op(), "Conv");
        EXPECT_EQ(project->GetInt("kiln.input_scale", 0), 1);
        EXPECT_EQ(project->GetInt("kiln.residual", 0), residual ? 1 : 0);
        ASSERT_EQ(project->inputs().size(), residual ? 5u : 4u);
        EXPECT_EQ(project->input(0), g->inputs()[0]);
        for (const Node* node : g->nodes()) EXPECT_TRUE(node->op() != "Mul" && node->op() != "Add") << PrintGraph(*g);
        auto input = Random({n, 16, 6, 5}, 74);
        auto fused = RunGraph(*g, {*input});
        auto plain = RunGraph(*net(), {*input});
        ASSERT_TRUE(fused.ok()) << fused.status();
        ASSERT_TRUE(plain.ok()) << plain.status();
        const Tensor& a = (*fused)[0];
        const Tensor& b = (*plain)[0];
        ASSERT_EQ(a.num_elements(), b.num_elements());
        for (int64_t i = 0; i < a.num_elements(); ++i) ASSERT_EQ(a.data_as<float>()[i], b.data_as<float>()[i]) << i;
        EXPECT_LT(CompiledVsReference(net(), net(), kDefaultPipeline), 1e-5);
      }
    }
  }
  // --tune times such a Conv alone, feeding both its computed inputs (X and the scale).
  std::unique_ptr<Graph> g = SqueezeExciteNet(1, true, 1, 12, 12);
  PassContext ctx;
  ASSERT_TRUE(RunPipeline(*g, kDefaultPipeline, {}, ctx).ok());
  auto target = ResolveTarget("host");
  ASSERT_TRUE(target.ok());
  TuneOptions options;
  options.enabled = true;
  options.iterations = 2;  // no cache_path: nothing read or written
  auto tuned = TuneGraph(*g, *target, options);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  ASSERT_EQ(tuned->measured, 1);
  EXPECT_NE(tuned->decisions[0].timings.find("gemm128="), std::string::npos) << tuned->decisions[0].timings;
}

// x[3,5,L] * 8 -> Softmax or LogSoftmax over the last axis: rows shorter than, equal to and
// longer than the vector width, with large logits so the max subtraction matters.
std::unique_ptr<Graph> SoftmaxNet(const std::string& op, int64_t len) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {3, 5, len}));
  g->AddInput(x);
  Node* scale = g->AddNode("Mul", "scale", {x, ScalarConstant(*g, "eight", 8.f)}, {"s"}, 13);
  Node* softmax = g->AddNode(op, "softmax", {scale->output(0)}, {"y"}, 13);
  softmax->mutable_attrs()["axis"] = int64_t{-1};
  return WithOutput(std::move(g), softmax->output(0));
}

TEST(CodegenTest, SoftmaxMatchesInterpreter) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int64_t len : {1, 7, 8, 130}) {
      if (len == 1 && std::string(op) == "LogSoftmax") continue;  // all zeros: nothing to compare
      SCOPED_TRACE(::testing::Message() << op << " over " << len);
      EXPECT_LT(CompiledVsReference(SoftmaxNet(op, len), SoftmaxNet(op, len), "fold-constants"), 1e-6);
    }
  }
}

// x[M,K] -> MatMul by a constant [K,N]: N picks the micro-kernel's tiles (full 16-column
// tiles, an 8-wide last tile for 1-8 columns, a 16-wide one for 9-15), M the row panels.
std::unique_ptr<Graph> MatMulNet(int64_t m, int64_t k, int64_t n) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {m, k}));
  g->AddInput(x);
  Node* mm = g->AddNode("MatMul", "mm", {x, g->AddConstant("w", Random({k, n}, 41, 0.3f))}, {"y"}, 13);
  return WithOutput(std::move(g), mm->output(0));
}

TEST(CodegenTest, MatMulTilesMatchInterpreter) {
  // N = 16 and 80 take B pre-packed in panels (and m = 250 more than one 240-row block); on
  // the wide tile 80 is two 32-column tiles and a 16-column one, 13 rows a 12-row tile and
  // one row, 250 rows a 240-row block and 10 rows; 33 and 49 end in partial tiles of both.
  for (const std::string& target : TileTargets()) {
    for (int64_t n : {5, 8, 9, 16, 17, 33, 49, 80}) {
      for (int64_t m : {int64_t{1}, int64_t{13}, n % 16 == 0 ? int64_t{250} : int64_t{2}}) {
        SCOPED_TRACE(::testing::Message() << target << ": " << m << " x 300 x " << n);
        EXPECT_LT(CompiledVsReference(MatMulNet(m, 300, n), MatMulNet(m, 300, n), "fold-constants", target), 1e-5);
      }
    }
    // K = 1024: A's rows 4 KiB apart, copied into panels block by block (four K blocks;
    // 250 rows: two row blocks, the last panel partly padding); 304 columns: a 256-column
    // chunk of B, then 48 (one 32-column tile and one 16-column one on the wide tile).
    for (int64_t m : {13, 250}) {
      for (int64_t n : {80, 304}) {
        SCOPED_TRACE(::testing::Message() << target << ": " << m << " x 1024 x " << n);
        EXPECT_LT(CompiledVsReference(MatMulNet(m, 1024, n), MatMulNet(m, 1024, n), "fold-constants", target), 1e-5);
      }
    }
  }
}

// A [.., M, K] times a 2-D B is one [(..)*M, K] product: torch's MultiheadAttention gives
// [seq, 1, width] (one row per batch entry), and a [2, 5, 3, K] A folds 30 rows; a 1-D B
// drops N. Each against the reference, on both tiles.
TEST(CodegenTest, MatMulOfBatchedAByOneMatrix) {
  for (const std::string& target : TileTargets()) {
    for (const auto& [a_dims, b_dims] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
             {{37, 1, 64}, {64, 48}}, {{2, 5, 3, 40}, {40, 17}}, {{4, 3, 40}, {40}}}) {
      SCOPED_TRACE(::testing::Message() << target << ": A rank " << a_dims.size() << ", B rank " << b_dims.size());
      auto make = [&]() {
        auto g = std::make_unique<Graph>();
        Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, a_dims));
        g->AddInput(x);
        Node* mm = g->AddNode("MatMul", "mm", {x, g->AddConstant("w", Random(b_dims, 43, 0.3f))}, {"y"}, 13);
        return WithOutput(std::move(g), mm->output(0));
      };
      EXPECT_LT(CompiledVsReference(make(), make(), "fold-constants", target), 1e-5);
    }
  }
}

// Pad in constant mode copies whole rows: padding and cropping (negative pads) on every
// axis, the last included, rows wholly in the padding, a non-zero value.
TEST(CodegenTest, ConstantPadRowsMatchReference) {
  for (const std::vector<int64_t>& pads : std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 1, 0, 2, 1},
                                                                            {1, 0, -1, 2, 0, 2, 1, -2},
                                                                            {0, 0, 0, -2, 0, 0, 0, -3},
                                                                            {0, 0, 0, 0, 0, 0, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << "pads " << pads[0] << "," << pads[1] << "," << pads[2] << "," << pads[3]
                                      << " / " << pads[4] << "," << pads[5] << "," << pads[6] << "," << pads[7]);
    auto make = [&]() {
      std::vector<int64_t> out = {3, 4, 5, 6};
      for (size_t d = 0; d < 4; ++d) out[d] += pads[d] + pads[d + 4];
      auto g = std::make_unique<Graph>();
      Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {3, 4, 5, 6}));
      g->AddInput(x);
      auto p = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{8});
      std::copy(pads.begin(), pads.end(), p->data_as<int64_t>());
      auto v = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{});
      v->data_as<float>()[0] = 2.5f;
      Node* pad = g->AddNode("Pad", "pad", {x, g->AddConstant("pads", p), g->AddConstant("value", v)}, {"y"}, 13);
      pad->output(0)->set_type(TensorType::Static(DType::kFloat32, out));
      return WithOutput(std::move(g), pad->output(0));
    };
    EXPECT_LT(CompiledVsReference(make(), make(), "fold-constants", "host"), 1e-6);
  }
}

// Transposes that move the last dim copy in tiles (8 x 8 register blocks inside): NCHW ->
// NHWC and back, a matrix's transpose under batch dims (attention's K^T, ViT's
// [seq, heads, 64] -> [heads, 64, seq]), sizes off the 32-element tile and the 8-element
// block, a reversal, and a Transpose keeping the last dim (the row copy). Exact.
TEST(CodegenTest, TransposesMatchReference) {
  const std::pair<std::vector<int64_t>, std::vector<int64_t>> cases[] = {
      {{2, 37, 9, 7}, {0, 2, 3, 1}}, {{1, 9, 7, 37}, {0, 3, 1, 2}}, {{3, 33, 70}, {0, 2, 1}},
      {{5, 40, 6}, {2, 1, 0}},       {{4, 5, 6, 7}, {2, 0, 1, 3}},  {{197, 12, 64}, {1, 2, 0}}};
  for (const auto& [dims, perm] : cases) {
    SCOPED_TRACE(::testing::Message() << dims.size() << "-D, perm starting " << perm[0] << "," << perm[1]);
    auto make = [&]() {
      std::vector<int64_t> out;
      for (int64_t p : perm) out.push_back(dims[p]);
      auto g = std::make_unique<Graph>();
      Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, dims));
      g->AddInput(x);
      Node* t = g->AddNode("Transpose", "t", {x}, {"y"}, 13);
      t->mutable_attrs()["perm"] = perm;
      t->output(0)->set_type(TensorType::Static(DType::kFloat32, out));
      return WithOutput(std::move(g), t->output(0));
    };
    EXPECT_EQ(CompiledVsReference(make(), make(), "fold-constants", "host"), 0.0);
  }
}

// The target picks the GEMM core's tile: AVX-512F the 12x32 one, AVX2 (and anything not
// x86, asked nothing) the 6x16 one (the artifact's report says which; compiling needs no
// such CPU).
TEST(CodegenTest, GemmTileFollowsTarget) {
  for (const auto& [spec, tile] : std::vector<std::pair<std::string, std::string>>{{"x86-64-v3", "6x16"},
                                                                                   {"x86-64-v4", "12x32"},
                                                                                   {"skylake-avx512", "12x32"},
                                                                                   {"x86-64", "6x16"},
                                                                                   {"aarch64", "6x16"}}) {
    SCOPED_TRACE(spec);
    std::unique_ptr<Graph> g = MatMulNet(13, 300, 80);
    auto artifact = GenerateFor(*g, spec);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    EXPECT_EQ(artifact->gemm_tile, tile);
  }
}

// The artifact's size breakdown: a 3x3 Conv lowered to Winograd reads a transformed copy
// of its weight (36 values per 9) and its bias as given; the parts sum to the artifact's
// bytes, the ELF overhead (headers, symbol table) being small.
TEST(CodegenTest, ArtifactSizeBreakdownSumsToTheArtifact) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, 8, 16, 16}));
  g->AddInput(x);
  Node* conv =
      g->AddNode("Conv", "conv",
                 {x, g->AddConstant("w", Random({16, 8, 3, 3}, 1)), g->AddConstant("b", Random({16}, 2))}, {"y"}, 13);
  conv->mutable_attrs()["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  g = WithOutput(std::move(g), conv->output(0));
  auto artifact = GenerateFor(*g, "x86-64-v3");
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  const ArtifactSize& size = artifact->size;
  const int64_t weight = 16 * 8 * 9 * 4, bias = 16 * 4, transformed = 36 * 16 * 8 * 4;
  EXPECT_EQ(size.weights_given, weight + bias);
  EXPECT_EQ(size.weights_added, transformed - weight);
  EXPECT_GE(size.weights_alignment, 0);
  EXPECT_LT(size.weights_alignment, 64);
  EXPECT_GT(size.code, 0);
  EXPECT_GT(size.tables, 0);
  EXPECT_GT(size.elf_overhead, 0);
  EXPECT_LT(size.elf_overhead, 64 << 10);
  EXPECT_EQ(size.total(), artifact->artifact_bytes);
  EXPECT_EQ(size.total(), static_cast<int64_t>(artifact->shared_object.size()));
}

TEST(TargetTest, PresetsAndErrors) {
  auto v3 = ResolveTarget("x86-64-v3");
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(v3->cpu, "x86-64-v3");
  auto custom = ResolveTarget("triple=aarch64-unknown-linux-gnu,cpu=neoverse-v1,features=+neon");
  ASSERT_TRUE(custom.ok()) << custom.status();
  EXPECT_FALSE(custom->is_host);
  auto bad = ResolveTarget("pentium-pro");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("unknown target 'pentium-pro'"), std::string::npos);
}

TEST(FrontendTest, GarbageIsAClearError) {
  ImportOptions options;
  options.model_label = "junk.onnx";
  auto g = ImportOnnxModel("this is not a protobuf \x01\x02", options);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(std::string(g.status().message()).find("junk.onnx"), std::string::npos) << g.status();
}

// Found by the importer fuzzer: libonnx's shape inference reads out of bounds on this
// LayerNormalization axis. The import must fail with a message, not crash.
TEST(FrontendTest, MalformedModelThatCrashesOnnxInferenceIsAnError) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("g");
  for (const char* name : {"X", "W", "B"}) {
    onnx::ValueInfoProto* in = graph->add_input();
    in->set_name(name);
    auto* tensor = in->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    if (std::string(name) == "X") tensor->mutable_shape()->add_dim()->set_dim_value(3);
    tensor->mutable_shape()->add_dim()->set_dim_value(4);
  }
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type("LayerNormalization");
  for (const char* name : {"X", "W", "B"}) node->add_input(name);
  node->add_output("Y");
  node->add_output("Mean");
  onnx::AttributeProto* axis = node->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(-1073741825);
  onnx::ValueInfoProto* out = graph->add_output();
  out->set_name("Y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  ImportOptions options;
  options.model_label = "fuzzed.onnx";
  auto g = ImportOnnxModel(model.SerializeAsString(), options);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(std::string(g.status().message()).find("fuzzed.onnx"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace kiln
