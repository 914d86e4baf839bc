// Ops whose output size follows from input data, from the ONNX specification: NonZero,
// Compress, Unique, NonMaxSuppression and the window generators HannWindow,
// HammingWindow, BlackmanWindow.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

std::vector<Tensor> One(Tensor t) {
  std::vector<Tensor> out;
  out.push_back(std::move(t));
  return out;
}

// An op's `axis` (Compress, Unique) over x's dims, or, without the attribute, axis 0 of the
// flattened x; with the element counts before (outer) and after (inner) the axis.
struct Slices {
  std::vector<int64_t> dims;
  int64_t axis = 0, outer = 1, inner = 1;
};

absl::StatusOr<Slices> SlicesAlongAxis(const Node& node, const Tensor& x) {
  Slices s;
  s.dims = {x.num_elements()};
  if (node.has_attr("axis")) {
    s.dims = x.dims();
    s.axis = node.GetInt("axis", 0);
    if (s.axis < 0) s.axis += x.rank();
    if (s.axis < 0 || s.axis >= x.rank()) return absl::InvalidArgumentError("axis is out of range");
  }
  for (int64_t d = 0; d < s.axis; ++d) s.outer *= s.dims[d];
  for (size_t d = s.axis + 1; d < s.dims.size(); ++d) s.inner *= s.dims[d];
  return s;
}

// NonZero: the multi-index of every nonzero element, one column each, in row-major order.
Result NonZero(const Node&, const Inputs& in) {
  const Tensor& x = *in[0];
  std::vector<int64_t> flat;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (x.GetAsDouble(i) != 0) flat.push_back(i);
  }
  const int64_t count = static_cast<int64_t>(flat.size());
  Tensor out(DType::kInt64, {x.rank(), count});
  for (int64_t k = 0; k < count; ++k) {
    int64_t rest = flat[k];
    for (int64_t d = x.rank(); d-- > 0;) {
      out.data_as<int64_t>()[d * count + k] = rest % x.dims()[d];
      rest /= x.dims()[d];
    }
  }
  return One(std::move(out));
}

// Compress: the slices along `axis` (of the flattened input without one) whose condition
// is true; the condition may be shorter than the axis, not longer.
Result Compress(const Node& node, const Inputs& in) {
  const Tensor &x = *in[0], &condition = *in[1];
  absl::StatusOr<Slices> slices = SlicesAlongAxis(node, x);
  if (!slices.ok()) return slices.status();
  const std::vector<int64_t>& dims = slices->dims;
  const int64_t axis = slices->axis, outer = slices->outer, inner = slices->inner * DTypeSize(x.dtype());
  if (condition.num_elements() > dims[axis]) {
    return absl::InvalidArgumentError(
        absl::StrCat("the condition has ", condition.num_elements(), " entries, the axis ", dims[axis]));
  }
  std::vector<int64_t> kept;
  for (int64_t j = 0; j < condition.num_elements(); ++j) {
    if (condition.GetAsDouble(j) != 0) kept.push_back(j);
  }
  std::vector<int64_t> out_dims = dims;
  out_dims[axis] = static_cast<int64_t>(kept.size());
  Tensor out(x.dtype(), out_dims);
  const auto* src = static_cast<const char*>(x.data());
  auto* dst = static_cast<char*>(out.data());
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < kept.size(); ++k) {
      std::memcpy(dst + (o * static_cast<int64_t>(kept.size()) + static_cast<int64_t>(k)) * inner,
                  src + (o * dims[axis] + kept[k]) * inner, static_cast<size_t>(inner));
    }
  }
  return One(std::move(out));
}

// Unique: the distinct slices along `axis` (elements of the flattened input without one),
// ascending (lexicographically) when `sorted`, else in order of first occurrence; with the
// first index of each, each input slice's place among them, and their counts.
Result Unique(const Node& node, const Inputs& in) {
  const Tensor& x = *in[0];
  absl::StatusOr<Slices> along = SlicesAlongAxis(node, x);
  if (!along.ok()) return along.status();
  const std::vector<int64_t>& dims = along->dims;
  const int64_t axis = along->axis, outer = along->outer, inner = along->inner;
  const int64_t count = dims[axis];
  auto offset = [&](int64_t j, int64_t e) { return ((e / inner) * count + j) * inner + e % inner; };
  std::vector<std::vector<double>> slices(count);
  std::map<std::vector<double>, int64_t> first;  // slice -> its first index
  std::vector<int64_t> order;                    // first indices of the distinct slices
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t e = 0; e < outer * inner; ++e) slices[j].push_back(x.GetAsDouble(offset(j, e)));
    if (first.emplace(slices[j], j).second) order.push_back(j);
  }
  if (node.GetInt("sorted", 1) != 0) {
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return slices[a] < slices[b]; });
  }
  const int64_t distinct = static_cast<int64_t>(order.size());
  std::map<int64_t, int64_t> place;  // first index -> place in Y
  for (int64_t k = 0; k < distinct; ++k) place[order[k]] = k;
  std::vector<int64_t> y_dims = dims;
  y_dims[axis] = distinct;
  std::vector<Tensor> out;
  out.emplace_back(x.dtype(), y_dims);
  out.emplace_back(DType::kInt64, std::vector<int64_t>{distinct});
  out.emplace_back(DType::kInt64, std::vector<int64_t>{count});
  out.emplace_back(DType::kInt64, std::vector<int64_t>{distinct});
  const int64_t element = DTypeSize(x.dtype());
  for (int64_t k = 0; k < distinct; ++k) {
    for (int64_t e = 0; e < outer * inner; ++e) {
      std::memcpy(static_cast<char*>(out[0].data()) + (((e / inner) * distinct + k) * inner + e % inner) * element,
                  static_cast<const char*>(x.data()) + offset(order[k], e) * element, static_cast<size_t>(element));
    }
    out[1].data_as<int64_t>()[k] = order[k];
    out[3].data_as<int64_t>()[k] = 0;
  }
  for (int64_t j = 0; j < count; ++j) {
    const int64_t k = place[first[slices[j]]];
    out[2].data_as<int64_t>()[j] = k;
    ++out[3].data_as<int64_t>()[k];
  }
  out.resize(std::min(out.size(), node.outputs().size()));
  return out;
}

// The intersection over union of two boxes given as [ymin, xmin, ymax, xmax]; 0 when
// either is empty.
double IntersectionOverUnion(const std::array<double, 4>& p, const std::array<double, 4>& q) {
  const double area_p = (p[2] - p[0]) * (p[3] - p[1]), area_q = (q[2] - q[0]) * (q[3] - q[1]);
  const double h = std::min(p[2], q[2]) - std::max(p[0], q[0]), w = std::min(p[3], q[3]) - std::max(p[1], q[1]);
  if (area_p <= 0 || area_q <= 0 || h <= 0 || w <= 0) return 0;
  return h * w / (area_p + area_q - h * w);
}

// NonMaxSuppression: per batch and class, boxes above score_threshold by descending score
// (stable), each kept unless its IoU with a kept one exceeds iou_threshold, at most
// max_output_boxes_per_class; rows [batch, class, box].
Result NonMaxSuppression(const Node& node, const Inputs& in) {
  const Tensor &boxes = *in[0], &scores = *in[1];
  if (boxes.rank() != 3 || scores.rank() != 3 || boxes.dims()[2] != 4) {
    return absl::InvalidArgumentError("boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]");
  }
  auto scalar = [&](size_t i, double fallback) {
    return in.size() > i && in[i] != nullptr && in[i]->num_elements() > 0 ? in[i]->GetAsDouble(0) : fallback;
  };
  // An int64 read as such: exporters pass INT64_MAX for "no limit" (torchvision's
  // batched_nms), which a double cannot hold.
  const int64_t max_per_class =
      in.size() > 2 && in[2] != nullptr && in[2]->num_elements() > 0 ? in[2]->GetAsInt64(0) : 0;
  const double iou_threshold = scalar(3, 0), score_threshold = scalar(4, -INFINITY);
  const bool center = node.GetInt("center_point_box", 0) != 0;
  const int64_t batches = boxes.dims()[0], count = boxes.dims()[1], classes = scores.dims()[1];
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<std::array<double, 4>> corners(count);
    for (int64_t i = 0; i < count; ++i) {
      double v[4];
      for (int k = 0; k < 4; ++k) v[k] = boxes.GetAsDouble((b * count + i) * 4 + k);
      corners[i] = center ? std::array<double, 4>{v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2, v[0] + v[2] / 2}
                          : std::array<double, 4>{std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]),
                                                  std::max(v[1], v[3])};
    }
    for (int64_t c = 0; c < classes; ++c) {
      auto score = [&](int64_t i) { return scores.GetAsDouble((b * classes + c) * count + i); };
      std::vector<int64_t> order;
      for (int64_t i = 0; i < count; ++i) {
        if (score(i) > score_threshold) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return score(i) > score(j); });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        bool suppressed = false;
        for (int64_t j : kept) suppressed = suppressed || IntersectionOverUnion(corners[i], corners[j]) > iou_threshold;
        if (!suppressed) kept.push_back(i);
      }
      for (int64_t i : kept) rows.insert(rows.end(), {b, c, i});
    }
  }
  Tensor out(DType::kInt64, {static_cast<int64_t>(rows.size() / 3), 3});
  std::copy(rows.begin(), rows.end(), out.data_as<int64_t>());
  return One(std::move(out));
}

// The generalized cosine windows: w[n] = sum_k (-1)^k a_k cos(2 pi k n / N), N the size
// when periodic, else the size - 1.
RefFn CosineWindow(std::vector<double> a) {
  return [a](const Node& node, const Inputs& in) -> Result {
    const int64_t size = in[0]->GetAsInt64(0);
    if (size < 0) return absl::InvalidArgumentError("size is negative");
    const auto dtype = static_cast<DType>(node.GetInt("output_datatype", static_cast<int64_t>(DType::kFloat32)));
    if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
      return absl::UnimplementedError("output_datatype other than float and double");
    }
    const double period = static_cast<double>(node.GetInt("periodic", 1) ? size : size - 1);
    Tensor out(dtype, {size});
    for (int64_t n = 0; n < size; ++n) {
      double w = 0, sign = 1;
      for (size_t k = 0; k < a.size(); ++k, sign = -sign) {
        w += sign * a[k] * std::cos(2 * M_PI * static_cast<double>(k * n) / period);
      }
      if (dtype == DType::kFloat32) {
        out.data_as<float>()[n] = static_cast<float>(w);
      } else {
        out.data_as<double>()[n] = w;
      }
    }
    return One(std::move(out));
  };
}

}  // namespace

void AddDynamicOps(RefTable& table) {
  table["NonZero"] = NonZero;
  table["Compress"] = Compress;
  table["Unique"] = Unique;
  table["NonMaxSuppression"] = NonMaxSuppression;
  table["HannWindow"] = CosineWindow({0.5, 0.5});
  table["HammingWindow"] = CosineWindow({25.0 / 46.0, 21.0 / 46.0});
  table["BlackmanWindow"] = CosineWindow({0.42, 0.5, 0.08});
}

}  // namespace kiln::ref
