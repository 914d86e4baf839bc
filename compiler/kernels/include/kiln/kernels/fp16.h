/* IEEE binary16 (and bfloat16) <-> binary32, shared by the kernel library (Cast) and the compiler's
 * tensors (compiler/ir/tensor.cc), so constant folding and kernels round alike: round to
 * nearest even, overflow to infinity, NaN kept quiet, subnormals exact. Plain C, header
 * only (the kernel library is freestanding). */
#ifndef KILN_KERNELS_FP16_H_
#define KILN_KERNELS_FP16_H_

#include <stdint.h>
#include <string.h>

/* kiln_float_to_half's rounding without the conversion: the low 13 mantissa bits rounded to
 * nearest even in the normal range, multiples of 2^-24 below it, infinity past the largest
 * half, NaN kept. Branch-free (selects only), so that loops of it vectorize. */
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

/* binary32 -> binary16: kiln_round_to_half, then the rounded value's bits (a subnormal half
 * is its multiple of 2^-24, a NaN a quiet NaN). Branch-free, as the Cast loops want. */
static inline uint16_t kiln_float_to_half(float f) {
  const float r = kiln_round_to_half(f);
  uint32_t x;
  memcpy(&x, &r, 4);
  const uint32_t abs = x & 0x7fffffffu;
  const uint32_t special = 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  const uint32_t normal = (abs >> 13) - ((127u - 15u) << 10);
  const uint32_t subnormal = (uint32_t)(__builtin_fabsf(r) * 16777216.0f);
  const uint32_t magnitude = abs >= 0x7f800000u ? special : (abs >= 0x38800000u ? normal : subnormal);
  return (uint16_t)(((x >> 16) & 0x8000u) | magnitude);
}

/* binary16 -> binary32, exact; branch-free (a subnormal half is its mantissa times 2^-24). */
static inline float kiln_half_to_float(uint16_t h) {
  const uint32_t exponent = h & 0x7c00u;
  const uint32_t rest = (uint32_t)(h & 0x7fffu) << 13;
  const float subnormal = (float)(h & 0x3ffu) * (1.0f / 16777216.0f);
  uint32_t subnormal_bits;
  memcpy(&subnormal_bits, &subnormal, 4);
  const uint32_t bits = exponent == 0x7c00u ? (rest | 0x7f800000u)
                        : exponent == 0     ? subnormal_bits
                                            : rest + ((127u - 15u) << 23);
  const uint32_t with_sign = bits | ((uint32_t)(h & 0x8000u) << 16);
  float out;
  memcpy(&out, &with_sign, 4);
  return out;
}

/* bfloat16 (the high half of a binary32) <-> binary32. Narrowing rounds to nearest even, as
 * the ONNX specification and ONNX Runtime do (ONNX 1.12's node tests truncated: the four
 * FLOAT to BFLOAT16 cases are documented deviations, tests/conformance/deviations.txt); a
 * NaN stays a quiet NaN, a value past the largest bfloat16 rounds to infinity. */
static inline uint16_t kiln_float_to_bfloat16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t quiet_nan = ((x >> 16) & 0x8000u) | 0x7fc0u;
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded); /* a select: loops vectorize */
}

static inline float kiln_bfloat16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

#endif /* KILN_KERNELS_FP16_H_ */
