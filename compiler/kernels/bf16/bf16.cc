// The bf16 products (`--precision bf16`): MatMul/Gemm with a constant B and Conv as an
// implicit GEMM, both operands rounded to bf16 (nearest even), products summed in f32 by
// vdpbf16ps (AVX512-BF16: two bf16 products added into each f32 lane). The weights come
// pre-packed in bf16 at compile time (ops/bf16_ops.cc); activations are rounded while they
// are packed. Lowering calls these kernels only for targets with avx512bf16; elsewhere the
// kernels answer KILN_KERR_UNSUPPORTED (and their vector code folds away: Bf16Dot()).
//
// Operands travel as 32-bit words, each a pair of bf16 for k = 2p (low half) and 2p + 1
// (high half), the form vdpbf16ps reads. A is in panels of kRows rows, [K/2][kRows] words
// per panel; B in panels of kCols columns, [K/2][kCols] words per panel; both zero past
// the edges (an odd K's last pair has a zero high half). The micro-kernel keeps a 12 x 32
// tile of C in 24 registers and reads one contiguous stream of each.
#include <cstring>

#include "gemm_core.h"
#include "im2col.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kernel_window.h"
#include "kiln/kernels/conv.h"
#include "kiln/kernels/gemm.h"
#include "unary_math.h"
#include "winograd_core.h"

#ifndef KILN_REFERENCE_KERNELS
#include <immintrin.h>
#endif

using namespace kiln_kernels;

#ifndef KILN_REFERENCE_KERNELS
// Whether the target has vdpbf16ps; codegen defines kiln_bf16_dot per target as it does
// kiln_int8_dot, so on other targets the vector code below is dead and never selected.
extern "C" const int32_t kiln_bf16_dot;
#endif

namespace {

constexpr int kRows = 12;      // rows of C per micro-kernel and per A panel
constexpr int64_t kCols = 32;  // columns of C per micro-kernel and per B panel (two 16-lane halves)
// K block (elements, even): one B panel's block (kKc/2 x 32 words, 16 KiB) and one A panel's
// (6 KiB) stay in Zen 4's 32 KiB L1 together (at 512 the B block alone would fill it).
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 240;  // rows of A per block (a multiple of kRows)
constexpr int64_t kMaxJobCols = 256;

// f32 -> bf16 bits, rounded to nearest even; a NaN stays a (quiet) NaN.
inline uint32_t RoundedHigh(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
// The word of the pair (lo: k even, hi: k + 1).
inline uint32_t PairWord(float lo, float hi) { return RoundedHigh(hi) | (RoundedHigh(lo) >> 16); }

// PairWord of the four pairs of 8 floats, (v[0], v[1]) .. (v[6], v[7]), as vector operations
// on any target (bf16 Winograd's input transform rounded them one by one: a third of that
// kernel's own time).
inline void PairWords8(const gemm::v8f& values, uint32_t (&words)[4]) {
  typedef uint32_t v8u __attribute__((vector_size(32)));
  typedef uint32_t v4u __attribute__((vector_size(16)));
  v8u u;
  memcpy(&u, &values, sizeof(u));
  const v8u nan = (v8u)((u & 0x7fffffffu) > 0x7f800000u);  // all ones where NaN
  const v8u rounded = (nan & (u | 0x00400000u)) | (~nan & (u + 0x7fffu + ((u >> 16) & 1u)));
  const v8u high = rounded & 0xffff0000u;
  const v4u pairs =
      __builtin_shufflevector(high, high, 1, 3, 5, 7) | (__builtin_shufflevector(high, high, 0, 2, 4, 6) >> 16);
  memcpy(words, &pairs, sizeof(words));
}

// What a full tile does after its last K block, in registers: add a per-row bias (a Conv's)
// or a per-column bias (a MatMul's), a residual laid out as C, then ReLU or Clip (as
// gemm::Epilogue). Pointers are at the tile's first row and column; null: none.
struct TileEpilogue {
  const float* row_bias = nullptr;
  const float* col_bias = nullptr;
  const float* residual = nullptr;
  int64_t residual_ld = 0;
  int32_t kind = gemm::Epilogue::kNone;
  float lo = 0.f, hi = 0.f;
};

#ifndef KILN_REFERENCE_KERNELS
inline bool Bf16Dot() { return kiln_bf16_dot != 0; }

// acc0/acc1 (+)= A panel · B panel over kp pairs (Tile's loop); kPrefetch: b_next's pair p
// (two cache lines, the next B block) on the way.
template <int MR, bool kPrefetch>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline void TileSums(
    int64_t kp, const uint32_t* a, const uint32_t* b, const uint32_t* b_next, __m512 (&acc0)[MR], __m512 (&acc1)[MR]) {
  for (int64_t p = 0; p < kp; ++p) {
    if (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(b_next + p * kCols), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b_next + p * kCols + 16), _MM_HINT_T0);
    }
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kCols);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kCols + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[p * kRows + i]));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
  }
}

// C[0..MR, 0..32) (+)= A panel · B panel over kp pairs: A's pair (i, p) is a[p * kRows + i]
// (one stream at constant offsets: reading kRows row streams instead, as MatMul's A lies,
// measured 25 % slower on 128x768x3072), B's columns q at b[p * kCols + q].
template <int MR>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline void Tile(int64_t kp, const uint32_t* a,
                                                                              const uint32_t* b, float* c, int64_t ldc,
                                                                              bool accumulate, const TileEpilogue* ep,
                                                                              const uint32_t* b_next) {
  __m512 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc1[i] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  if (b_next != nullptr) {
    TileSums<MR, true>(kp, a, b, b_next, acc0, acc1);
  } else {
    TileSums<MR, false>(kp, a, b, nullptr, acc0, acc1);
  }
  if (ep != nullptr) {
    // The operands in locals and one loop per step, each unrolled over MR: with the three
    // tests inside one loop the compiler kept the 24 sums on the stack, and Zen 4 cannot
    // forward a 512-bit store (two 256-bit halves) to the next load of it: the residual
    // 1x1 convs of ResNet-50's layer1 spent a fifth of their time there.
    const TileEpilogue e = *ep;
    if (e.row_bias != nullptr) {
      for (int i = 0; i < MR; ++i) {
        const __m512 bias = _mm512_set1_ps(e.row_bias[i]);
        acc0[i] = _mm512_add_ps(acc0[i], bias);
        acc1[i] = _mm512_add_ps(acc1[i], bias);
      }
    }
    if (e.col_bias != nullptr) {
      const __m512 bias0 = _mm512_loadu_ps(e.col_bias), bias1 = _mm512_loadu_ps(e.col_bias + 16);
      for (int i = 0; i < MR; ++i) {
        acc0[i] = _mm512_add_ps(acc0[i], bias0);
        acc1[i] = _mm512_add_ps(acc1[i], bias1);
      }
    }
    if (e.residual != nullptr) {
      for (int i = 0; i < MR; ++i) {
        acc0[i] = _mm512_add_ps(acc0[i], _mm512_loadu_ps(e.residual + i * e.residual_ld));
        acc1[i] = _mm512_add_ps(acc1[i], _mm512_loadu_ps(e.residual + i * e.residual_ld + 16));
      }
    }
    // vmaxps/vminps return the second operand when either is NaN: a NaN sum becomes 0 under
    // ReLU and stays NaN under Clip, as gemm::Epilogue's comparisons have it.
    if (e.kind == gemm::Epilogue::kRelu) {
      const __m512 zero = _mm512_setzero_ps();
      for (int i = 0; i < MR; ++i) {
        acc0[i] = _mm512_max_ps(acc0[i], zero);
        acc1[i] = _mm512_max_ps(acc1[i], zero);
      }
    } else if (e.kind == gemm::Epilogue::kClip) {
      const __m512 lo = _mm512_set1_ps(e.lo), hi = _mm512_set1_ps(e.hi);
      for (int i = 0; i < MR; ++i) {
        acc0[i] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc0[i]));
        acc1[i] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc1[i]));
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

// Not inlined: one copy per artifact for every bf16 node.
// b_next (null: none): a B block of kp pairs to prefetch while this one runs.
__attribute__((target("avx512f,avx512bf16"), noinline)) void MicroKernel(int rows, int64_t kp, const uint32_t* a,
                                                                         const uint32_t* b, float* c, int64_t ldc,
                                                                         bool accumulate, const TileEpilogue* ep,
                                                                         const uint32_t* b_next) {
  switch (rows) {
#define KILN_BF16_CASE(R) \
  case R: Tile<R>(kp, a, b, c, ldc, accumulate, ep, b_next); break
    KILN_BF16_CASE(12);
    KILN_BF16_CASE(11);
    KILN_BF16_CASE(10);
    KILN_BF16_CASE(9);
    KILN_BF16_CASE(8);
    KILN_BF16_CASE(7);
    KILN_BF16_CASE(6);
    KILN_BF16_CASE(5);
    KILN_BF16_CASE(4);
    KILN_BF16_CASE(3);
    KILN_BF16_CASE(2);
    default: Tile<1>(kp, a, b, c, ldc, accumulate, ep, b_next); break;
#undef KILN_BF16_CASE
  }
}

// RoundedHigh of 16 values: integer rounding, bit-identical to the weights' packing at
// compile time, subnormals included.
__attribute__((target("avx512f"), always_inline)) inline __m512i RoundedHigh16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                           _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
  return _mm512_and_si512(_mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000)),
                          _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
}

// 16 pair words of lo and hi, as PairWord.
__attribute__((target("avx512f"), always_inline)) inline __m512i PairWords16(__m512 lo, __m512 hi) {
  return _mm512_or_si512(RoundedHigh16(hi), _mm512_srli_epi32(RoundedHigh16(lo), 16));
}

// PackColumnsBf16 as 12-row panels, 16 columns at a time: X^T's A panels (RunPositionRows).
__attribute__((target("avx512f"), noinline)) void PackPositionPanels(const float* rows, int64_t ld, int64_t kb,
                                                                     int64_t nb, uint32_t* buf, int64_t* stride) {
  const int64_t kp = (kb + 1) / 2;
  *stride = kp * kRows;
  for (int64_t p = 0; p < kp; ++p) {  // rows read start to end, as PackColumnsBf16
    for (int64_t t = 0; t * kRows < nb; ++t) {
      const int64_t j0 = t * kRows, width = nb - j0 < kRows ? nb - j0 : kRows;
      const __mmask16 load = static_cast<__mmask16>((1u << width) - 1), store = (1u << kRows) - 1;
      const float* lo = rows + 2 * p * ld + j0;
      const __m512 l = _mm512_maskz_loadu_ps(load, lo);
      const __m512 h = 2 * p + 1 < kb ? _mm512_maskz_loadu_ps(load, lo + ld) : _mm512_setzero_ps();
      _mm512_mask_storeu_epi32(buf + t * kp * kRows + p * kRows, store, PairWords16(l, h));
    }
  }
}

// out[c] = column c of the 16 x 16 block of 32-bit elements in r[0..16): unpacks within
// 128-bit lanes, then lane shuffles.
__attribute__((target("avx512f"), always_inline)) inline void Transpose16x16(const __m512 (&r)[16], __m512 (&out)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3]
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // u[i + c]: rows i..i+3 of column 4 L + c in lane L
    for (int c = 0; c < 2; ++c) {
      const __m512d a = _mm512_castps_pd(t[i + c]), b = _mm512_castps_pd(t[i + c + 2]);
      u[i + 2 * c] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      u[i + 2 * c + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  for (int c = 0; c < 4; ++c) {  // column c + 4 L gathers lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    out[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    out[c + 8] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    out[c + 4] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    out[c + 12] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

// The bf16 bits of 16 values, rounded as RoundedHigh, in 16-bit lanes.
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m256i HighHalves16(__m512 v) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(RoundedHigh16(v), 16));
}

// A[i0..i1, k0..k0+kb) of a row-major f32 A (row stride lda) rounded to pair words, in
// panels of kRows rows ([kp][kRows] words, zero past row i1 and past K): the micro-kernel
// then reads one stream with constant offsets rather than kRows row streams. Per row, 32
// floats rounded and their high halves packed in order, which is 16 pair words; then 16 x
// 16 transposed, so each pair's 12 rows are one store (rounding each value alone, with its
// NaN branch, took a tenth of BERT-base's bf16 time).
__attribute__((target("avx512f,avx512bw"), noinline)) void PackRowsAvx512(const float* a, int64_t lda, int64_t k0,
                                                                          int64_t kb, int64_t i0, int64_t i1,
                                                                          uint32_t* buf, int64_t* stride) {
  const int64_t kp = (kb + 1) / 2;
  *stride = kp * kRows;
  for (int64_t i = i0; i < i1; i += kRows) {
    uint32_t* panel = buf + (i - i0) / kRows * kp * kRows;
    const int rows = static_cast<int>(i1 - i < kRows ? i1 - i : kRows);
    for (int64_t p0 = 0; p0 < kp; p0 += 16) {
      const int64_t left = kb - 2 * p0;  // values of the row from pair p0 on
      const __mmask16 m0 = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
      const __mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? static_cast<__mmask16>((1u << (left - 16)) - 1) : 0;
      __m512 r[16], out[16];
      for (int q = 0; q < 16; ++q) {
        if (q >= rows) {
          r[q] = _mm512_setzero_ps();  // rows past i1: zero words, so no NaN meets a zero
          continue;
        }
        const float* src = a + (i + q) * lda + k0 + 2 * p0;
        const __m256i lo = HighHalves16(_mm512_maskz_loadu_ps(m0, src));
        const __m256i hi = HighHalves16(_mm512_maskz_loadu_ps(m1, src + 16));
        r[q] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
      }
      Transpose16x16(r, out);
      const int64_t pairs = kp - p0 < 16 ? kp - p0 : 16;
      for (int64_t p = 0; p < pairs; ++p) {
        _mm512_mask_storeu_ps(panel + (p0 + p) * kRows, static_cast<__mmask16>((1u << kRows) - 1), out[p]);
      }
    }
  }
}

// Y[q][r] = ep(C^T[r][q]) for r < rows (<= 16), q < cols: C^T's rows (positions) become Y's
// columns, 16 x 16 at a time transposed in registers (unpacks, then 128-bit lane shuffles).
// ep's bias is per column q of C^T (Y's row); its residual is laid out as Y (row stride ldy).
__attribute__((target("avx512f"), noinline)) void StoreTransposed(const float* ct, int64_t ldc, int rows, int64_t cols,
                                                                  float* y, int64_t ldy, const gemm::Epilogue& ep) {
  const __mmask16 row_mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int64_t q0 = 0; q0 < cols; q0 += 16) {
    const int64_t n = cols - q0 < 16 ? cols - q0 : 16;
    const __mmask16 col_mask = static_cast<__mmask16>((1u << n) - 1);
    __m512 r[16], out[16];
    for (int i = 0; i < 16; ++i)
      r[i] = i < rows ? _mm512_maskz_loadu_ps(col_mask, ct + i * ldc + q0) : _mm512_setzero_ps();
    Transpose16x16(r, out);
    for (int64_t q = 0; q < n; ++q) {
      __m512 v = out[q];
      float* row = y + (q0 + q) * ldy;
      if (ep.row_bias != nullptr) v = _mm512_add_ps(v, _mm512_set1_ps(ep.row_bias[q0 + q]));
      if (ep.residual != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(row_mask, ep.residual + (q0 + q) * ldy));
      // vmaxps/vminps return the second operand when either is NaN, as Tile's epilogue.
      if (ep.kind == gemm::Epilogue::kRelu) v = _mm512_max_ps(v, _mm512_setzero_ps());
      if (ep.kind == gemm::Epilogue::kClip) {
        v = _mm512_min_ps(_mm512_set1_ps(ep.hi), _mm512_max_ps(_mm512_set1_ps(ep.lo), v));
      }
      _mm512_mask_storeu_ps(row, row_mask, v);
    }
  }
}

// The same rows rounded to bf16 pair words and laid out as PackColumnsBf16 lays them
// ([nb / 32 panels][kp][32], zero past nb), two K rows at a time, without staging them in
// f32 first (that buffer, 256 KiB per K block, went to L2 and back: the staging and the
// packing took 37 % of the bf16 ResNet-50 stem's time).
__attribute__((target("avx512f"), noinline)) void PackTapPanels(const Window& w, const WindowStarts& starts,
                                                                const float* x, const float* scale, int64_t k0,
                                                                int64_t kb, int64_t nb, uint32_t* buf,
                                                                int64_t* stride) {
  const int64_t kp = (kb + 1) / 2, panel = kp * kCols;
  *stride = panel;
  if (nb % kCols != 0) {  // the last panel's columns past nb
    uint32_t* last = buf + nb / kCols * panel;
    for (int64_t p = 0; p < kp; ++p) {
      _mm512_storeu_si512(last + p * kCols, _mm512_setzero_si512());
      _mm512_storeu_si512(last + p * kCols + 16, _mm512_setzero_si512());
    }
  }
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t j = 0; j < nb;) {
    const MaskedRun r(w, starts, j, nb);
    MaskedTap tap(w, k0);
    for (int64_t p = 0; p < kp; ++p) {
      const MaskedTap lo_tap = tap;
      tap.Next(w);
      const bool has_hi = 2 * p + 1 < kb;
      const MaskedTap hi_tap = tap;
      tap.Next(w);
      const float* lo_src = lo_tap.Source(w, starts, x, j);
      const float* hi_src = has_hi ? hi_tap.Source(w, starts, x, j) : nullptr;
      const float* lo_scale = scale != nullptr ? scale + lo_tap.ic : nullptr;
      const float* hi_scale = scale != nullptr ? scale + hi_tap.ic : nullptr;
      for (int64_t q = 0; q < r.pieces; ++q) {
        const __m512 lo = MaskedPiece(lo_src, r.masks[lo_tap.kw][q], q, w.stride[2], lo_scale);
        const __m512 hi = MaskedPiece(hi_src, r.masks[hi_tap.kw][q], q, w.stride[2], hi_scale);
        const __m512i words = PairWords16(lo, hi);
        // Columns c.. of the chunk: panel c / 32 from lane c % 32, the rest in the next one.
        const int64_t c = j + q * 16, off = c % kCols, n = q + 1 < r.pieces ? 16 : r.run - q * 16;
        const int64_t first = kCols - off < n ? kCols - off : n;
        uint32_t* dst = buf + c / kCols * panel + p * kCols;
        _mm512_mask_storeu_epi32(dst + off, static_cast<__mmask16>((1u << first) - 1), words);
        if (n > first) {
          const __m512i moved = _mm512_permutexvar_epi32(_mm512_add_epi32(iota, _mm512_set1_epi32(first)), words);
          _mm512_mask_storeu_epi32(dst + panel, static_cast<__mmask16>((1u << (n - first)) - 1), moved);
        }
      }
    }
    j += r.run;
  }
}
#else
inline bool Bf16Dot() { return false; }
void MicroKernel(int, int64_t, const uint32_t*, const uint32_t*, float*, int64_t, bool, const TileEpilogue*,
                 const uint32_t*) {}
void PackPositionPanels(const float*, int64_t, int64_t, int64_t, uint32_t*, int64_t*) {}
void StoreTransposed(const float*, int64_t, int, int64_t, float*, int64_t, const gemm::Epilogue&) {}
void PackRowsAvx512(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t*, int64_t*) {}
void PackTapPanels(const Window&, const WindowStarts&, const float*, const float*, int64_t, int64_t, int64_t, uint32_t*,
                   int64_t*) {}
#endif

// Row tile t of `tiles` over n rows with kEvenTiles (as even as whole rows allow: 49 rows
// are 10 + 10 + 10 + 10 + 9, not 4 x 12 + 1, whose one-row tile waits on its two sums'
// latency as long as a full tile takes), else kRows rows from t * kRows: first row and rows.
template <bool kEvenTiles>
inline void RowTile(int64_t n, int64_t t, int64_t tiles, int64_t* i, int* rows) {
  const int64_t i0 = kEvenTiles ? t * n / tiles : t * kRows;
  const int64_t i1 = kEvenTiles ? (t + 1) * n / tiles : (i0 + kRows < n ? i0 + kRows : n);
  *i = i0;
  *rows = static_cast<int>(i1 - i0);
}

// C[m0..m1, n0..n1) = A · B over K (m0 a multiple of kRows; n1 - n0 <= kMaxJobCols where
// pack_b packs into buf). pack_a(k0, kb, i0, i1, buf, &stride) returns the A panels of rows
// i0..i1 over k0..k0+kb, panel q at result + q * stride holding RowTile<kEvenTiles> q of
// those rows; pack_b(k0, kb, buf, &stride) the B panels of the job's columns (panel t at
// result + t * stride). With kEvenTiles, pack_b only points into weights packed before
// (k0 past K included), and a column tile's first row tile prefetches the next one's B
// block (or the next K block's first): with a few rows per column tile, the B panels' reads
// from L3 or memory were the micro-kernel's stalls. After the last K block, a full tile
// takes epilogue(i, j, &tile_epilogue) in registers, then finish(i, rows, j, cols, true); a
// partial tile gets finish(i, rows, j, cols, false) alone, which then applies all of it.
template <bool kEvenTiles = false, typename PackA, typename PackB, typename Epilogue, typename Finish>
void BlockBf16(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float* c, int64_t ldc, PackA& pack_a,
               PackB& pack_b, Epilogue& epilogue, Finish& finish) {
  alignas(64) uint32_t a_buf[(kMc / kRows) * (kKc / 2) * kRows];
  alignas(64) uint32_t b_buf[(kMaxJobCols / kCols) * (kKc / 2) * kCols];
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kb = K - k0 < kKc ? K - k0 : kKc, kp = (kb + 1) / 2;
    const bool accumulate = k0 > 0, last = k0 + kb >= K;
    int64_t b_stride = 0, next_stride = 0;
    const uint32_t* b = pack_b(k0, kb, b_buf, &b_stride);
    const uint32_t* b_after = kEvenTiles && !last ? pack_b(k0 + kKc, kKc, b_buf, &next_stride) : nullptr;
    for (int64_t mb = m0; mb < m1; mb += kMc) {
      const int64_t mb1 = m1 - mb < kMc ? m1 : mb + kMc, tiles = (mb1 - mb + kRows - 1) / kRows;
      int64_t a_stride = 0;
      const uint32_t* a = pack_a(k0, kb, mb, mb1, a_buf, &a_stride);
      for (int64_t j = n0; j < n1; j += kCols) {
        const int64_t cols = n1 - j < kCols ? n1 - j : kCols;
        const uint32_t* bj = b + (j - n0) / kCols * b_stride;
        const uint32_t* b_next = nullptr;
        if (kEvenTiles) b_next = j + kCols < n1 ? bj + b_stride : (mb + kMc >= m1 ? b_after : nullptr);
        for (int64_t t = 0; t < tiles; ++t) {
          int64_t i = 0;
          int rows = 0;
          RowTile<kEvenTiles>(mb1 - mb, t, tiles, &i, &rows);
          i += mb;
          const uint32_t* ai = a + t * a_stride;
          const uint32_t* next = t == 0 ? b_next : nullptr;
          float* cij = c + i * ldc + j;
          if (cols == kCols) {
            TileEpilogue ep;
            if (last) epilogue(i, j, &ep);
            MicroKernel(rows, kp, ai, bj, cij, ldc, accumulate, last ? &ep : nullptr, next);
            if (last) finish(i, rows, j, cols, true);
            continue;
          }
          {
            alignas(64) float tile[kRows * kCols];
            for (int r = 0; r < rows; ++r) {
              for (int64_t q = 0; q < kCols; ++q) tile[r * kCols + q] = accumulate && q < cols ? cij[r * ldc + q] : 0.f;
            }
            MicroKernel(rows, kp, ai, bj, tile, kCols, accumulate, nullptr, next);
            for (int r = 0; r < rows; ++r) memcpy(cij + r * ldc, tile + r * kCols, sizeof(float) * cols);
          }
          if (last) finish(i, rows, j, cols, false);
        }
      }
    }
  }
}

// Rows k0..k0+kb of a row-major f32 B block (row k at rows + k * ld, nb columns) as panels
// [kp][kCols] words, zero past nb and past kb (PackPositionPanels: the same as 12-row A
// panels, on AVX-512). Pairs of rows outer: each row is read start to end, two streams
// the prefetcher follows (panels outer read 128 bytes of every row in turn and stalled on
// the loads: a third of the packing's time in ResNet-50's 1x1 convs).
inline void PackColumnsBf16(const float* rows, int64_t ld, int64_t kb, int64_t nb, uint32_t* buf, int64_t* stride) {
  const int64_t kp = (kb + 1) / 2;
  *stride = kp * kCols;
  for (int64_t p = 0; p < kp; ++p) {
    for (int64_t t = 0; t * kCols < nb; ++t) {
      const int64_t j0 = t * kCols, width = nb - j0 < kCols ? nb - j0 : kCols;
      const float* lo = rows + 2 * p * ld + j0;
      uint32_t* out = buf + t * kp * kCols + p * kCols;
      if (2 * p + 1 < kb) {
        const float* hi = lo + ld;
        for (int64_t q = 0; q < width; ++q) out[q] = PairWord(lo[q], hi[q]);
      } else {
        for (int64_t q = 0; q < width; ++q) out[q] = PairWord(lo[q], 0.f);
      }
      for (int64_t q = width; q < kCols; ++q) out[q] = 0;
    }
  }
}

struct MatMulBf16Kernel {
  // Inputs: A [.., M, K] f32, B pre-packed: [ceil(N/32)][ceil(K/2)][32] bf16 pair words (a
  // constant [K, N] weight), an optional bias [N]. Parameters: kiln_matmul_params (shape
  // and activation; B has no batch dims).
  __attribute__((noinline)) static int32_t RunF32(const kiln_kcall* call, const kiln_matmul_params& params) {
    if (!Bf16Dot()) return KILN_KERR_UNSUPPORTED;
    const int64_t M = params.shape.M, K = params.shape.K, N = params.shape.N;
    const int64_t kp_all = (K + 1) / 2;
    const int32_t batch_rank = static_cast<int32_t>(params.shape.batch_rank);
    int64_t batches = 1;
    for (int32_t i = 0; i < batch_rank; ++i) batches *= params.shape.batch_dims[i];
    const float* pa = InputData<float>(call, 0);
    const uint32_t* pb = static_cast<const uint32_t*>(call->inputs[1].data);
    const float* bias = OptionalInputData<float>(call, 2);
    const float* residual = OptionalInputData<float>(call, 3);  // laid out as C (the fuse pass's)
    float* pc = OutputData<float>(call);
    const kiln_activation act = params.activation;
    // A's rows are rounded to bf16 once per BlockBf16 call, for all its columns: on one
    // thread one job takes every column; with a pool, 256-column jobs, and a thread's
    // consecutive jobs of the same rows run as one call over their columns (the pool hands
    // each thread one range of jobs). Rounding A again for each 256 columns cost BERT-base
    // at two threads a fifth of its MatMul time.
    // With a pool, the columns go in at least gemm::kMinJobs jobs where N allows (a multiple
    // of 32, at most 256): BERT-base's ffn_out (N = 768) went in 3 jobs of 256 columns, so
    // its rows split in 3 as well, and each row group read the whole 4.5 MiB weight again:
    // it ran 1.2x faster on two threads than on one.
    const bool parallel = call->exec != nullptr && call->exec->parallel_for != nullptr;
    const int64_t eighth = ((N + gemm::kMinJobs - 1) / gemm::kMinJobs + kCols - 1) / kCols * kCols;
    const int64_t kJobCols = !parallel ? (N + kCols - 1) / kCols * kCols : eighth < kMaxJobCols ? eighth : kMaxJobCols;
    const int64_t chunks = (N + kJobCols - 1) / kJobCols;
    const gemm::RowSplit split = gemm::SplitRows(call, M, chunks * batches);
    const int64_t groups = split.groups;
    auto jobs = [=](int64_t begin, int64_t end) {
      for (int64_t job = begin, next; job < end; job = next) {
        const int64_t batch = job / (groups * chunks), rg = job / chunks % groups, cc = job % chunks;
        for (next = job + 1; next < end && next / chunks == job / chunks;) ++next;  // same batch and rows
        int64_t a_off = 0, rest = batch;
        for (int32_t d = batch_rank - 1; d >= 0; --d) {
          a_off += rest % params.shape.batch_dims[d] * params.shape.a_batch_strides[d];
          rest /= params.shape.batch_dims[d];
        }
        const float* a = pa + a_off;
        float* c = pc + batch * M * N;
        const float* res = residual != nullptr ? residual + batch * M * N : nullptr;
        const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + 1);
        const int64_t n0 = cc * kJobCols, n1 = n0 + (next - job) * kJobCols < N ? n0 + (next - job) * kJobCols : N;
        auto pack_a = [&](int64_t k0, int64_t kb, int64_t i0, int64_t i1, uint32_t* buf, int64_t* stride) {
          PackRowsAvx512(a, K, k0, kb, i0, i1, buf, stride);
          return static_cast<const uint32_t*>(buf);
        };
        auto pack_b = [&](int64_t k0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
          *stride = kp_all * kCols;
          return pb + n0 / kCols * kp_all * kCols + k0 / 2 * kCols;
        };
        auto epilogue = [&](int64_t i, int64_t j, TileEpilogue* ep) {
          ep->col_bias = bias != nullptr ? bias + j : nullptr;
          ep->residual = res != nullptr ? res + i * N + j : nullptr;
          ep->residual_ld = N;
          if (act.code == KILN_UNARY_RELU) ep->kind = gemm::Epilogue::kRelu;
        };
        auto finish = [&](int64_t i, int rows, int64_t j, int64_t cols, bool in_registers) {
          for (int r = 0; r < rows; ++r) {
            float* row = c + (i + r) * N + j;
            if (!in_registers && bias != nullptr) {
              for (int64_t q = 0; q < cols; ++q) row[q] += bias[j + q];
            }
            if (!in_registers && res != nullptr) {
              for (int64_t q = 0; q < cols; ++q) row[q] += res[(i + r) * N + j + q];
            }
            if (!in_registers || act.code != KILN_UNARY_RELU) ApplyActivation(row, cols, act.code, act.alpha, act.beta);
          }
        };
        BlockBf16(m0, m1, n0, n1, K, c, N, pack_a, pack_b, epilogue, finish);
      }
    };
    ParallelFor(call, batches * groups * chunks, 1, jobs);
    return KILN_KERR_OK;
  }
};

// The set-up both forms of conv_bf16 share: the call's tensors, shapes and window.
struct ConvBf16Call {
  Window w;
  kiln_activation act;
  int64_t group, batch, in_channels, out_channels, icg, ocg, in_size, out_size, kernel_size, K, kp_all;
  int64_t scale_batch_stride;
  const float *px, *pbias, *pscale, *pres;
  const uint32_t* pw;
  float* py;
  bool pointwise;

  ConvBf16Call(const kiln_kcall* call, const kiln_conv_params& params)
      : w(params.window, call->inputs[0], call->outputs[0]), act(params.activation), group(params.group) {
    const kiln_ktensor& X = call->inputs[0];
    const kiln_ktensor& Y = call->outputs[0];
    batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
    icg = in_channels / group, ocg = out_channels / group;
    in_size = w.in_size(), out_size = w.out_size(), kernel_size = w.kernel_size();
    K = icg * kernel_size, kp_all = (K + 1) / 2;
    px = static_cast<const float*>(X.data);
    pw = static_cast<const uint32_t*>(call->inputs[1].data);
    pbias = OptionalInputData<float>(call, 2);
    pscale = OptionalInputData<float>(call, 3);
    scale_batch_stride = pscale != nullptr && call->inputs[3].dims[0] > 1 ? in_channels : 0;
    pres = OptionalInputData<float>(call, 4);
    py = static_cast<float*>(Y.data);
    pointwise = kernel_size == 1 && w.stride[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 && w.pad[0] == 0 &&
                w.pad[1] == 0 && w.pad[2] == 0 && in_size == out_size;
  }
  // X of image n, group g; its input scale (null: none); Y's (and the residual's) offset.
  const float* X(int64_t n, int64_t g) const { return px + (n * in_channels + g * icg) * in_size; }
  const float* Scale(int64_t n, int64_t g) const {
    return pscale != nullptr ? pscale + n * scale_batch_stride + g * icg : nullptr;
  }
  int64_t YAt(int64_t n, int64_t g) const { return (n * out_channels + g * ocg) * out_size; }
  // Bias, residual and ReLU or Clip of image n, group g, rows indexed by Y's channel.
  gemm::Epilogue Epilogue(int64_t n, int64_t g) const {
    gemm::Epilogue ep;
    ep.row_bias = pbias != nullptr ? pbias + g * ocg : nullptr;
    ep.residual = pres != nullptr ? pres + YAt(n, g) : nullptr;
    ep.residual_ld = out_size;
    if (act.code == KILN_UNARY_RELU) ep.kind = gemm::Epilogue::kRelu;
    if (act.code == KILN_UNARY_CLIP) {
      ep.kind = gemm::Epilogue::kClip;
      ep.lo = static_cast<float>(act.alpha);
      ep.hi = static_cast<float>(act.beta);
    }
    return ep;
  }
  // An activation the epilogue leaves to ApplyActivation.
  bool OtherActivation() const { return act.code >= 0 && act.code != KILN_UNARY_RELU && act.code != KILN_UNARY_CLIP; }
  // Whether the im2col rows of nb positions go by MaskedRun (im2col.h).
  bool Masked(const float* scale, int64_t nb) const { return !pointwise && MaskedRows(w, scale, nb); }
  // Rows k0..k0+kb of the implicit im2col matrix (scaled) at positions n0..n0+nb into
  // staged[k][nb] (starts: the positions' windows).
  void Stage(const float* x, const float* scale, int64_t k0, int64_t kb, int64_t n0, int64_t nb,
             const WindowStarts& starts, float* staged) const {
    const int64_t kk_hw = w.kernel[1] * w.kernel[2];
    if (Masked(scale, nb)) return StageMasked(w, starts, x, scale, k0, kb, nb, staged, nb);
    for (int64_t k = 0; k < kb; ++k) {
      float* out = staged + k * nb;
      const int64_t kidx = k0 + k, ic = kidx / kernel_size, r = kidx % kernel_size;
      const float* xin = x + ic * in_size;
      if (pointwise) {
        const float s = scale[ic];
        for (int64_t j = 0; j < nb; ++j) out[j] = xin[n0 + j] * s;
        continue;
      }
      const int64_t kd = r / kk_hw, kh = r / w.kernel[2] % w.kernel[1], kw = r % w.kernel[2];
      PackTapRow(w, starts, xin, kd * w.dilation[0], kh * w.dilation[1], kw * w.dilation[2],
                 scale != nullptr ? scale + ic : nullptr, nb, out);
    }
  }
};

struct ConvBf16Kernel {
  // Inputs: X [N, C, *in] f32, W pre-packed per group in panels of 12 rows,
  // [group][ceil(OC/group / 12)][ceil(K/2)][12] bf16 pair words (K = C/group x kernel
  // size), B [OC] optional, then as the fuse pass writes them an input scale (input 3,
  // may be omitted) and a residual (input 4). Parameters: kiln_conv_params (group,
  // window, activation, job_cols, packed_weights). packed_weights 1: W as 32-column
  // panels of B, [group][ceil(OC/group / 32)][ceil(K/2)][32] words, for RunPositionRows.
  __attribute__((noinline)) static int32_t RunF32(const kiln_kcall* call, const kiln_conv_params& params);
  __attribute__((noinline)) static int32_t RunPositionRows(const kiln_kcall* call, const kiln_conv_params& params);
};

// RunPositionRows' jobs: at most kMaxPositionRows positions and a C^T block of at most
// kPositionFloats floats, both on the stack.
constexpr int64_t kMaxPositionRows = 216;
constexpr int64_t kPositionFloats = int64_t{1} << 16;
static_assert(kMaxPositionRows <= kMc && kMaxPositionRows <= gemm::kMaxNc);
static_assert(kPositionFloats >= kMaxPositionRows * kMaxJobCols);

// Few output positions (7x7 maps, packed_weights 1): the positions are the product's rows
// and the output channels its columns, C^T = X^T W^T. 49 positions are then row tiles of
// 10 + 10 + 10 + 10 + 9 (BlockBf16's even tiles), where as columns they were 32 + 17, the
// partial tile as dear as a full one. Each tile's C^T block goes to a buffer on the stack,
// then to Y transposed with the bias, the residual and the activation. ResNet-50's
// layer4 3x3 convs: 0.88 -> 0.65 ms at one thread with the even tiles and the B prefetch.
int32_t ConvBf16Kernel::RunPositionRows(const kiln_kcall* call, const kiln_conv_params& params) {
  const ConvBf16Call cv(call, params);
  const int64_t out_size = cv.out_size, ocg = cv.ocg, kp_all = cv.kp_all;
  const int64_t oc_panels = (ocg + kCols - 1) / kCols;
  // Jobs: (image, group, positions, output channels). A call's positions are packed once
  // per K block for all its channels (a strided conv's im2col rows are the dear part), so
  // a job takes as many channels as its C^T block holds, in equal parts of whole 32-column
  // panels; with a pool, the channels split further until there are gemm::kMinJobs jobs,
  // and a thread's consecutive jobs of the same positions run as one call as far as the
  // block holds them (the pool hands each thread one range of jobs: split into eight and
  // packed once per job, layer4.0's strided conv took 3.3 ms at two threads, 2.0 at one).
  // With a pool and one image, a conv with an im2col (not 1x1) splits its positions in two
  // first (49 as 25 + 24 rows), so two threads each pack half of them rather than both
  // packing all (that conv: 1.03 ms at two threads, 1.27 with the channels split alone);
  // 1x1 convs pack cheaply, and splitting their channels halves each thread's weights.
  const bool parallel = call->exec != nullptr && call->exec->parallel_for != nullptr;
  int64_t pos_chunks = (out_size + kMaxPositionRows - 1) / kMaxPositionRows;
  if (parallel && !cv.pointwise && pos_chunks == 1 && cv.batch * cv.group == 1 && out_size >= 2 * kRows) {
    pos_chunks = 2;
  }
  const int64_t pos_rows = (out_size + pos_chunks - 1) / pos_chunks;
  const int64_t most_panels = kPositionFloats / pos_rows / kCols;
  int64_t oc_parts = (oc_panels + most_panels - 1) / most_panels;
  while (parallel && cv.batch * cv.group * pos_chunks * oc_parts < gemm::kMinJobs && oc_parts < oc_panels) ++oc_parts;
  const int64_t part_cols = (oc_panels + oc_parts - 1) / oc_parts * kCols;
  oc_parts = (ocg + part_cols - 1) / part_cols;
  auto jobs = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin, next; job < end; job = next) {
      const int64_t part = job % oc_parts, pc = job / oc_parts % pos_chunks;
      const int64_t g = job / (oc_parts * pos_chunks) % cv.group, n = job / (oc_parts * pos_chunks * cv.group);
      for (next = job + 1; next < end && next / oc_parts == job / oc_parts; ++next) {
        if ((next + 1 - job) * part_cols > most_panels * kCols) break;
      }
      const int64_t span = (next - job) * part_cols;  // C^T's row length
      const int64_t p0 = pc * pos_rows, p1 = p0 + pos_rows < out_size ? p0 + pos_rows : out_size;
      const int64_t o0 = part * part_cols, o1 = o0 + span < ocg ? o0 + span : ocg;
      const float* x = cv.X(n, g);
      const float* scale = cv.Scale(n, g);
      const gemm::Epilogue ep = cv.Epilogue(n, g);
      alignas(64) float staged[kKc * kMaxPositionRows];
      alignas(64) float ct[kPositionFloats];  // [positions][span]
      // X^T's rows i0..i1 (positions p0 + i) over k0..k0+kb as 12-row A panels.
      auto pack_a = [&](int64_t k0, int64_t kb, int64_t i0, int64_t i1, uint32_t* buf, int64_t* stride) {
        const int64_t nb = i1 - i0, tiles = (nb + kRows - 1) / kRows;
        const float* rows = x + k0 * cv.in_size + p0 + i0;
        int64_t ld = cv.in_size;
        if (!cv.pointwise || scale != nullptr) {
          WindowStarts starts;
          if (!cv.pointwise) starts.Fill(cv.w, p0 + i0, nb);
          cv.Stage(x, scale, k0, kb, p0 + i0, nb, starts, staged);
          rows = staged, ld = nb;
        }
        for (int64_t t = 0; t < tiles; ++t) {  // one panel per even row tile
          int64_t i = 0;
          int r = 0;
          RowTile<true>(nb, t, tiles, &i, &r);
          PackPositionPanels(rows + i, ld, kb, r, buf + t * ((kb + 1) / 2) * kRows, stride);
        }
        return static_cast<const uint32_t*>(buf);
      };
      auto pack_b = [&](int64_t k0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
        *stride = kp_all * kCols;
        return cv.pw + (g * oc_panels + o0 / kCols) * kp_all * kCols + k0 / 2 * kCols;
      };
      auto epilogue = [](int64_t, int64_t, TileEpilogue*) {};
      // C^T's tile (rows i.., columns j..) to Y's rows o0 + j.., positions p0 + i...
      auto finish = [&](int64_t i, int rows, int64_t j, int64_t cols, bool) {
        const int64_t offset = (o0 + j) * out_size + p0 + i;
        gemm::Epilogue block = ep;
        if (block.row_bias != nullptr) block.row_bias += o0 + j;
        if (block.residual != nullptr) block.residual += offset;
        float* y = cv.py + cv.YAt(n, g) + offset;
        StoreTransposed(ct + i * span + j, span, rows, cols, y, out_size, block);
        if (cv.OtherActivation()) {
          for (int64_t q = 0; q < cols; ++q)
            ApplyActivation(y + q * out_size, rows, cv.act.code, cv.act.alpha, cv.act.beta);
        }
      };
      BlockBf16<true>(0, p1 - p0, 0, o1 - o0, cv.K, ct, span, pack_a, pack_b, epilogue, finish);
    }
  };
  ParallelFor(call, cv.batch * cv.group * pos_chunks * oc_parts, 1, jobs);
  return KILN_KERR_OK;
}

int32_t ConvBf16Kernel::RunF32(const kiln_kcall* call, const kiln_conv_params& params) {
  if (!Bf16Dot()) return KILN_KERR_UNSUPPORTED;
  if (params.packed_weights == 1) return RunPositionRows(call, params);
  const ConvBf16Call cv(call, params);
  const int64_t out_size = cv.out_size, ocg = cv.ocg, kp_all = cv.kp_all;
  const int64_t panels = (ocg + kRows - 1) / kRows;
  const int64_t first_cols = params.job_cols != 0 && params.job_cols % kCols == 0 && params.job_cols <= kMaxJobCols
                                 ? params.job_cols
                                 : kMaxJobCols;
  // As the f32 implicit GEMM (conv.cc): gemm::SplitConvJobs.
  const gemm::ConvJobs plan =
      gemm::SplitConvJobs(call, out_size, ocg, first_cols, kCols, cv.kernel_size, cv.batch, cv.group);
  const int64_t cols = plan.cols;
  const gemm::RowSplit split = plan.split;
  auto jobs = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end;) {
      const gemm::ConvJobs::Job at = plan.Next(&job, end);  // row groups of one chunk run together
      const int64_t rg = at.rg, cc = at.cc, g = at.g, n = at.n, taken = at.taken;
      const float* x = cv.X(n, g);
      const float* scale = cv.Scale(n, g);
      float* c = cv.py + cv.YAt(n, g);
      const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + taken);
      const int64_t n0 = cc * cols, n1 = n0 + cols < out_size ? n0 + cols : out_size;
      WindowStarts starts;
      starts.Fill(cv.w, n0, n1 - n0);
      const uint32_t* wg = cv.pw + g * panels * kp_all * kRows;
      auto pack_a = [&](int64_t k0, int64_t, int64_t i0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
        *stride = kp_all * kRows;
        return wg + i0 / kRows * kp_all * kRows + k0 / 2 * kRows;
      };
      auto pack_b = [&](int64_t k0, int64_t kb, uint32_t* buf, int64_t* stride) -> const uint32_t* {
        const int64_t nb = n1 - n0;
        if (cv.pointwise && scale == nullptr) {
          PackColumnsBf16(x + k0 * cv.in_size + n0, cv.in_size, kb, nb, buf, stride);
          return buf;
        }
        if (cv.Masked(scale, nb)) {
          PackTapPanels(cv.w, starts, x, scale, k0, kb, nb, buf, stride);
          return buf;
        }
        alignas(64) float staged[kKc * kMaxJobCols];
        cv.Stage(x, scale, k0, kb, n0, nb, starts, staged);
        PackColumnsBf16(staged, nb, kb, nb, buf, stride);
        return buf;
      };
      const gemm::Epilogue ep = cv.Epilogue(n, g);
      auto epilogue = [&](int64_t i, int64_t j, TileEpilogue* tile) {
        tile->row_bias = ep.row_bias != nullptr ? ep.row_bias + i : nullptr;
        tile->residual = ep.residual != nullptr ? ep.residual + i * ep.residual_ld + j : nullptr;
        tile->residual_ld = ep.residual_ld;
        tile->kind = ep.kind;
        tile->lo = ep.lo;
        tile->hi = ep.hi;
      };
      auto finish = [&](int64_t i, int rows, int64_t j, int64_t tile_cols, bool in_registers) {
        for (int r = 0; r < rows; ++r) {
          float* row = c + (i + r) * out_size + j;
          if (!in_registers) {
            for (int64_t q = 0; q < tile_cols; ++q) row[q] = ep.Apply(row[q], i + r, j + q);
          }
          if (cv.OtherActivation()) ApplyActivation(row, tile_cols, cv.act.code, cv.act.alpha, cv.act.beta);
        }
      };
      BlockBf16(m0, m1, n0, n1, cv.K, c, out_size, pack_a, pack_b, epilogue, finish);
    }
  };
  ParallelFor(call, plan.Count(cv.batch), 1, jobs);
  return KILN_KERR_OK;
}

struct WinogradBf16Kernel {
  // As conv_winograd (winograd_core.h), its 36 GEMMs in bf16: inputs X, U as 32-column panels
  // of bf16 pair words [36][ceil(OC/32)][C/2][32], B (may be omitted), R (optional);
  // outputs Y and the scratch: V as bf16 panels (36 x ceil(tiles_per_chunk / 12) x 12 x C/2
  // words), then M (36 x tiles_per_chunk x OC floats).
  __attribute__((noinline)) static int32_t RunF32(const kiln_kcall* call, const kiln_conv_params& params) {
    if (!Bf16Dot()) return KILN_KERR_UNSUPPORTED;
    const uint32_t* pu = static_cast<const uint32_t*>(call->inputs[1].data);
    const int64_t C = call->inputs[0].dims[1], OC = call->outputs[0].dims[1];
    const int64_t kp = (C + 1) / 2, u_stride = (OC + kCols - 1) / kCols * kp * kCols;
    // V rounded to bf16 as the input transform stores it, straight into the A panels the
    // micro-kernel reads, [36][ceil(tc/12)][C/2][12] words (C is a multiple of 8), so no
    // pass converts it (converting it per GEMM cost as much as the GEMM at 64 channels).
    // Rows past tc in the last panel are never read (the micro-kernel reads `rows` rows).
    const int64_t chunk_panels = (params.tiles_per_chunk + kRows - 1) / kRows;
    auto v_xi = [=](float* v, int64_t xi, int64_t tc) {
      return reinterpret_cast<uint32_t*>(v) + xi * ((tc + kRows - 1) / kRows) * kp * kRows;
    };
    auto store_v = [=](float* v, int64_t xi, int64_t tc, int64_t t, int64_t c0, const gemm::v8f& values) {
      uint32_t* out = v_xi(v, xi, tc) + (t / kRows * kp + c0 / 2) * kRows + t % kRows;
      uint32_t words[4];
      PairWords8(values, words);
      for (int q = 0; q < 4; ++q) out[q * kRows] = words[q];
    };
    auto multiply = [=](float* v, int64_t xi, int64_t tc, int64_t t0, int64_t t1, int64_t n0, int64_t n1, float* m) {
      const uint32_t* panels = v_xi(v, xi, tc);
      auto pack_a = [&](int64_t k0, int64_t, int64_t i0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
        *stride = kp * kRows;
        return panels + i0 / kRows * kp * kRows + k0 / 2 * kRows;
      };
      auto pack_b = [&](int64_t k0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
        *stride = kp * kCols;
        return pu + xi * u_stride + n0 / kCols * kp * kCols + k0 / 2 * kCols;
      };
      auto epilogue = [](int64_t, int64_t, TileEpilogue*) {};
      auto finish = [](int64_t, int, int64_t, int64_t, bool) {};
      BlockBf16(t0, t1, n0, n1, C, m, OC, pack_a, pack_b, epilogue, finish);
    };
    return winograd::WinogradRun(call, params, kMaxJobCols, 36 * chunk_panels * kp * kRows, kp * int64_t{4}, store_v,
                                 multiply);
  }
};

}  // namespace

KILN_F32_KERNEL(conv_winograd_bf16, WinogradBf16Kernel, outputs[0].dtype)
KILN_F32_KERNEL(matmul_bf16, MatMulBf16Kernel, outputs[0].dtype)
KILN_F32_KERNEL(conv_bf16, ConvBf16Kernel, outputs[0].dtype)
