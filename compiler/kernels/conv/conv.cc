// Convolutions: Conv (the implicit GEMM, depthwise paths and the direct loop nest) and
// ConvTranspose. Spatial kernels see 1-D and 2-D problems as 3-D ones with leading extents
// of 1, so one loop nest serves all three ranks.
#include "kiln/kernels/conv.h"
#include "depthwise.h"
#include "gemm_core.h"
#include "im2col.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kernel_window.h"
#include "pointwise_rows.h"
#include "stem.h"
#include "unary_math.h"

using namespace kiln_kernels;

namespace {

// Grouped 2-D f32 convolutions with few channels per group (ResNeXt's 32 groups of 4 to
// 32), stride 1 or 2, dilation 1, taken directly rather than as an implicit GEMM per group,
// whose M (the group's output channels) is too small to pay for packing its im2col:
// ResNeXt-50's grouped convs ran at a quarter of ONNX Runtime's speed that way. Per
// (image, group), the group's input planes are copied zero-padded into stride x stride
// phase planes (padded row % stride, column % stride) of width PW, so output position
// (oh, ow) and tap (kh, kw) read position oh * PW + ow + (kh / s) * PW + kw / s of phase
// (kh % s, kw % s): one unaligned vector load per tap for consecutive positions of the
// flattened [OH][PW] output (the PW - OW columns past each row's end are computed and
// dropped). Register blocks of kGroupedRows (or a weight panel's kMr) output channels x up
// to kGroupedVecs vectors of positions share each load.
constexpr int64_t kGroupedPlaneFloats = 16384;  // the padded input planes of one group (64 KiB)
constexpr int64_t kGroupedOutFloats = 8192;     // a register block's flattened output planes
constexpr int64_t kGroupedMaxK = 400;           // input channels x taps per output channel
constexpr int kGroupedRows = 4;
constexpr int kGroupedVecs = 4;
constexpr int64_t kGroupedMaxChannels = 32;  // output channels per group (more: the GEMM's M is large enough)

// The shape of the phase planes: width, rows, flattened positions computed (whole vectors)
// and the floats per phase plane (the reads past the last position included).
struct GroupedPlanes {
  int64_t s, width, rows, positions, phase_stride;
  GroupedPlanes(const Window& w, int64_t lanes) {
    s = w.stride[2];
    width = w.out[2] + (w.kernel[2] - 1) / s;
    rows = w.out[1] + (w.kernel[1] - 1) / s;
    positions = (w.out[1] * width + lanes - 1) / lanes * lanes;
    const int64_t reach = positions + (w.kernel[1] - 1) / s * width + (w.kernel[2] - 1) / s;
    phase_stride = reach > rows * width ? reach : rows * width;
  }
  int64_t channel_stride() const { return s * s * phase_stride; }
};

inline bool GroupedDirectFits(const Window& w, const kiln_ktensor& x, int64_t group, int64_t icg, int64_t ocg) {
  constexpr int64_t kLanes = 16;  // the wider vector: what fits it fits the narrow one
  if (x.rank != 4 || group == 1 || ocg > kGroupedMaxChannels || icg * w.kernel[1] * w.kernel[2] > kGroupedMaxK) {
    return false;
  }
  if (icg == 1 && ocg == 1) return false;  // depthwise: its own paths
  const int64_t s = w.stride[2];
  if (w.stride[1] != s || (s != 1 && s != 2) || w.dilation[1] != 1 || w.dilation[2] != 1) return false;
  if (w.pad[1] < 0 || w.pad[2] < 0 || w.kernel[1] * w.kernel[2] > 25) return false;
  const GroupedPlanes planes(w, kLanes);
  return icg * planes.channel_stride() <= kGroupedPlaneFloats && gemm::kMr * planes.positions <= kGroupedOutFloats &&
         w.in[1] * w.in[2] + 1 <= kGroupedOutFloats;  // stride 2's deinterleaved plane, in `out` then
}

// acc[r][v] over every input channel and tap of one register block: ROWS output channels
// (weight of row r at k = ic * taps + t: wb[r * w_row + k * w_k]) x VECS vectors from
// position q0 of the planes, into out[r * out_stride + q0..].
template <typename V, int ROWS, int VECS>
__attribute__((always_inline)) inline void GroupedBlock(const float* planes, int64_t channel_stride, int64_t icg,
                                                        const int64_t* tap_offset, int64_t taps, const float* wb,
                                                        int64_t w_row, int64_t w_k, const float* bias, int64_t q0,
                                                        float* out, int64_t out_stride) {
#ifdef __clang__
#pragma clang fp contract(fast)  // a Conv's sums are reassociated anyway (see MicroKernel)
#endif
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  V acc[ROWS][VECS];
  for (int r = 0; r < ROWS; ++r) {
    V b;
    KILN_SPLAT_V(V, b, bias[r]);
    for (int v = 0; v < VECS; ++v) acc[r][v] = b;
  }
  for (int64_t ic = 0; ic < icg; ++ic) {
    const float* base = planes + ic * channel_stride + q0;
    const float* wic = wb + ic * taps * w_k;
    for (int64_t t = 0; t < taps; ++t) {
      V xv[VECS];
      for (int v = 0; v < VECS; ++v) memcpy(&xv[v], base + tap_offset[t] + v * L, sizeof(V));
      for (int r = 0; r < ROWS; ++r) {
        V wv;
        KILN_SPLAT_V(V, wv, wic[r * w_row + t * w_k]);
        for (int v = 0; v < VECS; ++v) acc[r][v] += wv * xv[v];
      }
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    for (int v = 0; v < VECS; ++v) memcpy(out + r * out_stride + q0 + v * L, &acc[r][v], sizeof(V));
  }
}

// GroupedBlock over all `positions` (a multiple of the lanes) for one block of ROWS output
// channels: as many vectors per block as the target's registers hold accumulators for
// (four 16-lane, two 8-lane), then the rest.
template <typename V, int ROWS>
__attribute__((always_inline)) inline void GroupedRows(const float* planes, int64_t channel_stride, int64_t icg,
                                                       const int64_t* tap_offset, int64_t taps, const float* wb,
                                                       int64_t w_row, int64_t w_k, const float* bias, int64_t positions,
                                                       float* out) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int kVecs = L == 16 ? kGroupedVecs : 2;
  int64_t q0 = 0;
  for (; q0 + kVecs * L <= positions; q0 += kVecs * L) {
    GroupedBlock<V, ROWS, kVecs>(planes, channel_stride, icg, tap_offset, taps, wb, w_row, w_k, bias, q0, out,
                                 positions);
  }
  const int64_t rest = (positions - q0) / L;
  if (kVecs > 3 && rest == 3) {
    GroupedBlock<V, ROWS, 3>(planes, channel_stride, icg, tap_offset, taps, wb, w_row, w_k, bias, q0, out, positions);
  } else if (kVecs > 2 && rest == 2) {
    GroupedBlock<V, ROWS, 2>(planes, channel_stride, icg, tap_offset, taps, wb, w_row, w_k, bias, q0, out, positions);
  } else if (rest == 1) {
    GroupedBlock<V, ROWS, 1>(planes, channel_stride, icg, tap_offset, taps, wb, w_row, w_k, bias, q0, out, positions);
  }
}

// The group's input channels into their zero-padded phase planes (see above). Stride 2
// deinterleaves each input plane whole into `scratch` first (even and odd elements; a row
// at a time, the per-row bookkeeping of 24-wide rows cost as much as the products), then
// copies each row's even and odd columns, contiguous runs there, into their phases.
inline void FillGroupedPlanes(const float* x, int64_t icg, const Window& w, const GroupedPlanes& p, float* planes,
                              float* scratch) {
  const int64_t H = w.in[1], W = w.in[2], s = p.s, left = w.pad[2];
  memset(planes, 0, sizeof(float) * icg * p.channel_stride());
  const int64_t plane = H * W, half = (plane + 1) / 2;
  float* evens = scratch;
  float* odds = scratch + half;
  // Where a row's runs go: input column iw lands at padded column iw + left, phase
  // (iw + left) % 2, position (iw + left) / 2; clipped to the plane's width.
  const int64_t even_at = left / 2, odd_at = (left + 1) / 2;
  const int64_t even_count = (W + 1) / 2 < p.width - even_at ? (W + 1) / 2 : p.width - even_at;
  const int64_t odd_count = W / 2 < p.width - odd_at ? W / 2 : p.width - odd_at;
  for (int64_t ic = 0; ic < icg; ++ic) {
    float* dst = planes + ic * p.channel_stride();
    const float* xc = x + ic * plane;
    if (s == 2) {
      int64_t j = 0;
      for (; j + 16 <= plane; j += 16) {
        gemm::v8f a, b;
        KILN_LOAD8(a, xc + j);
        KILN_LOAD8(b, xc + j + 8);
        const gemm::v8f e = EvenLanes(a, b), o = OddLanes(a, b);
        KILN_STORE8(evens + j / 2, e);
        KILN_STORE8(odds + j / 2, o);
      }
#pragma clang loop vectorize(disable)
      for (; j < plane; ++j) (j % 2 == 0 ? evens : odds)[j / 2] = xc[j];
    }
    for (int64_t ih = 0; ih < H; ++ih) {
      const int64_t ph = ih + w.pad[1];
      if (ph / s >= p.rows) break;
      if (s == 1) {  // a row, as it is
        const int64_t cols = W < p.width - left ? W : p.width - left;
        memcpy(dst + ph * p.width + left, xc + ih * W, sizeof(float) * cols);
        continue;
      }
      // The row's even columns (iw = 0, 2, ..) and odd ones, from the deinterleaved plane.
      const int64_t e0 = ih * W;
      const float* even_run = e0 % 2 == 0 ? evens + e0 / 2 : odds + e0 / 2;
      const float* odd_run = e0 % 2 == 0 ? odds + e0 / 2 : evens + (e0 + 1) / 2;
      float* row = dst + ph % 2 * 2 * p.phase_stride + ph / 2 * p.width;
      if (even_count > 0) memcpy(row + left % 2 * p.phase_stride + even_at, even_run, sizeof(float) * even_count);
      if (odd_count > 0) memcpy(row + (left + 1) % 2 * p.phase_stride + odd_at, odd_run, sizeof(float) * odd_count);
    }
  }
}

template <typename V>
__attribute__((noinline)) static int32_t RunGroupedDirect(const kiln_kcall* call, const Window& w, int64_t group,
                                                          const kiln_activation& act, bool packed) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t in_channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t icg = in_channels / group, ocg = out_channels / group;
  const int64_t OH = w.out[1], OW = w.out[2], KW = w.kernel[2], taps = w.kernel[1] * KW, K = icg * taps;
  const GroupedPlanes geometry(w, L);
  const int64_t positions = geometry.positions, width = geometry.width, s = geometry.s;
  const float* px = static_cast<const float*>(X.data);
  const float* pw = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pres = OptionalInputData<float>(call, 4);
  float* py = static_cast<float*>(Y.data);
  const int64_t panels = (ocg + gemm::kMr - 1) / gemm::kMr;
  const float alpha = static_cast<float>(act.alpha), beta = static_cast<float>(act.beta);
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float planes[kGroupedPlaneFloats];
    alignas(64) float out[kGroupedOutFloats];
    alignas(64) float weights[(kGroupedMaxChannels + kGroupedRows) * kGroupedMaxK];
    int64_t tap_offset[25];
    for (int64_t t = 0; t < taps; ++t) {
      const int64_t kh = t / KW, kw = t % KW;
      tap_offset[t] = (kh % s * s + kw % s) * geometry.phase_stride + kh / s * width + kw / s;
    }
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / group, g = job % group;
      float bias[kGroupedMaxChannels + gemm::kMr] = {};
      for (int64_t oc = 0; oc < ocg && pbias != nullptr; ++oc) bias[oc] = pbias[g * ocg + oc];
      FillGroupedPlanes(px + (n * in_channels + g * icg) * w.in[1] * w.in[2], icg, w, geometry, planes, out);
      const int64_t channel_stride = geometry.channel_stride();
      // Rows oc0 .. oc0 + rows of out to Y, the valid columns, with the residual and the
      // activation.
      auto store = [&](int64_t oc0, int64_t rows) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t oc = g * ocg + oc0 + r;
          float* y = py + (n * out_channels + oc) * OH * OW;
          const float* res = pres != nullptr ? pres + (n * out_channels + oc) * OH * OW : nullptr;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const float* src = out + r * positions + oh * width;
            float* dst = y + oh * OW;
            if (res != nullptr) {
              for (int64_t ow = 0; ow < OW; ++ow) dst[ow] = src[ow] + res[oh * OW + ow];
            } else {
              memcpy(dst, src, sizeof(float) * OW);
            }
          }
          ApplyActivation(y, OH * OW, act.code, alpha, beta);
        }
      };
      if (packed && ocg > 8) {
        // Many rows: blocks of one pre-packed panel each ([K][kMr], zero past the last
        // row), read in place (copying 32 rows per group cost a third of ResNeXt's last
        // grouped convs, whose weights outweigh their 3x3 planes).
        const float* panel = pw + g * panels * gemm::kMr * K;
        for (int64_t oc0 = 0; oc0 < ocg; oc0 += gemm::kMr) {
          GroupedRows<V, gemm::kMr>(planes, channel_stride, icg, tap_offset, taps, panel + oc0 * K, 1, gemm::kMr,
                                    bias + oc0, positions, out);
          store(oc0, ocg - oc0 < gemm::kMr ? ocg - oc0 : gemm::kMr);
        }
        continue;
      }
      // Few rows: the group's weights copied as [oc][ic * taps + t] (rows past ocg zero), in
      // blocks of kGroupedRows (4 or 8 rows: no row wasted). A packed weight is read in its
      // order, [panel][k][kMr] (k-inner reads would gather).
      memset(weights + ocg * K, 0, sizeof(float) * kGroupedRows * K);
      if (packed) {
        const float* panel = pw + g * panels * gemm::kMr * K;
        for (int64_t p = 0; p < panels; ++p) {
          const int64_t rows = ocg - p * gemm::kMr < gemm::kMr ? ocg - p * gemm::kMr : gemm::kMr;
          for (int64_t k = 0; k < K; ++k) {
#pragma clang loop vectorize(disable)
            for (int64_t i = 0; i < rows; ++i)
              weights[(p * gemm::kMr + i) * K + k] = panel[(p * K + k) * gemm::kMr + i];
          }
        }
      } else {
        memcpy(weights, pw + g * ocg * K, sizeof(float) * ocg * K);
      }
      for (int64_t oc0 = 0; oc0 < ocg; oc0 += kGroupedRows) {
        GroupedRows<V, kGroupedRows>(planes, channel_stride, icg, tap_offset, taps, weights + oc0 * K, K, 1, bias + oc0,
                                     positions, out);
        store(oc0, ocg - oc0 < kGroupedRows ? ocg - oc0 : kGroupedRows);
      }
    }
  };
  ParallelFor(call, X.dims[0] * group, 1, body);
  return KILN_KERR_OK;
}

// One output channel's `count` positions back to Y from a product computed transposed
// (positions as rows, channels across the lanes): y[i] = c[i * stride] + bias (+ the
// residual r[i]), then the activation. RunGroupedLanes' and RunFewPositions' way out.
inline void StoreChannel(const float* c, int64_t stride, int64_t count, float bias, const float* r, float* y,
                         const kiln_activation& act, float alpha, float beta) {
  for (int64_t i = 0; i < count; ++i) y[i] = c[i * stride] + bias + (r != nullptr ? r[i] : 0.f);
  ApplyActivation(y, count, act.code, alpha, beta);
}

// packed_weights 4 (ops/nn_ops.cc): a grouped 2-D conv over a small map (ResNeXt's last two
// stages at 96x96: 6x6 and 3x3, 32 groups of 16 and 32 channels), where the phase planes'
// vectors of positions above fill 9 of 16 lanes (3x3) and a batch reads each group's
// weight once per image. Here the group's output channels go across the lanes instead
// (W_g^T pre-packed, [group][K][ocg], ocg a multiple of 16 up to 64) and a register block
// is up to kLanesRows output positions x ocg / lanes vectors, each position's input
// broadcast from the same phase planes. A job is one group over as many images as the
// planes hold (batch 8: a group's weight serves 72 positions of 3x3 maps).
constexpr int kLanesRows = 12;
constexpr int64_t kLanesMaxTaps = 49;

// The zero-padded input planes a job reads for `out_rows` output rows: each channel's plane
// cut to the rows and columns the windows reach ((out - 1) x stride + (kernel - 1) x
// dilation + 1), so output position (oh, ow) and tap (kh, kw) read (oh x stride + kh x
// dilation) x width + ow x stride + kw x dilation of it, oh counted from the job's first
// row. (Positions are broadcast one at a time, so strides need no phase planes.)
struct LanesPlanes {
  int64_t rows, width;
  LanesPlanes(const Window& w, int64_t out_rows)
      : rows((out_rows - 1) * w.stride[1] + (w.kernel[1] - 1) * w.dilation[1] + 1),
        width((w.out[2] - 1) * w.stride[2] + (w.kernel[2] - 1) * w.dilation[2] + 1) {}
  int64_t channel_stride() const { return rows * width; }
  // The icg planes of x ([icg][H][W]) for the output rows from oh0 into dst.
  void Fill(const float* x, int64_t icg, const Window& w, int64_t oh0, float* dst) const {
    const int64_t H = w.in[1], W = w.in[2], left = w.pad[2], ih0 = oh0 * w.stride[1] - w.pad[1];
    memset(dst, 0, sizeof(float) * icg * rows * width);
    // Input columns [c0, c1) land at padded columns c0 + left ..
    const int64_t c0 = left < 0 ? -left : 0, c1 = W < width - left ? W : width - left;
    if (c1 <= c0) return;
    for (int64_t ic = 0; ic < icg; ++ic) {
      for (int64_t r = 0; r < rows; ++r) {
        if (ih0 + r < 0 || ih0 + r >= H) continue;
        memcpy(dst + (ic * rows + r) * width + c0 + left, x + (ic * H + ih0 + r) * W + c0, sizeof(float) * (c1 - c0));
      }
    }
  }
};

// Output rows per lanes job: all (then whole images share a job), or as many as the
// planes and the output buffer hold; 0 where not even one row fits.
inline int64_t LanesSlabRows(const Window& w, int64_t icg, int64_t ocg) {
  int64_t rows = w.out[1];
  while (rows > 0 && (icg * LanesPlanes(w, rows).channel_stride() > kGroupedPlaneFloats ||
                      rows * w.out[2] * ocg > kGroupedOutFloats)) {
    --rows;
  }
  return rows;
}

// acc[r][v] = sum over input channels and taps of planes[q[r] + tap] x wt[k][v * L..]: ROWS
// positions (flattened plane indices q, their images' planes included) x VECS vectors of
// output channels, into c[r * ocg + v * L..].
template <typename V, int ROWS, int VECS>
__attribute__((always_inline)) inline void LanesBlock(const float* planes, int64_t channel_stride, int64_t icg,
                                                      const int64_t* tap_offset, int64_t taps, const int64_t* q,
                                                      const float* wt, int64_t ocg, float* c) {
#ifdef __clang__
#pragma clang fp contract(fast)  // a Conv's sums are reassociated anyway (see MicroKernel)
#endif
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  V acc[ROWS][VECS];
  for (int r = 0; r < ROWS; ++r) {
    for (int v = 0; v < VECS; ++v) KILN_SPLAT_V(V, acc[r][v], 0.f);
  }
  for (int64_t ic = 0; ic < icg; ++ic) {
    const float* base = planes + ic * channel_stride;
    for (int64_t t = 0; t < taps; ++t) {
      const float* bt = base + tap_offset[t];
      const float* wk = wt + (ic * taps + t) * ocg;
      V wv[VECS];
      for (int v = 0; v < VECS; ++v) memcpy(&wv[v], wk + v * L, sizeof(V));
      for (int r = 0; r < ROWS; ++r) {
        V xv;
        KILN_SPLAT_V(V, xv, bt[q[r]]);
        for (int v = 0; v < VECS; ++v) acc[r][v] += xv * wv[v];
      }
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    for (int v = 0; v < VECS; ++v) memcpy(c + r * ocg + v * L, &acc[r][v], sizeof(V));
  }
}

// LanesBlock over `count` positions (q) for one block of VECS vectors of channels.
template <typename V, int VECS>
inline void LanesRows(const float* planes, int64_t channel_stride, int64_t icg, const int64_t* tap_offset, int64_t taps,
                      const int64_t* q, int64_t count, const float* wt, int64_t ocg, float* c) {
  int64_t r = 0;
  for (; r + kLanesRows <= count; r += kLanesRows) {
    LanesBlock<V, kLanesRows, VECS>(planes, channel_stride, icg, tap_offset, taps, q + r, wt, ocg, c + r * ocg);
  }
  // The rest, padded to a block of 4 (the padded rows repeat the last position).
  for (; r < count; r += 4) {
    int64_t qq[4];
    for (int i = 0; i < 4; ++i) qq[i] = q[r + i < count ? r + i : count - 1];
    alignas(64) float tail[4 * 64];
    LanesBlock<V, 4, VECS>(planes, channel_stride, icg, tap_offset, taps, qq, wt, ocg, tail);
    constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
    for (int64_t i = 0; i < 4 && r + i < count; ++i)
      memcpy(c + (r + i) * ocg, tail + i * ocg, sizeof(float) * VECS * L);
  }
}

template <typename V>
__attribute__((noinline)) static void RunGroupedLanes(const kiln_kcall* call, const Window& w, int64_t group,
                                                      const kiln_activation& act, int64_t slab) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t icg = in_channels / group, ocg = out_channels / group, OH = w.out[1];
  const int64_t OW = w.out[2], P = OH * OW, KW = w.kernel[2], taps = w.kernel[1] * KW;
  const LanesPlanes geometry(w, slab);
  const int64_t cs = geometry.channel_stride(), image_floats = icg * cs;
  // A pass: `images` whole images (slab == OH), or one slab of one image's output rows.
  int64_t images = 1;
  if (slab == OH) {
    images = kGroupedPlaneFloats / image_floats;
    if (images * P * ocg > kGroupedOutFloats) images = kGroupedOutFloats / (P * ocg);
    if (images > batch) images = batch;
  }
  const int64_t slabs = (OH + slab - 1) / slab;
  const int64_t passes = slab == OH ? (batch + images - 1) / images : batch * slabs;
  const float* px = static_cast<const float*>(X.data);
  const float* pw = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pres = OptionalInputData<float>(call, 4);
  float* py = static_cast<float*>(Y.data);
  const float alpha = static_cast<float>(act.alpha), beta = static_cast<float>(act.beta);
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float planes[kGroupedPlaneFloats];
    alignas(64) float c[kGroupedOutFloats];
    int64_t tap_offset[kLanesMaxTaps], q[kGroupedOutFloats / 16];
    for (int64_t t = 0; t < taps; ++t) {
      tap_offset[t] = t / KW * w.dilation[1] * geometry.width + t % KW * w.dilation[2];
    }
    for (int64_t job = begin; job < end; ++job) {
      const int64_t g = job / passes, pass = job % passes;
      const int64_t n0 = slab == OH ? pass * images : pass / slabs, oh0 = slab == OH ? 0 : pass % slabs * slab;
      const int64_t count = slab == OH ? (batch - n0 < images ? batch - n0 : images) : 1;
      const int64_t span = (OH - oh0 < slab ? OH - oh0 : slab) * OW, rows = count * span;  // positions per image
      for (int64_t m = 0; m < count; ++m) {
        geometry.Fill(px + ((n0 + m) * in_channels + g * icg) * w.in[1] * w.in[2], icg, w, oh0,
                      planes + m * image_floats);
        for (int64_t p = 0; p < span; ++p) {
          q[m * span + p] = m * image_floats + p / OW * w.stride[1] * geometry.width + p % OW * w.stride[2];
        }
      }
      const float* wt = pw + g * icg * taps * ocg;
      for (int64_t v0 = 0; v0 < ocg; v0 += 2 * L) {  // two vectors of channels at a time, then one
        if (v0 + 2 * L <= ocg) {
          LanesRows<V, 2>(planes, cs, icg, tap_offset, taps, q, rows, wt + v0, ocg, c + v0);
        } else {
          LanesRows<V, 1>(planes, cs, icg, tap_offset, taps, q, rows, wt + v0, ocg, c + v0);
        }
      }
      // Back to Y [n][g * ocg + oc][p] with the bias, the residual and the activation.
      for (int64_t m = 0; m < count; ++m) {
        for (int64_t oc = 0; oc < ocg; ++oc) {
          const int64_t at = ((n0 + m) * out_channels + g * ocg + oc) * P + oh0 * OW;
          StoreChannel(c + m * span * ocg + oc, ocg, span, pbias != nullptr ? pbias[g * ocg + oc] : 0.f,
                       pres != nullptr ? pres + at : nullptr, py + at, act, alpha, beta);
        }
      }
    }
  };
  ParallelFor(call, group * passes, 1, body);
}

// packed_weights 4 where the planes do not fit (a map known only at run time, larger than
// the lowering saw): the plain loop nest over W_g^T.
static void RunGroupedTransposedPlain(const kiln_kcall* call, const Window& w, int64_t group,
                                      const kiln_activation& act) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t icg = in_channels / group, ocg = out_channels / group, KH = w.kernel[1], KW = w.kernel[2];
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2];
  const float* px = static_cast<const float*>(X.data);
  const float* pw = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pres = OptionalInputData<float>(call, 4);
  float* py = static_cast<float*>(Y.data);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < out_channels; ++oc) {
      const int64_t g = oc / ocg, o = oc % ocg;
      float* y = py + (n * out_channels + oc) * OH * OW;
      for (int64_t p = 0; p < OH * OW; ++p) {
        float sum = pbias != nullptr ? pbias[oc] : 0.f;
        for (int64_t ic = 0; ic < icg; ++ic) {
          const float* x = px + (n * in_channels + g * icg + ic) * H * W;
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = p / OW * w.stride[1] + kh * w.dilation[1] - w.pad[1];
            for (int64_t kw = 0; kw < KW && ih >= 0 && ih < H; ++kw) {
              const int64_t iw = p % OW * w.stride[2] + kw * w.dilation[2] - w.pad[2];
              if (iw >= 0 && iw < W) sum += x[ih * W + iw] * pw[((g * icg + ic) * KH * KW + kh * KW + kw) * ocg + o];
            }
          }
        }
        y[p] = sum + (pres != nullptr ? pres[(n * out_channels + oc) * OH * OW + p] : 0.f);
      }
      ApplyActivation(y, OH * OW, act.code, static_cast<float>(act.alpha), static_cast<float>(act.beta));
    }
  }
}

static int32_t RunGroupedTransposed(const kiln_kcall* call, const Window& w, int64_t group,
                                    const kiln_activation& act) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t icg = X.dims[1] / group, ocg = Y.dims[1] / group;
  if (X.rank != 4 || ocg % 16 != 0 || ocg > 64) return KILN_KERR_UNSUPPORTED;
  const int64_t slab = w.in[0] == 1 && w.kernel_size() <= kLanesMaxTaps ? LanesSlabRows(w, icg, ocg) : 0;
  if (slab > 0) {
    if (WideVectors()) {
      RunGroupedLanes<v16f>(call, w, group, act, slab);
    } else {
      RunGroupedLanes<v8f>(call, w, group, act, slab);
    }
  } else {
    RunGroupedTransposedPlain(call, w, group, act);
  }
  return KILN_KERR_OK;
}

// packed_weights 2 (ops/nn_ops.cc): a conv with at most 49 output positions per image
// as Y^T = X^T W^T, the positions the GEMM's rows and W^T pre-packed in 16-column panels
// (gemm::PanelBlock), so the output channels fill the vector lanes; each job's columns of
// Y^T, a chunk of output channels, go back to Y transposed, with the bias, the residual and
// the activation. X^T's row for a position is its im2col column: input channel major, then
// the window's taps, zero where a tap falls in the padding (a 1x1 conv's is the position's
// channels at its stride). Where a pass's rows of the whole K do not fit X^T's buffer
// (ResNet-50's stride-2 3x3 over 14x14, K = 4608), K goes in slices of whole channels, the
// products summed in the job's C^T.
// The lowering decides on the static shape; with shapes known only at run time it sees
// probe dims, so a larger map still runs here, a slice of up to 49 positions per pass.
constexpr int64_t kFewPositionsChunk = 256;                              // output channels per job
constexpr int64_t kFewPositionsFloats = KILN_CONV_FEW_POSITIONS_FLOATS;  // X^T: positions x input channels (416 KiB)
constexpr int64_t kFewPositionsRows = KILN_CONV_FEW_POSITIONS;  // X^T's rows (positions of the images of a pass)

// C[0..rows, 0..width) (+)= X^T [rows][K] (row stride ld) · W^T in 16-column panels
// [width / 16][panel_k][16] (panels at this K slice's first row): column tiles outermost,
// each over the whole K, so the weight streams once and in memory order (a tile's panels
// lie side by side), where gemm::PanelBlock takes a K block of every panel in turn. With a
// few positions the weight read is all the time there is: ResNeXt-50's 1x1 convs over 3x3
// maps at batch 1 (2048x1024 floats) ran 0.63 ms against ONNX Runtime's 0.46 that way.
// Each row tile past the first reads the column tile's panels again, from L2 while K <=
// kFewPositionsStreamK (256 KiB for the wide tile).
constexpr int64_t kFewPositionsStreamK = 2048;
template <bool kWide>
inline void FewPositionsProduct(int64_t rows, int64_t width, int64_t K, const float* xt, int64_t ld,
                                const float* panels, int64_t panel_k, bool accumulate, float* ct) {
  using T = gemm::Tile<kWide>;
  using V = typename T::V;
  const int64_t tiles = (rows + T::kRows - 1) / T::kRows;  // row tiles, as even as whole rows allow
  for (int64_t j = 0; j < width; j += T::kCols) {
    const float* b = panels + j / gemm::kNr * panel_k * gemm::kNr;
    const float* b_second = kWide ? b + panel_k * gemm::kNr : b + T::kHalf;
    // The first row tile fetches the next column tile's panels on the way.
    const float* b_next = j + T::kCols < width ? b + T::kCols / gemm::kNr * panel_k * gemm::kNr : nullptr;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i = t * rows / tiles;
      const int r = static_cast<int>((t + 1) * rows / tiles - i);
      const float* ai = xt + i * ld;
      const float* next = t == 0 ? b_next : nullptr;
      if (j + T::kCols <= width) {
        gemm::MicroKernelRows<V, 2>(r, K, ai, ai + gemm::kMr * ld, ld, 1, b, b_second, gemm::kNr, ct + i * width + j,
                                    width, accumulate, nullptr, 0, next);
      } else {  // the wide tile's last 16 columns
        gemm::MicroKernelRows<V, 1>(r, K, ai, ai + gemm::kMr * ld, ld, 1, b, b, gemm::kNr, ct + i * width + j, width,
                                    accumulate, nullptr, 0, next);
      }
    }
  }
}

// Columns [k0, k0 + kb) of X^T's rows for positions [p0, p0 + rows) of image x ([C][H][W]),
// K = C x taps (channel major), into xt (row stride ld). kb and k0 are whole channels.
inline void GatherFewPositions(const float* x, const Window& w, int64_t p0, int64_t rows, int64_t k0, int64_t kb,
                               float* xt, int64_t ld) {
  const int64_t H = w.in[1], W = w.in[2], OW = w.out[2], KH = w.kernel[1], KW = w.kernel[2], taps = KH * KW;
  const int64_t SH = w.stride[1], SW = w.stride[2];
  if (taps == 1 && w.pad[1] == 0 && w.pad[2] == 0) {  // a 1x1 conv: each row a position's channels
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t at = (p0 + i) / OW * SH * W + (p0 + i) % OW * SW;
      float* row = xt + i * ld;
      for (int64_t k = 0; k < kb; ++k) row[k] = x[(k0 + k) * H * W + at];
    }
    return;
  }
  // Channel by channel (its plane in L1), tap by tap, position by position.
  int64_t ih0[kFewPositionsRows], iw0[kFewPositionsRows];
  for (int64_t i = 0; i < rows; ++i) {
    ih0[i] = (p0 + i) / OW * SH - w.pad[1];
    iw0[i] = (p0 + i) % OW * SW - w.pad[2];
  }
  for (int64_t c = k0 / taps; c < (k0 + kb) / taps; ++c) {
    const float* plane = x + c * H * W;
    float* col = xt + c * taps - k0;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t dh = kh * w.dilation[1];
      for (int64_t kw = 0; kw < KW; ++kw, ++col) {
        const int64_t dw = kw * w.dilation[2];
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t ih = ih0[i] + dh, iw = iw0[i] + dw;
          const bool inside = static_cast<uint64_t>(ih) < static_cast<uint64_t>(H) &&
                              static_cast<uint64_t>(iw) < static_cast<uint64_t>(W);
          col[i * ld] = inside ? plane[ih * W + iw] : 0.f;
        }
      }
    }
  }
}

__attribute__((noinline)) static int32_t RunFewPositions(const kiln_kcall* call, const Window& w,
                                                         const kiln_activation& act) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t batch = X.dims[0], channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t taps = w.kernel[1] * w.kernel[2], K = channels * taps, plane = w.in[1] * w.in[2];
  const int64_t P = w.out[1] * w.out[2];
  if (out_channels % 16 != 0 || w.in[0] != 1 || K < 1 || taps > kFewPositionsFloats / kFewPositionsRows) {
    return KILN_KERR_UNSUPPORTED;
  }
  if (P == 0 || batch == 0) return KILN_KERR_OK;
  // A pass: as many whole images as kFewPositionsRows rows hold, so a batch streams the
  // weight once per pass rather than once per image (a 2048x1024 weight is 8 MiB); or,
  // where one image has more positions, a slice of them.
  const bool whole = P <= kFewPositionsRows;
  const int64_t images = whole ? (kFewPositionsRows / P < batch ? kFewPositionsRows / P : batch) : 1;
  const int64_t slice = whole ? P : kFewPositionsRows;
  const int64_t slices = (P + slice - 1) / slice;  // per image (1 when whole)
  const int64_t passes = whole ? (batch + images - 1) / images : batch * slices;
  // K in slices of whole channels, as few and as even as X^T's buffer allows for a pass's
  // rows (all of K where it fits). X^T's row stride: the slice's width, or past it where
  // that is a multiple of 1024 floats, whose rows 4 KiB apart would fall in one set of L1
  // and evict each other as a tile walks them.
  const int64_t pass_rows = images * slice;
  int64_t kslice = K;
  if (pass_rows * K > kFewPositionsFloats) {
    const int64_t most = kFewPositionsFloats / pass_rows / taps, count = (channels + most - 1) / most;
    kslice = (channels + count - 1) / count * taps;
  }
  auto row_stride = [pass_rows](int64_t k) {
    return k % 1024 == 0 && pass_rows * (k + 16) <= kFewPositionsFloats ? k + 16 : k;
  };
  const float* px = static_cast<const float*>(X.data);
  const float* panels = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pres = OptionalInputData<float>(call, 4);
  float* py = static_cast<float*>(Y.data);
  const int64_t chunks = (out_channels + kFewPositionsChunk - 1) / kFewPositionsChunk;
  const float alpha = static_cast<float>(act.alpha), beta = static_cast<float>(act.beta);
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float xt[kFewPositionsFloats];
    alignas(64) float ct[kFewPositionsRows * kFewPositionsChunk];
    int64_t filled = -1;  // the pass xt holds (with the whole K)
    for (int64_t job = begin; job < end; ++job) {
      const int64_t pass = job / chunks, n0 = job % chunks * kFewPositionsChunk;
      const int64_t n1 = n0 + kFewPositionsChunk < out_channels ? n0 + kFewPositionsChunk : out_channels;
      // The pass's images [image0, image0 + count), positions [p0, p0 + rows) of each.
      const int64_t image0 = whole ? pass * images : pass / slices;
      const int64_t count = whole ? (batch - image0 < images ? batch - image0 : images) : 1;
      const int64_t p0 = whole ? 0 : pass % slices * slice, rows = P - p0 < slice ? P - p0 : slice;
      const int64_t width = n1 - n0;
      for (int64_t k0 = 0; k0 < K; k0 += kslice) {
        const int64_t kb = K - k0 < kslice ? K - k0 : kslice, ld = row_stride(kb);
        if (kb < K || filled != pass) {
          for (int64_t m = 0; m < count; ++m) {
            GatherFewPositions(px + (image0 + m) * channels * plane, w, p0, rows, k0, kb, xt + m * rows * ld, ld);
          }
          filled = kb < K ? -1 : pass;
        }
        const float* slice_panels = panels + n0 * K + k0 * gemm::kNr;
        if (kb > kFewPositionsStreamK) {  // a tile's panels past L2: K blocks (see above)
          gemm::PanelBlock(0, count * rows, 0, width, kb, xt, ld, slice_panels, ct, width, gemm::NoFinish(), K, k0 > 0);
        } else if (WideVectors()) {
          FewPositionsProduct<true>(count * rows, width, kb, xt, ld, slice_panels, K, k0 > 0, ct);
        } else {
          FewPositionsProduct<false>(count * rows, width, kb, xt, ld, slice_panels, K, k0 > 0, ct);
        }
      }
      for (int64_t m = 0; m < count; ++m) {
        const int64_t n = image0 + m;
        for (int64_t oc = n0; oc < n1; ++oc) {
          const int64_t at = (n * out_channels + oc) * P + p0;
          StoreChannel(ct + m * rows * width + oc - n0, width, rows, pbias != nullptr ? pbias[oc] : 0.f,
                       pres != nullptr ? pres + at : nullptr, py + at, act, alpha, beta);
        }
      }
    }
  };
  ParallelFor(call, passes * chunks, 1, body);
  return KILN_KERR_OK;
}

// Planes (positions) below which a 1x1 conv with few output channels reads X in place as
// the GEMM's B (ImplicitGemm's pack). Over larger planes (55x55: rows 12 KiB apart) a
// tile's few columns of each of K rows came from L3 a line or two at a time: SqueezeNet's
// 64->16 and 128->16 convs at batch 8 ran 1.8 and 2.3 ms read in place, 1.0 and 1.7 ms
// copied with the next job's rows prefetched while copying (1.2 and 1.9 without). 27x27
// planes measured faster in place (its 256->32: 0.97 ms, 1.19 copied). With the wide
// vectors, such convs over planes this large run as PointwiseRows (pointwise_rows.h) now.
constexpr int64_t kDirectPlaneMax = 2048;

// An implicit GEMM job's image, group and columns [c0, c0 + nb) (jobs numbered row group
// fastest, then column chunk, group, image). The job before it prefetches the input it
// copies: the next chunk of a 1x1 conv's rows over a large plane (kDirectPlaneMax) is in
// no cache (see ImplicitGemm).
struct ChunkAhead {
  bool valid = false;
  int64_t n = 0, g = 0, c0 = 0, nb = 0;
  ChunkAhead() = default;
  ChunkAhead(int64_t job, int64_t groups, int64_t chunks, int64_t group, int64_t cols, int64_t out_size)
      : valid(true), n(job / (groups * chunks * group)), g(job / (groups * chunks) % group) {
    c0 = job / groups % chunks * cols;
    nb = (c0 + cols < out_size ? c0 + cols : out_size) - c0;
  }
};

// A 1x1 conv (stride 1, no padding, one group) that PointwiseRows serves: few output
// channels over a large plane (kDirectPlaneMax), the wide vectors.
inline bool PointwiseRowsFit(const Window& w, int64_t group, int64_t in_channels, int64_t out_channels) {
  const bool pointwise = w.kernel_size() == 1 && w.stride[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 &&
                         w.pad[0] == 0 && w.pad[1] == 0 && w.pad[2] == 0 && w.in_size() == w.out_size();
  return WideVectors() && pointwise && group == 1 && out_channels >= 1 && in_channels >= 1 &&
         out_channels <= kPointwiseMaxRows && in_channels <= kPointwiseMaxK &&
         in_channels * out_channels <= kPointwiseMaxWeights && w.in_size() >= kDirectPlaneMax;
}

// Jobs: per image, the positions in chunks of equal width (whole vectors), so two threads
// each take whole images' runs of positions (the pool partitions jobs statically).
__attribute__((noinline)) static int32_t RunPointwiseRows(const kiln_kcall* call, const Window& w,
                                                          const kiln_activation& act, bool packed) {
  using V = v16f;
  constexpr int64_t L = static_cast<int64_t>(sizeof(V) / sizeof(float));
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t batch = X.dims[0], K = X.dims[1], M = Y.dims[1], P = w.out_size();
  const float* px = static_cast<const float*>(X.data);
  const float* pw = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pres = OptionalInputData<float>(call, 4);
  float* py = static_cast<float*>(Y.data);
  // One row group up to kPointwiseOneGroupRows channels, else groups of at most
  // kPointwiseRows as even as whole rows allow (20 as 6 + 7 + 7).
  const int64_t row_groups = M <= kPointwiseOneGroupRows ? 1 : (M + kPointwiseRows - 1) / kPointwiseRows;
  int64_t chunks = (P + kPointwiseChunk - 1) / kPointwiseChunk;
  const int64_t unit = row_groups == 1 && M > kPointwiseRows ? L : kPointwiseVectors * L;  // per register tile
  const int64_t width = ((P + chunks - 1) / chunks + unit - 1) / unit * unit;
  chunks = (P + width - 1) / width;
  int64_t block = width;
  if (row_groups > 1) {
    block = kPointwiseBlockFloats / K / unit * unit;
    if (block < unit) block = unit;
  }
  // W^T per row group: wt[g][k][r] for the group's rows, each group's block at g * K * kPointwiseRows.
  alignas(64) float wt[kPointwiseMaxWeights + kPointwiseRows * kPointwiseMaxK];
  for (int64_t g = 0; g < row_groups; ++g) {
    const int64_t r0 = g * M / row_groups, rows = (g + 1) * M / row_groups - r0;
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t m = r0 + r;
        const float v = packed ? pw[m / gemm::kMr * gemm::kMr * K + k * gemm::kMr + m % gemm::kMr] : pw[m * K + k];
        wt[g * K * kPointwiseRows + k * rows + r] = v;
      }
    }
  }
  const float* pwt = wt;
  gemm::Epilogue kinds;
  if (act.code == KILN_UNARY_RELU) kinds.kind = gemm::Epilogue::kRelu;
  if (act.code == KILN_UNARY_CLIP) kinds.kind = gemm::Epilogue::kClip;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / chunks, p0 = job % chunks * width, p1 = p0 + width < P ? p0 + width : P;
      // With several row groups, each takes a block of positions in turn while the block's
      // input rows are in L1 (kPointwiseBlockFloats).
      for (int64_t b0 = p0; b0 < p1; b0 += block) {
        const int64_t b1 = b0 + block < p1 ? b0 + block : p1;
        for (int64_t g = 0; g < row_groups; ++g) {
          const int64_t r0 = g * M / row_groups, rows = (g + 1) * M / row_groups - r0;
          PointwiseEpilogue ep;
          ep.bias = pbias != nullptr ? pbias + r0 : nullptr;
          ep.residual = pres != nullptr ? pres + (n * M + r0) * P : nullptr;
          ep.kind = kinds.kind;
          ep.lo = static_cast<float>(act.alpha);
          ep.hi = static_cast<float>(act.beta);
          float* y = py + (n * M + r0) * P;
          PointwiseRows<V>(static_cast<int>(rows), px + n * K * P, P, K, pwt + g * K * kPointwiseRows, ep, y, P, b0,
                           b1);
          if (kinds.kind == gemm::Epilogue::kNone) {
            for (int64_t r = 0; r < rows; ++r) ApplyActivation(y + r * P + b0, b1 - b0, act.code, act.alpha, act.beta);
          }
        }
      }
    }
  };
  ParallelFor(call, batch * chunks, 1, body);
  return KILN_KERR_OK;
}

struct ConvKernel {
  // inputs: X [N, C, *in], W [OC, C/group, *kernel], B [OC] optional, then as the fuse
  // pass writes them: an input scale (below; may be omitted) and a residual R shaped as Y,
  // added after the bias and before the activation (Relu(Add(Conv(X), R)), ResNet's skip).
  // Parameters: kiln_conv_params (kiln/kernels/conv.h).
  // f32 with at least 4 output channels per group runs as an implicit GEMM; the direct
  // loop nest below serves depthwise convolutions and f64. In artifacts a constant weight
  // may come pre-packed (packed_weights): per group, rows in panels of gemm::kMr,
  // [ceil(OC/group / kMr)][K][kMr], zero past the last row; job_cols, when not 0, is the
  // job width in output positions (--tune's choice).
  // Not inlined: one copy per artifact serves every such Conv (the shapes are runtime
  // values there; the time goes into the shared micro-kernel either way).
  __attribute__((noinline)) static int32_t ImplicitGemm(const kiln_kcall* call, const Window& w, int64_t group,
                                                        const kiln_activation& act, bool packed, int64_t cols);
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_conv_params& params) {
    const kiln_ktensor& X = call->inputs[0];
    const Window w(params.window, X, call->outputs[0]);
    const ConvExtents ext(params.group, w, X, call->outputs[0]);
    const kiln_activation& act = params.activation;
    const int64_t activation = act.code;
    const bool packed = params.packed_weights == 1;
    const int64_t default_cols = WideVectors() ? gemm::kWideConvNc : gemm::kConvNc;
    int64_t cols = params.job_cols != 0 ? params.job_cols : default_cols;
    if (cols < gemm::kNr || cols > gemm::kMaxNc || cols % gemm::kNr != 0) cols = default_cols;
    const T* px = InputData<T>(call, 0);
    const T* pw = InputData<T>(call, 1);
    const T* pbias = OptionalInputData<T>(call, 2);
    // The input scale (inputs[3], [N or 1, C, 1...]): X[n, c] is read as X[n, c] * scale.
    const T* pscale = OptionalInputData<T>(call, 3);
    const int64_t scale_batch_stride = pscale != nullptr && call->inputs[3].dims[0] > 1 ? ext.in_channels : 0;
    const T* pres = OptionalInputData<T>(call, 4);
    T* py = OutputData<T>(call);
    if constexpr (std::is_same_v<T, float> && kBlockedGemm) {
      if (params.packed_weights == 2) return RunFewPositions(call, w, act);
      if (params.packed_weights == 4) return RunGroupedTransposed(call, w, ext.group, act);
      if (pscale == nullptr && StemFits(w, X, call->outputs[0], ext.group)) {
        if (WideVectors()) return RunStem<v16f, 8, 3>(call, w, act, packed);
        return RunStem<v8f, 4, 3>(call, w, act, packed);
      }
      if (pscale == nullptr && GroupedDirectFits(w, X, ext.group, ext.ic_per_group, ext.oc_per_group)) {
        if (WideVectors()) return RunGroupedDirect<v16f>(call, w, ext.group, act, packed);
        return RunGroupedDirect<v8f>(call, w, ext.group, act, packed);
      }
      if (pscale == nullptr && PointwiseRowsFit(w, ext.group, ext.in_channels, ext.out_channels)) {
        return RunPointwiseRows(call, w, act, packed);
      }
      if (ext.oc_per_group >= 4 && ext.ic_per_group * ext.kernel_size > 0) {
        return ImplicitGemm(call, w, ext.group, act, packed, cols);
      }
      if (packed) return KILN_KERR_UNSUPPORTED;
      const bool depthwise_2d = pscale == nullptr && pres == nullptr && X.rank == 4 && ext.group == ext.in_channels &&
                                ext.group == ext.out_channels && w.dilation[1] == 1 && w.dilation[2] == 1 &&
                                w.in[2] <= kDepthwiseMaxWidth;
      const bool square = w.stride[1] == w.stride[2] && w.kernel[1] == w.kernel[2];
      if (depthwise_2d && square) {
        if (w.kernel[1] == 3 && w.stride[1] == 1 && DepthwiseBlockedFits<3, 3, 1>(w))
          return RunDepthwiseBlocked<3, 3, 1>(call, w, act);
        if (w.kernel[1] == 3 && w.stride[1] == 2 && DepthwiseBlockedFits<3, 3, 2>(w))
          return RunDepthwiseBlocked<3, 3, 2>(call, w, act);
        if (w.kernel[1] == 5 && w.stride[1] == 1 && DepthwiseBlockedFits<5, 5, 1>(w))
          return RunDepthwiseBlocked<5, 5, 1>(call, w, act);
        if (w.kernel[1] == 5 && w.stride[1] == 2 && DepthwiseBlockedFits<5, 5, 2>(w))
          return RunDepthwiseBlocked<5, 5, 2>(call, w, act);
        // ConvNeXt's large-kernel blocks.
        if (w.kernel[1] == 7 && w.stride[1] == 1 && DepthwiseBlockedFits<7, 7, 1>(w))
          return RunDepthwiseBlocked<7, 7, 1>(call, w, act);
      }
      // Dilation 2, stride 1 (MobileNetV3's last blocks in DeepLabV3 and LR-ASPP).
      const bool dilated_2d = pscale == nullptr && pres == nullptr && X.rank == 4 && ext.group == ext.in_channels &&
                              ext.group == ext.out_channels && w.dilation[1] == 2 && w.dilation[2] == 2 &&
                              w.stride[1] == 1 && w.stride[2] == 1 && w.kernel[1] == w.kernel[2];
      if (dilated_2d && w.kernel[1] == 3 && DepthwiseBlockedFits<3, 3, 1, 2>(w))
        return RunDepthwiseBlocked<3, 3, 1, false, 2>(call, w, act);
      if (dilated_2d && w.kernel[1] == 5 && DepthwiseBlockedFits<5, 5, 1, 2>(w))
        return RunDepthwiseBlocked<5, 5, 1, false, 2>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 3 && w.kernel[2] == 3 && w.stride[2] == 1)
        return RunDepthwise2D<3, 3, 1>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 3 && w.kernel[2] == 3 && w.stride[2] == 2)
        return RunDepthwise2D<3, 3, 2>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 5 && w.kernel[2] == 5 && w.stride[2] == 1)
        return RunDepthwise2D<5, 5, 1>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 5 && w.kernel[2] == 5 && w.stride[2] == 2)
        return RunDepthwise2D<5, 5, 2>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 7 && w.kernel[2] == 7 && w.stride[2] == 1)
        return RunDepthwise2D<7, 7, 1>(call, w, act);
    }
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t n = job / ext.out_channels, oc = job % ext.out_channels;
        const int64_t g = oc / ext.oc_per_group, ic0 = g * ext.ic_per_group;
        T* y = py + job * ext.out_size;
        const T bias = pbias ? pbias[oc] : T(0);
        for (int64_t i = 0; i < ext.out_size; ++i) y[i] = bias;
        for (int64_t ic = 0; ic < ext.ic_per_group; ++ic) {
          const T* x = px + (n * ext.in_channels + ic0 + ic) * ext.in_size;
          const T* wk = pw + (oc * ext.ic_per_group + ic) * ext.kernel_size;
          const T scale = pscale != nullptr ? pscale[n * scale_batch_stride + ic0 + ic] : T(1);
          for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
            for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
              for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                const T weight = wk[(kd * w.kernel[1] + kh) * w.kernel[2] + kw];
                for (int64_t od = 0; od < w.out[0]; ++od) {
                  const int64_t id = od * w.stride[0] + kd * w.dilation[0] - w.pad[0];
                  if (id < 0 || id >= w.in[0]) continue;
                  for (int64_t oh = 0; oh < w.out[1]; ++oh) {
                    const int64_t ih = oh * w.stride[1] + kh * w.dilation[1] - w.pad[1];
                    if (ih < 0 || ih >= w.in[1]) continue;
                    const T* xrow = x + (id * w.in[1] + ih) * w.in[2];
                    T* yrow = y + (od * w.out[1] + oh) * w.out[2];
                    // Valid output columns: 0 <= ow*stride + kw*dilation - pad < in.
                    const int64_t shift = kw * w.dilation[2] - w.pad[2];
                    int64_t lo = shift >= 0 ? 0 : (-shift + w.stride[2] - 1) / w.stride[2];
                    int64_t hi = w.in[2] - shift <= 0 ? 0 : (w.in[2] - shift + w.stride[2] - 1) / w.stride[2];
                    if (hi > w.out[2]) hi = w.out[2];
                    if (pscale != nullptr) {
                      // As Conv(Mul(X, scale)) computes it: the product rounded first.
                      for (int64_t ow = lo; ow < hi; ++ow)
                        yrow[ow] += weight * T(xrow[ow * w.stride[2] + shift] * scale);
                    } else if (w.stride[2] == 1) {
                      for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += weight * xrow[ow + shift];
                    } else {
                      for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += weight * xrow[ow * w.stride[2] + shift];
                    }
                  }
                }
              }
            }
          }
        }
        if (pres != nullptr) {
          const T* r = pres + job * ext.out_size;
          for (int64_t i = 0; i < ext.out_size; ++i) y[i] += r[i];
        }
        ApplyActivation(y, ext.out_size, activation, act.alpha, act.beta);
      }
    };
    ParallelFor(call, ext.batch * ext.out_channels, 1, body);
    return KILN_KERR_OK;
  }
};

// Conv as a GEMM per (image, group): C[oc, p] = W[oc, (ic, kd, kh, kw)] · X'[(ic, kd, kh, kw), p]
// where X' (im2col) is never materialised: each packed block of it is gathered from X
// when the core asks for it. Jobs are (image, group, column chunk, row group), row group
// fastest.
int32_t ConvKernel::ImplicitGemm(const kiln_kcall* call, const Window& w, int64_t group, const kiln_activation& act,
                                 bool packed, int64_t cols) {
  const int64_t activation = act.code;
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t icg = in_channels / group, ocg = out_channels / group;
  const int64_t in_size = w.in_size(), out_size = w.out_size(), kernel_size = w.kernel_size();
  const int64_t K = icg * kernel_size;
  const float* px = static_cast<const float*>(X.data);
  const float* pw = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  // The input scale (see Run): applied to each packed row of B, i.e. per input channel.
  const float* pscale = OptionalInputData<float>(call, 3);
  const int64_t scale_batch_stride = pscale != nullptr && call->inputs[3].dims[0] > 1 ? in_channels : 0;
  const float* pres = OptionalInputData<float>(call, 4);  // the residual
  float* py = static_cast<float*>(Y.data);
  const bool pointwise = kernel_size == 1 && w.stride[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 &&
                         w.pad[0] == 0 && w.pad[1] == 0 && w.pad[2] == 0 && in_size == out_size;
  // Column chunks and row groups: gemm::SplitConvJobs.
  const gemm::ConvJobs plan = gemm::SplitConvJobs(call, out_size, ocg, cols, gemm::kNr, kernel_size, batch, group);
  cols = plan.cols;
  const int64_t chunks = plan.chunks;
  const gemm::RowSplit split = plan.split;
  const int64_t groups = split.groups;
  const int64_t kk_hw = w.kernel[1] * w.kernel[2];
  const int64_t total_jobs = plan.Count(batch);
  auto jobs = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end;) {
      const gemm::ConvJobs::Job at = plan.Next(&job, end);  // row groups of one chunk run together
      const int64_t rg = at.rg, cc = at.cc, g = at.g, n = at.n, taken = at.taken;
      const float* x = px + (n * in_channels + g * icg) * in_size;
      const float* scale = pscale != nullptr ? pscale + n * scale_batch_stride + g * icg : nullptr;
      float* c = py + (n * out_channels + g * ocg) * out_size;
      const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + taken);
      const int64_t n0 = cc * cols, n1 = n0 + cols < out_size ? n0 + cols : out_size;
      WindowStarts starts;
      starts.Fill(w, n0, n1 - n0);
      // The next job's input channels (its chunk), for a 1x1 conv's copy to prefetch.
      const ChunkAhead ahead =
          pointwise && job < total_jobs ? ChunkAhead(job, groups, chunks, group, cols, out_size) : ChunkAhead();
      const float* next_x = ahead.valid && in_size >= kDirectPlaneMax && (ahead.n != n || ahead.c0 != n0)
                                ? px + (ahead.n * in_channels + ahead.g * icg) * in_size
                                : nullptr;
      // Packs rows k0.. of the implicit im2col matrix. Output positions of one output row
      // read one input row: a strided (for stride 1, contiguous) run, zero outside.
      auto pack = [&](int64_t k0, int64_t kb, int64_t c0, int64_t nb, float* dst, int64_t* ldb) -> const float* {
        // X is already the B matrix of a 1x1 Conv: [input channels, positions]. With few
        // output channels over small planes (kDirectPlaneMax), packing would cost as much
        // as the product; with many, the packed copy pays for itself by staying in cache.
        if (pointwise && m1 - m0 <= 32 && in_size < kDirectPlaneMax && scale == nullptr) {
          *ldb = in_size;
          return x + k0 * in_size + c0;
        }
        if (!pointwise && MaskedRows(w, scale, nb)) {  // masked loads, runs outermost (im2col.h)
          StageMasked(w, starts, x, scale, k0, kb, nb, dst, *ldb);
          return dst;
        }
        for (int64_t k = 0; k < kb; ++k) {
          float* out = dst + k * *ldb;
          const int64_t kidx = k0 + k, ic = kidx / kernel_size, r = kidx % kernel_size;
          const float* xin = x + ic * in_size;
          if (pointwise && scale != nullptr) {
            const float s = scale[ic];
            for (int64_t j = 0; j < nb; ++j) out[j] = xin[c0 + j] * s;
            continue;
          }
          if (pointwise) {
            memcpy(out, xin + c0, sizeof(float) * nb);
            if (next_x != nullptr) {
              const float* row = next_x + ic * in_size + ahead.c0;
              for (int64_t q = 0; q < ahead.nb; q += 16) __builtin_prefetch(row + q);
            }
            continue;
          }
          const int64_t kd = r / kk_hw, kh = r / w.kernel[2] % w.kernel[1], kw = r % w.kernel[2];
          PackTapRow(w, starts, xin, kd * w.dilation[0], kh * w.dilation[1], kw * w.dilation[2],
                     scale != nullptr ? scale + ic : nullptr, nb, out);
        }
        return dst;
      };
      // Bias, residual, ReLU and Clip happen in the GEMM core's epilogue (in registers, or
      // in L1 with a residual); other activations after.
      gemm::Epilogue ep;
      ep.row_bias = pbias != nullptr ? pbias + g * ocg : nullptr;
      if (pres != nullptr) {
        ep.residual = pres + (n * out_channels + g * ocg) * out_size;
        ep.residual_ld = out_size;
      }
      if (activation == KILN_UNARY_RELU) ep.kind = gemm::Epilogue::kRelu;
      if (activation == KILN_UNARY_CLIP) {
        ep.kind = gemm::Epilogue::kClip;
        ep.lo = static_cast<float>(act.alpha);
        ep.hi = static_cast<float>(act.beta);
      }
      if (packed) {
        const int64_t panels = (ocg + gemm::kMr - 1) / gemm::kMr;
        gemm::Block(m0, m1, n0, n1, K, pw + g * panels * gemm::kMr * K, K, 1, c, out_size, pack, gemm::kMr * K, &ep);
      } else {
        gemm::Block(m0, m1, n0, n1, K, pw + g * ocg * K, K, 1, c, out_size, pack, 0, &ep);
      }
      if (ep.kind == gemm::Epilogue::kNone) {
        for (int64_t oc = m0; oc < m1; ++oc) {
          ApplyActivation(c + oc * out_size + n0, n1 - n0, activation, act.alpha, act.beta);
        }
      }
    }
  };
  ParallelFor(call, total_jobs, 1, jobs);
  return KILN_KERR_OK;
}

struct ConvTransposeKernel {
  // inputs: X [N, C, *in], W [C, OC/group, *kernel], B optional. Parameters:
  // kiln_conv_params' group and window, whose pads apply to the full (uncropped) output.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_conv_params& params) {
    const Window w(params.window, call->inputs[0], call->outputs[0]);
    const ConvExtents ext(params.group, w, call->inputs[0], call->outputs[0]);
    const T* px = InputData<T>(call, 0);
    const T* pw = InputData<T>(call, 1);
    const T* pbias = OptionalInputData<T>(call, 2);
    T* py = OutputData<T>(call);
    for (int64_t n = 0; n < ext.batch; ++n) {
      for (int64_t oc = 0; oc < ext.out_channels; ++oc) {
        T* y = py + (n * ext.out_channels + oc) * ext.out_size;
        const T bias = pbias ? pbias[oc] : T(0);
        for (int64_t i = 0; i < ext.out_size; ++i) y[i] = bias;
        const int64_t g = oc / ext.oc_per_group, ocg = oc % ext.oc_per_group;
        for (int64_t icg = 0; icg < ext.ic_per_group; ++icg) {
          const int64_t ic = g * ext.ic_per_group + icg;
          const T* x = px + (n * ext.in_channels + ic) * ext.in_size;
          const T* wk = pw + (ic * ext.oc_per_group + ocg) * ext.kernel_size;
          for (int64_t id = 0; id < w.in[0]; ++id) {
            for (int64_t ih = 0; ih < w.in[1]; ++ih) {
              for (int64_t iw = 0; iw < w.in[2]; ++iw) {
                const T xv = x[(id * w.in[1] + ih) * w.in[2] + iw];
                ForEachTapInside(w, w.out, id, ih, iw, [&](int64_t tap, int64_t at) { y[at] += xv * wk[tap]; });
              }
            }
          }
        }
      }
    }
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_FLOAT_KERNEL(conv, ConvKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(conv_transpose, ConvTransposeKernel, outputs[0].dtype)
