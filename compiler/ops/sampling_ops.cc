// Sampling ops: GridSample and RoiAlign (kernels/sampling/sampling.cc).
#include "kiln/kernels/sampling.h"
#include "kiln/kernels/shape.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

// Opset 20 renamed bilinear and bicubic to linear and cubic; both spellings are accepted.
constexpr NamedCode kGridModes[] = {
    {"bilinear", KILN_GRID_BILINEAR}, {"linear", KILN_GRID_BILINEAR}, {"nearest", KILN_GRID_NEAREST},
    {"bicubic", KILN_GRID_BICUBIC},   {"cubic", KILN_GRID_BICUBIC},
};
constexpr NamedCode kGridPaddings[] = {
    {"zeros", KILN_GRID_PAD_ZEROS},
    {"border", KILN_GRID_PAD_BORDER},
    {"reflection", KILN_GRID_PAD_REFLECTION},
};
constexpr NamedCode kRoiModes[] = {{"avg", KILN_ROI_AVG}, {"max", KILN_ROI_MAX}};
constexpr NamedCode kRoiTransforms[] = {{"half_pixel", 1}, {"output_half_pixel", 0}};

absl::Status InferGridSample(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (auto st = RequireStaticInputs(ctx, {0, 1}); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(0).StaticDims(), grid = ctx.type(1).StaticDims();
  // Opset 20 made it N-D; the kernel samples 2-D images and 3-D volumes.
  const size_t spatial = x.size() - 2;
  if ((x.size() != 4 && x.size() != 5) || grid.size() != x.size() || grid[0] != x[0] ||
      grid.back() != static_cast<int64_t>(spatial) || ctx.type(1).dtype != ctx.type(0).dtype) {
    return NodeError(ctx.node, absl::StrCat("X [", absl::StrJoin(x, ","), "] and grid [", absl::StrJoin(grid, ","),
                                            "] must be [N, C, H, W] and [N, H_out, W_out, 2] (or [N, C, D, H, W] and "
                                            "[N, D_out, H_out, W_out, 3]) of one type"));
  }
  KILN_ASSIGN_OR_RETURN(const int64_t mode, NamedAttr(ctx.node, "mode", "bilinear", kGridModes));
  if (mode == KILN_GRID_BICUBIC && spatial != 2) return NodeError(ctx.node, "cubic mode samples 2-D images only");
  if (auto padding = NamedAttr(ctx.node, "padding_mode", "zeros", kGridPaddings); !padding.ok()) {
    return padding.status();
  }
  std::vector<int64_t> out = {x[0], x[1]};
  out.insert(out.end(), grid.begin() + 1, grid.end() - 1);
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerGridSample(const Node& node) {
  kiln_sampling_params params{};
  KILN_ASSIGN_OR_RETURN(params.mode, NamedAttr(node, "mode", "bilinear", kGridModes));
  KILN_ASSIGN_OR_RETURN(params.padding_mode, NamedAttr(node, "padding_mode", "zeros", kGridPaddings));
  params.align_corners = node.GetInt("align_corners", 0) != 0 ? 1 : 0;
  return CallWithParams<kernel::grid_sample>(PassAllInputs(node), params);
}

// Opset 16 added coordinate_transformation_mode (default half_pixel); before it RoiAlign
// was what output_half_pixel names.
const char* DefaultRoiTransform(const Node& node) { return node.opset() >= 16 ? "half_pixel" : "output_half_pixel"; }

absl::Status InferRoiAlign(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (auto st = RequireStaticInputs(ctx, {0, 1, 2}); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(0).StaticDims(), rois = ctx.type(1).StaticDims();
  const std::vector<int64_t> batch = ctx.type(2).StaticDims();
  if (x.size() != 4 || rois.size() != 2 || rois[1] != 4 || batch != std::vector<int64_t>{rois[0]} ||
      ctx.type(2).dtype != DType::kInt64 || ctx.type(1).dtype != ctx.type(0).dtype) {
    return NodeError(ctx.node, "X, rois and batch_indices must be [N, C, H, W], [R, 4] of X's type and [R] of int64");
  }
  if (auto mode = NamedAttr(ctx.node, "mode", "avg", kRoiModes); !mode.ok()) return mode.status();
  if (auto transform =
          NamedAttr(ctx.node, "coordinate_transformation_mode", DefaultRoiTransform(ctx.node), kRoiTransforms);
      !transform.ok()) {
    return transform.status();
  }
  const int64_t height = ctx.node.GetInt("output_height", 1), width = ctx.node.GetInt("output_width", 1);
  if (height <= 0 || width <= 0) return NodeError(ctx.node, "output_height and output_width must be positive");
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, {rois[0], x[1], height, width});
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerRoiAlign(const Node& node) {
  kiln_sampling_params params{};
  KILN_ASSIGN_OR_RETURN(params.mode, NamedAttr(node, "mode", "avg", kRoiModes));
  KILN_ASSIGN_OR_RETURN(params.half_pixel,
                        NamedAttr(node, "coordinate_transformation_mode", DefaultRoiTransform(node), kRoiTransforms));
  params.sampling_ratio = node.GetInt("sampling_ratio", 0);
  params.spatial_scale = node.GetFloat("spatial_scale", 1.0);
  return CallWithParams<kernel::roi_align>(PassAllInputs(node), params);
}

}  // namespace

// GridSample with shapes known at run time: X and grid of one rank, 4 or 5, of one float type.
absl::StatusOr<DynamicShape> GridSampleShapeRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_ASSIGN_OR_RETURN(const int64_t rank, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(const int64_t grid_rank, RankOf(ctx, 1));
  if ((rank != 4 && rank != 5) || grid_rank != rank || ctx.type(1).dtype != ctx.type(0).dtype) {
    return NodeError(ctx.node, "X and grid must be [N, C, H, W] and [N, H_out, W_out, 2] (or 5-D) of one type");
  }
  KILN_ASSIGN_OR_RETURN(const int64_t mode, NamedAttr(ctx.node, "mode", "bilinear", kGridModes));
  if (mode == KILN_GRID_BICUBIC && rank != 4) return NodeError(ctx.node, "cubic mode samples 2-D images only");
  KILN_RETURN_IF_ERROR(NamedAttr(ctx.node, "padding_mode", "zeros", kGridPaddings).status());
  return DynamicShape{CallWithParams<kernel::shape_grid_sample>(PassInputs(ctx.node, 2), kiln_shape_params{}),
                      {RankOnly(ctx.type(0).dtype, rank)}};
}

void RegisterSamplingOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"GridSample", 2, 2, 0, InferGridSample, LowerGridSample},
      {"RoiAlign", 3, 3, 0, InferRoiAlign, LowerRoiAlign},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
