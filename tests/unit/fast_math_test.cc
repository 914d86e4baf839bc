// The kernel library's fast approximations against libm, over their whole domain.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "fast_math.h"
#include "gtest/gtest.h"

namespace {

TEST(FastMathTest, ExpIsWithinTwoUlpOfLibm) {
  double worst = 0, worst_x = 0;
  // Every 2^-12 over [-87, 88.72]: about 720 000 points.
  for (double x = -87.0; x <= 88.72; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(xf));
    const double got = kiln_kernels::FastExp(xf);
    const double relative = std::fabs(got - want) / want;
    if (relative > worst) {
      worst = relative;
      worst_x = xf;
    }
  }
  std::printf("FastExp: max relative error %.3g at x = %.6g (float epsilon %.3g)\n", worst, worst_x,
              static_cast<double>(std::numeric_limits<float>::epsilon()));
  EXPECT_LT(worst, 2 * static_cast<double>(std::numeric_limits<float>::epsilon()));  // 2 ulp
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

// The eight-lane form (Softmax's rows) over the same sweep, lanes filled with consecutive
// points, plus the edges in every lane position.
TEST(FastMathTest, EightLaneExpMatchesLibm) {
  double worst = 0;
  for (double x0 = -87.0; x0 + 7.0 / 4096 <= 88.72; x0 += 8.0 / 4096) {
    kiln_kernels::v8f e;
    for (int l = 0; l < 8; ++l) e[l] = static_cast<float>(x0 + l / 4096.0);
    kiln_kernels::FastExp8(e);
    for (int l = 0; l < 8; ++l) {
      const double want = std::exp(static_cast<double>(static_cast<float>(x0 + l / 4096.0)));
      worst = std::max(worst, std::fabs(e[l] - want) / want);
    }
  }
  std::printf("FastExp8: max relative error %.3g\n", worst);
  EXPECT_LT(worst, 2 * static_cast<double>(std::numeric_limits<float>::epsilon()));
  const float edges[8] = {0.f,    std::nanf(""), -std::numeric_limits<float>::infinity(), -1000.f, 1000.f, 88.75f,
                          88.72f, -87.5f};
  for (int shift = 0; shift < 8; ++shift) {
    kiln_kernels::v8f e;
    for (int l = 0; l < 8; ++l) e[l] = edges[(l + shift) % 8];
    kiln_kernels::FastExp8(e);
    for (int l = 0; l < 8; ++l) {
      const float x = edges[(l + shift) % 8];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(e[l]));
      } else if (x == 88.72f) {
        EXPECT_NEAR(e[l], kiln_kernels::FastExp(x), 2e-7 * kiln_kernels::FastExp(x));
      } else {
        EXPECT_EQ(e[l], kiln_kernels::FastExp(x)) << x;  // exact, or saturated the same way
      }
    }
  }
}

TEST(FastMathTest, SigmoidMatchesLibmBothSides) {
  double worst = 0;
  for (double x = -100.0; x <= 100.0; x += 1.0 / 1024) {
    const float xf = static_cast<float>(x);
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(xf)));
    const double got = kiln_kernels::FastSigmoid(xf);
    if (want > 1e-37) worst = std::max(worst, std::fabs(got - want) / want);
  }
  std::printf("FastSigmoid: max relative error %.3g\n", worst);
  EXPECT_LT(worst, 4 * static_cast<double>(std::numeric_limits<float>::epsilon()));
  EXPECT_EQ(kiln_kernels::FastSigmoid(0.f), 0.5f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastSigmoid(std::nanf(""))));
}

TEST(FastMathTest, ErfMatchesLibm) {
  double worst_abs = 0, worst_rel_small = 0;
  for (double x = -6.0; x <= 6.0; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    const double want = std::erf(static_cast<double>(xf));
    const double got = kiln_kernels::FastErf(xf);
    worst_abs = std::max(worst_abs, std::fabs(got - want));
    if (std::fabs(xf) <= 1.0f && want != 0)
      worst_rel_small = std::max(worst_rel_small, std::fabs(got - want) / std::fabs(want));
  }
  std::printf("FastErf: max absolute error %.3g, max relative error on |x| <= 1 %.3g\n", worst_abs, worst_rel_small);
  EXPECT_LT(worst_abs, 1.5e-7);
  EXPECT_LT(worst_rel_small, 2 * static_cast<double>(std::numeric_limits<float>::epsilon()));
  EXPECT_EQ(kiln_kernels::FastErf(0.f), 0.f);
  EXPECT_EQ(kiln_kernels::FastErf(10.f), 1.f);
  EXPECT_EQ(kiln_kernels::FastErf(-10.f), -1.f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastErf(std::nanf(""))));
}

TEST(FastMathTest, TanhMatchesLibm) {
  double worst = 0, at = 0;
  for (double x = -12.0; x <= 12.0; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    const double want = std::tanh(static_cast<double>(xf));
    const double got = kiln_kernels::FastTanh(xf);
    if (want != 0 && std::fabs(got - want) / std::fabs(want) > worst) {
      worst = std::fabs(got - want) / std::fabs(want);
      at = xf;
    }
  }
  std::printf("FastTanh: max relative error %.3g at %g\n", worst, at);
  EXPECT_LT(worst, 2 * static_cast<double>(std::numeric_limits<float>::epsilon()));
  EXPECT_EQ(kiln_kernels::FastTanh(0.f), 0.f);
  EXPECT_EQ(kiln_kernels::FastTanh(1e-30f), 1e-30f);
  EXPECT_EQ(kiln_kernels::FastTanh(100.f), 1.f);
  EXPECT_EQ(kiln_kernels::FastTanh(-100.f), -1.f);
  EXPECT_TRUE(std::isnan(kiln_kernels::FastTanh(std::nanf(""))));
}

}  // namespace
