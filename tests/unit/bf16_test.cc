// Precision bf16 (kernels/bf16, ops/bf16_ops.cc, passes/bf16.cc): artifacts whose Conv,
// MatMul and Gemm run in bf16 against the f32 artifact on odd shapes (rows and columns that
// are not whole tiles, odd K, several K blocks, residual and activations in the epilogue,
// Winograd), on one and two threads; the lowering picks the bf16 kernels and keeps only the
// bf16 weight; a target without avx512bf16 gets the fp32 pipeline and the reason.
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/spec.h"
#include "kiln/compiler/target.h"
#include "kiln/kernels/conv.h"
#include "worker/report.h"

namespace kiln {
namespace {

bool HostHasBf16() {
  v1::Target host;
  host.set_preset("host");
  absl::StatusOr<v1::Target> resolved = ResolveTarget(host);
  return resolved.ok() && Bf16Unavailable(*resolved).empty();
}

// max |a - b| / max |b|.
double RelativeError(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dims(), b.dims());
  const float* pa = a.data_as<float>();
  const float* pb = b.data_as<float>();
  double error = 0, scale = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    error = std::max(error, std::fabs(static_cast<double>(pa[i]) - pb[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(pb[i])));
  }
  return error / scale;
}

// x [batch, c, h, w] -> Conv k x k (c -> oc, bias, same padding, stride) -> (+ x when the shapes
// allow: the residual) -> Relu -> Flatten -> MatMul [.., n] (+ bias) -> Gemm (transB, C).
std::unique_ptr<Graph> ProductsNet(int64_t c, int64_t oc, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t n,
                                   int64_t batch) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {batch, c, h, w}));
  g->AddInput(x);
  Node* conv = g->AddNode(
      "Conv", "conv", {x, g->AddConstant("w", Random({oc, c, k, k}, 11, 0.2f)), g->AddConstant("b", Random({oc}, 12))},
      {"c"}, 13);
  conv->mutable_attrs()["pads"] = std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2};
  conv->mutable_attrs()["strides"] = std::vector<int64_t>{stride, stride};
  Value* y = conv->output(0);
  if (oc == c && stride == 1) y = g->AddNode("Add", "residual", {y, x}, {"r"}, 13)->output(0);
  y = g->AddNode("Relu", "relu", {y}, {"a"}, 13)->output(0);
  const int64_t oh = (h + 2 * (k / 2) - k) / stride + 1, ow = (w + 2 * (k / 2) - k) / stride + 1;
  const int64_t features = oc * oh * ow;
  y = g->AddNode("Flatten", "flatten", {y}, {"f"}, 13)->output(0);
  y = g->AddNode("MatMul", "matmul", {y, g->AddConstant("bm", Random({features, n}, 13, 0.05f))}, {"m"}, 13)->output(0);
  y = g->AddNode("Add", "bias", {y, g->AddConstant("mb", Random({n}, 14))}, {"mo"}, 13)->output(0);
  Node* gemm =
      g->AddNode("Gemm", "gemm",
                 {y, g->AddConstant("bg", Random({7, n}, 15, 0.2f)), g->AddConstant("cg", Random({7}, 16))}, {"o"}, 13);
  gemm->mutable_attrs()["transB"] = int64_t{1};
  return WithOutput(std::move(g), gemm->output(0));
}

struct Case {
  int64_t c, oc, h, w, k, stride, n;
  bool winograd;
  bool position_rows = false;  // conv_bf16 with the positions as rows (packed_weights 1)
  int64_t batch = 1;
};

TEST(Bf16Test, ArtifactMatchesFp32WithinBf16Tolerance) {
  if (!HostHasBf16()) GTEST_SKIP() << "this CPU has no avx512bf16";
  const Case cases[] = {
      {3, 13, 9, 11, 3, 2, 45, false},   // the implicit GEMM: K 27 (odd), 13 rows, 25 positions
      {16, 16, 13, 11, 3, 1, 33, true},  // Winograd (its GEMMs in bf16) with the residual
      {300, 20, 7, 7, 1, 1, 70, false},  // 1x1: K 300 (two K blocks), 49 positions, MatMul K 980
      {24, 48, 10, 10, 3, 1, 64, true},  // Winograd, 48 output channels (a partial 32-column panel)
      // Winograd with 2.4 MiB of f32 U: its stages one after the other, the transforms' jobs
      // over (8 channels, tile) split between two threads.
      {128, 128, 14, 14, 3, 1, 16, true},
      // Positions as rows: a 7x7 map (4 x 12 + 1 rows) with the residual; a strided 3x3
      // conv to 7x7 over two K blocks, two images, and one image (two threads split its
      // positions 25 + 24); 3x3 positions, 72 channels (a partial panel).
      {64, 64, 7, 7, 1, 1, 40, false, true},
      {40, 96, 14, 14, 3, 2, 30, false, true, 2},
      {32, 64, 13, 13, 3, 2, 25, false, true},
      {48, 72, 6, 6, 1, 2, 20, false, true},
      // Winograd's shape, but 1.1 MiB of bf16 U per tile (4 tiles of a 7x7 map): the direct
      // product with the positions as rows (kBf16WinogradUBytesPerTile, ops/bf16_ops.cc).
      {256, 256, 7, 7, 3, 1, 20, false, true},
  };
  for (const Case& t : cases) {
    SCOPED_TRACE(::testing::Message() << "c " << t.c << " oc " << t.oc << " " << t.h << "x" << t.w << " k " << t.k
                                      << " stride " << t.stride << " n " << t.n << " batch " << t.batch);
    const Tensor x = *Random({t.batch, t.c, t.h, t.w}, 21);
    std::unique_ptr<Graph> fp32 = ProductsNet(t.c, t.oc, t.h, t.w, t.k, t.stride, t.n, t.batch);
    const std::vector<Tensor> want = RunArtifact(*fp32, kDefaultPipeline, x, {1});
    // winograd=f32 leaves a Winograd-shaped conv in f32 (two bf16 products then).
    for (const std::string winograd : {"bf16", "f32"}) {
      if (winograd == "f32" && !t.winograd) continue;
      SCOPED_TRACE(winograd);
      const std::string pipeline =
          absl::StrReplaceAll(kBf16Pipeline, {{",bf16,", absl::StrCat(",bf16{winograd=", winograd, "},")}});
      std::unique_ptr<Graph> bf16 = ProductsNet(t.c, t.oc, t.h, t.w, t.k, t.stride, t.n, t.batch);
      const std::vector<Tensor> got = RunArtifact(*bf16, pipeline, x, {1, 2});
      ASSERT_EQ(got.size(), 2u);
      // The kernels the marked nodes lowered to.
      int bf16_calls = 0;
      for (const Node* node : bf16->nodes()) {
        const OpSchema* schema = FindOp(node->op());
        if (schema == nullptr || node->GetString("kiln.precision", "") != "bf16") continue;
        absl::StatusOr<KernelCall> call = LowerForArtifact(*schema, *node);
        ASSERT_TRUE(call.ok()) << call.status();
        const std::string conv = t.winograd ? "conv_winograd_bf16" : "conv_bf16";
        EXPECT_TRUE(call->kernel == conv || call->kernel == "matmul_bf16") << call->kernel;
        if (call->kernel == "conv_bf16") {
          EXPECT_EQ(call->params.Get<kiln_conv_params>().packed_weights, t.position_rows ? 1 : 0);
        }
        EXPECT_EQ(call->inputs[1].constant->dtype(), DType::kBFloat16);  // the weight, only as bf16
        ++bf16_calls;
      }
      EXPECT_EQ(bf16_calls, winograd == "f32" ? 2 : 3);
      // bf16 rounds each operand to 8 significant bits (relative 2^-9): through three
      // products the error stays under 1 % of the output's scale (measured 0.15-0.35 %); a
      // Winograd conv's transforms amplify it about tenfold (measured 2.8 % and 3 %).
      const double tolerance = t.winograd && winograd == "bf16" ? 5e-2 : 1e-2;
      for (const Tensor& out : got) EXPECT_LT(RelativeError(out, want[0]), tolerance);
      EXPECT_GT(RelativeError(got[0], want[0]), 0);  // bf16 really ran
    }
  }
}

// `t` with each value rounded to the nearest bf16 (ties to even): a conv of such values
// has the same products in bf16 as in f32.
std::shared_ptr<Tensor> RoundedToBf16(std::shared_ptr<Tensor> t) {
  float* v = t->data_as<float>();
  for (int64_t i = 0; i < t->num_elements(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], sizeof(u));
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    std::memcpy(&v[i], &u, sizeof(u));
  }
  return t;
}

struct WindowCase {
  int64_t c, oc, h, w, k, stride, pad, dilation;
  bool position_rows;
};

// x [1, c, h, w] -> Conv k x k (c -> oc, bias, pad, stride, dilation): x and the weight hold
// bf16 values.
std::unique_ptr<Graph> WindowNet(const WindowCase& t) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, t.c, t.h, t.w}));
  g->AddInput(x);
  Node* conv = g->AddNode("Conv", "conv",
                          {x, g->AddConstant("w", RoundedToBf16(Random({t.oc, t.c, t.k, t.k}, 41, 0.2f))),
                           g->AddConstant("b", Random({t.oc}, 42))},
                          {"c"}, 13);
  conv->mutable_attrs()["pads"] = std::vector<int64_t>{t.pad, t.pad, t.pad, t.pad};
  conv->mutable_attrs()["strides"] = std::vector<int64_t>{t.stride, t.stride};
  conv->mutable_attrs()["dilations"] = std::vector<int64_t>{t.dilation, t.dilation};
  return WithOutput(std::move(g), conv->output(0));
}

// The bf16 im2col (MaskedRun's masked loads at column strides 1 and 2, packed straight to
// pair words or staged for the positions-as-rows product) on windows whose runs start and
// end in the padding, split across 16-lane pieces, 32-column panels and 256-position
// chunks: with bf16 values in x and the weight, every product is exact in both artifacts
// and only the order of the f32 sums differs, so one misplaced or dropped element shows.
TEST(Bf16Test, WindowedConvsOverBf16ValuesMatchFp32) {
  if (!HostHasBf16()) GTEST_SKIP() << "this CPU has no avx512bf16";
  const WindowCase cases[] = {
      {3, 16, 30, 30, 7, 2, 3, 1, false},   // a stem: 15-wide runs, the pad on both sides
      {21, 24, 29, 29, 3, 2, 1, 1, false},  // K 189 (odd), 15x15
      {5, 8, 70, 70, 3, 2, 1, 1, false},    // 35-wide runs: three pieces, runs across panels
      {8, 12, 40, 40, 3, 2, 1, 1, false},   // 400 positions: a run split between two chunks
      {8, 12, 13, 13, 3, 1, 0, 1, false},   // stride 1, 11 wide out of 13
      {6, 10, 17, 17, 3, 2, 2, 2, false},   // dilation 2
      {40, 64, 14, 14, 3, 2, 1, 1, true},   // to 7x7, positions as rows (staged)
  };
  for (const WindowCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << "c " << t.c << " oc " << t.oc << " " << t.h << "x" << t.w << " k " << t.k
                                      << " stride " << t.stride << " pad " << t.pad << " dilation " << t.dilation);
    const Tensor x = *RoundedToBf16(Random({1, t.c, t.h, t.w}, 43));
    std::unique_ptr<Graph> fp32 = WindowNet(t);
    const std::vector<Tensor> want = RunArtifact(*fp32, kDefaultPipeline, x, {1});
    std::unique_ptr<Graph> bf16 = WindowNet(t);
    const std::vector<Tensor> got = RunArtifact(*bf16, kBf16Pipeline, x, {1, 2});
    for (const Node* node : bf16->nodes()) {
      const OpSchema* schema = FindOp(node->op());
      if (schema == nullptr || node->op() != "Conv") continue;
      absl::StatusOr<KernelCall> call = LowerForArtifact(*schema, *node);
      ASSERT_TRUE(call.ok()) << call.status();
      ASSERT_EQ(call->kernel, "conv_bf16");
      EXPECT_EQ(call->params.Get<kiln_conv_params>().packed_weights, t.position_rows ? 1 : 0);
    }
    ASSERT_EQ(got.size(), 2u);
    for (const Tensor& out : got) EXPECT_LT(RelativeError(out, want[0]), 1e-5);
  }
}

// x [1, 16, 4, 8, 8] -> Conv 3x3x3 (16 -> 16, pads 1) -> Relu -> Conv 1x1x1 (16 -> 32).
std::unique_ptr<Graph> Conv3dNet() {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, 16, 4, 8, 8}));
  g->AddInput(x);
  Node* conv = g->AddNode("Conv", "conv3", {x, g->AddConstant("w", Random({16, 16, 3, 3, 3}, 31, 0.2f))}, {"c"}, 13);
  conv->mutable_attrs()["pads"] = std::vector<int64_t>{1, 1, 1, 1, 1, 1};
  Value* y = g->AddNode("Relu", "relu", {conv->output(0)}, {"r"}, 13)->output(0);
  Node* point = g->AddNode("Conv", "conv1", {y, g->AddConstant("w1", Random({32, 16, 1, 1, 1}, 32, 0.2f))}, {"p"}, 13);
  return WithOutput(std::move(g), point->output(0));
}

// A 3x3x3 conv that f32 runs as its 3-D Winograd stays f32 (bf16 has no 3-D Winograd, and
// its direct conv does six times the multiplies); the 1x1x1 conv after it runs in bf16.
TEST(Bf16Test, ThreeDimWinogradConvStaysF32) {
  if (!HostHasBf16()) GTEST_SKIP() << "this CPU has no avx512bf16";
  const Tensor x = *Random({1, 16, 4, 8, 8}, 33);
  const std::vector<Tensor> want = RunArtifact(*Conv3dNet(), kDefaultPipeline, x, {1});
  std::unique_ptr<Graph> bf16 = Conv3dNet();
  const std::vector<Tensor> got = RunArtifact(*bf16, kBf16Pipeline, x, {1, 2});
  ASSERT_EQ(got.size(), 2u);
  std::map<std::string, std::string> kernels;
  for (const Node* node : bf16->nodes()) {
    if (node->op() != "Conv") continue;
    absl::StatusOr<KernelCall> call = LowerForArtifact(*FindOp("Conv"), *node);
    ASSERT_TRUE(call.ok()) << call.status();
    kernels[node->name()] = call->kernel;
  }
  EXPECT_EQ(kernels["conv3"], "conv_winograd");
  EXPECT_EQ(kernels["conv1"], "conv_bf16");
  for (const Tensor& out : got) EXPECT_LT(RelativeError(out, want[0]), 1e-2);
}

TEST(Bf16Test, TargetWithoutAvx512Bf16GetsTheFp32Pipeline) {
  for (const std::string preset : {"x86-64-v3", "aarch64"}) {
    v1::CompileSpec spec;
    spec.mutable_target()->set_preset(preset);
    *spec.mutable_target() = *ResolveTarget(spec.target());
    spec.mutable_quantization()->set_precision("bf16");
    EXPECT_EQ(Bf16Unavailable(spec.target()).find("target " + preset), 0u) << Bf16Unavailable(spec.target());
    absl::StatusOr<Pipeline> pipeline = PipelineFor(spec);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    EXPECT_EQ(PrintPipeline(*pipeline), kDefaultPipeline);
    spec.set_pipeline("fold-constants,bf16,plan-memory");  // asked for by name: left out too
    EXPECT_EQ(PrintPipeline(*PipelineFor(spec)), "fold-constants,plan-memory");
  }
  v1::CompileSpec spec;
  spec.mutable_target()->set_preset("znver4");
  *spec.mutable_target() = *ResolveTarget(spec.target());
  spec.mutable_quantization()->set_precision("bf16");
  EXPECT_EQ(Bf16Unavailable(spec.target()), "");
  // (without the layout pass's blocked ResNet-style runs, which AVX-512 targets get in f32:
  // bf16 marks the Convs they would take)
  EXPECT_EQ(PrintPipeline(*PipelineFor(spec)), kBf16Pipeline);
  spec.mutable_quantization()->set_precision("fp32");
  EXPECT_EQ(PrintPipeline(*PipelineFor(spec)),
            absl::StrReplaceAll(kDefaultPipeline, {{"layout", "layout{dense-runs=on}"}}));
}

// A bf16 job's verdict: a classifier-shaped output by top-1 agreement, any other by its
// max abs error over its scale against kBf16MaxRelativeError.
TEST(Bf16Test, VerdictIsTopOneOrTheErrorOverTheOutputScale) {
  v1::CompileSpec spec;
  spec.mutable_quantization()->set_precision("bf16");
  spec.mutable_accuracy()->set_max_top1_drop(1);
  auto judge = [&](std::vector<int64_t> dims, float error_at_0) {
    Tensor reference(DType::kFloat32, dims);
    for (int i = 0; i < 8; ++i) reference.data_as<float>()[i] = static_cast<float>(i);  // scale 7
    Tensor got = reference;
    got.data_as<float>()[0] += error_at_0;
    return worker::Judge(spec, {"y"}, {got}, {reference});
  };
  // Not a classifier's ([2, 4]: fewer than 5 classes): the error over the scale.
  const v1::AccuracyReport close = judge({2, 4}, 0.6f);  // 8.6 % of the scale
  EXPECT_TRUE(close.passed()) << close.verdict();
  EXPECT_EQ(close.precision(), "bf16");
  EXPECT_NEAR(close.outputs(0).max_abs_error() / close.outputs(0).reference_scale(), 0.6 / 7, 1e-6);
  const v1::AccuracyReport far = judge({2, 4}, 0.8f);  // 11 %
  EXPECT_FALSE(far.passed());
  EXPECT_EQ(far.verdict().find("bf16: output 'y': max abs error"), 0u) << far.verdict();
  // A classifier's ([1, 8]): top-1 agreement, whatever the error.
  EXPECT_TRUE(judge({1, 8}, 3.0f).passed());
  const v1::AccuracyReport flipped = judge({1, 8}, 7.5f);  // the arg-max moves to 0
  EXPECT_FALSE(flipped.passed());
  EXPECT_EQ(flipped.verdict().find("bf16: top-1 changed"), 0u) << flipped.verdict();
}

}  // namespace
}  // namespace kiln
