// Convolutions over few input channels: CNN stems (3x3 or 7x7 over RGB, stride 2), whose
// implicit GEMM has a K of 27 to 147 too short to pay for packing its im2col rows, so it
// ran below ONNX Runtime. Here, per job of (image, output rows), the input rows the job
// reads are copied once, zero-padded, into stride x stride phase planes (padded row % s,
// column % s) of width `width`, so tap (kh, kw) of output (oh, ow) reads position
// (oh - oh0 + kh / s) * width + ow + kw / s of phase (kh % s, kw % s): consecutive output
// columns read one contiguous run, one unaligned vector load per tap. Register blocks of
// ROWS output channels x up to VECS vectors of one output row take every input channel
// and tap with the weight broadcast, then store to Y directly with the bias, the residual
// and ReLU or Clip applied in registers. Included by conv/conv.cc (ConvKernel::Run dispatches).
#pragma once

#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_window.h"
#include "unary_math.h"

namespace kiln_kernels {

constexpr int64_t kStemMaxChannels = 4;       // input channels
constexpr int64_t kStemMaxKernel = 7;         // taps per axis
constexpr int64_t kStemPlaneFloats = 16384;   // one job's phase planes (64 KiB)
constexpr int64_t kStemWeightFloats = 16384;  // the weights, repacked per thread
constexpr int64_t kStemJobRows = 8;           // output rows per job at most
constexpr int64_t kStemMaxOutChannels = 256;

// The shape of one job's phase planes for vectors of `lanes` floats: stride, width (every
// vector of an output row plus the taps' reach), output rows per job, rows per phase plane.
struct StemPlanes {
  int64_t s, width, job_rows, rows, phase_stride;
  StemPlanes(const Window& w, int64_t lanes, int64_t channels) {
    s = w.stride[2];
    width = (w.out[2] + lanes - 1) / lanes * lanes + (w.kernel[2] - 1) / s;
    const int64_t reach = (w.kernel[1] - 1) / s;
    const int64_t fit = kStemPlaneFloats / (channels * s * s * width) - reach;
    job_rows = fit < kStemJobRows ? fit : kStemJobRows;
    rows = job_rows + reach;
    phase_stride = rows * width;
  }
  int64_t channel_stride() const { return s * s * phase_stride; }
};

inline bool StemFits(const Window& w, const kiln_ktensor& x, const kiln_ktensor& y, int64_t group) {
  if (x.rank != 4 || group != 1 || x.dims[1] > kStemMaxChannels || y.dims[1] > kStemMaxOutChannels) return false;
  if (y.dims[1] < 1 || x.dims[1] < 1) return false;
  if (w.kernel[0] != 1 || w.kernel[1] * w.kernel[2] == 1) return false;  // 1x1: the GEMM's pointwise paths
  const int64_t s = w.stride[2];
  if (w.stride[1] != s || (s != 1 && s != 2) || w.dilation[1] != 1 || w.dilation[2] != 1) return false;
  if (w.pad[1] < 0 || w.pad[2] < 0 || w.kernel[1] > kStemMaxKernel || w.kernel[2] > kStemMaxKernel) return false;
  const int64_t K = x.dims[1] * w.kernel[1] * w.kernel[2];
  constexpr int64_t kWideRows = 8;  // the most rows a register block pads the channels to
  if ((y.dims[1] + kWideRows - 1) / kWideRows * kWideRows * K > kStemWeightFloats) return false;
  return StemPlanes(w, 16, x.dims[1]).job_rows >= 1 && StemPlanes(w, 8, x.dims[1]).job_rows >= 1;
}

// Columns [0, count) of one input row (padded to the left by `left`) into row `row` of the
// phase planes: column iw lands at padded column iw + left, phase (iw + left) % s, position
// (iw + left) / s, clipped to the plane's width. Stride 2 splits the row into its even and
// odd columns eight at a time.
inline void StemFillRow(const float* src, int64_t count, int64_t left, const StemPlanes& p, float* row) {
  if (p.s == 1) {
    const int64_t cols = count < p.width - left ? count : p.width - left;
    if (cols > 0) memcpy(row + left, src, sizeof(float) * cols);
    return;
  }
  // Even columns iw = 2j go to phase left % 2 at j + left / 2, odd ones to the other phase
  // at j + (left + 1) / 2.
  float* even = row + left % 2 * p.phase_stride + left / 2;
  float* odd = row + (left + 1) % 2 * p.phase_stride + (left + 1) / 2;
  const int64_t even_count = (count + 1) / 2 < p.width - left / 2 ? (count + 1) / 2 : p.width - left / 2;
  const int64_t odd_count = count / 2 < p.width - (left + 1) / 2 ? count / 2 : p.width - (left + 1) / 2;
  int64_t j = 0;
  for (; 2 * j + 16 <= count && j + 8 <= odd_count; j += 8) {
    gemm::v8f a, b;
    KILN_LOAD8(a, src + 2 * j);
    KILN_LOAD8(b, src + 2 * j + 8);
    const gemm::v8f e = EvenLanes(a, b), o = OddLanes(a, b);
    KILN_STORE8(even + j, e);
    KILN_STORE8(odd + j, o);
  }
#pragma clang loop vectorize(disable)
  for (int64_t e = j; e < even_count; ++e) even[e] = src[2 * e];
#pragma clang loop vectorize(disable)
  for (int64_t o = j; o < odd_count; ++o) odd[o] = src[2 * o + 1];
}

// The phase planes of output rows [oh0, oh0 + rows) of one image x ([C][H][W]).
inline void StemFillPlanes(const float* x, int64_t channels, const Window& w, const StemPlanes& p, int64_t oh0,
                           int64_t rows, float* planes) {
  const int64_t H = w.in[1], W = w.in[2], s = p.s;
  memset(planes, 0, sizeof(float) * channels * p.channel_stride());
  // Padded row oh0 * s + pr (pr < the rows the job reads) goes to phase pr % s, row pr / s.
  const int64_t padded_rows = (rows - 1) * s + w.kernel[1];
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t pr = 0; pr < padded_rows; ++pr) {
      const int64_t ih = oh0 * s + pr - w.pad[1];
      if (ih < 0 || ih >= H) continue;
      float* row = planes + c * p.channel_stride() + pr % s * s * p.phase_stride + pr / s * p.width;
      StemFillRow(x + (c * H + ih) * W, W, w.pad[2], p, row);
    }
  }
}

// The epilogue's inputs: Y's plane size (floats), ReLU or Clip on the accumulators (clamp:
// max(lo, sum), then min(hi, ..) where `upper`: Clip; ReLU has no upper bound to apply).
struct StemEpilogue {
  int64_t plane;
  bool clamp, upper;
  float lo, hi;
};

// StemBlock's store where a row has fewer than the block's columns (`valid`): the
// accumulators tile[i * vecs + v], as StemBlock stores them, a lane at a time. Not inlined
// (rare; an inline copy of n floats made clang call memmove for every vector).
template <typename V>
__attribute__((noinline)) void StemStorePart(const V* tile, int64_t row_count, int64_t vecs, int64_t rows,
                                             int64_t valid, const StemEpilogue& ep, const V& lo, const V& hi,
                                             const float* r, float* y) {
  constexpr int64_t L = static_cast<int64_t>(sizeof(V) / sizeof(float));
  for (int64_t i = 0; i < row_count && i < rows; ++i) {
    for (int64_t v = 0; v < vecs; ++v) {
      V a = tile[i * vecs + v];
      for (int64_t j = 0; j < L && v * L + j < valid; ++j) {
        float x = a[j] + (r != nullptr ? r[i * ep.plane + v * L + j] : 0.f);
        if (ep.clamp) x = x < lo[0] ? lo[0] : x;
        if (ep.upper) x = x > hi[0] ? hi[0] : x;
        y[i * ep.plane + v * L + j] = x;
      }
    }
  }
}

// One register block: ROWS output channels (packed weights wb[k * ROWS + r]) x VECS
// vectors of output columns, over every tap k (x + tap_offset[k]: the block's first
// column). `valid` columns and `rows` channels of it are stored, at y (the block's first
// channel and column; at r the residual's).
template <typename V, int ROWS, int VECS, bool ALL_ROWS>
__attribute__((always_inline)) inline void StemBlock(const float* x, const int64_t* tap_offset, int64_t K,
                                                     const float* wb, const float* bias, int64_t rows, int64_t valid,
                                                     const StemEpilogue& ep, const float* r, float* y) {
#ifdef __clang__
#pragma clang fp contract(fast)  // a Conv's sums are reassociated anyway (see MicroKernel)
#endif
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  V acc[ROWS][VECS];
  for (int i = 0; i < ROWS; ++i) {
    V b;
    KILN_SPLAT_V(V, b, bias[i]);
    for (int v = 0; v < VECS; ++v) acc[i][v] = b;
  }
  for (int64_t k = 0; k < K; ++k) {
    const float* at = x + tap_offset[k];
    V xv[VECS];
    for (int v = 0; v < VECS; ++v) memcpy(&xv[v], at + v * L, sizeof(V));
    for (int i = 0; i < ROWS; ++i) {
      V wv;
      KILN_SPLAT_V(V, wv, wb[k * ROWS + i]);
      for (int v = 0; v < VECS; ++v) acc[i][v] += wv * xv[v];
    }
  }
  V lo, hi;
  KILN_SPLAT_V(V, lo, ep.lo);
  KILN_SPLAT_V(V, hi, ep.hi);
  if (valid < VECS * L) {  // a row narrower than the block: through a copy (acc's address must not escape)
    V tile[ROWS][VECS];
    for (int i = 0; i < ROWS; ++i) {
      for (int v = 0; v < VECS; ++v) tile[i][v] = acc[i][v];
    }
    StemStorePart<V>(&tile[0][0], ROWS, VECS, rows, valid, ep, lo, hi, r, y);
    return;
  }
  for (int i = 0; i < ROWS; ++i) {
    if (!ALL_ROWS && i >= rows) break;
    for (int v = 0; v < VECS; ++v) {
      V a = acc[i][v];
      const int64_t at = i * ep.plane + v * L;
      if (r != nullptr) {
        V res;
        memcpy(&res, r + at, sizeof(V));
        a += res;
      }
      if (ep.clamp) a = a < lo ? lo : a;
      if (ep.upper) a = a > hi ? hi : a;
      memcpy(y + at, &a, sizeof(V));
    }
  }
}

// One output row of one block of ROWS channels: its vectors split into blocks of at most
// kStemVecs, as even as they go (7 vectors: 3, 2, 2), so no block runs with one vector,
// whose ROWS weight broadcasts would feed only ROWS products.
template <typename V, int ROWS, int MAX_VECS, bool ALL_ROWS>
__attribute__((always_inline)) inline void StemRow(const float* x, const int64_t* tap_offset, int64_t K,
                                                   const float* wb, const float* bias, int64_t rows, int64_t OW,
                                                   const StemEpilogue& ep, const float* r, float* y) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  const int64_t vectors = (OW + L - 1) / L;
  const int64_t blocks = (vectors + MAX_VECS - 1) / MAX_VECS;
  int64_t v0 = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t count = vectors / blocks + (b < vectors % blocks ? 1 : 0);
    int64_t c0 = v0 * L, valid = OW - c0 < count * L ? OW - c0 : count * L;
    // A last block that ends past the row moves left to end at its end, recomputing a few
    // columns of the block before (the same sums, stored again): whole vector stores. Not
    // with a residual, which may be Y itself (in place) and hold those columns' results.
    if (valid < count * L && OW >= count * L && r == nullptr) {
      c0 = OW - count * L;
      valid = count * L;
    }
    const float* rb = r != nullptr ? r + c0 : nullptr;
    if (MAX_VECS >= 4 && count == 4) {
      StemBlock<V, ROWS, 4, ALL_ROWS>(x + c0, tap_offset, K, wb, bias, rows, valid, ep, rb, y + c0);
    } else if (count == 3) {
      StemBlock<V, ROWS, 3, ALL_ROWS>(x + c0, tap_offset, K, wb, bias, rows, valid, ep, rb, y + c0);
    } else if (count == 2) {
      StemBlock<V, ROWS, 2, ALL_ROWS>(x + c0, tap_offset, K, wb, bias, rows, valid, ep, rb, y + c0);
    } else {
      StemBlock<V, ROWS, 1, ALL_ROWS>(x + c0, tap_offset, K, wb, bias, rows, valid, ep, rb, y + c0);
    }
    v0 += count;
  }
}

// The weights as [channel block][k][ROWS] (rows past out_channels zero), read in their
// order: a packed weight's panels [ceil(OC / kMr)][K][kMr] or the plain [OC][K]. (Read in
// the destination's order, strided, the copy cost 3% of a 96x96 stem at batch 1.)
template <int ROWS>
inline void StemRepackWeights(const float* pw, bool packed, int64_t out_channels, int64_t K, float* weights) {
  const int64_t blocks = (out_channels + ROWS - 1) / ROWS;
  memset(weights + (blocks - 1) * K * ROWS, 0, sizeof(float) * K * ROWS);
  if (!packed) {
    for (int64_t oc = 0; oc < out_channels; ++oc) {
      float* dst = weights + oc / ROWS * K * ROWS + oc % ROWS;
      for (int64_t k = 0; k < K; ++k) dst[k * ROWS] = pw[oc * K + k];
    }
    return;
  }
  const int64_t panels = (out_channels + gemm::kMr - 1) / gemm::kMr;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t rows = out_channels - p * gemm::kMr < gemm::kMr ? out_channels - p * gemm::kMr : gemm::kMr;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t oc = p * gemm::kMr + i;
      float* dst = weights + oc / ROWS * K * ROWS + oc % ROWS;
      const float* src = pw + p * K * gemm::kMr + i;
      for (int64_t k = 0; k < K; ++k) dst[k * ROWS] = src[k * gemm::kMr];
    }
  }
}

// The stem conv: jobs of (image, kStemJobRows output rows) in parallel, each thread
// repacking the weights once (StemRepackWeights).
template <typename V, int ROWS, int MAX_VECS>
__attribute__((noinline)) static int32_t RunStem(const kiln_kcall* call, const Window& w, const kiln_activation& act,
                                                 bool packed) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t OH = w.out[1], OW = w.out[2], KH = w.kernel[1], KW = w.kernel[2], K = channels * KH * KW;
  const StemPlanes geometry(w, L, channels);
  const int64_t row_jobs = (OH + geometry.job_rows - 1) / geometry.job_rows;
  const int64_t blocks = (out_channels + ROWS - 1) / ROWS;
  const float* px = static_cast<const float*>(X.data);
  const float* pw = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pres = OptionalInputData<float>(call, 4);
  float* py = static_cast<float*>(Y.data);
  const bool clamp = act.code == KILN_UNARY_RELU || act.code == KILN_UNARY_CLIP;
  const float alpha = static_cast<float>(act.alpha), beta = static_cast<float>(act.beta);
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float planes[kStemPlaneFloats];
    alignas(64) float weights[kStemWeightFloats];
    float bias[kStemMaxOutChannels + ROWS];
    int64_t tap_offset[kStemMaxChannels * kStemMaxKernel * kStemMaxKernel];
    for (int64_t k = 0; k < K; ++k) {
      const int64_t c = k / (KH * KW), kh = k / KW % KH, kw = k % KW, s = geometry.s;
      tap_offset[k] = c * geometry.channel_stride() + (kh % s * s + kw % s) * geometry.phase_stride +
                      kh / s * geometry.width + kw / s;
    }
    StemRepackWeights<ROWS>(pw, packed, out_channels, K, weights);
    for (int64_t oc = 0; oc < blocks * ROWS; ++oc) bias[oc] = oc < out_channels && pbias != nullptr ? pbias[oc] : 0.f;
    StemEpilogue ep;
    ep.plane = OH * OW;
    ep.clamp = clamp;
    ep.upper = act.code == KILN_UNARY_CLIP;
    ep.lo = act.code == KILN_UNARY_CLIP ? alpha : 0.f;
    ep.hi = act.code == KILN_UNARY_CLIP ? beta : INFINITY;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / row_jobs, oh0 = job % row_jobs * geometry.job_rows;
      const int64_t oh1 = oh0 + geometry.job_rows < OH ? oh0 + geometry.job_rows : OH;
      StemFillPlanes(px + n * channels * w.in[1] * w.in[2], channels, w, geometry, oh0, oh1 - oh0, planes);
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          const float* x = planes + (oh - oh0) * geometry.width;
          const int64_t rows = out_channels - b * ROWS < ROWS ? out_channels - b * ROWS : ROWS;
          const int64_t at = (n * out_channels + b * ROWS) * OH * OW + oh * OW;
          const float* r = pres != nullptr ? pres + at : nullptr;
          // The block's rows of the next output row, for writing: Y is often in no cache in
          // a whole model (ResNeXt-50's 96x96 stem at batch 8: 3.55 -> 3.41 ms).
          if (oh + 1 < oh1) {
            for (int64_t i = 0; i < rows; ++i) {
              for (int64_t q = 0; q < OW; q += 16) __builtin_prefetch(py + at + i * OH * OW + OW + q, 1, 3);
            }
          }
          if (rows == ROWS) {
            StemRow<V, ROWS, MAX_VECS, true>(x, tap_offset, K, weights + b * K * ROWS, bias + b * ROWS, rows, OW, ep, r,
                                             py + at);
          } else {
            StemRow<V, ROWS, MAX_VECS, false>(x, tap_offset, K, weights + b * K * ROWS, bias + b * ROWS, rows, OW, ep,
                                              r, py + at);
          }
          if (clamp || act.code < 0) continue;
          for (int64_t i = 0; i < rows; ++i) ApplyActivation(py + at + i * OH * OW, OW, act.code, alpha, beta);
        }
      }
    }
  };
  ParallelFor(call, X.dims[0] * row_jobs, 1, body);
  return KILN_KERR_OK;
}

}  // namespace kiln_kernels
