// Vectorizable float approximations for the kernels' hot loops (libm's expf is a call
// LLVM cannot vectorize). Plain C++ on float and int bits: a loop calling these
// vectorizes for whatever vector width the target has.
//
// FastExp: exp(x) = 2^n * exp(r) with n = round(x / ln 2) and r = x - n ln 2 (ln 2 split in
// two parts, Cody-Waite), exp(r) on [-ln2/2, ln2/2] by the degree-6 minimax polynomial of
// Cephes' expf. Measured against libm over [-87, 88.72] every 2^-12
// (tests/unit/fast_math_test.cc, which requires < 2 ulp): max relative error 8.1e-8, under
// one ulp. Below -87.3 it returns exp(-87.3) ~ 1.2e-38 (not a denormal or 0); above
// ln(FLT_MAX) ~ 88.7228, inf; NaN stays NaN.
#pragma once

#include <stdint.h>
#include <string.h>

namespace kiln_kernels {

inline float FastExp(float x) {
  // The clamps keep n in [-126, 128]; n = 128 has no exponent field of its own, so it is
  // applied as 2^127 * 2, and results past FLT_MAX overflow to inf as expf's do.
  const float clamped = x < -87.3f ? -87.3f : (x > 88.7228f ? 88.7228f : x);
  const float n = __builtin_rintf(clamped * 1.44269504088896341f);
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t exponent = static_cast<int32_t>(n);
  const int32_t bits = ((exponent > 127 ? 127 : exponent) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  const float result = y * scale * (exponent > 127 ? 2.0f : 1.0f);
  return x != x ? x : (x > 88.7228f ? __builtin_inff() : result);
}

// 1 / (1 + exp(-x)), from exp(-|x|) so neither side loses accuracy; same error as FastExp
// plus one division.
inline float FastSigmoid(float x) {
  const float e = FastExp(x < 0 ? x : -x);
  const float s = 1.0f / (1.0f + e);
  return x >= 0 ? s : e * s;
}

}  // namespace kiln_kernels
