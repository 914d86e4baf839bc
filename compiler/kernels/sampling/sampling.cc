// Sampling at computed positions: GridSample (bilinear, nearest, bicubic; zeros, border and
// reflection padding; 3-D volumes nearest and trilinear) and RoiAlign (average or max of bilinear samples per bin). The
// coordinate rules follow PyTorch's grid_sampler and onnxruntime's RoiAlign, which the
// ONNX specification describes.
#include "kiln/kernels/sampling.h"
#include "kernel_common.h"
#include "kiln/kernels/shape.h"

using namespace kiln_kernels;

namespace {

// A [H, W] plane read at integer (y, x); 0 outside it.
template <typename T>
struct Plane {
  const T* data;
  int64_t height, width;
  KILN_ALWAYS_INLINE double At(int64_t y, int64_t x) const {
    return y < 0 || y >= height || x < 0 || x >= width ? 0.0 : static_cast<double>(data[y * width + x]);
  }
};

// A normalized grid coordinate in [-1, 1] as a position in a dim of `size` pixels.
KILN_ALWAYS_INLINE double Unnormalize(double g, int64_t size, bool align_corners) {
  return align_corners ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
}

KILN_ALWAYS_INLINE double ClampToDim(double v, int64_t size) {
  return v < 0 ? 0 : (v > static_cast<double>(size - 1) ? static_cast<double>(size - 1) : v);
}

// v reflected into [low, high] (given doubled, as integers), repeatedly.
KILN_ALWAYS_INLINE double Reflect(double v, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
  v = fabs(v - low);
  const double extra = fmod(v, span);
  const int64_t flips = static_cast<int64_t>(floor(v / span));
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

// The padding mode applied to a position: border clamps it into the dim, reflection
// mirrors it at the dim's edges (the pixel centres with align_corners, else the borders).
KILN_ALWAYS_INLINE double ApplyPadding(double v, int64_t size, int64_t padding, bool align_corners) {
  if (padding == KILN_GRID_PAD_BORDER) return ClampToDim(v, size);
  if (padding == KILN_GRID_PAD_REFLECTION) {
    const double s = static_cast<double>(size);
    v = align_corners ? Reflect(v, 0, 2 * (s - 1)) : Reflect(v, -1, 2 * s - 1);
    return ClampToDim(v, size);
  }
  return v;
}

// The cubic convolution weights (A = -0.75) of the four taps around a position whose
// fractional part is t.
KILN_ALWAYS_INLINE void CubicWeights(double t, double w[4]) {
  constexpr double A = -0.75;
  auto near = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto far = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

template <typename T>
double SampleGrid(const Plane<T>& p, double gx, double gy, const kiln_sampling_params& params) {
  const bool align = params.align_corners != 0;
  double x = Unnormalize(gx, p.width, align), y = Unnormalize(gy, p.height, align);
  if (params.mode == KILN_GRID_BICUBIC) {
    // Each tap is padded on its own: the 4 x 4 neighbourhood of the unpadded position.
    const double x0 = floor(x), y0 = floor(y);
    double wx[4], wy[4];
    CubicWeights(x - x0, wx);
    CubicWeights(y - y0, wy);
    double sum = 0;
    for (int i = 0; i < 4; ++i) {
      const double ty = ApplyPadding(y0 - 1 + i, p.height, params.padding_mode, align);
      for (int j = 0; j < 4; ++j) {
        const double tx = ApplyPadding(x0 - 1 + j, p.width, params.padding_mode, align);
        sum += wy[i] * wx[j] * p.At(static_cast<int64_t>(ty), static_cast<int64_t>(tx));
      }
    }
    return sum;
  }
  x = ApplyPadding(x, p.width, params.padding_mode, align);
  y = ApplyPadding(y, p.height, params.padding_mode, align);
  if (params.mode == KILN_GRID_NEAREST) {
    return p.At(static_cast<int64_t>(nearbyint(y)), static_cast<int64_t>(nearbyint(x)));
  }
  const double x0 = floor(x), y0 = floor(y), lx = x - x0, ly = y - y0;
  const int64_t ix = static_cast<int64_t>(x0), iy = static_cast<int64_t>(y0);
  return (1 - ly) * ((1 - lx) * p.At(iy, ix) + lx * p.At(iy, ix + 1)) +
         ly * ((1 - lx) * p.At(iy + 1, ix) + lx * p.At(iy + 1, ix + 1));
}

// A [D, H, W] volume read at integer (z, y, x); 0 outside it.
template <typename T>
struct Volume {
  const T* data;
  int64_t depth, height, width;
  KILN_ALWAYS_INLINE double At(int64_t z, int64_t y, int64_t x) const {
    return z < 0 || z >= depth ? 0.0 : Plane<T>{data + z * height * width, height, width}.At(y, x);
  }
};

// Opset 20's volumetric GridSample: nearest or trilinear (the specification has no cubic
// beyond 2-D), the padding applied to the position as in 2-D.
template <typename T>
double SampleVolume(const Volume<T>& v, const T* g, const kiln_sampling_params& params) {
  const bool align = params.align_corners != 0;
  const double x = ApplyPadding(Unnormalize(g[0], v.width, align), v.width, params.padding_mode, align);
  const double y = ApplyPadding(Unnormalize(g[1], v.height, align), v.height, params.padding_mode, align);
  const double z = ApplyPadding(Unnormalize(g[2], v.depth, align), v.depth, params.padding_mode, align);
  if (params.mode == KILN_GRID_NEAREST) {
    return v.At(static_cast<int64_t>(nearbyint(z)), static_cast<int64_t>(nearbyint(y)),
                static_cast<int64_t>(nearbyint(x)));
  }
  const double x0 = floor(x), y0 = floor(y), z0 = floor(z);
  const double t[3] = {z - z0, y - y0, x - x0};
  double sum = 0;
  for (int corner = 0; corner < 8; ++corner) {
    const int dz = corner >> 2, dy = (corner >> 1) & 1, dx = corner & 1;
    const double weight = (dz ? t[0] : 1 - t[0]) * (dy ? t[1] : 1 - t[1]) * (dx ? t[2] : 1 - t[2]);
    sum += weight * v.At(static_cast<int64_t>(z0) + dz, static_cast<int64_t>(y0) + dy, static_cast<int64_t>(x0) + dx);
  }
  return sum;
}

// inputs: X [N, C, D, H, W], grid [N, Do, Ho, Wo, 3] of (x, y, z); output [N, C, Do, Ho, Wo].
template <typename T>
int32_t GridSampleVolume(const kiln_kcall* call, const kiln_sampling_params& params) {
  const kiln_ktensor& x = call->inputs[0];
  const kiln_ktensor& y = call->outputs[0];
  if (params.mode == KILN_GRID_BICUBIC) return KILN_KERR_UNSUPPORTED;
  const int64_t channels = x.dims[1], volume = x.dims[2] * x.dims[3] * x.dims[4];
  const int64_t positions = y.dims[2] * y.dims[3] * y.dims[4];
  const T* px = InputData<T>(call, 0);
  const T* grid = InputData<T>(call, 1);
  T* py = OutputData<T>(call);
  auto body = [&](int64_t begin, int64_t end) {  // one (image, channel) volume at a time
    for (int64_t nc = begin; nc < end; ++nc) {
      const Volume<T> v{px + nc * volume, x.dims[2], x.dims[3], x.dims[4]};
      const T* g = grid + nc / channels * positions * 3;
      for (int64_t i = 0; i < positions; ++i)
        py[nc * positions + i] = static_cast<T>(SampleVolume(v, g + 3 * i, params));
    }
  };
  ParallelFor(call, x.dims[0] * channels, 1, body);
  return KILN_KERR_OK;
}

// inputs: X [N, C, H, W], grid [N, Ho, Wo, 2] of (x, y); output [N, C, Ho, Wo] (rank 5:
// GridSampleVolume).
struct GridSample {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_sampling_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    const kiln_ktensor& y = call->outputs[0];
    if (x.rank == 5) return GridSampleVolume<T>(call, params);
    if (x.rank != 4) return KILN_KERR_UNSUPPORTED;
    const int64_t channels = x.dims[1], height = x.dims[2], width = x.dims[3];
    const int64_t positions = y.dims[2] * y.dims[3];
    const T* px = InputData<T>(call, 0);
    const T* grid = InputData<T>(call, 1);
    T* py = OutputData<T>(call);
    auto body = [&](int64_t begin, int64_t end) {  // one (image, channel) plane at a time
      for (int64_t nc = begin; nc < end; ++nc) {
        const Plane<T> plane{px + nc * height * width, height, width};
        T* out = py + nc * positions;
        const T* g = grid + nc / channels * positions * 2;
        for (int64_t i = 0; i < positions; ++i) {
          out[i] = static_cast<T>(SampleGrid(plane, g[2 * i], g[2 * i + 1], params));
        }
      }
    };
    ParallelFor(call, x.dims[0] * channels, 1, body);
    return KILN_KERR_OK;
  }
};

// One ROI's sampling grid: its corner, bin size and samples per bin on each axis.
struct RoiBin {
  double start_y, start_x, bin_h, bin_w;
  int64_t grid_h, grid_w;
};

template <typename T>
KILN_ALWAYS_INLINE RoiBin RoiGeometry(const T* roi, const kiln_sampling_params& params, int64_t out_h, int64_t out_w) {
  const double offset = params.half_pixel ? 0.5 : 0.0, scale = params.spatial_scale;
  RoiBin bin{roi[1] * scale - offset, roi[0] * scale - offset, 0, 0, 0, 0};
  double roi_h = roi[3] * scale - offset - bin.start_y, roi_w = roi[2] * scale - offset - bin.start_x;
  if (!params.half_pixel) {  // output_half_pixel: at least a pixel
    roi_h = roi_h > 1 ? roi_h : 1;
    roi_w = roi_w > 1 ? roi_w : 1;
  }
  bin.bin_h = roi_h / static_cast<double>(out_h);
  bin.bin_w = roi_w / static_cast<double>(out_w);
  bin.grid_h = params.sampling_ratio > 0 ? params.sampling_ratio : static_cast<int64_t>(ceil(roi_h / out_h));
  bin.grid_w = params.sampling_ratio > 0 ? params.sampling_ratio : static_cast<int64_t>(ceil(roi_w / out_w));
  return bin;
}

// A bilinear sample of RoiAlign: where its four neighbours lie in a plane, and their weights.
struct RoiTap {
  int64_t at[4];
  double w[4];
};

// RoiAlign's bilinear sample at (y, x) of a height x width plane (neither 0): no weight
// more than a pixel outside the plane, else the position clamped into it.
KILN_ALWAYS_INLINE RoiTap RoiTapAt(int64_t height, int64_t width, double y, double x) {
  RoiTap t{{0, 0, 0, 0}, {0, 0, 0, 0}};
  if (y < -1.0 || y > static_cast<double>(height) || x < -1.0 || x > static_cast<double>(width)) return t;
  y = y <= 0 ? 0 : y;
  x = x <= 0 ? 0 : x;
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<double>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<double>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const double ly = y - static_cast<double>(y_low), lx = x - static_cast<double>(x_low), hy = 1 - ly, hx = 1 - lx;
  t.at[0] = y_low * width + x_low, t.at[1] = y_low * width + x_high;
  t.at[2] = y_high * width + x_low, t.at[3] = y_high * width + x_high;
  t.w[0] = hy * hx, t.w[1] = hy * lx, t.w[2] = ly * hx, t.w[3] = ly * lx;
  return t;
}

// Sample (iy, ix) of an ROI's bin (ph, pw).
KILN_ALWAYS_INLINE RoiTap RoiBinTap(const RoiBin& bin, int64_t height, int64_t width, int64_t ph, int64_t pw,
                                    int64_t iy, int64_t ix) {
  const double y = bin.start_y + ph * bin.bin_h + (iy + 0.5) * bin.bin_h / static_cast<double>(bin.grid_h);
  const double x = bin.start_x + pw * bin.bin_w + (ix + 0.5) * bin.bin_w / static_cast<double>(bin.grid_w);
  return RoiTapAt(height, width, y, x);
}

// Folds one sample of a plane into a bin's average (sum) or maximum.
template <typename T>
KILN_ALWAYS_INLINE void PoolTap(const T* plane, const RoiTap& t, int64_t mode, double& result, bool& first) {
  double c[4];
  for (int k = 0; k < 4; ++k) c[k] = t.w[k] * static_cast<double>(plane[t.at[k]]);
  if (mode == KILN_ROI_MAX) {
    const double v = fmax(fmax(c[0], c[1]), fmax(c[2], c[3]));
    result = first || v > result ? v : result;
    first = false;
  } else {
    result += c[0] + c[1] + c[2] + c[3];
  }
}

KILN_ALWAYS_INLINE double BinResult(double result, int64_t count, int64_t mode) {
  if (mode == KILN_ROI_MAX) return result;
  return result / static_cast<double>(count > 0 ? count : 1);
}

// An ROI's samples fit a table of this many: its taps are worked out once for all its
// channels (7 x 7 bins of 2 x 2 samples, Faster R-CNN's, take 196).
constexpr int64_t kMaxRoiTaps = 1024;

// inputs: X [N, C, H, W], rois [R, 4] of (x1, y1, x2, y2), batch_indices [R] (int64);
// output [R, C, output_height, output_width].
struct RoiAlign {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_sampling_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    const kiln_ktensor& y = call->outputs[0];
    const int64_t channels = x.dims[1], height = x.dims[2], width = x.dims[3];
    const int64_t out_h = y.dims[2], out_w = y.dims[3], bins = out_h * out_w;
    const T* px = InputData<T>(call, 0);
    const T* rois = InputData<T>(call, 1);
    const int64_t* batch = InputData<int64_t>(call, 2);
    T* py = OutputData<T>(call);
    for (int64_t r = 0; r < y.dims[0]; ++r) {
      if (batch[r] < 0 || batch[r] >= x.dims[0]) return KILN_KERR_INDEX;
    }
    if (height <= 0 || width <= 0) {  // nothing to sample: every bin 0
      for (int64_t i = 0; i < Numel(y); ++i) py[i] = T(0);
      return KILN_KERR_OK;
    }
    auto body = [&](int64_t begin, int64_t end) {  // one (ROI, channel) plane at a time
      RoiTap taps[kMaxRoiTaps];
      int64_t tabled = -1;  // the ROI whose taps are in the table
      for (int64_t rc = begin; rc < end; ++rc) {
        const int64_t r = rc / channels, c = rc % channels;
        const RoiBin bin = RoiGeometry(rois + r * 4, params, out_h, out_w);
        const int64_t per_bin = bin.grid_h * bin.grid_w;
        const T* plane = px + (batch[r] * channels + c) * height * width;
        T* out = py + rc * bins;
        const bool table = per_bin * bins <= kMaxRoiTaps;
        if (table && tabled != r) {
          RoiTap* t = taps;
          for (int64_t ph = 0; ph < out_h; ++ph)
            for (int64_t pw = 0; pw < out_w; ++pw)
              for (int64_t iy = 0; iy < bin.grid_h; ++iy)
                for (int64_t ix = 0; ix < bin.grid_w; ++ix) *t++ = RoiBinTap(bin, height, width, ph, pw, iy, ix);
          tabled = r;
        }
        for (int64_t ph = 0; ph < out_h; ++ph) {
          for (int64_t pw = 0; pw < out_w; ++pw) {
            double result = 0;
            bool first = true;
            if (table) {
              const RoiTap* t = taps + (ph * out_w + pw) * per_bin;
              for (int64_t k = 0; k < per_bin; ++k) PoolTap(plane, t[k], params.mode, result, first);
            } else {
              for (int64_t iy = 0; iy < bin.grid_h; ++iy)
                for (int64_t ix = 0; ix < bin.grid_w; ++ix)
                  PoolTap(plane, RoiBinTap(bin, height, width, ph, pw, iy, ix), params.mode, result, first);
            }
            out[ph * out_w + pw] = static_cast<T>(BinResult(result, per_bin, params.mode));
          }
        }
      }
    };
    ParallelFor(call, y.dims[0] * channels, 1, body);
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_FLOAT_KERNEL(grid_sample, GridSample, inputs[0].dtype)
KILN_FLOAT_KERNEL(roi_align, RoiAlign, inputs[0].dtype)

// GridSample's run-time shape: [N, C] of X, then the grid's dims between its first and last.
KILN_KERNEL(shape_grid_sample) {
  const kiln_ktensor& x = call->inputs[0];
  const kiln_ktensor& grid = call->inputs[1];
  const int32_t rank = call->outputs[0].rank;
  if (x.rank != rank || grid.rank != rank) return KILN_KERR_SHAPE;
  if (x.dims[0] >= 0 && grid.dims[0] >= 0 && x.dims[0] != grid.dims[0]) return KILN_KERR_SHAPE;
  if (grid.dims[rank - 1] >= 0 && grid.dims[rank - 1] != rank - 2) return KILN_KERR_SHAPE;
  int64_t* y = const_cast<int64_t*>(call->outputs[0].dims);
  y[0] = x.dims[0];
  y[1] = x.dims[1];
  for (int32_t i = 2; i < rank; ++i) y[i] = grid.dims[i - 1];
  return KILN_KERR_OK;
}
