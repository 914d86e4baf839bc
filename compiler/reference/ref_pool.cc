// Pooling, from the ONNX specification: MaxPool (with its optional Indices), AveragePool,
// LpPool and the global pools. Each output element lists the input positions its window
// covers; padding never contributes a value (it counts for AveragePool's count_include_pad).
#include <cmath>

#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

enum class PoolKind { kMax, kAverage, kLp };

// For one window: the in-bounds flat spatial offsets and how many positions lie inside the
// padded input (what count_include_pad divides by).
struct WindowCells {
  std::vector<int64_t> offsets;
  int64_t padded_count = 0;
};

WindowCells CellsOf(const Window& w, const std::vector<int64_t>& in_spatial, const std::vector<int64_t>& out_index) {
  WindowCells cells;
  const size_t n = in_spatial.size();
  std::vector<int64_t> k(n, 0);
  do {
    bool inside = true, inside_padded = true;
    int64_t offset = 0;
    for (size_t d = 0; d < n; ++d) {
      const int64_t at = out_index[d] * w.strides[d] - w.pad_begin[d] + k[d] * w.dilations[d];
      inside = inside && at >= 0 && at < in_spatial[d];
      inside_padded = inside_padded && at >= -w.pad_begin[d] && at < in_spatial[d] + w.pad_end[d];
      offset = offset * in_spatial[d] + at;
    }
    if (inside) cells.offsets.push_back(offset);
    if (inside_padded) ++cells.padded_count;
  } while (NextIndex(k, w.kernel));
  return cells;
}

// The column-major flat index of a row-major spatial offset (MaxPool's storage_order 1).
int64_t ColumnMajor(int64_t offset, const std::vector<int64_t>& dims) {
  int64_t result = 0, scale = 1;
  std::vector<int64_t> index(dims.size());
  for (size_t d = dims.size(); d-- > 0;) index[d] = offset % dims[d], offset /= dims[d];
  for (size_t d = 0; d < dims.size(); ++d) result += index[d] * scale, scale *= dims[d];
  return result;
}

Outputs Pool(const Node& node, const Inputs& in, PoolKind kind) {
  KILN_REF_INPUT(x, in, 0);
  if (x->rank() < 3) return Invalid("pooling needs an input of rank 3 or more");
  const std::vector<int64_t> spatial(x->dims().begin() + 2, x->dims().end());
  KILN_ASSIGN_OR_RETURN(Window w, SlidingWindow(node, spatial, node.GetInts("kernel_shape")));
  const bool include_pad = node.GetInt("count_include_pad", 0) != 0, column_major = node.GetInt("storage_order", 0);
  const double p = static_cast<double>(node.GetInt("p", 2));
  std::vector<int64_t> dims = {x->dims()[0], x->dims()[1]};
  dims.insert(dims.end(), w.out.begin(), w.out.end());
  Tensor out(x->dtype(), dims), indices(DType::kInt64, dims);
  const int64_t planes = dims[0] * dims[1], in_plane = NumElements(spatial), out_plane = NumElements(w.out);
  std::vector<int64_t> o(spatial.size(), 0);
  for (int64_t j = 0; j < out_plane; ++j) {
    const WindowCells cells = CellsOf(w, spatial, o);
    for (int64_t plane = 0; plane < planes; ++plane) {
      const int64_t base = plane * in_plane;
      double value = kind == PoolKind::kMax ? -INFINITY : 0.0;
      int64_t argmax = -1;
      for (int64_t offset : cells.offsets) {
        const double v = LoadDouble(*x, base + offset);
        if (kind == PoolKind::kMax && (v > value || argmax < 0)) value = v, argmax = offset;
        if (kind == PoolKind::kAverage) value += v;
        if (kind == PoolKind::kLp) value += std::pow(std::fabs(v), p);
      }
      if (kind == PoolKind::kAverage) {
        value /= static_cast<double>(include_pad ? cells.padded_count : cells.offsets.size());
      }
      if (kind == PoolKind::kLp) value = std::pow(value, 1.0 / p);
      StoreDouble(out, plane * out_plane + j, value);
      StoreInt(indices, plane * out_plane + j, base + (column_major ? ColumnMajor(argmax, spatial) : argmax));
    }
    NextIndex(o, w.out);
  }
  std::vector<Tensor> results;
  results.push_back(std::move(out));
  if (kind == PoolKind::kMax && node.outputs().size() > 1) results.push_back(std::move(indices));
  return results;
}

Outputs GlobalPool(const Inputs& in, bool max) {
  KILN_REF_INPUT(x, in, 0);
  if (x->rank() < 2) return Invalid("global pooling needs an input of rank 2 or more");
  std::vector<int64_t> dims = x->dims();
  int64_t plane = 1;
  for (size_t d = 2; d < dims.size(); ++d) plane *= dims[d], dims[d] = 1;
  Tensor out(x->dtype(), dims);
  for (int64_t c = 0; c < out.num_elements(); ++c) {
    double acc = max ? -INFINITY : 0.0;
    for (int64_t i = 0; i < plane; ++i) {
      const double v = LoadDouble(*x, c * plane + i);
      acc = max ? std::max(acc, v) : acc + v;
    }
    StoreDouble(out, c, max ? acc : acc / static_cast<double>(plane));
  }
  return std::vector<Tensor>{std::move(out)};
}

}  // namespace

void AddPoolOps(RefTable& table) {
  table["MaxPool"] = [](const Node& node, const Inputs& in) { return Pool(node, in, PoolKind::kMax); };
  table["AveragePool"] = [](const Node& node, const Inputs& in) { return Pool(node, in, PoolKind::kAverage); };
  table["LpPool"] = [](const Node& node, const Inputs& in) { return Pool(node, in, PoolKind::kLp); };
  table["GlobalAveragePool"] = [](const Node&, const Inputs& in) { return GlobalPool(in, false); };
  table["GlobalMaxPool"] = [](const Node&, const Inputs& in) { return GlobalPool(in, true); };
}

}  // namespace kiln::ref
