// GlobalLpPool, LpNormalization, MaxRoiPool, Col2Im, AffineGrid and DeformConv from the
// ONNX specification (compiler/ops/spatial_ops.cc states the semantics): multi-index
// loops over doubles, no sharing with the kernels.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ref_nn_util.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

int64_t Product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

Result GlobalLpPool(const Node& node, const Inputs& in) {
  const std::vector<int64_t> dims = in[0]->dims();
  const std::vector<double> x = Doubles(*in[0]);
  const double p = static_cast<double>(node.GetInt("p", 2));
  const int64_t size = Product(dims, 2);
  std::vector<double> out;
  for (int64_t plane = 0; plane < dims[0] * dims[1]; ++plane) {
    double sum = 0;
    for (int64_t k = 0; k < size; ++k) sum += std::pow(std::fabs(x[plane * size + k]), p);
    out.push_back(std::pow(sum, 1.0 / p));
  }
  std::vector<int64_t> out_dims = dims;
  std::fill(out_dims.begin() + 2, out_dims.end(), 1);
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), out_dims, out)};
}

Result LpNormalization(const Node& node, const Inputs& in) {
  const std::vector<int64_t> dims = in[0]->dims();
  const std::vector<double> x = Doubles(*in[0]);
  int64_t axis = node.GetInt("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(dims.size());
  const double p = static_cast<double>(node.GetInt("p", 2));
  // The norm of each element's line along `axis`, keyed by the index with that axis zeroed.
  std::vector<int64_t> reduced = dims;
  reduced[axis] = 1;
  std::vector<double> norms(static_cast<size_t>(Product(reduced)), 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    std::vector<int64_t> index = Unflatten(dims, i);
    index[axis] = 0;
    norms[Flatten(reduced, index)] += std::pow(std::fabs(x[i]), p);
  }
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    std::vector<int64_t> index = Unflatten(dims, i);
    index[axis] = 0;
    const double norm = std::pow(norms[Flatten(reduced, index)], 1.0 / p);
    out[i] = norm == 0 ? 0 : x[i] / norm;
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), dims, out)};
}

Result MaxRoiPool(const Node& node, const Inputs& in) {
  const std::vector<int64_t> xd = in[0]->dims();
  const std::vector<double> x = Doubles(*in[0]), rois = Doubles(*in[1]);
  const std::vector<int64_t> pooled = node.GetInts("pooled_shape");
  const double scale = node.GetFloat("spatial_scale", 1.0);
  const int64_t num_rois = in[1]->dims()[0], height = xd[2], width = xd[3];
  std::vector<double> out;
  for (int64_t r = 0; r < num_rois; ++r) {
    const double* roi = &rois[r * 5];
    const int64_t b = static_cast<int64_t>(roi[0]);
    if (b < 0 || b >= xd[0]) return absl::InvalidArgumentError(absl::StrCat("roi ", r, " names batch ", b));
    const int64_t x1 = std::llround(roi[1] * scale), y1 = std::llround(roi[2] * scale);
    const int64_t x2 = std::llround(roi[3] * scale), y2 = std::llround(roi[4] * scale);
    const double bin_h = static_cast<double>(std::max<int64_t>(y2 - y1 + 1, 1)) / pooled[0];
    const double bin_w = static_cast<double>(std::max<int64_t>(x2 - x1 + 1, 1)) / pooled[1];
    for (int64_t c = 0; c < xd[1]; ++c) {
      for (int64_t ph = 0; ph < pooled[0]; ++ph) {
        for (int64_t pw = 0; pw < pooled[1]; ++pw) {
          const int64_t h_begin = std::clamp<int64_t>(std::floor(ph * bin_h) + y1, 0, height);
          const int64_t h_end = std::clamp<int64_t>(std::ceil((ph + 1) * bin_h) + y1, 0, height);
          const int64_t w_begin = std::clamp<int64_t>(std::floor(pw * bin_w) + x1, 0, width);
          const int64_t w_end = std::clamp<int64_t>(std::ceil((pw + 1) * bin_w) + x1, 0, width);
          double best = -INFINITY;
          for (int64_t h = h_begin; h < h_end; ++h) {
            for (int64_t w = w_begin; w < w_end; ++w)
              best = std::max(best, x[((b * xd[1] + c) * height + h) * width + w]);
          }
          out.push_back(h_end <= h_begin || w_end <= w_begin ? 0.0 : best);
        }
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), {num_rois, xd[1], pooled[0], pooled[1]}, out)};
}

// An attribute of one entry per spatial dim (`fallback` each when absent).
std::vector<int64_t> PerDim(const Node& node, const char* name, size_t dims, int64_t fallback) {
  return node.GetInts(name, std::vector<int64_t>(dims, fallback));
}

Result Col2Im(const Node& node, const Inputs& in) {
  const std::vector<int64_t> xd = in[0]->dims();
  const std::vector<double> x = Doubles(*in[0]);
  const std::vector<int64_t> image = Ints(*in[1]), block = Ints(*in[2]);
  const size_t dims = image.size();
  const std::vector<int64_t> strides = PerDim(node, "strides", dims, 1), dilations = PerDim(node, "dilations", dims, 1);
  const std::vector<int64_t> pads = PerDim(node, "pads", 2 * dims, 0);
  std::vector<int64_t> grid(dims);  // block positions per dim
  for (size_t d = 0; d < dims; ++d) {
    grid[d] = (image[d] + pads[d] + pads[dims + d] - dilations[d] * (block[d] - 1) - 1) / strides[d] + 1;
  }
  const int64_t taps = Product(block), channels = xd[1] / taps;
  std::vector<int64_t> out_dims = {xd[0], channels};
  out_dims.insert(out_dims.end(), image.begin(), image.end());
  std::vector<double> out(static_cast<size_t>(Product(out_dims)), 0.0);
  for (int64_t n = 0; n < xd[0]; ++n) {
    for (int64_t row = 0; row < xd[1]; ++row) {
      const std::vector<int64_t> tap = Unflatten(block, row % taps);
      for (int64_t l = 0; l < xd[2]; ++l) {
        const std::vector<int64_t> where = Unflatten(grid, l);
        std::vector<int64_t> index = {n, row / taps};
        bool inside = true;
        for (size_t d = 0; d < dims; ++d) {
          const int64_t pos = where[d] * strides[d] - pads[d] + tap[d] * dilations[d];
          inside = inside && pos >= 0 && pos < image[d];
          index.push_back(pos);
        }
        if (inside) out[Flatten(out_dims, index)] += x[(n * xd[1] + row) * xd[2] + l];
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), out_dims, out)};
}

// The base grid's normalized coordinates along an axis of `size` pixels.
std::vector<double> BaseAxis(int64_t size, bool align_corners) {
  std::vector<double> axis;
  for (int64_t i = 0; i < size; ++i) {
    if (!align_corners) {
      axis.push_back(-1.0 + (i + 0.5) * 2.0 / size);
    } else {
      axis.push_back(size == 1 ? 0.0 : -1.0 + i * (2.0 / (size - 1)));
    }
  }
  return axis;
}

Result AffineGrid(const Node& node, const Inputs& in) {
  const std::vector<double> theta = Doubles(*in[0]);
  const std::vector<int64_t> size = Ints(*in[1]);
  const bool align = node.GetInt("align_corners", 0) != 0;
  const int64_t dims = static_cast<int64_t>(size.size()) - 2;
  // Spatial extents outermost first (D, H, W); the coordinates go innermost first (x, y, z).
  const std::vector<int64_t> extents(size.begin() + 2, size.end());
  std::vector<std::vector<double>> axes;
  for (int64_t extent : extents) axes.push_back(BaseAxis(extent, align));
  std::vector<int64_t> out_dims = {size[0]};
  out_dims.insert(out_dims.end(), extents.begin(), extents.end());
  out_dims.push_back(dims);
  std::vector<double> out;
  for (int64_t n = 0; n < size[0]; ++n) {
    for (int64_t at = 0; at < Product(extents); ++at) {
      const std::vector<int64_t> index = Unflatten(extents, at);
      std::vector<double> point;  // (x, y[, z], 1)
      for (int64_t d = dims; d-- > 0;) point.push_back(axes[d][index[d]]);
      point.push_back(1.0);
      for (int64_t r = 0; r < dims; ++r) {
        double v = 0;
        for (int64_t k = 0; k <= dims; ++k) v += theta[(n * dims + r) * (dims + 1) + k] * point[k];
        out.push_back(v);
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), out_dims, out)};
}

// X[n, c] read at real (y, x) by bilinear interpolation; pixels outside the image are 0.
double Bilinear(const std::vector<double>& x, const std::vector<int64_t>& xd, int64_t n, int64_t c, double y,
                double xx) {
  const double fy = std::floor(y), fx = std::floor(xx);
  double sum = 0;
  for (int dy = 0; dy < 2; ++dy) {
    for (int dx = 0; dx < 2; ++dx) {
      const int64_t r = static_cast<int64_t>(fy) + dy, col = static_cast<int64_t>(fx) + dx;
      if (r < 0 || r >= xd[2] || col < 0 || col >= xd[3]) continue;
      const double weight = (dy ? y - fy : 1 - (y - fy)) * (dx ? xx - fx : 1 - (xx - fx));
      sum += weight * x[((n * xd[1] + c) * xd[2] + r) * xd[3] + col];
    }
  }
  return sum;
}

Result DeformConv(const Node& node, const Inputs& in) {
  const std::vector<int64_t> xd = in[0]->dims(), wd = in[1]->dims(), od = in[2]->dims();
  const std::vector<double> x = Doubles(*in[0]), w = Doubles(*in[1]), offset = Doubles(*in[2]);
  const bool has_bias = in.size() > 3 && in[3] != nullptr, has_mask = in.size() > 4 && in[4] != nullptr;
  const std::vector<double> bias = has_bias ? Doubles(*in[3]) : std::vector<double>();
  const std::vector<double> mask = has_mask ? Doubles(*in[4]) : std::vector<double>();
  const int64_t group = node.GetInt("group", 1), offset_group = node.GetInt("offset_group", 1);
  const std::vector<int64_t> strides = PerDim(node, "strides", 2, 1), dilations = PerDim(node, "dilations", 2, 1);
  const std::vector<int64_t> pads = PerDim(node, "pads", 4, 0);
  const int64_t kh = wd[2], kw = wd[3], out_h = od[2], out_w = od[3];
  const int64_t in_per_group = xd[1] / group, out_per_group = wd[0] / group, per_offset = xd[1] / offset_group;
  std::vector<double> out;
  for (int64_t n = 0; n < xd[0]; ++n) {
    for (int64_t o = 0; o < wd[0]; ++o) {
      for (int64_t i = 0; i < out_h; ++i) {
        for (int64_t j = 0; j < out_w; ++j) {
          double acc = has_bias ? bias[o] : 0.0;
          for (int64_t ci = 0; ci < in_per_group; ++ci) {
            const int64_t c = o / out_per_group * in_per_group + ci, g = c / per_offset;
            for (int64_t a = 0; a < kh; ++a) {
              for (int64_t b = 0; b < kw; ++b) {
                const int64_t tap = a * kw + b;
                const double dy = offset[Flatten(od, {n, (g * kh * kw + tap) * 2, i, j})];
                const double dx = offset[Flatten(od, {n, (g * kh * kw + tap) * 2 + 1, i, j})];
                const double m =
                    has_mask ? mask[((n * offset_group * kh * kw + g * kh * kw + tap) * out_h + i) * out_w + j] : 1.0;
                const double sample =
                    Bilinear(x, xd, n, c, static_cast<double>(i * strides[0] - pads[0] + a * dilations[0]) + dy,
                             static_cast<double>(j * strides[1] - pads[1] + b * dilations[1]) + dx);
                acc += w[((o * in_per_group + ci) * kh + a) * kw + b] * m * sample;
              }
            }
          }
          out.push_back(acc);
        }
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), {xd[0], wd[0], out_h, out_w}, out)};
}

}  // namespace

void AddSpatialOps(RefTable& table) {
  table["GlobalLpPool"] = GlobalLpPool;
  table["LpNormalization"] = LpNormalization;
  table["MaxRoiPool"] = MaxRoiPool;
  table["Col2Im"] = Col2Im;
  table["AffineGrid"] = AffineGrid;
  table["DeformConv"] = DeformConv;
}

}  // namespace kiln::ref
