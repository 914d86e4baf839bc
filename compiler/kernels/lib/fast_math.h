// Vectorizable float approximations for the kernels' hot loops (libm's expf is a call
// LLVM cannot vectorize). Plain C++ on float and int bits: a loop calling these
// vectorizes for whatever vector width the target has.
//
// FastExp: exp(x) = 2^n * exp(r) with n = round(x / ln 2) and r = x - n ln 2 (ln 2 split in
// two parts, Cody-Waite), exp(r) on [-ln2/2, ln2/2] by the degree-6 minimax polynomial of
// Cephes' expf. Measured against libm over [-87, 88] every 2^-12
// (tests/unit/fast_math_test.cc, which requires < 2 ulp): max relative error 8.2e-8, under
// one ulp. Below -87.3 it returns exp(-87.3) ~ 1.2e-38 (not a denormal or 0); above 88.3,
// exp(88.3); NaN stays NaN.
#pragma once

#include <stdint.h>
#include <string.h>

namespace kiln_kernels {

inline float FastExp(float x) {
  const float clamped = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
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
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  const float result = y * scale;
  return x != x ? x : result;
}

}  // namespace kiln_kernels
