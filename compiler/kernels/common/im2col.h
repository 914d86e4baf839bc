// The implicit im2col of a convolution, shared by the f32 implicit GEMM (conv/conv.cc) and
// the bf16 one (bf16/bf16.cc): where each output position's window starts, and one packed
// row of the im2col matrix (one tap of one input channel plane).
#pragma once

#include "gemm_core.h"
#include "kernel_window.h"

namespace kiln_kernels {

// Where each output position of a chunk starts reading: its output column, and the input
// coordinates of the window's first tap. (Divided once, then stepped: three divisions per
// position cost a quarter of a stride-2 stem conv's packing time.)
struct WindowStarts {
  int64_t ow0[gemm::kMaxNc], d0[gemm::kMaxNc], h0[gemm::kMaxNc], w0[gemm::kMaxNc];

  __attribute__((always_inline)) void Fill(const Window& w, int64_t n0, int64_t count) {
    int64_t ow = n0 % w.out[2], oh = n0 / w.out[2] % w.out[1], od = n0 / (w.out[2] * w.out[1]);
    for (int64_t j = 0; j < count; ++j) {
      ow0[j] = ow;
      d0[j] = od * w.stride[0] - w.pad[0];
      h0[j] = oh * w.stride[1] - w.pad[1];
      w0[j] = ow * w.stride[2] - w.pad[2];
      if (++ow == w.out[2]) {
        ow = 0;
        if (++oh == w.out[1]) {
          oh = 0;
          ++od;
        }
      }
    }
  }
};

// One row of the implicit im2col matrix: tap (dd, dh, dw) of input channel plane xin for
// the chunk's nb output positions. Positions of one output row read one input row: a
// strided (for stride 1, contiguous) run, zero outside; `scale` (null: none) multiplies
// the image, not its zero padding. Always inlined into ImplicitGemm's packing.
// Copies n floats (a vector at a time; runs are a few hundred floats).
__attribute__((always_inline)) inline void CopyRun(const float* src, int64_t n, float* dst) {
  int64_t q = 0;
  for (; q + 16 <= n; q += 16) {
    v16f v;
    memcpy(&v, src + q, sizeof(v16f));
    memcpy(dst + q, &v, sizeof(v16f));
  }
  if (q + 8 <= n) {
    v8f v;
    KILN_LOAD8(v, src + q);
    KILN_STORE8(dst + q, v);
    q += 8;
  }
#pragma clang loop vectorize(disable) unroll(disable)
  for (; q < n; ++q) dst[q] = src[q];
}

// PackTapRow where the plane keeps its shape (stride 1 across rows and columns, output
// width = input width): within one output plane, position p reads p + off of the input
// plane, so the chunk's part in each plane is one contiguous copy, then the rows and
// columns that fall in the padding are zeroed. A copy per output row (28 floats for
// R3D-18's 28x28 maps) cost more than the product's own packing of the block.
__attribute__((always_inline)) inline void PackTapRowSameShape(const Window& w, const WindowStarts& starts,
                                                               const float* xin, int64_t dd, int64_t dh, int64_t dw,
                                                               int64_t nb, float* out) {
  const int64_t W = w.in[2], plane = w.out[1] * W, in_plane = w.in[1] * W;
  const int64_t dr = dh - w.pad[1], dc = dw - w.pad[2], off = dr * W + dc;
  // Rows [r_lo, r_hi) and columns [c_lo, c_hi) of the output plane read inside the input.
  const int64_t r_lo = dr < 0 ? -dr : 0, r_hi = w.in[1] - dr < w.out[1] ? w.in[1] - dr : w.out[1];
  const int64_t c_lo = dc < 0 ? -dc : 0, c_hi = dc > 0 ? W - dc : W;
  int64_t od = (starts.d0[0] + w.pad[0]) / w.stride[0];
  int64_t at = (starts.h0[0] + w.pad[1]) * W + starts.w0[0] + w.pad[2];  // position in its plane
  for (int64_t j = 0; j < nb;) {
    const int64_t seg = plane - at < nb - j ? plane - at : nb - j;
    const int64_t id = od * w.stride[0] - w.pad[0] + dd;
    float* o = out + j - at;  // o[p]: position p of this plane
    int64_t a = at > r_lo * W ? at : r_lo * W, b = at + seg < r_hi * W ? at + seg : r_hi * W;
    if (id < 0 || id >= w.in[0] || a >= b) {
      for (int64_t q = at; q < at + seg; ++q) o[q] = 0.f;
    } else {
      for (int64_t q = at; q < a; ++q) o[q] = 0.f;
      for (int64_t q = b; q < at + seg; ++q) o[q] = 0.f;
      const float* src = xin + id * in_plane + off;  // src[p]: what position p reads
      // The first and last positions may read one column outside the plane (zeroed below).
      const int64_t ca = a + off < 0 ? -off : a, cb = b + off > in_plane ? in_plane - off : b;
      if (cb > ca) CopyRun(src + ca, cb - ca, o + ca);
      for (int64_t row = a / W; row * W < b; ++row) {
        for (int64_t c = 0; c < c_lo; ++c) {
          if (row * W + c >= a && row * W + c < b) o[row * W + c] = 0.f;
        }
        for (int64_t c = c_hi; c < W; ++c) {
          if (row * W + c >= a && row * W + c < b) o[row * W + c] = 0.f;
        }
      }
    }
    j += seg;
    at = 0;
    ++od;
  }
}

__attribute__((always_inline)) inline void PackTapRow(const Window& w, const WindowStarts& starts, const float* xin,
                                                      int64_t dd, int64_t dh, int64_t dw, const float* scale,
                                                      int64_t nb, float* out) {
  const int64_t sw = w.stride[2];
  if (scale == nullptr && sw == 1 && w.stride[1] == 1 && w.out[2] == w.in[2]) {
    return PackTapRowSameShape(w, starts, xin, dd, dh, dw, nb, out);
  }
  for (int64_t j = 0; j < nb;) {
    const int64_t run = w.out[2] - starts.ow0[j] < nb - j ? w.out[2] - starts.ow0[j] : nb - j;
    const int64_t id = starts.d0[j] + dd, ih = starts.h0[j] + dh;
    float* o = out + j;
    if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
      for (int64_t q = 0; q < run; ++q) o[q] = 0.f;
    } else {
      const float* src = xin + (id * w.in[1] + ih) * w.in[2];
      const int64_t iw0 = starts.w0[j] + dw;
      // Valid q: 0 <= iw0 + q*sw < in width.
      int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
      int64_t hi = w.in[2] - iw0 <= 0 ? 0 : (w.in[2] - iw0 + sw - 1) / sw;
      if (lo > run) lo = run;
      if (hi > run) hi = run;
      if (hi < lo) hi = lo;
      for (int64_t q = 0; q < lo; ++q) o[q] = 0.f;
      if (sw == 1) {
        CopyRun(src + iw0 + lo, hi - lo, o + lo);
      } else if (sw == 2) {
        // A constant stride as explicit vectors: two loads of eight and a shuffle of the
        // even lanes per eight outputs. (A runtime stride gathers element by element,
        // which costs as much as the product for stride-2 layers with few output
        // channels, CNN stems; left to the vectorizer, runs shorter than 68 stayed scalar,
        // and rows of 112 split by 256-wide jobs often are.) A vector step reads 16
        // floats, so it runs only while they lie in the row.
        const float* s2 = src + iw0;
        int64_t q = lo;
        for (; q + 8 <= hi && iw0 + 2 * q + 16 <= w.in[2]; q += 8) {
          gemm::v8f a, b;
          KILN_LOAD8(a, s2 + 2 * q);
          KILN_LOAD8(b, s2 + 2 * q + 8);
          const gemm::v8f even = EvenLanes(a, b);
          KILN_STORE8(o + q, even);
        }
        for (; q < hi; ++q) o[q] = s2[2 * q];
      } else {
        for (int64_t q = lo; q < hi; ++q) o[q] = src[iw0 + q * sw];
      }
      for (int64_t q = hi; q < run; ++q) o[q] = 0.f;
      if (scale != nullptr) {
        for (int64_t q = lo; q < hi; ++q) o[q] *= *scale;
      }
    }
    j += run;
  }
}

}  // namespace kiln_kernels
