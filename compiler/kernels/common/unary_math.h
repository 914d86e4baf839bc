// Scalar definitions of the unary ops and activations, shared by the unary kernel and
// the fused activation epilogues of Conv/Gemm/MatMul.
#pragma once

#include "fast_math.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kiln/kernels/fp16.h"

namespace kiln_kernels {

// Forced inline (KILN_FAST_MATH_INLINE): a caller's loop with a constant op (ActivationLoop)
// folds the switch and vectorizes only once the call is gone. The kernel bitcode is
// optimised for no particular CPU, where LLVM kept this switch out of line, so every fused
// activation (GELU, SiLU, ...) ran a scalar call per element in artifacts.
template <typename T>
KILN_FAST_MATH_INLINE T ApplyUnary(int op, T x, double alpha, double beta) {
  if constexpr (kIsFloat<T>) {
    const T a = static_cast<T>(alpha), b = static_cast<T>(beta);
    switch (op) {
      case KILN_UNARY_ABS: return fabs(x);
      case KILN_UNARY_NEG: return -x;
      case KILN_UNARY_EXP:
        if constexpr (std::is_same_v<T, float> && kFastKernels) return FastExp(x);
        return exp(x);
      case KILN_UNARY_LOG: return log(x);
      case KILN_UNARY_SQRT: return sqrt(x);
      case KILN_UNARY_RECIPROCAL: return T(1) / x;
      case KILN_UNARY_SIN: return sin(x);
      case KILN_UNARY_COS: return cos(x);
      case KILN_UNARY_TAN: return tan(x);
      case KILN_UNARY_ASIN: return asin(x);
      case KILN_UNARY_ACOS: return acos(x);
      case KILN_UNARY_ATAN: return atan(x);
      case KILN_UNARY_SINH: return sinh(x);
      case KILN_UNARY_COSH: return cosh(x);
      case KILN_UNARY_ASINH: return asinh(x);
      case KILN_UNARY_ACOSH: return acosh(x);
      case KILN_UNARY_ATANH: return atanh(x);
      case KILN_UNARY_TANH:
        if constexpr (std::is_same_v<T, float> && kFastKernels) return FastTanh(x);
        return tanh(x);
      case KILN_UNARY_SIGMOID:
        if constexpr (std::is_same_v<T, float> && kFastKernels) return FastSigmoid(x);
        return x >= 0 ? T(1) / (T(1) + exp(-x)) : exp(x) / (T(1) + exp(x));
      case KILN_UNARY_RELU: return x > 0 ? x : T(0);
      case KILN_UNARY_FLOOR: return floor(x);
      case KILN_UNARY_CEIL: return ceil(x);
      case KILN_UNARY_ROUND: return nearbyint(x);  // ties to even in the default mode
      case KILN_UNARY_SIGN: return x > 0 ? T(1) : (x < 0 ? T(-1) : T(0));
      case KILN_UNARY_ERF:
        if constexpr (std::is_same_v<T, float> && kFastKernels) return FastErf(x);
        return erf(x);
      case KILN_UNARY_SOFTPLUS: return x > 20 ? x : log1p(exp(x));
      case KILN_UNARY_SOFTSIGN: return x / (T(1) + fabs(x));
      case KILN_UNARY_ELU: return x >= 0 ? x : a * (exp(x) - T(1));
      case KILN_UNARY_SELU: return x > 0 ? b * x : b * (a * exp(x) - a);
      case KILN_UNARY_LEAKY_RELU: return x >= 0 ? x : a * x;
      case KILN_UNARY_HARD_SIGMOID: {
        T y = a * x + b;
        return y < 0 ? T(0) : (y > 1 ? T(1) : y);
      }
      case KILN_UNARY_THRESHOLDED_RELU: return x > a ? x : T(0);
      case KILN_UNARY_CELU: return (x > 0 ? x : T(0)) + (x < 0 ? a * (exp(x / a) - T(1)) : T(0));
      case KILN_UNARY_HARD_SWISH: {
        T y = x / T(6) + T(0.5);
        return x * (y < 0 ? T(0) : (y > 1 ? T(1) : y));
      }
      case KILN_UNARY_SHRINK:  // alpha = lambd, beta = bias
        return x < -a ? x + b : (x > a ? x - b : T(0));
      case KILN_UNARY_GELU:
        if constexpr (std::is_same_v<T, float> && kFastKernels) return FastGelu(x);
        return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
      case KILN_UNARY_GELU_TANH: {
        // 0.5 x (1 + tanh(u)) = x sigmoid(2u): no 1 + tanh cancellation for large negative x.
        const T u = T(1.5957691216057307) * (x + T(0.044715) * x * x * x);  // 2 sqrt(2/pi)
        if constexpr (std::is_same_v<T, float> && kFastKernels) return x * FastSigmoid(u);
        return x * (u >= 0 ? T(1) / (T(1) + exp(-u)) : exp(u) / (T(1) + exp(u)));
      }
      case KILN_UNARY_CLIP: return x < a ? a : (x > b ? b : x);
      case KILN_UNARY_ROUND_TO_F16:
        return static_cast<T>(kiln_half_to_float(kiln_float_to_half(static_cast<float>(x))));
      case KILN_UNARY_ROUND_TO_BF16:
        return static_cast<T>(kiln_bfloat16_to_float(kiln_float_to_bfloat16(static_cast<float>(x))));
      case KILN_UNARY_SILU:
        if constexpr (std::is_same_v<T, float> && kFastKernels) return x * FastSigmoid(x);
        return x * (x >= 0 ? T(1) / (T(1) + exp(-x)) : exp(x) / (T(1) + exp(x)));
      default: return x;
    }
  } else {
    const double a = alpha, b = beta;
    switch (op) {
      case KILN_UNARY_ABS: return x < 0 ? static_cast<T>(-x) : x;
      case KILN_UNARY_NEG: return static_cast<T>(-x);
      case KILN_UNARY_RELU: return x > 0 ? x : T(0);
      case KILN_UNARY_SIGN: return x > 0 ? T(1) : (x < 0 ? static_cast<T>(-1) : T(0));
      case KILN_UNARY_NOT: return !x;
      case KILN_UNARY_BITWISE_NOT: return static_cast<T>(~x);
      case KILN_UNARY_SHRINK: {
        double v = static_cast<double>(x);
        return static_cast<T>(v < -a ? v + b : (v > a ? v - b : 0.0));
      }
      case KILN_UNARY_FLOOR:
      case KILN_UNARY_CEIL:
      case KILN_UNARY_ROUND: return x;
      default: return x;
    }
  }
}

// One activation over y[0..n) with the op fixed at compile time: the switch in ApplyUnary
// folds away and the loop vectorizes.
template <typename T, int kOp>
inline void ActivationLoop(T* y, int64_t n, double alpha, double beta) {
  for (int64_t i = 0; i < n; ++i) y[i] = ApplyUnary<T>(kOp, y[i], alpha, beta);
}

// Whether ApplyActivation has a loop of its own (vectorized) for `code`.
inline bool HasActivationLoop(int64_t code) {
  switch (code) {
    case KILN_UNARY_RELU:
    case KILN_UNARY_CLIP:
    case KILN_UNARY_LEAKY_RELU:
    case KILN_UNARY_SIGMOID:
    case KILN_UNARY_HARD_SIGMOID:
    case KILN_UNARY_HARD_SWISH:
    case KILN_UNARY_SILU:
    case KILN_UNARY_GELU:
    case KILN_UNARY_GELU_TANH:
    case KILN_UNARY_TANH: return true;
    default: return false;
  }
}

// Applies a fused activation (a unary op code, or -1 for none) to y[0..n). The activations
// CNNs fuse into Conv/Gemm epilogues get their own loops; a per-element switch on the op
// code (the fallback) costs more than the convolution for layers with few input channels.
template <typename T>
inline void ApplyActivation(T* y, int64_t n, int64_t code, double alpha, double beta) {
  switch (code) {
    case -1: return;
    case KILN_UNARY_RELU: return ActivationLoop<T, KILN_UNARY_RELU>(y, n, alpha, beta);
    case KILN_UNARY_CLIP: return ActivationLoop<T, KILN_UNARY_CLIP>(y, n, alpha, beta);
    case KILN_UNARY_LEAKY_RELU: return ActivationLoop<T, KILN_UNARY_LEAKY_RELU>(y, n, alpha, beta);
    case KILN_UNARY_SIGMOID: return ActivationLoop<T, KILN_UNARY_SIGMOID>(y, n, alpha, beta);
    case KILN_UNARY_HARD_SIGMOID: return ActivationLoop<T, KILN_UNARY_HARD_SIGMOID>(y, n, alpha, beta);
    case KILN_UNARY_HARD_SWISH: return ActivationLoop<T, KILN_UNARY_HARD_SWISH>(y, n, alpha, beta);
    case KILN_UNARY_SILU: return ActivationLoop<T, KILN_UNARY_SILU>(y, n, alpha, beta);
    case KILN_UNARY_GELU: return ActivationLoop<T, KILN_UNARY_GELU>(y, n, alpha, beta);  // transformers' MLPs
    case KILN_UNARY_GELU_TANH: return ActivationLoop<T, KILN_UNARY_GELU_TANH>(y, n, alpha, beta);
    case KILN_UNARY_TANH: return ActivationLoop<T, KILN_UNARY_TANH>(y, n, alpha, beta);
    default:
      if (code < 0) return;
      for (int64_t i = 0; i < n; ++i) y[i] = ApplyUnary<T>(static_cast<int>(code), y[i], alpha, beta);
  }
}

}  // namespace kiln_kernels
