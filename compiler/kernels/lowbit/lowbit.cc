// The float8 and 4-bit integer kernels (ONNX opsets 19 and 21): Cast into and out of them,
// and QuantizeLinear / DequantizeLinear with their wider output types (float8, int4, uint4,
// int16, uint16) and blocked scales. Element by element through float or int64: the types
// are small and these ops run at model edges, so the loops stay plain.
#include "kiln/kernels/lowbit.h"
#include "kernel_common.h"
#include "kiln/kernels/float8.h"
#include "kiln/kernels/fp16.h"

namespace kiln_kernels {
namespace {

bool IsFloat8(int32_t dtype) { return dtype >= kF8E4M3FN && dtype <= kF8E5M2FNUZ; }
bool IsFloatType(int32_t dtype) {
  return dtype == kF32 || dtype == kF64 || dtype == kF16 || dtype == kBF16 || IsFloat8(dtype);
}

// Element i of any numeric tensor as double (exact for every type here but u64/i64 past 2^53).
double Load(const kiln_ktensor& t, int64_t i) {
  switch (t.dtype) {
    case kF16: return kiln_half_to_float(static_cast<const uint16_t*>(t.data)[i]);
    case kBF16: return kiln_bfloat16_to_float(static_cast<const uint16_t*>(t.data)[i]);
    case kI4: return static_cast<const int8_t*>(t.data)[i];
    case kU4: return static_cast<const uint8_t*>(t.data)[i];
    default:
      if (IsFloat8(t.dtype)) return kiln_float8_to_float(static_cast<const uint8_t*>(t.data)[i], t.dtype);
      return LoadAsDouble(t.data, t.dtype, i);
  }
}

// A float made an integer as ONNX's Cast does (toward zero); NaN, infinities and values
// past int64 become 0, so the result is defined.
int64_t FloatToInt(double v) { return v == v && v > -9.2e18 && v < 9.2e18 ? static_cast<int64_t>(v) : 0; }

// The low 4 bits of v, sign-extended for int4 (ONNX: 4-bit casts round, then truncate).
int8_t Wrap4(int64_t v, bool is_signed) {
  const int nibble = static_cast<int>(v & 0xf);
  return static_cast<int8_t>(is_signed && nibble >= 8 ? nibble - 16 : nibble);
}

template <typename T>
void Put(void* data, int64_t i, T v) {
  static_cast<T*>(data)[i] = v;
}

// Stores v (read from a float type when from_float) at element i of `out` as Cast does.
int32_t Store(const kiln_ktensor& out, int64_t i, double v, bool from_float, int saturate) {
  if (IsFloat8(out.dtype)) {
    Put<uint8_t>(out.data, i, kiln_float_to_float8(static_cast<float>(v), out.dtype, saturate));
    return KILN_KERR_OK;
  }
  const int64_t n =
      from_float ? FloatToInt(out.dtype == kI4 || out.dtype == kU4 ? __builtin_rint(v) : v) : static_cast<int64_t>(v);
  switch (out.dtype) {
    case kF32: Put<float>(out.data, i, static_cast<float>(v)); break;
    case kF64: Put<double>(out.data, i, v); break;
    case kF16: Put<uint16_t>(out.data, i, kiln_float_to_half(static_cast<float>(v))); break;
    case kBF16: Put<uint16_t>(out.data, i, kiln_float_to_bfloat16(static_cast<float>(v))); break;
    case kBool: Put<uint8_t>(out.data, i, v != 0 ? 1 : 0); break;
    case kI4: Put<int8_t>(out.data, i, Wrap4(n, true)); break;
    case kU4: Put<uint8_t>(out.data, i, static_cast<uint8_t>(Wrap4(n, false))); break;
    case kI8: Put<int8_t>(out.data, i, static_cast<int8_t>(n)); break;
    case kU8: Put<uint8_t>(out.data, i, static_cast<uint8_t>(n)); break;
    case kI16: Put<int16_t>(out.data, i, static_cast<int16_t>(n)); break;
    case kU16: Put<uint16_t>(out.data, i, static_cast<uint16_t>(n)); break;
    case kI32: Put<int32_t>(out.data, i, static_cast<int32_t>(n)); break;
    case kU32: Put<uint32_t>(out.data, i, static_cast<uint32_t>(n)); break;
    case kI64: Put<int64_t>(out.data, i, n); break;
    case kU64: Put<uint64_t>(out.data, i, static_cast<uint64_t>(n)); break;
    default: return KILN_KERR_DTYPE;
  }
  return KILN_KERR_OK;
}

// The integer range a quantized type saturates to.
bool QuantRange(int32_t dtype, double* lo, double* hi) {
  switch (dtype) {
    case kU8: *lo = 0, *hi = 255; return true;
    case kI8: *lo = -128, *hi = 127; return true;
    case kU16: *lo = 0, *hi = 65535; return true;
    case kI16: *lo = -32768, *hi = 32767; return true;
    case kU4: *lo = 0, *hi = 15; return true;
    case kI4: *lo = -8, *hi = 7; return true;
    case kI32: *lo = -2147483648.0, *hi = 2147483647.0; return true;
    default: return false;
  }
}

// The scale (and zero point) element for element (o, c, i) of X as [outer, channels, inner].
int64_t ScaleIndex(const kiln_lowbit_params& p, const kiln_ktensor& scale, int64_t o, int64_t c, int64_t i) {
  if (p.block_size > 0) {
    const int64_t blocks = (p.channels + p.block_size - 1) / p.block_size;
    return (o * blocks + c / p.block_size) * p.inner + i;
  }
  return Numel(scale) > 1 ? c : 0;
}

}  // namespace

// Cast / CastLike where either side is float8, int4 or uint4. Parameters: saturate.
KILN_KERNEL(cast_lowbit) {
  KILN_PARAMS(kiln_lowbit_params, params, call);
  const kiln_ktensor& in = call->inputs[0];
  const kiln_ktensor& out = call->outputs[0];
  const bool from_float = IsFloatType(in.dtype);
  const int saturate = static_cast<int>(params.saturate);
  const int64_t n = Numel(out);
  if (n == 0) return KILN_KERR_OK;
  // element 0 first: it tells an element type Store does not write (then nothing else runs)
  const int32_t rc = Store(out, 0, Load(in, 0), from_float, saturate);
  if (rc != KILN_KERR_OK) return rc;
  ParallelFor(call, n - 1, 16384, [=, &in, &out](int64_t begin, int64_t end) {
    for (int64_t i = begin + 1; i < end + 1; ++i) Store(out, i, Load(in, i), from_float, saturate);
  });
  return KILN_KERR_OK;
}

// QuantizeLinear into any quantized type: inputs X (f32), scale (f32), zero point (optional,
// Y's type). Integers: y = saturate(rint(x / scale) + zero_point); float8: y = x / scale +
// zero_point rounded into the format (saturate as the parameter says).
KILN_KERNEL(quantize_lowbit) {
  KILN_PARAMS(kiln_lowbit_params, params, call);
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& scale = call->inputs[1];
  const kiln_ktensor* zp = call->num_inputs > 2 && call->inputs[2].data != nullptr ? &call->inputs[2] : nullptr;
  const kiln_ktensor& Y = call->outputs[0];
  double lo = 0, hi = 0;
  const bool integer = QuantRange(Y.dtype, &lo, &hi);
  if (X.dtype != kF32 || scale.dtype != kF32 || !(integer || IsFloat8(Y.dtype))) return KILN_KERR_DTYPE;
  const float* x = static_cast<const float*>(X.data);
  const float* s = static_cast<const float*>(scale.data);
  const int saturate = static_cast<int>(params.saturate);
  // rows (o, c) of `inner` elements, shared among the pool's threads
  ParallelFor(call, params.outer * params.channels, 64, [=, &params, &scale, &Y](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row / params.channels, c = row % params.channels;
      for (int64_t i = 0, e = row * params.inner; i < params.inner; ++i, ++e) {
        const int64_t k = ScaleIndex(params, scale, o, c, i);
        const float z = zp != nullptr ? static_cast<float>(Load(*zp, k)) : 0.f;
        const float v = x[e] / s[k];
        if (integer) {
          const float q = __builtin_rintf(v) + z;
          Store(Y, e, q < lo ? lo : q > hi ? hi : q, false, 0);
        } else {
          Put<uint8_t>(Y.data, e, kiln_float_to_float8(v + z, Y.dtype, saturate));
        }
      }
    }
  });
  return KILN_KERR_OK;
}

// DequantizeLinear from any quantized type (and int32): inputs X, scale (f32), zero point
// (optional, X's type). y = (x - zero_point) * scale, in f32.
KILN_KERNEL(dequantize_lowbit) {
  KILN_PARAMS(kiln_lowbit_params, params, call);
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& scale = call->inputs[1];
  const kiln_ktensor* zp = call->num_inputs > 2 && call->inputs[2].data != nullptr ? &call->inputs[2] : nullptr;
  const kiln_ktensor& Y = call->outputs[0];
  double lo = 0, hi = 0;
  if (Y.dtype != kF32 || scale.dtype != kF32 || !(QuantRange(X.dtype, &lo, &hi) || IsFloat8(X.dtype))) {
    return KILN_KERR_DTYPE;
  }
  const float* s = static_cast<const float*>(scale.data);
  float* y = static_cast<float*>(Y.data);
  const bool integer = !IsFloat8(X.dtype);
  ParallelFor(call, params.outer * params.channels, 64, [=, &params, &scale, &X](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row / params.channels, c = row % params.channels;
      for (int64_t i = 0, e = row * params.inner; i < params.inner; ++i, ++e) {
        const int64_t k = ScaleIndex(params, scale, o, c, i);
        const double z = zp != nullptr ? Load(*zp, k) : 0.0;
        // integers: the difference is exact in int64, then made float once
        const float d = integer ? static_cast<float>(static_cast<int64_t>(Load(X, e)) - static_cast<int64_t>(z))
                                : static_cast<float>(Load(X, e)) - static_cast<float>(z);
        y[e] = d * s[k];
      }
    }
  });
  return KILN_KERR_OK;
}

}  // namespace kiln_kernels
