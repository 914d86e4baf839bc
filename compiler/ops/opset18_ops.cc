// Ops new in opset 18 that need a kernel call of their own: BitwiseAnd/Or/Xor/Not (the
// elementwise kernels on integers) and CenterCropPad (the pad kernel: a negative pad crops).
// Mish, GroupNormalization and Gelu are written as other ops by the importer
// (compiler/frontend/onnx/expand_ops.cc).
#include <algorithm>

#include "kiln/kernels/elementwise.h"
#include "kiln/kernels/movement.h"
#include "kiln/kernels/shape.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

constexpr NamedCode kBitwiseBinary[] = {
    {"BitwiseAnd", KILN_BINARY_BITWISE_AND},
    {"BitwiseOr", KILN_BINARY_BITWISE_OR},
    {"BitwiseXor", KILN_BINARY_BITWISE_XOR},
};

absl::Status RequireIntegers(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.input_types.size(); ++i) {
    const DType d = ctx.type(i).dtype;
    if (!IsInteger(d)) {
      return NodeError(ctx.node,
                       absl::StrCat("input ", i, " has element type ", DTypeName(d), "; bitwise ops take integers"));
    }
    if (d != ctx.type(0).dtype) return NodeError(ctx.node, "inputs have different element types");
  }
  return absl::OkStatus();
}

absl::Status InferBitwiseBinary(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireIntegers(ctx));
  if (!ctx.type(0).has_shape || !ctx.type(1).has_shape) return NodeError(ctx.node, "input rank is unknown");
  KILN_ASSIGN_OR_RETURN(std::vector<Dim> shape, BroadcastShapes(ctx.node, ctx.type(0).shape, ctx.type(1).shape));
  ctx.output_types[0] = WithShape(ctx.type(0).dtype, shape);
  return absl::OkStatus();
}

absl::Status InferBitwiseNot(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireIntegers(ctx));
  return SameAsInput0(ctx);
}

absl::StatusOr<KernelCall> LowerBitwiseNot(const Node& node) {
  kiln_elementwise_params params{};
  params.op = KILN_UNARY_BITWISE_NOT;
  return CallWithParams<kernel::unary>(PassInputs(node, 1), params);
}

// CenterCropPad's target extent per axis of a rank-`rank` input (-1: the axis is kept).
absl::StatusOr<std::vector<int64_t>> CropPadTargets(const Node& node, const Tensor& shape, int64_t rank) {
  std::vector<int64_t> axes = node.GetInts("axes");
  if (axes.empty()) {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  const std::vector<int64_t> extents = ToInts(shape);
  if (extents.size() != axes.size()) {
    return NodeError(node, absl::StrCat("shape has ", extents.size(), " entries for ", axes.size(), " axes"));
  }
  std::vector<int64_t> targets(rank, -1);
  for (size_t i = 0; i < axes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(node, axes[i], rank));
    if (targets[axis] != -1) return NodeError(node, absl::StrCat("axis ", axes[i], " is given twice"));
    if (extents[i] < 0) return NodeError(node, absl::StrCat("shape entry ", extents[i], " is negative"));
    targets[axis] = extents[i];
  }
  return targets;
}

absl::Status InferCenterCropPad(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
  KILN_ASSIGN_OR_RETURN(const Tensor* shape, RequireConstant(ctx, 1, "shape"));
  std::vector<int64_t> dims = ctx.type(0).StaticDims();
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> targets,
                        CropPadTargets(ctx.node, *shape, static_cast<int64_t>(dims.size())));
  for (size_t i = 0; i < dims.size(); ++i) {
    if (targets[i] >= 0) dims[i] = targets[i];
  }
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, dims);
  return absl::OkStatus();
}

// Centred as the ONNX reference centres: a crop starts (in - out) / 2 into the input
// (a negative pad), a pad puts (out - in) / 2 zeros first and the rest after.
absl::StatusOr<KernelCall> LowerCenterCropPad(const Node& node) {
  const std::vector<int64_t> in = StaticDims(node.input(0)), out = StaticDims(node.output(0));
  if (in.size() > KILN_MAX_RANK) return NodeError(node, absl::StrCat("rank above ", KILN_MAX_RANK));
  kiln_pad_params params{};
  params.mode = KILN_PAD_CONSTANT;
  for (size_t i = 0; i < in.size(); ++i) {
    params.pads_begin[i] = out[i] >= in[i] ? (out[i] - in[i]) / 2 : -((in[i] - out[i]) / 2);
  }
  KernelCall call = CallWithParams<kernel::pad>(PassInputs(node, 1), params);
  call.inputs.push_back(KernelOperand{});  // the pads are in the parameters; the value is 0
  return call;
}

}  // namespace

// CenterCropPad with shapes known at run time: the pad kernel's shape function (shape_pad)
// centres the target extents (-1 for the kept axes) on the run-time dims and sets the
// kernel's pads_begin.
absl::StatusOr<DynamicShape> CenterCropPadShapeRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const int64_t rank, RankOf(ctx, 0));
  if (rank > KILN_MAX_RANK) return NodeError(ctx.node, absl::StrCat("rank above ", KILN_MAX_RANK));
  KILN_ASSIGN_OR_RETURN(const Tensor* shape, RequireConstant(ctx, 1, "shape"));
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> targets, CropPadTargets(ctx.node, *shape, rank));
  kiln_shape_params p{};
  p.flags = KILN_SHAPE_CENTER_CROP_PAD;
  p.num_ints = rank;
  std::copy(targets.begin(), targets.end(), p.ints);
  return DynamicShape{CallWithParams<kernel::shape_pad>(PassInputs(ctx.node, 1), p),
                      {RankOnly(ctx.type(0).dtype, rank)}};
}

void RegisterOpset18Ops(Registry& registry) {
  for (const NamedCode& def : kBitwiseBinary) {
    OpSchema s = Schema(def.name, 2, 2);
    s.infer = InferBitwiseBinary;
    s.lower = [def](const Node& node) -> absl::StatusOr<KernelCall> {
      kiln_elementwise_params params{};
      params.op = def.code;
      return CallWithParams<kernel::binary>(PassInputs(node, 2), params);
    };
    registry.Add(std::move(s));
  }
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"BitwiseNot", 1, 1, 0, InferBitwiseNot, LowerBitwiseNot},
      {"CenterCropPad", 2, 2, 0b10, InferCenterCropPad, LowerCenterCropPad},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
