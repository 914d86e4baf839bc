// Ops of the channel-blocked layout (kernels/layout/blocked.cc), written only by the layout
// pass (passes/layout.cc):
//   %b = kiln.ToBlocked(%x)                    [N, C, H, W] -> [N, ceil(C / 16), H, W, 16]
//   %x = kiln.FromBlocked(%b) {channels = C}   the inverse
//   %m = kiln.BlockedMean(%b)                  [N, CB, H, W, 16] -> [N, CB, 1, 1, 16]:
//        GlobalAveragePool of the blocked %b
//   %y = kiln.BlockedScale(%b, %s)             %b times %s [N or 1, CB, 1, 1, 16], one factor
//        per channel (squeeze-and-excitation's Mul)
//   %y = kiln.BlockedConv(%b, W, [B], [R]) {group, kernel_shape, strides, pads, kiln.activation...}
//        the 2-D Conv of the blocked %b with the ONNX weight W [OC, IC / group, KH, KW]
//        (constant), blocked result: pointwise (1x1, stride 1, no padding, group 1) or
//        depthwise (group = IC = OC, dilation 1). R, pointwise only: a tensor blocked like
//        the result, added before the activation (a fused residual). With a 4-D (NCHW) X
//        instead: a dense conv (group 1, dilation 1) whose result is blocked, for stems
//        (blocked.cc reads each output row's input rows into a buffer of 8192 floats).
#include <algorithm>

#include "kiln/kernels/conv.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

constexpr int64_t kBlock = 16;
constexpr int64_t kDenseRowFloats = 8192;  // blocked.cc's row buffer

int64_t Blocks(int64_t channels) { return (channels + kBlock - 1) / kBlock; }

// What a BlockedConv computes, from its attributes and weight.
struct BlockedConvShape {
  int64_t kind = 0;  // 0 pointwise, 1 depthwise, 2 dense from NCHW (blocked.cc's kinds)
  int64_t in_channels = 0, out_channels = 0, kh = 1, kw = 1, sh = 1, sw = 1;
  std::vector<int64_t> pads;  // top, left, bottom, right
};

// x_rank: 5 for a blocked X, 4 for an NCHW one (a dense conv).
absl::StatusOr<BlockedConvShape> ReadBlockedConv(const Node& node, const std::vector<int64_t>& w, size_t x_rank) {
  BlockedConvShape s;
  if (w.size() != 4) return NodeError(node, "W must be 4-D [OC, IC / group, KH, KW]");
  const int64_t group = node.GetInt("group", 1);
  s.out_channels = w[0];
  s.in_channels = w[1] * group;
  s.kh = w[2];
  s.kw = w[3];
  const std::vector<int64_t> strides = node.GetInts("strides", {1, 1});
  s.pads = node.GetInts("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || s.pads.size() != 4 || strides[0] <= 0 || strides[1] <= 0) {
    return NodeError(node, "strides must be 2 positive values and pads 4 values");
  }
  for (int64_t p : s.pads) {
    if (p < 0) return NodeError(node, "pads must not be negative");
  }
  if (node.GetInts("dilations", {1, 1}) != std::vector<int64_t>{1, 1}) return NodeError(node, "dilations must be 1");
  s.sh = strides[0];
  s.sw = strides[1];
  if (x_rank == 4) {
    if (group != 1) return NodeError(node, "a BlockedConv of an NCHW X must have group 1");
    s.kind = 2;
    return s;
  }
  const bool pointwise =
      group == 1 && s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pads == std::vector<int64_t>{0, 0, 0, 0};
  const bool depthwise = group == s.in_channels && group == s.out_channels && w[1] == 1;
  if (!pointwise && !depthwise) {
    return NodeError(node,
                     "only pointwise (1x1, stride 1, no padding, group 1) and depthwise (group = channels) "
                     "convolutions run blocked");
  }
  s.kind = pointwise ? 0 : 1;
  return s;
}

// Weight rows src[oc][row] in blocked.cc's layout [ceil(oc / 16)][padded_row][16]: output
// channel o in lane o % 16 of block o / 16, zeros past the last channel and row entry.
std::shared_ptr<Tensor> PackBlockedWeight(const float* src, int64_t oc, int64_t row, int64_t padded_row) {
  const int64_t blocks = Blocks(oc);
  auto packed = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{blocks, padded_row, kBlock});
  float* dst = packed->data_as<float>();
  std::fill(dst, dst + blocks * padded_row * kBlock, 0.f);
  for (int64_t o = 0; o < oc; ++o) {
    for (int64_t i = 0; i < row; ++i) dst[(o / kBlock * padded_row + i) * kBlock + o % kBlock] = src[o * row + i];
  }
  return packed;
}

// Input i must be a blocked f32 tensor [N, CB, H, W, 16].
absl::Status RequireBlocked(const InferContext& ctx, size_t i) {
  if (auto st = RequireStatic(ctx, i); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(i).StaticDims();
  if (x.size() != 5 || x[4] != kBlock || ctx.type(i).dtype != DType::kFloat32) {
    return NodeError(ctx.node, absl::StrCat("input ", i, " [", absl::StrJoin(x, ","), "] is not a blocked f32 tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

absl::Status InferBlockedMean(InferContext& ctx) {
  if (auto st = RequireBlocked(ctx, 0); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  ctx.output_types[0] = TensorType::Static(DType::kFloat32, {x[0], x[1], 1, 1, kBlock});
  return absl::OkStatus();
}

absl::Status InferBlockedScale(InferContext& ctx) {
  for (size_t i = 0; i < 2; ++i) {
    if (auto st = RequireBlocked(ctx, i); !st.ok()) return st;
  }
  const std::vector<int64_t> x = ctx.type(0).StaticDims(), f = ctx.type(1).StaticDims();
  if ((f[0] != 1 && f[0] != x[0]) || f[1] != x[1] || f[2] != 1 || f[3] != 1) {
    return NodeError(
        ctx.node, absl::StrCat("scale [", absl::StrJoin(f, ","), "] must be [1 or ", x[0], ", ", x[1], ", 1, 1, 16]"));
  }
  return SameAsInput0(ctx);
}

absl::Status InferToBlocked(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  if (x.size() != 4 || ctx.type(0).dtype != DType::kFloat32)
    return NodeError(ctx.node, "input must be a 4-D f32 tensor");
  ctx.output_types[0] = TensorType::Static(DType::kFloat32, {x[0], Blocks(x[1]), x[2], x[3], kBlock});
  return absl::OkStatus();
}

absl::Status InferFromBlocked(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  const int64_t channels = ctx.node.GetInt("channels", -1);
  if (x.size() != 5 || x[4] != kBlock || ctx.type(0).dtype != DType::kFloat32 || channels <= 0 ||
      Blocks(channels) != x[1]) {
    return NodeError(ctx.node, absl::StrCat("input [", absl::StrJoin(x, ","), "] is not a blocked f32 tensor of ",
                                            channels, " channels"));
  }
  ctx.output_types[0] = TensorType::Static(DType::kFloat32, {x[0], channels, x[2], x[3]});
  return absl::OkStatus();
}

absl::Status InferBlockedConv(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  auto w = RequireConstant(ctx, 1, "W");
  if (!w.ok()) return w.status();
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  auto shape = ReadBlockedConv(ctx.node, (*w)->dims(), x.size());
  if (!shape.ok()) return shape.status();
  const bool dense = shape->kind == 2;
  if ((dense ? x.size() != 4 || x[1] != shape->in_channels
             : x.size() != 5 || x[4] != kBlock || x[1] != Blocks(shape->in_channels)) ||
      ctx.type(0).dtype != DType::kFloat32 || (*w)->dtype() != DType::kFloat32) {
    return NodeError(ctx.node, absl::StrCat("X [", absl::StrJoin(x, ","), "] is not ", dense ? "an NCHW" : "a blocked",
                                            " f32 tensor of ", shape->in_channels, " channels"));
  }
  if (ctx.has_input(2)) {
    const Tensor* b = ctx.constant(2);
    if (b == nullptr || b->dtype() != DType::kFloat32 || b->dims() != std::vector<int64_t>{shape->out_channels}) {
      return NodeError(ctx.node, absl::StrCat("B must be a constant f32 [", shape->out_channels, "]"));
    }
  }
  const int64_t oh = (x[2] + shape->pads[0] + shape->pads[2] - shape->kh) / shape->sh + 1;
  const int64_t ow = (x[3] + shape->pads[1] + shape->pads[3] - shape->kw) / shape->sw + 1;
  if (oh <= 0 || ow <= 0) return NodeError(ctx.node, "the window is larger than the padded input");
  if (dense && shape->in_channels * shape->kh * ((ow - 1) * shape->sw + shape->kw) > kDenseRowFloats) {
    return NodeError(ctx.node, absl::StrCat("the input rows of one output row exceed ", kDenseRowFloats, " floats"));
  }
  const std::vector<int64_t> out = {x[0], Blocks(shape->out_channels), oh, ow, kBlock};
  if (ctx.has_input(3)) {
    if (shape->kind != 0) return NodeError(ctx.node, "only a pointwise BlockedConv takes a residual");
    if (auto st = RequireStatic(ctx, 3); !st.ok()) return st;
    if (ctx.type(3).StaticDims() != out || ctx.type(3).dtype != DType::kFloat32) {
      return NodeError(ctx.node, absl::StrCat("residual must be f32 [", absl::StrJoin(out, ","), "]"));
    }
  }
  ctx.output_types[0] = TensorType::Static(DType::kFloat32, out);
  return absl::OkStatus();
}

// The weight and bias are packed here (blocked.cc's layouts), padded with zeros.
absl::StatusOr<KernelCall> LowerBlockedConv(const Node& node) {
  const Tensor& w = *node.input(1)->constant();
  auto shape = ReadBlockedConv(node, w.dims(), node.input(0)->type().shape.size());
  if (!shape.ok()) return shape.status();
  const int64_t ic = shape->in_channels, oc = shape->out_channels, taps = shape->kh * shape->kw;
  // Pointwise: input channels padded to whole blocks; dense: every (channel, tap).
  const int64_t icp = shape->kind == 2 ? ic * taps : Blocks(ic) * kBlock, ocp = Blocks(oc) * kBlock;
  const int64_t k = shape->kind == 2 ? ic * taps : ic;
  const float* src = w.data_as<float>();
  const std::shared_ptr<Tensor> packed =
      shape->kind == 1 ? PackBlockedWeight(src, oc, taps, taps) : PackBlockedWeight(src, oc, k, icp);
  auto bias = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{ocp});
  float* b = bias->data_as<float>();
  std::fill(b, b + ocp, 0.f);
  if (node.input(2) != nullptr) {
    const float* from = node.input(2)->constant()->data_as<float>();
    std::copy(from, from + oc, b);
  }
  kiln_conv_params params{};
  params.blocked_kind = shape->kind;
  params.in_channels = ic;
  params.out_channels = oc;
  params.window.rank = 2;
  params.window.kernel[0] = shape->kh;
  params.window.kernel[1] = shape->kw;
  params.window.strides[0] = shape->sh;
  params.window.strides[1] = shape->sw;
  params.window.pads_begin[0] = shape->pads[0];
  params.window.pads_begin[1] = shape->pads[1];
  params.window.pads_end[0] = shape->pads[2];
  params.window.pads_end[1] = shape->pads[3];
  params.window.dilations[0] = params.window.dilations[1] = 1;
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  KernelCall call = CallWithParams<kernel::blocked_conv>(
      {KernelOperand{0, nullptr}, KernelOperand{-1, packed}, KernelOperand{-1, bias}}, params);
  if (node.input(3) != nullptr) call.inputs.push_back(KernelOperand{3, nullptr});
  return call;
}

}  // namespace

void RegisterLayoutOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"kiln.BlockedMean", 1, 1, 0, InferBlockedMean, LowerToKernel<kernel::blocked_mean>},
      {"kiln.BlockedScale", 2, 2, 0, InferBlockedScale, LowerToKernel<kernel::blocked_scale>},
      {"kiln.ToBlocked", 1, 1, 0, InferToBlocked, LowerToKernel<kernel::to_blocked>},
      {"kiln.FromBlocked", 1, 1, 0, InferFromBlocked, LowerToKernel<kernel::from_blocked>},
      {"kiln.BlockedConv", 2, 4, 0, InferBlockedConv, LowerBlockedConv},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
