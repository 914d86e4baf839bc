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
__attribute__((always_inline)) inline void PackTapRow(const Window& w, const WindowStarts& starts, const float* xin,
                                                      int64_t dd, int64_t dh, int64_t dw, const float* scale,
                                                      int64_t nb, float* out) {
  const int64_t sw = w.stride[2];
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
        memcpy(o + lo, src + iw0 + lo, sizeof(float) * (hi - lo));
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
          const gemm::v8f even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
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
