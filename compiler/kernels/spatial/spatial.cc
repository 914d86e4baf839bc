// Spatial ops with one kernel each: GlobalLpPool, LpNormalization, MaxRoiPool (Caffe's
// ROI pooling, as onnxruntime runs it), Col2Im (the scatter-add inverse of im2col),
// AffineGrid and DeformConv (bilinear samples at offset taps, zero outside the image).
// compiler/ops/spatial_ops.cc states each op's semantics.
#include "kiln/kernels/spatial.h"
#include "kernel_common.h"
#include "kiln/kernels/shape.h"

using namespace kiln_kernels;

namespace {

KILN_ALWAYS_INLINE double PowerOf(double v, int64_t p) { return p == 1 ? fabs(v) : (p == 2 ? v * v : pow(fabs(v), p)); }
KILN_ALWAYS_INLINE double RootOf(double v, int64_t p) { return p == 1 ? v : (p == 2 ? sqrt(v) : pow(v, 1.0 / p)); }

// X [N, C, spatial...] -> [N, C, 1...]: (sum |x|^p)^(1/p) over each (n, c) plane.
struct GlobalLpPool {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_spatial_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    if (x.rank < 2) return KILN_KERR_SHAPE;
    const int64_t planes = x.dims[0] * x.dims[1], size = planes == 0 ? 0 : Numel(x) / planes;
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    const int64_t p = params.p;
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        double sum = 0;
        for (int64_t k = 0; k < size; ++k) sum += PowerOf(static_cast<double>(px[i * size + k]), p);
        py[i] = static_cast<T>(RootOf(sum, p));
      }
    };
    ParallelFor(call, planes, 16, body);
    return KILN_KERR_OK;
  }
};

// x / ||x||_p along `axis`; a zero norm gives zeros (onnxruntime's choice).
struct LpNormalize {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_spatial_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    if (params.axis < 0 || params.axis >= x.rank) return KILN_KERR_UNSUPPORTED;
    const int64_t len = x.dims[params.axis];
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < params.axis; ++i) outer *= x.dims[i];
    for (int64_t i = params.axis + 1; i < x.rank; ++i) inner *= x.dims[i];
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    const int64_t p = params.p;
    auto body = [=](int64_t begin, int64_t end) {  // one (outer, inner) line at a time
      for (int64_t line = begin; line < end; ++line) {
        const int64_t base = line / inner * len * inner + line % inner;
        double sum = 0;
        for (int64_t k = 0; k < len; ++k) sum += PowerOf(static_cast<double>(px[base + k * inner]), p);
        const double norm = RootOf(sum, p);
        for (int64_t k = 0; k < len; ++k) {
          py[base + k * inner] = static_cast<T>(norm == 0 ? 0.0 : static_cast<double>(px[base + k * inner]) / norm);
        }
      }
    };
    ParallelFor(call, outer * inner, 16, body);
    return KILN_KERR_OK;
  }
};

// X [N, C, H, W], rois [R, 5] of (batch, x1, y1, x2, y2) -> [R, C, PH, PW]: the maximum
// of each bin of the rounded, scaled ROI; 0 for an empty bin.
struct MaxRoiPool {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_spatial_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    const kiln_ktensor& y = call->outputs[0];
    if (x.rank != 4 || call->inputs[1].rank != 2 || call->inputs[1].dims[1] != 5) return KILN_KERR_SHAPE;
    const int64_t batch = x.dims[0], channels = x.dims[1], height = x.dims[2], width = x.dims[3];
    const int64_t rois = y.dims[0], out_h = y.dims[2], out_w = y.dims[3];
    const T* px = InputData<T>(call, 0);
    const T* proi = InputData<T>(call, 1);
    T* py = OutputData<T>(call);
    for (int64_t r = 0; r < rois; ++r) {
      const int64_t b = static_cast<int64_t>(proi[r * 5]);
      if (b < 0 || b >= batch) return KILN_KERR_INDEX;
    }
    const double scale = params.spatial_scale;
    auto clamp = [](int64_t v, int64_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); };
    auto body = [=](int64_t begin, int64_t end) {  // one (ROI, channel) plane at a time
      for (int64_t rc = begin; rc < end; ++rc) {
        const T* roi = proi + rc / channels * 5;
        const int64_t start_w = static_cast<int64_t>(round(roi[1] * scale));
        const int64_t start_h = static_cast<int64_t>(round(roi[2] * scale));
        int64_t roi_w = static_cast<int64_t>(round(roi[3] * scale)) - start_w + 1;
        int64_t roi_h = static_cast<int64_t>(round(roi[4] * scale)) - start_h + 1;
        roi_w = roi_w < 1 ? 1 : roi_w;
        roi_h = roi_h < 1 ? 1 : roi_h;
        const double bin_h = static_cast<double>(roi_h) / out_h, bin_w = static_cast<double>(roi_w) / out_w;
        const T* plane = px + (static_cast<int64_t>(roi[0]) * channels + rc % channels) * height * width;
        T* out = py + rc * out_h * out_w;
        for (int64_t ph = 0; ph < out_h; ++ph) {
          const int64_t h0 = clamp(static_cast<int64_t>(floor(ph * bin_h)) + start_h, height);
          const int64_t h1 = clamp(static_cast<int64_t>(ceil((ph + 1) * bin_h)) + start_h, height);
          for (int64_t pw = 0; pw < out_w; ++pw) {
            const int64_t w0 = clamp(static_cast<int64_t>(floor(pw * bin_w)) + start_w, width);
            const int64_t w1 = clamp(static_cast<int64_t>(ceil((pw + 1) * bin_w)) + start_w, width);
            T best = 0;
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t w = w0; w < w1; ++w) {
                if ((h == h0 && w == w0) || plane[h * width + w] > best) best = plane[h * width + w];
              }
            }
            out[ph * out_w + pw] = best;
          }
        }
      }
    };
    ParallelFor(call, rois * channels, 1, body);
    return KILN_KERR_OK;
  }
};

// X [N, C * prod(block), L] -> [N, C, image...]: each column entry added at its image
// position; positions in the padding are dropped.
struct Col2Im {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_spatial_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    const kiln_ktensor& y = call->outputs[0];
    const kiln_window& w = params.window;
    if (w.rank < 1 || w.rank > KILN_MAX_SPATIAL || y.rank != w.rank + 2) return KILN_KERR_UNSUPPORTED;
    int64_t taps = 1, blocks = 1, pixels = 1, per_dim[KILN_MAX_SPATIAL];
    for (int64_t d = 0; d < w.rank; ++d) {
      const int64_t extent = y.dims[2 + d] + w.pads_begin[d] + w.pads_end[d] - w.dilations[d] * (w.kernel[d] - 1) - 1;
      per_dim[d] = extent < 0 ? 0 : extent / w.strides[d] + 1;
      taps *= w.kernel[d];
      blocks *= per_dim[d];
      pixels *= y.dims[2 + d];
    }
    if (x.rank != 3 || x.dims[2] != blocks || x.dims[1] != y.dims[1] * taps) return KILN_KERR_SHAPE;
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    const int64_t rank = w.rank;
    auto body = [=, &w, &y](int64_t begin, int64_t end) {  // one (image, channel) plane at a time
      for (int64_t nc = begin; nc < end; ++nc) {
        T* out = py + nc * pixels;
        for (int64_t i = 0; i < pixels; ++i) out[i] = 0;
        for (int64_t t = 0; t < taps; ++t) {
          const T* column = px + (nc * taps + t) * blocks;
          for (int64_t b = 0; b < blocks; ++b) {
            int64_t at = 0, trest = t, brest = b;
            bool inside = true;
            for (int64_t d = rank; d-- > 0;) {
              const int64_t k = trest % w.kernel[d], l = brest % per_dim[d];
              trest /= w.kernel[d];
              brest /= per_dim[d];
              const int64_t pos = l * w.strides[d] - w.pads_begin[d] + k * w.dilations[d];
              inside = inside && pos >= 0 && pos < y.dims[2 + d];
              int64_t stride = 1;
              for (int64_t e = d + 1; e < rank; ++e) stride *= y.dims[2 + e];
              at += pos * stride;
            }
            if (inside) out[at] += column[b];
          }
        }
      }
    };
    ParallelFor(call, y.dims[0] * y.dims[1], 1, body);
    return KILN_KERR_OK;
  }
};

// The base grid's coordinate of pixel i of `size` along one axis, in [-1, 1].
KILN_ALWAYS_INLINE double BaseCoordinate(int64_t i, int64_t size, bool align_corners) {
  if (align_corners) return size > 1 ? -1.0 + 2.0 * i / static_cast<double>(size - 1) : 0.0;
  return (2.0 * i + 1.0) / static_cast<double>(size) - 1.0;
}

// theta [N, 2, 3] -> grid [N, H, W, 2], or theta [N, 3, 4] -> grid [N, D, H, W, 3]: each
// base grid point (x, y[, z], 1) multiplied by theta.
struct AffineGrid {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_spatial_params& params) {
    const kiln_ktensor& y = call->outputs[0];
    const int64_t dims = y.rank - 2;  // 2 or 3 spatial dims
    if (dims != 2 && dims != 3) return KILN_KERR_UNSUPPORTED;
    const int64_t depth = dims == 3 ? y.dims[1] : 1, height = y.dims[dims == 3 ? 2 : 1],
                  width = y.dims[dims == 3 ? 3 : 2];
    const kiln_ktensor& t = call->inputs[0];
    if (t.rank != 3 || t.dims[0] != y.dims[0] || t.dims[1] != dims || t.dims[2] != dims + 1) return KILN_KERR_SHAPE;
    const T* theta = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    const bool align = params.align_corners != 0;
    auto body = [=](int64_t begin, int64_t end) {  // one (image, depth, row) at a time
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / (depth * height), z = row / height % depth, h = row % height;
        const T* m = theta + n * dims * (dims + 1);
        double base[4] = {0, BaseCoordinate(h, height, align), BaseCoordinate(z, depth, align), 1.0};
        if (dims == 2) base[2] = 1.0;
        for (int64_t x = 0; x < width; ++x) {
          base[0] = BaseCoordinate(x, width, align);
          T* out = py + (row * width + x) * dims;
          for (int64_t r = 0; r < dims; ++r) {
            double v = 0;
            for (int64_t k = 0; k <= dims; ++k) v += static_cast<double>(m[r * (dims + 1) + k]) * base[k];
            out[r] = static_cast<T>(v);
          }
        }
      }
    };
    ParallelFor(call, y.dims[0] * depth * height, 1, body);
    return KILN_KERR_OK;
  }
};

// Bilinear sample of a [H, W] plane at (y, x); corners outside the plane read 0.
template <typename T>
KILN_ALWAYS_INLINE double BilinearZero(const T* plane, int64_t height, int64_t width, double y, double x) {
  if (y <= -1 || y >= height || x <= -1 || x >= width) return 0;
  const double y0 = floor(y), x0 = floor(x), ly = y - y0, lx = x - x0;
  const int64_t iy = static_cast<int64_t>(y0), ix = static_cast<int64_t>(x0);
  auto at = [&](int64_t r, int64_t c) {
    return r < 0 || r >= height || c < 0 || c >= width ? 0.0 : static_cast<double>(plane[r * width + c]);
  };
  return (1 - ly) * ((1 - lx) * at(iy, ix) + lx * at(iy, ix + 1)) +
         ly * ((1 - lx) * at(iy + 1, ix) + lx * at(iy + 1, ix + 1));
}

// X [N, C, H, W], W [OC, C / group, KH, KW], offset [N, OG * KH * KW * 2, OH, OW] of
// (dy, dx) pairs, B [OC], mask [N, OG * KH * KW, OH, OW] -> [N, OC, OH, OW].
struct DeformConv {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_spatial_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    const kiln_ktensor& wt = call->inputs[1];
    const kiln_ktensor& y = call->outputs[0];
    const kiln_window& w = params.window;
    if (x.rank != 4 || w.rank != 2 || params.group < 1 || params.offset_group < 1) return KILN_KERR_UNSUPPORTED;
    if (wt.rank != 4 || call->inputs[2].rank != 4) return KILN_KERR_SHAPE;
    const int64_t channels = x.dims[1], height = x.dims[2], width = x.dims[3];
    const int64_t out_c = y.dims[1], out_h = y.dims[2], out_w = y.dims[3], kh = wt.dims[2], kw = wt.dims[3];
    const int64_t group_in = wt.dims[1], group_out = out_c / params.group, taps = kh * kw;
    const int64_t offset_channels = channels / params.offset_group, positions = out_h * out_w;
    // With run-time shapes no type inference has checked the operands: the kernel does.
    const kiln_ktensor& off = call->inputs[2];
    if (group_in * params.group != channels || out_c % params.group != 0 || channels % params.offset_group != 0 ||
        off.rank != 4 || off.dims[0] != x.dims[0] || off.dims[1] != params.offset_group * taps * 2 ||
        off.dims[2] != out_h || off.dims[3] != out_w) {
      return KILN_KERR_SHAPE;
    }
    const T* px = InputData<T>(call, 0);
    const T* pw = InputData<T>(call, 1);
    const T* poff = InputData<T>(call, 2);
    const T* pbias = call->num_inputs > 3 && call->inputs[3].data != nullptr ? InputData<T>(call, 3) : nullptr;
    const T* pmask = call->num_inputs > 4 && call->inputs[4].data != nullptr ? InputData<T>(call, 4) : nullptr;
    T* py = OutputData<T>(call);
    if ((pbias && Numel(call->inputs[3]) != out_c) ||
        (pmask && Numel(call->inputs[4]) != x.dims[0] * params.offset_group * taps * positions)) {
      return KILN_KERR_SHAPE;
    }
    auto body = [=, &w](int64_t begin, int64_t end) {  // one (image, output channel) plane at a time
      for (int64_t no = begin; no < end; ++no) {
        const int64_t n = no / out_c, o = no % out_c, g = o / group_out;
        T* out = py + no * positions;
        for (int64_t i = 0; i < positions; ++i) out[i] = static_cast<T>(pbias ? pbias[o] : 0);
        for (int64_t ci = 0; ci < group_in; ++ci) {
          const int64_t c = g * group_in + ci, og = c / offset_channels;
          const T* plane = px + (n * channels + c) * height * width;
          for (int64_t t = 0; t < taps; ++t) {
            const double weight = static_cast<double>(pw[(o * group_in + ci) * taps + t]);
            const T* dy = poff + ((n * params.offset_group + og) * taps * 2 + 2 * t) * positions;
            const T* dx = dy + positions;
            const T* m = pmask ? pmask + ((n * params.offset_group + og) * taps + t) * positions : nullptr;
            for (int64_t oh = 0; oh < out_h; ++oh) {
              for (int64_t ow = 0; ow < out_w; ++ow) {
                const int64_t i = oh * out_w + ow;
                const double sy = oh * w.strides[0] - w.pads_begin[0] + t / kw * w.dilations[0] + dy[i];
                const double sx = ow * w.strides[1] - w.pads_begin[1] + t % kw * w.dilations[1] + dx[i];
                const double v = BilinearZero(plane, height, width, sy, sx) * (m ? static_cast<double>(m[i]) : 1.0);
                out[i] = static_cast<T>(out[i] + weight * v);
              }
            }
          }
        }
      }
    };
    ParallelFor(call, y.dims[0] * out_c, 1, body);
    return KILN_KERR_OK;
  }
};

int64_t* OutDims(const kiln_kcall* call) { return const_cast<int64_t*>(call->outputs[0].dims); }

}  // namespace

// Shape functions (kiln/kernels/shape.h) of the ops above whose output dims are not a
// pooling window's: negative (unknown) dims pass through, as the other rules do.

// MaxRoiPool: [R, C, ints[0], ints[1]] (R from rois, C from X, the pooled shape).
KILN_KERNEL(shape_max_roi_pool) {
  KILN_PARAMS(kiln_shape_params, p, call);
  if (call->inputs[0].rank != 4 || call->inputs[1].rank != 2) return KILN_KERR_SHAPE;
  int64_t* y = OutDims(call);
  y[0] = call->inputs[1].dims[0];
  y[1] = call->inputs[0].dims[1];
  y[2] = p.ints[0];
  y[3] = p.ints[1];
  return KILN_KERR_OK;
}

// Col2Im: [N, C / ints[0] (the block's taps), ints[1], ...] (the image shape).
KILN_KERNEL(shape_col2im) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  int64_t* y = OutDims(call);
  if (x.rank != 3 || (x.dims[1] >= 0 && x.dims[1] % p.ints[0] != 0)) return KILN_KERR_SHAPE;
  y[0] = x.dims[0];
  y[1] = x.dims[1] < 0 ? -1 : x.dims[1] / p.ints[0];
  for (int32_t i = 2; i < call->outputs[0].rank; ++i) y[i] = p.ints[i - 1];
  return KILN_KERR_OK;
}

// AffineGrid: [N, (D,) H, W, 2 or 3] from size's data, N from theta; -1 while size is unknown.
KILN_KERNEL(shape_affine_grid) {
  const kiln_ktensor& theta = call->inputs[0];
  const kiln_ktensor& size = call->inputs[1];
  const int32_t rank = call->outputs[0].rank;  // spatial dims + 2
  if (theta.rank != 3) return KILN_KERR_SHAPE;
  int64_t* y = OutDims(call);
  y[0] = theta.dims[0];
  y[rank - 1] = rank - 2;
  for (int32_t i = 1; i + 1 < rank; ++i) {
    y[i] = size.data == nullptr ? -1 : LoadAsInt64(size.data, size.dtype, i + 1);
    if (size.data != nullptr && y[i] < 0) return KILN_KERR_SHAPE;
  }
  if (size.data != nullptr && theta.dims[0] >= 0 && LoadAsInt64(size.data, size.dtype, 0) != theta.dims[0]) {
    return KILN_KERR_SHAPE;
  }
  return KILN_KERR_OK;
}

KILN_FLOAT_KERNEL(global_lp_pool, GlobalLpPool, inputs[0].dtype)
KILN_FLOAT_KERNEL(lp_normalize, LpNormalize, inputs[0].dtype)
KILN_FLOAT_KERNEL(max_roi_pool, MaxRoiPool, inputs[0].dtype)
KILN_FLOAT_KERNEL(col2im, Col2Im, inputs[0].dtype)
KILN_FLOAT_KERNEL(affine_grid, AffineGrid, inputs[0].dtype)
KILN_FLOAT_KERNEL(deform_conv, DeformConv, inputs[0].dtype)
