// Normalizations: BatchNormalization (inference), InstanceNormalization,
// LayerNormalization and LRN.
#include "kiln/kernels/norm.h"
#include "kernel_common.h"

using namespace kiln_kernels;

namespace {

// X [N, C, spatial...] as N * C planes of `spatial` elements: what BatchNormalization,
// InstanceNormalization and LRN walk.
struct Planes {
  int64_t batch, channels, spatial = 1;
  explicit Planes(const kiln_ktensor& x) : batch(x.dims[0]), channels(x.rank > 1 ? x.dims[1] : 1) {
    for (int32_t i = 2; i < x.rank; ++i) spatial *= x.dims[i];
  }
};

struct BatchNormKernel {
  // inputs: X, scale, bias, mean, var; parameters: kiln_norm_params' epsilon
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const T* scale = static_cast<const T*>(call->inputs[1].data);
    const T* bias = static_cast<const T*>(call->inputs[2].data);
    const T* mean = static_cast<const T*>(call->inputs[3].data);
    const T* var = static_cast<const T*>(call->inputs[4].data);
    KILN_PARAMS(kiln_norm_params, params, call);
    const double eps = params.epsilon;
    const Planes planes(X);
    const int64_t batch = planes.batch, channels = planes.channels, spatial = planes.spatial;
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < channels; ++c) {
        const double inv = 1.0 / sqrt(static_cast<double>(var[c]) + eps);
        const T a = static_cast<T>(scale[c] * inv);
        const T b = static_cast<T>(bias[c] - mean[c] * scale[c] * inv);
        const T* x = px + (n * channels + c) * spatial;
        T* y = py + (n * channels + c) * spatial;
        for (int64_t i = 0; i < spatial; ++i) y[i] = a * x[i] + b;
      }
    }
    return KILN_KERR_OK;
  }
};

struct InstanceNormKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const T* scale = static_cast<const T*>(call->inputs[1].data);
    const T* bias = static_cast<const T*>(call->inputs[2].data);
    KILN_PARAMS(kiln_norm_params, params, call);
    const double eps = params.epsilon;
    const Planes planes(X);
    const int64_t channels = planes.channels, spatial = planes.spatial;
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    for (int64_t plane = 0; plane < planes.batch * channels; ++plane) {
      const T* x = px + plane * spatial;
      T* y = py + plane * spatial;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < spatial; ++i) mean += x[i];
      mean /= static_cast<double>(spatial);
      for (int64_t i = 0; i < spatial; ++i) var += (x[i] - mean) * (x[i] - mean);
      var /= static_cast<double>(spatial);
      const double inv = 1.0 / sqrt(var + eps);
      const int64_t c = plane % channels;
      for (int64_t i = 0; i < spatial; ++i) y[i] = static_cast<T>((x[i] - mean) * inv * scale[c] + bias[c]);
    }
    return KILN_KERR_OK;
  }
};

struct LayerNormKernel {
  // inputs: X, Scale, B (optional); parameters: kiln_norm_params' axis and epsilon.
  // Outputs: Y, Mean and InvStdDev (optional, shape [outer..., 1...]).
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    KILN_PARAMS(kiln_norm_params, params, call);
    const int64_t axis = params.axis;
    const double eps = params.epsilon;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= X.dims[i];
    for (int32_t i = static_cast<int32_t>(axis); i < X.rank; ++i) inner *= X.dims[i];
    const kiln_ktensor& S = call->inputs[1];
    const T* scale = static_cast<const T*>(S.data);
    const bool has_bias = call->num_inputs > 2 && call->inputs[2].data != nullptr;
    const T* bias = has_bias ? static_cast<const T*>(call->inputs[2].data) : nullptr;
    const int64_t scale_n = Numel(S), bias_n = has_bias ? Numel(call->inputs[2]) : 1;
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    T* mean_out = call->num_outputs > 1 && call->outputs[1].data ? static_cast<T*>(call->outputs[1].data) : nullptr;
    T* inv_out = call->num_outputs > 2 && call->outputs[2].data ? static_cast<T*>(call->outputs[2].data) : nullptr;
    if constexpr (std::is_same_v<T, float> && kFastKernels) {
      // Artifacts, f32 with per-element scale and bias (the fuse pass's LayerNorm): sums in
      // f32 over 16 partial lanes (vectorizable without reassociation), mean first, then
      // the variance of x - mean (no cancellation), then one pass writing y.
      if (scale_n == inner && bias_n == (has_bias ? inner : 1)) {
        auto fast = [=](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            const float* x = px + o * inner;
            float* y = py + o * inner;
            const float mean = SumRow16(x, inner, [](float v) { return v; }) / static_cast<float>(inner);
            const float squares = SumRow16(x, inner, [mean](float v) { return (v - mean) * (v - mean); });
            const float inv = 1.f / sqrtf(squares / static_cast<float>(inner) + static_cast<float>(eps));
            if (bias != nullptr) {
              for (int64_t i = 0; i < inner; ++i) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
            } else {
              for (int64_t i = 0; i < inner; ++i) y[i] = (x[i] - mean) * inv * scale[i];
            }
            if (mean_out) mean_out[o] = mean;
            if (inv_out) inv_out[o] = inv;
          }
        };
        ParallelFor(call, outer, 8, fast);
        return KILN_KERR_OK;
      }
    }
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T* x = px + o * inner;
        T* y = py + o * inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += x[i];
        mean /= static_cast<double>(inner);
        for (int64_t i = 0; i < inner; ++i) var += (x[i] - mean) * (x[i] - mean);
        var /= static_cast<double>(inner);
        const double inv = 1.0 / sqrt(var + eps);
        for (int64_t i = 0; i < inner; ++i) {
          double v = (x[i] - mean) * inv * static_cast<double>(scale[i % scale_n]);
          if (bias) v += static_cast<double>(bias[i % bias_n]);
          y[i] = static_cast<T>(v);
        }
        if (mean_out) mean_out[o] = static_cast<T>(mean);
        if (inv_out) inv_out[o] = static_cast<T>(inv);
      }
    };
    ParallelFor(call, outer, 8, body);
    return KILN_KERR_OK;
  }
};

struct LrnKernel {
  // Parameters: kiln_norm_params' size, alpha, beta and bias.
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    KILN_PARAMS(kiln_norm_params, params, call);
    const int64_t size = params.size;
    const double alpha = params.alpha, beta = params.beta, bias = params.bias;
    const Planes planes(X);
    const int64_t channels = planes.channels, spatial = planes.spatial;
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    const int64_t before = (size - 1) / 2, after = size - 1 - before;
    for (int64_t n = 0; n < planes.batch; ++n)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t s = 0; s < spatial; ++s) {
          double square_sum = 0;
          for (int64_t k = c - before; k <= c + after; ++k) {
            if (k < 0 || k >= channels) continue;
            const double v = px[(n * channels + k) * spatial + s];
            square_sum += v * v;
          }
          const int64_t at = (n * channels + c) * spatial + s;
          py[at] = static_cast<T>(px[at] / pow(bias + alpha / static_cast<double>(size) * square_sum, beta));
        }
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_FLOAT_KERNEL(batch_norm, BatchNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(instance_norm, InstanceNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(layer_norm, LayerNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(lrn, LrnKernel, outputs[0].dtype)
