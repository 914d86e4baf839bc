// The convolution and resampling paths added for segmentation and ResNeXt models, compiled
// into artifacts (both register-tile targets where this CPU runs them, 1 and 2 threads)
// against the independent reference (compiler/reference) on odd shapes: grouped convs run
// directly on padded phase planes, depthwise convs of dilation 2, Convs whose outer taps
// read only padding (trimmed by simplify), 1x1 convs over few positions (transposed) and
// with few output channels over large planes, and f32 bilinear and nearest Resize.
#include <cmath>
#include <functional>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

// max |compiled - reference| relative to the reference's largest magnitude, over the
// runs on 1 and 2 threads.
double CompiledVsReference(const std::function<std::unique_ptr<Graph>()>& build, const std::string& target) {
  std::unique_ptr<Graph> reference = build();
  auto input = Random(reference->inputs()[0]->type().StaticDims(), 99);
  auto expected = ReferenceRunGraph(*reference, {*input});
  EXPECT_TRUE(expected.ok()) << expected.status();
  if (!expected.ok()) return 1e9;
  std::unique_ptr<Graph> compiled = build();
  const std::vector<Tensor> outputs = RunArtifact(*compiled, kDefaultPipeline, *input, {1, 2}, target);
  if (outputs.size() != 2) return 1e9;
  const Tensor& want = (*expected)[0];
  double max_error = 0, scale = 0;
  for (const Tensor& out : outputs) {
    EXPECT_EQ(out.dims(), want.dims());
    if (out.dims() != want.dims()) return 1e9;
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      max_error = std::max(max_error, std::fabs(double(out.data_as<float>()[i]) - want.data_as<float>()[i]));
      scale = std::max(scale, std::fabs(double(want.data_as<float>()[i])));
    }
  }
  EXPECT_GT(scale, 0.1);
  return max_error / scale;
}

struct ConvCase {
  int64_t n, c, oc, group, h, w, kh, kw, stride, dilation;
  std::vector<int64_t> pads;  // top, left, bottom, right
  bool residual;              // Add(Conv(x), x) (fused into the conv's epilogue), then Relu
  std::string activation;     // "" or an op applied last
};

std::unique_ptr<Graph> ConvNet(const ConvCase& t) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {t.n, t.c, t.h, t.w}));
  g->AddInput(x);
  Node* conv = g->AddNode(
      "Conv", "conv",
      {x, g->AddConstant("w", Random({t.oc, t.c / t.group, t.kh, t.kw}, 31)), g->AddConstant("b", Random({t.oc}, 32))},
      {"c"}, 13);
  conv->mutable_attrs()["group"] = t.group;
  conv->mutable_attrs()["strides"] = std::vector<int64_t>{t.stride, t.stride};
  conv->mutable_attrs()["dilations"] = std::vector<int64_t>{t.dilation, t.dilation};
  conv->mutable_attrs()["pads"] = t.pads;
  Value* y = conv->output(0);
  if (t.residual) y = g->AddNode("Add", "skip", {y, x}, {"r"}, 13)->output(0);
  if (!t.activation.empty()) y = g->AddNode(t.activation, "act", {y}, {"y"}, 13)->output(0);
  return WithOutput(std::move(g), y);
}

void ExpectConvCases(const std::vector<ConvCase>& cases) {
  for (const ConvCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << t.n << "x" << t.c << "x" << t.h << "x" << t.w << " -> " << t.oc << ", group "
                                      << t.group << ", " << t.kh << "x" << t.kw << " stride " << t.stride
                                      << " dilation " << t.dilation << " pads " << t.pads[0] << "," << t.pads[1] << ","
                                      << t.pads[2] << "," << t.pads[3] << (t.residual ? ", residual" : "") << " "
                                      << t.activation);
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference([&] { return ConvNet(t); }, target), 1e-5);
    }
  }
}

// Grouped convs (ResNeXt's shape and odd ones): 4 to 32 channels per group and odd counts
// (3 in, 5 out; 13, whose weight panels of 6 rows, read in place, end in one of 1), a
// channel multiplier (1 in, 2 out), stride 1 and 2 with even and odd
// widths (stride 2 deinterleaves whole planes: odd widths alternate the row's parity),
// pads none, symmetric and lopsided, 5x5 windows, planes of 1 to several register blocks,
// a fused residual and activations after.
TEST(ConvPathsTest, GroupedConvsMatchTheReference) {
  ExpectConvCases({
      {1, 128, 128, 32, 12, 12, 3, 3, 1, 1, {1, 1, 1, 1}, false, "Relu"},
      {1, 64, 64, 8, 11, 7, 3, 3, 2, 1, {1, 1, 1, 1}, false, "Relu"},
      {2, 12, 20, 4, 9, 13, 3, 3, 1, 1, {0, 2, 1, 0}, false, ""},
      {1, 6, 12, 6, 10, 5, 5, 5, 1, 1, {2, 2, 2, 2}, false, "Sigmoid"},
      {1, 64, 64, 2, 3, 3, 3, 3, 1, 1, {1, 1, 1, 1}, false, "Relu"},
      {1, 64, 64, 2, 6, 6, 3, 3, 2, 1, {1, 1, 1, 1}, false, ""},
      {1, 16, 16, 4, 13, 17, 3, 3, 2, 1, {0, 1, 2, 0}, false, ""},
      {1, 24, 24, 3, 8, 9, 3, 3, 1, 1, {1, 1, 1, 1}, true, "Relu"},
      {1, 8, 16, 8, 7, 7, 3, 3, 1, 1, {1, 1, 1, 1}, false, "Relu"},
      {1, 32, 32, 4, 30, 30, 1, 1, 1, 1, {0, 0, 0, 0}, false, ""},
      {1, 26, 26, 2, 9, 10, 3, 3, 1, 1, {1, 1, 1, 1}, true, "Relu"},
      {1, 26, 26, 2, 9, 10, 3, 3, 2, 1, {1, 1, 1, 1}, false, "Relu"},
      // 16 to 64 channels per group over at most 64 positions (W_g^T, the channels across
      // the lanes, images sharing a job): ResNeXt's 6x6 at batch 8, stride 2 into 3x3 over
      // a batch of 3, 48 per group with a residual, dilation 2, and
      // a batch of 20 (several jobs per group), stride 4 over 32x32 (planes past the
      // buffer: the plain loop nest).
      {8, 512, 512, 32, 6, 6, 3, 3, 1, 1, {1, 1, 1, 1}, false, "Relu"},
      {1, 64, 64, 2, 32, 32, 3, 3, 4, 1, {1, 1, 1, 1}, false, ""},
      {3, 128, 128, 4, 6, 6, 3, 3, 2, 1, {1, 1, 1, 1}, false, ""},
      {2, 96, 96, 2, 5, 7, 3, 3, 1, 1, {1, 1, 1, 1}, true, "Relu"},
      {1, 64, 128, 2, 7, 7, 3, 3, 1, 2, {2, 2, 2, 2}, false, ""},
      {20, 32, 32, 2, 3, 3, 3, 3, 1, 1, {1, 1, 1, 1}, false, "Relu"},
  });
}

// Convs over few input channels (conv/stem.h: CNN stems over RGB): 3x3 and 7x7 windows,
// stride 2 and 1, pads none, symmetric and lopsided, a non-square window, 1 to 4 input
// channels, output channels that do not fill a register block (13, 20, 3), rows narrower
// than a vector, odd widths whose last vectors move left, several row jobs per image,
// batches, a fused residual (whose rows' last vectors are stored in part instead) and
// activations after.
TEST(ConvPathsTest, StemConvsMatchTheReference) {
  ExpectConvCases({
      {2, 3, 64, 1, 57, 61, 7, 7, 2, 1, {3, 3, 3, 3}, false, "Relu"},
      {3, 3, 64, 1, 35, 35, 3, 3, 2, 1, {0, 0, 0, 0}, false, "Relu"},
      {1, 3, 32, 1, 31, 33, 3, 3, 2, 1, {1, 1, 1, 1}, false, ""},
      {1, 1, 13, 1, 20, 9, 5, 5, 1, 1, {2, 2, 2, 2}, false, "Sigmoid"},
      {2, 4, 20, 1, 15, 40, 3, 7, 2, 1, {1, 3, 0, 2}, false, ""},
      {1, 3, 3, 1, 13, 17, 3, 3, 1, 1, {1, 1, 1, 1}, true, "Relu"},
      {1, 3, 3, 1, 6, 50, 3, 3, 1, 1, {1, 1, 1, 1}, true, "Relu"},
      {2, 2, 24, 1, 70, 150, 7, 7, 2, 1, {3, 3, 3, 3}, false, "Relu"},
      {1, 3, 16, 1, 12, 100, 7, 7, 1, 1, {3, 3, 3, 3}, false, ""},
  });
}

// Depthwise convs of dilation 2 (MobileNetV3's last blocks in DeepLabV3 and LR-ASPP), 3x3
// and 5x5 over planes smaller and larger than the window's reach, one partial channel
// block and several, the padding that keeps the size and less.
TEST(ConvPathsTest, DilatedDepthwiseConvsMatchTheReference) {
  ExpectConvCases({
      {1, 20, 20, 20, 10, 10, 5, 5, 1, 2, {4, 4, 4, 4}, false, "Relu"},
      {1, 7, 7, 7, 9, 13, 3, 3, 1, 2, {2, 2, 2, 2}, false, ""},
      {2, 17, 17, 17, 12, 11, 5, 5, 1, 2, {1, 3, 0, 2}, false, "Sigmoid"},
      {1, 33, 33, 33, 6, 6, 3, 3, 1, 2, {0, 0, 0, 0}, false, "Relu"},
  });
}

// Convs whose outer taps read only padding for every output (simplify trims them): the
// atrous ASPP convs of DeepLabV3 (rate 12 over 10x10: a 1x1 conv), one that keeps two
// taps of three per axis, strided, and one whose rows trim but not its columns.
TEST(ConvPathsTest, ConvsWithTapsInThePaddingMatchTheReference) {
  ExpectConvCases({
      {1, 30, 16, 1, 10, 10, 3, 3, 1, 12, {12, 12, 12, 12}, false, "Relu"},
      {1, 5, 7, 1, 4, 4, 3, 3, 1, 3, {3, 3, 0, 0}, false, ""},
      {1, 6, 9, 1, 5, 9, 3, 3, 2, 4, {4, 4, 4, 4}, false, ""},
      {1, 4, 6, 2, 3, 11, 3, 3, 1, 3, {3, 1, 3, 1}, false, ""},
  });
}

// 1x1 convs with at most 49 output positions and a multiple of 16 output channels, run as
// Y^T = X^T W^T (ResNeXt's last stages, ResNet-50's): 3x3, 6x6 and 7x7 maps (36 positions:
// three row tiles; 49: four and a row of one),
// a strided 1x1 (the downsample) from 6x5, 1x1 maps (squeeze-and-excitation), an odd and
// a 1024-channel input (whose rows the GEMM copies into panels), a batch, a fused residual.
TEST(ConvPathsTest, PointwiseConvsOverFewPositionsMatchTheReference) {
  ExpectConvCases({
      {1, 37, 48, 1, 3, 3, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},
      {2, 1024, 32, 1, 3, 3, 1, 1, 1, 1, {0, 0, 0, 0}, false, ""},
      {1, 20, 64, 1, 6, 5, 1, 1, 2, 1, {0, 0, 0, 0}, false, ""},
      {3, 40, 16, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Sigmoid"},
      {1, 32, 32, 1, 4, 4, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu"},
      {1, 1024, 48, 1, 6, 6, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},
      {1, 32, 32, 1, 7, 6, 1, 1, 1, 1, {0, 0, 0, 0}, true, ""},
      // MobileNetV3's squeeze-and-excitation convs on 1x1 maps (Faster R-CNN's backbone):
      // 960 -> 240 -> 960, 168 -> 672, 120 -> 480, and a batch of 8 (which runs as one
      // MatMul over the batch, LowerPooledPointConv in nn_ops.cc).
      {1, 960, 240, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},
      {1, 240, 960, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "HardSigmoid"},
      {1, 168, 672, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "HardSigmoid"},
      {8, 120, 480, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, ""},
      // ResNeXt-50's third stage at 96x96 (6x6) at batch 8: one image per pass of 36 rows
      // (1024 -> 512), three per pass of 3x3 (2048 -> 2048 with the skip).
      {8, 1024, 512, 1, 6, 6, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},
      {8, 2048, 2048, 1, 3, 3, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu"},
      // Past kFewPositionsStreamK (conv.cc): the K-blocked product, on padded X^T rows.
      {2, 3072, 32, 1, 3, 3, 1, 1, 1, 1, {0, 0, 0, 0}, false, ""},
      // ResNet-50's last stage on 7x7 maps: the downsample (stride 2 from 13x13), two
      // images; a skip; 2048 input channels (X^T's padded rows: 49 x 2064 floats).
      {2, 64, 48, 1, 13, 13, 1, 1, 2, 1, {0, 0, 0, 0}, false, "Relu"},
      {1, 48, 48, 1, 7, 7, 1, 1, 1, 1, {0, 0, 0, 0}, true, ""},
      {1, 2048, 32, 1, 7, 7, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},
      // Strided 1x1 convs past 49 positions (ResNet-50's downsample into 14x14): slices of
      // 49 positions, 196 = 4 x 49 from 27x27, and 100 = 49 + 49 + 2 from 20x20.
      {1, 64, 32, 1, 27, 27, 1, 1, 2, 1, {0, 0, 0, 0}, false, "Relu"},
      {1, 48, 48, 1, 20, 20, 1, 1, 2, 1, {0, 0, 0, 0}, false, ""},
  });
}

// Convs with wider windows over at most 49 output positions (one image), as Y^T = X^T W^T
// with X^T's rows the im2col columns: ResNet-50's stride-2 3x3 into 7x7 (here 64 -> 48 from
// 13x13 with pads 1), K past X^T's buffer for 49 rows (288 channels x 9 taps: three K
// slices summed), a 5x5 with uneven pads and dilation 2, a 3x3 with a fused residual, a
// 2x3 window at stride 2 from 5x6 (6 positions), and a 3x3 at stride 1 whose Winograd U
// would be 4.3 MiB a tile (352 channels over 7x7, 4 tiles: kWinogradUBytesPerTile) with a
// fused residual. Other stride-1 3x3 convs take Winograd before this path.
TEST(ConvPathsTest, WindowedConvsOverFewPositionsMatchTheReference) {
  ExpectConvCases({
      {1, 64, 48, 1, 13, 13, 3, 3, 2, 1, {1, 1, 1, 1}, false, "Relu"},
      {1, 288, 32, 1, 14, 14, 3, 3, 2, 1, {1, 1, 1, 1}, false, ""},
      {1, 40, 16, 1, 9, 8, 5, 5, 1, 2, {2, 1, 1, 2}, false, "Relu"},
      {1, 32, 32, 1, 7, 7, 3, 3, 1, 2, {2, 2, 2, 2}, true, ""},
      {1, 24, 16, 1, 5, 6, 2, 3, 2, 1, {0, 1, 1, 0}, false, ""},
      {1, 352, 352, 1, 7, 7, 3, 3, 1, 1, {1, 1, 1, 1}, true, "Relu"},
  });
}

// Windowed convs on the implicit GEMM (more than 49 positions, more than 4 input channels,
// not Winograd's): on AVX-512 its im2col rows go by masked loads, runs outermost
// (StageMasked, im2col.h). A 7x7 at stride 2 whose 15-wide runs start and end in the pad,
// an odd K (21 x 9), 35-wide runs (three 16-lane pieces) over 1225 positions whose chunks
// end mid-run, two images, a 5x5 at stride 1 without pads (11 of 15 columns), dilation 2
// at stride 2, lopsided pads.
TEST(ConvPathsTest, ImplicitGemmConvsMatchTheReference) {
  ExpectConvCases({
      {1, 8, 16, 1, 30, 30, 7, 7, 2, 1, {3, 3, 3, 3}, false, "Relu"},
      {1, 21, 24, 1, 29, 29, 3, 3, 2, 1, {1, 1, 1, 1}, false, ""},
      {1, 5, 8, 1, 70, 70, 3, 3, 2, 1, {1, 1, 1, 1}, false, "Relu"},
      {2, 8, 12, 1, 40, 40, 3, 3, 2, 1, {1, 1, 1, 1}, false, ""},
      {1, 8, 12, 1, 17, 15, 5, 5, 1, 1, {0, 0, 0, 0}, false, ""},
      {1, 6, 10, 1, 23, 23, 3, 3, 2, 2, {2, 2, 2, 2}, false, "Relu"},
      {1, 16, 32, 1, 31, 30, 3, 3, 2, 1, {0, 1, 1, 0}, false, ""},
  });
}

// 1x1 convs with few output channels over planes of at least 2048 positions, as register
// tiles over X in place (PointwiseRows, conv.cc): SqueezeNet's 64 -> 16 at batch 2; odd
// planes whose positions end in a partial tile and a scalar tail; one group of 13 or 5
// rows and groups of 8 (24, 40, 64 rows: several per block of positions; 64 x 256, the
// largest weight it takes); a fused
// residual; an activation outside the register epilogue (Sigmoid).
TEST(ConvPathsTest, PointwiseConvsWithFewChannelsOverLargePlanesMatchTheReference) {
  ExpectConvCases({
      {2, 64, 16, 1, 55, 55, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},
      {1, 16, 64, 1, 47, 49, 1, 1, 1, 1, {0, 0, 0, 0}, false, ""},
      {3, 13, 13, 1, 45, 47, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu"},
      {1, 7, 40, 1, 50, 41, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Sigmoid"},
      {2, 24, 24, 1, 64, 33, 1, 1, 1, 1, {0, 0, 0, 0}, true, ""},
      {1, 33, 5, 1, 46, 46, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},
      {1, 256, 64, 1, 46, 46, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu"},  // the largest weight taken
  });
}

// A 1x1 conv whose map is known only at run time: the lowering sees probe dims (32), few
// enough positions for the transposed path, and the kernel then meets the real map, here
// 1 x 200 positions (slices of 49) and 1 x 7, batch 3.
TEST(ConvPathsTest, PointwiseConvOverARunTimeShapedMapMatchesTheReference) {
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{1, 64, 1, 200}, std::vector<int64_t>{3, 64, 1, 7}}) {
    auto g = std::make_unique<Graph>();
    TensorType type = TensorType::Static(DType::kFloat32, {1, 64, 1, 1});
    type.shape[0] = Dim::Symbolic("n");
    type.shape[3] = Dim::Symbolic("w");
    Value* x = g->AddValue("x", type);
    g->AddInput(x);
    Node* conv = g->AddNode("Conv", "conv",
                            {x, g->AddConstant("w", Random({32, 64, 1, 1}, 31)), g->AddConstant("b", Random({32}, 32))},
                            {"y"}, 13);
    g->AddOutput(conv->output(0));
    ASSERT_TRUE(InferTypes(*g).ok());
    auto input = Random(dims, 99);
    auto expected = ReferenceRunGraph(*g, {*input});
    ASSERT_TRUE(expected.ok()) << expected.status();
    const std::vector<Tensor> got = RunShapedArtifact(*g, kDefaultPipeline, {*input});
    ASSERT_EQ(got.size(), 1u);
    const Tensor& want = (*expected)[0];
    ASSERT_EQ(got[0].dims(), want.dims());
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      ASSERT_NEAR(got[0].data_as<float>()[i], want.data_as<float>()[i], 1e-5) << "element " << i;
    }
  }
}

// Convs whose output planes keep the input's shape (stride 1, padding that keeps the
// width): the im2col packs each tap's row of a plane as one shifted copy and zeroes the
// rows and columns in the padding (R3D-18's 3x3x3 convs). 3-D with 3x3x3 and 3x5x5
// windows, dilation 2, a chunk of positions crossing planes, a 1-D conv; a batch.
struct SameShapeCase {
  std::vector<int64_t> x, kernel, pads, dilations;
  int64_t oc;
};

std::unique_ptr<Graph> SameShapeNet(const SameShapeCase& t) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, t.x));
  g->AddInput(x);
  std::vector<int64_t> wd = {t.oc, t.x[1]};
  wd.insert(wd.end(), t.kernel.begin(), t.kernel.end());
  Node* conv = g->AddNode("Conv", "conv",
                          {x, g->AddConstant("w", Random(wd, 31)), g->AddConstant("b", Random({t.oc}, 32))}, {"c"}, 13);
  conv->mutable_attrs()["pads"] = t.pads;
  conv->mutable_attrs()["dilations"] = t.dilations;
  Node* relu = g->AddNode("Relu", "act", {conv->output(0)}, {"y"}, 13);
  return WithOutput(std::move(g), relu->output(0));
}

TEST(ConvPathsTest, ConvsKeepingThePlaneShapeMatchTheReference) {
  const std::vector<SameShapeCase> cases = {
      {{1, 5, 4, 9, 9}, {3, 3, 3}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 16},
      {{2, 3, 3, 7, 7}, {3, 5, 5}, {1, 2, 2, 1, 2, 2}, {1, 1, 1}, 8},
      {{1, 4, 5, 6, 6}, {3, 3, 3}, {1, 2, 2, 1, 2, 2}, {1, 2, 2}, 8},
      {{1, 4, 2, 20, 20}, {1, 3, 3}, {0, 1, 1, 0, 1, 1}, {1, 1, 1}, 12},
      {{2, 6, 40}, {3}, {1, 1}, {1}, 8},
  };
  for (const SameShapeCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << "x rank " << t.x.size() << ", dims[2] " << t.x[2] << ", kernel[0] "
                                      << t.kernel[0] << ", pads[0] " << t.pads[0]);
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(target);
      EXPECT_LT(CompiledVsReference([&] { return SameShapeNet(t); }, target), 1e-5);
    }
  }
}

// x -> Resize(linear or nearest, sizes) -> y: the f32 path that interpolates each input row
// once along the last axis and blends cached rows (16x upsampling, more than one 512-column
// block, a downscale, align_corners, nearest; a batch and channels as outer axes).
struct ResizeCase {
  std::vector<int64_t> in, out;
  std::string mode, coordinates;
};

std::unique_ptr<Graph> ResizeNet(const ResizeCase& t) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, t.in));
  g->AddInput(x);
  auto sizes = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(t.out.size())});
  for (size_t i = 0; i < t.out.size(); ++i) sizes->data_as<int64_t>()[i] = t.out[i];
  Node* resize = g->AddNode("Resize", "resize", {x, nullptr, nullptr, g->AddConstant("sizes", sizes)}, {"y"}, 13);
  resize->mutable_attrs()["mode"] = t.mode;
  resize->mutable_attrs()["coordinate_transformation_mode"] = t.coordinates;
  return WithOutput(std::move(g), resize->output(0));
}

TEST(ConvPathsTest, ResizeRowPathMatchesTheReference) {
  const ResizeCase cases[] = {
      {{1, 21, 10, 10}, {1, 21, 160, 160}, "linear", "half_pixel"},
      {{2, 3, 5, 300}, {2, 3, 11, 700}, "linear", "pytorch_half_pixel"},
      {{1, 4, 17, 13}, {1, 4, 7, 5}, "linear", "half_pixel"},
      {{1, 2, 6, 7}, {1, 2, 13, 19}, "linear", "align_corners"},
      {{1, 3, 5, 6}, {1, 3, 12, 9}, "nearest", "asymmetric"},
  };
  for (const ResizeCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << t.mode << " " << t.coordinates << " to " << t.out[2] << "x" << t.out[3]);
    EXPECT_LT(CompiledVsReference([&] { return ResizeNet(t); }, "host"), 1e-6);
  }
}

}  // namespace
}  // namespace kiln
