// Neural-network ops: MatMul, Gemm, Conv, ConvTranspose, pooling, normalisations, LRN.
#include <cmath>
#include <cstdlib>

#include "bf16_ops.h"
#include "kiln/kernels/conv.h"
#include "kiln/kernels/norm.h"
#include "kiln/kernels/pool.h"
#include "op_helpers.h"

namespace kiln::ops {

absl::StatusOr<WindowParams> ComputeWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                           const std::vector<int64_t>& kernel, bool ceil_mode) {
  const size_t r = in_spatial.size();
  WindowParams w;
  w.kernel = kernel;
  w.strides = node.GetInts("strides", std::vector<int64_t>(r, 1));
  w.dilations = node.GetInts("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * r, 0));
  if (w.kernel.size() != r || w.strides.size() != r || w.dilations.size() != r || pads.size() != 2 * r) {
    return NodeError(node, absl::StrCat("kernel_shape/strides/dilations/pads do not match ", r, " spatial dimensions"));
  }
  w.pads_begin.assign(pads.begin(), pads.begin() + r);
  w.pads_end.assign(pads.begin() + r, pads.end());
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  for (size_t i = 0; i < r; ++i) {
    if (w.strides[i] <= 0 || w.dilations[i] <= 0 || w.kernel[i] <= 0)
      return NodeError(node, "strides, dilations and kernel must be positive");
    const int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
    int64_t out;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = (in_spatial[i] + w.strides[i] - 1) / w.strides[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + extent - in_spatial[i]);
      w.pads_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pads_end[i] = total - w.pads_begin[i];
    } else {
      if (auto_pad == "VALID") w.pads_begin[i] = w.pads_end[i] = 0;
      const int64_t span = in_spatial[i] + w.pads_begin[i] + w.pads_end[i] - extent;
      if (span < 0)
        return NodeError(node, absl::StrCat("window (", extent, ") is larger than the padded input (",
                                            in_spatial[i] + w.pads_begin[i] + w.pads_end[i], ") on spatial axis ", i));
      out = (ceil_mode ? (span + w.strides[i] - 1) / w.strides[i] : span / w.strides[i]) + 1;
      // A window may not start in the end padding.
      if (ceil_mode && (out - 1) * w.strides[i] >= in_spatial[i] + w.pads_begin[i]) --out;
    }
    w.out.push_back(out);
  }
  return w;
}

absl::StatusOr<kiln_window> KernelWindow(const Node& node, const WindowParams& w) {
  const size_t rank = w.kernel.size();
  if (rank > KILN_MAX_SPATIAL) {
    return NodeError(node, absl::StrCat(rank, " spatial dims; the kernels take at most ", KILN_MAX_SPATIAL));
  }
  kiln_window window{};
  window.rank = static_cast<int64_t>(rank);
  for (size_t i = 0; i < rank; ++i) {
    window.kernel[i] = w.kernel[i];
    window.strides[i] = w.strides[i];
    window.pads_begin[i] = w.pads_begin[i];
    window.pads_end[i] = w.pads_end[i];
    window.dilations[i] = w.dilations[i];
  }
  return window;
}

namespace {

// The activations the fuse pass names in `kiln.activation`, and their kernel codes.
constexpr NamedCode kNamedActivations[] = {
    {"relu", KILN_UNARY_RELU},
    {"leaky_relu", KILN_UNARY_LEAKY_RELU},
    {"sigmoid", KILN_UNARY_SIGMOID},
    {"tanh", KILN_UNARY_TANH},
    {"hard_sigmoid", KILN_UNARY_HARD_SIGMOID},
    {"hard_swish", KILN_UNARY_HARD_SWISH},
    {"elu", KILN_UNARY_ELU},
    {"gelu", KILN_UNARY_GELU},
    {"gelu_tanh", KILN_UNARY_GELU_TANH},
    {"clip", KILN_UNARY_CLIP},
    {"silu", KILN_UNARY_SILU},
};

}  // namespace

absl::StatusOr<kiln_activation> FusedActivation(const Node& node) {
  kiln_activation activation{-1, 0.0, 0.0};
  if (!node.has_attr("kiln.activation")) return activation;
  const std::string name = node.GetString("kiln.activation", "");
  std::vector<std::string> known;
  for (const NamedCode& named : kNamedActivations) {
    if (name == named.name) {
      activation.code = named.code;
      activation.alpha = node.GetFloat("kiln.activation_alpha", 0.0);
      activation.beta = node.GetFloat("kiln.activation_beta", 0.0);
      return activation;
    }
    known.push_back(named.name);
  }
  return NodeError(node, absl::StrCat("kiln.activation '", name, "' is not one of ", absl::StrJoin(known, ", ")));
}

std::vector<int64_t> Spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

absl::StatusOr<std::vector<int64_t>> ConvOutputDims(const Node& node, const std::vector<int64_t>& x,
                                                    const std::vector<int64_t>& w) {
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    return NodeError(node, "X and W must both be 3-D, 4-D or 5-D");
  const int64_t group = node.GetInt("group", 1);
  if (group <= 0 || x[1] % group != 0 || w[0] % group != 0 || x[1] / group != w[1]) {
    return NodeError(node, absl::StrCat("input channels ", x[1], " with group ", group, " do not match weight dims [",
                                        absl::StrJoin(w, ","), "]"));
  }
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape", Spatial(w));
  if (kernel != Spatial(w)) {
    return NodeError(node, absl::StrCat("kernel_shape [", absl::StrJoin(kernel, ","), "] does not match weight dims [",
                                        absl::StrJoin(w, ","), "]"));
  }
  auto win = ComputeWindow(node, Spatial(x), kernel, false);
  if (!win.ok()) return win.status();
  std::vector<int64_t> out = {x[0], w[0]};
  out.insert(out.end(), win->out.begin(), win->out.end());
  return out;
}

absl::StatusOr<std::vector<Dim>> MatMulOutputShape(const Node& node, std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.empty() || b.empty()) return NodeError(node, "operands must have rank 1 or more");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  if (a.back() != b[b.size() - 2]) {
    return NodeError(node, absl::StrCat("inner dimensions differ: ", a.back(), " vs ", b[b.size() - 2]));
  }
  auto batch = BroadcastShapes(node, KnownDims({a.begin(), a.end() - 2}), KnownDims({b.begin(), b.end() - 2}));
  if (!batch.ok()) return batch.status();
  std::vector<Dim> out = *batch;
  if (!a_vec) out.push_back(Dim::Known(a[a.size() - 2]));
  if (!b_vec) out.push_back(Dim::Known(b.back()));
  return out;
}

absl::StatusOr<kiln_matmul_shape> MatMulShape(const Node& node, std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const size_t batch_rank = std::max(a.size(), b.size()) - 2;
  if (batch_rank > KILN_MAX_RANK) {
    return NodeError(node, absl::StrCat(batch_rank, " batch dims; the kernels take at most ", KILN_MAX_RANK));
  }
  kiln_matmul_shape shape{};
  shape.M = a[a.size() - 2];
  shape.K = a.back();
  shape.N = b.back();
  shape.batch_rank = static_cast<int64_t>(batch_rank);
  // Strides in elements, right-aligned as numpy broadcasts; 0 along a broadcast dim.
  auto fill = [&](const std::vector<int64_t>& d, int64_t* strides, int64_t matrix) {
    const size_t own = d.size() - 2;
    int64_t s = matrix;
    for (size_t i = own; i-- > 0;) {
      const size_t at = batch_rank - own + i;
      strides[at] = d[i] == 1 ? 0 : s;
      shape.batch_dims[at] = std::max(shape.batch_dims[at], d[i]);
      s *= d[i];
    }
  };
  fill(a, shape.a_batch_strides, shape.M * shape.K);
  fill(b, shape.b_batch_strides, shape.K * shape.N);
  return shape;
}

namespace {

// Conv's parameters from its window and fused activation (the fast lowerings add theirs).
absl::StatusOr<kiln_conv_params> ConvParams(const Node& node, const WindowParams& win) {
  kiln_conv_params params{};
  params.group = node.GetInt("group", 1);
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, win));
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  return params;
}

absl::StatusOr<WindowParams> ConvWindow(const Node& node) {
  std::vector<int64_t> x = StaticDims(node.input(0)), w = StaticDims(node.input(1));
  return ComputeWindow(node, Spatial(x), node.GetInts("kernel_shape", Spatial(w)), false);
}

// Winograd F(4x4, 3x3) for artifacts (kernels/conv/winograd.cc): a 2-D f32 Conv with a
// constant 3x3 weight, stride 1, dilation 1, one group, input channels a multiple of 8 and
// output channels a multiple of 16. The weight becomes U = G g G^T, 36 matrices of
// [C x OC] stored as 16-column panels [36][OC/16][C][16], computed here in double. A 3-D
// Conv (3x3x3, the same conditions) takes F(2, 3) along depth as well: 144 matrices, point
// (z, i, j) at z * 36 + i * 6 + j, where U[z] = sum over kd of Gd[z][kd] (G g[kd] G^T).
// U is 144/27 of the weight's size; past kWinograd3dUBytes it stays direct. R3D-18 at batch
// 1, one thread: its 64-channel convs (U 2.4 MB, 196 tiles) 15.5 -> 4.5 ms, 128-channel
// (9.4 MB, 49 tiles) 7.3 -> 3.5, 256-channel (38 MB, 4 tiles, U read once) 4.0 -> 2.3; the
// 512-channel ones (151 MB for 1 tile) stay direct.
constexpr int64_t kWinogradScratchBudget = int64_t{4} << 20;  // bytes of V and M per tile chunk
constexpr int64_t kWinograd3dUBytes = int64_t{64} << 20;
// A 2-D conv whose U per tile passes this stays direct: ResNet-50's 512-channel 3x3 convs
// over 7x7 at batch 1 (36 MiB of U for 4 tiles, read from memory) took 1.28 ms each in the
// model at one thread and 0.94-0.96 at two, where ONNX Runtime scales to 0.67; as the
// transposed product over 49 positions (packed_weights 2, 9 MiB of weight) 1.22 and 0.66.
// ResNet-50 at two threads: 0.962 of the time before, one thread 0.996. Batch 8 (32 tiles,
// 1.1 MiB a tile) and the 14x14 convs (0.56 MiB) keep Winograd.
constexpr int64_t kWinogradUBytesPerTile = int64_t{4} << 20;

// The shape of a Conv the Winograd lowering takes, or nullopt.
struct WinogradShape {
  size_t dims;  // 2 or 3
  int64_t C, OC, points, tiles;
  WindowParams window;
};

// max_u_bytes_per_tile bounds a 2-D conv's U per tile, u_element_bytes the size of one of
// its elements as the GEMMs read it (bf16's U: 2, and its own bound).
absl::StatusOr<std::optional<WinogradShape>> WinogradApplies(const Node& node, int64_t u_element_bytes = sizeof(float),
                                                             int64_t max_u_bytes_per_tile = kWinogradUBytesPerTile) {
  // kiln.algorithm = "gemm64" (or another width): auto-tuning (driver/tune.cc) measured an
  // implicit GEMM faster than Winograd.
  if (node.GetString("kiln.algorithm", "").compare(0, 4, "gemm") == 0) return std::nullopt;
  const Value* w = node.input(1);
  if (!w->is_constant() || w->type().dtype != DType::kFloat32 || node.input(0)->type().dtype != DType::kFloat32) {
    return std::nullopt;
  }
  std::vector<int64_t> xd = StaticDims(node.input(0)), wd = StaticDims(w), yd = StaticDims(node.output(0));
  if ((xd.size() != 4 && xd.size() != 5) || node.GetInt("group", 1) != 1) return std::nullopt;
  const size_t dims = xd.size() - 2;
  for (size_t i = 2; i < wd.size(); ++i) {
    if (wd[i] != 3) return std::nullopt;
  }
  if (node.inputs().size() > 3 && node.input(3) != nullptr)
    return std::nullopt;  // an input scale: the GEMM path applies it
  KILN_ASSIGN_OR_RETURN(WindowParams win, ConvWindow(node));
  for (size_t i = 0; i < dims; ++i) {
    if (win.strides[i] != 1 || win.dilations[i] != 1) return std::nullopt;
  }
  const int64_t C = xd[1], OC = wd[0], points = dims == 3 ? 144 : 36;
  if (C % 8 != 0 || OC % 16 != 0) return std::nullopt;
  const int64_t depth_tiles = dims == 3 ? (yd[2] + 1) / 2 : 1;
  const int64_t tiles = xd[0] * depth_tiles * ((yd[dims] + 3) / 4) * ((yd[dims + 1] + 3) / 4);
  if (tiles < 4) return std::nullopt;
  if (dims == 3 && points * C * OC * static_cast<int64_t>(sizeof(float)) > kWinograd3dUBytes) return std::nullopt;
  if (dims == 2 && points * C * OC * u_element_bytes / tiles > max_u_bytes_per_tile) {
    return std::nullopt;
  }
  return WinogradShape{dims, C, OC, points, tiles, std::move(win)};
}

absl::StatusOr<std::optional<KernelCall>> LowerWinogradConv(const Node& node, int64_t u_element_bytes = sizeof(float),
                                                            int64_t max_u_bytes_per_tile = kWinogradUBytesPerTile) {
  KILN_ASSIGN_OR_RETURN(std::optional<WinogradShape> shape,
                        WinogradApplies(node, u_element_bytes, max_u_bytes_per_tile));
  if (!shape.has_value()) return std::nullopt;
  const size_t dims = shape->dims;
  const int64_t C = shape->C, OC = shape->OC, points = shape->points, tiles = shape->tiles;
  const std::vector<int64_t> xd = StaticDims(node.input(0));
  // G (6x3) for the interpolation points 0, 1, -1, 2, -2 and infinity; Gd (4x3) for 0, 1,
  // -1 and infinity (F(2, 3), along depth).
  static constexpr double kG[6][3] = {{1.0 / 4, 0, 0},
                                      {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                      {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                      {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                      {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                      {0, 0, 1}};
  static constexpr double kGd[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  auto u = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{points, OC / 16, C, 16});
  const float* g = node.input(1)->constant()->data_as<float>();
  float* pu = u->data_as<float>();
  const int64_t taps = dims == 3 ? 27 : 9;
  for (int64_t oc = 0; oc < OC; ++oc) {
    for (int64_t c = 0; c < C; ++c) {
      double plane[3][6][6];  // G k G^T of each depth tap (one in 2-D)
      for (int64_t kd = 0; kd < taps / 9; ++kd) {
        const float* k = g + (oc * C + c) * taps + kd * 9;
        double gk[6][3];  // G k
        for (int i = 0; i < 6; ++i) {
          for (int j = 0; j < 3; ++j) gk[i][j] = kG[i][0] * k[j] + kG[i][1] * k[3 + j] + kG[i][2] * k[6 + j];
        }
        for (int i = 0; i < 6; ++i) {
          for (int j = 0; j < 6; ++j) plane[kd][i][j] = gk[i][0] * kG[j][0] + gk[i][1] * kG[j][1] + gk[i][2] * kG[j][2];
        }
      }
      for (int64_t xi = 0; xi < points; ++xi) {
        const int64_t z = xi / 36, i = xi % 36 / 6, j = xi % 6;
        const double value = dims == 3
                                 ? kGd[z][0] * plane[0][i][j] + kGd[z][1] * plane[1][i][j] + kGd[z][2] * plane[2][i][j]
                                 : plane[0][i][j];
        pu[((xi * (OC / 16) + oc / 16) * C + c) * 16 + oc % 16] = static_cast<float>(value);
      }
    }
  }
  const int64_t per_tile = points * (C + OC) * static_cast<int64_t>(sizeof(float));
  int64_t chunk = std::max<int64_t>(6, kWinogradScratchBudget / per_tile / 6 * 6);
  if (chunk > tiles) chunk = tiles;
  chunk = std::max(chunk, xd[0]);  // a chunk holds a tile of every image (winograd_core.h)
  KILN_ASSIGN_OR_RETURN(kiln_conv_params params, ConvParams(node, shape->window));
  params.tiles_per_chunk = chunk;
  KernelCall call = CallWithParams<kernel::conv_winograd>({}, params);
  call.inputs.push_back(KernelOperand{0, nullptr});
  call.inputs.push_back(KernelOperand{-1, std::move(u)});
  call.inputs.push_back(KernelOperand{node.inputs().size() > 2 && node.input(2) != nullptr ? 2 : -1, nullptr});
  if (node.inputs().size() > 4) call.inputs.push_back(KernelOperand{4, nullptr});  // the residual
  call.scratch_bytes = chunk * per_tile;
  return call;
}

// Any other f32 Conv the kernel runs as an implicit GEMM (at least 4 output channels per
// group) with a constant weight: the weight pre-packed into panels of 6 rows (gemm::kMr),
// [group][ceil(OC/group / 6)][K][6], zero past the last row (packed_weights). The micro-kernel then reads one
// sequential stream of weights.
constexpr int64_t kConvPanelRows = 6;

// The K x N f32 matrix whose element (k, n) is src[k * k_stride + n * n_stride] as 16-column
// panels [N/16][K][16] (N a multiple of 16): a pre-packed B of the GEMM core.
std::shared_ptr<Tensor> PackColumnPanels(const float* src, int64_t K, int64_t N, int64_t k_stride, int64_t n_stride) {
  auto panels = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{N / 16, K, 16});
  float* dst = panels->data_as<float>();
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) dst[((n / 16) * K + k) * 16 + n % 16] = src[k * k_stride + n * n_stride];
  }
  return panels;
}

// dst [K, N] = the [N, K] f32 matrix src transposed.
void TransposeMatrix(const float* src, int64_t N, int64_t K, float* dst) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) dst[k * N + n] = src[n * K + k];
  }
}

// The [N, K] f32 matrix `src` (a Linear layer's or a 1x1 conv's weight) transposed, [K, N].
std::shared_ptr<Tensor> TransposedMatrix(const float* src, int64_t N, int64_t K) {
  auto transposed = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{K, N});
  TransposeMatrix(src, N, K, transposed->data_as<float>());
  return transposed;
}

// A 1x1 Conv (any stride, no padding, group 1, no input scale) with at most 49 output
// positions per image and a multiple of 16 output channels (ResNeXt's last two stages over
// 6x6 and 3x3 maps; ResNet-50's last over 7x7, whose 1024 -> 2048 downsample took 1.73 ms
// at one thread on the Zen 5 host as the implicit GEMM, 49 = 32 + 16 + 1 columns a weight
// row, and 1.05 this way, against ONNX Runtime's 1.10): its weight transposed into
// 16-column panels [OC/16][C][16] (packed_weights 2), so the kernel computes Y^T = X^T W^T
// with the positions as the GEMM's rows and the channels across the vector lanes, where 9
// positions filled 9 of a tile's 16 lanes (and 36, 36 of 48). (It was off for a while:
// with it, Faster R-CNN's detections 98 and 99, whose scores are 7.8e-7 apart, came out in
// the other order, which models_real read as wrong boxes and labels. Any change of
// summation order in a conv can do that; kiln-model-check --ranked-by now accepts
// near-tied rows in either order.)
// A wider window the same way, padding and dilation allowed, where a batch's positions
// are at most 49 in all: W^T [C x taps, OC], and X^T's rows the im2col columns. ResNet-50's
// stride-2 3x3 into 7x7 (512 channels, K = 4608), whose implicit GEMM again had 49 = 32 +
// 16 + 1 columns a weight row: 2.09 -> 1.62 ms at one thread in the model, 1.22 -> 0.86 at
// two (ONNX Runtime 1.33 and 0.67). Winograd, tried first, keeps the stride-1 3x3 convs
// whose U per tile is at most kWinogradUBytesPerTile.
// A strided 1x1 conv over up to 196 positions (ResNet-50's and ResNeXt-50's 512 -> 1024
// downsample into 14x14 at batch 1) takes it too, in slices of 49 positions that each read
// the weight again (2 MiB, from L3): 1.13 -> 1.03 ms at one thread, 0.59 -> 0.52 at two
// (ONNX Runtime 0.48 at two). Into 28x28 (784 positions, 16 slices) it was slower (1.02 ->
// 1.18 ms), and a 1x1 at stride 1 reads X in place as the implicit GEMM's B.
constexpr int64_t kFewPositions = KILN_CONV_FEW_POSITIONS;
constexpr int64_t kFewPositionsStrided = 196;
constexpr int64_t kFewPositionsFloats = KILN_CONV_FEW_POSITIONS_FLOATS;  // conv.cc's buffer for X^T

std::optional<std::shared_ptr<Tensor>> PackFewPositionsWeight(const Node& node, const WindowParams& window) {
  const Value* w = node.input(1);
  const std::vector<int64_t> wd = StaticDims(w), yd = StaticDims(node.output(0));
  if (node.GetInt("group", 1) != 1 || node.GetInt("kiln.input_scale", 0) == 1 || wd.size() != 4) return std::nullopt;
  const int64_t taps = wd[2] * wd[3], K = wd[1] * taps, positions = yd[2] * yd[3];
  const bool strided = window.strides.size() == 2 && (window.strides[0] > 1 || window.strides[1] > 1);
  const bool strided_pointwise = taps == 1 && strided && yd[0] * positions <= kFewPositionsStrided;
  if (wd[0] % 16 != 0 || wd[0] == 0 || (positions > kFewPositions && !strided_pointwise)) return std::nullopt;
  if (taps == 1) {
    // X^T in the kernel's buffer (a strided 1x1 past 49 positions: slices of 49).
    if (positions <= kFewPositions && positions * wd[1] > kFewPositionsFloats) return std::nullopt;
    for (size_t i = 0; i < window.pads_begin.size(); ++i) {
      if (window.pads_begin[i] != 0 || window.pads_end[i] != 0) return std::nullopt;
    }
  } else if (yd[0] * yd[2] * yd[3] > kFewPositions || taps * kFewPositions > kFewPositionsFloats) {
    return std::nullopt;  // a larger batch: the implicit GEMM has columns enough
  }
  // W^T [K, OC]: element (k, o) is W[o, k], k = (input channel, tap).
  return PackColumnPanels(w->constant()->data_as<float>(), K, wd[0], 1, K);
}

// A grouped 2-D Conv over a small map (at most kGroupedGemmPositions output positions per
// image; ResNeXt's last stages) with 16 to 64 output channels per group, a multiple of 16,
// and at most 512 input channels x taps per group: its weight transposed per group,
// [group][K][OC/group] (packed_weights 4), for conv.cc's RunGroupedGemm, which puts the
// group's output channels across the vector lanes.
constexpr int64_t kGroupedGemmPositions = 64;

std::optional<std::shared_ptr<Tensor>> PackGroupedGemmWeight(const Node& node) {
  const Value* w = node.input(1);
  const std::vector<int64_t> wd = StaticDims(w), yd = StaticDims(node.output(0));
  const int64_t group = node.GetInt("group", 1);
  if (group == 1 || node.GetInt("kiln.input_scale", 0) == 1 || wd.size() != 4 || yd.size() != 4) return std::nullopt;
  const int64_t ocg = wd[0] / group, K = wd[1] * wd[2] * wd[3];
  if (ocg % 16 != 0 || ocg == 0 || ocg > 64 || K > 512 || yd[2] * yd[3] > kGroupedGemmPositions) return std::nullopt;
  auto packed = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{group, K, ocg});
  const float* src = w->constant()->data_as<float>();
  for (int64_t g = 0; g < group; ++g)
    TransposeMatrix(src + g * ocg * K, ocg, K, packed->data_as<float>() + g * K * ocg);
  return packed;
}

absl::StatusOr<std::optional<KernelCall>> LowerPackedConv(const Node& node) {
  const Value* w = node.input(1);
  if (!w->is_constant() || w->type().dtype != DType::kFloat32) return std::nullopt;
  std::vector<int64_t> wd = StaticDims(w);
  const int64_t group = node.GetInt("group", 1), oc = wd[0], ocg = oc / group;
  if (ocg < 4) return std::nullopt;
  {
    auto win = ConvWindow(node);
    if (!win.ok()) return win.status();
    if (std::optional<std::shared_ptr<Tensor>> panels = PackFewPositionsWeight(node, *win)) {
      KILN_ASSIGN_OR_RETURN(kiln_conv_params params, ConvParams(node, *win));
      params.packed_weights = 2;
      KernelCall call = CallWithParams<kernel::conv>(PassAllInputs(node), params);
      call.inputs[1] = KernelOperand{-1, std::move(*panels)};
      return call;
    }
    if (std::optional<std::shared_ptr<Tensor>> transposed = PackGroupedGemmWeight(node)) {
      KILN_ASSIGN_OR_RETURN(kiln_conv_params params, ConvParams(node, *win));
      params.packed_weights = 4;
      KernelCall call = CallWithParams<kernel::conv>(PassAllInputs(node), params);
      call.inputs[1] = KernelOperand{-1, std::move(*transposed)};
      return call;
    }
  }
  int64_t K = 1;
  for (size_t i = 1; i < wd.size(); ++i) K *= wd[i];
  if (K == 0) return std::nullopt;
  const int64_t panels = (ocg + kConvPanelRows - 1) / kConvPanelRows;
  auto packed = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{group, panels * kConvPanelRows, K});
  const float* src = w->constant()->data_as<float>();
  float* dst = packed->data_as<float>();  // zero-initialised
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t r = 0; r < ocg; ++r) {
      const float* row = src + (g * ocg + r) * K;
      float* panel = dst + (g * panels + r / kConvPanelRows) * kConvPanelRows * K + r % kConvPanelRows;
      for (int64_t k = 0; k < K; ++k) panel[k * kConvPanelRows] = row[k];
    }
  }
  auto win = ConvWindow(node);
  if (!win.ok()) return win.status();
  KILN_ASSIGN_OR_RETURN(kiln_conv_params params, ConvParams(node, *win));
  params.packed_weights = 1;
  // The job width in output positions: --tune's "gemmN" (kiln.algorithm), else the kernel's default.
  const std::string algorithm = node.GetString("kiln.algorithm", "");
  if (algorithm.size() > 4 && algorithm.compare(0, 4, "gemm") == 0) params.job_cols = std::atoll(algorithm.c_str() + 4);
  KernelCall call = CallWithParams<kernel::conv>(PassAllInputs(node), params);
  call.inputs[1] = KernelOperand{-1, std::move(packed)};
  return call;
}

// A Conv of 1x1 maps over a batch of more than one (squeeze-and-excitation's, after global
// pooling): X [N, C, 1...] is a [N, C] matrix, so Y = X W^T + B is one MatMul over the
// batch that reads the weight once (pre-packed in panels when OC is a multiple of 16, else
// stored as W^T), rather than a matrix-vector product per image. MobileNetV3-small at
// batch 8: its 18 SE convs 0.12-0.16 -> 0.005-0.03 ms each. The node stays a Conv, so the
// layout pass still sees its SE blocks.
absl::StatusOr<std::optional<KernelCall>> LowerPooledPointConv(const Node& node) {
  const Value* w = node.input(1);
  if (node.GetInt("group", 1) != 1 || node.inputs().size() > 3 || !w->is_constant() ||
      w->type().dtype != DType::kFloat32) {
    return std::nullopt;
  }
  const std::vector<int64_t> xd = StaticDims(node.input(0)), yd = StaticDims(node.output(0)), wd = StaticDims(w);
  if (xd.size() < 3 || xd.size() != yd.size() || xd.size() != wd.size() || xd[0] < 2) return std::nullopt;
  for (size_t a = 2; a < xd.size(); ++a) {
    if (xd[a] != 1 || yd[a] != 1 || wd[a] != 1) return std::nullopt;
  }
  const int64_t oc = wd[0], c = wd[1];
  const float* src = w->constant()->data_as<float>();
  kiln_matmul_params params{};
  params.shape.M = xd[0];
  params.shape.K = c;
  params.shape.N = oc;
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  std::shared_ptr<Tensor> b;
  if (oc % 16 == 0) {
    b = PackColumnPanels(src, c, oc, 1, c);  // element (k, n) is W[n, k]
    params.b_panels = 1;
  } else {
    b = TransposedMatrix(src, oc, c);
  }
  const bool has_bias = node.inputs().size() > 2 && node.input(2) != nullptr;
  std::vector<KernelOperand> inputs = {KernelOperand{0, nullptr}, KernelOperand{-1, std::move(b)},
                                       KernelOperand{has_bias ? 2 : -1, nullptr}};
  return std::optional<KernelCall>(CallWithParams<kernel::matmul>(std::move(inputs), params));
}

absl::StatusOr<std::optional<KernelCall>> LowerConvForArtifact(const Node& node) {
  if (node.input(0)->type().dtype != DType::kFloat32) return std::nullopt;
  if (MarkedBf16(node)) return LowerConvBf16(node);
  KILN_ASSIGN_OR_RETURN(std::optional<KernelCall> points, LowerPooledPointConv(node));
  if (points) return points;
  absl::StatusOr<std::optional<KernelCall>> winograd = LowerWinogradConv(node);  // unless tuned to a GEMM
  if (!winograd.ok() || winograd->has_value()) return winograd;
  return LowerPackedConv(node);
}

}  // namespace

absl::StatusOr<std::optional<KernelCall>> LowerWinogradConvF32(const Node& node, int64_t u_element_bytes,
                                                               int64_t max_u_bytes_per_tile) {
  return LowerWinogradConv(node, u_element_bytes, max_u_bytes_per_tile);
}

namespace {

kiln_norm_params NormEpsilon(const Node& node) {
  kiln_norm_params params{};
  params.epsilon = node.GetFloat("epsilon", 1e-5);
  return params;
}

absl::StatusOr<WindowParams> PoolWindow(const Node& node) {
  std::vector<int64_t> x = StaticDims(node.input(0));
  return ComputeWindow(node, Spatial(x), node.GetInts("kernel_shape"), node.GetInt("ceil_mode", 0) != 0);
}

// ConvTranspose: output extents and the begin pads applied to the full output.
absl::StatusOr<WindowParams> ConvTransposeWindow(const Node& node) {
  std::vector<int64_t> x = StaticDims(node.input(0)), wdims = StaticDims(node.input(1));
  const size_t r = x.size() - 2;
  WindowParams w;
  w.kernel = node.GetInts("kernel_shape", Spatial(wdims));
  w.strides = node.GetInts("strides", std::vector<int64_t>(r, 1));
  w.dilations = node.GetInts("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * r, 0));
  std::vector<int64_t> output_padding = node.GetInts("output_padding", std::vector<int64_t>(r, 0));
  std::vector<int64_t> output_shape = node.GetInts("output_shape");
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  if (w.kernel.size() != r || w.strides.size() != r || pads.size() != 2 * r)
    return NodeError(node, "kernel_shape/strides/pads do not match the spatial rank");
  w.pads_begin.assign(pads.begin(), pads.begin() + r);
  w.pads_end.assign(pads.begin() + r, pads.end());
  for (size_t i = 0; i < r; ++i) {
    const int64_t in = x[2 + i];
    const int64_t full = w.strides[i] * (in - 1) + output_padding[i] + (w.kernel[i] - 1) * w.dilations[i] + 1;
    int64_t out;
    if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = !output_shape.empty() ? output_shape[output_shape.size() - r + i] : in * w.strides[i];
      const int64_t total = full - out;
      if (auto_pad == "SAME_UPPER") {
        w.pads_begin[i] = total / 2;
      } else if (auto_pad == "SAME_LOWER") {
        w.pads_begin[i] = total - total / 2;
      } else {
        w.pads_begin[i] = total / 2;
      }
      w.pads_end[i] = total - w.pads_begin[i];
    } else {
      if (auto_pad == "VALID") w.pads_begin[i] = w.pads_end[i] = 0;
      out = full - w.pads_begin[i] - w.pads_end[i];
    }
    w.out.push_back(out);
  }
  return w;
}

}  // namespace

namespace {

// Transposes the fuse pass folded into a MatMul: kiln.a_perm and kiln.b_perm name the
// Transpose each operand went through (the node reads the untransposed tensor),
// kiln.c_perm the one its result goes through.
std::vector<int64_t> Permuted(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm) {
  if (perm.empty()) return dims;
  std::vector<int64_t> out;
  for (int64_t p : perm) out.push_back(p >= 0 && p < static_cast<int64_t>(dims.size()) ? dims[p] : 0);
  return out;
}

bool HasFoldedTransposes(const Node& node) {
  return node.has_attr("kiln.a_perm") || node.has_attr("kiln.b_perm") || node.has_attr("kiln.c_perm");
}

absl::Status InferMatMul(InferContext& ctx) {
  if (auto st = RequireStaticInputs(ctx, {0, 1}); !st.ok()) return st;
  if (ctx.type(0).dtype != ctx.type(1).dtype) return NodeError(ctx.node, "operands have different element types");
  const std::vector<int64_t> a = Permuted(ctx.type(0).StaticDims(), ctx.node.GetInts("kiln.a_perm"));
  const std::vector<int64_t> b = Permuted(ctx.type(1).StaticDims(), ctx.node.GetInts("kiln.b_perm"));
  auto out = MatMulOutputShape(ctx.node, a, b);
  if (!out.ok()) return out.status();
  const std::vector<int64_t> c_perm = ctx.node.GetInts("kiln.c_perm");
  if (!c_perm.empty()) {
    std::vector<Dim> permuted;
    for (int64_t p : c_perm) {
      if (p < 0 || p >= static_cast<int64_t>(out->size()))
        return NodeError(ctx.node, "kiln.c_perm is not a permutation");
      permuted.push_back((*out)[p]);
    }
    *out = permuted;
  }
  ctx.output_types[0] = WithShape(ctx.type(0).dtype, *out);
  return absl::OkStatus();
}

// Element strides of a contiguous tensor of `dims`.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

// The strided parameters of a MatMul with folded transposes (HasFoldedTransposes): A, B
// and the result of one rank (3 or more, no broadcast batch dims), A's K axis and the
// result's N axis contiguous, B's N or K axis contiguous.
absl::Status FoldedTransposeParams(const Node& node, kiln_matmul_params& params) {
  const std::vector<int64_t> a0 = StaticDims(node.input(0)), b0 = StaticDims(node.input(1));
  const size_t rank = a0.size();
  auto perm_of = [&](const char* attr) {
    std::vector<int64_t> perm = node.GetInts(attr);
    if (perm.empty())
      for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(i));
    return perm;
  };
  const std::vector<int64_t> ap = perm_of("kiln.a_perm"), bp = perm_of("kiln.b_perm"), cp = perm_of("kiln.c_perm");
  if (rank < 3 || b0.size() != rank || ap.size() != rank || bp.size() != rank || cp.size() != rank)
    return NodeError(node, "folded transposes need operands and result of one rank, 3 or more");
  const std::vector<int64_t> a = Permuted(a0, ap), b = Permuted(b0, bp);
  const std::vector<int64_t> as0 = ContiguousStrides(a0), bs0 = ContiguousStrides(b0);
  std::vector<int64_t> as(rank), bs(rank);
  for (size_t i = 0; i < rank; ++i) {
    as[i] = as0[ap[i]];
    bs[i] = bs0[bp[i]];
  }
  // The product [batch.., M, N] lies in the result (its contiguous layout) through c_perm.
  std::vector<int64_t> product(a.begin(), a.end() - 1);  // [batch.., M]
  product.push_back(b[rank - 1]);
  const std::vector<int64_t> out = Permuted(product, cp), os = ContiguousStrides(out);
  std::vector<int64_t> cs(rank);
  for (size_t j = 0; j < rank; ++j) cs[cp[j]] = os[j];
  const bool b_transposed = bs[rank - 1] != 1;
  if (as[rank - 1] != 1 || cs[rank - 1] != 1 || (b_transposed && bs[rank - 2] != 1))
    return NodeError(node,
                     "folded transposes must keep A's K axis, B's N or K axis and the result's N axis contiguous");
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (a[i] != b[i]) return NodeError(node, "folded transposes need equal batch dims");
  }
  KILN_ASSIGN_OR_RETURN(params.shape, MatMulShape(node, a, b));
  for (size_t i = 0; i + 2 < rank; ++i) {
    params.shape.a_batch_strides[i] = as[i];
    params.shape.b_batch_strides[i] = bs[i];
    params.c_batch_strides[i] = cs[i];
  }
  params.lda = as[rank - 2];
  params.ldb = b_transposed ? bs[rank - 1] : bs[rank - 2];
  params.b_transposed = b_transposed ? 1 : 0;
  params.ldc = cs[rank - 2];
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerMatMul(const Node& node) {
  kiln_matmul_params params{};
  if (HasFoldedTransposes(node)) {
    KILN_RETURN_IF_ERROR(FoldedTransposeParams(node, params));
    KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
    return CallWithParams<kernel::matmul>(PassAllInputs(node), params);
  }
  std::vector<int64_t> a = StaticDims(node.input(0)), b = StaticDims(node.input(1));
  // A 2-D B applies to every row of A alike: [.., M, K] is one [(..)*M, K] matrix and the
  // output [.., M, N] one [(..)*M, N]. One product instead of a batch of small ones
  // (torch's MultiheadAttention projects [seq, 1, width]: seq products of one row each,
  // each reading the whole weight). Not for the integer products, whose A zero points and
  // scales may be per row of M.
  if (b.size() <= 2 && a.size() > 2) {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < a.size(); ++i) rows *= a[i];
    a = {rows, a.back()};
  }
  KILN_ASSIGN_OR_RETURN(params.shape, MatMulShape(node, a, b));
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  return CallWithParams<kernel::matmul>(PassAllInputs(node), params);
}

// Artifacts: a constant 2-D f32 B (a weight) with N a multiple of 16 is pre-packed into
// 16-column panels [N/16][K][16] at compile time (b_panels).
absl::StatusOr<std::optional<KernelCall>> LowerMatMulForArtifact(const Node& node) {
  if (HasFoldedTransposes(node)) return std::nullopt;  // (the fuse pass folds them only where B is not constant)
  // A pruned weight that runs faster block-sparse does so (in f32, whatever the precision).
  KILN_ASSIGN_OR_RETURN(std::optional<KernelCall> sparse, LowerSparseMatMul(node));
  if (sparse) return sparse;
  if (MarkedBf16(node)) return LowerMatMulBf16(node);
  const Value* b = node.input(1);
  if (!b->is_constant() || b->type().dtype != DType::kFloat32 || node.input(0)->type().dtype != DType::kFloat32) {
    return std::nullopt;
  }
  const std::vector<int64_t> bd = StaticDims(b);
  if (bd.size() != 2 || bd[0] == 0 || bd[1] % 16 != 0 || bd[1] == 0) return std::nullopt;
  absl::StatusOr<KernelCall> call = LowerMatMul(node);
  if (!call.ok()) return call.status();
  call->inputs[1] = KernelOperand{-1, PackColumnPanels(b->constant()->data_as<float>(), bd[0], bd[1], bd[1], 1)};
  kiln_matmul_params params = call->params.Get<kiln_matmul_params>();
  params.b_panels = 1;
  call->params.Set(params);
  return std::optional<KernelCall>(std::move(*call));
}

// Artifacts: a Gemm of a constant f32 B (a Linear layer) with N a multiple of 16 and more
// than one row, as MatMul's kernel on B pre-packed into panels (alpha folded into them)
// with beta * C as its bias, when C is absent, a scalar or a row of N. The Gemm kernel packs
// B on every call, gathering it a column at a time when transB = 1: ViT-S/16's attention
// output projection ([197 x 384] x [384 x 384]) ran at 84 GFLOP/s against 110 for its
// MatMuls.
absl::StatusOr<std::optional<KernelCall>> LowerGemmAsPackedMatMul(const Node& node) {
  const Value* a = node.input(0);
  const Value* b = node.input(1);
  const Value* c = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (node.GetInt("transA", 0) != 0 || !b->is_constant() || b->type().dtype != DType::kFloat32 ||
      a->type().dtype != DType::kFloat32) {
    return std::nullopt;
  }
  const std::vector<int64_t> ad = StaticDims(a), bd = StaticDims(b);
  const bool tb = node.GetInt("transB", 0) != 0;
  const int64_t M = ad[0], K = ad[1], N = tb ? bd[0] : bd[1];
  if (M < 2 || K == 0 || N == 0 || N % 16 != 0) return std::nullopt;
  const float alpha = static_cast<float>(node.GetFloat("alpha", 1.0));
  const float beta = static_cast<float>(node.GetFloat("beta", 1.0));
  KernelOperand bias{-1, nullptr};
  if (c != nullptr && beta != 0.f) {
    const std::vector<int64_t> cd = StaticDims(c);
    const int64_t count = NumElements(cd);
    const bool row = count == N && (cd.size() == 1 || (cd.size() == 2 && cd[0] == 1));
    if (!row && count != 1) return std::nullopt;
    if (c->is_constant() && c->type().dtype == DType::kFloat32) {
      auto row_bias = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{N});
      const float* src = c->constant()->data_as<float>();
      for (int64_t j = 0; j < N; ++j) row_bias->data_as<float>()[j] = beta * src[row ? j : 0];
      bias.constant = std::move(row_bias);
    } else if (row && beta == 1.f) {
      bias.node_input = 2;
    } else {
      return std::nullopt;
    }
  }
  std::shared_ptr<Tensor> packed = PackColumnPanels(b->constant()->data_as<float>(), K, N, tb ? 1 : N, tb ? K : 1);
  if (alpha != 1.f) {
    float* w = packed->data_as<float>();
    for (int64_t i = 0; i < K * N; ++i) w[i] *= alpha;
  }
  kiln_matmul_params params{};
  params.shape.M = M;
  params.shape.K = K;
  params.shape.N = N;
  params.b_panels = 1;
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  std::vector<KernelOperand> inputs = {KernelOperand{0, nullptr}, KernelOperand{-1, std::move(packed)},
                                       std::move(bias)};
  return std::optional<KernelCall>(CallWithParams<kernel::matmul>(std::move(inputs), params));
}

absl::StatusOr<KernelCall> LowerGemm(const Node& node);

// gemm.cc's GemmKernel::kFewRows.
constexpr int64_t kGemmFewRows = 16;

// A constant f32 B with transB = 1 (torch's Linear: W [N, K]) that LowerGemmAsPackedMatMul
// does not take (N off the 16-column panels) and more than kGemmFewRows rows is stored transposed, [K, N], with transB
// = 0: the kernel then copies rows of B into its packed blocks rather than gathering each column across K rows 4 KiB or
// more apart (ResNeXt-50's 2048 -> 1000 head at batch 8 took 10 ms, ONNX Runtime's 0.6). One row keeps B as given: its
// matrix-vector path reads B's rows as dots.
absl::StatusOr<std::optional<KernelCall>> LowerGemmTransposedWeight(const Node& node) {
  const Value* a = node.input(0);
  const Value* b = node.input(1);
  if (node.GetInt("transB", 0) == 0 || !b->is_constant() || b->type().dtype != DType::kFloat32 ||
      a->type().dtype != DType::kFloat32 || !a->type().IsStatic()) {
    return std::nullopt;
  }
  const std::vector<int64_t> ad = StaticDims(a), bd = StaticDims(b);
  // Up to kGemmFewRows rows the kernel multiplies B's rows where they lie (FewRowsTransB).
  if (ad.size() != 2 || bd.size() != 2 || (node.GetInt("transA", 0) != 0 ? ad[1] : ad[0]) <= kGemmFewRows) {
    return std::nullopt;
  }
  const int64_t N = bd[0], K = bd[1];
  KILN_ASSIGN_OR_RETURN(KernelCall call, LowerGemm(node));
  call.inputs[1] = KernelOperand{-1, TransposedMatrix(b->constant()->data_as<float>(), N, K)};
  kiln_gemm_params params = call.params.Get<kiln_gemm_params>();
  params.trans_b = 0;
  call.params.Set(params);
  return std::optional<KernelCall>(std::move(call));
}

// Artifacts: a pruned weight block-sparse (as MatMul's), else bf16 when the bf16 pass
// marked the node, else B pre-packed, else a transposed B stored as [K, N].
absl::StatusOr<std::optional<KernelCall>> LowerGemmForArtifact(const Node& node) {
  KILN_ASSIGN_OR_RETURN(std::optional<KernelCall> sparse, LowerSparseMatMul(node));
  if (sparse) return sparse;
  KILN_ASSIGN_OR_RETURN(std::optional<KernelCall> bf16, LowerGemmBf16(node));
  if (bf16) return bf16;
  KILN_ASSIGN_OR_RETURN(std::optional<KernelCall> packed, LowerGemmAsPackedMatMul(node));
  if (packed) return packed;
  return LowerGemmTransposedWeight(node);
}

absl::Status InferGemm(InferContext& ctx) {
  if (auto st = RequireStaticInputs(ctx, {0, 1}); !st.ok()) return st;
  std::vector<int64_t> a = ctx.type(0).StaticDims(), b = ctx.type(1).StaticDims();
  if (a.size() != 2 || b.size() != 2) return NodeError(ctx.node, "A and B must be 2-D");
  const bool ta = ctx.node.GetInt("transA", 0) != 0, tb = ctx.node.GetInt("transB", 0) != 0;
  const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
  const int64_t KB = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
  if (K != KB) return NodeError(ctx.node, absl::StrCat("inner dimensions differ: A gives ", K, ", B gives ", KB));
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, {M, N});
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerGemm(const Node& node) {
  kiln_gemm_params params{};
  params.trans_a = node.GetInt("transA", 0);
  params.trans_b = node.GetInt("transB", 0);
  params.alpha = node.GetFloat("alpha", 1.0);
  params.beta = node.GetFloat("beta", 1.0);
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  return CallWithParams<kernel::gemm>(PassAllInputs(node), params);
}

// Two more inputs only as the fuse pass writes them. Input 3, with kiln.input_scale = 1
// (B then present): a per-(image, input channel) scale [N or 1, C, 1, ...] the Conv
// applies to X first, i.e. the Conv of Mul(X, scale) (EfficientNet's
// squeeze-and-excitation). Input 4, with kiln.residual = 1 (input 3 then may be
// omitted): a tensor shaped as Y added after the bias, before the activation, i.e.
// Add(Conv(...), R) (ResNet's skip connection).
absl::Status InferConv(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (auto st = RequireStaticInputs(ctx, {0, 1}); !st.ok()) return st;
  std::vector<int64_t> x = ctx.type(0).StaticDims(), w = ctx.type(1).StaticDims();
  const size_t n_inputs = ctx.node.inputs().size();
  const bool has_scale = n_inputs > 3 && ctx.node.input(3) != nullptr;
  if (n_inputs == 5 && (ctx.node.GetInt("kiln.residual", 0) != 1 || ctx.node.input(4) == nullptr)) {
    return NodeError(
        ctx.node, "Conv takes at most 3 inputs (X, W, B); a fifth, the fuse pass's residual, needs kiln.residual = 1");
  }
  if (n_inputs > 3 && !has_scale && n_inputs != 5) return NodeError(ctx.node, "Conv takes at most 3 inputs (X, W, B)");
  if (has_scale) {
    if (ctx.node.GetInt("kiln.input_scale", 0) != 1 || ctx.node.input(2) == nullptr) {
      return NodeError(ctx.node, "Conv takes at most 3 inputs (X, W, B)");
    }
    if (auto st = RequireStatic(ctx, 3); !st.ok()) return st;
    std::vector<int64_t> scale = ctx.type(3).StaticDims();
    bool ok = scale.size() == x.size() && (scale[0] == 1 || scale[0] == x[0]) && scale[1] == x[1];
    for (size_t i = 2; ok && i < scale.size(); ++i) ok = scale[i] == 1;
    if (!ok || ctx.type(3).dtype != ctx.type(0).dtype) {
      return NodeError(ctx.node, absl::StrCat("input scale [", absl::StrJoin(scale, ","), "] must be [N or 1, ", x[1],
                                              ", 1...] of X's type"));
    }
  }
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> out, ConvOutputDims(ctx.node, x, w));
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  if (n_inputs == 5) {
    if (auto st = RequireStatic(ctx, 4); !st.ok()) return st;
    if (ctx.type(4).StaticDims() != out || ctx.type(4).dtype != ctx.type(0).dtype) {
      return NodeError(ctx.node, absl::StrCat("residual [", absl::StrJoin(ctx.type(4).StaticDims(), ","),
                                              "] must have Y's shape [", absl::StrJoin(out, ","), "] and X's type"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerConv(const Node& node) {
  auto win = ConvWindow(node);
  if (!win.ok()) return win.status();
  KILN_ASSIGN_OR_RETURN(kiln_conv_params params, ConvParams(node, *win));
  return CallWithParams<kernel::conv>(PassAllInputs(node), params);
}

absl::Status InferConvTranspose(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (auto st = RequireStaticInputs(ctx, {0, 1}); !st.ok()) return st;
  auto win = ConvTransposeWindow(ctx.node);
  if (!win.ok()) return win.status();
  std::vector<int64_t> x = ctx.type(0).StaticDims(), w = ctx.type(1).StaticDims();
  std::vector<int64_t> out = {x[0], w[1] * ctx.node.GetInt("group", 1)};
  out.insert(out.end(), win->out.begin(), win->out.end());
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerConvTranspose(const Node& node) {
  auto win = ConvTransposeWindow(node);
  if (!win.ok()) return win.status();
  kiln_conv_params params{};
  params.group = node.GetInt("group", 1);
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, *win));
  return CallWithParams<kernel::conv_transpose>(PassAllInputs(node), params);
}

void RegisterPools(Registry& registry) {
  for (NamedCode def : {NamedCode{"MaxPool", KILN_POOL_MAX}, NamedCode{"AveragePool", KILN_POOL_AVERAGE},
                        NamedCode{"LpPool", KILN_POOL_LP}}) {
    OpSchema s = Schema(def.name);
    s.infer = [def](InferContext& ctx) -> absl::Status {
      if (def.code != KILN_POOL_MAX) {
        if (auto st = RequireFloat(ctx); !st.ok()) return st;
      }
      if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
      std::vector<int64_t> x = ctx.type(0).StaticDims();
      if (x.size() < 3 || x.size() > 5) return NodeError(ctx.node, "input must be 3-D, 4-D or 5-D");
      auto win =
          ComputeWindow(ctx.node, Spatial(x), ctx.node.GetInts("kernel_shape"), ctx.node.GetInt("ceil_mode", 0) != 0);
      if (!win.ok()) return win.status();
      std::vector<int64_t> out = {x[0], x[1]};
      out.insert(out.end(), win->out.begin(), win->out.end());
      ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
      if (ctx.output_types.size() > 1) ctx.output_types[1] = TensorType::Static(DType::kInt64, out);
      return absl::OkStatus();
    };
    s.lower = [def](const Node& node) -> absl::StatusOr<KernelCall> {
      auto win = PoolWindow(node);
      if (!win.ok()) return win.status();
      kiln_pool_params params{};
      params.op = def.code;
      KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, *win));
      params.count_include_pad = node.GetInt("count_include_pad", 0);
      params.p = static_cast<double>(node.GetInt("p", 2));
      params.storage_order = node.GetInt("storage_order", 0) != 0 ? 1 : 0;
      return CallWithParams<kernel::pool>(PassInputs(node, 1), params);
    };
    registry.Add(std::move(s));
  }
}

// Training mode (opset 14 on) normalizes with the batch's statistics; its running mean
// and variance outputs have the shape and type of inputs 3 and 4.
absl::Status InferBatchNormalization(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  const bool training = ctx.node.GetInt("training_mode", 0) != 0;
  if (!training && ctx.output_types.size() > 1) {
    return NodeError(ctx.node, "running statistics outputs need training_mode = 1");
  }
  for (size_t i = 1; i < ctx.output_types.size() && i < 3; ++i) ctx.output_types[i] = ctx.type(2 + i);
  return SameAsInput0(ctx);
}

absl::StatusOr<KernelCall> LowerBatchNormalization(const Node& node) {
  kiln_norm_params params = NormEpsilon(node);
  params.training = node.GetInt("training_mode", 0) != 0 ? 1 : 0;
  params.momentum = node.GetFloat("momentum", 0.9);
  return CallWithParams<kernel::batch_norm>(PassInputs(node, 5), params);
}

// MeanVarianceNormalization: the statistics over `axes` (default [0, 2, 3]).
absl::StatusOr<int64_t> MvnAxesMask(const Node& node, int64_t rank) {
  int64_t mask = 0;
  for (int64_t axis : node.GetInts("axes", {0, 2, 3})) {
    KILN_ASSIGN_OR_RETURN(const int64_t a, NormalizeAxis(node, axis, rank, "axes"));
    mask |= int64_t{1} << a;
  }
  return mask;
}

absl::Status InferMeanVarianceNormalization(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  const int64_t rank = static_cast<int64_t>(ctx.type(0).shape.size());
  if (rank > KILN_MAX_RANK) return NodeError(ctx.node, absl::StrCat("rank ", rank, " is over ", KILN_MAX_RANK));
  if (auto mask = MvnAxesMask(ctx.node, rank); !mask.ok()) return mask.status();
  return SameAsInput0(ctx);
}

absl::StatusOr<KernelCall> LowerMeanVarianceNormalization(const Node& node) {
  kiln_norm_params params{};
  KILN_ASSIGN_OR_RETURN(params.axes_mask, MvnAxesMask(node, static_cast<int64_t>(StaticDims(node.input(0)).size())));
  return CallWithParams<kernel::mean_variance_norm>(PassInputs(node, 1), params);
}

absl::StatusOr<KernelCall> LowerInstanceNormalization(const Node& node) {
  return CallWithParams<kernel::instance_norm>(PassInputs(node, 3), NormEpsilon(node));
}

absl::Status InferLayerNormalization(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
  const auto& in = ctx.type(0).shape;
  auto axis = NormalizeAxis(ctx.node, ctx.node.GetInt("axis", -1), static_cast<int64_t>(in.size()));
  if (!axis.ok()) return axis.status();
  ctx.output_types[0] = ctx.type(0);
  std::vector<Dim> stat(in.begin(), in.begin() + *axis);
  while (stat.size() < in.size()) stat.push_back(Dim::Known(1));
  for (size_t i = 1; i < ctx.output_types.size(); ++i) ctx.output_types[i] = WithShape(ctx.type(0).dtype, stat);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerLayerNormalization(const Node& node) {
  const int64_t axis = AxisAttr(node, -1, node.input(0));
  kiln_norm_params params = NormEpsilon(node);
  params.axis = axis;
  return CallWithParams<kernel::layer_norm>(PassAllInputs(node), params);
}

absl::StatusOr<KernelCall> LowerLRN(const Node& node) {
  kiln_norm_params params{};
  params.size = node.GetInt("size", 1);
  params.alpha = node.GetFloat("alpha", 1e-4);
  params.beta = node.GetFloat("beta", 0.75);
  params.bias = node.GetFloat("bias", 1.0);
  return CallWithParams<kernel::lrn>(PassInputs(node, 1), params);
}

// Dropout as the importer leaves it: only where training_mode is not a constant false and
// the ratio not a constant 0 (those are an Identity and an all-true mask). The mask is bool.
absl::Status InferDropout(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (ctx.output_types.size() > 1) {
    ctx.output_types[1] = ctx.type(0);
    ctx.output_types[1].dtype = DType::kBool;
  }
  return SameAsInput0(ctx);
}

absl::StatusOr<KernelCall> LowerDropout(const Node& node) {
  kiln_elementwise_params params{};
  params.seed = node.GetInt("seed", 0);
  return CallWithParams<kernel::dropout>(PassAllInputs(node), params);
}

}  // namespace

void RegisterNnOps(Registry& registry) {
  RegisterPools(registry);
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower, lower_fast}
  const OpSchema ops[] = {
      // MatMul's input 2: a bias [N], input 3: a residual, both folded in by the fuse pass.
      {"MatMul", 2, 4, 0, InferMatMul, LowerMatMul, LowerMatMulForArtifact},
      {"Gemm", 2, 3, 0, InferGemm, LowerGemm, LowerGemmForArtifact},
      {"Conv", 2, 5, 0, InferConv, LowerConv, LowerConvForArtifact},
      {"ConvTranspose", 2, 3, 0, InferConvTranspose, LowerConvTranspose},
      {"BatchNormalization", 5, 5, 0, InferBatchNormalization, LowerBatchNormalization},
      {"InstanceNormalization", 3, 3, 0, SameFloatTypeAsInput0, LowerInstanceNormalization},
      {"LayerNormalization", 2, 3, 0, InferLayerNormalization, LowerLayerNormalization},
      {"LRN", 1, 1, 0, SameFloatTypeAsInput0, LowerLRN},
      {"Dropout", 1, 3, 0, InferDropout, LowerDropout},
      {"MeanVarianceNormalization", 1, 1, 0, InferMeanVarianceNormalization, LowerMeanVarianceNormalization},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops

namespace kiln {

bool TakesWinograd3d(const Node& node) {
  if (node.op() != "Conv") return false;
  absl::StatusOr<std::optional<ops::WinogradShape>> shape = ops::WinogradApplies(node);
  return shape.ok() && shape->has_value() && (*shape)->dims == 3;
}

}  // namespace kiln
