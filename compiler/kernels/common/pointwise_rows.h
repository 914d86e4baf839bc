// 1x1 convolutions with few output channels over large planes (SqueezeNet's 64->16 and
// 128->16 squeezes and 16->64 expands over 55x55), outside the implicit GEMM: register
// tiles of output channels x vectors of positions, X read in place with prefetches.
#pragma once

#include "gemm_core.h"
#include "kernel_common.h"
#include "unary_math.h"

namespace kiln_kernels {

// Why not the implicit GEMM: with M = 16 its 12-row tile runs as 12 + 4 rows, and over
// 55x55 planes X is copied into its packed block (reading 64 or 128 input rows 12 KiB
// apart in place left each tile waiting on L3): the copy was a third of the conv's time.
// Here X is read in place, each input row prefetched kPointwisePrefetch floats ahead of
// the tile reading it. Up to kPointwiseOneGroupRows output channels form one register
// tile over one vector of positions (all of C's rows: X's vector is loaded once); more
// go in groups of kPointwiseRows x kPointwiseVectors vectors, a block of positions at a
// time so the groups after the first read its input rows from L1. Measured alone (one
// thread, batch 8, medians of 5 alternations against the GEMM): 64->16 and 128->16 over
// 55x55 0.63x and 0.61x the time as 16 x 1 (0.67x and 0.70x as 8 x 3), 16->64 0.73x as
// 8 x 3 (0.88x as 16 x 1). Over 27x27 (128->32, 256->32) the GEMM reading X in place was
// 1.4x faster, hence the plane size floor (kDirectPlaneMax). More rows (64->128 and 64->256
// over 56x56, ResNeXt-50's first stage) measured 1.0-1.1x the GEMM's time: it keeps those.
// Without the prefetches, 128->16 and MobileNetV2's 32->16 over 112x112 ran 1.7-1.8x as long;
// 256 floats ahead was no better than 128 (0.93-1.18x). Whole models, one thread, CPU time
// per run differenced from runs of 2 and 22 iterations (perf task-clock), medians of 3
// alternations: SqueezeNet 1.1 at batch 8 0.98x and batch 1 0.97x, MobileNetV2 0.98x, ResNet-50
// (its 64->64 and 256->64 over 56x56) and GoogLeNet 0.97-1.00x at batch 1 and 8.
constexpr int kPointwiseOneGroupRows = 16;       // output channels in one register tile
constexpr int kPointwiseRows = 8;                // output channels per register tile of a group
constexpr int kPointwiseVectors = 3;             // vectors of positions per register tile of a group
constexpr int64_t kPointwiseMaxRows = 64;        // output channels in all; more: the GEMM
constexpr int64_t kPointwiseMaxK = 512;          // input channels
constexpr int64_t kPointwiseMaxWeights = 16384;  // output x input channels (the transposed weight: 64 KiB)
constexpr int64_t kPointwisePrefetch = 128;      // floats ahead in each input row (8 lines)
constexpr int64_t kPointwiseChunk = 512;         // positions per job (equal widths, whole tiles)
constexpr int64_t kPointwiseBlockFloats = 4096;  // input floats per block of positions (16 KiB: in L1)

// What happens to a tile after its sums: the bias (in the initial value), a residual laid
// out as Y, then ReLU or Clip (gemm::Epilogue's kinds; other activations run after).
struct PointwiseEpilogue {
  const float* bias = nullptr;      // per output channel of the tile; null: none
  const float* residual = nullptr;  // at the tile's first channel and position; null: none
  int32_t kind = gemm::Epilogue::kNone;
  float lo = 0.f, hi = 0.f;
};

// Y[r * ldy + 0..NV * L) for r < R = sum_k wt[k * R + r] * X[k * ldx + 0..NV * L) (+ the
// epilogue).
template <typename V, int R, int NV>
__attribute__((always_inline)) inline void PointwiseTile(const float* x, int64_t ldx, int64_t K, const float* wt,
                                                         const PointwiseEpilogue& ep, float* y, int64_t ldy) {
#ifdef __clang__
#pragma clang fp contract(fast)  // as the GEMM core's micro-kernel (gemm_core.h)
#endif
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  V acc[R][NV];
  for (int r = 0; r < R; ++r) {
    V b;
    KILN_SPLAT_V(V, b, ep.bias != nullptr ? ep.bias[r] : 0.f);
    for (int v = 0; v < NV; ++v) acc[r][v] = b;
  }
  for (int64_t k = 0; k < K; ++k) {
    const float* row = x + k * ldx;
    __builtin_prefetch(row + kPointwisePrefetch);
    V b[NV];
    for (int v = 0; v < NV; ++v) memcpy(&b[v], row + v * L, sizeof(V));
    const float* wk = wt + k * R;
    for (int r = 0; r < R; ++r) {
      V w;
      KILN_SPLAT_V(V, w, wk[r]);
      for (int v = 0; v < NV; ++v) acc[r][v] += w * b[v];
    }
  }
  V lo, hi;
  KILN_SPLAT_V(V, lo, ep.lo);
  KILN_SPLAT_V(V, hi, ep.hi);
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) {
      V out = acc[r][v];
      if (ep.residual != nullptr) {
        V res;
        memcpy(&res, ep.residual + r * ldy + v * L, sizeof(V));
        out += res;
      }
      out = gemm::ReluOrClip(out, ep.kind, lo, hi);
      memcpy(y + r * ldy + v * L, &out, sizeof(V));
    }
  }
}

// Positions [p0, p1) of one image for R output channels: whole vectors in registers, the
// last few (fewer than a vector) one at a time.
template <typename V, int R, int NV>
__attribute__((noinline)) void PointwiseRowsRun(const float* x, int64_t ldx, int64_t K, const float* wt,
                                                const PointwiseEpilogue& ep, float* y, int64_t ldy, int64_t p0,
                                                int64_t p1) {
#ifdef __clang__
#pragma clang fp contract(fast)
#endif
  constexpr int64_t L = static_cast<int64_t>(sizeof(V) / sizeof(float));
  int64_t p = p0;
  for (; p + NV * L <= p1; p += NV * L) {
    PointwiseEpilogue at = ep;
    if (ep.residual != nullptr) at.residual = ep.residual + p;
    PointwiseTile<V, R, NV>(x + p, ldx, K, wt, at, y + p, ldy);
  }
  for (; p + L <= p1; p += L) {
    PointwiseEpilogue at = ep;
    if (ep.residual != nullptr) at.residual = ep.residual + p;
    PointwiseTile<V, R, 1>(x + p, ldx, K, wt, at, y + p, ldy);
  }
  for (; p < p1; ++p) {
    for (int r = 0; r < R; ++r) {
      float sum = ep.bias != nullptr ? ep.bias[r] : 0.f;
      for (int64_t k = 0; k < K; ++k) sum += wt[k * R + r] * x[k * ldx + p];
      if (ep.residual != nullptr) sum += ep.residual[r * ldy + p];
      if (ep.kind == gemm::Epilogue::kRelu) sum = sum > 0.f ? sum : 0.f;
      if (ep.kind == gemm::Epilogue::kClip) sum = sum < ep.lo ? ep.lo : (sum > ep.hi ? ep.hi : sum);
      y[r * ldy + p] = sum;
    }
  }
}

// PointwiseRowsRun for a run-time row count 1..kPointwiseOneGroupRows: up to
// kPointwiseRows rows over kPointwiseVectors vectors, more over one.
template <typename V>
inline void PointwiseRows(int rows, const float* x, int64_t ldx, int64_t K, const float* wt,
                          const PointwiseEpilogue& ep, float* y, int64_t ldy, int64_t p0, int64_t p1) {
#define KILN_PW_CASE(R) \
  case R: PointwiseRowsRun<V, R, R <= kPointwiseRows ? kPointwiseVectors : 1>(x, ldx, K, wt, ep, y, ldy, p0, p1); break
  switch (rows) {
    KILN_PW_CASE(16);
    KILN_PW_CASE(15);
    KILN_PW_CASE(14);
    KILN_PW_CASE(13);
    KILN_PW_CASE(12);
    KILN_PW_CASE(11);
    KILN_PW_CASE(10);
    KILN_PW_CASE(9);
    KILN_PW_CASE(8);
    KILN_PW_CASE(7);
    KILN_PW_CASE(6);
    KILN_PW_CASE(5);
    KILN_PW_CASE(4);
    KILN_PW_CASE(3);
    KILN_PW_CASE(2);
    default: PointwiseRowsRun<V, 1, kPointwiseVectors>(x, ldx, K, wt, ep, y, ldy, p0, p1); break;
  }
#undef KILN_PW_CASE
}

}  // namespace kiln_kernels
