// The f32 matrix-multiply core shared by MatMul, Gemm and Conv (as an implicit GEMM):
//   C[m0..m1, n0..n1) = A[m0..m1, 0..K) · B[0..K, n0..n1)
// B is never read in place: the caller's `pack` copies a block of it ([kb x kNc], zero
// past the edges) into a contiguous, aligned buffer, which is where a Conv does its
// im2col and a transposed B gets transposed. A is read in place through strides, one
// scalar per row and k, broadcast against B. (Copying A into k-major panels was tried and
// measured slower here: the copy cost more than the strided reads.) The micro-kernel keeps a tile of C in
// registers for the whole K block, written with generic vector types. Two tiles, picked
// by the target (WideVectors(), kernel_common.h): 6 x 16 in 8-lane vectors (12 of AVX2's
// 16 registers as accumulators; SSE splits them) and, where AVX-512F gives 16 lanes and 32
// registers, 12 x 32 in 16-lane vectors (24 accumulators). The wide tile reads its rows as
// two 6-row halves and its columns as two 16-column halves, so every packed layout (6-row
// weight panels, 16-column B panels) serves both tiles and lowering need not know which.
#pragma once

#include "fast_math.h"
#include "kernel_common.h"

namespace kiln_kernels {

// MatMul, Gemm and Conv use this core only outside the reference build (kFastKernels).
inline constexpr bool kBlockedGemm = kFastKernels;

namespace gemm {

// sum_k a[k] * b[k] with 16 independent partial sums, so the loop vectorizes without
// reassociating a single accumulator (the library builds without fast-math).
inline float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float lanes[16] = {};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] += a[k + l] * b[k + l];
  }
  float sum = 0.f;
  for (; k < n; ++k) sum += a[k] * b[k];
  for (int l = 0; l < 16; ++l) sum += lanes[l];
  return sum;
}

constexpr int kMr = 6;            // rows of C per narrow micro-kernel; rows per weight panel
constexpr int kNr = 16;           // columns of C per narrow micro-kernel (two 8-lane vectors); per B panel
constexpr int kWideMr = 2 * kMr;  // the wide tile: two row halves of kMr
constexpr int kWideNr = 2 * kNr;  // and two 16-lane column halves
constexpr int64_t kKc = 256;      // K block: one packed B block is kKc x (job width) floats
// PanelBlock's K block (B pre-packed: Winograd's U, MatMul's weight) where A has few rows
// (at most kFewPanelRows): B then comes from memory, read by a tile or two of rows. On the
// Zen 5 host a 512-channel 3x3 conv on 7x7 maps in Winograd (4 rows a point) ran 1.24 ms
// at kKc and 0.83 at 128, ResNet-50 2.5 % faster in all; with many rows (ViT-S/16 at batch
// 8) 128 was 2 % slower.
constexpr int64_t kFewRowsKc = 128;
constexpr int64_t kFewPanelRows = 64;
constexpr int64_t kNc = 64;  // columns of C per MatMul/Gemm job
// Columns of C (output positions) per Conv job: with the narrow tile (AVX2) 128 measured
// 10-25 % faster than 64 or 256 on ResNet-50's and MobileNetV2's convolutions; with the
// wide tile (AVX-512) 256 measured 1-5 % faster than 128 on ResNet-50, MobileNetV2 and
// EfficientNet-B0 at 1 and 2 threads (64 slower). MatMul shapes preferred 64.
// (--tune may pick 64, 128 or 256 per shape: kiln_conv_params.job_cols.)
constexpr int64_t kConvNc = 128;
constexpr int64_t kWideConvNc = 256;
constexpr int64_t kMaxNc = 256;
constexpr int64_t kMc = 240;  // rows of A per L2-resident block

using v8f = ::kiln_kernels::v8f;    // and KILN_LOAD8 / KILN_STORE8 / KILN_SPLAT8: fast_math.h
using v16f = ::kiln_kernels::v16f;  // the wide tile's vector; KILN_SPLAT16 / KILN_SPLAT_V there too

// What the core does to C after the last K block: add a per-row bias (a Conv's, one per
// output channel), then a residual tensor laid out as C (ResNet's skip connection, fused
// from Conv -> Add), then apply ReLU or Clip, the activations CNNs fuse into convolutions,
// with the same comparisons as ApplyUnary (NaN: ReLU gives 0, Clip keeps it). The
// micro-kernel does it in registers; with a residual it adds the bias only and FinishTile
// the rest. Other activations stay a pass over C after the product (after the residual).
struct Epilogue {
  enum Kind : int32_t { kNone = 0, kRelu = 1, kClip = 2 };
  const float* row_bias = nullptr;  // indexed by the row of C; null: no bias
  const float* residual = nullptr;  // R(i, j) = residual[i * residual_ld + j], i and j as C's; null: none
  int64_t residual_ld = 0;
  int32_t kind = kNone;
  float lo = 0.f, hi = 0.f;  // Clip bounds
  // The scalar form, for C(row, col) = v before the epilogue (edge columns and tiles).
  float Apply(float v, int64_t row, int64_t col) const {
    if (row_bias != nullptr) v += row_bias[row];
    return AfterBias(v, row, col);
  }
  // The residual and the activation alone.
  float AfterBias(float v, int64_t row, int64_t col) const {
    if (residual != nullptr) v += residual[row * residual_ld + col];
    if (kind == kRelu) v = v > 0.f ? v : 0.f;
    if (kind == kClip) v = v < lo ? lo : (v > hi ? hi : v);
    return v;
  }
};

// The B rows a pre-packed B's next column tile reads at the same k: its first panel at
// `at`, the second `gap` floats on (the wide tile's next panel; on the narrow tile the
// same line).
template <int NV>
inline void PrefetchPanels(const float* at, int64_t gap) {
  __builtin_prefetch(at);
  if constexpr (NV == 2) __builtin_prefetch(at + gap);
}

// C[0..MR, 0..L*NV) (+)= A[0..MR, 0..kb) · B[0..kb, 0..L*NV), L the lanes of V (v8f: the
// narrow tile, MR <= kMr; v16f: the wide one, MR <= kWideMr). Rows i < kMr of A are
// a[i * a_row + k * a_k], rows from kMr on a_hi[(i - kMr) * a_row + k * a_k] (the next
// weight panel, or a + kMr rows). Column vector 0 of B row k is at b0 + k * ldb, vector 1
// at b1 + k * ldb (b0 + L, or the next 16-column panel). NV = 2 is the full tile; NV = 1
// serves a last partial tile of at most L columns at half the work. ep (null: none)
// applies to rows row0.. of C; its residual is not read here (FinishTile adds it).
template <typename V, int MR, int NV>
inline void MicroKernel(int64_t kb, const float* a, const float* a_hi, int64_t a_row, int64_t a_k, const float* b0,
                        const float* b1, int64_t ldb, float* c, int64_t ldc, bool accumulate, const Epilogue* ep,
                        int64_t row0, const float* b_next) {
#ifdef __clang__
  // The library builds with -ffp-contract=off (results that do not depend on the target);
  // here (and in the blocked convolutions, blocked.cc) a multiply-add may fuse into one
  // FMA: the GEMM's sums are reassociated by blocking anyway, and FMA doubles its throughput.
#pragma clang fp contract(fast)
#endif
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  V acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) {
    if (accumulate) {
      memcpy(&acc0[i], c + i * ldc, sizeof(V));
      if constexpr (NV == 2) memcpy(&acc1[i], c + i * ldc + L, sizeof(V));
    } else {
      acc0[i] = V{};
      if constexpr (NV == 2) acc1[i] = V{};
    }
  }
  if (a_k == 1) {
    // Rows of A contiguous in k (MatMul, a Conv's unpacked weight): one pointer per row,
    // all indexed by k, so the loads' addresses do not form a chain of adds (which cost
    // as much as the FMAs they feed).
    const float* rows[MR];
    for (int i = 0; i < MR; ++i) rows[i] = i < kMr ? a + i * a_row : a_hi + (i - kMr) * a_row;
    for (int64_t k = 0; k < kb; ++k) {
      if (b_next != nullptr) PrefetchPanels<NV>(b_next + k * ldb, b1 - b0);
      V bv0, bv1;
      memcpy(&bv0, b0 + k * ldb, sizeof(V));
      if constexpr (NV == 2) memcpy(&bv1, b1 + k * ldb, sizeof(V));
      for (int i = 0; i < MR; ++i) {
        const float x = rows[i][k];
        V av;
        KILN_SPLAT_V(V, av, x);
        acc0[i] += av * bv0;
        if constexpr (NV == 2) acc1[i] += av * bv1;
      }
    }
  } else {
    for (int64_t k = 0; k < kb; ++k) {
      if (b_next != nullptr) PrefetchPanels<NV>(b_next + k * ldb, b1 - b0);
      V bv0, bv1;
      memcpy(&bv0, b0 + k * ldb, sizeof(V));
      if constexpr (NV == 2) memcpy(&bv1, b1 + k * ldb, sizeof(V));
      for (int i = 0; i < MR; ++i) {
        const float x = i < kMr ? a[i * a_row + k * a_k] : a_hi[(i - kMr) * a_row + k * a_k];
        V av;
        KILN_SPLAT_V(V, av, x);
        acc0[i] += av * bv0;
        if constexpr (NV == 2) acc1[i] += av * bv1;
      }
    }
  }
  if (ep != nullptr) {
    for (int i = 0; i < MR; ++i) {
      if (ep->row_bias != nullptr) {
        V bv;
        KILN_SPLAT_V(V, bv, ep->row_bias[row0 + i]);
        acc0[i] += bv;
        if constexpr (NV == 2) acc1[i] += bv;
      }
    }
    const V zero = {};
    V lo, hi;
    KILN_SPLAT_V(V, lo, ep->lo);
    KILN_SPLAT_V(V, hi, ep->hi);
    if (ep->kind == Epilogue::kRelu) {
      for (int i = 0; i < MR; ++i) {
        acc0[i] = acc0[i] > zero ? acc0[i] : zero;
        if constexpr (NV == 2) acc1[i] = acc1[i] > zero ? acc1[i] : zero;
      }
    } else if (ep->kind == Epilogue::kClip) {
      for (int i = 0; i < MR; ++i) {
        acc0[i] = acc0[i] < lo ? lo : (acc0[i] > hi ? hi : acc0[i]);
        if constexpr (NV == 2) acc1[i] = acc1[i] < lo ? lo : (acc1[i] > hi ? hi : acc1[i]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    memcpy(c + i * ldc, &acc0[i], sizeof(V));
    if constexpr (NV == 2) memcpy(c + i * ldc + L, &acc1[i], sizeof(V));
  }
}

// Not inlined, also in artifacts (codegen keeps noinline): every GEMM-shaped node of a
// model shares one copy of the unrolled micro-kernels instead of compiling its own.
// rows: 1..kMr for the narrow tile (V = v8f), 1..kWideMr for the wide one (v16f).
template <typename V, int NV>
__attribute__((noinline)) void MicroKernelRows(int rows, int64_t kb, const float* a, const float* a_hi, int64_t a_row,
                                               int64_t a_k, const float* b0, const float* b1, int64_t ldb, float* c,
                                               int64_t ldc, bool accumulate, const Epilogue* ep = nullptr,
                                               int64_t row0 = 0, const float* b_next = nullptr) {
#define KILN_MK_CASE(R) \
  case R: MicroKernel<V, R, NV>(kb, a, a_hi, a_row, a_k, b0, b1, ldb, c, ldc, accumulate, ep, row0, b_next); break
// The rows both tiles have: 6 down to 2, then 1 for anything else.
#define KILN_MK_NARROW_CASES \
  KILN_MK_CASE(6);           \
  KILN_MK_CASE(5);           \
  KILN_MK_CASE(4);           \
  KILN_MK_CASE(3);           \
  KILN_MK_CASE(2);           \
  default: MicroKernel<V, 1, NV>(kb, a, a_hi, a_row, a_k, b0, b1, ldb, c, ldc, accumulate, ep, row0, b_next); break
  if constexpr (sizeof(V) == sizeof(v16f)) {
    switch (rows) {
      KILN_MK_CASE(12);
      KILN_MK_CASE(11);
      KILN_MK_CASE(10);
      KILN_MK_CASE(9);
      KILN_MK_CASE(8);
      KILN_MK_CASE(7);
      KILN_MK_NARROW_CASES;
    }
  } else {
    switch (rows) { KILN_MK_NARROW_CASES; }
  }
#undef KILN_MK_NARROW_CASES
#undef KILN_MK_CASE
}

// The last few columns of a job whose A is pre-packed in panels (a 1x1 Conv over 7x7 has
// 49 output positions: three 16-column tiles and one column): C[0..rows, one column]
// (+)= panel [kb][kMr] · b[k * ldb], one 8-lane FMA per k (kMr lanes used, four partial
// sums) where an 8-column micro-kernel would do kMr of them. ep as in MicroKernel.
inline void PanelColumn(int rows, int64_t kb, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                        bool accumulate, const Epilogue* ep, int64_t row0, int64_t col0) {
#ifdef __clang__
#pragma clang fp contract(fast)
#endif
  v8f acc[4] = {};
  int64_t k = 0;
  // An 8-lane load of one k's kMr floats also reads the next k's first two, so the last k
  // of the panel is read from a copy instead.
  for (; k + 4 < kb; k += 4) {
    for (int u = 0; u < 4; ++u) {
      v8f av;
      KILN_LOAD8(av, a + (k + u) * kMr);
      acc[u] += av * KILN_SPLAT8(b[(k + u) * ldb]);
    }
  }
  for (; k + 1 < kb; ++k) {
    v8f av;
    KILN_LOAD8(av, a + k * kMr);
    acc[0] += av * KILN_SPLAT8(b[k * ldb]);
  }
  if (k < kb) {
    alignas(32) float last[8] = {};
    memcpy(last, a + k * kMr, sizeof(float) * kMr);
    v8f av;
    KILN_LOAD8(av, last);
    acc[1] += av * KILN_SPLAT8(b[k * ldb]);
  }
  const v8f sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (int r = 0; r < rows; ++r) {
    const float v = accumulate ? c[r * ldc] + sum[r] : sum[r];
    c[r * ldc] = ep != nullptr ? ep->Apply(v, row0 + r, col0) : v;
  }
}

// Transposes the 8x8 block held in r[0..8) (row i becomes column i) in three rounds of
// shuffles: pairs of floats, pairs of pairs, then 128-bit halves.
inline void Transpose8x8(v8f* r) {
  v8f t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// ReLU or Clip (an Epilogue kind; anything else: v unchanged) on one vector.
template <typename V>
inline V ReluOrClip(V v, int32_t kind, V lo, V hi) {
  const V zero = {};
  if (kind == Epilogue::kRelu) return v > zero ? v : zero;
  if (kind == Epilogue::kClip) return v < lo ? lo : (v > hi ? hi : v);
  return v;
}

// The rest of ep for a tile the micro-kernel has finished in place with ep's bias only:
// C[0..rows, 0..cols) (cols a multiple of V's lanes, rows row0.. and columns col0.. of C)
// += the residual, then ReLU or Clip, while the tile is still in L1. (Adding the residual
// in the micro-kernel's registers instead took a register its K loop needed: every GEMM in
// ResNet-50 ran ~10 % slower; in a micro-kernel instance of its own, the residual convs
// ran ~10 % slower than with this pass, its loads stalling the epilogue.)
template <typename V>
inline void FinishTile(int rows, int64_t cols, float* c, int64_t ldc, const Epilogue& ep, int64_t row0, int64_t col0) {
  constexpr int64_t L = static_cast<int64_t>(sizeof(V) / sizeof(float));
  V lo, hi;
  KILN_SPLAT_V(V, lo, ep.lo);
  KILN_SPLAT_V(V, hi, ep.hi);
  for (int i = 0; i < rows; ++i) {
    float* ci = c + i * ldc;
    const float* ri = ep.residual + (row0 + i) * ep.residual_ld + col0;
    for (int64_t q = 0; q < cols; q += L) {
      V v, r;
      memcpy(&v, ci + q, sizeof(V));
      memcpy(&r, ri + q, sizeof(V));
      v = ReluOrClip(v + r, ep.kind, lo, hi);
      memcpy(ci + q, &v, sizeof(V));
    }
  }
}

// B(k, j) = b[j * ldb + k] (columns contiguous: B^T row-major, a Linear weight or an
// attention's keys) for k < kb, j < nb into dst, row-major with row stride ld. Blocks of 16
// columns by 16 of K, a column's 16 floats (one cache line) at a time, so each row of the
// block's 16 is a cache line written whole and each line of B is read once. (Column by
// column the panel went through L1 once per column; a step of K across 16 columns read 16
// lines, which at a column stride of a multiple of 4 KiB share one set of the 8-way L1 and
// evicted each other at every step: the keys of a sequence-first attention at batch 8,
// [197, 48, 64]. ViT-S/16 at batch 8, one thread: 786.9 -> 772.8 ms.)
inline void PackTransposedColumns(const float* b, int64_t ldb, int64_t kb, int64_t nb, float* dst, int64_t ld) {
  for (int64_t j0 = 0; j0 < nb; j0 += 16) {
    const int64_t jn = nb - j0 < 16 ? nb - j0 : 16;
    for (int64_t k0 = 0; k0 < kb; k0 += 16) {
      const int64_t kn = kb - k0 < 16 ? kb - k0 : 16;
      float* out = dst + k0 * ld + j0;
      for (int64_t j = 0; j < jn; ++j) {
        const float* src = b + (j0 + j) * ldb + k0;
        for (int64_t k = 0; k < kn; ++k) out[k * ld + j] = src[k];
      }
    }
  }
}

// Up to this many trailing columns take PanelColumn rather than a partial tile. Measured
// (1x1 Convs, best of 60): one column (7x7 planes: 2048->512, 320->1280) 7-8 % faster for
// the layer; four (14x14, 256->1024: a 68-position job) 6 % slower, the 8-column
// micro-kernel doing four columns' work at full width.
constexpr int64_t kPanelColumns = 2;

// The two tiles: vector type, rows, columns (two vectors of kHalf lanes).
template <bool kWide>
struct Tile {
  using V = std::conditional_t<kWide, v16f, v8f>;
  static constexpr int kRows = kWide ? kWideMr : kMr;
  static constexpr int64_t kCols = kWide ? kWideNr : kNr;
  static constexpr int64_t kHalf = kCols / 2;
};

// Block (below) on one tile.
// kResidual: ep has a residual (a separate instance, so GEMMs without one run code that
// never tests for it: those tests measured 1-3 % slower on MobileNetV2's convolutions).
template <bool kWide, bool kResidual, typename Pack>
inline void BlockTiles(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const float* a, int64_t a_row,
                       int64_t a_k, float* c, int64_t ldc, Pack& pack, int64_t a_panel, const Epilogue* ep) {
  using T = Tile<kWide>;
  using V = typename T::V;
  if (a_panel > 0) {
    a_row = 1;
    a_k = kMr;
  }
  alignas(64) float packed[kKc * kMaxNc];
  alignas(64) float edge[kKc * T::kCols];  // the last, partial tile's columns of a direct B
  const int64_t nb = n1 - n0;
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kb = K - k0 < kKc ? K - k0 : kKc;
    const int64_t packed_ld = (nb + kNc - 1) / kNc * kNc;
    int64_t ldb = packed_ld;
    const float* b = pack(k0, kb, n0, nb, packed, &ldb);
    if (b == packed && nb < packed_ld) {
      for (int64_t k = 0; k < kb; ++k) {
        for (int64_t j = nb; j < packed_ld; ++j) packed[k * packed_ld + j] = 0.f;
      }
    }
    const bool accumulate = k0 > 0;
    const Epilogue* last = k0 + kb >= K ? ep : nullptr;
    // With a residual the micro-kernel applies the bias alone and FinishTile the rest.
    Epilogue bias_only;
    const Epilogue* finish = kResidual ? last : nullptr;
    if (kResidual && finish != nullptr) bias_only.row_bias = finish->row_bias;
    const Epilogue* in_kernel = kResidual && finish != nullptr ? &bias_only : last;
    // Edge columns of a direct B, padded to a full tile once per K block.
    const int64_t full_cols = nb / T::kCols * T::kCols;
    if (b != packed && full_cols < nb) {
      for (int64_t k = 0; k < kb; ++k) {
        for (int64_t q = 0; q < T::kCols; ++q) {
          edge[k * T::kCols + q] = full_cols + q < nb ? b[k * ldb + full_cols + q] : 0.f;
        }
      }
    }
    // Row blocks of kMc rows outermost, so their A block (kMc x kb) stays in L2 while
    // every column tile goes past it; then column tiles outside, rows inside: one tile-wide
    // slice of B stays in L1 while the block's rows go past it.
    for (int64_t mb = m0; mb < m1; mb += kMc) {
      const int64_t mb1 = m1 - mb < kMc ? m1 : mb + kMc;
      for (int64_t j = 0; j < nb; j += T::kCols) {
        const int64_t cols = nb - j < T::kCols ? nb - j : T::kCols;
        const bool direct_edge = b != packed && cols < T::kCols;
        const float* bj = direct_edge ? edge : b + j;
        const int64_t ldbj = direct_edge ? T::kCols : ldb;
        for (int64_t i = mb; i < mb1; i += T::kRows) {
          const int rows = static_cast<int>(mb1 - i < T::kRows ? mb1 - i : T::kRows);
          const float* ai = a_panel > 0 ? a + i / kMr * a_panel + k0 * kMr : a + i * a_row + k0 * a_k;
          const float* ai_hi = a_panel > 0 ? ai + a_panel : ai + kMr * a_row;  // rows kMr.. (wide tile)
          float* cij = c + i * ldc + n0 + j;
          if (kResidual && finish != nullptr) {
            // The residual tile is read right after the product: fetch it during it (its
            // rows lie far apart, which the hardware prefetcher does not follow).
            for (int r = 0; r < rows; ++r) {
              const float* ri = finish->residual + (i + r) * finish->residual_ld + n0 + j;
              for (int64_t q = 0; q < cols; q += 16) __builtin_prefetch(ri + q);
            }
          }
          if (cols == T::kCols) {
            MicroKernelRows<V, 2>(rows, kb, ai, ai_hi, a_row, a_k, bj, bj + T::kHalf, ldbj, cij, ldc, accumulate,
                                  in_kernel, i);
            if (kResidual && finish != nullptr) FinishTile<V>(rows, T::kCols, cij, ldc, *finish, i, n0 + j);
            continue;
          }
          // The last columns: one vector's worth in place (7x7 planes, 49 positions, end in
          // 16 + 1 on the wide tile: a two-vector tile there did 32 columns' work for 17),
          // then the remaining few as panel columns, or a partial tile.
          int64_t q0 = 0;
          if (cols >= T::kHalf && (cols - T::kHalf <= kPanelColumns || cols == T::kHalf) &&
              (a_panel > 0 || cols == T::kHalf)) {
            MicroKernelRows<V, 1>(rows, kb, ai, ai_hi, a_row, a_k, bj, bj, ldbj, cij, ldc, accumulate, in_kernel, i);
            if (kResidual && finish != nullptr) FinishTile<V>(rows, T::kHalf, cij, ldc, *finish, i, n0 + j);
            q0 = T::kHalf;
          }
          if (q0 == cols) continue;
          if (a_panel > 0 && cols - q0 <= kPanelColumns) {
            for (int64_t q = q0; q < cols; ++q) {
              PanelColumn(rows < kMr ? rows : kMr, kb, ai, bj + q, ldbj, cij + q, ldc, accumulate, last, i, n0 + j + q);
              if (rows > kMr) {
                PanelColumn(rows - kMr, kb, ai_hi, bj + q, ldbj, cij + kMr * ldc + q, ldc, accumulate, last, i + kMr,
                            n0 + j + q);
              }
            }
            continue;
          }
          // A partial tile: work on a copy one or two vectors wide (the padded B columns
          // are zero), then write back the valid columns (and finish them: a residual has
          // only those).
          const int64_t width = cols <= T::kHalf ? T::kHalf : T::kCols;
          alignas(64) float tile[T::kRows * T::kCols];
          for (int r = 0; r < rows; ++r) {
            for (int64_t q = 0; q < width; ++q) tile[r * width + q] = accumulate && q < cols ? cij[r * ldc + q] : 0.f;
          }
          if (width == T::kHalf) {
            MicroKernelRows<V, 1>(rows, kb, ai, ai_hi, a_row, a_k, bj, bj, ldbj, tile, width, accumulate, in_kernel, i);
          } else {
            MicroKernelRows<V, 2>(rows, kb, ai, ai_hi, a_row, a_k, bj, bj + T::kHalf, ldbj, tile, width, accumulate,
                                  in_kernel, i);
          }
          for (int r = 0; r < rows; ++r) {
            for (int64_t q = 0; q < cols; ++q) cij[r * ldc + q] = tile[r * width + q];
          }
          if (kResidual && finish != nullptr) {
            for (int r = 0; r < rows; ++r) {
              for (int64_t q = 0; q < cols; ++q)
                cij[r * ldc + q] = finish->AfterBias(cij[r * ldc + q], i + r, n0 + j + q);
            }
          }
        }
      }
    }
  }
}

// Computes C rows [m0, m1) x columns [n0, n1) (n1 - n0 <= kMaxNc) over the whole K, on
// the target's tile (WideVectors()).
// A(i, k) = a[i * a_row + k * a_k]; C(i, j) = c[i * ldc + j].
// pack(k0, kb, n0, nb, dst, &ldb) returns where B(k0 + k, n0 + j) is for k < kb, j < nb:
// either dst, filled with row stride *ldb (as Block sets it: the job width rounded up to a
// multiple of kNc), or (when B already lies row-major in memory, as
// for a 1x1 Conv) a pointer into B itself with its row stride. The core pads as needed.
// A in panels (a_panel > 0): rows come in groups of kMr, each group k-major ([K][kMr], the
// layout ops/nn_ops.cc pre-packs constant Conv weights into), a_panel floats apart; then
// A(i, k) = a[(i / kMr) * a_panel + k * kMr + i % kMr] and a_row, a_k are ignored. m0 must
// then be a multiple of kMr. One sequential stream per row half instead of kMr.
// ep (null: none) is applied once, after the last K block.
template <typename Pack>
inline void Block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const float* a, int64_t a_row, int64_t a_k,
                  float* c, int64_t ldc, Pack& pack, int64_t a_panel = 0, const Epilogue* ep = nullptr) {
  if (WideVectors()) {
    if (ep != nullptr && ep->residual != nullptr) {
      BlockTiles<true, true>(m0, m1, n0, n1, K, a, a_row, a_k, c, ldc, pack, a_panel, ep);
    } else {
      BlockTiles<true, false>(m0, m1, n0, n1, K, a, a_row, a_k, c, ldc, pack, a_panel, ep);
    }
  } else {
    if (ep != nullptr && ep->residual != nullptr) {
      BlockTiles<false, true>(m0, m1, n0, n1, K, a, a_row, a_k, c, ldc, pack, a_panel, ep);
    } else {
      BlockTiles<false, false>(m0, m1, n0, n1, K, a, a_row, a_k, c, ldc, pack, a_panel, ep);
    }
  }
}

// PanelBlock (below) on one tile.
// Columns of B per chunk when A is packed: a kKc x 256 block of B panels (256 KiB) stays in
// L2 beside the packed A block (kMc x kKc, 240 KiB).
constexpr int64_t kPanelChunk = 256;
// PanelBlock's default for what follows a finished block of rows: nothing.
struct NoFinish {
  void operator()(int64_t, int64_t) const {}
};
template <bool kWide, bool kPackA, typename Finish>
inline void PanelBlockTiles(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const float* a, int64_t lda,
                            const float* panels, float* c, int64_t ldc, const Finish& finish, int64_t panel_k,
                            bool accumulate) {
  using T = Tile<kWide>;
  using V = typename T::V;
  // kPackA: A's rows lie a multiple of 4 KiB apart (K = 1024 or 3072 floats), so a tile's 12
  // rows fall in one set of the 8-way L1 and evict each other while the micro-kernel walks
  // them. Each kMc x kKc block of A is then first copied into kMr-row panels (k-major, the
  // layout BlockTiles' a_panel reads), once for every column of [n0, n1).
  alignas(64) float block[kPackA ? (kMc + kMr) * kKc : 1];
  const int64_t a_row = kPackA ? 1 : lda, a_k = kPackA ? kMr : 1;
  const int64_t kc = m1 - m0 <= kFewPanelRows ? kFewRowsKc : kKc;
  for (int64_t mb = m0; mb < m1; mb += kMc) {
    const int64_t mb1 = m1 - mb < kMc ? m1 : mb + kMc;
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
      const int64_t kb = K - k0 < kc ? K - k0 : kc;
      // C[i.., j..] over this K block: rows i.. of the block, the column tile at j.
      auto tile = [&](int64_t i, int64_t j) {
        const int r = static_cast<int>(mb1 - i < T::kRows ? mb1 - i : T::kRows);
        const float* b = panels + (j / kNr) * panel_k * kNr + k0 * kNr;
        // The narrow tile's two vectors lie in one panel; the wide tile's in two.
        const float* b_second = kWide ? b + panel_k * kNr : b + T::kHalf;
        const float* ai = kPackA ? block + (i - mb) / kMr * kb * kMr : a + i * lda + k0;
        const float* ai_hi = kPackA ? ai + kb * kMr : ai + kMr * lda;  // rows kMr.. (wide tile)
        // The next column tile's B at this K block (or the first tile's at the next block),
        // fetched while this one computes: B comes from memory where the rows are few (a
        // Winograd point's U over a 14x14 map's 16 tiles is read by two row tiles).
        const int64_t jn = j + T::kCols < n1 ? j + T::kCols : n0, kn = j + T::kCols < n1 ? k0 : k0 + kb;
        const float* b_next = kn < K ? panels + (jn / kNr) * panel_k * kNr + kn * kNr : nullptr;
        const bool add = accumulate || k0 > 0;
        if (j + T::kCols <= n1) {
          MicroKernelRows<V, 2>(r, kb, ai, ai_hi, a_row, a_k, b, b_second, kNr, c + i * ldc + j, ldc, add, nullptr, 0,
                                b_next);
        } else {  // the wide tile's last 16 columns
          MicroKernelRows<V, 1>(r, kb, ai, ai_hi, a_row, a_k, b, b, kNr, c + i * ldc + j, ldc, add, nullptr, 0, b_next);
        }
      };
      if constexpr (kPackA) {
        // A panel at a time, k outer, so the copy writes one contiguous run (row by row, it
        // wrote every kMr-th float: 1024^3 took 3 % longer).
        for (int64_t p0 = 0; p0 < mb1 - mb; p0 += kMr) {
          float* dst = block + p0 * kb;
          const float* src[kMr];
          for (int q = 0; q < kMr; ++q) src[q] = mb + p0 + q < mb1 ? a + (mb + p0 + q) * lda + k0 : nullptr;
          if (mb + p0 + kMr <= mb1) {
            for (int64_t k = 0; k < kb; ++k) {
              for (int q = 0; q < kMr; ++q) dst[k * kMr + q] = src[q][k];
            }
          } else {
            for (int64_t k = 0; k < kb; ++k) {
              for (int q = 0; q < kMr; ++q) dst[k * kMr + q] = src[q] != nullptr ? src[q][k] : 0.f;
            }
          }
        }
        // Then row tiles outside and a chunk's column tiles inside: a tile's A micro-panel
        // (12 KiB) stays in L1 while the chunk's B panels stream past it from L2. The other
        // way round the B micro-panel (kKc x 32 floats) is all of a 32 KiB L1 and the A
        // micro-panel evicts it (1024^3, one thread, Zen 4, medians of 5 alternations:
        // 21.0 -> 20.2 ms, with the copy above from 21.7).
        for (int64_t jc = n0; jc < n1; jc += kPanelChunk) {
          const int64_t jc1 = n1 - jc < kPanelChunk ? n1 : jc + kPanelChunk;
          for (int64_t i = mb; i < mb1; i += T::kRows) {
            for (int64_t j = jc; j < jc1; j += T::kCols) tile(i, j);
          }
        }
      } else {
        // Column tiles outside, rows inside: one K block of a panel in L1 while the block's
        // rows go past it.
        for (int64_t j = n0; j < n1; j += T::kCols) {
          for (int64_t i = mb; i < mb1; i += T::kRows) tile(i, j);
        }
      }
      if (k0 + kb >= K) finish(mb, mb1);
    }
  }
}

// A's rows a multiple of 4 KiB apart: PanelBlockTiles copies A into panels first.
inline bool AliasedRows(int64_t lda) { return lda % 1024 == 0; }

// C[m0..m1, n0..n1) = A[m0..m1, 0..K) · B where B is pre-packed in 16-column panels,
// [N/16][K][16] (N, n0, n1 multiples of 16): a constant weight packed at compile time
// (MatMul's B, Winograd's U), so nothing is copied at run time and each micro-kernel
// streams one contiguous panel (the wide tile two). Rows in blocks of kMc (A in L2); the
// loop order within a block depends on whether A is copied (PanelBlockTiles). finish(r0,
// r1) runs on each block of rows [r0, r1) of C once it is complete, while the block is
// still in L2 (MatMul's bias and activation: a pass over all of C after the product read
// it back from memory: [12800 x 96] x [96 x 384] + bias 12.3 -> 10.0 ms, one thread).
// A slice of a longer K: the panels hold panel_k rows each (panels points at the slice's
// first row of panel 0) and, with `accumulate`, the product adds to C.
template <typename Finish = NoFinish>
inline void PanelBlock(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const float* a, int64_t lda,
                       const float* panels, float* c, int64_t ldc, const Finish& finish = Finish(), int64_t panel_k = 0,
                       bool accumulate = false) {
  const bool pack = AliasedRows(lda);
  const int64_t pk = panel_k > 0 ? panel_k : K;
  if (WideVectors()) {
    if (pack) return PanelBlockTiles<true, true>(m0, m1, n0, n1, K, a, lda, panels, c, ldc, finish, pk, accumulate);
    PanelBlockTiles<true, false>(m0, m1, n0, n1, K, a, lda, panels, c, ldc, finish, pk, accumulate);
  } else {
    if (pack) return PanelBlockTiles<false, true>(m0, m1, n0, n1, K, a, lda, panels, c, ldc, finish, pk, accumulate);
    PanelBlockTiles<false, false>(m0, m1, n0, n1, K, a, lda, panels, c, ldc, finish, pk, accumulate);
  }
}

// Jobs for a problem of M x N: column chunks of kNc times row groups.
inline int64_t ColumnChunks(int64_t n) { return (n + kNc - 1) / kNc; }
// Rows of C per job. Each job packs its own block of B, so splitting M re-packs B once
// per row group: worth it only to give threads work. Serially (no parallel_for), or when
// the other job dimensions (column chunks, batch, groups) already give kMinJobs jobs, a
// job takes every row; otherwise the rows' tiles split as evenly as whole tiles allow into
// enough groups for kMinJobs jobs. The pool partitions jobs statically, so uneven groups
// leave a thread idle: fixed 144-row groups left a 160-row layer at 7x7 as jobs of 144
// and 16 rows, and equal groups rounded up to the wide tile's 12 rows split 512 rows as
// 7 x 72 + 8 (two threads: 288 against 224 rows); now 5 or 6 tiles each.
constexpr int64_t kMinJobs = 8;
struct RowSplit {
  int64_t m = 0, tm = kMr, tiles = 1, groups = 1;
  // Rows [Begin(g), Begin(g + 1)) are row group g's; Begin(groups) == m.
  int64_t Begin(int64_t g) const {
    const int64_t r = g * tiles / groups * tm;
    return r < m ? r : m;
  }
};
inline RowSplit SplitRows(const kiln_kcall* call, int64_t m, int64_t other_jobs) {
  const bool parallel = call->exec != nullptr && call->exec->parallel_for != nullptr;
  RowSplit split;
  split.m = m;
  split.tm = WideVectors() ? kWideMr : kMr;  // the tile's rows: groups start on a tile
  split.tiles = m > 0 ? (m + split.tm - 1) / split.tm : 1;
  if (parallel && other_jobs < kMinJobs) {
    const int64_t wanted = (kMinJobs + other_jobs - 1) / other_jobs;
    split.groups = wanted < split.tiles ? wanted : split.tiles;
  }
  return split;
}

// The jobs of an implicit-GEMM convolution (the f32 conv, conv.cc, and the bf16 one,
// bf16.cc): per image and group, the output positions in `chunks` column chunks of equal
// width `cols` (a multiple of the tile's `unit` columns, from a first choice of `cols`),
// times the row groups of SplitRows. Equal widths because the pool partitions jobs
// statically: a short last chunk (784 positions as 3 x 256 + 16) left one of two threads
// with 272 columns against 512. With a pool and a real im2col (a window larger than 1x1),
// at least two chunks once there are 128 positions, so two threads pack different halves
// of it rather than each packing all of it (1x1 convs copy B cheaply and would stream their
// weights once per chunk instead: ResNet-50's 14x14 ones measured 20 % slower split).
// Jobs are numbered row group fastest, and a range's consecutive row groups of one chunk
// run as one block (Next), so a thread packs the chunk's im2col once rather than once per
// row group: with 2 threads, ResNet-50's stride-2 3x3 conv into 7x7 packed its 4608 x 49
// im2col 8 times (one chunk split into 8 row groups) and ran 1.09x faster than on one.
struct ConvJobs {
  int64_t cols = 0, chunks = 1, group = 1;
  RowSplit split;
  int64_t Count(int64_t batch) const { return batch * group * split.groups * chunks; }
  // Image n, group g, column chunk cc and the row groups [rg, rg + taken) of the job at
  // *job, the range ending at `end`; *job moves past them.
  struct Job {
    int64_t n, g, cc, rg, taken;
  };
  Job Next(int64_t* job, int64_t end) const {
    const int64_t groups = split.groups, j = *job;
    Job out;
    out.rg = j % groups;
    out.cc = j / groups % chunks;
    out.g = j / (groups * chunks) % group;
    out.n = j / (groups * chunks * group);
    out.taken = (j - out.rg + groups < end ? j - out.rg + groups : end) - j;
    *job = j + out.taken;
    return out;
  }
};
inline ConvJobs SplitConvJobs(const kiln_kcall* call, int64_t out_size, int64_t rows, int64_t cols, int64_t unit,
                              int64_t kernel_size, int64_t batch, int64_t group) {
  const bool parallel = call->exec != nullptr && call->exec->parallel_for != nullptr;
  ConvJobs jobs;
  jobs.group = group;
  jobs.chunks = (out_size + cols - 1) / cols;
  if (parallel && jobs.chunks == 1 && out_size >= 128 && kernel_size > 1) jobs.chunks = 2;
  jobs.cols = ((out_size + jobs.chunks - 1) / jobs.chunks + unit - 1) / unit * unit;
  jobs.chunks = (out_size + jobs.cols - 1) / jobs.cols;
  jobs.split = SplitRows(call, rows, jobs.chunks * batch * group);
  return jobs;
}

}  // namespace gemm
}  // namespace kiln_kernels
