// Run-time shapes: which shape function (kiln/kernels/shape.h) each op runs when its
// shapes are known only at run time, and the element type and rank of its outputs then.
// One table here, attached to the schemas after registration, so each rule sits next to
// the others that share its shape function.
#include <algorithm>
#include <map>

#include "op_helpers.h"

namespace kiln::ops {

absl::StatusOr<int64_t> RankOf(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i) || !ctx.type(i).has_shape) {
    return NodeError(ctx.node, absl::StrCat("the rank of input ", i, " is unknown"));
  }
  return static_cast<int64_t>(ctx.type(i).shape.size());
}

TensorType RankOnly(DType dtype, int64_t rank) {
  TensorType t;
  t.dtype = dtype;
  t.has_shape = true;
  t.shape.assign(static_cast<size_t>(rank), Dim::Symbolic("?"));
  return t;
}

namespace {

using Rule = std::function<absl::StatusOr<DynamicShape>(const InferContext&)>;

// A shape function over node inputs [0, num_inputs) with `params`.
template <typename K>
DynamicShape ShapeCall(const InferContext& ctx, size_t num_inputs, const kiln_shape_params& params,
                       std::vector<TensorType> outputs) {
  return DynamicShape{CallWithParams<K>(PassInputs(ctx.node, std::min(num_inputs, ctx.node.inputs().size())), params),
                      std::move(outputs)};
}

// Output 0 keeps input 0's dims; `dtype` from input `dtype_from`, or `fixed` (IsNaN's bool).
Rule Same(size_t dtype_from = 0, DType fixed = DType::kUndefined) {
  return [dtype_from, fixed](const InferContext& ctx) -> absl::StatusOr<DynamicShape> {
    KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
    const DType dtype = fixed != DType::kUndefined ? fixed : ctx.type(dtype_from).dtype;
    std::vector<TensorType> outs(ctx.node.outputs().size(), RankOnly(dtype, rank));
    return ShapeCall<kernel::shape_same>(ctx, 1, kiln_shape_params{}, std::move(outs));
  };
}

// Numpy broadcast of every input; the result's element type from input `dtype_from`, or
// bool.
Rule Broadcast(bool boolean, size_t dtype_from = 0) {
  return [boolean, dtype_from](const InferContext& ctx) -> absl::StatusOr<DynamicShape> {
    int64_t rank = 0;
    for (size_t i = 0; i < ctx.node.inputs().size(); ++i) {
      if (!ctx.has_input(i)) continue;
      KILN_ASSIGN_OR_RETURN(int64_t r, RankOf(ctx, i));
      rank = std::max(rank, r);
    }
    const DType dtype = boolean ? DType::kBool : ctx.type(dtype_from).dtype;
    return ShapeCall<kernel::shape_broadcast>(ctx, ctx.node.inputs().size(), kiln_shape_params{},
                                              {RankOnly(dtype, rank)});
  };
}

// OptionalHasElement of a tensor (opset 18): a bool scalar whatever the tensor's dims (the
// shape function reads no input for rank 0).
absl::StatusOr<DynamicShape> OptionalHasElementRule(const InferContext& ctx) {
  return ShapeCall<kernel::shape_from_data>(ctx, 1, kiln_shape_params{}, {RankOnly(DType::kBool, 0)});
}

absl::StatusOr<DynamicShape> MatMulRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t a, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t b, RankOf(ctx, 1));
  const int64_t rank = std::max(a, b) - (a == 1) - (b == 1);
  return ShapeCall<kernel::shape_matmul>(ctx, 2, kiln_shape_params{}, {RankOnly(ctx.type(0).dtype, rank)});
}

absl::StatusOr<DynamicShape> GemmRule(const InferContext& ctx) {
  kiln_shape_params p{};
  p.flags =
      (ctx.node.GetInt("transA", 0) ? KILN_SHAPE_TRANS_A : 0) | (ctx.node.GetInt("transB", 0) ? KILN_SHAPE_TRANS_B : 0);
  return ShapeCall<kernel::shape_gemm>(ctx, 2, p, {RankOnly(ctx.type(0).dtype, 2)});
}

// Conv and pooling: the window's attributes as shape-function ints; `window_offset` is
// where the kernel's parameter struct keeps its kiln_window (completed for SAME pads).
Rule Window(bool conv, int64_t window_offset) {
  return [conv, window_offset](const InferContext& ctx) -> absl::StatusOr<DynamicShape> {
    KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
    const int64_t r = rank - 2;
    if (r < 1 || r > KILN_MAX_SPATIAL) return NodeError(ctx.node, absl::StrCat("input rank ", rank, " is not 3 to 5"));
    std::vector<int64_t> kernel = ctx.node.GetInts("kernel_shape");
    if (kernel.empty() && conv && ctx.has_input(1) && ctx.type(1).IsStatic()) {
      std::vector<int64_t> w = ctx.type(1).StaticDims();
      kernel.assign(w.begin() + 2, w.end());
    }
    const std::vector<int64_t> strides = ctx.node.GetInts("strides", std::vector<int64_t>(r, 1));
    const std::vector<int64_t> dilations = ctx.node.GetInts("dilations", std::vector<int64_t>(r, 1));
    const std::vector<int64_t> pads = ctx.node.GetInts("pads", std::vector<int64_t>(2 * r, 0));
    if (static_cast<int64_t>(kernel.size()) != r || static_cast<int64_t>(strides.size()) != r ||
        static_cast<int64_t>(dilations.size()) != r || static_cast<int64_t>(pads.size()) != 2 * r) {
      return NodeError(ctx.node, "kernel_shape/strides/dilations/pads do not match the spatial rank");
    }
    kiln_shape_params p{};
    p.num_ints = r;
    for (int64_t i = 0; i < r; ++i) {
      p.ints[i] = kernel[i];
      p.ints[r + i] = strides[i];
      p.ints[2 * r + i] = pads[i];
      p.ints[3 * r + i] = pads[r + i];
      p.ints[4 * r + i] = dilations[i];
    }
    const std::string auto_pad = ctx.node.GetString("auto_pad", "NOTSET");
    p.flags = (auto_pad == "SAME_UPPER" ? KILN_SHAPE_SAME_UPPER : 0) |
              (auto_pad == "SAME_LOWER" ? KILN_SHAPE_SAME_LOWER : 0) | (auto_pad == "VALID" ? KILN_SHAPE_VALID : 0) |
              (ctx.node.GetInt("ceil_mode", 0) ? KILN_SHAPE_CEIL_MODE : 0) |
              (conv ? KILN_SHAPE_CHANNELS_FROM_WEIGHT : 0);
    p.window_offset = window_offset;
    return ShapeCall<kernel::shape_window>(ctx, conv ? 2 : 1, p, {RankOnly(ctx.type(0).dtype, rank)});
  };
}

absl::StatusOr<DynamicShape> GlobalPoolRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  return ShapeCall<kernel::shape_global_pool>(ctx, 1, kiln_shape_params{}, {RankOnly(ctx.type(0).dtype, rank)});
}

absl::StatusOr<DynamicShape> FlattenRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  kiln_shape_params p{};
  p.axis = ctx.node.GetInt("axis", 1);
  if (p.axis < 0) p.axis += rank;
  if (p.axis < 0 || p.axis > rank) return NodeError(ctx.node, "axis is out of range");
  return ShapeCall<kernel::shape_flatten>(ctx, 1, p, {RankOnly(ctx.type(0).dtype, 2)});
}

absl::StatusOr<DynamicShape> ReshapeRule(const InferContext& ctx) {
  if (!ctx.has_input(1) || !ctx.type(1).IsStatic() || ctx.type(1).shape.size() != 1) {
    return NodeError(ctx.node, "the shape input must be 1-D with a static length");
  }
  kiln_shape_params p{};
  p.flags = ctx.node.GetInt("allowzero", 0) ? KILN_SHAPE_ALLOW_ZERO : 0;
  return ShapeCall<kernel::shape_reshape>(ctx, 2, p, {RankOnly(ctx.type(0).dtype, ctx.type(1).shape[0].size)});
}

absl::StatusOr<DynamicShape> TransposeRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  std::vector<int64_t> perm = ctx.node.GetInts("perm");
  if (perm.empty()) {
    for (int64_t i = rank; i-- > 0;) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank || rank > KILN_MAX_RANK)
    return NodeError(ctx.node, "perm does not match the rank");
  kiln_shape_params p{};
  p.num_ints = rank;
  for (int64_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank) return NodeError(ctx.node, "perm is out of range");
    p.ints[i] = perm[i];
  }
  return ShapeCall<kernel::shape_transpose>(ctx, 1, p, {RankOnly(ctx.type(0).dtype, rank)});
}

// Concat and Gather: one axis attribute, normalised against input 0's rank.
template <typename K>
absl::StatusOr<DynamicShape> AxisRule(const InferContext& ctx, int64_t fallback, size_t num_inputs,
                                      int64_t out_rank_delta) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  kiln_shape_params p{};
  KILN_ASSIGN_OR_RETURN(p.axis, NormalizeAxis(ctx.node, ctx.node.GetInt("axis", fallback), rank));
  return ShapeCall<K>(ctx, num_inputs, p, {RankOnly(ctx.type(0).dtype, rank + out_rank_delta)});
}

// The axes of Unsqueeze, Squeeze and the reductions: the attribute or a constant input 1
// as `ints`, normalised (against the output rank when they insert dims) and sorted; a
// computed input 1 (1-D, static length) the shape function reads at run time. Returns
// how many axes there are.
absl::StatusOr<int64_t> AxesInto(const InferContext& ctx, int64_t rank, bool inserted, kiln_shape_params& p) {
  std::vector<int64_t> axes = ctx.node.GetInts("axes");
  if (ctx.has_input(1)) {
    if (ctx.constant(1) == nullptr) {
      if (!ctx.type(1).IsStatic() || ctx.type(1).shape.size() != 1) {
        return NodeError(ctx.node, "the axes input must be 1-D with a static length");
      }
      p.flags |= KILN_SHAPE_FROM_INPUT;
      return ctx.type(1).shape[0].size;
    }
    axes = ToInts(*ctx.constant(1));
  }
  const int64_t count = static_cast<int64_t>(axes.size());
  if (count > KILN_MAX_RANK) return NodeError(ctx.node, absl::StrCat(count, " axes; at most ", KILN_MAX_RANK));
  p.num_ints = count;
  for (int64_t i = 0; i < count; ++i) {
    KILN_ASSIGN_OR_RETURN(p.ints[i], NormalizeAxis(ctx.node, axes[i], inserted ? rank + count : rank));
  }
  std::sort(p.ints, p.ints + p.num_ints);
  return count;
}

Rule Axes(bool unsqueeze) {
  return [unsqueeze](const InferContext& ctx) -> absl::StatusOr<DynamicShape> {
    KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
    kiln_shape_params p{};
    KILN_ASSIGN_OR_RETURN(int64_t count, AxesInto(ctx, rank, unsqueeze, p));
    if (count == 0 && !unsqueeze) return NodeError(ctx.node, "axes must be given when the input dims are not known");
    const int64_t out_rank = unsqueeze ? rank + count : rank - count;
    if (unsqueeze) return ShapeCall<kernel::shape_unsqueeze>(ctx, 2, p, {RankOnly(ctx.type(0).dtype, out_rank)});
    return ShapeCall<kernel::shape_squeeze>(ctx, 2, p, {RankOnly(ctx.type(0).dtype, out_rank)});
  };
}

// Reduce*: axes from the attribute or input 1; keepdims and noop_with_empty_axes.
absl::StatusOr<DynamicShape> ReduceRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  if (rank > KILN_MAX_RANK) return NodeError(ctx.node, absl::StrCat("rank above ", KILN_MAX_RANK, " is not supported"));
  kiln_shape_params p{};
  KILN_ASSIGN_OR_RETURN(int64_t count, AxesInto(ctx, rank, false, p));
  const bool keep = ctx.node.GetInt("keepdims", 1) != 0, noop = ctx.node.GetInt("noop_with_empty_axes", 0) != 0;
  p.flags |= (keep ? KILN_SHAPE_KEEPDIMS : 0) | (noop ? KILN_SHAPE_NOOP_EMPTY_AXES : 0);
  const int64_t out_rank = keep ? rank : count == 0 ? (noop ? rank : 0) : rank - count;
  return ShapeCall<kernel::shape_reduce>(ctx, 2, p, {RankOnly(ctx.type(0).dtype, out_rank)});
}

// ArgMax, ArgMin: a reduction over `axis` to i64 indices.
absl::StatusOr<DynamicShape> ArgReduceRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  kiln_shape_params p{};
  p.num_ints = 1;
  KILN_ASSIGN_OR_RETURN(p.ints[0], NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), rank));
  const bool keep = ctx.node.GetInt("keepdims", 1) != 0;
  p.flags = keep ? KILN_SHAPE_KEEPDIMS : 0;
  return ShapeCall<kernel::shape_reduce>(ctx, 1, p, {RankOnly(DType::kInt64, keep ? rank : rank - 1)});
}

absl::StatusOr<DynamicShape> SliceRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  if (ctx.node.opset() < 10) return NodeError(ctx.node, "Slice before opset 10 needs static input dims");
  return ShapeCall<kernel::shape_slice>(ctx, 5, kiln_shape_params{}, {RankOnly(ctx.type(0).dtype, rank)});
}

// Expand and Tile: input 1 is a shape (repeats), 1-D of static length.
absl::StatusOr<DynamicShape> ExpandRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  if (!ctx.type(1).IsStatic() || ctx.type(1).shape.size() != 1) {
    return NodeError(ctx.node, "the shape input must be 1-D with a static length");
  }
  const int64_t out_rank = std::max(rank, ctx.type(1).shape[0].size);
  if (out_rank > KILN_MAX_RANK) return NodeError(ctx.node, absl::StrCat("rank above ", KILN_MAX_RANK));
  return ShapeCall<kernel::shape_expand>(ctx, 2, kiln_shape_params{}, {RankOnly(ctx.type(0).dtype, out_rank)});
}

absl::StatusOr<DynamicShape> TileRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  return ShapeCall<kernel::shape_tile>(ctx, 2, kiln_shape_params{}, {RankOnly(ctx.type(0).dtype, rank)});
}

// Pad: the pads attribute before opset 11, inputs pads (and axes, opset 18) since.
absl::StatusOr<DynamicShape> PadRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  if (rank > KILN_MAX_RANK) return NodeError(ctx.node, absl::StrCat("rank above ", KILN_MAX_RANK));
  kiln_shape_params p{};
  if (ctx.node.opset() >= 11) {
    p.flags = KILN_SHAPE_FROM_INPUT;
  } else {
    const std::vector<int64_t> pads = ctx.node.GetInts("pads");
    if (static_cast<int64_t>(pads.size()) != 2 * rank) return NodeError(ctx.node, "pads does not match the rank");
    std::copy(pads.begin(), pads.end(), p.ints);
    p.num_ints = 2 * rank;
  }
  return ShapeCall<kernel::shape_pad>(ctx, 4, p, {RankOnly(ctx.type(0).dtype, rank)});
}

absl::StatusOr<DynamicShape> OneHotRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  kiln_shape_params p{};
  KILN_ASSIGN_OR_RETURN(p.axis, NormalizeAxis(ctx.node, ctx.node.GetInt("axis", -1), rank + 1));
  return ShapeCall<kernel::shape_one_hot>(ctx, 2, p, {RankOnly(ctx.type(2).dtype, rank + 1)});
}

// Split: sizes from the attribute (before opset 13) or input 1, else equal parts.
absl::StatusOr<DynamicShape> SplitRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  kiln_shape_params p{};
  KILN_ASSIGN_OR_RETURN(p.axis, NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), rank));
  const std::vector<int64_t> split = ctx.node.GetInts("split");
  if (split.size() > std::size(p.ints)) return NodeError(ctx.node, "too many split sizes");
  std::copy(split.begin(), split.end(), p.ints);
  p.num_ints = static_cast<int64_t>(split.size());
  if (ctx.has_input(1)) p.flags = KILN_SHAPE_FROM_INPUT;
  if (ctx.node.has_attr("num_outputs")) p.flags |= KILN_SHAPE_CEIL_MODE;
  std::vector<TensorType> outs(ctx.node.outputs().size(), RankOnly(ctx.type(0).dtype, rank));
  return ShapeCall<kernel::shape_split>(ctx, 2, p, std::move(outs));
}

// GatherElements: the indices' dims (input 1), the data's element type.
absl::StatusOr<DynamicShape> GatherElementsRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 1));
  return DynamicShape{CallWithParams<kernel::shape_same>({KernelOperand{1, nullptr}}, kiln_shape_params{}),
                      {RankOnly(ctx.type(0).dtype, rank)}};
}

absl::StatusOr<DynamicShape> RangeRule(const InferContext& ctx) {
  return ShapeCall<kernel::shape_range>(ctx, 3, kiln_shape_params{}, {RankOnly(ctx.type(0).dtype, 1)});
}

absl::StatusOr<DynamicShape> ConstantOfShapeRule(const InferContext& ctx) {
  if (!ctx.type(0).IsStatic() || ctx.type(0).shape.size() != 1) {
    return NodeError(ctx.node, "the shape input must be 1-D with a static length");
  }
  const Tensor* value = ctx.node.GetTensor("value");
  return ShapeCall<kernel::shape_from_data>(
      ctx, 1, kiln_shape_params{}, {RankOnly(value ? value->dtype() : DType::kFloat32, ctx.type(0).shape[0].size)});
}

absl::StatusOr<DynamicShape> CastRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  const DType to = ctx.node.op() == "CastLike" ? ctx.type(1).dtype : static_cast<DType>(ctx.node.GetInt("to", 1));
  return ShapeCall<kernel::shape_same>(ctx, 1, kiln_shape_params{}, {RankOnly(to, rank)});
}

// Shape of an input whose dims are known only at run time: a kernel reading them.
absl::StatusOr<KernelCall> LowerShapeAtRunTime(const Node& node) {
  const int64_t rank = static_cast<int64_t>(node.input(0)->type().shape.size());
  int64_t start = node.GetInt("start", 0), end = node.GetInt("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  kiln_shape_params p{};
  p.ints[0] = std::clamp<int64_t>(start, 0, rank);
  p.ints[1] = std::max(p.ints[0], std::clamp<int64_t>(end, 0, rank));
  return CallWithParams<kernel::shape_of>(PassInputs(node, 1), p);
}

// Size of an input whose dims are known only at run time: a kernel counting them.
absl::StatusOr<KernelCall> LowerSizeAtRunTime(const Node& node) {
  return CallWithParams<kernel::size_of>(PassInputs(node, 1), kiln_shape_params{});
}

// Compress's and Unique's optional axis: normalised, with KILN_SHAPE_HAS_AXIS; without
// one they work on the flattened input.
absl::StatusOr<kiln_shape_params> OptionalAxis(const InferContext& ctx, int64_t rank) {
  kiln_shape_params p{};
  if (ctx.node.has_attr("axis")) {
    KILN_ASSIGN_OR_RETURN(p.axis, NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), rank));
    p.flags = KILN_SHAPE_HAS_AXIS;
  }
  return p;
}

// NonZero: [rank, count], the count read from the input's data.
absl::StatusOr<DynamicShape> NonZeroRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  if (rank > KILN_MAX_RANK) return NodeError(ctx.node, absl::StrCat("rank above ", KILN_MAX_RANK));
  return ShapeCall<kernel::shape_nonzero>(ctx, 1, kiln_shape_params{}, {RankOnly(DType::kInt64, 2)});
}

// GatherND: indices' rank - 1 plus data's dims after the batch dims and the indexed ones;
// the rank needs indices' last dim (the tuple depth) known when compiled.
absl::StatusOr<DynamicShape> GatherNDRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t data_rank, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t indices_rank, RankOf(ctx, 1));
  if (indices_rank < 1 || !ctx.type(1).shape.back().known()) {
    return NodeError(ctx.node, "the indices' last dim (the index tuple's length) must be known when compiled");
  }
  const int64_t depth = ctx.type(1).shape.back().size;
  kiln_shape_params p{};
  p.axis = ctx.node.GetInt("batch_dims", 0);
  if (p.axis < 0 || p.axis >= indices_rank || depth < 1 || p.axis + depth > data_rank) {
    return NodeError(ctx.node,
                     absl::StrCat("batch_dims ", p.axis, " and index depth ", depth, " do not fit data of rank ",
                                  data_rank, " and indices of rank ", indices_rank));
  }
  const int64_t rank = indices_rank - 1 + data_rank - p.axis - depth;
  return ShapeCall<kernel::shape_gather_nd>(ctx, 2, p, {RankOnly(ctx.type(0).dtype, rank)});
}

// RoiAlign: [rois, channels, output_height, output_width], the rois counted at run time
// (a detector's proposals after NMS).
absl::StatusOr<DynamicShape> RoiAlignRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t x_rank, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t rois_rank, RankOf(ctx, 1));
  KILN_ASSIGN_OR_RETURN(int64_t batch_rank, RankOf(ctx, 2));
  const DType dtype = ctx.type(0).dtype;
  if (x_rank != 4 || rois_rank != 2 || batch_rank != 1 || ctx.type(1).dtype != dtype ||
      (dtype != DType::kFloat32 && dtype != DType::kFloat64) || ctx.type(2).dtype != DType::kInt64) {
    return NodeError(ctx.node, "X, rois and batch_indices must be [N, C, H, W], [R, 4] of X's type and [R] of int64");
  }
  kiln_shape_params p{};
  p.num_ints = 2;
  p.ints[0] = ctx.node.GetInt("output_height", 1);
  p.ints[1] = ctx.node.GetInt("output_width", 1);
  if (p.ints[0] <= 0 || p.ints[1] <= 0) return NodeError(ctx.node, "output_height and output_width must be positive");
  return ShapeCall<kernel::shape_roi_align>(ctx, 3, p, {RankOnly(dtype, 4)});
}

// Compress: the true conditions along `axis`, or over the flattened input without one.
absl::StatusOr<DynamicShape> CompressRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(kiln_shape_params p, OptionalAxis(ctx, rank));
  return ShapeCall<kernel::shape_compress>(ctx, 2, p, {RankOnly(ctx.type(0).dtype, p.flags ? rank : 1)});
}

// Unique: Y of the input's rank with an axis, else 1-D; indices, inverse_indices and
// counts 1-D i64.
absl::StatusOr<DynamicShape> UniqueRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(kiln_shape_params p, OptionalAxis(ctx, rank));
  std::vector<TensorType> outs(ctx.node.outputs().size(), RankOnly(DType::kInt64, 1));
  outs[0] = RankOnly(ctx.type(0).dtype, p.flags ? rank : 1);
  return ShapeCall<kernel::shape_unique>(ctx, 1, p, std::move(outs));
}

// NonMaxSuppression: [selected, 3] i64; the shape function runs the selection.
absl::StatusOr<DynamicShape> NonMaxSuppressionRule(const InferContext& ctx) {
  kiln_shape_params p{};
  p.flags = ctx.node.GetInt("center_point_box", 0) ? KILN_SHAPE_CENTER_POINT_BOX : 0;
  p.num_ints = static_cast<int64_t>(ctx.node.inputs().size());
  for (int64_t i = 0; i < p.num_ints && i < 5; ++i) p.ints[i] = ctx.has_input(i);
  return ShapeCall<kernel::shape_non_max_suppression>(ctx, 5, p, {RankOnly(DType::kInt64, 2)});
}

// TopK (its kernel in reduce_ops.cc reads k from the output dims): values and i64
// indices, the input's dims with `axis` cut to k (input 1's data; the attribute before
// opset 10).
absl::StatusOr<DynamicShape> TopKRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  kiln_shape_params p{};
  KILN_ASSIGN_OR_RETURN(p.axis, NormalizeAxis(ctx.node, ctx.node.GetInt("axis", -1), rank));
  if (ctx.node.opset() < 10) p.ints[0] = ctx.node.GetInt("k", 0), p.num_ints = 1;
  std::vector<TensorType> outs = {RankOnly(ctx.type(0).dtype, rank), RankOnly(DType::kInt64, rank)};
  outs.resize(ctx.node.outputs().size(), RankOnly(DType::kInt64, rank));
  return ShapeCall<kernel::shape_top_k>(ctx, 2, p, std::move(outs));
}

// Resize and Upsample: the input's rank; the resized axes' extents from scales or sizes
// (resize_ops.cc says where they are). The kernel reads roi, scales and sizes itself.
absl::StatusOr<DynamicShape> ResizeRule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(kiln_shape_params p, ResizeShapeParams(ctx.node, rank));
  return ShapeCall<kernel::shape_resize>(ctx, 4, p, {RankOnly(ctx.type(0).dtype, rank)});
}

// HannWindow, HammingWindow, BlackmanWindow: [size] of output_datatype.
absl::StatusOr<DynamicShape> WindowFunctionRule(const InferContext& ctx) {
  const auto dtype = static_cast<DType>(ctx.node.GetInt("output_datatype", static_cast<int64_t>(DType::kFloat32)));
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return NodeError(ctx.node, "output_datatype must be float or double");
  }
  return ShapeCall<kernel::shape_length>(ctx, 1, kiln_shape_params{}, {RankOnly(dtype, 1)});
}

}  // namespace

void AttachDynamicShapes(std::map<std::string, OpSchema>& table) {
  std::map<std::string, Rule> rules = {
      {"MatMul", MatMulRule},
      {"Gemm", GemmRule},
      {"Conv", Window(true, offsetof(kiln_conv_params, window))},
      {"MaxPool", Window(false, offsetof(kiln_pool_params, window))},
      {"AveragePool", Window(false, offsetof(kiln_pool_params, window))},
      {"DeformConv", Window(true, offsetof(kiln_spatial_params, window))},
      {"MaxRoiPool", MaxRoiPoolShapeRule},
      {"Col2Im", Col2ImShapeRule},
      {"AffineGrid", AffineGridShapeRule},
      {"GridSample", GridSampleShapeRule},
      {"CenterCropPad", CenterCropPadShapeRule},
      {"LpPool", Window(false, offsetof(kiln_pool_params, window))},
      {"OptionalHasElement", OptionalHasElementRule},
      {"IsNaN", Same(0, DType::kBool)},
      {"IsInf", Same(0, DType::kBool)},
      {"GlobalAveragePool", GlobalPoolRule},
      {"GlobalMaxPool", GlobalPoolRule},
      {"GlobalLpPool", GlobalPoolRule},
      {"Flatten", FlattenRule},
      {"Reshape", ReshapeRule},
      {"Transpose", TransposeRule},
      {"Concat", [](const InferContext& c) { return AxisRule<kernel::shape_concat>(c, 0, c.node.inputs().size(), 0); }},
      {"Gather",
       [](const InferContext& c) -> absl::StatusOr<DynamicShape> {
         KILN_ASSIGN_OR_RETURN(int64_t indices, RankOf(c, 1));
         return AxisRule<kernel::shape_gather>(c, 0, 2, indices - 1);
       }},
      {"Unsqueeze", Axes(true)},
      {"Squeeze", Axes(false)},
      {"Range", RangeRule},
      {"ConstantOfShape", ConstantOfShapeRule},
      {"Cast", CastRule},
      {"CastLike", CastRule},
      {"Where", Broadcast(false, 1)},
      {"Slice", SliceRule},
      {"Expand", ExpandRule},
      {"Tile", TileRule},
      {"Pad", PadRule},
      {"OneHot", OneHotRule},
      {"Split", SplitRule},
      {"GatherElements", GatherElementsRule},
      {"GatherND", GatherNDRule},
      {"RoiAlign", RoiAlignRule},
      {"ArgMax", ArgReduceRule},
      {"ArgMin", ArgReduceRule},
      {"NonZero", NonZeroRule},
      {"Compress", CompressRule},
      {"Unique", UniqueRule},
      {"CumSum", Same()},
      {"Trilu", Same()},
      {"NonMaxSuppression", NonMaxSuppressionRule},
      {"TopK", TopKRule},
      {"Resize", ResizeRule},
      {"Upsample", ResizeRule},
      {"HannWindow", WindowFunctionRule},
      {"HammingWindow", WindowFunctionRule},
      {"BlackmanWindow", WindowFunctionRule},
  };
  for (const char* name : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    rules[name] = ReduceRule;
  }
  for (const char* name : {"Identity", "Softmax", "LogSoftmax", "Clip", "LayerNormalization", "BatchNormalization",
                           "InstanceNormalization", "LRN", "LpNormalization", "Dropout", "Hardmax", "ScatterElements",
                           "Scatter", "ScatterND", "BitwiseNot", "OptionalGetElement"}) {
    rules[name] = Same();
  }
  for (const char* name : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "And", "Or", "Xor", "BitShift",
                           "PRelu", "Sum", "Mean", "BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
    rules[name] = Broadcast(false);
  }
  for (const char* name : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) rules[name] = Broadcast(true);
  rules[kFusedElementwiseOp] = Broadcast(false);
  for (auto& [name, schema] : table) {
    if (auto rule = rules.find(name); rule != rules.end()) {
      schema.dynamic = rule->second;
    }
  }
  for (const std::string& name : UnaryOpNames()) table.at(name).dynamic = Same();
  table.at("Shape").lower = LowerShapeAtRunTime;
  table.at("Size").lower = LowerSizeAtRunTime;
}

}  // namespace kiln::ops
