// Resize (opsets 10-18), Upsample and TopK, from the ONNX specification and its reference
// implementation: resampling one axis at a time (the filters are separable), each output
// coordinate's input neighbours and coefficients as the specification's reference picks
// them; TopK by repeatedly taking the best remaining element. Plain loops in double.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

// Element i of t set to v: an integer type takes v truncated toward zero (the
// specification's reference casts its float result), saturated to the type's range.
template <typename T>
void StoreAs(Tensor& t, int64_t i, double v) {
  if constexpr (std::is_floating_point_v<T>) {
    t.data_as<T>()[i] = static_cast<T>(v);
  } else {
    const double low = static_cast<double>(std::numeric_limits<T>::lowest());
    const double high = static_cast<double>(std::numeric_limits<T>::max());
    t.data_as<T>()[i] = static_cast<T>(std::min(high, std::max(low, std::trunc(v))));
  }
}

absl::Status Store(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kFloat32: StoreAs<float>(t, i, v); break;
    case DType::kFloat64: StoreAs<double>(t, i, v); break;
    case DType::kInt8: StoreAs<int8_t>(t, i, v); break;
    case DType::kUInt8: StoreAs<uint8_t>(t, i, v); break;
    case DType::kInt16: StoreAs<int16_t>(t, i, v); break;
    case DType::kUInt16: StoreAs<uint16_t>(t, i, v); break;
    case DType::kInt32: StoreAs<int32_t>(t, i, v); break;
    case DType::kUInt32: StoreAs<uint32_t>(t, i, v); break;
    case DType::kInt64: StoreAs<int64_t>(t, i, v); break;
    case DType::kUInt64: StoreAs<uint64_t>(t, i, v); break;
    case DType::kBool: t.data_as<bool>()[i] = v != 0; break;
    default: return absl::UnimplementedError(absl::StrCat("element type ", static_cast<int>(t.dtype())));
  }
  return absl::OkStatus();
}

std::vector<double> Doubles(const Tensor* t) {
  std::vector<double> v;
  if (t != nullptr) {
    for (int64_t i = 0; i < t->num_elements(); ++i) v.push_back(t->GetAsDouble(i));
  }
  return v;
}

// What resampling one axis takes.
struct Axis {
  int64_t in = 1, out = 1;
  double scale = 1, roi_start = 0, roi_end = 1;
};

struct ResizeAttrs {
  std::string mode, coordinates, nearest;
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false, antialias = false, legacy = false;
};

// The input coordinate of output coordinate x; the reference takes the resized length as
// scale * in for align_corners, pytorch_half_pixel and tf_crop_and_resize.
double Source(const ResizeAttrs& r, const Axis& a, int64_t x) {
  const double in = static_cast<double>(a.in), resized = a.scale * in, xd = static_cast<double>(x);
  const std::string& m = r.coordinates;
  if (m == "asymmetric") return xd / a.scale;
  if (m == "align_corners") return resized == 1 ? 0.0 : xd * (in - 1) / (resized - 1);
  if (m == "pytorch_half_pixel") return resized == 1 ? -0.5 : (xd + 0.5) / a.scale - 0.5;
  if (m == "tf_half_pixel_for_nn") return (xd + 0.5) / a.scale;
  if (m == "tf_crop_and_resize") {
    if (resized == 1) return (a.roi_end - a.roi_start) * (in - 1) / 2 + a.roi_start * (in - 1);
    return xd * (a.roi_end - a.roi_start) * (in - 1) / (resized - 1) + a.roi_start * (in - 1);
  }
  if (m == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(a.out) / resized;
    return in / 2 * (1 - adjustment) + (xd + 0.5) / a.scale - 0.5;
  }
  return (xd + 0.5) / a.scale - 0.5;  // half_pixel
}

// The coefficients for the neighbours of a coordinate whose distance past the left
// neighbour is ratio, in (0, 1].
std::vector<double> Coefficients(const ResizeAttrs& r, double ratio, double scale) {
  if (r.mode == "nearest") {
    if (ratio == 1) return {0, 1};
    bool up = ratio > 0.5;
    if (r.legacy) up = scale < 1;  // Resize-10 and Upsample: ceil downsampling, floor otherwise
    if (!r.legacy && r.nearest == "round_prefer_ceil") up = ratio >= 0.5;
    if (!r.legacy && r.nearest == "floor") up = false;
    if (!r.legacy && r.nearest == "ceil") up = true;
    return up ? std::vector<double>{0, 1} : std::vector<double>{1, 0};
  }
  const double s = r.antialias ? std::min(scale, 1.0) : 1.0;
  const bool cubic = r.mode == "cubic";
  const double a = r.cubic_a;
  auto filter = [&](double d) {
    const double x = std::fabs(d);
    if (!cubic) return std::max(0.0, 1 - x);
    if (x <= 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
    if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
    return 0.0;
  };
  const int64_t start = static_cast<int64_t>(std::floor(-(cubic ? 2.0 : 1.0) / s)) + 1;
  std::vector<double> c;
  double sum = 0;
  for (int64_t i = start; i < 2 - start; ++i) {
    c.push_back(filter(s * (static_cast<double>(i) - ratio)));
    sum += c.back();
  }
  if (r.antialias) {
    for (double& v : c) v /= sum;
  }
  return c;
}

// Resamples every line along `axis` of `data` (dims) to a.out elements.
std::vector<double> ResampleAxis(const ResizeAttrs& r, const std::vector<double>& data, std::vector<int64_t>& dims,
                                 size_t axis, const Axis& a) {
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= dims[d];
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  std::vector<double> out(static_cast<size_t>(outer * a.out * inner));
  for (int64_t x = 0; x < a.out; ++x) {
    const double source = Source(r, a, x);
    const bool outside =
        r.coordinates == "tf_crop_and_resize" && (source < 0 || source > static_cast<double>(a.in - 1));
    const double ratio = source == std::floor(source) ? 1.0 : source - std::floor(source);
    std::vector<double> c = Coefficients(r, ratio, a.scale);
    const int64_t n = static_cast<int64_t>(c.size());
    // The n nearest indices, ties to the lower: ceil(source) - n/2 on.
    const int64_t first = static_cast<int64_t>(std::ceil(source)) - n / 2;
    if (r.exclude_outside) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (first + j < 0 || first + j >= a.in) c[j] = 0;
        sum += c[j];
      }
      for (double& v : c) v /= sum;
    }
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        double v = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t index = std::min(std::max<int64_t>(first + j, 0), a.in - 1);
          v += c[j] * data[(o * a.in + index) * inner + i];
        }
        out[(o * a.out + x) * inner + i] = outside ? r.extrapolation : v;
      }
    }
  }
  dims[axis] = a.out;
  return out;
}

// The axes, scales, roi and output extents of a Resize/Upsample node given its inputs.
absl::StatusOr<std::vector<Axis>> ResizeAxes(const Node& node, const Inputs& in, const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const bool upsample = node.op() == "Upsample", old = upsample || node.opset() < 11;
  std::vector<double> scales = upsample && node.opset() < 9
                                   ? node.GetFloats("scales")
                                   : Doubles(in.size() > (old ? 1u : 2u) ? in[old ? 1 : 2] : nullptr);
  const std::vector<double> sizes = Doubles(!old && in.size() > 3 ? in[3] : nullptr);
  const std::vector<double> roi = Doubles(!old && in.size() > 1 ? in[1] : nullptr);
  std::vector<int64_t> axes = node.GetInts("axes");
  for (int64_t& axis : axes) axis = axis < 0 ? axis + rank : axis;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const size_t n = axes.size();
  std::vector<Axis> result(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) result[d].in = result[d].out = dims[d];
  if (scales.size() != n && sizes.size() != n) return absl::InvalidArgumentError("needs scales or sizes");
  const std::string policy = node.GetString("keep_aspect_ratio_policy", "stretch");
  double uniform = policy == "not_larger" ? INFINITY : 0;
  for (size_t i = 0; i < n && scales.size() != n; ++i) {
    const double ratio = sizes[i] / static_cast<double>(dims[axes[i]]);
    uniform = policy == "not_larger" ? std::min(uniform, ratio) : std::max(uniform, ratio);
  }
  for (size_t i = 0; i < n; ++i) {
    Axis& a = result[axes[i]];
    if (scales.size() == n) {
      a.scale = static_cast<float>(scales[i]);
      a.out = static_cast<int64_t>(std::floor(static_cast<double>(a.in) * a.scale));
    } else if (policy == "stretch") {
      a.out = static_cast<int64_t>(sizes[i]);
      a.scale = sizes[i] / static_cast<double>(a.in);
    } else {
      a.scale = uniform;
      a.out = static_cast<int64_t>(uniform * static_cast<double>(a.in) + 0.5);
    }
    if (roi.size() == 2 * n) {
      a.roi_start = roi[i];
      a.roi_end = roi[n + i];
    }
  }
  return result;
}

Result EvaluateResize(const Node& node, const Inputs& in) {
  const Tensor& x = *in[0];
  ResizeAttrs r;
  r.legacy = node.op() == "Upsample" || node.opset() < 11;
  r.mode = node.GetString("mode", "nearest");
  if (r.mode == "bilinear") r.mode = "linear";
  r.coordinates = r.legacy ? "asymmetric" : node.GetString("coordinate_transformation_mode", "half_pixel");
  r.nearest = node.GetString("nearest_mode", "round_prefer_floor");
  r.cubic_a = node.GetFloat("cubic_coeff_a", -0.75);
  r.extrapolation = node.GetFloat("extrapolation_value", 0);
  r.exclude_outside = node.GetInt("exclude_outside", 0) != 0;
  r.antialias = node.GetInt("antialias", 0) != 0 && r.mode != "nearest";
  std::vector<int64_t> dims = x.dims();
  absl::StatusOr<std::vector<Axis>> axes = ResizeAxes(node, in, dims);
  if (!axes.ok()) return axes.status();
  std::vector<double> data = Doubles(&x);
  for (size_t d = dims.size(); d-- > 0;) data = ResampleAxis(r, data, dims, d, (*axes)[d]);
  Tensor out(x.dtype(), dims);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    if (absl::Status s = Store(out, i, data[i]); !s.ok()) return s;
  }
  return std::vector<Tensor>{std::move(out)};
}

Result EvaluateTopK(const Node& node, const Inputs& in) {
  const Tensor& x = *in[0];
  const int64_t rank = x.rank();
  int64_t axis = node.GetInt("axis", -1);
  if (axis < 0) axis += rank;
  const int64_t k = node.opset() < 10 ? node.GetInt("k", 0) : in[1]->GetAsInt64(0);
  if (axis < 0 || axis >= rank || k < 0 || k > x.dims()[axis]) return absl::InvalidArgumentError("bad axis or k");
  const bool largest = node.GetInt("largest", 1) != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dims()[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.dims()[d];
  const int64_t len = x.dims()[axis];
  std::vector<int64_t> dims = x.dims();
  dims[axis] = k;
  Tensor values(x.dtype(), dims), indices(DType::kInt64, dims);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<bool> taken(static_cast<size_t>(len), false);
      for (int64_t s = 0; s < k; ++s) {
        int64_t best = -1;
        for (int64_t j = 0; j < len; ++j) {  // the first best wins: ties go to the lower index
          if (taken[j]) continue;
          const double v = x.GetAsDouble((o * len + j) * inner + i);
          const double b = best < 0 ? 0 : x.GetAsDouble((o * len + best) * inner + i);
          if (best < 0 || (largest ? v > b : v < b)) best = j;
        }
        taken[best] = true;
        const int64_t at = (o * k + s) * inner + i;
        if (absl::Status s = Store(values, at, x.GetAsDouble((o * len + best) * inner + i)); !s.ok()) return s;
        indices.data_as<int64_t>()[at] = best;
      }
    }
  }
  return std::vector<Tensor>{std::move(values), std::move(indices)};
}

}  // namespace

void AddResizeOps(RefTable& table) {
  table["Resize"] = EvaluateResize;
  table["Upsample"] = EvaluateResize;
  table["TopK"] = EvaluateTopK;
}

}  // namespace kiln::ref
