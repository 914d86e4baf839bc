/* IEEE binary16 (and bfloat16) <-> binary32, shared by the kernel library (Cast) and the compiler's
 * tensors (compiler/ir/tensor.cc), so constant folding and kernels round alike: round to
 * nearest even, overflow to infinity, NaN kept quiet, subnormals exact. Plain C, header
 * only (the kernel library is freestanding). */
#ifndef KILN_KERNELS_FP16_H_
#define KILN_KERNELS_FP16_H_

#include <stdint.h>
#include <string.h>

static inline uint16_t kiln_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return (uint16_t)(sign);
    uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    int shift = 126 - (int)(abs >> 23); /* the value is mantissa * 2^-shift units of 2^-24 */
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t half = (abs >> 13) - ((127 - 15) << 10);
  uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return (uint16_t)(sign | half);
}

/* kiln_half_to_float(kiln_float_to_half(f)) without branches, so that loops of it vectorize
 * (kiln.RoundToFloat16): the low 13 mantissa bits rounded to nearest even in the normal
 * range, multiples of 2^-24 below it, infinity past the largest half, NaN kept (checked
 * against the round trip on every float). */
static inline float kiln_round_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t abs = x & 0x7fffffffu;
  uint32_t normal_bits = (x + 0xfffu + ((x >> 13) & 1u)) & ~0x1fffu;
  const uint32_t infinity_bits = (x & 0x80000000u) | 0x7f800000u;
  normal_bits = abs >= 0x477ff000u ? (abs > 0x7f800000u ? x : infinity_bits) : normal_bits;
  float normal;
  memcpy(&normal, &normal_bits, 4);
  /* below 2^-14 the sum's unit in the last place is 2^-24: the add rounds to nearest even */
  const float subnormal = __builtin_copysignf((__builtin_fabsf(f) + 0.5f) - 0.5f, f);
  return abs < 0x38800000u ? subnormal : normal;
}

static inline float kiln_half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* bfloat16 (the high half of a binary32) <-> binary32. Narrowing rounds to nearest even, as
 * the ONNX specification and ONNX Runtime do (ONNX 1.12's node tests truncated: the four
 * FLOAT to BFLOAT16 cases are documented deviations, tests/conformance/deviations.txt); a
 * NaN stays a quiet NaN, a value past the largest bfloat16 rounds to infinity. */
static inline uint16_t kiln_float_to_bfloat16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static inline float kiln_bfloat16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

#endif /* KILN_KERNELS_FP16_H_ */
