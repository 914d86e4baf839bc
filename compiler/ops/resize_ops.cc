// Resize (opsets 10-18) and Upsample (7-9): the output shape follows from constant scales
// or sizes; the kernel reads roi, scales and sizes from its inputs at run time and its
// attributes (modes, cubic coefficient, axes) from kiln_resize_params.
#include <cmath>

#include "op_helpers.h"

namespace kiln::ops {
namespace {

constexpr NamedCode kModes[] = {
    {"nearest", KILN_RESIZE_NEAREST},
    {"linear", KILN_RESIZE_LINEAR},
    {"bilinear", KILN_RESIZE_LINEAR},  // Upsample before opset 7 spelled it so
    {"cubic", KILN_RESIZE_CUBIC},
};
constexpr NamedCode kCoordinateModes[] = {
    {"half_pixel", KILN_RESIZE_HALF_PIXEL},
    {"half_pixel_symmetric", KILN_RESIZE_HALF_PIXEL_SYMMETRIC},
    {"pytorch_half_pixel", KILN_RESIZE_PYTORCH_HALF_PIXEL},
    {"align_corners", KILN_RESIZE_ALIGN_CORNERS},
    {"asymmetric", KILN_RESIZE_ASYMMETRIC},
    {"tf_half_pixel_for_nn", KILN_RESIZE_TF_HALF_PIXEL_FOR_NN},
    {"tf_crop_and_resize", KILN_RESIZE_TF_CROP_AND_RESIZE},
};
constexpr NamedCode kNearestModes[] = {
    {"round_prefer_floor", KILN_NEAREST_ROUND_PREFER_FLOOR},
    {"round_prefer_ceil", KILN_NEAREST_ROUND_PREFER_CEIL},
    {"floor", KILN_NEAREST_FLOOR},
    {"ceil", KILN_NEAREST_CEIL},
};
constexpr NamedCode kAspectPolicies[] = {
    {"stretch", KILN_ASPECT_STRETCH},
    {"not_larger", KILN_ASPECT_NOT_LARGER},
    {"not_smaller", KILN_ASPECT_NOT_SMALLER},
};

// The kernel code of string attribute `attr` (`fallback` when absent) in `table`.
template <size_t N>
absl::StatusOr<int64_t> AttrCode(const Node& node, const char* attr, const char* fallback,
                                 const NamedCode (&table)[N]) {
  const std::string name = node.GetString(attr, fallback);
  for (const NamedCode& entry : table) {
    if (name == entry.name) return entry.code;
  }
  return NodeError(node, absl::StrCat("unknown ", attr, " '", name, "'"));
}

// Which node inputs hold roi, scales and sizes (-1: none). Upsample-7 has its scales as an
// attribute, Resize-10 and Upsample-9 take (X, scales), Resize-11 on (X, roi, scales, sizes).
struct ResizeInputs {
  int roi = -1, scales = -1, sizes = -1;
};

ResizeInputs InputsOf(const Node& node) {
  if (node.op() == "Upsample") return {-1, node.opset() >= 9 ? 1 : -1, -1};
  if (node.opset() < 11) return {-1, 1, -1};
  return {1, 2, 3};
}

// Whether input i is given with elements (an empty tensor stands for an omitted input).
bool Given(const Node& node, int i) {
  if (i < 0 || static_cast<size_t>(i) >= node.inputs().size() || node.input(i) == nullptr) return false;
  const TensorType& type = node.input(i)->type();
  return !type.IsStatic() || NumElements(type.StaticDims()) > 0;
}

// The resized axes, normalised: the `axes` attribute (opset 18), all axes by default.
absl::StatusOr<std::vector<int64_t>> ResizeAxes(const Node& node, int64_t rank) {
  std::vector<int64_t> axes;
  for (int64_t axis : node.GetInts("axes")) {
    KILN_ASSIGN_OR_RETURN(int64_t normalised, NormalizeAxis(node, axis, rank));
    axes.push_back(normalised);
  }
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  return axes;
}

// Output dims: floor(in * scale) from scales; from sizes, the sizes themselves, or under
// keep_aspect_ratio_policy round(in * scale) with one scale for all resized axes.
absl::StatusOr<std::vector<int64_t>> ResizeOutputDims(const Node& node, const std::vector<const Tensor*>& constants,
                                                      std::vector<int64_t> dims) {
  const ResizeInputs where = InputsOf(node);
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> axes, ResizeAxes(node, static_cast<int64_t>(dims.size())));
  auto constant = [&](int i) { return i >= 0 && static_cast<size_t>(i) < constants.size() ? constants[i] : nullptr; };
  std::vector<double> scales;
  if (where.scales < 0) {
    scales = node.GetFloats("scales");
  } else if (Given(node, where.scales)) {
    const Tensor* t = constant(where.scales);
    if (t == nullptr) return NodeError(node, "scales must be a compile-time constant (the output shape needs it)");
    for (int64_t i = 0; i < t->num_elements(); ++i) scales.push_back(static_cast<float>(t->GetAsDouble(i)));
  }
  if (!scales.empty()) {
    if (scales.size() != axes.size()) return NodeError(node, "scales must have one value per resized axis");
    for (size_t i = 0; i < axes.size(); ++i) {
      if (!(scales[i] > 0)) return NodeError(node, absl::StrCat("scale ", scales[i], " is not positive"));
      dims[axes[i]] = static_cast<int64_t>(std::floor(static_cast<double>(dims[axes[i]]) * scales[i]));
    }
    return dims;
  }
  if (!Given(node, where.sizes)) return NodeError(node, "needs scales or sizes");
  const Tensor* t = constant(where.sizes);
  if (t == nullptr) return NodeError(node, "sizes must be a compile-time constant (the output shape needs it)");
  const std::vector<int64_t> sizes = ToInts(*t);
  if (sizes.size() != axes.size()) return NodeError(node, "sizes must have one value per resized axis");
  KILN_ASSIGN_OR_RETURN(const int64_t policy, AttrCode(node, "keep_aspect_ratio_policy", "stretch", kAspectPolicies));
  double scale = policy == KILN_ASPECT_NOT_LARGER ? HUGE_VAL : 0.0;
  for (size_t i = 0; i < axes.size(); ++i) {
    const double ratio = static_cast<double>(sizes[i]) / static_cast<double>(dims[axes[i]]);
    scale = policy == KILN_ASPECT_NOT_LARGER ? std::min(scale, ratio) : std::max(scale, ratio);
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    dims[axes[i]] = policy == KILN_ASPECT_STRETCH
                        ? sizes[i]
                        : static_cast<int64_t>(std::floor(static_cast<double>(dims[axes[i]]) * scale + 0.5));
  }
  return dims;
}

absl::Status InferResize(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                        ResizeOutputDims(ctx.node, ctx.input_constants, ctx.type(0).StaticDims()));
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, dims);
  return absl::OkStatus();
}

absl::StatusOr<kiln_resize_params> ResizeParams(const Node& node) {
  const int64_t rank = static_cast<int64_t>(StaticDims(node.input(0)).size());
  if (rank > KILN_MAX_RANK) return NodeError(node, absl::StrCat("rank above ", KILN_MAX_RANK, " is not supported"));
  kiln_resize_params params{};
  KILN_ASSIGN_OR_RETURN(params.mode, AttrCode(node, "mode", "nearest", kModes));
  // Before Resize-11 the coordinates were asymmetric and nearest rounding the "simple" one.
  const bool legacy = node.op() == "Upsample" || node.opset() < 11;
  params.coordinates = KILN_RESIZE_ASYMMETRIC;
  params.nearest = KILN_NEAREST_SIMPLE;
  if (!legacy) {
    KILN_ASSIGN_OR_RETURN(params.coordinates,
                          AttrCode(node, "coordinate_transformation_mode", "half_pixel", kCoordinateModes));
    KILN_ASSIGN_OR_RETURN(params.nearest, AttrCode(node, "nearest_mode", "round_prefer_floor", kNearestModes));
  }
  KILN_ASSIGN_OR_RETURN(params.keep_aspect_ratio,
                        AttrCode(node, "keep_aspect_ratio_policy", "stretch", kAspectPolicies));
  params.exclude_outside = node.GetInt("exclude_outside", 0);
  params.antialias = node.GetInt("antialias", 0);
  params.cubic_coeff_a = node.GetFloat("cubic_coeff_a", -0.75);
  params.extrapolation_value = node.GetFloat("extrapolation_value", 0.0);
  if (node.has_attr("axes")) {
    KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> axes, ResizeAxes(node, rank));
    params.num_axes = static_cast<int64_t>(axes.size());
    std::copy(axes.begin(), axes.end(), params.axes);
  }
  return params;
}

// An antialiased filter spans 2 (linear) or 4 (cubic) input elements per output one
// downscaled: at most KILN_RESIZE_MAX_TAPS, checked on the scale out / in of each axis.
absl::Status CheckFilterWidth(const Node& node, const kiln_resize_params& params) {
  if (params.antialias == 0 || params.mode == KILN_RESIZE_NEAREST) return absl::OkStatus();
  const std::vector<int64_t> in = StaticDims(node.input(0)), out = StaticDims(node.output(0));
  const double radius = params.mode == KILN_RESIZE_CUBIC ? 2 : 1;
  for (size_t d = 0; d < in.size(); ++d) {
    const double scale = static_cast<double>(out[d]) / static_cast<double>(in[d]);
    if (out[d] == 0 || scale >= 1) continue;
    if (2 - 2 * (std::floor(-radius / scale) + 1) > KILN_RESIZE_MAX_TAPS) {
      return NodeError(node, absl::StrCat("an antialiased downscale of axis ", d, " from ", in[d], " to ", out[d],
                                          " spans more than ", KILN_RESIZE_MAX_TAPS, " inputs (not supported)"));
    }
  }
  return absl::OkStatus();
}

// Operands X, roi, scales, sizes; Upsample-7's scales attribute becomes a constant.
absl::StatusOr<KernelCall> LowerResize(const Node& node) {
  KILN_ASSIGN_OR_RETURN(const kiln_resize_params params, ResizeParams(node));
  KILN_RETURN_IF_ERROR(CheckFilterWidth(node, params));
  const ResizeInputs where = InputsOf(node);
  auto operand = [&](int i) { return Given(node, i) ? KernelOperand{i, nullptr} : KernelOperand{}; };
  KernelOperand scales = operand(where.scales);
  if (where.scales < 0) {
    const std::vector<double> values = node.GetFloats("scales");
    auto tensor = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) tensor->data_as<float>()[i] = static_cast<float>(values[i]);
    scales = KernelOperand{-1, tensor};
  }
  return CallWithParams<kernel::resize>({KernelOperand{0, nullptr}, operand(where.roi), scales, operand(where.sizes)},
                                        params);
}

}  // namespace

absl::StatusOr<kiln_shape_params> ResizeShapeParams(const Node& node, int64_t rank) {
  const ResizeInputs where = InputsOf(node);
  if (where.scales < 0) return NodeError(node, "Upsample-7 needs static input dims");
  if (rank > KILN_MAX_RANK) return NodeError(node, absl::StrCat("rank above ", KILN_MAX_RANK, " is not supported"));
  kiln_shape_params p{};
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> axes, ResizeAxes(node, rank));
  p.num_ints = static_cast<int64_t>(axes.size());
  std::copy(axes.begin(), axes.end(), p.ints);
  p.ints[KILN_MAX_RANK] = where.scales;
  p.ints[KILN_MAX_RANK + 1] = where.sizes;
  KILN_ASSIGN_OR_RETURN(p.ints[KILN_MAX_RANK + 2],
                        AttrCode(node, "keep_aspect_ratio_policy", "stretch", kAspectPolicies));
  return p;
}

void RegisterResizeOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}: scales and sizes
  // decide the shape (Resize-10's input 1 is its scales; the roi bit only folds a computed roi).
  const OpSchema ops[] = {
      {"Resize", 1, 4, 0b1110, InferResize, LowerResize},
      {"Upsample", 1, 2, 0b10, InferResize, LowerResize},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
