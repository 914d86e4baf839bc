// Pooling: MaxPool (with Indices), AveragePool and LpPool over 1-D to 3-D windows; the
// common 2-D f32 cases take vectorized paths in artifacts.
#include "kiln/kernels/pool.h"
#include "depthwise.h"
#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kernel_window.h"

using namespace kiln_kernels;

namespace {

// 2-D f32 max pooling, and average pooling that does not count padding, with dilation 1
// and no Indices output: the common CNN case. Per output row, each (kh, kw) tap is one
// pass over the row's outputs whose input column is inside the image, so the inner loop
// has no bounds checks and vectorizes (a strided load for stride 2). Max keeps the
// reference's rule (a NaN never wins); the average sums in f32.
// Not in the reference interpreter's build (kFastKernels); validation compares it with the
// independent reference (compiler/reference).

static int32_t RunPool2D(const kiln_kcall* call, const Window& w, bool is_max) {
  const float* px = InputData<float>(call, 0);
  float* py = OutputData<float>(call);
  const int64_t planes = call->inputs[0].dims[0] * call->inputs[0].dims[1];
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2];
  const int64_t KH = w.kernel[1], KW = w.kernel[2], SH = w.stride[1], SW = w.stride[2], PH = w.pad[1], PW = w.pad[2];
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const float* x = px + plane * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        float* __restrict out = py + (plane * OH + oh) * OW;
        const int64_t ih0 = oh * SH - PH;
        const int64_t kh_lo = ih0 < 0 ? -ih0 : 0, kh_hi = KH < H - ih0 ? KH : H - ih0;
        for (int64_t ow = 0; ow < OW; ++ow) out[ow] = is_max ? -INFINITY : 0.f;
        for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
          const float* row = x + (ih0 + kh) * W;
          for (int64_t kw = 0; kw < KW; ++kw) {
            // Outputs whose input column ow * SW + kw - PW lies in [0, W).
            const int64_t shift = kw - PW;
            int64_t ow_lo = shift >= 0 ? 0 : (-shift + SW - 1) / SW;
            int64_t ow_hi = W - 1 - shift < 0 ? 0 : (W - 1 - shift) / SW + 1;
            if (ow_hi > OW) ow_hi = OW;
            const float* __restrict src = row + shift;
            if (is_max) {
              for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
                const float v = src[ow * SW];
                out[ow] = v > out[ow] ? v : out[ow];
              }
            } else {
              for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow] += src[ow * SW];
            }
          }
        }
        if (!is_max) {
          const int64_t rows = kh_hi > kh_lo ? kh_hi - kh_lo : 0;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t iw0 = ow * SW - PW;
            const int64_t lo = iw0 < 0 ? -iw0 : 0, hi = KW < W - iw0 ? KW : W - iw0;
            const int64_t count = rows * (hi > lo ? hi - lo : 0);
            out[ow] = count ? out[ow] / static_cast<float>(count) : 0.f;
          }
        }
      }
    }
  };
  ParallelFor(call, planes, 1, body);
  return KILN_KERR_OK;
}

// 2-D max pooling with a KW-wide window at column stride 2 (3x3 and 2x2 at stride 2:
// ResNet, SqueezeNet, VGG) on NCHW planes, with no transposes and no row buffer: a window's
// max is the max over its columns of each column's max over its rows. For L outputs of a
// row, the column maxes of the 2L (+1 for KW 3) input columns they read are two vectors
// (a, b: L unaligned loads per window row each) and one scalar (c); the outputs are then
// max(even lanes of a:b, odd lanes of a:b, even lanes shifted by one with c shifted in).
// Everything stays in registers: an earlier form reduced each row into a buffer and read
// it back at other offsets, twice the instructions (64x111x111 f32: 0.100 ms on Zen 5).
// A vector whose columns reach the pad or past the image (ceil_mode) takes its column
// maxes from a small buffer filled with the smallest value and then with the in-image
// column maxes. Rows at least one vector wide end with a vector that overlaps the one
// before it (a max computed twice is the same max), so there is no scalar remainder.
// Window height, row stride and pads are run-time.
// A NaN never wins, as in the reference loop: each column max starts from the smallest
// value and takes a value only when it is greater, so no NaN reaches the lane maxes.
// T: float (V v8f or v16f, smallest -inf), or uint8_t (V 32 bytes, smallest 0: int8
// ResNet's stem, whose conv result is quantized before the pool, as max pooling commutes
// with QuantizeLinear's rounding). Rows of L outputs or more take this path.

// Lanes 1 .. L of the concatenation of a and b: a shifted down one lane, b's first lane in.
template <typename V>
__attribute__((always_inline)) inline V ShiftOneLaneIn(V a, V b) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(a[0]));
  if constexpr (L == 32) {
    return __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                   23, 24, 25, 26, 27, 28, 29, 30, 31, 32);
  } else if constexpr (L == 16) {
    return __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  } else {
    return __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, 8);
  }
}

// The max over R rows (`rows` where R is 0) W apart of the L columns at p (of the one
// column at p for ColumnMax1), starting from `lowest`.
template <int R, typename T, typename V>
__attribute__((always_inline)) inline V ColumnMax(const T* p, int64_t rows, int64_t W, V lowest) {
  V m = lowest;
  for (int64_t r = 0; r < (R ? R : rows); ++r) {
    V v;
    memcpy(&v, p + r * W, sizeof(V));
    m = v > m ? v : m;
  }
  return m;
}

template <int R, typename T>
__attribute__((always_inline)) inline T ColumnMax1(const T* p, int64_t rows, int64_t W, T lowest) {
  T m = lowest;
  for (int64_t r = 0; r < (R ? R : rows); ++r) m = p[r * W] > m ? p[r * W] : m;
  return m;
}

// One output row (OW >= L outputs at `out`) of the pooling, from the `rows` input rows at
// xr; R is `rows` where it is known at compile time (3, the common window), else 0.
template <typename T, typename V, int KW, int R>
__attribute__((always_inline)) inline void MaxPoolRow(const T* xr, int64_t rows, int64_t W, int64_t OW, int64_t PW,
                                                      V lowest, T* edge, T* out) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(T));
  constexpr int64_t kReach = 2 * L + KW - 2;  // input columns L outputs read
  for (int64_t ow = 0;; ow += L) {
    if (ow + L > OW) ow = OW - L;
    const int64_t c0 = ow * 2 - PW;  // the first input column these outputs read
    V a, b;
    T c = lowest[0];
    if (c0 >= 0 && c0 + kReach <= W) {
      a = ColumnMax<R>(xr + c0, rows, W, lowest);
      b = ColumnMax<R>(xr + c0 + L, rows, W, lowest);
      if constexpr (KW == 3) c = ColumnMax1<R>(xr + c0 + 2 * L, rows, W, lowest[0]);
    } else {
      // Each L-column slot with a column in the image stores the column maxes of the
      // in-image vector that starts at (or, at the right edge, ends with) it: every value
      // stored is an in-image column's, so the smallest value stays everywhere else.
      // edge[L + k] is column c0 + k's, for k < kReach.
      for (int i = 0; i < 4; ++i) memcpy(edge + i * L, &lowest, sizeof(V));
      for (int64_t k = 0; k < kReach; k += L) {
        const int64_t first = c0 + k < 0 ? 0 : c0 + k, last = c0 + k + L < W ? c0 + k + L : W;
        if (first >= last) continue;
        const int64_t at = first + L <= W ? first : W - L;
        const V m = ColumnMax<R>(xr + at, rows, W, lowest);
        memcpy(edge + L + at - c0, &m, sizeof(V));
      }
      memcpy(&a, edge + L, sizeof(V));
      memcpy(&b, edge + 2 * L, sizeof(V));
      c = edge[3 * L];
    }
    const V e = EvenLanes(a, b), o = OddLanes(a, b);
    V m = o > e ? o : e;
    if constexpr (KW == 3) {
      V cv = lowest;
      cv[0] = c;
      const V e2 = ShiftOneLaneIn(e, cv);
      m = e2 > m ? e2 : m;
    }
    memcpy(out + ow, &m, sizeof(V));
    if (ow + L >= OW) break;
  }
}

template <typename T, typename V, int KW>
__attribute__((noinline)) static int32_t RunMaxPoolRows(const kiln_kcall* call, const Window& w) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(T));
  static_assert((L == 8 || L == 16 || L == 32) && (KW == 2 || KW == 3), "8, 16 or 32 lanes, 2- or 3-wide windows");
  constexpr T kLowest = std::is_same_v<T, float> ? -INFINITY : T(0);
  const T* px = InputData<T>(call, 0);
  T* py = OutputData<T>(call);
  const int64_t planes = call->inputs[0].dims[0] * call->inputs[0].dims[1];
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2];
  const int64_t KH = w.kernel[1], SH = w.stride[1], PH = w.pad[1], PW = w.pad[2];
  auto body = [=](int64_t begin, int64_t end) {
    V lowest;
    for (int l = 0; l < L; ++l) lowest[l] = kLowest;
    alignas(64) T edge[4 * L];
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* x = px + plane * H * W;
      T* y = py + plane * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t ih0 = oh * SH - PH;
        const int64_t lo = ih0 < 0 ? 0 : ih0, hi = ih0 + KH < H ? ih0 + KH : H;
        if (hi - lo == 3) {
          MaxPoolRow<T, V, KW, 3>(x + lo * W, 3, W, OW, PW, lowest, edge, y + oh * OW);
        } else {
          MaxPoolRow<T, V, KW, 0>(x + lo * W, hi - lo, W, OW, PW, lowest, edge, y + oh * OW);
        }
      }
    }
  };
  ParallelFor(call, planes, 1, body);
  return KILN_KERR_OK;
}

template <int KW>
static int32_t RunMaxPoolRowsLanes(const kiln_kcall* call, const Window& w) {
  if (WideVectors() && w.out[2] >= 16) return RunMaxPoolRows<float, v16f, KW>(call, w);
  return RunMaxPoolRows<float, gemm::v8f, KW>(call, w);
}

// Padded input rows at most this wide take RunDepthwiseBlocked's max pool.
constexpr int64_t kPoolBlockedMaxWidth = 128;
static_assert(kDepthwiseStripFloats >= kPoolBlockedMaxWidth * 16 * 3 &&
                  kDepthwiseOutFloats >= kPoolBlockedMaxWidth / 2 * 16,
              "a strip holds at least one pooled row");

struct PoolKernel {
  // Parameters: kiln_pool_params (kiln/kernels/pool.h).
  // Output 1 (MaxPool Indices) is filled when present, row-major over N and C, space
  // row-major or (storage_order 1) column-major.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_pool_params& params) {
    const kiln_ktensor& X = call->inputs[0];
    const kiln_ktensor& Y = call->outputs[0];
    const int op = static_cast<int>(params.op);
    const Window w(params.window, X, Y);
    const bool count_include_pad = params.count_include_pad != 0;
    if constexpr (std::is_same_v<T, float> && kFastKernels) {
      const bool plain_2d = X.rank == 4 && w.dilation[1] == 1 && w.dilation[2] == 1 && call->num_outputs == 1;
      // Max pooling at column stride 2 with rows of 8 outputs or more: the row walk.
      if (plain_2d && op == KILN_POOL_MAX && w.stride[2] == 2 && (w.kernel[2] == 2 || w.kernel[2] == 3) &&
          w.pad[1] >= 0 && w.pad[2] >= 0 && w.out[2] >= 8 && w.in[2] >= 16 && w.pad[2] < 8) {
        return w.kernel[2] == 3 ? RunMaxPoolRowsLanes<3>(call, w) : RunMaxPoolRowsLanes<2>(call, w);
      }
      // Narrower 3x3 stride-2 max pooling (rows under 8 outputs): 8 or 16 channels per
      // vector, as depthwise convolutions go. (256x27x27, 13 outputs a row, now takes the
      // row walk: 0.017 ms against 0.026 this way on Zen 5.)
      if (plain_2d && op == KILN_POOL_MAX && w.kernel[1] == 3 && w.kernel[2] == 3 && w.stride[1] == 2 &&
          w.stride[2] == 2 && DepthwiseBlockedFits<3, 3, 2>(w, kPoolBlockedMaxWidth)) {
        return RunDepthwiseBlocked<3, 3, 2, true>(call, w, kiln_activation{-1, 0, 0});
      }
      // 3x3 stride-1 max pooling (GoogLeNet's and Inception's pooling branches) likewise.
      if (plain_2d && op == KILN_POOL_MAX && w.kernel[1] == 3 && w.kernel[2] == 3 && w.stride[1] == 1 &&
          w.stride[2] == 1 && DepthwiseBlockedFits<3, 3, 1>(w, kPoolBlockedMaxWidth)) {
        return RunDepthwiseBlocked<3, 3, 1, true>(call, w, kiln_activation{-1, 0, 0});
      }
      if (plain_2d && (op == KILN_POOL_MAX || (op == KILN_POOL_AVERAGE && !count_include_pad))) {
        return RunPool2D(call, w, op == KILN_POOL_MAX);
      }
    }
    if constexpr (std::is_same_v<T, uint8_t> && kFastKernels) {
      // u8 max pooling at column stride 2 with rows of 32 outputs or more: the row walk.
      if (X.rank == 4 && w.dilation[1] == 1 && w.dilation[2] == 1 && call->num_outputs == 1 && op == KILN_POOL_MAX &&
          w.stride[2] == 2 && (w.kernel[2] == 2 || w.kernel[2] == 3) && w.pad[1] >= 0 && w.pad[2] >= 0 &&
          w.out[2] >= 32 && w.in[2] >= 32 && w.pad[2] < 32) {
        typedef uint8_t v32u8 __attribute__((vector_size(32)));
        return w.kernel[2] == 3 ? RunMaxPoolRows<uint8_t, v32u8, 3>(call, w)
                                : RunMaxPoolRows<uint8_t, v32u8, 2>(call, w);
      }
    }
    const double p = params.p;
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(Y.data);
    int64_t* indices = call->num_outputs > 1 ? OutputData<int64_t>(call, 1) : nullptr;
    const int64_t planes = X.dims[0] * X.dims[1];
    const int64_t in_size = w.in_size(), out_size = w.out_size();
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* x = px + plane * in_size;
        for (int64_t od = 0; od < w.out[0]; ++od)
          for (int64_t oh = 0; oh < w.out[1]; ++oh)
            for (int64_t ow = 0; ow < w.out[2]; ++ow) {
              double acc = op == KILN_POOL_MAX ? -INFINITY : 0.0;
              int64_t arg = 0, count = 0;
              for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
                const int64_t id = od * w.stride[0] + kd * w.dilation[0] - w.pad[0];
                for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
                  const int64_t ih = oh * w.stride[1] + kh * w.dilation[1] - w.pad[1];
                  for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                    const int64_t iw = ow * w.stride[2] + kw * w.dilation[2] - w.pad[2];
                    const bool inside = id >= 0 && id < w.in[0] && ih >= 0 && ih < w.in[1] && iw >= 0 && iw < w.in[2];
                    if (!inside) {
                      // Padding counts for the average only inside the padded extent.
                      if (count_include_pad && id < w.in[0] + w.pad[0] && ih < w.in[1] + w.pad[1] &&
                          iw < w.in[2] + w.pad[2])
                        ++count;
                      continue;
                    }
                    const int64_t at = (id * w.in[1] + ih) * w.in[2] + iw;
                    const double v = static_cast<double>(x[at]);
                    ++count;
                    if (op == KILN_POOL_MAX) {
                      if (v > acc) {
                        acc = v;
                        arg = params.storage_order ? id + (ih + iw * w.in[1]) * w.in[0] : at;
                      }
                    } else if (op == KILN_POOL_LP) {
                      acc += pow(v < 0 ? -v : v, p);
                    } else {
                      acc += v;
                    }
                  }
                }
              }
              const int64_t o = (od * w.out[1] + oh) * w.out[2] + ow;
              if (op == KILN_POOL_AVERAGE) acc = count ? acc / static_cast<double>(count) : 0.0;
              if (op == KILN_POOL_LP) acc = pow(acc, 1.0 / p);
              py[plane * out_size + o] = static_cast<T>(acc);
              if (indices) indices[plane * out_size + o] = plane * in_size + arg;
            }
      }
    };
    ParallelFor(call, planes, 1, body);
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_NUMERIC_KERNEL(pool, PoolKernel, inputs[0].dtype)
