// The implicit im2col of a convolution, shared by the f32 implicit GEMM (conv/conv.cc) and
// the bf16 one (bf16/bf16.cc): where each output position's window starts, and one packed
// row of the im2col matrix (one tap of one input channel plane).
#pragma once

#include "gemm_core.h"
#include "kernel_window.h"

#ifndef KILN_REFERENCE_KERNELS
#include <immintrin.h>
#endif

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

// The most kernel columns and 16-lane pieces of one run StageMasked handles.
constexpr int64_t kMaskedKernelCols = 8;
constexpr int64_t kMaskedPieces = (gemm::kMaxNc + 15) / 16;

// Whether a windowed conv's im2col rows of nb positions (not a 1x1's) go by StageMasked:
// on AVX-512 targets, for a column stride of 1 or 2 and at most kMaskedKernelCols kernel
// columns, but not where PackTapRow copies whole planes (stride 1, the same width in and
// out, no scale).
inline bool MaskedRows(const Window& w, const float* scale, int64_t nb) {
  const bool same_shape = scale == nullptr && w.stride[2] == 1 && w.stride[1] == 1 && w.out[2] == w.in[2];
  return WideVectors() && (w.stride[2] == 1 || w.stride[2] == 2) && !same_shape && w.kernel[2] <= kMaskedKernelCols &&
         nb <= gemm::kMaxNc;
}

#ifndef KILN_REFERENCE_KERNELS
// The im2col rows of a conv with a column stride sw of 1 or 2, read with AVX-512 masks: output q
// of a run (the chunk's positions in one output row) reads column w0 + kw + q * sw of its input
// row, and a lane whose column lies outside the row (the padding) is a masked-off lane of
// the load, so 16 outputs are one masked load (two and a permute of the even lanes at
// stride 2). PackTapRow's scalar edges and tails cost 2.6 cycles per element on ResNet-50's
// stride-2 3x3 convs (14-wide rows), a third of their time. Runs go outermost: a run's masks
// for each kernel column are worked out once for all its K rows.
struct MaskedRun {
  int64_t j, run, pieces;  // the run's first position in the chunk, its length, 16-lane pieces
  __mmask16 tail;          // the last piece's lanes
  // masks[kw][q]: lanes m < 32 of the columns base + m inside the row, base the column
  // lane 0 of piece q reads.
  uint32_t masks[kMaskedKernelCols][kMaskedPieces];

  __attribute__((always_inline)) MaskedRun(const Window& w, const WindowStarts& starts, int64_t j0, int64_t nb)
      : j(j0) {
    run = w.out[2] - starts.ow0[j] < nb - j ? w.out[2] - starts.ow0[j] : nb - j;
    pieces = (run + 15) / 16;
    tail = static_cast<__mmask16>((1u << (run - (pieces - 1) * 16)) - 1);
    for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
      for (int64_t q = 0; q < pieces; ++q) {
        const int64_t base = starts.w0[j] + kw * w.dilation[2] + q * 16 * w.stride[2];
        const int64_t lo = base < 0 ? (-base < 32 ? -base : 32) : 0;
        const int64_t hi = w.in[2] - base <= 0 ? 0 : (w.in[2] - base < 32 ? w.in[2] - base : 32);
        masks[kw][q] = hi > lo ? static_cast<uint32_t>(((uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1)) : 0u;
      }
    }
  }
  __mmask16 Lanes(int64_t q) const { return q + 1 < pieces ? static_cast<__mmask16>(0xffff) : tail; }
};

// One im2col row (input channel ic, tap kd, kh, kw), stepped through K in order: Source
// gives where a run's columns start in it (null: the row lies in the padding); the input
// scale, if any, is the caller's scale[ic].
struct MaskedTap {
  int64_t ic, kd, kh, kw;

  MaskedTap(const Window& w, int64_t k) {
    const int64_t kernel_size = w.kernel_size(), r = k % kernel_size;
    ic = k / kernel_size, kd = r / (w.kernel[1] * w.kernel[2]), kh = r / w.kernel[2] % w.kernel[1];
    kw = r % w.kernel[2];
  }
  __attribute__((always_inline)) void Next(const Window& w) {
    if (++kw < w.kernel[2]) return;
    kw = 0;
    if (++kh < w.kernel[1]) return;
    kh = 0;
    if (++kd == w.kernel[0]) kd = 0, ++ic;
  }
  __attribute__((always_inline)) const float* Source(const Window& w, const WindowStarts& starts, const float* x,
                                                     int64_t j) const {
    const int64_t id = starts.d0[j] + kd * w.dilation[0], ih = starts.h0[j] + kh * w.dilation[1];
    if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) return nullptr;
    return x + ((ic * w.in[0] + id) * w.in[1] + ih) * w.in[2] + starts.w0[j] + kw * w.dilation[2];
  }
};

// Piece q of a tap's run (src from MaskedTap::Source, valid its masks[kw][q]), times the
// scale (null: none).
__attribute__((target("avx512f"), always_inline)) inline __m512 MaskedPiece(const float* src, uint32_t valid, int64_t q,
                                                                            int64_t sw, const float* scale) {
  if (src == nullptr) return _mm512_setzero_ps();
  __m512 v;
  if (sw == 1) {
    v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(valid), src + q * 16);
  } else {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(valid), src + q * 32);
    const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(valid >> 16), src + q * 32 + 16);
    v = _mm512_permutex2var_ps(lo, even, hi);
  }
  return scale != nullptr ? _mm512_mul_ps(v, _mm512_set1_ps(*scale)) : v;
}

// Rows k0..k0+kb of the implicit im2col matrix at the nb positions of `starts` into
// staged[k][ld] (nb used), with MaskedRun's loads: PackTapRow for kb rows at once.
__attribute__((target("avx512f"), noinline)) inline void StageMasked(const Window& w, const WindowStarts& starts,
                                                                     const float* x, const float* scale, int64_t k0,
                                                                     int64_t kb, int64_t nb, float* staged,
                                                                     int64_t ld) {
  for (int64_t j = 0; j < nb;) {
    const MaskedRun r(w, starts, j, nb);
    MaskedTap tap(w, k0);
    for (int64_t k = 0; k < kb; ++k, tap.Next(w)) {
      const float* src = tap.Source(w, starts, x, j);
      const float* s = scale != nullptr ? scale + tap.ic : nullptr;
      for (int64_t q = 0; q < r.pieces; ++q) {
        _mm512_mask_storeu_ps(staged + k * ld + j + q * 16, r.Lanes(q),
                              MaskedPiece(src, r.masks[tap.kw][q], q, w.stride[2], s));
      }
    }
    j += r.run;
  }
}
#else
inline void StageMasked(const Window&, const WindowStarts&, const float*, const float*, int64_t, int64_t, int64_t,
                        float*, int64_t) {}
#endif

}  // namespace kiln_kernels
