// Depthwise 2-D f32 convolution paths, shared by Conv (conv.cc) and MaxPool (pool.cc),
// whose 3x3 stride-2 max pooling runs the same strips with a max instead of a product.
// Artifacts only (kFastKernels); the reference interpreter runs the plain loops.
#pragma once

#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kernel_window.h"
#include "kiln/kernels/params.h"
#include "unary_math.h"

namespace kiln_kernels {

// Depthwise 2-D f32 convolution (group == C == OC), dilation 1, with a KHxKW window and
// column stride SW fixed at compile time (3x3 and 5x5, strides 1 and 2: MobileNet and
// EfficientNet). Per output row, the KH input rows are picked once (a zero row stands in
// for rows in the padding), then the interior columns, whose taps are all inside the
// image, run as one loop over ow with the taps unrolled, which LLVM vectorizes; the few
// border columns take the checked scalar path. Serves planes with rows wider than
// RunDepthwiseBlocked takes (below). Not in the reference interpreter's build.
// Not inlined: one copy per window shape serves every node. Inlined into each node,
// EfficientNet-B0 took 56 s to compile instead of 15.
constexpr int64_t kDepthwiseMaxWidth = 1024;  // widest input row the zero row covers

template <int KH, int KW, int SW>
__attribute__((noinline)) static int32_t RunDepthwise2D(const kiln_kcall* call, const Window& w,
                                                        const kiln_activation& act) {
  const int64_t activation = act.code;
  const float* px = InputData<float>(call, 0);
  const float* pw = InputData<float>(call, 1);
  const float* pbias = OptionalInputData<float>(call, 2);
  float* py = OutputData<float>(call);
  const int64_t channels = call->inputs[0].dims[1], jobs = call->inputs[0].dims[0] * channels;
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2], SH = w.stride[1], PH = w.pad[1], PW = w.pad[2];
  // Interior columns: 0 <= ow * SW - PW and ow * SW - PW + KW - 1 < W.
  const int64_t ow_lo = (PW + SW - 1) / SW;
  const int64_t ow_hi = W - KW + PW < 0 ? 0 : ((W - KW + PW) / SW + 1 < OW ? (W - KW + PW) / SW + 1 : OW);
  const float alpha = static_cast<float>(act.alpha), beta = static_cast<float>(act.beta);
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float zero_row[kDepthwiseMaxWidth] = {};
    for (int64_t job = begin; job < end; ++job) {
      const int64_t c = job % channels;
      const float* x = px + job * H * W;
      float* y = py + job * OH * OW;
      float taps[KH * KW];
      for (int k = 0; k < KH * KW; ++k) taps[k] = pw[c * KH * KW + k];
      const float bias = pbias ? pbias[c] : 0.f;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const float* rows[KH];
        for (int kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * SH - PH + kh;
          rows[kh] = ih >= 0 && ih < H ? x + ih * W : zero_row;
        }
        float* __restrict yrow = y + oh * OW;
        auto border = [&](int64_t ow) {
          float acc = bias;
          for (int kh = 0; kh < KH; ++kh) {
            for (int kw = 0; kw < KW; ++kw) {
              const int64_t iw = ow * SW - PW + kw;
              if (iw >= 0 && iw < W) acc += taps[kh * KW + kw] * rows[kh][iw];
            }
          }
          yrow[ow] = acc;
        };
        for (int64_t ow = 0; ow < ow_lo && ow < OW; ++ow) border(ow);
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
          const int64_t iw = ow * SW - PW;
          float acc = bias;
          for (int kh = 0; kh < KH; ++kh) {
            for (int kw = 0; kw < KW; ++kw) acc += taps[kh * KW + kw] * rows[kh][iw + kw];
          }
          yrow[ow] = acc;
        }
        for (int64_t ow = ow_hi > ow_lo ? ow_hi : ow_lo; ow < OW; ++ow) border(ow);
        ApplyActivation(yrow, OW, activation, alpha, beta);
      }
    }
  };
  ParallelFor(call, jobs, 1, body);
  return KILN_KERR_OK;
}

// Depthwise 2-D f32 convolution with eight channels in the lanes of one vector, for planes
// where RunDepthwise2D's rows are too short to fill its vectors (14x14 and 7x7 planes
// with hundreds of channels in MobileNetV2 and EfficientNet). Per block of eight channels
// and strip of output rows, the input rows the strip reads are transposed into a
// zero-padded [rows][padded width][8] buffer, so each output pixel is KH*KW full-width
// multiply-adds with no edge checks; the strip's outputs, [pixels][8], are transposed
// back into the eight NCHW planes. The transposes go 8 pixels at a time in flattened
// (row-major) pixel order, so a 7- or 14-wide row costs no scalar remainder per row.
// Window KHxKW, stride S and dilation D (both axes) fixed at compile time; pads >= 0.
constexpr int64_t kDepthwiseStripFloats = 16384;  // padded input rows of a strip (64 KiB)
constexpr int64_t kDepthwiseOutFloats = 8192;     // a strip's outputs (32 KiB)
// Padded input rows at most this wide take this path. Measured against RunDepthwise2D
// (single-node models, best of 200 runs): 3x3 stride 1 on 7x7 to 56x56 planes 2.5x to 1.15x
// faster, 3x3 and 5x5 stride 2 with 28-wide outputs 1.05x and 1.7x; with 112-wide input
// rows (3x3 on 112x112, either stride) the transposes cost more than they save on AVX2.
// On an AVX-512 host (16-lane loops leave short rows to their scalar remainder) stride 2
// wins up to 128: 96x112x112 3x3 0.31 -> 0.24 ms, 5x5 0.63 -> 0.40; stride 1 at 112 wide
// still loses (32 channels: 0.11 -> 0.15 ms). For AVX2 code (x86-64-v3, same host) 5x5
// stride 2 wins too (0.61 -> 0.43 ms) but 3x3 stride 2 does not (0.23 -> 0.25).
constexpr int64_t kDepthwiseBlockedMaxWidth = 64;
constexpr int64_t kDepthwiseBlockedMaxWidthStride2 = 128;  // wide targets, or 5x5 windows
static_assert(kDepthwiseStripFloats >= kDepthwiseBlockedMaxWidthStride2 * 16 * 5 &&
                  kDepthwiseOutFloats >= kDepthwiseBlockedMaxWidthStride2 / 2 * 16 &&
                  kDepthwiseOutFloats >= kDepthwiseBlockedMaxWidth * 16,
              "a strip holds at least one output row of 16 channels");

// D: the dilation (both axes), fixed at compile time too: 2 for DeepLabV3's and LR-ASPP's
// last MobileNetV3 blocks (5x5 over 10x10 planes), which otherwise took the direct loop nest.
template <int KH, int KW, int S, int D = 1>
static bool DepthwiseBlockedFits(const Window& w, int64_t max_width = 0) {
  if (max_width == 0) {
    max_width = S == 2 && (WideVectors() || KW >= 5) ? kDepthwiseBlockedMaxWidthStride2 : kDepthwiseBlockedMaxWidth;
  }
  const int64_t padded_w = (w.out[2] - 1) * S + (KW - 1) * D + 1;
  return w.pad[1] >= 0 && w.pad[2] >= 0 && padded_w <= max_width;
}

// RunDepthwiseBlockedLanes' way in: the image rows ih0 .. ih0 + rows_in of `lanes`
// channel planes (x, H x W) into the strip `in` (rows padded_w pixels of L lanes, the image
// from column PW), eight flattened pixels of eight channels per transpose (lanes h * 8..:
// channels h * 8..). Rows outside the image are left as they are (padding).
template <int L>
__attribute__((always_inline)) inline void TransposeRowsIn(const float* x, int64_t lanes, int64_t H, int64_t W,
                                                           int64_t ih0, int64_t rows_in, int64_t padded_w, int64_t PW,
                                                           int64_t iw_end, float* in) {
  using gemm::v8f;
  const v8f zero8 = {};
  const int64_t ih_lo = ih0 < 0 ? 0 : ih0, ih_hi = ih0 + rows_in < H ? ih0 + rows_in : H;
  const int64_t p_end = ih_hi * W;
  for (int h = 0; h * 8 < lanes; ++h) {
    const int64_t sub = lanes - h * 8 < 8 ? lanes - h * 8 : 8;
    const float* xh = x + h * 8 * H * W;
    int64_t p = ih_lo * W, ih = ih_lo, iw = 0;
    auto place = [&](const float* lanes8) {
      if (iw < iw_end) memcpy(in + ((ih - ih0) * padded_w + PW + iw) * L + h * 8, lanes8, sizeof(v8f));
      if (++iw == W) {
        iw = 0;
        ++ih;
      }
    };
    for (; p + 8 <= p_end; p += 8) {
      v8f block[8];
      if (sub == 8) {  // (tested once per block, not per lane)
        for (int l = 0; l < 8; ++l) KILN_LOAD8(block[l], xh + l * H * W + p);
      } else {
        for (int l = 0; l < 8; ++l) {
          if (l < sub) {
            KILN_LOAD8(block[l], xh + l * H * W + p);
          } else {
            block[l] = zero8;
          }
        }
      }
      gemm::Transpose8x8(block);
      if (iw + 8 <= iw_end) {
        // All eight in one row of the strip: consecutive pixels, no bookkeeping each.
        float* dst = in + ((ih - ih0) * padded_w + PW + iw) * L + h * 8;
        for (int j = 0; j < 8; ++j) memcpy(dst + j * L, &block[j], sizeof(v8f));
        iw += 8;
        if (iw == W) {
          iw = 0;
          ++ih;
        }
      } else {
        for (int j = 0; j < 8; ++j) place(reinterpret_cast<const float*>(&block[j]));
      }
    }
    for (; p < p_end; ++p) {
      alignas(32) float pixel[8] = {};
      for (int64_t l = 0; l < sub; ++l) pixel[l] = xh[l * H * W + p];
      place(pixel);
    }
  }
}

// And the way out: `count` strip outputs of L lanes (out) back to `lanes` channel planes
// of `plane` elements, from y on (the strip's outputs are contiguous in each plane).
template <int L>
__attribute__((always_inline)) inline void TransposeStripOut(const float* out, int64_t lanes, int64_t count,
                                                             int64_t plane, float* y) {
  using gemm::v8f;
  for (int h = 0; h * 8 < lanes; ++h) {
    const int64_t sub = lanes - h * 8 < 8 ? lanes - h * 8 : 8;
    float* yh = y + h * 8 * plane;
    int64_t q = 0;
    for (; q + 8 <= count; q += 8) {
      v8f block[8];
      for (int j = 0; j < 8; ++j) KILN_LOAD8(block[j], out + (q + j) * L + h * 8);
      gemm::Transpose8x8(block);
      if (sub == 8) {
        for (int l = 0; l < 8; ++l) KILN_STORE8(yh + l * plane + q, block[l]);
      } else {
        for (int64_t l = 0; l < sub; ++l) KILN_STORE8(yh + l * plane + q, block[l]);
      }
    }
    for (; q < count; ++q) {
      for (int64_t l = 0; l < sub; ++l) yh[l * plane + q] = out[q * L + h * 8 + l];
    }
  }
}

// P output pixels of one strip row from ow on, for RunDepthwiseBlockedLanes: each tap and
// each input vector is loaded once for all of them (identical loads in the unrolled loops
// are merged), where one pixel at a time loaded both per multiply-add once the taps outgrow
// the registers (ConvNeXt's 7x7 over 96 x 40 x 40 at batch 8: 2.6 -> 1.6 ms; 5x5 over
// 240 x 28 x 28: 1.7 -> 1.3). `start`: the bias, or -inf for a max pool.
template <int P, int KH, int KW, int S, int D, bool kMaxPool, typename V>
__attribute__((always_inline)) inline void DepthwiseRowPixels(const float* const* rows, int64_t ow, const V* taps,
                                                              const V& start, int32_t in_registers, const V& lo,
                                                              const V& hi, float* orow) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  V acc[P];
  for (int r = 0; r < P; ++r) acc[r] = start;
  for (int kh = 0; kh < KH; ++kh) {
    const float* row = rows[kh] + ow * S * L;
    for (int kw = 0; kw < KW; ++kw) {
      const V tap = taps[kh * KW + kw];
      for (int r = 0; r < P; ++r) {
        V v;
        memcpy(&v, row + (r * S + kw * D) * L, sizeof(V));
        if constexpr (kMaxPool) {
          acc[r] = v > acc[r] ? v : acc[r];
        } else {
          acc[r] += tap * v;
        }
      }
    }
  }
  for (int r = 0; r < P; ++r) {
    const V result = gemm::ReluOrClip(acc[r], in_registers, lo, hi);
    memcpy(orow + (ow + r) * L, &result, sizeof(V));
  }
}

// kMaxPool: the same walk computes a max pool (MaxPool's rule: a NaN never wins): the
// padding is -inf instead of zero, each pixel the max of its taps; no weight, bias or
// activation. V: the vector of channels, v8f, or v16f on targets with AVX-512F (sixteen
// channels per block: the transposes stay 8x8, each filling one half of the lanes).
template <int KH, int KW, int S, bool kMaxPool, typename V, int D>
__attribute__((noinline)) static int32_t RunDepthwiseBlockedLanes(const kiln_kcall* call, const Window& w,
                                                                  const kiln_activation& act) {
#ifdef __clang__
#pragma clang fp contract(fast)  // a Conv's sums are reassociated anyway (see MicroKernel)
#endif
  const int64_t activation = act.code;
  using gemm::v8f;
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  // Output pixels computed together (their accumulators and the inputs they share stay in
  // registers: 32 of them with 16 lanes, 16 with 8). Eight measured 5-15 % faster than six
  // on 7x7 windows with 16 lanes.
  constexpr int kPixels = L > 8 ? 8 : 4;  // the tail below takes 4, 2 and 1
  const float* px = InputData<float>(call, 0);
  const float* pw = kMaxPool ? nullptr : InputData<float>(call, 1);
  const float* pbias = kMaxPool ? nullptr : OptionalInputData<float>(call, 2);
  float* py = OutputData<float>(call);
  const int64_t channels = call->inputs[0].dims[1], blocks = (channels + L - 1) / L;
  const int64_t jobs = call->inputs[0].dims[0] * blocks;
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2], PH = w.pad[1], PW = w.pad[2];
  constexpr int64_t kSpanH = (KH - 1) * D + 1, kSpanW = (KW - 1) * D + 1;  // the window's extent
  const int64_t padded_w = (OW - 1) * S + kSpanW, row_floats = padded_w * L;
  // Output rows per strip: as many as keep its input rows and its outputs in the buffers.
  const int64_t by_in = (kDepthwiseStripFloats / row_floats - kSpanH) / S + 1, by_out = kDepthwiseOutFloats / (OW * L);
  const int64_t strip = by_in < by_out ? by_in : by_out;
  // Input columns that land in a padded row: iw = column - PW for columns < padded_w.
  const int64_t iw_end = W < padded_w - PW ? W : padded_w - PW;
  const float alpha = kMaxPool ? 0.f : static_cast<float>(act.alpha);
  const float beta = kMaxPool ? 0.f : static_cast<float>(act.beta);
  // ReLU and Clip (ReLU6) on each output vector as it is computed, as the GEMM core's
  // epilogue does them; other activations on each finished strip.
  const int32_t in_registers = kMaxPool                        ? gemm::Epilogue::kNone
                               : activation == KILN_UNARY_RELU ? gemm::Epilogue::kRelu
                               : activation == KILN_UNARY_CLIP ? gemm::Epilogue::kClip
                                                               : gemm::Epilogue::kNone;
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float in[kDepthwiseStripFloats];
    alignas(64) float out[kDepthwiseOutFloats];
    // A block of at most 8 channels never writes the upper half of 16 lanes: zeroed here,
    // those lanes compute finite results (no denormal or NaN inputs) that are never stored.
    if constexpr (L > 8) memset(in, 0, sizeof(in));
    V pad, lo, hi;
    KILN_SPLAT_V(V, pad, kMaxPool ? -INFINITY : 0.f);
    KILN_SPLAT_V(V, lo, alpha);
    KILN_SPLAT_V(V, hi, beta);
    V taps[KH * KW], bias;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / blocks, c0 = job % blocks * L;
      const int64_t lanes = channels - c0 < L ? channels - c0 : L;
      const float* x = px + (n * channels + c0) * H * W;
      float* y = py + (n * channels + c0) * OH * OW;
      alignas(64) float tap_lanes[KH * KW][L] = {};
      alignas(64) float bias_lanes[L] = {};
      for (int64_t l = 0; !kMaxPool && l < lanes; ++l) {
        for (int k = 0; k < KH * KW; ++k) tap_lanes[k][l] = pw[(c0 + l) * KH * KW + k];
        if (pbias != nullptr) bias_lanes[l] = pbias[c0 + l];
      }
      for (int k = 0; k < KH * KW; ++k) memcpy(&taps[k], tap_lanes[k], sizeof(V));
      memcpy(&bias, bias_lanes, sizeof(V));
      for (int64_t oh0 = 0; oh0 < OH; oh0 += strip) {
        const int64_t oh1 = oh0 + strip < OH ? oh0 + strip : OH;
        const int64_t rows_in = (oh1 - oh0 - 1) * S + kSpanH, ih0 = oh0 * S - PH;
        // Padding: rows outside the image, and the columns left and right of it.
        for (int64_t r = 0; r < rows_in; ++r) {
          float* dst = in + r * row_floats;
          const bool outside = ih0 + r < 0 || ih0 + r >= H;
          for (int64_t col = 0; col < (outside ? padded_w : PW); ++col) memcpy(dst + col * L, &pad, sizeof(V));
          for (int64_t col = PW + iw_end; !outside && col < padded_w; ++col) memcpy(dst + col * L, &pad, sizeof(V));
        }
        TransposeRowsIn<L>(x, lanes, H, W, ih0, rows_in, padded_w, PW, iw_end, in);
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          const float* rows[KH];
          for (int kh = 0; kh < KH; ++kh) rows[kh] = in + ((oh - oh0) * S + kh * D) * row_floats;
          float* orow = out + (oh - oh0) * OW * L;
          // kPixels outputs at a time, then 4, 2 and 1 for the row's tail.
          const V start = kMaxPool ? pad : bias;
          int64_t ow = 0;
          for (; ow + kPixels <= OW; ow += kPixels)
            DepthwiseRowPixels<kPixels, KH, KW, S, D, kMaxPool>(rows, ow, taps, start, in_registers, lo, hi, orow);
          if (kPixels > 4 && ow + 4 <= OW) {
            DepthwiseRowPixels<4, KH, KW, S, D, kMaxPool>(rows, ow, taps, start, in_registers, lo, hi, orow);
            ow += 4;
          }
          if (ow + 2 <= OW) {
            DepthwiseRowPixels<2, KH, KW, S, D, kMaxPool>(rows, ow, taps, start, in_registers, lo, hi, orow);
            ow += 2;
          }
          if (ow < OW) DepthwiseRowPixels<1, KH, KW, S, D, kMaxPool>(rows, ow, taps, start, in_registers, lo, hi, orow);
        }
        // Back to the planes: the strip's outputs are contiguous in each plane. Activations
        // other than ReLU and Clip first, on the strip while it is in L1 (lanes past the
        // block's channels hold finite values that are never stored).
        const int64_t q0 = oh0 * OW, count = (oh1 - oh0) * OW;
        if (!kMaxPool && in_registers == gemm::Epilogue::kNone)
          ApplyActivation(out, count * L, activation, alpha, beta);
        TransposeStripOut<L>(out, lanes, count, OH * OW, y + q0);
      }
    }
  };
  ParallelFor(call, jobs, 1, body);
  return KILN_KERR_OK;
}

template <int KH, int KW, int S, bool kMaxPool = false, int D = 1>
static int32_t RunDepthwiseBlocked(const kiln_kcall* call, const Window& w, const kiln_activation& act) {
  if (WideVectors()) return RunDepthwiseBlockedLanes<KH, KW, S, kMaxPool, v16f, D>(call, w, act);
  return RunDepthwiseBlockedLanes<KH, KW, S, kMaxPool, v8f, D>(call, w, act);
}

}  // namespace kiln_kernels
