// The bf16 lowerings (bf16_ops.h). The weight is rounded to bf16 (nearest even) here, once,
// and stored only in that form: pairs of k in 32-bit words (low half k even), in the panels
// the kernels stream (kernels/bf16/bf16.cc): a Conv's [group][ceil(OC/group / 12)][ceil(K/2)][12]
// (12-row panels of A) or, over few positions, [group][ceil(OC/group / 32)][ceil(K/2)][32]
// (32-column panels of B), a product's B as [ceil(N/32)][ceil(K/2)][32] (32-column panels),
// zero past the edges.
#include "bf16_ops.h"

#include <cstring>

#include "kiln/kernels/conv.h"
#include "kiln/kernels/gemm.h"

namespace kiln::ops {
namespace {

constexpr int64_t kPanelRows = 12;
constexpr int64_t kPanelCols = 32;

uint32_t RoundedHigh(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
uint32_t PairWord(float lo, float hi) { return RoundedHigh(hi) | (RoundedHigh(lo) >> 16); }

// A tensor of `words` pair words, zeroed: bf16 elements, two per word.
std::shared_ptr<Tensor> PairWords(int64_t words) {
  return std::make_shared<Tensor>(DType::kBFloat16, std::vector<int64_t>{2 * words});
}

// B(k, n) = at(k, n) for k < K, n < N, as 32-column panels.
template <typename At>
std::shared_ptr<Tensor> PackColumns(int64_t K, int64_t N, const At& at) {
  const int64_t kp = (K + 1) / 2, panels = (N + kPanelCols - 1) / kPanelCols;
  std::shared_ptr<Tensor> packed = PairWords(panels * kp * kPanelCols);
  auto* dst = static_cast<uint32_t*>(packed->data());
  for (int64_t n = 0; n < N; ++n) {
    uint32_t* column = dst + n / kPanelCols * kp * kPanelCols + n % kPanelCols;
    for (int64_t p = 0; p < kp; ++p) {
      column[p * kPanelCols] = PairWord(at(2 * p, n), 2 * p + 1 < K ? at(2 * p + 1, n) : 0.f);
    }
  }
  return packed;
}

}  // namespace

bool MarkedBf16(const Node& node) { return node.GetString("kiln.precision", "") == "bf16"; }

constexpr int64_t kBf16WinogradUBytesPerTile = int64_t{1} << 20;

// Winograd F(4x4, 3x3) where the f32 lowering takes it (its 36 GEMMs then run in bf16),
// unless U per tile passes kBf16WinogradUBytesPerTile:
// the f32 call's U [36][OC/16][C][16] repacked as [36][ceil(OC/32)][ceil(C/2)][32] words.
absl::StatusOr<std::optional<KernelCall>> LowerWinogradConvBf16(const Node& node) {
  // U read from memory for few tiles costs more than the products it saves: ResNet-50's
  // 512-channel convs over 7x7 at batch 1 (18 MiB of U for 4 tiles) took 1.11 ms each in
  // the model (0.55 alone, U in L3) and 0.88 as the direct product (4.5 MiB of weight).
  // The f32 lowering declines those before it computes U (and any conv tuned to a GEMM).
  KILN_ASSIGN_OR_RETURN(std::optional<KernelCall> winograd,
                        LowerWinogradConvF32(node, sizeof(uint16_t), kBf16WinogradUBytesPerTile));
  if (!winograd.has_value()) return std::nullopt;
  const std::vector<int64_t> ud = winograd->inputs[1].constant->dims();
  if (ud[0] != 36) return std::nullopt;  // 3-D: its products stay f32
  const int64_t blocks = ud[1], C = ud[2], OC = blocks * 16;
  const float* u = winograd->inputs[1].constant->data_as<float>();
  const int64_t kp = (C + 1) / 2, panels = (OC + kPanelCols - 1) / kPanelCols;
  const int64_t per_xi = panels * kp * kPanelCols;
  std::shared_ptr<Tensor> packed = PairWords(36 * per_xi);
  auto* dst = static_cast<uint32_t*>(packed->data());
  for (int64_t xi = 0; xi < 36; ++xi) {
    auto at = [&](int64_t c, int64_t oc) { return u[((xi * blocks + oc / 16) * C + c) * 16 + oc % 16]; };
    std::shared_ptr<Tensor> one = PackColumns(C, OC, at);
    std::memcpy(dst + xi * per_xi, one->data(), sizeof(uint32_t) * per_xi);
  }
  KernelCall call =
      CallWithParams<kernel::conv_winograd_bf16>(std::move(winograd->inputs), winograd->params.Get<kiln_conv_params>());
  call.inputs[1] = KernelOperand{-1, std::move(packed)};
  // V as bf16 panels of 12 tiles (kernels/bf16), then M in f32.
  const int64_t chunk = call.params.Get<kiln_conv_params>().tiles_per_chunk;
  const int64_t v_words = 36 * ((chunk + kPanelRows - 1) / kPanelRows * kPanelRows) * ((C + 1) / 2);
  call.scratch_bytes = static_cast<int64_t>(sizeof(float)) * (v_words + 36 * chunk * OC);
  return std::optional<KernelCall>(std::move(call));
}

absl::StatusOr<std::optional<KernelCall>> LowerConvBf16(const Node& node) {
  if (!MarkedBf16(node)) return std::nullopt;
  {
    absl::StatusOr<std::optional<KernelCall>> winograd = LowerWinogradConvBf16(node);
    if (!winograd.ok() || winograd->has_value()) return winograd;
  }
  const Value* w = node.input(1);
  if (!w->is_constant() || w->type().dtype != DType::kFloat32) return NodeError(node, "bf16: W is not an f32 constant");
  const std::vector<int64_t> wd = StaticDims(w), xd = StaticDims(node.input(0));
  const int64_t group = node.GetInt("group", 1), ocg = wd[0] / group;
  int64_t K = 1;
  for (size_t i = 1; i < wd.size(); ++i) K *= wd[i];
  KILN_ASSIGN_OR_RETURN(WindowParams win,
                        ComputeWindow(node, Spatial(xd), node.GetInts("kernel_shape", Spatial(wd)), false));
  int64_t positions = 1;
  for (int64_t d : win.out) positions *= d;
  const float* src = w->constant()->data_as<float>();
  const int64_t kp = (K + 1) / 2;
  // The work of the two forms (a tile's cost grows with its rows, not its columns): output
  // channels as rows against positions in 32-column tiles, or positions as rows against
  // channels in 32-column tiles (packed_weights 1), which also writes Y transposed. 7x7
  // maps of 512 channels: 49 x 512 against 64 x 512 (ResNet-50's layer4 convs 0.1-0.2 ms
  // faster each); 14x14 maps, 196 against 224, measured level or slower (a strided conv's
  // im2col rows then packed again for each part of its channels), so they stay.
  const int64_t as_columns = ocg * ((positions + kPanelCols - 1) / kPanelCols * kPanelCols);
  const int64_t as_rows = positions * ((ocg + kPanelCols - 1) / kPanelCols * kPanelCols);
  const bool position_rows = positions <= 256 && 5 * as_rows < 4 * as_columns;
  std::shared_ptr<Tensor> packed;
  if (position_rows) {
    const int64_t panels = (ocg + kPanelCols - 1) / kPanelCols, per_group = panels * kp * kPanelCols;
    packed = PairWords(group * per_group);
    for (int64_t g = 0; g < group; ++g) {
      std::shared_ptr<Tensor> one =
          PackColumns(K, ocg, [&](int64_t k, int64_t oc) { return src[(g * ocg + oc) * K + k]; });
      std::memcpy(static_cast<uint32_t*>(packed->data()) + g * per_group, one->data(), sizeof(uint32_t) * per_group);
    }
  } else {
    const int64_t panels = (ocg + kPanelRows - 1) / kPanelRows;
    packed = PairWords(group * panels * kp * kPanelRows);
    auto* dst = static_cast<uint32_t*>(packed->data());
    for (int64_t g = 0; g < group; ++g) {
      for (int64_t r = 0; r < ocg; ++r) {
        const float* row = src + (g * ocg + r) * K;
        uint32_t* out = dst + ((g * panels + r / kPanelRows) * kp) * kPanelRows + r % kPanelRows;
        for (int64_t p = 0; p < kp; ++p) {
          out[p * kPanelRows] = PairWord(row[2 * p], 2 * p + 1 < K ? row[2 * p + 1] : 0.f);
        }
      }
    }
  }
  kiln_conv_params params{};
  params.group = group;
  params.packed_weights = position_rows ? 1 : 0;
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, win));
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  KernelCall call = CallWithParams<kernel::conv_bf16>(PassAllInputs(node), params);
  call.inputs[1] = KernelOperand{-1, std::move(packed)};
  return std::optional<KernelCall>(std::move(call));
}

absl::StatusOr<std::optional<KernelCall>> LowerMatMulBf16(const Node& node) {
  if (!MarkedBf16(node)) return std::nullopt;
  const Value* b = node.input(1);
  const std::vector<int64_t> bd = StaticDims(b);
  if (!b->is_constant() || b->type().dtype != DType::kFloat32 || bd.size() != 2)
    return NodeError(node, "bf16: B is not a 2-D f32 constant");
  kiln_matmul_params params{};
  KILN_ASSIGN_OR_RETURN(params.shape, MatMulShape(node, StaticDims(node.input(0)), bd));
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  const int64_t N = bd[1];
  const float* src = b->constant()->data_as<float>();
  KernelCall call = CallWithParams<kernel::matmul_bf16>(PassAllInputs(node), params);
  call.inputs[1] = KernelOperand{-1, PackColumns(bd[0], N, [&](int64_t k, int64_t n) { return src[k * N + n]; })};
  return std::optional<KernelCall>(std::move(call));
}

absl::StatusOr<std::optional<KernelCall>> LowerGemmBf16(const Node& node) {
  if (!MarkedBf16(node)) return std::nullopt;
  const Value* b = node.input(1);
  const std::vector<int64_t> ad = StaticDims(node.input(0)), bd = StaticDims(b);
  if (!b->is_constant() || b->type().dtype != DType::kFloat32 || ad.size() != 2 || bd.size() != 2)
    return NodeError(node, "bf16: B is not a 2-D f32 constant");
  const bool tb = node.GetInt("transB", 0) != 0;
  const int64_t M = ad[0], K = ad[1], N = tb ? bd[0] : bd[1];
  kiln_matmul_params params{};
  params.shape.M = M;
  params.shape.K = K;
  params.shape.N = N;
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  const float* src = b->constant()->data_as<float>();
  std::shared_ptr<Tensor> packed = tb ? PackColumns(K, N, [&](int64_t k, int64_t n) { return src[n * K + k]; })
                                      : PackColumns(K, N, [&](int64_t k, int64_t n) { return src[k * N + n]; });
  // C, a row of N added to every row: the kernel's bias.
  std::vector<KernelOperand> inputs = {KernelOperand{0, nullptr}, KernelOperand{-1, std::move(packed)},
                                       KernelOperand{node.input(2) != nullptr ? 2 : -1, nullptr}};
  return std::optional<KernelCall>(CallWithParams<kernel::matmul_bf16>(std::move(inputs), params));
}

}  // namespace kiln::ops
