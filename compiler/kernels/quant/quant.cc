// Quantized ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer
// products behind MatMulInteger/QLinearMatMul and ConvInteger/QLinearConv.
//
// Requantization, one rule for every kernel here and for the fast paths to come: the int32
// sum S (bias included) becomes saturate(rint(float(S) * m) + y_zero_point) with the f32
// multiplier m = (x_scale * w_scale) / y_scale, rounded to nearest, ties to even. ONNX's
// numpy reference multiplies in double; f32 is what integer kernels (MLAS, XNNPACK) do and
// differs only where |S| > 2^24 or a product lands within an f32 ulp of a tie.
#include "kiln/kernels/quant.h"
#include "kernel_common.h"
#include "kernel_window.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln_kernels {
namespace {

// Element i of a u8/i8/i32 tensor (a zero point or a quantized value).
inline int32_t LoadInt(const void* data, int32_t dtype, int64_t i) {
  switch (dtype) {
    case kU8: return static_cast<const uint8_t*>(data)[i];
    case kI8: return static_cast<const int8_t*>(data)[i];
    case kI32: return static_cast<const int32_t*>(data)[i];
    default: return 0;
  }
}

// Saturates v to the range of `dtype` (u8 or i8) and stores it at element i.
inline void StoreSaturated(void* data, int32_t dtype, int64_t i, float v) {
  if (dtype == kU8) {
    static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v < 0.f ? 0.f : (v > 255.f ? 255.f : v));
  } else {
    static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v < -128.f ? -128.f : (v > 127.f ? 127.f : v));
  }
}

// A scale or zero point that is one value for the tensor or one per channel: element c,
// or element 0.
inline int64_t PerChannel(const kiln_ktensor& t, int64_t c) { return Numel(t) > 1 ? c : 0; }

bool IsQuantizedType(int32_t dtype) { return dtype == kU8 || dtype == kI8; }

// Whether a call has the integer products' (qmatmul, qconv) types: operands (inputs 0 and
// 1) u8 or i8, and Y as `mode` (kiln_quant_mode) asks: int32 sums, requantized u8 or i8, or
// f32.
bool ProductTypes(const kiln_kcall* call, int64_t mode) {
  if (!IsQuantizedType(call->inputs[0].dtype) || !IsQuantizedType(call->inputs[1].dtype)) return false;
  const int32_t y = call->outputs[0].dtype;
  if (mode == KILN_QUANT_REQUANTIZE) return IsQuantizedType(y);
  if (mode == KILN_QUANT_TO_FLOAT) return y == kF32 || IsQuantizedType(y);  // (u8/i8: quantized as Y's scale says)
  return y == kI32;
}

// The integer products' entry (qmatmul, qconv): binds kiln_quant_params and checks the
// call's types (ProductTypes), then runs Body.
template <int32_t (*Body)(const kiln_kcall*, const kiln_quant_params&)>
int32_t RunProduct(const kiln_kcall* call) {
  KILN_PARAMS(kiln_quant_params, params, call);
  if (!ProductTypes(call, params.mode)) return KILN_KERR_DTYPE;
  return Body(call, params);
}

}  // namespace

// QuantizeLinear: inputs X (f32), scale (f32, one or per channel), zero point (optional,
// u8 or i8; the output's type). Parameters: kiln_quant_params' outer, channels, inner (X
// as [outer, channels, inner], channels along the op's axis). y = saturate(rint(x / scale) + zero_point).
KILN_KERNEL(quantize_linear) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& scale = call->inputs[1];
  const kiln_ktensor& zp = call->inputs[2];
  const kiln_ktensor& Y = call->outputs[0];
  if (X.dtype != kF32 || scale.dtype != kF32 || !IsQuantizedType(Y.dtype)) return KILN_KERR_DTYPE;
  KILN_PARAMS(kiln_quant_params, params, call);
  const int64_t outer = params.outer, channels = params.channels, inner = params.inner;
  const float* x = static_cast<const float*>(X.data);
  const float* s = static_cast<const float*>(scale.data);
  const int64_t rows = outer * channels;
  const int64_t pieces = rows == 1 && inner > 32768 ? (inner + 16383) / 16384 : 1;
  const int64_t piece = (inner + pieces - 1) / pieces;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {  // (row = (o, c), piece of it)
      const int64_t row = job / pieces, c = row % channels;
      const int64_t i0 = row * inner + job % pieces * piece;
      const int64_t i1 = i0 + piece < (row + 1) * inner ? i0 + piece : (row + 1) * inner;
      const float sc = s[PerChannel(scale, c)];
      const float z = zp.data != nullptr ? static_cast<float>(LoadInt(zp.data, zp.dtype, PerChannel(zp, c))) : 0.f;
      if (Y.dtype == kU8) {
        uint8_t* y = static_cast<uint8_t*>(Y.data);
        for (int64_t i = i0; i < i1; ++i) {
          const float v = rintf(x[i] / sc) + z;
          y[i] = static_cast<uint8_t>(v < 0.f ? 0.f : (v > 255.f ? 255.f : v));
        }
      } else {
        int8_t* y = static_cast<int8_t*>(Y.data);
        for (int64_t i = i0; i < i1; ++i) {
          const float v = rintf(x[i] / sc) + z;
          y[i] = static_cast<int8_t>(v < -128.f ? -128.f : (v > 127.f ? 127.f : v));
        }
      }
    }
  };
  ParallelFor(call, rows * pieces, 1, body);
  return KILN_KERR_OK;
}

// DequantizeLinear: inputs X (u8, i8 or i32), scale (f32), zero point (optional, X's
// type). Parameters as quantize_linear's. y = float(x - zero_point) * scale.
KILN_KERNEL(dequantize_linear) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& scale = call->inputs[1];
  const kiln_ktensor& zp = call->inputs[2];
  const kiln_ktensor& Y = call->outputs[0];
  if (Y.dtype != kF32 || scale.dtype != kF32 || !(IsQuantizedType(X.dtype) || X.dtype == kI32)) return KILN_KERR_DTYPE;
  KILN_PARAMS(kiln_quant_params, params, call);
  const int64_t outer = params.outer, channels = params.channels, inner = params.inner;
  const float* s = static_cast<const float*>(scale.data);
  float* y = static_cast<float*>(Y.data);
  // One loop per element type, so each vectorizes; rows of a per-tensor scale split into
  // pieces so the pool has work to share.
  const int64_t rows = outer * channels;
  const int64_t pieces = rows == 1 && inner > 32768 ? (inner + 16383) / 16384 : 1;
  const int64_t piece = (inner + pieces - 1) / pieces;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t row = job / pieces, c = row % channels;
      const int64_t i0 = row * inner + job % pieces * piece;
      const int64_t i1 = i0 + piece < (row + 1) * inner ? i0 + piece : (row + 1) * inner;
      const float sc = s[PerChannel(scale, c)];
      const int32_t z = zp.data != nullptr ? LoadInt(zp.data, zp.dtype, PerChannel(zp, c)) : 0;
      if (X.dtype == kU8) {
        const uint8_t* x = static_cast<const uint8_t*>(X.data);
        for (int64_t i = i0; i < i1; ++i) y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - z) * sc;
      } else if (X.dtype == kI8) {
        const int8_t* x = static_cast<const int8_t*>(X.data);
        for (int64_t i = i0; i < i1; ++i) y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - z) * sc;
      } else {
        const int32_t* x = static_cast<const int32_t*>(X.data);
        for (int64_t i = i0; i < i1; ++i) y[i] = static_cast<float>(x[i] - z) * sc;
      }
    }
  };
  ParallelFor(call, rows * pieces, 1, body);
  return KILN_KERR_OK;
}

// DynamicQuantizeLinear: X (f32) -> Y (u8), scale (f32 scalar), zero point (u8 scalar):
// the range [min(0, min x), max(0, max x)] mapped onto [0, 255]. An all-zero X gives scale
// 0, zero point 0 and Y 0.
KILN_KERNEL(dynamic_quantize_linear) {
  const kiln_ktensor& X = call->inputs[0];
  if (X.dtype != kF32 || call->outputs[0].dtype != kU8) return KILN_KERR_DTYPE;
  const float* x = static_cast<const float*>(X.data);
  const int64_t n = Numel(X);
  float lo = 0.f, hi = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  const float scale = (hi - lo) / 255.f;
  float zero = 0.f;
  if (scale > 0.f) {
    zero = rintf(0.f - lo / scale);
    zero = zero < 0.f ? 0.f : (zero > 255.f ? 255.f : zero);
  }
  uint8_t* y = OutputData<uint8_t>(call);
  for (int64_t i = 0; i < n; ++i) {
    float v = scale > 0.f ? rintf(x[i] / scale) + zero : 0.f;
    y[i] = static_cast<uint8_t>(v < 0.f ? 0.f : (v > 255.f ? 255.f : v));
  }
  *OutputData<float>(call, 1) = scale;
  *OutputData<uint8_t>(call, 2) = static_cast<uint8_t>(zero);
  return KILN_KERR_OK;
}

// The integer product of MatMulInteger and QLinearMatMul. inputs: A, B (u8 or i8), A's
// zero point (one, or one per row of A), B's (one, or one per column), then for the
// requantized form A's scale (per row or one), B's scale (per column or one), Y's scale
// and zero point (Y's type). Parameters: kiln_quant_params' shape and mode. mode 0: Y
// int32 sums; 1: Y requantized; 2: Y f32 = sum * a_scale * b_scale + B, B an optional f32 [N] after the (unused) Y
// scale and zero point slots (kiln.QLinearMatMulToFloat). With a constant 2-D B, artifacts take qgemm below.
static int32_t QMatMul(const kiln_kcall* call, const kiln_quant_params& params) {
  const kiln_ktensor& A = call->inputs[0];
  const kiln_ktensor& B = call->inputs[1];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t M = params.shape.M, K = params.shape.K, N = params.shape.N;
  const int64_t batch_rank = params.shape.batch_rank;
  const int64_t* batch_dims = params.shape.batch_dims;
  const int64_t* a_strides = params.shape.a_batch_strides;
  const int64_t* b_strides = params.shape.b_batch_strides;
  const int64_t mode = params.mode;
  const bool requantize = mode == KILN_QUANT_REQUANTIZE, to_float = mode == KILN_QUANT_TO_FLOAT;
  const float* float_bias = to_float ? OptionalInputData<float>(call, 8) : nullptr;
  const kiln_ktensor& azp = call->inputs[2];
  const kiln_ktensor& bzp = call->inputs[3];
  int64_t batches = 1;
  for (int64_t i = 0; i < batch_rank; ++i) batches *= batch_dims[i];
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {  // row = (batch, m)
      const int64_t batch = row / M, m = row % M;
      int64_t a_off = 0, b_off = 0, rest = batch;
      for (int64_t i = batch_rank; i-- > 0;) {
        const int64_t idx = rest % batch_dims[i];
        rest /= batch_dims[i];
        a_off += idx * a_strides[i];
        b_off += idx * b_strides[i];
      }
      const int32_t za = azp.data != nullptr ? LoadInt(azp.data, azp.dtype, PerChannel(azp, m)) : 0;
      for (int64_t n = 0; n < N; ++n) {
        const int32_t zb = bzp.data != nullptr ? LoadInt(bzp.data, bzp.dtype, PerChannel(bzp, n)) : 0;
        int32_t sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          sum +=
              (LoadInt(A.data, A.dtype, a_off + m * K + k) - za) * (LoadInt(B.data, B.dtype, b_off + k * N + n) - zb);
        }
        const int64_t at = row * N + n;
        if (mode == 0) {
          static_cast<int32_t*>(Y.data)[at] = sum;
          continue;
        }
        const float* as = InputData<float>(call, 4);
        const float* bs = InputData<float>(call, 5);
        if (to_float) {
          const float multiplier = as[PerChannel(call->inputs[4], m)] * bs[PerChannel(call->inputs[5], n)];
          static_cast<float*>(Y.data)[at] =
              static_cast<float>(sum) * multiplier + (float_bias != nullptr ? float_bias[n] : 0.f);
          continue;
        }
        const float ys = *InputData<float>(call, 6);
        const kiln_ktensor& yzp = call->inputs[7];
        const float multiplier = as[PerChannel(call->inputs[4], m)] * bs[PerChannel(call->inputs[5], n)] / ys;
        const float z = yzp.data != nullptr ? static_cast<float>(LoadInt(yzp.data, yzp.dtype, 0)) : 0.f;
        StoreSaturated(Y.data, Y.dtype, at, rintf(static_cast<float>(sum) * multiplier) + z);
      }
    }
  };
  ParallelFor(call, batches * M, 1, body);
  return KILN_KERR_OK;
}
KILN_KERNEL(qmatmul) { return RunProduct<QMatMul>(call); }

// The int8 convolution for artifacts (lower_fast, ops/quant_ops.cc): an implicit GEMM
// per (image, group) whose rows are output channels and whose columns are output
// positions, in tiles of 8 rows x 48 columns held in sixteen-lane i32 accumulators. Its
// K runs over (kh, kw, quad of input channels), so each step takes four bytes per row
// and column: one s8 word of the weight row, broadcast, against a vector of sixteen
// columns' u8 words, summed four products to a lane (vpdpbusd where the target has AVX-512
// VNNI or AVX-VNNI, i32 multiplies otherwise: Int8DotProduct()). X is first copied into
// channel quads, [N][G][C/4][H][W] of four bytes (s8 flipped to u8 by adding 128), so a
// step's column words for a 1x1 conv are X's own bytes and for other windows a copy of
// one word per column and tap. With
// u8 x' = x - zx' (zx' the zero point as u8), the sum over the padded weights w' = w - zw
// is sum(x * w') - zx' * sum(w'): lowering folds the second term and the bias into one
// i32 offset per output channel, pads taps and channels with zx' bytes so they add 0
// after it, and computes the f32 multipliers. Requantization as stated above, so the
// result equals the reference kernel's exactly.
namespace {

typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint8_t v16u8 __attribute__((vector_size(16)));
typedef uint8_t v32u8 __attribute__((vector_size(32)));
typedef uint8_t v64u8 __attribute__((vector_size(64)));
#define KILN_IOTA32 \
  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31
#define KILN_IOTA64                                                                                                    \
  KILN_IOTA32, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, \
      58, 59, 60, 61, 62, 63
// Byte 4p + b of the result is byte p of row b (rows of 16 bytes, concatenated).
#define KILN_QUAD_INTERLEAVE                                                                                          \
  0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51, 4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, \
      55, 8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59, 12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46,   \
      62, 15, 31, 47, 63
typedef uint32_t v16u __attribute__((vector_size(64)));
// How far ahead of a tile's products its weight panel is prefetched, in bytes. The panels
// of a conv lie one after another, so the stream runs on into the next panel's. On the
// Zen 5 host ResNet-50 int8's weights (25 MB) come from memory every run, and the
// hardware prefetchers did not keep up with a panel's 32 bytes a step: a chain of eight
// 512-channel 3x3 convs on 7x7 maps took 0.36 ms a conv against 0.24 for one conv alone,
// and 0.25 with the prefetch (ResNet-50 int8 10.8 -> 9.7 ms; 1, 2, 4 and 8 KiB ahead:
// 10.1, 9.8, 9.7, 9.7 ms).
constexpr int64_t kQWeightsAhead = 4096;
constexpr int kQRows = 8;                // rows (output channels) per weight panel and tile
constexpr int kQCols = 48;               // columns per tile: three vectors of sixteen
constexpr int64_t kQMaxSteps = 1280;     // K / 4 at most (the packed columns live on the stack)
constexpr int64_t kQFlatMaxSteps = 128;  // flat_k's steps at most for the byte-permute gather (8 rows of 64 bytes)

typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef int32_t v8i __attribute__((vector_size(32)));

// acc + the four u8 x s8 products of each lane's word of x with the word w4 (VI: v16i, or
// v4i for a chunk's last few columns; VU the unsigned type of the same width).
template <typename VI = v16i, typename VU = v16u>
inline VI DotStepGeneric(VI acc, VI x, int32_t w4) {
  const VU u = (VU)x;
  for (int b = 0; b < 4; ++b) {
    const int32_t wb = static_cast<int8_t>(static_cast<uint32_t>(w4) >> (8 * b));
    acc += (VI)((u >> (8 * b)) & 0xFFu) * wb;
  }
  return acc;
}

#if defined(__x86_64__)
// (Through pointers: a 512-bit vector argument to a function with other target features
// would change the calling convention.)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void DotStepVnni(v16i* acc, const v16i* x, int32_t w4) {
  *acc = (v16i)_mm512_dpbusd_epi32((__m512i)*acc, (__m512i)*x, _mm512_set1_epi32(w4));
}
// The same on four lanes (the last few columns of a chunk: QConvTileNarrow).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void DotStep4Vnni(v4i* acc, const v4i* x,
                                                                                         int32_t w4) {
  *acc = (v4i)_mm_dpbusd_epi32((__m128i)*acc, (__m128i)*x, _mm_set1_epi32(w4));
}
// A tile's 49th column (QConvTile's kColumn): its word x4 broadcast against the panel's
// step of weights, eight rows of four bytes, one lane a row.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void DotStepColumnVnni(v8i* acc,
                                                                                              const uint8_t* x4,
                                                                                              const int8_t* w32) {
  int32_t word;
  memcpy(&word, x4, 4);
  *acc = (v8i)_mm256_dpbusd_epi32((__m256i)*acc, _mm256_set1_epi32(word),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w32)));
}
__attribute__((target("avx2,avxvnni"))) inline void DotStep4AvxVnni(v4i* acc, const v4i* x, int32_t w4) {
  *acc = (v4i)_mm_dpbusd_avx_epi32((__m128i)*acc, (__m128i)*x, _mm_set1_epi32(w4));
}
// AVX-VNNI: acc + the four products of each lane's u8 word of u with its s8 word of s, on
// the two 256-bit halves of the vectors (qconv: u the columns, s the broadcast weight
// word; qgemm: u the broadcast word of A, s the columns of B).
__attribute__((target("avx2,avxvnni"))) inline void DotStepAvxVnni(v16i* acc, const v16i* u, const v16i* s) {
  __m256i a[2], x[2], y[2];
  memcpy(a, acc, sizeof(a));
  memcpy(x, u, sizeof(x));
  memcpy(y, s, sizeof(y));
  for (int h = 0; h < 2; ++h) a[h] = _mm256_dpbusd_avx_epi32(a[h], x[h], y[h]);
  memcpy(acc, a, sizeof(a));
}
#endif

// acc + the four u8 x s8 products of the broadcast word a4 (u8 bytes) with each lane's
// word of w (s8 bytes).
inline v16i DotStepGenericBroadcastA(v16i acc, const v16i& w, uint32_t a4) {
  for (int b = 0; b < 4; ++b) {
    const int32_t ab = static_cast<int32_t>((a4 >> (8 * b)) & 0xFFu);
    acc += ((w << (24 - 8 * b)) >> 24) * ab;  // lane byte b, sign-extended
  }
  return acc;
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void DotStepVnniBroadcastA(v16i* acc, const v16i* w,
                                                                                         uint32_t a4) {
  *acc = (v16i)_mm512_dpbusd_epi32((__m512i)*acc, _mm512_set1_epi32(static_cast<int32_t>(a4)), (__m512i)*w);
}
#endif

// acc + the four u8 x s8 products in each lane of the words of `lanes` with the broadcast
// `word`, by the target's dot product kDot. qconv's lanes are X's columns (u8) against a
// weight word (s8); qgemm's are B's columns (s8) against a word of A (u8): kUnsignedWord.
template <int32_t kDot, bool kUnsignedWord>
__attribute__((always_inline)) inline void DotStep(v16i* acc, const v16i* lanes, uint32_t word) {
#if defined(__x86_64__)
  if constexpr (kDot == kInt8DotAvx512Vnni) {
    if constexpr (kUnsignedWord) {
      DotStepVnniBroadcastA(acc, lanes, word);
    } else {
      DotStepVnni(acc, lanes, static_cast<int32_t>(word));
    }
    return;
  }
  if constexpr (kDot == kInt8DotAvxVnni) {
    const v16i broadcast = v16i{} + static_cast<int32_t>(word);
    if constexpr (kUnsignedWord) {
      DotStepAvxVnni(acc, &broadcast, lanes);
    } else {
      DotStepAvxVnni(acc, lanes, &broadcast);
    }
    return;
  }
#endif
  if constexpr (kUnsignedWord) {
    *acc = DotStepGenericBroadcastA(*acc, *lanes, word);
  } else {
    *acc = DotStepGeneric(*acc, *lanes, static_cast<int32_t>(word));
  }
}

// QConvEpilogueAvx512's operands, derived from QConvParams once per call (EpilogueOperands)
// and copied into a local per tile: the library builds with -fno-strict-aliasing, so Y's
// byte stores may alias any memory, and read through `q` every field was loaded again
// after each store and tested per vector. With the bounds folded (EpilogueOperands),
// ResNet-50 int8's 56 x 56 block-ending convs (an f32 result with a u8 residual, then
// quantized: about 20 vector operations per sixteen outputs, against 16 steps of
// products) ran 0.47 -> 0.43 ms.
struct EpilogueAvx512 {
  void* y;
  const void* residual;
  const int32_t* offsets;
  const float* multipliers;
  const float* float_bias;
  int64_t plane;  // Y's elements from one output channel to the next
  int32_t y_dtype, residual_dtype, residual_zero, y_zero;
  float residual_scale;
  float lo, hi;              // Y's clamp less its zero point (RoundAddZeroClamp)
  float bound_lo, bound_hi;  // mode 2: relu and clip as one max and min (`bounded`)
  float out_scale;
  bool sums_only, to_float, quantized, bounded;
};

struct QConvParams {
  const uint8_t* x4;  // the channel-quad copy of X
  const int8_t* weights;
  const int32_t* offsets;
  const float* multipliers;
  const float* float_bias;  // mode 2 (f32 out): added after the multiplier; may be null
  const void* residual;     // mode 2: a tensor of Y's shape added before relu; may be null
  int32_t residual_dtype;   // f32, or u8/i8 dequantized by the two below (DequantizeLinear's rule)
  float residual_scale;
  int32_t residual_zero;
  float out_scale;    // mode 2 with a u8/i8 Y: the f32 result quantized as QuantizeLinear does
  const float* clip;  // mode 2: [lo, hi] bounding the result after relu (ReLU6); may be null
  void* y;
  int32_t y_dtype;
  bool requantize, to_float;
  bool relu;                                              // f32 Y: max(y, 0) (requantized Y clamps through lo instead)
  int64_t batch, group, out_channels, ocg, quads, steps;  // steps: K / 4 = KH * KW * quads
  int64_t H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
  uint32_t x_zero_word;  // zx' in all four bytes
  float y_zero, lo, hi;  // the output zero point and clamp (quantized units)
  bool pointwise;        // 1x1, stride 1, no padding: columns read in place
  // flat_k (kiln_quant_params): x4 holds X padded and channels last, [N][Hp][Wp][C], and a
  // step's word is bytes 4s..4s+3 of the column's (kh, kw, channel) sequence. flat_index
  // (null without byte permutes): per step, the vpermt2b indices that gather it for eight
  // columns from rows flat_row[s] and flat_row[s] + 1 (PackColumnsFlatVbmi).
  bool flat;
  int64_t C, Hp, Wp;
  const uint8_t* flat_index;
  const uint8_t* flat_row;
  EpilogueAvx512 epilogue;  // EpilogueOperands(*this), set once its fields are
};

inline EpilogueAvx512 EpilogueOperands(const QConvParams& q) {
  EpilogueAvx512 e;
  e.y = q.y;
  e.residual = q.residual;
  e.offsets = q.offsets;
  e.multipliers = q.multipliers;
  e.float_bias = q.float_bias;
  e.plane = q.OH * q.OW;
  e.y_dtype = q.y_dtype;
  e.residual_dtype = q.residual_dtype;
  e.residual_zero = q.residual_zero;
  e.residual_scale = q.residual_scale;
  e.y_zero = static_cast<int32_t>(q.y_zero);
  e.lo = q.lo - q.y_zero;
  e.hi = q.hi - q.y_zero;
  e.sums_only = !q.requantize && !q.to_float;
  e.to_float = q.to_float;
  e.quantized = q.to_float && q.y_dtype != kF32;
  e.out_scale = q.out_scale;
  // relu then clip: max(max(f, 0), lo) is max(f, max(0, lo)), NaN and -0 included (vmaxps
  // returns its second operand for them).
  e.bounded = q.to_float && (q.relu || q.clip != nullptr);
  e.bound_lo = q.clip != nullptr ? q.clip[0] : -__builtin_inff();
  e.bound_hi = q.clip != nullptr ? q.clip[1] : __builtin_inff();
  if (q.relu && !(e.bound_lo > 0.f)) e.bound_lo = 0.f;
  // A quantized Y: the bounds join the clamp of the quotient, two operations a vector fewer
  // on the FP units, which this epilogue is bound by (at half rate on Zen 4's 512-bit
  // vectors). The rounded f / s is monotonic in f (max(f, b) / s is max(f / s, b / s), NaN
  // included), and where the two ranges do not overlap the clamp gives the end of Y's range
  // nearest to the bounds, as clamping twice does: [lo, hi] is Y's whole range less the zero
  // point here, and a result past it saturates in the store.
  if (e.quantized && e.bounded) {
    if (e.bound_lo / q.out_scale > e.lo) e.lo = e.bound_lo / q.out_scale;
    if (e.bound_hi / q.out_scale < e.hi) e.hi = e.bound_hi / q.out_scale;
    e.bounded = false;
  }
  return e;
}

// Element i of the residual as f32.
inline float ResidualAt(const QConvParams& q, int64_t i) {
  if (q.residual_dtype == kF32) return static_cast<const float*>(q.residual)[i];
  return static_cast<float>(LoadInt(q.residual, q.residual_dtype, i) - q.residual_zero) * q.residual_scale;
}

// A tile's epilogue: sums [kQRows][kLanes] (row r, column j at r * kLanes + j) of output
// channels panel * 8.. and columns j0.., `cols` of them valid, into Y.
template <int kLanes>
inline void QConvEpilogue(const QConvParams& q, const int32_t* acc, int64_t n, int64_t grp, int64_t panel, int64_t j0,
                          int64_t cols) {
  const int64_t rows = q.ocg - panel * kQRows < kQRows ? q.ocg - panel * kQRows : kQRows;
  const int64_t OHW = q.OH * q.OW;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t oc = grp * q.ocg + panel * kQRows + r;
    alignas(64) int32_t sums[kLanes];
    memcpy(sums, acc + r * kLanes, sizeof(sums));
    const int32_t offset = q.offsets[oc];
    const int64_t at = (n * q.out_channels + oc) * OHW + j0;
    if (q.to_float && q.y_dtype != kF32) {  // the f32 result, then QuantizeLinear's rule
      const float m = q.multipliers[oc], b = q.float_bias != nullptr ? q.float_bias[oc] : 0.f;
      for (int64_t j = 0; j < cols; ++j) {
        float v = static_cast<float>(sums[j] + offset) * m + b;
        if (q.residual != nullptr) v += ResidualAt(q, at + j);
        if (q.relu && !(v > 0.f)) v = 0.f;
        if (q.clip != nullptr) v = v < q.clip[0] ? q.clip[0] : (v > q.clip[1] ? q.clip[1] : v);
        v = rintf(v / q.out_scale) + q.y_zero;
        StoreSaturated(q.y, q.y_dtype, at + j, v);
      }
      continue;
    }
    if (q.to_float) {
      const float m = q.multipliers[oc], b = q.float_bias != nullptr ? q.float_bias[oc] : 0.f;
      float* y = static_cast<float*>(q.y) + at;
      if (q.residual != nullptr || q.clip != nullptr) {
        for (int64_t j = 0; j < cols; ++j) {
          float v = static_cast<float>(sums[j] + offset) * m + b;
          if (q.residual != nullptr) v += ResidualAt(q, at + j);
          if (q.relu && !(v > 0.f)) v = 0.f;
          if (q.clip != nullptr) v = v < q.clip[0] ? q.clip[0] : (v > q.clip[1] ? q.clip[1] : v);
          y[j] = v;
        }
        continue;
      }
      if (q.relu) {
        for (int64_t j = 0; j < cols; ++j) {
          const float v = static_cast<float>(sums[j] + offset) * m + b;
          y[j] = v > 0.f ? v : 0.f;
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) y[j] = static_cast<float>(sums[j] + offset) * m + b;
      }
      continue;
    }
    if (!q.requantize) {
      int32_t* y = static_cast<int32_t*>(q.y) + at;
      for (int64_t j = 0; j < cols; ++j) y[j] = sums[j] + offset;
      continue;
    }
    const float m = q.multipliers[oc];
    alignas(64) float values[kLanes];
    for (int64_t j = 0; j < kLanes; ++j) {
      float v = rintf(static_cast<float>(sums[j] + offset) * m) + q.y_zero;
      values[j] = v < q.lo ? q.lo : (v > q.hi ? q.hi : v);
    }
    if (q.y_dtype == kU8) {
      uint8_t* y = static_cast<uint8_t*>(q.y) + at;
      for (int64_t j = 0; j < cols; ++j) y[j] = static_cast<uint8_t>(values[j]);
    } else {
      int8_t* y = static_cast<int8_t*>(q.y) + at;
      for (int64_t j = 0; j < cols; ++j) y[j] = static_cast<int8_t>(values[j]);
    }
  }
}

#if defined(__x86_64__)
// QConvEpilogue for the AVX-512 VNNI tiles: the sums stay in registers and each row's
// columns go to Y through masked stores, with the same arithmetic in the same order
// (multiply, then add; rint; add the zero point; clamp), so the results are identical.
// Copying the tile through the stack and a scalar tail per row cost as much as the
// products themselves where K is short (a 1x1 conv over 64 channels: 16 steps).

// Sixteen clamped values as Y's u8 or s8 bytes from element `at`, the lanes of `mask`.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void QConvStoreBytes(const EpilogueAvx512& e,
                                                                                            int64_t at, __mmask16 mask,
                                                                                            __m512i values) {
  if (e.y_dtype == kU8) {
    _mm512_mask_cvtusepi32_storeu_epi8(static_cast<uint8_t*>(e.y) + at, mask, values);
  } else {
    _mm512_mask_cvtsepi32_storeu_epi8(static_cast<int8_t*>(e.y) + at, mask, values);
  }
}

// rint(f) + zero clamped to [lo, hi] (zero, lo and hi whole numbers) as i32, in four
// operations for the five of the float sequence: f clamped to [lo - zero, hi - zero] first
// gives the same rint (the bounds are whole), and the conversion rounds to nearest even,
// so the result is the same for every f, NaN included (to lo either way).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline __m512i RoundAddZeroClamp(
    const EpilogueAvx512& e, __m512 f) {
  f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(e.lo)), _mm512_set1_ps(e.hi));
  return _mm512_add_epi32(_mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                          _mm512_set1_epi32(e.y_zero));
}

// Sixteen elements of the residual from element `at` as f32 (ResidualAt), the lanes of `mask`.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline __m512 ResidualAvx512(const EpilogueAvx512& e,
                                                                                             int64_t at,
                                                                                             __mmask16 mask) {
  if (e.residual_dtype == kF32) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(e.residual) + at);
  const __m128i bytes = _mm_maskz_loadu_epi8(mask, static_cast<const uint8_t*>(e.residual) + at);
  const __m512i ints = e.residual_dtype == kU8 ? _mm512_cvtepu8_epi32(bytes) : _mm512_cvtepi8_epi32(bytes);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ints, _mm512_set1_epi32(e.residual_zero))),
                       _mm512_set1_ps(e.residual_scale));
}

// One row of QConvEpilogueAvx512: its NV vectors of sums `row`, output channel oc, from
// Y's element `at`, the columns of each vector in `masks`.
template <int NV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void QConvEpilogueRowAvx512(
    const EpilogueAvx512& e, const v16i* row, const __mmask16* masks, int64_t oc, int64_t at) {
  const __m512i offset = _mm512_set1_epi32(e.offsets[oc]);
  __m512i sums[NV];
  for (int v = 0; v < NV; ++v) sums[v] = _mm512_add_epi32((__m512i)row[v], offset);
  if (e.sums_only) {
    int32_t* y = static_cast<int32_t*>(e.y) + at;
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_epi32(y + v * 16, masks[v], sums[v]);
    return;
  }
  const __m512 m = _mm512_set1_ps(e.multipliers[oc]);
  if (!e.to_float) {
    for (int v = 0; v < NV; ++v) {
      QConvStoreBytes(e, at + v * 16, masks[v], RoundAddZeroClamp(e, _mm512_mul_ps(_mm512_cvtepi32_ps(sums[v]), m)));
    }
    return;
  }
  const __m512 b = _mm512_set1_ps(e.float_bias != nullptr ? e.float_bias[oc] : 0.f);
  const __m512 out_scale = _mm512_set1_ps(e.out_scale);
  __m512 f[NV];
  for (int v = 0; v < NV; ++v) {
    f[v] = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums[v]), m), b);
    if (e.residual != nullptr) f[v] = _mm512_add_ps(f[v], ResidualAvx512(e, at + v * 16, masks[v]));
    if (e.bounded) {  // -0 and NaN become the lower bound (+0 under relu), as in QConvEpilogue
      f[v] = _mm512_min_ps(_mm512_max_ps(f[v], _mm512_set1_ps(e.bound_lo)), _mm512_set1_ps(e.bound_hi));
    }
  }
  for (int v = 0; v < NV; ++v) {
    if (!e.quantized) {
      _mm512_mask_storeu_ps(static_cast<float*>(e.y) + at + v * 16, masks[v], f[v]);
    } else {
      QConvStoreBytes(e, at + v * 16, masks[v], RoundAddZeroClamp(e, _mm512_div_ps(f[v], out_scale)));
    }
  }
}

// The lanes of NV vectors that hold a tile's `cols` columns.
template <int NV>
__attribute__((always_inline)) inline void TileMasks(int64_t cols, __mmask16* masks) {
  for (int v = 0; v < NV; ++v) {
    const int64_t left = cols - v * 16;
    masks[v] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>(left <= 0 ? 0 : (1u << left) - 1);
  }
}

// Rows R.. of a tile's sums held in registers, acc [8][NV], into Y (QConvEpilogueAvx512):
// each row's index a constant, so the sums never go through memory. (Read through a copy
// indexed at run time, LLVM's stack-move merged the copy with the accumulators, which
// then were stored every step: the tiles ran at half speed.)
template <int NV, int R = 0>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void QConvEpilogueRowsAvx512(
    const EpilogueAvx512& e, const v16i (&acc)[kQRows][NV], const __mmask16* masks, int64_t rows, int64_t oc,
    int64_t at) {
  if constexpr (R < kQRows) {
    if (R >= rows) return;
    QConvEpilogueRowAvx512<NV>(e, acc[R], masks, oc + R, at + R * e.plane);
    QConvEpilogueRowsAvx512<NV, R + 1>(e, acc, masks, rows, oc, at);
  }
}

// QConvEpilogue for the AVX-512 VNNI tiles: sums [8][NV] of output channels panel * 8..
// and columns j0.., `cols` of them valid.
template <int NV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void QConvEpilogueAvx512(
    const QConvParams& q, const v16i (&acc)[kQRows][NV], int64_t n, int64_t grp, int64_t panel, int64_t j0,
    int64_t cols) {
  const int64_t rows = q.ocg - panel * kQRows < kQRows ? q.ocg - panel * kQRows : kQRows;
  const int64_t oc = grp * q.ocg + panel * kQRows;
  __mmask16 masks[NV];
  TileMasks<NV>(cols, masks);
  const EpilogueAvx512 e = q.epilogue;  // (a local: Y's stores cannot alias it)
  QConvEpilogueRowsAvx512<NV>(e, acc, masks, rows, oc, (n * q.out_channels + oc) * q.OH * q.OW + j0);
}
#endif

// An f32 residual's rows of a tile, asked for before its products: they lie in eight
// planes, a plane apart, which the hardware prefetchers do not follow. (ResNet-50 int8's
// first downsample conv reads a 3 MiB f32 residual: 0.68 -> 0.49 ms. Over a u8 residual,
// a line or two a row, it measured no faster.)
inline void PrefetchResidual(const QConvParams& q, int64_t n, int64_t grp, int64_t panel, int64_t j0, int64_t cols) {
  if (q.residual == nullptr || q.residual_dtype != kF32) return;
  const int64_t rows = q.ocg - panel * kQRows < kQRows ? q.ocg - panel * kQRows : kQRows;
  const int64_t plane = q.OH * q.OW, oc = grp * q.ocg + panel * kQRows;
  const float* base = static_cast<const float*>(q.residual) + (n * q.out_channels + oc) * plane + j0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; j += 16) __builtin_prefetch(base + r * plane + j);
    __builtin_prefetch(base + r * plane + cols - 1);
  }
}

// Rows [panel * 8, +8) of one tile of NV column vectors: the i32 sums over every step,
// then the epilogue into Y for the tile's `cols` columns starting at column j0. kColumn
// (AVX-512 VNNI, NV = 3; chunks of 49 columns: Chunks): a 49th column, its words `ldc`
// bytes apart from `column`, which the epilogue takes as a fourth vector of one column.
template <int32_t kDot, int NV, bool kColumn = false>
inline void QConvTile(const QConvParams& q, const uint8_t* b, int64_t ldb, int64_t n, int64_t grp, int64_t panel,
                      int64_t j0, int64_t cols, const uint8_t* column = nullptr, int64_t ldc = 0) {
  static_assert(!kColumn || (kDot == kInt8DotAvx512Vnni && NV == 3), "the 49th column is AVX-512 VNNI's");
  const int64_t panels = (q.ocg + kQRows - 1) / kQRows;
  const int8_t* w = q.weights + (grp * panels + panel) * q.steps * kQRows * 4;
  PrefetchResidual(q, n, grp, panel, j0, cols);
  v16i acc[kQRows][NV] = {};
  [[maybe_unused]] v8i last = {};
  int64_t step = 0;
  do {  // (steps >= 1; as a for loop, the zero-step case got the sums zeroed by a memset call)
    if ((step & 1) == 0) __builtin_prefetch(w + step * kQRows * 4 + kQWeightsAhead, 0, 3);  // (a line is two steps)
    v16i x[NV];
    for (int v = 0; v < NV; ++v) memcpy(&x[v], b + step * ldb + v * 64, 64);
    for (int r = 0; r < kQRows; ++r) {
      int32_t w4;
      memcpy(&w4, w + (step * kQRows + r) * 4, 4);
      for (int v = 0; v < NV; ++v) DotStep<kDot, false>(&acc[r][v], &x[v], static_cast<uint32_t>(w4));
    }
#if defined(__x86_64__)
    if constexpr (kColumn) DotStepColumnVnni(&last, column + step * ldc, w + step * kQRows * 4);
#endif
  } while (++step < q.steps);
#if defined(__x86_64__)
  if constexpr (kColumn) {
    v16i sums[kQRows][NV + 1];
    for (int r = 0; r < kQRows; ++r) {
      for (int v = 0; v < NV; ++v) sums[r][v] = acc[r][v];
      sums[r][NV] = v16i{last[r]};
    }
    QConvEpilogueAvx512<NV + 1>(q, sums, n, grp, panel, j0, cols);
    return;
  } else if constexpr (kDot == kInt8DotAvx512Vnni) {
    QConvEpilogueAvx512<NV>(q, acc, n, grp, panel, j0, cols);
    return;
  }
#endif
  // The epilogue reads the sums through a copy: its rows loop indexes them at run time, which
  // kept `acc` itself in memory, zeroed by a memset call per tile before the products (3.5 % of
  // ResNet-50's int8 time).
  v16i sums[kQRows * NV];
  for (int r = 0; r < kQRows; ++r) {
    for (int v = 0; v < NV; ++v) sums[r * NV + v] = acc[r][v];
  }
  QConvEpilogue<NV * 16>(q, reinterpret_cast<const int32_t*>(sums), n, grp, panel, j0, cols);
}

// The last 1 to 4 columns of a chunk (7x7 planes: 49 = 48 + 1 positions; 14x14: 196 =
// 192 + 4) on four-lane vectors: a quarter of the 16-lane tile's work, which took 7 % of
// ResNet-50's int8 conv time for 2 % of its columns. Reads 16 bytes per step where the
// 16-lane tile read 64.
template <int32_t kDot>
inline void QConvTileNarrow(const QConvParams& q, const uint8_t* b, int64_t ldb, int64_t n, int64_t grp, int64_t panel,
                            int64_t j0, int64_t cols) {
  const int64_t panels = (q.ocg + kQRows - 1) / kQRows;
  const int8_t* w = q.weights + (grp * panels + panel) * q.steps * kQRows * 4;
  v4i acc[kQRows] = {};
  for (int64_t step = 0; step < q.steps; ++step) {
    v4i x;
    memcpy(&x, b + step * ldb, 16);
    for (int r = 0; r < kQRows; ++r) {
      int32_t w4;
      memcpy(&w4, w + (step * kQRows + r) * 4, 4);
#if defined(__x86_64__)
      if constexpr (kDot == kInt8DotAvx512Vnni) {
        DotStep4Vnni(&acc[r], &x, w4);
        continue;
      }
      if constexpr (kDot == kInt8DotAvxVnni) {
        DotStep4AvxVnni(&acc[r], &x, w4);
        continue;
      }
#endif
      acc[r] = DotStepGeneric<v4i, v4u>(acc[r], x, w4);
    }
  }
  QConvEpilogue<4>(q, reinterpret_cast<const int32_t*>(acc), n, grp, panel, j0, cols);
}

#if defined(__x86_64__)
// A chunk of 1 to 4 columns (14x14 planes: 196 = 4 x 48 + 4; a single last column joins
// the chunk before: Chunks) the other way round on AVX-512 VNNI: lanes are sixteen output channels (two weight
// panels side by side), and each column's word of X is broadcast against them, so a step
// costs NC products per sixteen channels where QConvTileNarrow's four-lane vectors cost
// eight per eight channels whatever the column count. The sums go to QConvEpilogue as the
// narrow tile's [8][4] per panel.
template <int NC>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void QConvFewColumnsAvx512(
    const QConvParams& q, const uint8_t* b, int64_t ldb, int64_t n, int64_t grp, int64_t j0, int64_t cols, int64_t p0,
    int64_t p1) {
  const int64_t panels = (q.ocg + kQRows - 1) / kQRows;
  const int64_t panel_bytes = q.steps * kQRows * 4;
  const int8_t* group_weights = q.weights + grp * panels * panel_bytes;
  for (int64_t panel = p0; panel < p1; panel += 2) {
    const int8_t* w0 = group_weights + panel * panel_bytes;
    const bool pair = panel + 1 < p1;
    const int8_t* w1 = pair ? w0 + panel_bytes : w0;  // (a lone last panel: lanes 8-15 repeat it, unused)
    __m512i acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_si512();
    for (int64_t step = 0; step < q.steps; ++step) {
      if ((step & 1) == 0) {
        __builtin_prefetch(w0 + step * kQRows * 4 + kQWeightsAhead, 0, 3);
        __builtin_prefetch(w1 + step * kQRows * 4 + kQWeightsAhead, 0, 3);
      }
      const __m512i w = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + step * kQRows * 4))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1 + step * kQRows * 4)), 1);
      const uint8_t* x = b + step * ldb;
      for (int c = 0; c < NC; ++c) {
        int32_t word;
        memcpy(&word, x + c * 4, 4);
        acc[c] = _mm512_dpbusd_epi32(acc[c], _mm512_set1_epi32(word), w);
      }
    }
    alignas(64) int32_t lanes[NC][16];
    for (int c = 0; c < NC; ++c) _mm512_store_si512(lanes[c], acc[c]);
    for (int half = 0; half < (pair ? 2 : 1); ++half) {
      alignas(16) int32_t sums[kQRows][4] = {};
      for (int r = 0; r < kQRows; ++r) {
        for (int c = 0; c < NC; ++c) sums[r][c] = lanes[c][half * 8 + r];
      }
      QConvEpilogue<4>(q, &sums[0][0], n, grp, panel + half, j0, cols);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void QConvFewColumnsAvx512(
    const QConvParams& q, const uint8_t* b, int64_t ldb, int64_t n, int64_t grp, int64_t j0, int64_t cols, int64_t p0,
    int64_t p1) {
  switch (cols) {
    case 1: return QConvFewColumnsAvx512<1>(q, b, ldb, n, grp, j0, cols, p0, p1);
    case 2: return QConvFewColumnsAvx512<2>(q, b, ldb, n, grp, j0, cols, p0, p1);
    case 3: return QConvFewColumnsAvx512<3>(q, b, ldb, n, grp, j0, cols, p0, p1);
    default: return QConvFewColumnsAvx512<4>(q, b, ldb, n, grp, j0, cols, p0, p1);
  }
}
#endif

// The columns [j0, j0 + cols) of one image and group for every step (kh, kw, quad): X's
// words, or the zero point's where a tap falls in the padding, [steps][48] words. A run's
// bounds depend on the tap alone, so they are found once per tap for all its quads (per
// step and run they cost as much as the copies where a chunk's runs are short).
inline void PackColumns(const QConvParams& q, const uint8_t* x4, int64_t j0, int64_t cols, int64_t ld,
                        uint8_t* packed) {
  // Runs of the chunk's columns along one output row: [start, start + length), reading
  // input row ih0 + kh, columns iw0 + kw + SW * (0, 1, ...); per tap, words [lo, hi) of a
  // run read X from byte `offset` of a plane and the others are padding.
  struct Run {
    int64_t start, length, ih0, iw0, lo, hi, offset;
  };
  Run runs[kQCols + 1];
  int64_t num_runs = 0;
  for (int64_t j = 0; j < cols;) {
    const int64_t p = j0 + j, ow = p % q.OW;
    const int64_t length = q.OW - ow < cols - j ? q.OW - ow : cols - j;
    runs[num_runs++] = {j, length, p / q.OW * q.SH - q.PH, ow * q.SW - q.PW, 0, 0, 0};
    j += length;
  }
  v16u zero;
  for (int l = 0; l < 16; ++l) zero[l] = q.x_zero_word;
  const int64_t plane_bytes = q.H * q.W * 4;
  for (int64_t kh = 0, step = 0; kh < q.KH; ++kh) {
    for (int64_t kw = 0; kw < q.KW; ++kw) {
      for (int64_t i = 0; i < num_runs; ++i) {
        Run& run = runs[i];
        const int64_t ih = run.ih0 + kh * q.DH, iw = run.iw0 + kw * q.DW;
        // Valid k: 0 <= iw + k * SW < W.
        int64_t lo = 0, hi = 0;
        if (ih >= 0 && ih < q.H) {
          if (q.SW == 1) {
            lo = iw >= 0 ? 0 : -iw;
            hi = q.W - iw <= 0 ? 0 : q.W - iw;
          } else {
            lo = iw >= 0 ? 0 : (-iw + q.SW - 1) / q.SW;
            hi = q.W - iw <= 0 ? 0 : (q.W - iw + q.SW - 1) / q.SW;
          }
          if (hi > run.length) hi = run.length;
          if (lo > hi) lo = hi;
        }
        run.lo = lo, run.hi = hi, run.offset = (ih * q.W + iw) * 4;
      }
      for (int64_t c4 = 0; c4 < q.quads; ++c4, ++step) {
        const uint8_t* plane = x4 + c4 * plane_bytes;
        uint32_t* dst = reinterpret_cast<uint32_t*>(packed + step * ld * 4);
        for (int64_t i = 0; i < num_runs; ++i) {
          const Run& run = runs[i];
          uint32_t* out = dst + run.start;
          const int64_t lo = run.lo, hi = run.hi;
          // Sixteen words at a time, past lo, hi or the run's end: into the words copied
          // next, the next run, the next step's row or the buffer's slack (each written
          // later), reading into the next plane or the scratch's 256 spare bytes: a run is
          // at most 48 words, too short for a memcpy call to pay.
          for (int64_t k = 0; k < lo; k += 16) memcpy(out + k, &zero, 64);
          const uint8_t* src = plane + run.offset;
          if (q.SW == 1) {
            for (int64_t k = lo; k < hi; k += 16) memcpy(out + k, src + k * 4, 64);
          } else if (q.SW == 2) {  // the even words of 32
            for (int64_t k = lo; k < hi; k += 16) {
              v16i a, b;
              memcpy(&a, src + k * 8, 64);
              memcpy(&b, src + k * 8 + 64, 64);
              const v16i even = EvenLanes(a, b);
              memcpy(out + k, &even, 64);
            }
          } else {
            for (int64_t k = lo; k < hi; ++k) memcpy(out + k, src + k * q.SW * 4, 4);
          }
          for (int64_t k = hi; k < run.length; k += 16) memcpy(out + k, &zero, 64);
        }
      }
    }
  }
}

// PackColumns for flat_k: each column's (kh, kw, channel) bytes are KH runs of KW * C
// bytes of the padded, channels-last X, which a column copies whole and then hands out by
// the word.
inline void PackColumnsFlat(const QConvParams& q, const uint8_t* xp, int64_t j0, int64_t cols, int64_t ld,
                            uint8_t* packed) {
  const int64_t run = q.KW * q.C, row_bytes = q.Wp * q.C, k = q.KH * run;
  uint8_t column[kQMaxSteps * 4];
  memset(column + k, 0, q.steps * 4 - k);  // (their weights are 0)
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t p = j0 + j;
    const uint8_t* src = xp + (p / q.OW * q.SH * q.Wp + p % q.OW * q.SW) * q.C;
    for (int64_t kh = 0; kh < q.KH; ++kh) memcpy(column + kh * run, src + kh * row_bytes, run);
    for (int64_t s = 0; s < q.steps; ++s) memcpy(packed + (s * ld + j) * 4, column + s * 4, 4);
  }
}

#if defined(__x86_64__)
// PackColumnsFlat with byte permutes: eight columns of an output row at a time, whose KH
// input rows each lie within 64 bytes (7 * SW * C + KW * C <= 64: ResNet's stem, 42 + 21),
// one register a row; a step's eight words are one vpermt2b of the two rows its four bytes
// come from (KW * C >= 4, so at most two).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"), noinline)) void PackColumnsFlatVbmi(
    const QConvParams& q, const uint8_t* xp, int64_t j0, int64_t cols, int64_t ld, uint8_t* packed) {
  const int64_t row_bytes = q.Wp * q.C;
  for (int64_t j = 0; j < cols;) {
    const int64_t p = j0 + j, ow = p % q.OW;
    const int64_t length = q.OW - ow < cols - j ? q.OW - ow : cols - j;
    const uint8_t* src = xp + (p / q.OW * q.SH * q.Wp + ow * q.SW) * q.C;
    for (int64_t g = 0; g < length; g += 8) {
      const __mmask8 mask = static_cast<__mmask8>(length - g >= 8 ? 0xFF : (1u << (length - g)) - 1);
      __m512i rows[8];
      for (int64_t kh = 0; kh < q.KH; ++kh) rows[kh] = _mm512_loadu_si512(src + kh * row_bytes + g * q.SW * q.C);
      for (int64_t s = 0; s < q.steps; ++s) {
        const int64_t r = q.flat_row[s];
        const __m512i v = _mm512_permutex2var_epi8(rows[r], _mm512_loadu_si512(q.flat_index + s * 64),
                                                   rows[r + 1 < q.KH ? r + 1 : r]);
        _mm256_mask_storeu_epi32(packed + (s * ld + j + g) * 4, mask, _mm512_castsi512_si256(v));
      }
    }
    j += length;
  }
}
#endif

// flat_k's X: [N][Hp][Wp][C], the rows and columns the windows reach, the padding X's zero
// point (as u8: an s8 X is flipped), a job per image and row.
void PadChannelsLast(const kiln_kcall* call, const QConvParams& q, uint8_t zx, uint8_t flip, uint8_t* xp) {
  const uint8_t* px = static_cast<const uint8_t*>(call->inputs[0].data);
  ParallelFor(call, q.batch * q.Hp, 8, [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / q.Hp, ih = job % q.Hp - q.PH;
      uint8_t* row = xp + job * q.Wp * q.C;
      memset(row, zx, q.Wp * q.C);
      if (ih < 0 || ih >= q.H) continue;
      const int64_t iw_end = q.Wp - q.PW < q.W ? q.Wp - q.PW : q.W;
      const uint8_t* src = px + (n * q.C * q.H + ih) * q.W;
      uint8_t* dst = row + q.PW * q.C;
      int64_t iw = 0;
      if (q.C == 3) {  // sixteen pixels of the three planes interleaved into 48 bytes
        v16u8 f;
        for (int l = 0; l < 16; ++l) f[l] = flip;
        for (; iw + 16 <= iw_end; iw += 16) {
          v16u8 r, g, b;
          memcpy(&r, src + iw, 16);
          memcpy(&g, src + q.H * q.W + iw, 16);
          memcpy(&b, src + 2 * q.H * q.W + iw, 16);
          const v32u8 rg = __builtin_shufflevector(r ^ f, g ^ f, KILN_IOTA32);
          const v32u8 bb = __builtin_shufflevector(b ^ f, b ^ f, KILN_IOTA32);
          const v64u8 all = __builtin_shufflevector(rg, bb, KILN_IOTA64);
          const v64u8 out =
              __builtin_shufflevector(all, all, 0, 16, 32, 1, 17, 33, 2, 18, 34, 3, 19, 35, 4, 20, 36, 5, 21, 37, 6, 22,
                                      38, 7, 23, 39, 8, 24, 40, 9, 25, 41, 10, 26, 42, 11, 27, 43, 12, 28, 44, 13, 29,
                                      45, 14, 30, 46, 15, 31, 47, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
          memcpy(dst + iw * 3, &out, 48);
        }
      }
      for (; iw < iw_end; ++iw) {
        for (int64_t c = 0; c < q.C; ++c) dst[iw * q.C + c] = src[c * q.H * q.W + iw] ^ flip;
      }
    }
  });
}

// The columns [j0, j0 + cols) of image n, group grp into `packed`, `ld` words a step.
inline void PackColumnRange(const QConvParams& q, int64_t n, int64_t grp, int64_t j0, int64_t cols, int64_t ld,
                            uint8_t* packed) {
  if (q.flat) {
    const uint8_t* xp = q.x4 + n * q.Hp * q.Wp * q.C;
#if defined(__x86_64__)
    if (BytePermute() && q.flat_index != nullptr) {  // (the knob folds the call away on other targets)
      PackColumnsFlatVbmi(q, xp, j0, cols, ld, packed);
    } else {
      PackColumnsFlat(q, xp, j0, cols, ld, packed);
    }
#else
    PackColumnsFlat(q, xp, j0, cols, ld, packed);
#endif
    return;
  }
  PackColumns(q, q.x4 + (n * q.group + grp) * q.quads * q.H * q.W * 4, j0, cols, ld, packed);
}

// A chunk's columns as QConvChunk reads them: [steps][48] words, and a 49th column's
// [steps] words after them (whose packing overruns into 64 bytes of slack).
inline void PackChunk(const QConvParams& q, int64_t n, int64_t grp, int64_t j0, int64_t cols, uint8_t* packed) {
  PackColumnRange(q, n, grp, j0, cols < kQCols ? cols : kQCols, kQCols, packed);
  if (cols > kQCols) PackColumnRange(q, n, grp, j0 + kQCols, 1, 1, packed + q.steps * kQCols * 4);
}

// One chunk of at most 49 columns [j0, j0 + cols) of image n, group grp, row panels [p0,
// p1): its columns read in place (pointwise), or packed here, or already packed (`ready`),
// then each panel in tiles of 48 (and a 49th column), 32, 16 or 4 columns.
template <int32_t kDot>
inline void QConvChunk(const QConvParams& q, int64_t n, int64_t grp, int64_t j0, int64_t cols, uint8_t* packed,
                       bool ready, int64_t p0, int64_t p1) {
  const uint8_t* b = packed;
  int64_t ldb = kQCols * 4;  // bytes between steps
  if (q.pointwise) {
    b = q.x4 + (n * q.group + grp) * q.quads * q.H * q.W * 4 + j0 * 4;
    ldb = q.H * q.W * 4;
  } else if (!ready) {
    PackChunk(q, n, grp, j0, cols, packed);
  }
#if defined(__x86_64__)
  if constexpr (kDot == kInt8DotAvx512Vnni) {
    if (cols <= 4) {
      QConvFewColumnsAvx512(q, b, ldb, n, grp, j0, cols, p0, p1);
      return;
    }
    if (cols == kQCols + 1) {  // the 49th column: in place, or packed after the others
      const uint8_t* column = q.pointwise ? b + kQCols * 4 : packed + q.steps * kQCols * 4;
      const int64_t ldc = q.pointwise ? ldb : 4;
      for (int64_t panel = p0; panel < p1; ++panel) {
        QConvTile<kDot, 3, true>(q, b, ldb, n, grp, panel, j0, cols, column, ldc);
      }
      return;
    }
  }
#endif
  for (int64_t panel = p0; panel < p1; ++panel) {
    for (int64_t jt = 0; jt < cols;) {
      const int64_t left = cols - jt;
      if (left > 32) {
        QConvTile<kDot, 3>(q, b + jt * 4, ldb, n, grp, panel, j0 + jt, left < 48 ? left : 48);
        jt += 48;
      } else if (left > 16) {
        QConvTile<kDot, 2>(q, b + jt * 4, ldb, n, grp, panel, j0 + jt, left);
        jt += 32;
      } else if (left > 4) {
        QConvTile<kDot, 1>(q, b + jt * 4, ldb, n, grp, panel, j0 + jt, left);
        jt += 16;
      } else {
        QConvTileNarrow<kDot>(q, b + jt * 4, ldb, n, grp, panel, j0 + jt, left);
        jt += 4;
      }
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), noinline)) void QConvChunkVnni(
    const QConvParams& q, int64_t n, int64_t grp, int64_t j0, int64_t cols, uint8_t* packed, bool ready, int64_t p0,
    int64_t p1) {
  QConvChunk<kInt8DotAvx512Vnni>(q, n, grp, j0, cols, packed, ready, p0, p1);
}
__attribute__((target("avx2,fma,avxvnni"), noinline)) void QConvChunkAvxVnni(const QConvParams& q, int64_t n,
                                                                             int64_t grp, int64_t j0, int64_t cols,
                                                                             uint8_t* packed, bool ready, int64_t p0,
                                                                             int64_t p1) {
  QConvChunk<kInt8DotAvxVnni>(q, n, grp, j0, cols, packed, ready, p0, p1);
}
#endif
__attribute__((noinline)) void QConvChunkGeneric(const QConvParams& q, int64_t n, int64_t grp, int64_t j0, int64_t cols,
                                                 uint8_t* packed, bool ready, int64_t p0, int64_t p1) {
  QConvChunk<kInt8DotPlain>(q, n, grp, j0, cols, packed, ready, p0, p1);
}

// Chunks of an image's positions: 48 columns each, the last one the rest, or 49 where the
// rest would be a single column and the target's tile takes a 49th (AVX-512 VNNI). A 7 x 7
// map was a chunk of 48 and one of a single column, whose tile read all the weights again
// on one chain of dependent products (a 512-channel 3x3 conv: 0.58 ms, against 0.53 on a
// 6 x 8 map). Every chunk of 49 (a 56 x 56 map's) made ResNet-50 slower: the other chunks'
// in-place columns and f32 rows then start off 64 bytes' alignment.
int64_t Chunks(int64_t positions) {
  const bool column = Int8DotProduct() == kInt8DotAvx512Vnni;
  return column && positions % kQCols == 1 && positions > 1 ? positions / kQCols : (positions + kQCols - 1) / kQCols;
}

// flat_k's byte-permute gather, where the target has it and the window fits (see
// PackColumnsFlatVbmi): per step, the vpermt2b indices for eight columns and the first of
// the two input rows, into `index` and `row`, which q then points at.
void SetFlatGather(QConvParams& q, uint8_t* index, uint8_t* row) {
  const int64_t run = q.KW * q.C;
  if (!BytePermute() || q.KH > 8 || run < 4 || 7 * q.SW * q.C + run > 64 || q.steps > kQFlatMaxSteps) return;
  for (int64_t s = 0; s < q.steps; ++s) {  // byte b of column c's word: row r or r + 1 (+64)
    const int64_t r = s * 4 / run;
    row[s] = static_cast<uint8_t>(r);
    for (int64_t c = 0; c < 8; ++c) {
      for (int64_t b = 0; b < 4; ++b) {
        const int64_t k = s * 4 + b, kh = k / run;
        index[s * 64 + c * 4 + b] = static_cast<uint8_t>(kh >= q.KH ? 0 : (kh > r ? 64 : 0) + c * q.SW * q.C + k % run);
      }
    }
    memset(index + s * 64 + 32, 0, 32);
  }
  q.flat_index = index;
  q.flat_row = row;
}

#if defined(__x86_64__)
// CopyChannelQuads for a quad of four channels on AVX-512, 64 pixels at a time: bytes
// interleaved by pairs and then by words within 128-bit lanes (lane k of u_m: pixels 16k +
// 4m ..), then a 4 x 4 transpose of the lanes. Returns the pixels done. (The generic 16
// pixels at a time took 2 % of ResNet-50 int8's time, its pointers spilled.)
__attribute__((target("avx512f,avx512bw"), noinline)) int64_t CopyQuadAvx512(const uint8_t* const* src, int64_t pixels,
                                                                             uint8_t flip, uint8_t* dst) {
  const __m512i f = _mm512_set1_epi8(static_cast<char>(flip));
  int64_t i = 0;
  for (; i + 64 <= pixels; i += 64) {
    __m512i r[4];
    for (int b = 0; b < 4; ++b) r[b] = _mm512_xor_si512(_mm512_loadu_si512(src[b] + i), f);
    const __m512i ab_lo = _mm512_unpacklo_epi8(r[0], r[1]), ab_hi = _mm512_unpackhi_epi8(r[0], r[1]);
    const __m512i cd_lo = _mm512_unpacklo_epi8(r[2], r[3]), cd_hi = _mm512_unpackhi_epi8(r[2], r[3]);
    const __m512i u0 = _mm512_unpacklo_epi16(ab_lo, cd_lo), u1 = _mm512_unpackhi_epi16(ab_lo, cd_lo);
    const __m512i u2 = _mm512_unpacklo_epi16(ab_hi, cd_hi), u3 = _mm512_unpackhi_epi16(ab_hi, cd_hi);
    const __m512i v0 = _mm512_shuffle_i64x2(u0, u1, 0x44), v1 = _mm512_shuffle_i64x2(u2, u3, 0x44);
    const __m512i v2 = _mm512_shuffle_i64x2(u0, u1, 0xEE), v3 = _mm512_shuffle_i64x2(u2, u3, 0xEE);
    _mm512_storeu_si512(dst + i * 4, _mm512_shuffle_i64x2(v0, v1, 0x88));
    _mm512_storeu_si512(dst + i * 4 + 64, _mm512_shuffle_i64x2(v0, v1, 0xDD));
    _mm512_storeu_si512(dst + i * 4 + 128, _mm512_shuffle_i64x2(v2, v3, 0x88));
    _mm512_storeu_si512(dst + i * 4 + 192, _mm512_shuffle_i64x2(v2, v3, 0xDD));
  }
  return i;
}
#endif

// X into channel quads, [N][G][C/4][H][W][4]: one job per (image, group, quad).
void CopyChannelQuads(const kiln_kcall* call, const QConvParams& q, int64_t in_channels, uint8_t zx, uint8_t flip_bits,
                      uint8_t* x4) {
  const uint8_t* px = static_cast<const uint8_t*>(call->inputs[0].data);
  const int64_t HW = q.H * q.W, G = q.group, quads = q.quads, icg = q.C;
  ParallelFor(call, q.batch * G * quads, 1, [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t c4 = job % quads, ng = job / quads, grp = ng % G, n = ng / G;
      uint8_t* dst = x4 + job * HW * 4;
      // The quad's four planes (a channel past the group's reads a plane of zx' bytes).
      alignas(16) uint8_t pad_row[16];
      memset(pad_row, zx ^ flip_bits, sizeof(pad_row));
      const uint8_t* src[4];
      int64_t step[4];
      for (int b = 0; b < 4; ++b) {
        const int64_t ic = c4 * 4 + b;
        src[b] = ic < icg ? px + (n * in_channels + grp * icg + ic) * HW : pad_row;
        step[b] = ic < icg ? 1 : 0;
      }
      // Sixteen pixels at a time: four 16-byte rows interleaved into 64 bytes.
      int64_t i = 0;
#if defined(__x86_64__)
      if (Int8DotProduct() == kInt8DotAvx512Vnni && c4 * 4 + 3 < icg) i = CopyQuadAvx512(src, HW, flip_bits, dst);
#endif
      v16u8 flip16;
      for (int l = 0; l < 16; ++l) flip16[l] = flip_bits;
      for (; i + 16 <= HW; i += 16) {
        v16u8 r[4];
        for (int b = 0; b < 4; ++b) memcpy(&r[b], src[b] + i * step[b], 16);
        const v32u8 ab = __builtin_shufflevector(r[0] ^ flip16, r[1] ^ flip16, KILN_IOTA32);
        const v32u8 cd = __builtin_shufflevector(r[2] ^ flip16, r[3] ^ flip16, KILN_IOTA32);
        const v64u8 abcd = __builtin_shufflevector(ab, cd, KILN_IOTA64);
        const v64u8 out = __builtin_shufflevector(abcd, abcd, KILN_QUAD_INTERLEAVE);
        memcpy(dst + i * 4, &out, 64);
      }
      for (; i < HW; ++i) {
        for (int b = 0; b < 4; ++b) dst[i * 4 + b] = src[b][i * step[b]] ^ flip_bits;
      }
    }
  });
}

// inputs: X, packed weights (s8 [G][ceil(OC/G / 8)][K/4][8][4]), offsets (i32 [OC]),
// multipliers (f32 [OC]; unread for i32 Y), for f32 Y an optional f32 bias [OC] and an
// optional residual of Y's shape (added before relu), for a u8/i8 Y (mode 2: the f32
// result quantized) Y's scale and zero point, and for a u8/i8 residual its scale and zero
// point (it is dequantized first), then optional clip bounds f32 [2] (after relu). outputs: Y, scratch (X's channel
// quads, and 256 bytes a last pointwise chunk may read past them). Parameters: kiln_quant_params'
// group, window, mode, relu and the packed path's fields.
int32_t QConvFast(const kiln_kcall* call, const Window& w, const kiln_quant_params& params) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  QConvParams q;
  q.requantize = params.mode == KILN_QUANT_REQUANTIZE;
  q.to_float = params.mode == KILN_QUANT_TO_FLOAT;
  q.relu = params.relu != 0;
  const uint8_t zx = static_cast<uint8_t>(params.x_zero_point);
  const bool flip = params.x_signed != 0;
  q.y_zero = static_cast<float>(params.y_zero_point);
  q.lo = static_cast<float>(params.clamp_lo);
  q.hi = static_cast<float>(params.clamp_hi);
  q.x_zero_word = zx * 0x01010101u;
  q.group = params.group;
  q.batch = X.dims[0];
  const int64_t in_channels = X.dims[1], icg = in_channels / q.group;
  q.out_channels = Y.dims[1];
  q.ocg = q.out_channels / q.group;
  q.quads = (icg + 3) / 4;
  q.H = w.in[1], q.W = w.in[2], q.OH = w.out[1], q.OW = w.out[2];
  q.KH = w.kernel[1], q.KW = w.kernel[2], q.SH = w.stride[1], q.SW = w.stride[2];
  q.PH = w.pad[1], q.PW = w.pad[2], q.DH = w.dilation[1], q.DW = w.dilation[2];
  q.steps = q.KH * q.KW * q.quads;
  q.flat = params.flat_k != 0;
  q.C = icg;
  q.flat_index = q.flat_row = nullptr;
  if (q.flat) {
    if (q.group != 1 || q.DH != 1 || q.DW != 1) return KILN_KERR_UNSUPPORTED;
    q.steps = (q.KH * q.KW * icg + 3) / 4;
    q.Hp = (q.OH - 1) * q.SH + q.KH, q.Wp = (q.OW - 1) * q.SW + q.KW;
  }
  if (w.in[0] != 1 || w.kernel[0] != 1 || q.steps > kQMaxSteps) return KILN_KERR_UNSUPPORTED;
  q.pointwise =
      q.KH == 1 && q.KW == 1 && q.SH == 1 && q.SW == 1 && q.PH == 0 && q.PW == 0 && q.OH == q.H && q.OW == q.W;
  q.weights = InputData<int8_t>(call, 1);
  q.offsets = InputData<int32_t>(call, 2);
  q.multipliers = InputData<float>(call, 3);
  q.float_bias = q.to_float ? OptionalInputData<float>(call, 4) : nullptr;
  q.residual = q.to_float && call->num_inputs > 5 ? call->inputs[5].data : nullptr;
  q.residual_dtype = q.residual != nullptr ? call->inputs[5].dtype : kF32;
  q.residual_scale = 1.f;
  q.residual_zero = 0;
  if (q.residual != nullptr && q.residual_dtype != kF32) {  // quantized: its scale and zero point
    q.residual_scale = *InputData<float>(call, 8);
    const kiln_ktensor& rz = call->inputs[9];
    q.residual_zero = rz.data != nullptr ? LoadInt(rz.data, rz.dtype, 0) : 0;
  }
  q.out_scale = q.to_float && Y.dtype != kF32 ? *InputData<float>(call, 6) : 1.f;
  q.clip = q.to_float ? OptionalInputData<float>(call, 10) : nullptr;
  if (q.to_float && Y.dtype != kF32) {
    const kiln_ktensor& zp = call->inputs[7];
    q.y_zero = zp.data != nullptr ? static_cast<float>(LoadInt(zp.data, zp.dtype, 0)) : 0.f;
    q.lo = Y.dtype == kU8 ? 0.f : -128.f;  // (relu applies before quantizing, in f32)
    q.hi = Y.dtype == kU8 ? 255.f : 127.f;
  }
  q.y = Y.data, q.y_dtype = Y.dtype;
  q.epilogue = EpilogueOperands(q);
  uint8_t* x4 = OutputData<uint8_t>(call, 1);
  q.x4 = x4;
  alignas(64) uint8_t flat_index[kQFlatMaxSteps * 64], flat_row[kQFlatMaxSteps];
  const int64_t HW = q.H * q.W, G = q.group, quads = q.quads;
  if (q.flat) {
    PadChannelsLast(call, q, zx, flip ? 0x80 : 0, x4);
    SetFlatGather(q, flat_index, flat_row);
  } else {
    CopyChannelQuads(call, q, in_channels, zx, flip ? 0x80 : 0, x4);
  }
  // Jobs: (panel range, image, group, chunk), the chunk fastest, so a thread's jobs share
  // its range's weights. With a panel_range (few columns: ResNet-50's 7x7 maps at batch
  // 1 are a single chunk) the ranges let threads share a chunk, and every
  // chunk is packed first, once, into the scratch past X's copy. On one thread the ranges
  // gain nothing (ResNet-50 int8 measured 0.25 ms slower with them).
  const int64_t positions = q.OH * q.OW, chunks = Chunks(positions), units = q.batch * G * chunks;
  const int64_t panels = (q.ocg + kQRows - 1) / kQRows;
  const bool threaded = call->exec != nullptr && call->exec->parallel_for != nullptr;
  const int64_t split_panels = params.panel_range > 0 && threaded ? params.panel_range : panels;
  const int64_t splits = (panels + split_panels - 1) / split_panels;
  const int64_t copy_bytes = q.flat ? q.batch * q.Hp * q.Wp * q.C + 64 : q.batch * G * quads * HW * 4;
  uint8_t* columns = x4 + (copy_bytes + 256 + 63) / 64 * 64;
  const int64_t column_bytes = q.steps * (kQCols + 1) * 4 + 64;
  const bool prepacked = splits > 1 && !q.pointwise;
  auto chunk_at = [=](int64_t unit, int64_t* n, int64_t* grp, int64_t* j0, int64_t* cols) {
    const int64_t chunk = unit % chunks, ng = unit / chunks;
    *grp = ng % G, *n = ng / G;
    *j0 = chunk * kQCols;
    *cols = chunk + 1 == chunks ? positions - *j0 : kQCols;
  };
  if (prepacked) {
    ParallelFor(call, units, 1, [=](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        int64_t n, grp, j0, cols;
        chunk_at(unit, &n, &grp, &j0, &cols);
        PackChunk(q, n, grp, j0, cols, columns + unit * column_bytes);
      }
    });
  }
  ParallelFor(call, splits * units, 1, [=](int64_t begin, int64_t end) {
    alignas(64) uint8_t stack_columns[kQMaxSteps * (kQCols + 1) * 4 + 64];  // (+ the packing's overrun)
    for (int64_t job = begin; job < end; ++job) {
      const int64_t unit = job % units, p0 = job / units * split_panels;
      const int64_t p1 = p0 + split_panels < panels ? p0 + split_panels : panels;
      int64_t n, grp, j0, cols;
      chunk_at(unit, &n, &grp, &j0, &cols);
      uint8_t* packed = prepacked ? columns + unit * column_bytes : stack_columns;
#if defined(__x86_64__)
      // (Asked here: a captured copy would not fold away in the pool's callback.)
      if (Int8DotProduct() == kInt8DotAvx512Vnni) {
        QConvChunkVnni(q, n, grp, j0, cols, packed, prepacked, p0, p1);
        continue;
      }
      if (Int8DotProduct() == kInt8DotAvxVnni) {
        QConvChunkAvxVnni(q, n, grp, j0, cols, packed, prepacked, p0, p1);
        continue;
      }
#endif
      QConvChunkGeneric(q, n, grp, j0, cols, packed, prepacked, p0, p1);
    }
  });
  return KILN_KERR_OK;
}

// The int8 GEMM for artifacts (lower_fast of MatMulInteger, QLinearMatMul and
// kiln.QLinearMatMulToFloat with a constant 2-D B): Y [rows, N] = A [rows, K] (u8, or s8
// flipped to u8 by adding 128) x B, in tiles of 8 rows x 48 columns held in sixteen-lane
// i32 accumulators. Each step takes four bytes of K: a row's word of A, broadcast, against
// a vector of sixteen columns' s8 words of B, four products to a lane (vpdpbusd where the
// target has AVX-512 VNNI or AVX-VNNI, i32 multiplies otherwise). B is packed at compile
// time as s8 b - zb, [ceil(N/16)][ceil(K/4)][16][4], zero-padded, so a partial last word of A (read
// through a copy) adds nothing past K. Per column an i32 offset (bias - za' * sum(b - zb))
// makes the sum exact; the epilogue is qconv's (int32, requantized, or f32 + bias).
constexpr int kQGemmRows = 8;

struct QGemmParams {
  const uint8_t* a;
  const int8_t* b;  // packed
  const int32_t* offsets;
  const float* multipliers;
  const float* float_bias;
  void* y;
  int32_t y_dtype;
  int64_t mode, rows, K, N, steps;
  bool flip;  // A is s8: its bytes get 128 added (xor 0x80)
  float y_zero, lo, hi;
};

// QGemmTile's epilogue: rows [r0, r0 + 8) (those below q.rows) of the sums [8][NV] x 16
// lanes, `cols` columns from j0, into Y by q.mode (0: int32, 1: requantized, 2: f32 + bias).
template <int NV>
inline void QGemmEpilogue(const QGemmParams& q, const v16i* acc, int64_t r0, int64_t j0, int64_t cols) {
  const int64_t rows = q.rows - r0 < kQGemmRows ? q.rows - r0 : kQGemmRows;
  for (int64_t r = 0; r < rows; ++r) {
    alignas(64) int32_t sums[NV * 16];
    memcpy(sums, acc + r * NV, sizeof(sums));
    const int64_t at = (r0 + r) * q.N + j0;
    const int32_t* offsets = q.offsets + j0;
    const float* m = q.multipliers + j0;
    if (q.mode == 2) {
      float* y = static_cast<float*>(q.y) + at;
      const float* bias = q.float_bias != nullptr ? q.float_bias + j0 : nullptr;
      for (int64_t j = 0; j < cols; ++j)
        y[j] = static_cast<float>(sums[j] + offsets[j]) * m[j] + (bias != nullptr ? bias[j] : 0.f);
    } else if (q.mode == 0) {
      int32_t* y = static_cast<int32_t*>(q.y) + at;
      for (int64_t j = 0; j < cols; ++j) y[j] = sums[j] + offsets[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        float v = rintf(static_cast<float>(sums[j] + offsets[j]) * m[j]) + q.y_zero;
        v = v < q.lo ? q.lo : (v > q.hi ? q.hi : v);
        if (q.y_dtype == kU8) {
          static_cast<uint8_t*>(q.y)[at + j] = static_cast<uint8_t>(v);
        } else {
          static_cast<int8_t*>(q.y)[at + j] = static_cast<int8_t>(v);
        }
      }
    }
  }
}

#if defined(__x86_64__)
// QGemmEpilogue on AVX-512 with masked stores: the same arithmetic in the same order
// (the sum plus the column's offset; f32: times the multiplier, then plus the bias or 0;
// requantized: times the multiplier, rint, plus the zero point, clamped), so the same bits.
template <int NV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void QGemmEpilogueAvx512(const QGemmParams& q,
                                                                                                const v16i* acc,
                                                                                                int64_t r0, int64_t j0,
                                                                                                int64_t cols) {
  const int64_t rows = q.rows - r0 < kQGemmRows ? q.rows - r0 : kQGemmRows;
  __mmask16 masks[NV];
  __m512i offsets[NV];
  __m512 m[NV], bias[NV];
  for (int v = 0; v < NV; ++v) {
    const int64_t left = cols - v * 16;
    masks[v] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>(left <= 0 ? 0 : (1u << left) - 1);
    offsets[v] = _mm512_maskz_loadu_epi32(masks[v], q.offsets + j0 + v * 16);
    m[v] = q.mode != 0 ? _mm512_maskz_loadu_ps(masks[v], q.multipliers + j0 + v * 16) : _mm512_setzero_ps();
    bias[v] = q.mode == 2 && q.float_bias != nullptr ? _mm512_maskz_loadu_ps(masks[v], q.float_bias + j0 + v * 16)
                                                     : _mm512_setzero_ps();
  }
  const __m512 y_zero = _mm512_set1_ps(q.y_zero), lo = _mm512_set1_ps(q.lo), hi = _mm512_set1_ps(q.hi);
  // (Unrolled, with constant indices into acc: the tile's sums stay in registers.)
#pragma clang loop unroll(full)
  for (int r = 0; r < kQGemmRows; ++r) {
    if (r >= rows) break;
    const int64_t at = (r0 + r) * q.N + j0;
    for (int v = 0; v < NV; ++v) {
      const __m512i sum = _mm512_add_epi32((__m512i)acc[r * NV + v], offsets[v]);
      if (q.mode == 0) {
        _mm512_mask_storeu_epi32(static_cast<int32_t*>(q.y) + at + v * 16, masks[v], sum);
        continue;
      }
      const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), m[v]);
      if (q.mode == 2) {
        _mm512_mask_storeu_ps(static_cast<float*>(q.y) + at + v * 16, masks[v], _mm512_add_ps(f, bias[v]));
        continue;
      }
      const __m512 rounded =
          _mm512_add_ps(_mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), y_zero);
      const __m512i bytes = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(rounded, lo), hi));
      if (q.y_dtype == kU8) {
        _mm512_mask_cvtusepi32_storeu_epi8(static_cast<uint8_t*>(q.y) + at + v * 16, masks[v], bytes);
      } else {
        _mm512_mask_cvtsepi32_storeu_epi8(static_cast<int8_t*>(q.y) + at + v * 16, masks[v], bytes);
      }
    }
  }
}
#endif

// Rows [r0, r0 + 8) (clamped to the last row) x NV column vectors from column j0.
template <int32_t kDot, bool kFlip, int NV>
inline void QGemmTile(const QGemmParams& q, int64_t r0, int64_t j0, int64_t cols) {
  const uint8_t* arow[kQGemmRows];
  for (int r = 0; r < kQGemmRows; ++r) arow[r] = q.a + (r0 + r < q.rows ? r0 + r : q.rows - 1) * q.K;
  const int8_t* panel = q.b + (j0 / 16) * q.steps * 64;  // NV consecutive 16-column panels
  const int64_t panel_stride = q.steps * 64;
  const int64_t full = q.K / 4;
  v16i acc[kQGemmRows][NV] = {};
  // Steps [0, full) read whole words of A in place; a partial last one goes through a copy.
  auto step_at = [&](int64_t step, const uint8_t* const* words, int64_t word_offset) {
    v16i w[NV];
    for (int v = 0; v < NV; ++v) memcpy(&w[v], panel + v * panel_stride + step * 64, 64);
    for (int r = 0; r < kQGemmRows; ++r) {
      uint32_t a4;
      memcpy(&a4, words[r] + word_offset, 4);
      if constexpr (kFlip) a4 ^= 0x80808080u;
      for (int v = 0; v < NV; ++v) DotStep<kDot, true>(&acc[r][v], &w[v], a4);
    }
  };
  for (int64_t step = 0; step < full; ++step) step_at(step, arow, step * 4);
  if (full < q.steps) {
    uint8_t tail[kQGemmRows][4] = {};
    const uint8_t* words[kQGemmRows];
    for (int r = 0; r < kQGemmRows; ++r) {
      memcpy(tail[r], arow[r] + full * 4, q.K - full * 4);
      words[r] = tail[r];
    }
    step_at(full, words, 0);
  }
#if defined(__x86_64__)
  if constexpr (kDot == kInt8DotAvx512Vnni) {
    QGemmEpilogueAvx512<NV>(q, &acc[0][0], r0, j0, cols);
    return;
  }
#endif
  QGemmEpilogue<NV>(q, &acc[0][0], r0, j0, cols);
}

// One 48-column panel for row tiles [tile_begin, tile_end).
template <int32_t kDot, bool kFlip>
inline void QGemmPanel(const QGemmParams& q, int64_t j0, int64_t tile_begin, int64_t tile_end) {
  const int64_t cols = q.N - j0 < 48 ? q.N - j0 : 48;
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    if (cols > 32) {
      QGemmTile<kDot, kFlip, 3>(q, t * kQGemmRows, j0, cols);
    } else if (cols > 16) {
      QGemmTile<kDot, kFlip, 2>(q, t * kQGemmRows, j0, cols);
    } else {
      QGemmTile<kDot, kFlip, 1>(q, t * kQGemmRows, j0, cols);
    }
  }
}

// QGemmPanel for q's A: s8 (flipped to u8) or u8, chosen once per panel.
template <int32_t kDot>
inline void QGemmPanelForA(const QGemmParams& q, int64_t j0, int64_t tile_begin, int64_t tile_end) {
  if (q.flip) {
    QGemmPanel<kDot, true>(q, j0, tile_begin, tile_end);
  } else {
    QGemmPanel<kDot, false>(q, j0, tile_begin, tile_end);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) void QGemmPanelVnni(const QGemmParams& q, int64_t j0,
                                                                                     int64_t t0, int64_t t1) {
  QGemmPanelForA<kInt8DotAvx512Vnni>(q, j0, t0, t1);
}
__attribute__((target("avx2,fma,avxvnni"), noinline)) void QGemmPanelAvxVnni(const QGemmParams& q, int64_t j0,
                                                                             int64_t t0, int64_t t1) {
  QGemmPanelForA<kInt8DotAvxVnni>(q, j0, t0, t1);
}
#endif
__attribute__((noinline)) void QGemmPanelGeneric(const QGemmParams& q, int64_t j0, int64_t t0, int64_t t1) {
  QGemmPanelForA<kInt8DotPlain>(q, j0, t0, t1);
}

}  // namespace

// inputs: A (u8 or s8), packed B (s8, as above), offsets (i32 [N]), multipliers (f32 [N];
// unread for i32 Y), for f32 Y an optional f32 bias [N]. Parameters: kiln_quant_params'
// mode, rows, K, N, x_signed (A is s8), y_zero_point, clamp_lo, clamp_hi.
KILN_KERNEL(qgemm) {
  if constexpr (!kFastKernels) return KILN_KERR_UNSUPPORTED;
  const kiln_ktensor& A = call->inputs[0];
  if (!IsQuantizedType(A.dtype)) return KILN_KERR_DTYPE;
  KILN_PARAMS(kiln_quant_params, params, call);
  QGemmParams q;
  q.mode = params.mode;
  q.rows = params.rows;
  q.K = params.K;
  q.N = params.N;
  q.flip = params.x_signed != 0;
  q.y_zero = static_cast<float>(params.y_zero_point);
  q.lo = static_cast<float>(params.clamp_lo);
  q.hi = static_cast<float>(params.clamp_hi);
  q.steps = (q.K + 3) / 4;
  q.a = static_cast<const uint8_t*>(A.data);
  q.b = InputData<int8_t>(call, 1);
  q.offsets = InputData<int32_t>(call, 2);
  q.multipliers = InputData<float>(call, 3);
  q.float_bias = q.mode == 2 ? OptionalInputData<float>(call, 4) : nullptr;
  q.y = call->outputs[0].data;
  q.y_dtype = call->outputs[0].dtype;
  const int64_t panels = (q.N + 47) / 48, tiles = (q.rows + kQGemmRows - 1) / kQGemmRows;
  // Jobs of (panel, a run of row tiles): a thread's jobs share the panel's B in its cache.
  const int64_t tiles_per_job = tiles < 4 ? tiles : 4, runs = (tiles + tiles_per_job - 1) / tiles_per_job;
  ParallelFor(call, panels * runs, 1, [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t panel = job / runs, run = job % runs;
      const int64_t t0 = run * tiles_per_job, t1 = t0 + tiles_per_job < tiles ? t0 + tiles_per_job : tiles;
#if defined(__x86_64__)
      // (Asked here: a captured copy would not fold away in the pool's callback.)
      if (Int8DotProduct() == kInt8DotAvx512Vnni) {
        QGemmPanelVnni(q, panel * 48, t0, t1);
        continue;
      }
      if (Int8DotProduct() == kInt8DotAvxVnni) {
        QGemmPanelAvxVnni(q, panel * 48, t0, t1);
        continue;
      }
#endif
      QGemmPanelGeneric(q, panel * 48, t0, t1);
    }
  });
  return KILN_KERR_OK;
}

// The integer convolution of ConvInteger and QLinearConv. inputs: X, W (u8 or i8), X's
// zero point (one), W's (one, or one per output channel), then for the requantized form
// X's scale (one), W's scale (one or per output channel), Y's scale and zero point, and
// an optional int32 bias [OC] (added to the sum before requantizing). Parameters:
// kiln_quant_params' group, window, mode, packed_weights (QConvFast's layout) and relu. mode 0: Y int32 sums; 1: Y
// requantized (relu clamps it at Y's zero point); 2: Y f32 = sum * x_scale * w_scale + B,
// B then an optional f32 [OC] in the bias slot and an optional f32 residual of Y's shape
// after it (u8/i8: dequantized by the last two inputs), added before relu
// (kiln.QLinearConvToFloat; relu: max(Y, 0)), for a u8/i8 Y its scale and zero point, by
// which the f32 result is quantized (QuantizeLinear's rule), then the residual's, then
// optional clip bounds f32 [2] applied after relu (kiln.clip_min, kiln.clip_max). Taps in the padding read X's
// zero point, i.e. contribute 0.
static int32_t QConv(const kiln_kcall* call, const kiln_quant_params& params) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& W = call->inputs[1];
  const kiln_ktensor& Y = call->outputs[0];
  const Window w(params.window, X, Y);
  const int64_t mode = params.mode;  // 0: int32 sums, 1: requantized, 2: f32 (sum * x_scale * w_scale + B)
  const bool requantize = mode == KILN_QUANT_REQUANTIZE, to_float = mode == KILN_QUANT_TO_FLOAT;
  if (params.packed_weights != 0) {
    if constexpr (kFastKernels) return QConvFast(call, w, params);
    return KILN_KERR_UNSUPPORTED;
  }
  const ConvExtents ext(params.group, w, X, Y);
  const kiln_ktensor& xzp = call->inputs[2];
  const kiln_ktensor& wzp = call->inputs[3];
  const int32_t zx = xzp.data != nullptr ? LoadInt(xzp.data, xzp.dtype, 0) : 0;
  const bool relu = params.relu != 0;  // clamp at Y's zero point
  const int32_t* bias = requantize ? OptionalInputData<int32_t>(call, 8) : nullptr;
  const float* float_bias = to_float ? OptionalInputData<float>(call, 8) : nullptr;
  // The residual (input 9): f32, or u8/i8 dequantized by inputs 12 and 13.
  QConvParams res{};
  const float* clip = to_float ? OptionalInputData<float>(call, 14) : nullptr;  // [lo, hi] after relu
  res.residual = to_float && call->num_inputs > 9 ? call->inputs[9].data : nullptr;
  res.residual_dtype = res.residual != nullptr ? call->inputs[9].dtype : kF32;
  if (res.residual != nullptr && res.residual_dtype != kF32) {
    res.residual_scale = *InputData<float>(call, 12);
    res.residual_zero =
        call->inputs[13].data != nullptr ? LoadInt(call->inputs[13].data, call->inputs[13].dtype, 0) : 0;
  }
  // A u8/i8 Y in mode 2: the f32 result quantized by Y's scale and zero point (inputs 10, 11).
  const bool quantize_result = to_float && Y.dtype != kF32;
  const float out_scale = quantize_result ? *InputData<float>(call, 10) : 1.f;
  const float out_zero = quantize_result && call->inputs[11].data != nullptr
                             ? static_cast<float>(LoadInt(call->inputs[11].data, call->inputs[11].dtype, 0))
                             : 0.f;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {  // job = (n, oc)
      const int64_t n = job / ext.out_channels, oc = job % ext.out_channels, g = oc / ext.oc_per_group;
      const int32_t zw = wzp.data != nullptr ? LoadInt(wzp.data, wzp.dtype, PerChannel(wzp, oc)) : 0;
      float multiplier = 0.f, z = 0.f;
      if (requantize || to_float) {
        const float xs = *InputData<float>(call, 4);
        const float ws = InputData<float>(call, 5)[PerChannel(call->inputs[5], oc)];
        multiplier = xs * ws;
      }
      if (requantize) {
        multiplier = multiplier / *InputData<float>(call, 6);
        z = call->inputs[7].data != nullptr
                ? static_cast<float>(LoadInt(call->inputs[7].data, call->inputs[7].dtype, 0))
                : 0.f;
      }
      const float b = float_bias != nullptr ? float_bias[oc] : 0.f;
      for (int64_t od = 0; od < w.out[0]; ++od) {
        for (int64_t oh = 0; oh < w.out[1]; ++oh) {
          for (int64_t ow = 0; ow < w.out[2]; ++ow) {
            int32_t sum = bias != nullptr ? bias[oc] : 0;
            for (int64_t ic = 0; ic < ext.ic_per_group; ++ic) {
              const int64_t x_base = (n * ext.in_channels + g * ext.ic_per_group + ic) * ext.in_size;
              const int64_t w_base = (oc * ext.ic_per_group + ic) * ext.kernel_size;
              ForEachTapInside(w, w.in, od, oh, ow, [&](int64_t tap, int64_t at) {
                sum += (LoadInt(X.data, X.dtype, x_base + at) - zx) * (LoadInt(W.data, W.dtype, w_base + tap) - zw);
              });
            }
            const int64_t at = job * ext.out_size + (od * w.out[1] + oh) * w.out[2] + ow;
            if (requantize) {
              const float v = rintf(static_cast<float>(sum) * multiplier) + z;
              StoreSaturated(Y.data, Y.dtype, at, relu && v < z ? z : v);
            } else if (to_float) {
              float v = static_cast<float>(sum) * multiplier + b;
              if (res.residual != nullptr) v += ResidualAt(res, at);
              v = relu && !(v > 0.f) ? 0.f : v;  // (ReLU's rule: NaN gives 0)
              if (clip != nullptr) v = v < clip[0] ? clip[0] : (v > clip[1] ? clip[1] : v);
              if (quantize_result) {
                StoreSaturated(Y.data, Y.dtype, at, rintf(v / out_scale) + out_zero);
              } else {
                static_cast<float*>(Y.data)[at] = v;
              }
            } else {
              static_cast<int32_t*>(Y.data)[at] = sum;
            }
          }
        }
      }
    }
  };
  ParallelFor(call, ext.batch * ext.out_channels, 1, body);
  return KILN_KERR_OK;
}
KILN_KERNEL(qconv) { return RunProduct<QConv>(call); }

}  // namespace kiln_kernels
