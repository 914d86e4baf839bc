// Kernels on channel-blocked tensors (NCHW16c), the layout the `layout` pass gives runs of
// pointwise and depthwise convolutions (MobileNet's inverted residual blocks):
//   blocked [N, ceil(C / 16), H, W, 16]: channel c of pixel p at [c / 16][p][c % 16]
// so the sixteen channels of one pixel are one vector. Channels past C (the last block's
// padding) hold finite values nobody reads: convolutions give them zero weights, and
// from_blocked drops them.
//   to_blocked:    [N, C, H, W] -> blocked (padding zero); no parameters
//   from_blocked:  blocked -> [N, C, H, W]; no parameters
//   blocked_mean:  blocked [N, CB, H, W, 16] -> [N, CB, 1, 1, 16], the mean over pixels
//                  (GlobalAveragePool); no parameters
//   blocked_scale: blocked X [N, CB, H, W, 16] times S [N, CB, 1, 1, 16] (one factor per
//                  image and channel: squeeze-and-excitation) -> X's shape; no parameters
//   blocked_conv:  X blocked, Wp (packed at compile time, see ops/layout_ops.cc), B [OCB * 16],
//                  R (optional, blocked like Y, added before the activation) -> Y blocked
//     parameters: kiln_conv_params' blocked_kind, in/out_channels, window (2-D), activation
//     kind 0, pointwise (1x1, stride 1, no padding, group 1): Wp [OCB][ICB * 16][16],
//       Y[p][oc] = B[oc] + sum_ic X[p][ic] Wp[oc / 16][ic][oc % 16] (+ R[p][oc])
//     kind 1, depthwise (group = channels, dilation 1): Wp [CB][KH * KW][16]
//     kind 2, dense (group 1, dilation 1) from an NCHW X: Wp [OCB][IC * KH * KW][16];
//       for CNN stems (3 input channels), whose result then starts a blocked run
// Artifacts use register-blocked vector code; the reference interpreter's build runs the
// plain loop below, so validation compares the two.
#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kiln/kernels/conv.h"
#include "unary_math.h"

using namespace kiln_kernels;
using gemm::v16f;
using gemm::v8f;

namespace {

constexpr int64_t kBlock = 16;
#define KILN_LOAD16(dst, src) memcpy(&(dst), (src), sizeof(v16f))
#define KILN_STORE16(dst, src) memcpy((dst), &(src), sizeof(v16f))

enum : int64_t { kPointwise = 0, kDepthwise = 1, kDense = 2 };

struct BlockedConvParams {
  int64_t kind, in_channels, out_channels, kh, kw, sh, sw, pad_top, pad_left, activation;
  float alpha, beta;
  int64_t batch, h, w, oh, ow;
  // The call's tensors: X, the packed weight, the padded bias, the residual (or null), Y.
  const float *x, *wp, *bias, *r;
  float* y;
  int64_t icb() const { return (in_channels + kBlock - 1) / kBlock; }
  int64_t ocb() const { return (out_channels + kBlock - 1) / kBlock; }

  void Load(const kiln_kcall* call, const kiln_conv_params& p) {
    kind = p.blocked_kind, in_channels = p.in_channels, out_channels = p.out_channels;
    kh = p.window.kernel[0], kw = p.window.kernel[1], sh = p.window.strides[0], sw = p.window.strides[1];
    pad_top = p.window.pads_begin[0], pad_left = p.window.pads_begin[1], activation = p.activation.code;
    alpha = static_cast<float>(p.activation.alpha);
    beta = static_cast<float>(p.activation.beta);
    const kiln_ktensor& in = call->inputs[0];
    const kiln_ktensor& out = call->outputs[0];
    batch = in.dims[0], h = in.dims[2], w = in.dims[3], oh = out.dims[2], ow = out.dims[3];
    x = static_cast<const float*>(in.data);
    wp = InputData<float>(call, 1);
    bias = InputData<float>(call, 2);
    r = OptionalInputData<float>(call, 3);
    y = static_cast<float*>(out.data);
  }
};

// ReLU and Clip happen on the accumulators; other activations on the stored tile after.
// (In place: GCC warns about the ABI of vector arguments and returns, fast_math.h.)
inline void ClampVector(v16f& v, int64_t code, float lo, float hi) {
  if (code == KILN_UNARY_RELU) {
    const v16f zero = {};
    v = v > zero ? v : zero;
  } else if (code == KILN_UNARY_CLIP) {
    const v16f l = KILN_SPLAT16(lo), u = KILN_SPLAT16(hi);
    v = v < l ? l : (v > u ? u : v);
  }
}
inline bool ClampsInRegisters(int64_t code) { return code == -1 || code == KILN_UNARY_RELU || code == KILN_UNARY_CLIP; }

// The reference loop (the interpreter's build): one output element at a time.
int32_t ReferenceBlockedConv(const kiln_kcall* call, const BlockedConvParams& q) {
  const float *x = q.x, *wp = q.wp, *bias = q.bias, *r = q.r;
  float* y = q.y;
  const int64_t icb = q.icb(), ocb = q.ocb(), in_plane = q.h * q.w * kBlock, out_plane = q.oh * q.ow * kBlock;
  // sum += x_at(ih, iw) * w_at(a, b) over the window taps of output (i, j) inside the image.
  auto window = [&](float& sum, int64_t i, int64_t j, auto x_at, auto w_at) {
    for (int64_t a = 0; a < q.kh; ++a) {
      const int64_t ih = i * q.sh - q.pad_top + a;
      if (ih < 0 || ih >= q.h) continue;
      for (int64_t b = 0; b < q.kw; ++b) {
        const int64_t iw = j * q.sw - q.pad_left + b;
        if (iw >= 0 && iw < q.w) sum += x_at(ih, iw) * w_at(a, b);
      }
    }
  };
  for (int64_t n = 0; n < q.batch; ++n) {
    for (int64_t ob = 0; ob < ocb; ++ob) {
      for (int64_t i = 0; i < q.oh; ++i) {
        for (int64_t j = 0; j < q.ow; ++j) {
          for (int64_t l = 0; l < kBlock; ++l) {
            float acc = bias[ob * kBlock + l];
            if (q.kind == kPointwise) {
              const float* xp = x + n * icb * in_plane + (i * q.w + j) * kBlock;
              for (int64_t ic = 0; ic < icb * kBlock; ++ic) {
                acc += xp[ic / kBlock * in_plane + ic % kBlock] * wp[(ob * icb * kBlock + ic) * kBlock + l];
              }
            } else if (q.kind == kDense) {
              for (int64_t c = 0; c < q.in_channels; ++c) {
                const float* xc = x + (n * q.in_channels + c) * q.h * q.w;
                const float* wc = wp + (ob * q.in_channels + c) * q.kh * q.kw * kBlock;
                window(
                    acc, i, j, [&](int64_t ih, int64_t iw) { return xc[ih * q.w + iw]; },
                    [&](int64_t a, int64_t b) { return wc[(a * q.kw + b) * kBlock + l]; });
              }
            } else {
              const float* xc = x + (n * icb + ob) * in_plane;
              const float* wc = wp + ob * q.kh * q.kw * kBlock;
              window(
                  acc, i, j, [&](int64_t ih, int64_t iw) { return xc[(ih * q.w + iw) * kBlock + l]; },
                  [&](int64_t a, int64_t b) { return wc[(a * q.kw + b) * kBlock + l]; });
            }
            const int64_t at = (n * ocb + ob) * out_plane + (i * q.ow + j) * kBlock + l;
            if (r != nullptr) acc += r[at];
            y[at] = q.activation >= 0 ? ApplyUnary<float>(static_cast<int>(q.activation), acc, q.alpha, q.beta) : acc;
          }
        }
      }
    }
  }
  return KILN_KERR_OK;
}

// One pointwise tile: P consecutive pixels x OB output blocks, the accumulators in
// registers over every input channel (the padding of the last block skipped). x: the tile's first pixel in input block
// 0 (blocks x_plane floats apart); w: output block 0's packed rows (blocks w_plane apart); y, r: the tile's first pixel
// in output block 0 (blocks y_plane apart).
// Starts a tile's P x OB accumulators at the bias of each output block. Always inlined:
// the accumulators must stay in registers.
template <int P, int OB>
__attribute__((always_inline)) inline void LoadBias(v16f (&acc)[P][OB], const float* bias) {
  for (int o = 0; o < OB; ++o) {
    v16f b;
    KILN_LOAD16(b, bias + o * kBlock);
    for (int p = 0; p < P; ++p) acc[p][o] = b;
  }
}

template <int P, int OB>
__attribute__((noinline)) void PointwiseTile(const float* x, int64_t x_plane, int64_t in_channels, const float* w,
                                             int64_t w_plane, const float* bias, const float* r, float* y,
                                             int64_t y_plane, int64_t code, float lo, float hi) {
#ifdef __clang__
  // The library builds with -ffp-contract=off; as in the GEMM core (gemm_core.h), these
  // sums may fuse their multiply-adds into FMAs: half the instructions (MobileNetV2 on
  // one thread: 8.0 -> 6.7 ms, best of 200).
#pragma clang fp contract(fast)
#endif
  v16f acc[P][OB];
  LoadBias<P, OB>(acc, bias);
  // One input channel: OB weight vectors, P broadcasts, P x OB multiply-adds.
  auto step = [&](const float* xb, const float* wb, int i) {
    v16f wv[OB];
    for (int o = 0; o < OB; ++o) KILN_LOAD16(wv[o], wb + o * w_plane + i * kBlock);
    for (int p = 0; p < P; ++p) {
      const v16f xv = KILN_SPLAT16(xb[p * kBlock + i]);
      for (int o = 0; o < OB; ++o) acc[p][o] += xv * wv[o];
    }
  };
  const int64_t full = in_channels / kBlock;
  for (int64_t blk = 0; blk < full; ++blk) {
#pragma GCC unroll 16
    for (int i = 0; i < kBlock; ++i) step(x + blk * x_plane, w + blk * kBlock * kBlock, i);
  }
  // The last block's real channels only (24 channels: a third less work than 32).
  for (int i = 0; i < in_channels % kBlock; ++i) step(x + full * x_plane, w + full * kBlock * kBlock, i);
  for (int o = 0; o < OB; ++o) {
    for (int p = 0; p < P; ++p) {
      v16f v = acc[p][o];
      if (r != nullptr) {
        v16f rv;
        KILN_LOAD16(rv, r + o * y_plane + p * kBlock);
        v += rv;
      }
      ClampVector(v, code, lo, hi);
      KILN_STORE16(y + o * y_plane + p * kBlock, v);
    }
  }
}

// Pixels [p0, p1) of one image for output blocks [ob0, ob0 + OB): tiles of P, then of 4,
// then single pixels.
template <int P, int OB>
void PointwiseRun(const BlockedConvParams& q, const float* x, const float* wp, const float* bias, const float* r,
                  float* y, int64_t p0, int64_t p1, int64_t ob0) {
  const int64_t icb = q.icb(), x_plane = q.h * q.w * kBlock, y_plane = q.oh * q.ow * kBlock;
  const int64_t w_plane = icb * kBlock * kBlock;
  const float* w = wp + ob0 * w_plane;
  const float* b = bias + ob0 * kBlock;
  const int64_t out0 = ob0 * y_plane;
  int64_t p = p0;
  auto tiles = [&](auto tile, int64_t width) {
    for (; p + width <= p1; p += width) {
      tile(x + p * kBlock, x_plane, q.in_channels, w, w_plane, b, r != nullptr ? r + out0 + p * kBlock : nullptr,
           y + out0 + p * kBlock, y_plane, q.activation, q.alpha, q.beta);
    }
  };
  tiles(PointwiseTile<P, OB>, P);
  if constexpr (P > 4) tiles(PointwiseTile<4, OB>, 4);
  tiles(PointwiseTile<1, OB>, 1);
}

// Pixels per tile for OB output blocks per tile. AVX-512 (32 registers): measured on
// Zen 4 over pointwise convs of 32 to 576 input channels, every one of these runs at the
// FMA peak (112-117 GFLOP/s), while some neighbours do not (two blocks by 8 or 12 pixels:
// 62-80 GFLOP/s). Narrower targets (a 16-lane vector is two registers of 16): 8 or fewer
// accumulators, two blocks by 2 pixels or one by 4.
constexpr int64_t kWidePixels[5] = {0, 14, 13, 7, 4};
int64_t TilePixels(int64_t obs) { return WideVectors() ? kWidePixels[obs] : obs == 2 ? 2 : 4; }

void PointwiseGroup(const BlockedConvParams& q, const float* x, const float* wp, const float* bias, const float* r,
                    float* y, int64_t p0, int64_t p1, int64_t ob0, int64_t obs) {
  if (WideVectors()) {
    switch (obs) {
      case 4: return PointwiseRun<kWidePixels[4], 4>(q, x, wp, bias, r, y, p0, p1, ob0);
      case 3: return PointwiseRun<kWidePixels[3], 3>(q, x, wp, bias, r, y, p0, p1, ob0);
      case 2: return PointwiseRun<kWidePixels[2], 2>(q, x, wp, bias, r, y, p0, p1, ob0);
      default: return PointwiseRun<kWidePixels[1], 1>(q, x, wp, bias, r, y, p0, p1, ob0);
    }
  }
  if (obs == 2) return PointwiseRun<2, 2>(q, x, wp, bias, r, y, p0, p1, ob0);
  return PointwiseRun<4, 1>(q, x, wp, bias, r, y, p0, p1, ob0);
}

int32_t FastPointwise(const kiln_kcall* call, const BlockedConvParams& q) {
  const float *x = q.x, *wp = q.wp, *bias = q.bias, *r = q.r;
  float* y = q.y;
  const int64_t icb = q.icb(), ocb = q.ocb(), pixels = q.h * q.w;
  const int64_t x_image = icb * pixels * kBlock, y_image = ocb * pixels * kBlock;
  const int64_t group = WideVectors() ? 4 : 2;  // output blocks per tile
  const int64_t groups = (ocb + group - 1) / group;
  // Pixel chunks, a multiple of the tile widths used. Large images: the chunk's input
  // (chunk x input channels) about 32 KiB, so it stays in L1 while every output block
  // group goes past it. Images whose whole input fits in half of L2 (14x14, 7x7, and
  // SqueezeNet's 512 channels of 13x13, 338 KiB): the whole image, so each group's weights
  // (up to 1280 x 64 floats) are read once rather than once per chunk, split in two to four
  // only to give the threads at least four jobs. (At 256 KiB, SqueezeNet's 512 -> 1000 conv
  // went in 7 chunks, its 2 MiB of weights read 7 times: 0.78 -> 0.75 ms at one thread,
  // 0.44 -> 0.37 at two on the Zen 5 host, ONNX Runtime 0.73 and 0.39.)
  const int64_t a = TilePixels(ocb < group ? ocb : group), b = TilePixels(ocb % group == 0 ? group : ocb % group);
  int64_t step = a;
  while (step % b != 0) step += a;
  int64_t target = 8192 / (icb * kBlock);
  if (icb * kBlock * pixels * static_cast<int64_t>(sizeof(float)) <= (int64_t{512} << 10)) {
    const int64_t parts = groups >= 4 ? 1 : (4 + groups - 1) / groups;
    target = (pixels + parts - 1) / parts;
  }
  int64_t chunk = (target + step - 1) / step * step;
  if (chunk < step) chunk = step;
  const int64_t chunks = (pixels + chunk - 1) / chunk;
  // Jobs: (image, chunk, block group), block group fastest.
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t g = job % groups, c = job / groups % chunks, n = job / (groups * chunks);
      const int64_t p0 = c * chunk, p1 = p0 + chunk < pixels ? p0 + chunk : pixels;
      const int64_t ob0 = g * group, obs = ocb - ob0 < group ? ocb - ob0 : group;
      PointwiseGroup(q, x + n * x_image, wp, bias, r != nullptr ? r + n * y_image : nullptr, y + n * y_image, p0, p1,
                     ob0, obs);
      if (!ClampsInRegisters(q.activation)) {
        for (int64_t ob = ob0; ob < ob0 + obs; ++ob) {
          ApplyActivation(y + n * y_image + ob * pixels * kBlock + p0 * kBlock, (p1 - p0) * kBlock, q.activation,
                          q.alpha, q.beta);
        }
      }
    }
  };
  ParallelFor(call, q.batch * chunks * groups, 1, body);
  return KILN_KERR_OK;
}

// Output rows [r0, r1) of one depthwise channel block: x, y the block's planes, w its
// KH*KW weight vectors. Interior columns (every tap inside the row) go four at a time with
// no checks; border columns and rows check each tap.
template <int KH, int KW, int S>
__attribute__((noinline)) void DepthwiseRows(const BlockedConvParams& q, const float* x, const float* w,
                                             const float* bias, float* y, int64_t r0, int64_t r1) {
#ifdef __clang__
#pragma clang fp contract(fast)  // FMAs, as in PointwiseTile
#endif
  const int64_t kh = KH > 0 ? KH : q.kh, kw = KW > 0 ? KW : q.kw;
  const int64_t sh = S > 0 ? S : q.sh, sw = S > 0 ? S : q.sw;
  v16f b;
  KILN_LOAD16(b, bias);
  // Interior columns: 0 <= j*sw - pad_left and j*sw - pad_left + kw - 1 < w.
  int64_t c0 = (q.pad_left + sw - 1) / sw;
  int64_t c1 = q.w - kw + q.pad_left < 0 ? 0 : (q.w - kw + q.pad_left) / sw + 1;
  if (c1 > q.ow) c1 = q.ow;
  if (c0 > c1) c0 = c1;
  const float lo = q.alpha, hi = q.beta;
  for (int64_t i = r0; i < r1; ++i) {
    float* yr = y + i * q.ow * kBlock;
    const int64_t ih0 = i * sh - q.pad_top;
    auto one = [&](int64_t j) {
      v16f acc = b;
      for (int64_t a = 0; a < kh; ++a) {
        const int64_t ih = ih0 + a;
        if (ih < 0 || ih >= q.h) continue;
        for (int64_t c = 0; c < kw; ++c) {
          const int64_t iw = j * sw - q.pad_left + c;
          if (iw < 0 || iw >= q.w) continue;
          v16f xv, wv;
          KILN_LOAD16(xv, x + (ih * q.w + iw) * kBlock);
          KILN_LOAD16(wv, w + (a * kw + c) * kBlock);
          acc += xv * wv;
        }
      }
      ClampVector(acc, q.activation, lo, hi);
      KILN_STORE16(yr + j * kBlock, acc);
    };
    int64_t j = 0;
    for (; j < c0; ++j) one(j);
    constexpr int Q = 4;
    for (; j + Q <= c1; j += Q) {
      v16f acc[Q];
      for (int t = 0; t < Q; ++t) acc[t] = b;
      for (int64_t a = 0; a < kh; ++a) {
        const int64_t ih = ih0 + a;
        if (ih < 0 || ih >= q.h) continue;
        const float* xr = x + (ih * q.w + j * sw - q.pad_left) * kBlock;
        for (int64_t c = 0; c < kw; ++c) {
          v16f wv;
          KILN_LOAD16(wv, w + (a * kw + c) * kBlock);
          for (int t = 0; t < Q; ++t) {
            v16f xv;
            KILN_LOAD16(xv, xr + (t * sw + c) * kBlock);
            acc[t] += xv * wv;
          }
        }
      }
      for (int t = 0; t < Q; ++t) {
        ClampVector(acc[t], q.activation, lo, hi);
        KILN_STORE16(yr + (j + t) * kBlock, acc[t]);
      }
    }
    for (; j < q.ow; ++j) one(j);
    if (!ClampsInRegisters(q.activation)) ApplyActivation(yr, q.ow * kBlock, q.activation, q.alpha, q.beta);
  }
}

int32_t FastDepthwise(const kiln_kcall* call, const BlockedConvParams& q) {
  const float *x = q.x, *wp = q.wp, *bias = q.bias;
  float* y = q.y;
  const int64_t cb = q.ocb(), x_plane = q.h * q.w * kBlock, y_plane = q.oh * q.ow * kBlock;
  // Jobs: (image, channel block, strip of rows); strips of about 4096 outputs.
  int64_t rows = 4096 / (q.ow * kBlock);
  if (rows < 1) rows = 1;
  const int64_t strips = (q.oh + rows - 1) / rows;
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t s = job % strips, plane = job / strips, c = plane % cb;
      const int64_t r0 = s * rows, r1 = r0 + rows < q.oh ? r0 + rows : q.oh;
      const float* xp = x + plane * x_plane;
      const float* w = wp + c * q.kh * q.kw * kBlock;
      float* yp = y + plane * y_plane;
      const bool same = q.sh == q.sw;
      if (same && q.kh == 3 && q.kw == 3 && q.sh == 1) {
        DepthwiseRows<3, 3, 1>(q, xp, w, bias + c * kBlock, yp, r0, r1);
      } else if (same && q.kh == 3 && q.kw == 3 && q.sh == 2) {
        DepthwiseRows<3, 3, 2>(q, xp, w, bias + c * kBlock, yp, r0, r1);
      } else if (same && q.kh == 5 && q.kw == 5 && q.sh == 1) {
        DepthwiseRows<5, 5, 1>(q, xp, w, bias + c * kBlock, yp, r0, r1);
      } else if (same && q.kh == 5 && q.kw == 5 && q.sh == 2) {
        DepthwiseRows<5, 5, 2>(q, xp, w, bias + c * kBlock, yp, r0, r1);
      } else {
        DepthwiseRows<0, 0, 0>(q, xp, w, bias + c * kBlock, yp, r0, r1);
      }
    }
  };
  ParallelFor(call, q.batch * cb * strips, 1, body);
  return KILN_KERR_OK;
}

// Dense conv from NCHW: one tile of P output pixels of a row x OB output blocks. rows: the
// zero-padded input rows the output row reads, [IC][KH][row_len], at the tile's first
// pixel; w: output block 0's packed taps (blocks w_plane apart); y: the tile's first pixel
// in output block 0 (blocks y_plane apart).
template <int P, int OB>
__attribute__((noinline)) void DenseTile(const float* rows, int64_t row_len, const BlockedConvParams& q, const float* w,
                                         int64_t w_plane, const float* bias, float* y, int64_t y_plane) {
#ifdef __clang__
#pragma clang fp contract(fast)  // FMAs, as in PointwiseTile
#endif
  v16f acc[P][OB];
  LoadBias<P, OB>(acc, bias);
  int64_t tap = 0;
  for (int64_t r = 0; r < q.in_channels * q.kh; ++r) {
    const float* row = rows + r * row_len;
    for (int64_t b = 0; b < q.kw; ++b, ++tap) {
      v16f wv[OB];
      for (int o = 0; o < OB; ++o) KILN_LOAD16(wv[o], w + o * w_plane + tap * kBlock);
      for (int p = 0; p < P; ++p) {
        const v16f xv = KILN_SPLAT16(row[p * q.sw + b]);
        for (int o = 0; o < OB; ++o) acc[p][o] += xv * wv[o];
      }
    }
  }
  for (int o = 0; o < OB; ++o) {
    for (int p = 0; p < P; ++p) {
      ClampVector(acc[p][o], q.activation, q.alpha, q.beta);
      KILN_STORE16(y + o * y_plane + p * kBlock, acc[p][o]);
    }
  }
}

template <int P, int OB>
void DenseRun(const BlockedConvParams& q, const float* rows, int64_t row_len, const float* wp, const float* bias,
              float* y, int64_t ob0) {
  const int64_t w_plane = q.in_channels * q.kh * q.kw * kBlock, y_plane = q.oh * q.ow * kBlock;
  int64_t j = 0;
  auto tiles = [&](auto tile, int64_t width) {
    for (; j + width <= q.ow; j += width) {
      tile(rows + j * q.sw, row_len, q, wp + ob0 * w_plane, w_plane, bias + ob0 * kBlock,
           y + ob0 * y_plane + j * kBlock, y_plane);
    }
  };
  tiles(DenseTile<P, OB>, P);
  if constexpr (P > 4) tiles(DenseTile<4, OB>, 4);
  tiles(DenseTile<1, OB>, 1);
}

// Floats of padded input rows one output row of a dense conv reads (ops/layout_ops.cc
// takes dense convs whose rows fit).
constexpr int64_t kDenseRowFloats = 8192;

int32_t FastDense(const kiln_kcall* call, const BlockedConvParams& q) {
  const float *x = q.x, *wp = q.wp, *bias = q.bias;
  float* y = q.y;
  const int64_t ocb = q.ocb(), row_len = (q.ow - 1) * q.sw + q.kw;
  if (q.in_channels * q.kh * row_len > kDenseRowFloats) return KILN_KERR_UNSUPPORTED;
  const int64_t group = WideVectors() ? 4 : 2, y_plane = q.oh * q.ow * kBlock;
  // Jobs: (image, output row); each copies the input rows it reads, zero-padded, then
  // computes the row for every output block.
  auto body = [&](int64_t begin, int64_t end) {
    alignas(64) float rows[kDenseRowFloats];
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / q.oh, i = job % q.oh;
      for (int64_t c = 0; c < q.in_channels; ++c) {
        for (int64_t a = 0; a < q.kh; ++a) {
          float* row = rows + (c * q.kh + a) * row_len;
          const int64_t ih = i * q.sh - q.pad_top + a;
          if (ih < 0 || ih >= q.h) {
            memset(row, 0, sizeof(float) * row_len);
            continue;
          }
          // row[t] = input column t - pad_left: zeros, the image's columns, zeros.
          const float* src = x + ((n * q.in_channels + c) * q.h + ih) * q.w;
          const int64_t t0 = q.pad_left < row_len ? q.pad_left : row_len;
          const int64_t t1 = q.pad_left + q.w < row_len ? q.pad_left + q.w : row_len;
          memset(row, 0, sizeof(float) * t0);
          if (t1 > t0) memcpy(row + t0, src + (t0 - q.pad_left), sizeof(float) * (t1 - t0));
          if (row_len > t1) memset(row + t1, 0, sizeof(float) * (row_len - t1));
        }
      }
      float* yrow = y + n * ocb * y_plane + i * q.ow * kBlock;
      for (int64_t ob0 = 0; ob0 < ocb; ob0 += group) {
        const int64_t obs = ocb - ob0 < group ? ocb - ob0 : group;
        if (WideVectors()) {
          switch (obs) {
            case 4: DenseRun<kWidePixels[4], 4>(q, rows, row_len, wp, bias, yrow, ob0); break;
            case 3: DenseRun<kWidePixels[3], 3>(q, rows, row_len, wp, bias, yrow, ob0); break;
            case 2: DenseRun<kWidePixels[2], 2>(q, rows, row_len, wp, bias, yrow, ob0); break;
            default: DenseRun<kWidePixels[1], 1>(q, rows, row_len, wp, bias, yrow, ob0); break;
          }
        } else if (obs == 2) {
          DenseRun<2, 2>(q, rows, row_len, wp, bias, yrow, ob0);
        } else {
          DenseRun<4, 1>(q, rows, row_len, wp, bias, yrow, ob0);
        }
        if (!ClampsInRegisters(q.activation)) {
          for (int64_t ob = ob0; ob < ob0 + obs; ++ob) {
            ApplyActivation(yrow + ob * y_plane, q.ow * kBlock, q.activation, q.alpha, q.beta);
          }
        }
      }
    }
  };
  ParallelFor(call, q.batch * q.oh, 1, body);
  return KILN_KERR_OK;
}

struct BlockedConvKernel {
  static int32_t RunF32(const kiln_kcall* call, const kiln_conv_params& params) {
    BlockedConvParams q;
    q.Load(call, params);
    if (q.kind != kPointwise && q.kind != kDepthwise && q.kind != kDense) return KILN_KERR_UNSUPPORTED;
    if (q.kind != kPointwise && call->num_inputs > 3) return KILN_KERR_UNSUPPORTED;
    if (!kFastKernels) return ReferenceBlockedConv(call, q);
    if (q.kind == kDense) return FastDense(call, q);
    return q.kind == kPointwise ? FastPointwise(call, q) : FastDepthwise(call, q);
  }
};

// One (image, channel block) plane between NCHW and blocked. to_blocked reads channels
// c0.. of an image (src: the image, channels `pixels` apart) into the plane (dst,
// [pixels][16], the padding zero); from_blocked the reverse, dropping the padding.
// Artifacts move 8 pixels x 8 channels at a time through an 8x8 transpose; the
// interpreter's build and the ragged ends go element by element.
template <bool kToBlocked, typename T>
void ReorderPlane(const T* src, T* dst, int64_t c0, int64_t channels, int64_t pixels) {
  auto nchw = [&](int64_t c, int64_t p) { return (c0 + c) * pixels + p; };
  auto blocked = [&](int64_t c, int64_t p) { return p * kBlock + c; };
  int64_t p = 0;
  if constexpr (kFastKernels && std::is_same_v<T, float>) {
    if (c0 + kBlock <= channels) {
      for (; p + 8 <= pixels; p += 8) {
        for (int64_t half = 0; half < kBlock; half += 8) {
          v8f rows[8];  // to_blocked: 8 channels' rows of 8 pixels; from_blocked: 8 pixels' channels
          for (int64_t r = 0; r < 8; ++r)
            KILN_LOAD8(rows[r], src + (kToBlocked ? nchw(half + r, p) : blocked(half, p + r)));
          gemm::Transpose8x8(rows);
          for (int64_t r = 0; r < 8; ++r)
            KILN_STORE8(dst + (kToBlocked ? blocked(half, p + r) : nchw(half + r, p)), rows[r]);
        }
      }
    }
  }
  for (; p < pixels; ++p) {
    for (int64_t l = 0; l < kBlock; ++l) {
      if (kToBlocked) {
        dst[blocked(l, p)] = c0 + l < channels ? src[nchw(l, p)] : T(0);
      } else if (c0 + l < channels) {
        dst[nchw(l, p)] = src[blocked(l, p)];
      }
    }
  }
}

// to_blocked (kToBlocked) and from_blocked: jobs are (image, channel block) planes.
template <bool kToBlocked>
struct ReorderKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& image = kToBlocked ? call->inputs[0] : call->outputs[0];
    const int64_t batch = image.dims[0], channels = image.dims[1], pixels = image.dims[2] * image.dims[3];
    const int64_t blocks = (kToBlocked ? call->outputs[0] : call->inputs[0]).dims[1];
    const T* x = InputData<T>(call, 0);
    T* y = OutputData<T>(call);
    auto body = [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t n = plane / blocks, c0 = plane % blocks * kBlock;
        const int64_t at_image = n * channels * pixels, at_plane = plane * pixels * kBlock;
        if (kToBlocked) {
          ReorderPlane<true>(x + at_image, y + at_plane, c0, channels, pixels);
        } else {
          ReorderPlane<false>(x + at_plane, y + at_image, c0, channels, pixels);
        }
      }
    };
    ParallelFor(call, batch * blocks, 1, body);
    return KILN_KERR_OK;
  }
};

// Per (image, channel block): the mean of its pixels' vectors, summed in f32 with four
// vectors of partial sums (the reference build: one element at a time, in order).
struct BlockedMeanKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const int64_t planes = X.dims[0] * X.dims[1], pixels = X.dims[2] * X.dims[3];
    const T* x = static_cast<const T*>(X.data);
    T* y = OutputData<T>(call);
    auto body = [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* xp = x + plane * pixels * kBlock;
        T* yp = y + plane * kBlock;
        if constexpr (kFastKernels && std::is_same_v<T, float>) {
          v16f sum[4] = {};
          int64_t p = 0;
          for (; p + 4 <= pixels; p += 4) {
            for (int u = 0; u < 4; ++u) {
              v16f v;
              KILN_LOAD16(v, xp + (p + u) * kBlock);
              sum[u] += v;
            }
          }
          for (; p < pixels; ++p) {
            v16f v;
            KILN_LOAD16(v, xp + p * kBlock);
            sum[0] += v;
          }
          v16f mean = (sum[0] + sum[1]) + (sum[2] + sum[3]);
          mean *= KILN_SPLAT16(1.0f / static_cast<float>(pixels));
          KILN_STORE16(yp, mean);
        } else {
          for (int64_t l = 0; l < kBlock; ++l) {
            T sum = 0;
            for (int64_t p = 0; p < pixels; ++p) sum += xp[p * kBlock + l];
            yp[l] = sum / static_cast<T>(pixels);
          }
        }
      }
    };
    ParallelFor(call, planes, 1, body);
    return KILN_KERR_OK;
  }
};

struct BlockedScaleKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const kiln_ktensor& S = call->inputs[1];
    const int64_t blocks = X.dims[1], planes = X.dims[0] * blocks, pixels = X.dims[2] * X.dims[3];
    const bool per_image = S.dims[0] != 1;
    const T* x = static_cast<const T*>(X.data);
    const T* sc = static_cast<const T*>(S.data);
    T* y = OutputData<T>(call);
    auto body = [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* xp = x + plane * pixels * kBlock;
        const T* sp = sc + (per_image ? plane : plane % blocks) * kBlock;
        T* yp = y + plane * pixels * kBlock;
        if constexpr (kFastKernels && std::is_same_v<T, float>) {
          v16f f;
          KILN_LOAD16(f, sp);
          for (int64_t p = 0; p < pixels; ++p) {
            v16f v;
            KILN_LOAD16(v, xp + p * kBlock);
            v *= f;
            KILN_STORE16(yp + p * kBlock, v);
          }
        } else {
          for (int64_t p = 0; p < pixels; ++p) {
            for (int64_t l = 0; l < kBlock; ++l) yp[p * kBlock + l] = xp[p * kBlock + l] * sp[l];
          }
        }
      }
    };
    ParallelFor(call, planes, 1, body);
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_F32_KERNEL(blocked_conv, BlockedConvKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(to_blocked, ReorderKernel<true>, outputs[0].dtype)
KILN_FLOAT_KERNEL(from_blocked, ReorderKernel<false>, outputs[0].dtype)
KILN_FLOAT_KERNEL(blocked_mean, BlockedMeanKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(blocked_scale, BlockedScaleKernel, outputs[0].dtype)
