// Quantized ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer
// products behind MatMulInteger/QLinearMatMul and ConvInteger/QLinearConv.
//
// Requantization, one rule for every kernel here and for the fast paths to come: the int32
// sum S (bias included) becomes saturate(rint(float(S) * m) + y_zero_point) with the f32
// multiplier m = (x_scale * w_scale) / y_scale, rounded to nearest, ties to even. ONNX's
// numpy reference multiplies in double; f32 is what integer kernels (MLAS, XNNPACK) do and
// differs only where |S| > 2^24 or a product lands within an f32 ulp of a tie.
#include "kernel_common.h"
#include "kernel_window.h"

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

}  // namespace

// QuantizeLinear: inputs X (f32), scale (f32, one or per channel), zero point (optional,
// u8 or i8; the output's type). ints: [outer, channels, inner] (X as [outer, channels,
// inner], channels along the op's axis). y = saturate(rint(x / scale) + zero_point).
KILN_KERNEL(quantize_linear) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& scale = call->inputs[1];
  const kiln_ktensor& zp = call->inputs[2];
  const kiln_ktensor& Y = call->outputs[0];
  if (X.dtype != kF32 || scale.dtype != kF32 || !IsQuantizedType(Y.dtype)) return KILN_KERR_DTYPE;
  const int64_t outer = call->ints[0], channels = call->ints[1], inner = call->ints[2];
  const float* x = static_cast<const float*>(X.data);
  const float* s = static_cast<const float*>(scale.data);
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {  // row = (o, c)
      const int64_t c = row % channels;
      const float sc = s[PerChannel(scale, c)];
      const float z = zp.data != nullptr ? static_cast<float>(LoadInt(zp.data, zp.dtype, PerChannel(zp, c))) : 0.f;
      const float* xr = x + row * inner;
      for (int64_t i = 0; i < inner; ++i) StoreSaturated(Y.data, Y.dtype, row * inner + i, rintf(xr[i] / sc) + z);
    }
  };
  ParallelFor(call, outer * channels, 1, body);
  return KILN_KERR_OK;
}

// DequantizeLinear: inputs X (u8, i8 or i32), scale (f32), zero point (optional, X's
// type). ints as quantize_linear. y = float(x - zero_point) * scale.
KILN_KERNEL(dequantize_linear) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& scale = call->inputs[1];
  const kiln_ktensor& zp = call->inputs[2];
  const kiln_ktensor& Y = call->outputs[0];
  if (Y.dtype != kF32 || scale.dtype != kF32 || !(IsQuantizedType(X.dtype) || X.dtype == kI32)) return KILN_KERR_DTYPE;
  const int64_t outer = call->ints[0], channels = call->ints[1], inner = call->ints[2];
  const float* s = static_cast<const float*>(scale.data);
  float* y = static_cast<float*>(Y.data);
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row % channels;
      const float sc = s[PerChannel(scale, c)];
      const int32_t z = zp.data != nullptr ? LoadInt(zp.data, zp.dtype, PerChannel(zp, c)) : 0;
      for (int64_t i = row * inner; i < (row + 1) * inner; ++i) {
        y[i] = static_cast<float>(LoadInt(X.data, X.dtype, i) - z) * sc;
      }
    }
  };
  ParallelFor(call, outer * channels, 1, body);
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
  uint8_t* y = static_cast<uint8_t*>(call->outputs[0].data);
  for (int64_t i = 0; i < n; ++i) {
    float v = scale > 0.f ? rintf(x[i] / scale) + zero : 0.f;
    y[i] = static_cast<uint8_t>(v < 0.f ? 0.f : (v > 255.f ? 255.f : v));
  }
  *static_cast<float*>(call->outputs[1].data) = scale;
  *static_cast<uint8_t*>(call->outputs[2].data) = static_cast<uint8_t>(zero);
  return KILN_KERR_OK;
}

// The integer product of MatMulInteger and QLinearMatMul. inputs: A, B (u8 or i8), A's
// zero point (one, or one per row of A), B's (one, or one per column), then for the
// requantized form A's scale (per row or one), B's scale (per column or one), Y's scale
// and zero point (Y's type). ints: [M, K, N, batch_rank, out_batch_dims[batch_rank],
// a_batch_strides[batch_rank], b_batch_strides[batch_rank], requantize] (strides in
// elements, 0 where broadcast). Y is int32 unless requantize.
KILN_KERNEL(qmatmul) {
  const kiln_ktensor& A = call->inputs[0];
  const kiln_ktensor& B = call->inputs[1];
  const kiln_ktensor& Y = call->outputs[0];
  if (!IsQuantizedType(A.dtype) || !IsQuantizedType(B.dtype)) return KILN_KERR_DTYPE;
  const int64_t M = call->ints[0], K = call->ints[1], N = call->ints[2];
  const int64_t batch_rank = call->ints[3];
  const int64_t* batch_dims = call->ints + 4;
  const int64_t* a_strides = batch_dims + batch_rank;
  const int64_t* b_strides = a_strides + batch_rank;
  const bool requantize = b_strides[batch_rank] != 0;
  if (requantize ? !IsQuantizedType(Y.dtype) : Y.dtype != kI32) return KILN_KERR_DTYPE;
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
          sum += (LoadInt(A.data, A.dtype, a_off + m * K + k) - za) * (LoadInt(B.data, B.dtype, b_off + k * N + n) - zb);
        }
        const int64_t at = row * N + n;
        if (!requantize) {
          static_cast<int32_t*>(Y.data)[at] = sum;
          continue;
        }
        const float* as = static_cast<const float*>(call->inputs[4].data);
        const float* bs = static_cast<const float*>(call->inputs[5].data);
        const float ys = *static_cast<const float*>(call->inputs[6].data);
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

// The integer convolution of ConvInteger and QLinearConv. inputs: X, W (u8 or i8), X's
// zero point (one), W's (one, or one per output channel), then for the requantized form
// X's scale (one), W's scale (one or per output channel), Y's scale and zero point, and
// an optional int32 bias [OC] (added to the sum before requantizing). ints: [group,
// window block, requantize]. Y is int32 unless requantize. Taps in the padding read X's
// zero point, i.e. contribute 0.
KILN_KERNEL(qconv) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& W = call->inputs[1];
  const kiln_ktensor& Y = call->outputs[0];
  if (!IsQuantizedType(X.dtype) || !IsQuantizedType(W.dtype)) return KILN_KERR_DTYPE;
  const int64_t group = call->ints[0];
  Window w;
  const int64_t* rest = w.Load(call->ints + 1, X, Y);
  const bool requantize = rest[0] != 0;
  if (requantize ? !IsQuantizedType(Y.dtype) : Y.dtype != kI32) return KILN_KERR_DTYPE;
  const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t icg = in_channels / group, ocg = out_channels / group;
  const int64_t in_size = w.in_size(), out_size = w.out_size(), kernel_size = w.kernel_size();
  const kiln_ktensor& xzp = call->inputs[2];
  const kiln_ktensor& wzp = call->inputs[3];
  const int32_t zx = xzp.data != nullptr ? LoadInt(xzp.data, xzp.dtype, 0) : 0;
  const int32_t* bias = requantize && call->num_inputs > 8 ? static_cast<const int32_t*>(call->inputs[8].data) : nullptr;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {  // job = (n, oc)
      const int64_t n = job / out_channels, oc = job % out_channels, g = oc / ocg;
      const int32_t zw = wzp.data != nullptr ? LoadInt(wzp.data, wzp.dtype, PerChannel(wzp, oc)) : 0;
      float multiplier = 0.f, z = 0.f;
      if (requantize) {
        const float xs = *static_cast<const float*>(call->inputs[4].data);
        const float ws = static_cast<const float*>(call->inputs[5].data)[PerChannel(call->inputs[5], oc)];
        multiplier = xs * ws / *static_cast<const float*>(call->inputs[6].data);
        z = call->inputs[7].data != nullptr ? static_cast<float>(LoadInt(call->inputs[7].data, call->inputs[7].dtype, 0)) : 0.f;
      }
      for (int64_t od = 0; od < w.out[0]; ++od) {
        for (int64_t oh = 0; oh < w.out[1]; ++oh) {
          for (int64_t ow = 0; ow < w.out[2]; ++ow) {
            int32_t sum = bias != nullptr ? bias[oc] : 0;
            for (int64_t ic = 0; ic < icg; ++ic) {
              const int64_t x_base = (n * in_channels + g * icg + ic) * in_size;
              const int64_t w_base = (oc * icg + ic) * kernel_size;
              for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
                const int64_t id = od * w.stride[0] + kd * w.dilation[0] - w.pad[0];
                if (id < 0 || id >= w.in[0]) continue;
                for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
                  const int64_t ih = oh * w.stride[1] + kh * w.dilation[1] - w.pad[1];
                  if (ih < 0 || ih >= w.in[1]) continue;
                  for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                    const int64_t iw = ow * w.stride[2] + kw * w.dilation[2] - w.pad[2];
                    if (iw < 0 || iw >= w.in[2]) continue;
                    const int32_t xv = LoadInt(X.data, X.dtype, x_base + (id * w.in[1] + ih) * w.in[2] + iw) - zx;
                    const int32_t wv = LoadInt(W.data, W.dtype, w_base + (kd * w.kernel[1] + kh) * w.kernel[2] + kw) - zw;
                    sum += xv * wv;
                  }
                }
              }
            }
            const int64_t at = job * out_size + (od * w.out[1] + oh) * w.out[2] + ow;
            if (requantize) {
              StoreSaturated(Y.data, Y.dtype, at, rintf(static_cast<float>(sum) * multiplier) + z);
            } else {
              static_cast<int32_t*>(Y.data)[at] = sum;
            }
          }
        }
      }
    }
  };
  ParallelFor(call, batch * out_channels, 1, body);
  return KILN_KERR_OK;
}

}  // namespace kiln_kernels
