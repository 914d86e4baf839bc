// The kernel library's fast approximations against libm, over their whole domain.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "fast_math.h"
#include "gtest/gtest.h"

namespace {

constexpr double kFloatEpsilon = std::numeric_limits<float>::epsilon();

// The largest error of `fast` against libm's `exact` (evaluated in double at the same float
// x) at every `step` over [lo, hi], and the x where it occurs: relative where |exact| >
// `floor` (points below it are skipped), else absolute when `relative` is false.
struct Worst {
  double error = 0, at = 0;
};
template <typename Fast, typename Exact>
Worst WorstError(double lo, double hi, double step, Fast fast, Exact exact, bool relative = true, double floor = 0) {
  Worst worst;
  for (double x = lo; x <= hi; x += step) {
    const float xf = static_cast<float>(x);
    const double want = exact(static_cast<double>(xf));
    if (relative && std::fabs(want) <= floor) continue;
    const double error = std::fabs(static_cast<double>(fast(xf)) - want) / (relative ? std::fabs(want) : 1.0);
    if (error > worst.error) worst = {error, xf};
  }
  return worst;
}

TEST(FastMathTest, ExpIsWithinTwoUlpOfLibm) {
  // Every 2^-12 over [-87, 88.72]: about 720 000 points.
  const Worst worst = WorstError(-87.0, 88.72, 1.0 / 4096, kiln_kernels::FastExp, [](double x) { return std::exp(x); });
  std::printf("FastExp: max relative error %.3g at x = %.6g (float epsilon %.3g)\n", worst.error, worst.at,
              kFloatEpsilon);
  EXPECT_LT(worst.error, 2 * kFloatEpsilon);  // 2 ulp
}

TEST(FastMathTest, ExpEdges) {
  EXPECT_EQ(kiln_kernels::FastExp(0.f), 1.f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastExp(std::nanf(""))));
  const float tiny = kiln_kernels::FastExp(-std::numeric_limits<float>::infinity());
  EXPECT_GE(tiny, 0.f);
  EXPECT_LT(tiny, 1.3e-38f);
  EXPECT_LT(kiln_kernels::FastExp(-1000.f), 1.3e-38f);
  EXPECT_TRUE(std::isinf(kiln_kernels::FastExp(1000.f)));
  EXPECT_TRUE(std::isinf(kiln_kernels::FastExp(88.75f)));
  EXPECT_TRUE(std::isfinite(kiln_kernels::FastExp(88.72f)));
  EXPECT_GT(kiln_kernels::FastExp(88.72f), 3.3e38f);
}

// The vector form for arguments <= 0 (Softmax's rows, after their maximum), 8 and 16
// lanes, over [-87, 0] with lanes filled with consecutive points, plus the edges in every
// lane position: the same values as the scalar FastExpNonPositive.
template <typename V>
void CheckNonPositiveExpVector() {
  constexpr int L = sizeof(V) / sizeof(float);
  double worst = 0;
  for (double x0 = -87.0; x0 + (L - 1) / 4096.0 <= 0; x0 += L / 4096.0) {
    V e;
    for (int l = 0; l < L; ++l) e[l] = static_cast<float>(x0 + l / 4096.0);
    kiln_kernels::FastExpNonPositiveV(e);
    for (int l = 0; l < L; ++l) {
      const double want = std::exp(static_cast<double>(static_cast<float>(x0 + l / 4096.0)));
      worst = std::max(worst, std::fabs(e[l] - want) / want);
    }
  }
  std::printf("FastExpNonPositiveV, %d lanes: max relative error %.3g\n", L, worst);
  EXPECT_LT(worst, 2 * static_cast<double>(std::numeric_limits<float>::epsilon()));
  const float edges[8] = {0.f,     std::nanf(""), -std::numeric_limits<float>::infinity(), -1000.f, -87.5f, -87.3f,
                          -1e-30f, -0.5f};
  for (int shift = 0; shift < 8; ++shift) {
    V e;
    for (int l = 0; l < L; ++l) e[l] = edges[(l + shift) % 8];
    kiln_kernels::FastExpNonPositiveV(e);
    for (int l = 0; l < L; ++l) {
      const float x = edges[(l + shift) % 8];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(e[l]));
      } else {
        EXPECT_EQ(e[l], kiln_kernels::FastExpNonPositive(x)) << x;  // exact, or saturated the same way
      }
    }
  }
}

TEST(FastMathTest, NonPositiveExpVectorsMatchLibm) {
  CheckNonPositiveExpVector<kiln_kernels::v8f>();
  CheckNonPositiveExpVector<kiln_kernels::v16f>();
}

TEST(FastMathTest, SigmoidMatchesLibmBothSides) {
  const Worst worst = WorstError(
      -100.0, 100.0, 1.0 / 1024, kiln_kernels::FastSigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, true,
      1e-37);
  std::printf("FastSigmoid: max relative error %.3g\n", worst.error);
  EXPECT_LT(worst.error, 4 * kFloatEpsilon);
  EXPECT_EQ(kiln_kernels::FastSigmoid(0.f), 0.5f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastSigmoid(std::nanf(""))));
}

TEST(FastMathTest, ErfMatchesLibm) {
  auto erf = [](double x) { return std::erf(x); };
  const Worst absolute = WorstError(-6.0, 6.0, 1.0 / 4096, kiln_kernels::FastErf, erf, false);
  const Worst small = WorstError(-1.0, 1.0, 1.0 / 4096, kiln_kernels::FastErf, erf);
  std::printf("FastErf: max absolute error %.3g, max relative error on |x| <= 1 %.3g\n", absolute.error, small.error);
  EXPECT_LT(absolute.error, 1.5e-7);
  EXPECT_LT(small.error, 2 * kFloatEpsilon);
  EXPECT_EQ(kiln_kernels::FastErf(0.f), 0.f);
  EXPECT_EQ(kiln_kernels::FastErf(10.f), 1.f);
  EXPECT_EQ(kiln_kernels::FastErf(-10.f), -1.f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastErf(std::nanf(""))));
}

// GELU's error scales with |x| on the positive side (x itself), so it is measured
// relative to max(1, |x|); the negative side, where GELU is a small x * erfc, also relative
// to GELU itself down to |x| = 5.6 (erfc(4)).
TEST(FastMathTest, GeluMatchesLibm) {
  auto gelu = [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); };
  Worst scaled;
  for (double x = -10.0; x <= 10.0; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    const double error = std::fabs(kiln_kernels::FastGelu(xf) - gelu(xf)) / std::max(1.0, std::fabs(double(xf)));
    if (error > scaled.error) scaled = {error, xf};
  }
  const Worst negative = WorstError(-5.6, -0.01, 1.0 / 4096, kiln_kernels::FastGelu, gelu);
  std::printf("FastGelu: max error / max(1, |x|) %.3g at %g, max relative error on [-5.6, 0) %.3g at %g\n",
              scaled.error, scaled.at, negative.error, negative.at);
  EXPECT_LT(scaled.error, 2.5e-7);
  EXPECT_LT(negative.error, 5e-4);
  EXPECT_EQ(kiln_kernels::FastGelu(0.f), 0.f);
  EXPECT_EQ(kiln_kernels::FastGelu(20.f), 20.f);
  EXPECT_EQ(kiln_kernels::FastGelu(-20.f), 0.f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastGelu(std::nanf(""))));
}

TEST(FastMathTest, TanhMatchesLibm) {
  const Worst worst =
      WorstError(-12.0, 12.0, 1.0 / 4096, kiln_kernels::FastTanh, [](double x) { return std::tanh(x); });
  std::printf("FastTanh: max relative error %.3g at %g\n", worst.error, worst.at);
  EXPECT_LT(worst.error, 2 * kFloatEpsilon);
  EXPECT_EQ(kiln_kernels::FastTanh(0.f), 0.f);
  EXPECT_EQ(kiln_kernels::FastTanh(1e-30f), 1e-30f);
  EXPECT_EQ(kiln_kernels::FastTanh(100.f), 1.f);
  EXPECT_EQ(kiln_kernels::FastTanh(-100.f), -1.f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastTanh(std::nanf(""))));
}

}  // namespace
