/* ONNX's four float8 formats (opset 19) <-> binary32, shared by the kernel library (Cast,
 * QuantizeLinear, DequantizeLinear) and the compiler's tensors (compiler/ir/tensor.cc), so
 * constant folding and kernels round alike. Plain C, header only (the library is freestanding).
 *
 *   format       dtype  exponent bias  largest finite  special values
 *   E4M3FN       17     4 bits   7     448             NaN = S.1111.111, no infinity
 *   E4M3FNUZ     18     4 bits   8     240             NaN = 0x80 (no -0), no infinity
 *   E5M2         19     5 bits  15     57344           IEEE-like: inf S.11111.00, NaN S.11111.xx
 *   E5M2FNUZ     20     5 bits  16     57344           NaN = 0x80 (no -0), no infinity
 *
 * Narrowing rounds to nearest even on the format's grid (subnormals included), then applies
 * ONNX Cast's table: NaN -> NaN; with saturate, +-inf and magnitudes past the largest
 * finite value (after rounding) -> +-largest finite; without, they become infinity (E5M2) or
 * NaN (the others). A zero or a value rounding to zero keeps its sign except in the UZ formats. */
#ifndef KILN_KERNELS_FLOAT8_H_
#define KILN_KERNELS_FLOAT8_H_

#include <stdint.h>
#include <string.h>

typedef struct kiln_float8_format {
  int32_t mantissa_bits, bias;
  uint8_t max_code; /* the largest finite magnitude's bits */
  uint8_t uz;       /* NaN is 0x80, no negative zero */
  uint8_t has_inf;  /* E5M2 only */
} kiln_float8_format;

static inline kiln_float8_format kiln_float8_format_of(int32_t dtype) {
  kiln_float8_format f;
  switch (dtype) {
    case 17: f.mantissa_bits = 3, f.bias = 7, f.max_code = 0x7e, f.uz = 0, f.has_inf = 0; break;
    case 18: f.mantissa_bits = 3, f.bias = 8, f.max_code = 0x7f, f.uz = 1, f.has_inf = 0; break;
    case 19: f.mantissa_bits = 2, f.bias = 15, f.max_code = 0x7b, f.uz = 0, f.has_inf = 1; break;
    default: f.mantissa_bits = 2, f.bias = 16, f.max_code = 0x7f, f.uz = 1, f.has_inf = 0; break;
  }
  return f;
}

/* 2^n as a float, for -126 <= n <= 127. */
static inline float kiln_float8_pow2(int32_t n) {
  const uint32_t bits = (uint32_t)(n + 127) << 23;
  float out;
  memcpy(&out, &bits, 4);
  return out;
}

/* The magnitude bits 0..0x7f decoded (NaN and infinity excluded by the caller). */
static inline float kiln_float8_magnitude(uint32_t code, kiln_float8_format f) {
  const uint32_t exponent = code >> f.mantissa_bits, mantissa = code & ((1u << f.mantissa_bits) - 1u);
  if (exponent == 0) return (float)mantissa * kiln_float8_pow2(1 - f.bias - f.mantissa_bits);
  return (float)((1u << f.mantissa_bits) + mantissa) * kiln_float8_pow2((int32_t)exponent - f.bias - f.mantissa_bits);
}

static inline float kiln_float8_to_float(uint8_t bits, int32_t dtype) {
  const kiln_float8_format f = kiln_float8_format_of(dtype);
  const uint32_t code = bits & 0x7fu;
  const float nan = __builtin_nanf("");
  if (f.uz && bits == 0x80) return nan;
  if (!f.uz && code > f.max_code) {
    if (f.has_inf && code == 0x7c) return bits & 0x80 ? -__builtin_inff() : __builtin_inff();
    return bits & 0x80 ? -nan : nan;
  }
  const float magnitude = kiln_float8_magnitude(code, f);
  return bits & 0x80 ? -magnitude : magnitude;
}

static inline uint8_t kiln_float_to_float8(float value, int32_t dtype, int saturate) {
  const kiln_float8_format f = kiln_float8_format_of(dtype);
  uint32_t x;
  memcpy(&x, &value, 4);
  const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7fffffffu;
  const uint8_t nan = f.uz ? 0x80 : (uint8_t)(sign | 0x7f);
  const uint8_t overflow = saturate ? (uint8_t)(sign | f.max_code) : f.has_inf ? (uint8_t)(sign | 0x7c) : nan;
  if (abs > 0x7f800000u) return nan;
  if (abs == 0x7f800000u) return overflow;
  /* The quantum at x's exponent (the subnormal one below the smallest normal): x / quantum
   * rounded to an integer k (nearest even) is the format's value k * quantum. */
  int32_t exponent = (int32_t)(abs >> 23) - 127;
  if (exponent < 1 - f.bias) exponent = 1 - f.bias;
  const float magnitude = __builtin_fabsf(value);
  const float k = __builtin_rintf(magnitude * kiln_float8_pow2(f.mantissa_bits - exponent));
  const float largest = kiln_float8_magnitude(f.max_code, f);
  if (k * kiln_float8_pow2(exponent - f.mantissa_bits) > largest) return overflow;
  if (k == 0.f) return f.uz ? 0 : sign;
  uint32_t steps = (uint32_t)k;                                        /* 1 .. 2^(mantissa_bits + 1) */
  if (steps < (1u << f.mantissa_bits)) return (uint8_t)(sign | steps); /* subnormal */
  if (steps == (2u << f.mantissa_bits)) steps >>= 1, exponent += 1;    /* carried into the next binade */
  const uint32_t code = ((uint32_t)(exponent + f.bias) << f.mantissa_bits) | (steps - (1u << f.mantissa_bits));
  return (uint8_t)(sign | code);
}

#endif /* KILN_KERNELS_FLOAT8_H_ */
