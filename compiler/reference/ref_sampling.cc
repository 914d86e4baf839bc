// GridSample and RoiAlign, from the ONNX specification: GridSample pads per pixel read
// (zeros, border clamp, reflection about the edges), as the specification's reference
// does; RoiAlign averages (or takes the maximum of) bilinear samples per bin.
#include <cmath>
#include <string>

#include "ref_nn_util.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

// One [H, W] image of a [N, C, H, W] tensor.
struct Image {
  const std::vector<double>* data;
  int64_t offset, height, width;
  double operator()(int64_t y, int64_t x) const { return (*data)[offset + y * width + x]; }
};

double ReflectInto(double v, double low, double high) {
  const double range = high - low;
  if (range <= 0) return low;
  if (v < low) {
    const double d = low - v;
    const int64_t n = static_cast<int64_t>(d / range);
    const double r = d - n * range;
    return n % 2 == 0 ? low + r : high - r;
  }
  if (v > high) {
    const double d = v - high;
    const int64_t n = static_cast<int64_t>(d / range);
    const double r = d - n * range;
    return n % 2 == 0 ? high - r : low + r;
  }
  return v;
}

// The pixel at integer (y, x) under the padding mode.
double PixelAt(const Image& image, int64_t y, int64_t x, const std::string& padding, bool align_corners) {
  const int64_t h = image.height, w = image.width;
  if (padding == "border") {
    y = std::min(std::max<int64_t>(y, 0), h - 1);
    x = std::min(std::max<int64_t>(x, 0), w - 1);
  } else if (padding == "reflection") {
    const double edge = align_corners ? 0.0 : 0.5;
    y = static_cast<int64_t>(ReflectInto(static_cast<double>(y), -edge, h - 1 + edge));
    x = static_cast<int64_t>(ReflectInto(static_cast<double>(x), -edge, w - 1 + edge));
  }
  if (y < 0 || y >= h || x < 0 || x >= w) return 0.0;
  return image(y, x);
}

// Keys' cubic convolution weights (a = -0.75) of taps at distances 1 + t, t, 1 - t, 2 - t.
void Cubic(double t, double c[4]) {
  const double a = -0.75;
  auto inner = [&](double s) { return (a + 2) * s * s * s - (a + 3) * s * s + 1; };
  auto outer = [&](double s) { return a * s * s * s - 5 * a * s * s + 8 * a * s - 4 * a; };
  c[0] = outer(1 + t);
  c[1] = inner(t);
  c[2] = inner(1 - t);
  c[3] = outer(2 - t);
}

double Sample(const Image& image, double y, double x, const std::string& mode, const std::string& padding, bool align) {
  if (mode == "nearest") {
    return PixelAt(image, static_cast<int64_t>(std::nearbyint(y)), static_cast<int64_t>(std::nearbyint(x)), padding,
                   align);
  }
  const int64_t y0 = static_cast<int64_t>(std::floor(y)), x0 = static_cast<int64_t>(std::floor(x));
  const double ty = y - y0, tx = x - x0;
  if (mode == "bicubic" || mode == "cubic") {
    double cy[4], cx[4], sum = 0;
    Cubic(ty, cy);
    Cubic(tx, cx);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) sum += cy[i] * cx[j] * PixelAt(image, y0 - 1 + i, x0 - 1 + j, padding, align);
    }
    return sum;
  }
  return (1 - ty) * (1 - tx) * PixelAt(image, y0, x0, padding, align) +
         (1 - ty) * tx * PixelAt(image, y0, x0 + 1, padding, align) +
         ty * (1 - tx) * PixelAt(image, y0 + 1, x0, padding, align) +
         ty * tx * PixelAt(image, y0 + 1, x0 + 1, padding, align);
}

// A volume's value at integer (z, y, x) under the padding mode, each axis padded as
// PixelAt pads an image's.
double VoxelAt(const std::vector<double>& x, int64_t offset, const std::vector<int64_t>& dims, int64_t z, int64_t y,
               int64_t w, const std::string& padding, bool align_corners) {
  int64_t at[3] = {z, y, w};
  for (int a = 0; a < 3; ++a) {
    const int64_t n = dims[2 + a];
    if (padding == "border") at[a] = std::min(std::max<int64_t>(at[a], 0), n - 1);
    if (padding == "reflection") {
      const double edge = align_corners ? 0.0 : 0.5;
      at[a] = static_cast<int64_t>(ReflectInto(static_cast<double>(at[a]), -edge, n - 1 + edge));
    }
    if (at[a] < 0 || at[a] >= n) return 0.0;
  }
  return x[offset + (at[0] * dims[3] + at[1]) * dims[4] + at[2]];
}

// Opset 20's volumetric GridSample: X [N, C, D, H, W], grid [N, Do, Ho, Wo, 3] of (x, y, z),
// nearest or trilinear.
Result GridSampleVolume(const Node& node, const Inputs& in) {
  const std::vector<int64_t> xd = in[0]->dims(), gd = in[1]->dims();
  const std::vector<double> x = Doubles(*in[0]), grid = Doubles(*in[1]);
  const std::string mode = node.GetString("mode", "bilinear"), padding = node.GetString("padding_mode", "zeros");
  if (mode == "cubic" || mode == "bicubic") return absl::InvalidArgumentError("GridSample: cubic on a volume");
  const bool align = node.GetInt("align_corners", 0) != 0;
  auto position = [&](double g, int64_t size) { return align ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2; };
  const int64_t positions = gd[1] * gd[2] * gd[3], volume = xd[2] * xd[3] * xd[4];
  std::vector<double> out;
  for (int64_t n = 0; n < xd[0]; ++n) {
    for (int64_t c = 0; c < xd[1]; ++c) {
      const int64_t offset = (n * xd[1] + c) * volume;
      for (int64_t i = 0; i < positions; ++i) {
        const double* g = &grid[(n * positions + i) * 3];
        const double pos[3] = {position(g[2], xd[2]), position(g[1], xd[3]), position(g[0], xd[4])};
        if (mode == "nearest") {
          out.push_back(VoxelAt(x, offset, xd, static_cast<int64_t>(std::nearbyint(pos[0])),
                                static_cast<int64_t>(std::nearbyint(pos[1])),
                                static_cast<int64_t>(std::nearbyint(pos[2])), padding, align));
          continue;
        }
        int64_t base[3];
        double t[3];
        for (int a = 0; a < 3; ++a) {
          base[a] = static_cast<int64_t>(std::floor(pos[a]));
          t[a] = pos[a] - base[a];
        }
        double sum = 0;
        for (int dz = 0; dz < 2; ++dz) {
          for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) {
              const double w = (dz ? t[0] : 1 - t[0]) * (dy ? t[1] : 1 - t[1]) * (dx ? t[2] : 1 - t[2]);
              sum += w * VoxelAt(x, offset, xd, base[0] + dz, base[1] + dy, base[2] + dx, padding, align);
            }
          }
        }
        out.push_back(sum);
      }
    }
  }
  std::vector<int64_t> out_dims = {xd[0], xd[1], gd[1], gd[2], gd[3]};
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), out_dims, out)};
}

Result GridSample(const Node& node, const Inputs& in) {
  if (in[0]->rank() == 5) return GridSampleVolume(node, in);
  const std::vector<int64_t> xd = in[0]->dims(), gd = in[1]->dims();
  const std::vector<double> x = Doubles(*in[0]), grid = Doubles(*in[1]);
  const std::string mode = node.GetString("mode", "bilinear"), padding = node.GetString("padding_mode", "zeros");
  const bool align = node.GetInt("align_corners", 0) != 0;
  // A normalized coordinate in [-1, 1] as a pixel position.
  auto position = [&](double g, int64_t size) { return align ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2; };
  std::vector<int64_t> out_dims = {xd[0], xd[1], gd[1], gd[2]};
  std::vector<double> out;
  for (int64_t n = 0; n < xd[0]; ++n) {
    for (int64_t c = 0; c < xd[1]; ++c) {
      const Image image{&x, (n * xd[1] + c) * xd[2] * xd[3], xd[2], xd[3]};
      for (int64_t i = 0; i < gd[1] * gd[2]; ++i) {
        const double gx = grid[(n * gd[1] * gd[2] + i) * 2], gy = grid[(n * gd[1] * gd[2] + i) * 2 + 1];
        out.push_back(Sample(image, position(gy, xd[2]), position(gx, xd[3]), mode, padding, align));
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), out_dims, out)};
}

// RoiAlign's bilinear sample: 0 beyond a pixel outside the image, else the position
// clamped to the image's last row and column.
double RoiSample(const Image& image, double y, double x, bool max_mode) {
  if (y < -1.0 || y > image.height || x < -1.0 || x > image.width) return 0.0;
  y = std::min(std::max(y, 0.0), static_cast<double>(image.height - 1));
  x = std::min(std::max(x, 0.0), static_cast<double>(image.width - 1));
  const int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x);
  const int64_t y1 = std::min(y0 + 1, image.height - 1), x1 = std::min(x0 + 1, image.width - 1);
  const double ly = y - y0, lx = x - x0;
  const double terms[4] = {(1 - ly) * (1 - lx) * image(y0, x0), (1 - ly) * lx * image(y0, x1),
                           ly * (1 - lx) * image(y1, x0), ly * lx * image(y1, x1)};
  if (max_mode) return std::max(std::max(terms[0], terms[1]), std::max(terms[2], terms[3]));
  return terms[0] + terms[1] + terms[2] + terms[3];
}

Result RoiAlign(const Node& node, const Inputs& in) {
  const std::vector<int64_t> xd = in[0]->dims();
  const std::vector<double> x = Doubles(*in[0]), rois = Doubles(*in[1]);
  const std::vector<int64_t> batch = Ints(*in[2]);
  const int64_t out_h = node.GetInt("output_height", 1), out_w = node.GetInt("output_width", 1);
  const int64_t ratio = node.GetInt("sampling_ratio", 0);
  const double scale = node.GetFloat("spatial_scale", 1.0);
  const bool max_mode = node.GetString("mode", "avg") == "max";
  const std::string transform =
      node.GetString("coordinate_transformation_mode", node.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  const double shift = transform == "half_pixel" ? 0.5 : 0.0;
  const int64_t num_rois = in[1]->dims()[0];
  std::vector<double> out;
  for (int64_t r = 0; r < num_rois; ++r) {
    const double x1 = rois[r * 4] * scale - shift, y1 = rois[r * 4 + 1] * scale - shift;
    double w = rois[r * 4 + 2] * scale - shift - x1, h = rois[r * 4 + 3] * scale - shift - y1;
    if (transform != "half_pixel") {
      w = std::max(w, 1.0);
      h = std::max(h, 1.0);
    }
    const int64_t grid_h = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(h / out_h));
    const int64_t grid_w = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(w / out_w));
    for (int64_t c = 0; c < xd[1]; ++c) {
      const Image image{&x, (batch[r] * xd[1] + c) * xd[2] * xd[3], xd[2], xd[3]};
      for (int64_t ph = 0; ph < out_h; ++ph) {
        for (int64_t pw = 0; pw < out_w; ++pw) {
          double acc = max_mode ? -INFINITY : 0.0;
          for (int64_t iy = 0; iy < grid_h; ++iy) {
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              const double sy = y1 + (ph + (iy + 0.5) / grid_h) * h / out_h;
              const double sx = x1 + (pw + (ix + 0.5) / grid_w) * w / out_w;
              const double v = RoiSample(image, sy, sx, max_mode);
              acc = max_mode ? std::max(acc, v) : acc + v;
            }
          }
          out.push_back(max_mode ? acc : acc / std::max<int64_t>(grid_h * grid_w, 1));
        }
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), {num_rois, xd[1], out_h, out_w}, out)};
}

}  // namespace

void AddSamplingOps(RefTable& table) {
  table["GridSample"] = GridSample;
  table["RoiAlign"] = RoiAlign;
}

}  // namespace kiln::ref
