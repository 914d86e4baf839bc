// Vectorizable float approximations for the kernels' hot loops (libm's expf is a call
// LLVM cannot vectorize). Plain C++ on float and int bits: a loop calling these
// vectorizes for whatever vector width the target has.
//
// FastExp: exp(x) = 2^n * exp(r) with n = round(x / ln 2) and r = x - n ln 2 (ln 2 split in
// two parts, Cody-Waite), exp(r) on [-ln2/2, ln2/2] by the degree-6 minimax polynomial of
// Cephes' expf. Measured against libm over [-87, 88.72] every 2^-12
// (tests/unit/fast_math_test.cc, which requires < 2 ulp): max relative error 8.1e-8, under
// one ulp. Below -87.3 it returns exp(-87.3) ~ 1.2e-38 (not a denormal or 0); above
// ln(FLT_MAX) ~ 88.7228, inf; NaN stays NaN. FastSigmoid, FastErf and FastTanh build on it
// (errors stated at each).
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>  // header-only

// In artifacts (clang) the polynomials may fuse multiply-adds into FMAs (a fifth faster
// for SiLU epilogues). CodegenTest.ArtifactFastMathMatchesLibm measures the artifact's
// functions against libm on dense sweeps (with FMA, this AVX2 machine: exp 7.5e-8 relative,
// sigmoid 1.6e-7 relative, erf 1.1e-7 absolute); fast_math_test measures the unfused form.
#ifdef __clang__
#define KILN_FAST_MATH_CONTRACT _Pragma("clang fp contract(fast)")
#else
#define KILN_FAST_MATH_CONTRACT
#endif

// The functions below are forced inline: a loop over one of them vectorizes only when
// the call is gone, and LLVM's inliner declined FastErf and FastGelu by size, so GELU
// epilogues ran a scalar call per element (2 ns per element on this Zen 4; 0.3 inlined).
#define KILN_FAST_MATH_INLINE inline __attribute__((always_inline))

namespace kiln_kernels {

// Eight floats (or int32s) in one generic vector: AVX's width; LLVM splits it for SSE and
// keeps it for AVX-512. The kernels' vector type (gemm_core.h, the depthwise and softmax
// kernels use it too). Passed by reference, and loaded, stored and broadcast by macros
// rather than functions: GCC warns about the ABI of vector arguments and returns when
// building for a target without AVX.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
// Unaligned 8-lane loads and stores, and eight copies of x.
#define KILN_LOAD8(dst, src) memcpy(&(dst), (src), sizeof(::kiln_kernels::v8f))
#define KILN_STORE8(dst, src) memcpy((dst), &(src), sizeof(::kiln_kernels::v8f))
#define KILN_SPLAT8(x) (::kiln_kernels::v8f{x, x, x, x, x, x, x, x})
// Sixteen floats: one AVX-512 register, used only where the target has them
// (WideVectors(), kernel_common.h): the GEMM's wide tile, 16-channel depthwise blocks.
typedef float v16f __attribute__((vector_size(64)));
#define KILN_SPLAT16(x) (::kiln_kernels::v16f{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x})
// dst = x in every lane, for dst of type V (a template parameter), v8f or v16f.
#define KILN_SPLAT_V(V, dst, x)                                \
  do {                                                         \
    if constexpr (sizeof(V) == sizeof(::kiln_kernels::v16f)) { \
      (dst) = KILN_SPLAT16(x);                                 \
    } else {                                                   \
      (dst) = KILN_SPLAT8(x);                                  \
    }                                                          \
  } while (0)

// exp(x) given n = round(x / ln 2), the step every form below shares: x reduced to
// r = x - n ln 2 (ln 2 in two parts, Cody-Waite), then exp(r) on [-ln2/2, ln2/2] by the
// degree-6 minimax polynomial of Cephes' expf; the caller scales by 2^n. T: float or v8f
// (by reference, as v8f must be).
template <typename T>
KILN_FAST_MATH_INLINE void ExpReduced(const T& x, const T& n, T& y) {
  KILN_FAST_MATH_CONTRACT
  T r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  T p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  y = p * r * r + r + 1.0f;
}

KILN_FAST_MATH_INLINE float FastExp(float x) {
  KILN_FAST_MATH_CONTRACT
  // The clamps keep n in [-126, 128]; n = 128 has no exponent field of its own, so it is
  // applied as 2^127 * 2, and results past FLT_MAX overflow to inf as expf's do.
  const float clamped = x < -87.3f ? -87.3f : (x > 88.7228f ? 88.7228f : x);
  const float n = __builtin_rintf(clamped * 1.44269504088896341f);
  float y;
  ExpReduced(clamped, n, y);
  const int32_t exponent = static_cast<int32_t>(n);
  const int32_t bits = ((exponent > 127 ? 127 : exponent) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  const float result = y * scale * (exponent > 127 ? 2.0f : 1.0f);
  return x != x ? x : (x > 88.7228f ? __builtin_inff() : result);
}

// exp(a) for a <= 0 (or NaN): FastExp's steps on an argument that cannot overflow, so none
// of its overflow handling is needed, and 2^n is built from the bits of the rounding sum
// itself (its low mantissa bits hold n) rather than by converting n to an integer. NaN
// needs no branch: it stays NaN through every step. For sigmoid's exp(-|x|) and erfc's
// exp(-x^2): 35 instructions per 8 lanes for a vectorized SiLU instead of 48 (a SiLU over
// 100 000 floats in L2: 0.96 -> 0.63 ns per element on this machine).
KILN_FAST_MATH_INLINE float FastExpNonPositive(float a) {
  KILN_FAST_MATH_CONTRACT
  a = a < -87.3f ? -87.3f : a;
  // a / ln 2 + 1.5 * 2^23 rounds a / ln 2 to the nearest integer n in [-126, 0], which
  // lands in the low mantissa bits of the sum (0x4B400000 + n).
  const float shifted = a * 1.44269504088896341f + 12582912.f;
  const float n = shifted - 12582912.f;
  float y;
  ExpReduced(a, n, y);
  // (0x4B400000 + n) << 23 is n << 23 (the constant's bits shift out); + 127 << 23 makes
  // it the float 2^n.
  uint32_t scale_bits;
  memcpy(&scale_bits, &shifted, sizeof(scale_bits));
  scale_bits = (scale_bits << 23) + (127u << 23);
  float scale;
  memcpy(&scale, &scale_bits, sizeof(scale));
  return y * scale;
}

// FastExpNonPositive on a vector V (v8f, or v16f where the target has AVX-512), for loops
// the vectorizer leaves alone: Softmax rows after their maximum is subtracted (ViT-S/16's
// rows of 197 at batch 8: 1.4 -> 0.8 ms a layer, with FastExp's overflow handling and 8 lanes).
typedef int32_t v16i __attribute__((vector_size(64)));
template <typename V>
KILN_FAST_MATH_INLINE void FastExpNonPositiveV(V& v) {
  KILN_FAST_MATH_CONTRACT
  using I = std::conditional_t<sizeof(V) == sizeof(v16i), v16i, v8i>;
  V lo, shifter;
  KILN_SPLAT_V(V, lo, -87.3f);
  KILN_SPLAT_V(V, shifter, 12582912.f);
  const V a = v < lo ? lo : v;
  const V shifted = a * 1.44269504088896341f + shifter;
  const V n = shifted - shifter;
  V y;
  ExpReduced(a, n, y);
  const I scale = ((I)shifted << 23) + (127 << 23);
  v = y * (V)scale;
}

// 1 / (1 + exp(-x)), from e = exp(-|x|) so neither side loses accuracy: s = 1 / (1 + e)
// for x >= 0, e * s below. Same error as FastExp plus one division.
KILN_FAST_MATH_INLINE float FastSigmoid(float x) {
  KILN_FAST_MATH_CONTRACT
  uint32_t bits;
  memcpy(&bits, &x, sizeof(bits));
  bits |= 0x80000000u;  // -|x|
  float minus_abs;
  memcpy(&minus_abs, &bits, sizeof(minus_abs));
  const float e = FastExpNonPositive(minus_abs);
  const float s = 1.0f / (1.0f + e);
  return x >= 0 ? s : e * s;
}

// erf(x) / x for |x| <= 1 as T(z), z = x^2: the degree-6 polynomial of Cephes' erff.
KILN_FAST_MATH_INLINE float ErfOverX(float z) {
  KILN_FAST_MATH_CONTRACT
  float t = 7.853861353153693e-5f;
  t = t * z - 8.010193625184903e-4f;
  t = t * z + 5.188327685732524e-3f;
  t = t * z - 2.685381193529856e-2f;
  t = t * z + 1.128358514861418e-1f;
  t = t * z - 3.761262582423300e-1f;
  t = t * z + 1.128379165726710e+0f;
  return t;
}

// erf(x), branch-free so loops over it vectorize (GELU). |x| <= 1: x * T(x^2), the degree-6
// polynomial of Cephes' erff; |x| > 1: 1 - erfc(|x|) with erfc(x) = exp(-x^2)/x * P(1/x^2)
// (Cephes' erfcf polynomials for x < 2 and x >= 2), sign restored; |x| >= 4 is +-1 (erfc
// is below half an ulp of 1 there). Both branches are evaluated and one is selected.
// Measured against libm's erf over [-6, 6] every 2^-12 (tests/unit/fast_math_test.cc):
// absolute error 1.3e-7, relative error on |x| <= 1 1.7e-7 (under 2 ulp).
KILN_FAST_MATH_INLINE float FastErf(float x) {
  KILN_FAST_MATH_CONTRACT
  const float a = x < 0 ? -x : x;
  const float z = a * a;
  const float small = a * ErfOverX(z);  // small arguments
  // Large arguments: erfc(a) = exp(-a^2) / a * poly(1 / a^2), with one division.
  const float aa = a > 1.0f ? (a < 4.0f ? a : 4.0f) : 1.0f;  // keeps the unused branch finite
  const float inverse = 1.0f / aa;
  const float y = inverse * inverse;
  float p;
  if (aa < 2.0f) {
    p = 2.326819970068386e-2f;
    p = p * y - 1.387039388740657e-1f;
    p = p * y + 3.687424674597105e-1f;
    p = p * y - 5.824733027278666e-1f;
    p = p * y + 6.210004621745983e-1f;
    p = p * y - 4.944515323274145e-1f;
    p = p * y + 3.404879937665872e-1f;
    p = p * y - 2.741127028184656e-1f;
    p = p * y + 5.638259427386472e-1f;
  } else {
    p = -1.047766399936249e+1f;
    p = p * y + 1.297719955372516e+1f;
    p = p * y - 7.495518717768503e+0f;
    p = p * y + 2.921019019210786e+0f;
    p = p * y - 1.015265279202700e+0f;
    p = p * y + 4.218463358204948e-1f;
    p = p * y - 2.820767439740514e-1f;
    p = p * y + 5.641895067754075e-1f;
  }
  const float erfc = FastExpNonPositive(-aa * aa) * inverse * p;
  const float large = a >= 4.0f ? 1.0f : 1.0f - erfc;
  const float magnitude = a <= 1.0f ? small : large;
  return x != x ? x : (x < 0 ? -magnitude : magnitude);
}

// GELU(x) = x/2 (1 + erf(x / sqrt 2)) = x/2 erfc(-x / sqrt 2), branch-free, from one exp:
// with s = x / sqrt 2 and a = |s|, erfc(a) = exp(q(a)) for a <= 4, q a degree-9 polynomial
// in a - 0.5 fitted to log(erfc) on [0, 4] (least squares weighted by GELU's error per unit
// of q, reweighted towards minimax; tools: numpy), and x/2 (2 - erfc(a)) for s > 0,
// x/2 erfc(a) for s < 0, so the negative side keeps its relative accuracy down to
// erfc(4) ~ 1.5e-8; past a = 4, erfc is taken as 0. About 35 vector instructions where
// FastErf's polynomial for a <= 1 blended with a second one for a > 1 took 48 (ConvNeXt-T
// at batch 8 spends 0.86 ns per element on its GELU epilogues). Measured against GELU in
// double over [-10, 10] every 2^-12 (tests/unit/fast_math_test.cc).
KILN_FAST_MATH_INLINE float FastGelu(float x) {
  KILN_FAST_MATH_CONTRACT
  const float s = x * 0.70710678118654752440f;
  const float a = s < 0 ? -s : s;
  const float u = (a > 4.0f ? 4.0f : a) - 0.5f;
  float q = 2.229475058e-06f;
  q = q * u - 2.888474955e-05f;
  q = q * u + 1.321375603e-04f;
  q = q * u - 6.944613415e-05f;
  q = q * u - 2.284012269e-03f;
  q = q * u + 1.556128822e-02f;
  q = q * u - 6.703803688e-02f;
  q = q * u - 7.630500793e-01f;
  q = q * u - 1.832706094e+00f;
  q = q * u - 7.350111604e-01f;
  const float erfc = a > 4.0f ? 0.0f : FastExpNonPositive(q);
  return 0.5f * x * (s > 0 ? 2.0f - erfc : erfc);
}

// tanh(x), branch-free like FastErf. |x| < 0.625: x + x^3 P(x^2), the degree-4 polynomial
// of Cephes' tanhf; beyond: (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.29, so the
// subtraction loses nothing; sign restored (exp(-2|x|) underflows to 1.2e-38 far out,
// giving +-1). Measured against libm's tanh over [-12, 12] every 2^-12
// (tests/unit/fast_math_test.cc): relative error 1.4e-7 (under 2 ulp), largest just past the
// switch to the exp form.
KILN_FAST_MATH_INLINE float FastTanh(float x) {
  KILN_FAST_MATH_CONTRACT
  const float a = x < 0 ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = a + a * z * p;
  const float e = FastExpNonPositive(-2.0f * a);
  const float large = (1.0f - e) / (1.0f + e);
  const float magnitude = a < 0.625f ? small : large;
  return x != x ? x : (x < 0 ? -magnitude : magnitude);
}

}  // namespace kiln_kernels
