// Spatial ops with a kernel each in kernels/spatial/spatial.cc. The semantics implemented
// (the reference, compiler/reference/ref_spatial.cc, follows the same text):
//   GlobalLpPool(X; p=2): Y[n, c, 1...] = (sum over the spatial dims of |X|^p)^(1/p).
//   LpNormalization(X; axis=-1, p=2, p in {1, 2}): X / ||X||_p along axis; 0 where the norm is 0.
//   MaxRoiPool(X [N,C,H,W], rois [R,5]; pooled_shape, spatial_scale=1): Caffe's ROI pooling
//     as onnxruntime runs it: a ROI (b, x1, y1, x2, y2) scaled and rounded (half away from 0)
//     spans round(x2 s) - round(x1 s) + 1 columns (at least 1); bin (ph, pw) covers rows
//     [floor(ph h / PH), ceil((ph + 1) h / PH)) + round(y1 s), clipped to the image; the
//     result is the bin's maximum, 0 when the bin is empty. Y [R, C, PH, PW].
//   Col2Im-18(X [N, C prod(block), L], image_shape, block_shape; dilations, pads, strides):
//     Y [N, C, image...] = 0; for each channel c, block tap k and block position l (over the
//     padded image: L = prod_d ((image_d + pb_d + pe_d - dil_d (block_d - 1) - 1) / stride_d
//     + 1)), Y[n, c, l stride - pb + k dil] += X[n, c prod(block) + k, l] where that lies in
//     the image. image_shape and block_shape must be constants.
//   AffineGrid-20(theta [N,2,3] | [N,3,4], size [N,C,H,W] | [N,C,D,H,W]; align_corners=0):
//     grid [N, H, W, 2] (or [N, D, H, W, 3]) = theta @ (x, y[, z], 1) over the base grid,
//     whose coordinate of pixel i of S is -1 + 2 i / (S - 1) with align_corners (0 when
//     S = 1) and (2 i + 1) / S - 1 without. size must be a constant.
//   DeformConv-19(X [N,C,H,W], W [OC, C/group, kH, kW], offset [N, OG kH kW 2, OH, OW],
//     B [OC]?, mask [N, OG kH kW, OH, OW]?; dilations, group, kernel_shape, offset_group,
//     pads, strides): Y[n, o, i, j] = B[o] + sum over c of o's group and taps (a, b) of
//     W[o, c, a, b] mask[n, g kH kW + a kW + b, i, j] X~[n, c](i s0 - p0 + a d0 + dy,
//     j s1 - p1 + b d1 + dx), with g = c / (C / OG), (dy, dx) = offset[n, g kH kW 2 +
//     2 (a kW + b) + {0, 1}, i, j] and X~ X's bilinear interpolation, zero outside.
#include "op_helpers.h"

namespace kiln::ops {
namespace {

absl::Status InferGlobalLpPool(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  if (!ctx.type(0).has_shape || ctx.type(0).shape.size() < 3) {
    return NodeError(ctx.node, "input must have rank 3 or more");
  }
  if (ctx.node.GetInt("p", 2) < 1) return NodeError(ctx.node, "p must be 1 or more");
  std::vector<Dim> out = ctx.type(0).shape;
  for (size_t i = 2; i < out.size(); ++i) out[i] = Dim::Known(1);
  ctx.output_types[0] = WithShape(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerGlobalLpPool(const Node& node) {
  kiln_spatial_params params{};
  params.p = node.GetInt("p", 2);
  return CallWithParams<kernel::global_lp_pool>(PassInputs(node, 1), params);
}

absl::Status InferLpNormalization(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
  const int64_t p = ctx.node.GetInt("p", 2);
  if (p != 1 && p != 2) return NodeError(ctx.node, absl::StrCat("p is ", p, "; LpNormalization takes 1 or 2"));
  KILN_RETURN_IF_ERROR(
      NormalizeAxis(ctx.node, ctx.node.GetInt("axis", -1), static_cast<int64_t>(ctx.type(0).shape.size())).status());
  return SameAsInput0(ctx);
}

absl::StatusOr<KernelCall> LowerLpNormalization(const Node& node) {
  kiln_spatial_params params{};
  params.p = node.GetInt("p", 2);
  params.axis = node.GetInt("axis", -1);
  if (params.axis < 0) params.axis += static_cast<int64_t>(node.input(0)->type().shape.size());
  return CallWithParams<kernel::lp_normalize>(PassInputs(node, 1), params);
}

absl::Status InferMaxRoiPool(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_RETURN_IF_ERROR(RequireStaticInputs(ctx, {0, 1}));
  const std::vector<int64_t> x = ctx.type(0).StaticDims(), rois = ctx.type(1).StaticDims();
  if (x.size() != 4 || rois.size() != 2 || rois[1] != 5 || ctx.type(1).dtype != ctx.type(0).dtype) {
    return NodeError(ctx.node, absl::StrCat("X [", absl::StrJoin(x, ","), "] and rois [", absl::StrJoin(rois, ","),
                                            "] must be [N, C, H, W] and [R, 5] of one type"));
  }
  const std::vector<int64_t> pooled = ctx.node.GetInts("pooled_shape");
  if (pooled.size() != 2 || pooled[0] <= 0 || pooled[1] <= 0) {
    return NodeError(ctx.node, "pooled_shape must be two positive extents");
  }
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, {rois[0], x[1], pooled[0], pooled[1]});
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerMaxRoiPool(const Node& node) {
  kiln_spatial_params params{};
  params.spatial_scale = node.GetFloat("spatial_scale", 1.0);
  return CallWithParams<kernel::max_roi_pool>(PassInputs(node, 2), params);
}

// Col2Im's window: block_shape as the kernel over image_shape, with the node's pads,
// strides and dilations; w.out holds the block positions per dim.
absl::StatusOr<WindowParams> Col2ImWindow(const Node& node, const Tensor& image, const Tensor& block) {
  const std::vector<int64_t> image_shape = ToInts(image), block_shape = ToInts(block);
  if (image_shape.size() != block_shape.size() || image_shape.empty()) {
    return NodeError(node, absl::StrCat("image_shape [", absl::StrJoin(image_shape, ","), "] and block_shape [",
                                        absl::StrJoin(block_shape, ","), "] must have one (nonzero) length"));
  }
  for (int64_t extent : image_shape) {
    if (extent <= 0) return NodeError(node, "image_shape must be positive");
  }
  return ComputeWindow(node, image_shape, block_shape, false);
}

absl::Status InferCol2Im(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
  KILN_ASSIGN_OR_RETURN(const Tensor* image, RequireConstant(ctx, 1, "image_shape"));
  KILN_ASSIGN_OR_RETURN(const Tensor* block, RequireConstant(ctx, 2, "block_shape"));
  KILN_ASSIGN_OR_RETURN(const WindowParams w, Col2ImWindow(ctx.node, *image, *block));
  if (w.kernel.size() > KILN_MAX_SPATIAL) {
    return NodeError(ctx.node, absl::StrCat(w.kernel.size(), " image dims; at most ", KILN_MAX_SPATIAL));
  }
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  const int64_t taps = NumElements(w.kernel), blocks = NumElements(w.out);
  if (x.size() != 3 || x[1] % taps != 0 || x[2] != blocks) {
    return NodeError(ctx.node, absl::StrCat("input [", absl::StrJoin(x, ","), "] must be [N, C * ", taps, ", ", blocks,
                                            "] for these image_shape, block_shape, pads, strides and dilations"));
  }
  std::vector<int64_t> out = {x[0], x[1] / taps};
  for (int64_t extent : ToInts(*image)) out.push_back(extent);
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerCol2Im(const Node& node) {
  const std::vector<const Tensor*> constants = ConstantsOf(node);
  KILN_ASSIGN_OR_RETURN(const WindowParams w, Col2ImWindow(node, *constants[1], *constants[2]));
  kiln_spatial_params params{};
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, w));
  return CallWithParams<kernel::col2im>(PassInputs(node, 1), params);
}

absl::Status InferAffineGrid(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> size, ConstantInts(ctx, 1, "size"));
  const std::vector<int64_t> theta = ctx.type(0).StaticDims();
  const int64_t dims = static_cast<int64_t>(size.size()) - 2;
  if ((dims != 2 && dims != 3) || theta != std::vector<int64_t>{size[0], dims, dims + 1}) {
    return NodeError(ctx.node,
                     absl::StrCat("theta [", absl::StrJoin(theta, ","), "] and size [", absl::StrJoin(size, ","),
                                  "] must be [N, 2, 3] and [N, C, H, W], or [N, 3, 4] and [N, C, D, H, W]"));
  }
  for (int64_t extent : size) {
    if (extent < 0) return NodeError(ctx.node, "size must not be negative");
  }
  std::vector<int64_t> out = {size[0]};
  out.insert(out.end(), size.begin() + 2, size.end());
  out.push_back(dims);
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerAffineGrid(const Node& node) {
  kiln_spatial_params params{};
  params.align_corners = node.GetInt("align_corners", 0) != 0 ? 1 : 0;
  return CallWithParams<kernel::affine_grid>(PassInputs(node, 1), params);
}

// DeformConv's window over X's spatial dims with W's spatial dims as the kernel.
absl::StatusOr<WindowParams> DeformWindow(const Node& node, const std::vector<int64_t>& x,
                                          const std::vector<int64_t>& w) {
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (const std::vector<int64_t> given = node.GetInts("kernel_shape"); !given.empty() && given != kernel) {
    return NodeError(node, absl::StrCat("kernel_shape [", absl::StrJoin(given, ","), "] does not match W's dims [",
                                        absl::StrJoin(w, ","), "]"));
  }
  return ComputeWindow(node, Spatial(x), kernel, false);
}

// The shape a DeformConv input must have, or an error that names it.
absl::Status ExpectDims(const Node& node, const char* what, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& expected) {
  if (dims == expected) return absl::OkStatus();
  return NodeError(
      node, absl::StrCat(what, " is [", absl::StrJoin(dims, ","), "]; expected [", absl::StrJoin(expected, ","), "]"));
}

absl::Status InferDeformConv(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_RETURN_IF_ERROR(RequireStaticInputs(ctx, {0, 1, 2}));
  const std::vector<int64_t> x = ctx.type(0).StaticDims(), w = ctx.type(1).StaticDims();
  const int64_t group = ctx.node.GetInt("group", 1), offset_group = ctx.node.GetInt("offset_group", 1);
  if (x.size() != 4 || w.size() != 4) return NodeError(ctx.node, "X and W must be 4-D (DeformConv is 2-D here)");
  if (group < 1 || offset_group < 1 || x[1] % group != 0 || w[0] % group != 0 || x[1] % offset_group != 0 ||
      w[1] * group != x[1]) {
    return NodeError(ctx.node, absl::StrCat("group ", group, " and offset_group ", offset_group, " do not divide X [",
                                            absl::StrJoin(x, ","), "] and W [", absl::StrJoin(w, ","), "]"));
  }
  KILN_ASSIGN_OR_RETURN(const WindowParams win, DeformWindow(ctx.node, x, w));
  const int64_t taps = w[2] * w[3];
  for (size_t i = 0; i < 3; ++i) {
    if (ctx.has_input(2 + i) && ctx.type(2 + i).dtype != ctx.type(0).dtype) {
      return NodeError(ctx.node, "offset, B and mask must have X's element type");
    }
  }
  KILN_RETURN_IF_ERROR(ExpectDims(ctx.node, "offset", ctx.type(2).StaticDims(),
                                  {x[0], offset_group * taps * 2, win.out[0], win.out[1]}));
  if (ctx.has_input(3)) {
    KILN_RETURN_IF_ERROR(RequireStatic(ctx, 3));
    KILN_RETURN_IF_ERROR(ExpectDims(ctx.node, "B", ctx.type(3).StaticDims(), {w[0]}));
  }
  if (ctx.has_input(4)) {
    KILN_RETURN_IF_ERROR(RequireStatic(ctx, 4));
    KILN_RETURN_IF_ERROR(
        ExpectDims(ctx.node, "mask", ctx.type(4).StaticDims(), {x[0], offset_group * taps, win.out[0], win.out[1]}));
  }
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, {x[0], w[0], win.out[0], win.out[1]});
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerDeformConv(const Node& node) {
  KILN_ASSIGN_OR_RETURN(const WindowParams w, DeformWindow(node, StaticDims(node.input(0)), StaticDims(node.input(1))));
  kiln_spatial_params params{};
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, w));
  params.group = node.GetInt("group", 1);
  params.offset_group = node.GetInt("offset_group", 1);
  return CallWithParams<kernel::deform_conv>(PassInputs(node, 5), params);
}

// Output 0 of `dtype` and `rank` whose dims shape function K computes from the node's
// inputs [0, num_inputs) and `params`.
template <typename K>
DynamicShape ShapeOf(const InferContext& ctx, size_t num_inputs, const kiln_shape_params& params, DType dtype,
                     int64_t rank) {
  TensorType out;
  out.dtype = dtype;
  out.has_shape = true;
  out.shape.assign(static_cast<size_t>(rank), Dim::Symbolic("?"));
  return DynamicShape{CallWithParams<K>(PassInputs(ctx.node, num_inputs), params), {std::move(out)}};
}

}  // namespace

absl::StatusOr<DynamicShape> MaxRoiPoolShapeRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  if (ctx.type(1).dtype != ctx.type(0).dtype) return NodeError(ctx.node, "rois must have X's element type");
  const std::vector<int64_t> pooled = ctx.node.GetInts("pooled_shape");
  if (pooled.size() != 2 || pooled[0] <= 0 || pooled[1] <= 0) {
    return NodeError(ctx.node, "pooled_shape must be two positive extents");
  }
  kiln_shape_params p{};
  p.num_ints = 2;
  p.ints[0] = pooled[0];
  p.ints[1] = pooled[1];
  return ShapeOf<kernel::shape_max_roi_pool>(ctx, 2, p, ctx.type(0).dtype, 4);
}

// Col2Im's image_shape and block_shape stay compile-time constants; only X's dims may wait.
absl::StatusOr<DynamicShape> Col2ImShapeRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_ASSIGN_OR_RETURN(const Tensor* image, RequireConstant(ctx, 1, "image_shape"));
  KILN_ASSIGN_OR_RETURN(const Tensor* block, RequireConstant(ctx, 2, "block_shape"));
  KILN_ASSIGN_OR_RETURN(const WindowParams w, Col2ImWindow(ctx.node, *image, *block));
  if (w.kernel.size() > KILN_MAX_SPATIAL) {
    return NodeError(ctx.node, absl::StrCat(w.kernel.size(), " image dims; at most ", KILN_MAX_SPATIAL));
  }
  kiln_shape_params p{};
  const std::vector<int64_t> extents = ToInts(*image);
  p.num_ints = static_cast<int64_t>(extents.size()) + 1;
  p.ints[0] = NumElements(w.kernel);
  for (size_t i = 0; i < extents.size(); ++i) p.ints[i + 1] = extents[i];
  return ShapeOf<kernel::shape_col2im>(ctx, 1, p, ctx.type(0).dtype, static_cast<int64_t>(extents.size()) + 2);
}

// AffineGrid's output rank follows from size's length (4: 2-D, 5: 3-D), its dims from
// size's data, known at run time at the latest.
absl::StatusOr<DynamicShape> AffineGridShapeRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  if (!ctx.type(1).IsStatic() || ctx.type(1).shape.size() != 1) return NodeError(ctx.node, "size must be 1-D");
  const int64_t length = ctx.type(1).StaticDims()[0];
  if (length != 4 && length != 5) return NodeError(ctx.node, absl::StrCat("size has ", length, " entries, not 4 or 5"));
  return ShapeOf<kernel::shape_affine_grid>(ctx, 2, kiln_shape_params{}, ctx.type(0).dtype, length);
}

void RegisterSpatialOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"GlobalLpPool", 1, 1, 0, InferGlobalLpPool, LowerGlobalLpPool},
      {"LpNormalization", 1, 1, 0, InferLpNormalization, LowerLpNormalization},
      {"MaxRoiPool", 2, 2, 0, InferMaxRoiPool, LowerMaxRoiPool},
      {"Col2Im", 3, 3, 0b110, InferCol2Im, LowerCol2Im},
      {"AffineGrid", 2, 2, 0b10, InferAffineGrid, LowerAffineGrid},
      {"DeformConv", 3, 5, 0, InferDeformConv, LowerDeformConv},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
