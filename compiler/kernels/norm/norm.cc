// Normalizations: BatchNormalization (inference and training mode), InstanceNormalization,
// LayerNormalization, LRN and MeanVarianceNormalization.
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

// The mean of x[0, n) and the inverse of its standard deviation, sqrt(variance + eps), in
// double: the variance of x - mean (two passes, no cancellation). InstanceNormalization's
// and the reference LayerNormalization's row statistics.
template <typename T>
KILN_ALWAYS_INLINE void RowStatistics(const T* x, int64_t n, double eps, double* mean_out, double* inv_out) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  *mean_out = mean;
  *inv_out = 1.0 / sqrt(var + eps);
}

// Training mode: channel c's mean and (population) variance over the batch and the
// spatial dims, and the running statistics input_mean * momentum + mean * (1 - momentum)
// (likewise the variance) into outputs 1 and 2 when the node has them.
template <typename T>
KILN_ALWAYS_INLINE void BatchStatistics(const kiln_kcall* call, const Planes& planes, int64_t c, double momentum,
                                        double* mean_out, double* var_out) {
  const T* px = InputData<T>(call, 0);
  const double count = static_cast<double>(planes.batch * planes.spatial);
  double mean = 0, var = 0;
  for (int64_t n = 0; n < planes.batch; ++n) {
    const T* x = px + (n * planes.channels + c) * planes.spatial;
    for (int64_t i = 0; i < planes.spatial; ++i) mean += x[i];
  }
  mean /= count;
  for (int64_t n = 0; n < planes.batch; ++n) {
    const T* x = px + (n * planes.channels + c) * planes.spatial;
    for (int64_t i = 0; i < planes.spatial; ++i) var += (x[i] - mean) * (x[i] - mean);
  }
  var /= count;
  const double running[2] = {InputData<T>(call, 3)[c] * momentum + mean * (1 - momentum),
                             InputData<T>(call, 4)[c] * momentum + var * (1 - momentum)};
  for (int32_t k = 1; k <= 2; ++k) {
    if (call->num_outputs > k && call->outputs[k].data != nullptr)
      OutputData<T>(call, k)[c] = static_cast<T>(running[k - 1]);
  }
  *mean_out = mean;
  *var_out = var;
}

struct BatchNormKernel {
  // inputs: X, scale, bias, mean, var; parameters: kiln_norm_params' epsilon, training
  // and momentum
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_norm_params& params) {
    const double eps = params.epsilon;
    const Planes planes(call->inputs[0]);
    const int64_t batch = planes.batch, channels = planes.channels, spatial = planes.spatial;
    const T* scale = InputData<T>(call, 1);
    const T* bias = InputData<T>(call, 2);
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    for (int64_t c = 0; c < channels; ++c) {
      double mean = InputData<T>(call, 3)[c], var = InputData<T>(call, 4)[c];
      if (params.training) BatchStatistics<T>(call, planes, c, params.momentum, &mean, &var);
      const double inv = 1.0 / sqrt(var + eps);
      for (int64_t n = 0; n < batch; ++n) {
        const T a = static_cast<T>(scale[c] * inv);
        const T b = static_cast<T>(bias[c] - mean * scale[c] * inv);
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
  static int32_t Run(const kiln_kcall* call, const kiln_norm_params& params) {
    const double eps = params.epsilon;
    const Planes planes(call->inputs[0]);
    const int64_t channels = planes.channels, spatial = planes.spatial;
    const T* scale = InputData<T>(call, 1);
    const T* bias = InputData<T>(call, 2);
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    for (int64_t plane = 0; plane < planes.batch * channels; ++plane) {
      const T* x = px + plane * spatial;
      T* y = py + plane * spatial;
      double mean, inv;
      RowStatistics(x, spatial, eps, &mean, &inv);
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
  static int32_t Run(const kiln_kcall* call, const kiln_norm_params& params) {
    const double eps = params.epsilon;
    // Rows of `inner` elements: the dims from axis on.
    const AxisExtents rows = FlattenAtAxis(call->inputs[0], params.axis);
    const int64_t outer = rows.outer, inner = rows.len;
    const T* scale = InputData<T>(call, 1);
    const T* bias = OptionalInputData<T>(call, 2);
    const bool has_bias = bias != nullptr;
    const int64_t scale_n = Numel(call->inputs[1]), bias_n = has_bias ? Numel(call->inputs[2]) : 1;
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    T* mean_out = call->num_outputs > 1 && call->outputs[1].data ? OutputData<T>(call, 1) : nullptr;
    T* inv_out = call->num_outputs > 2 && call->outputs[2].data ? OutputData<T>(call, 2) : nullptr;
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
        double mean, inv;
        RowStatistics(x, inner, eps, &mean, &inv);
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
  static int32_t Run(const kiln_kcall* call, const kiln_norm_params& params) {
    const int64_t size = params.size;
    const double alpha = params.alpha, beta = params.beta, bias = params.bias;
    const Planes planes(call->inputs[0]);
    const int64_t channels = planes.channels, spatial = planes.spatial;
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
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

// The axes of t in mask (or not in it) as an odometer: their dims and row-major strides.
struct AxisSet {
  int32_t count = 0;
  int64_t dims[KILN_MAX_RANK], strides[KILN_MAX_RANK];
  int64_t size = 1;
  AxisSet(const kiln_ktensor& t, int64_t mask, bool in_mask) {
    int64_t stride = 1;
    for (int32_t a = t.rank; a-- > 0;) {
      if (((mask >> a) & 1) == (in_mask ? 1 : 0)) {
        dims[count] = t.dims[a];
        strides[count++] = stride;
        size *= t.dims[a];
      }
      stride *= t.dims[a];
    }
  }
  // The offset of the set's i-th combination (the first listed axis, the innermost, fastest).
  int64_t Offset(int64_t i) const {
    int64_t offset = 0;
    for (int32_t k = 0; k < count; ++k) {
      offset += (i % dims[k]) * strides[k];
      i /= dims[k];
    }
    return offset;
  }
};

struct MeanVarianceNormKernel {
  // Y = (X - mean) / (sqrt(E[X^2] - mean^2) + 1e-9), the statistics over the axes in
  // kiln_norm_params' axes_mask (the ONNX function's arithmetic, in double).
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_norm_params& params) {
    const kiln_ktensor& x = call->inputs[0];
    const AxisSet kept(x, params.axes_mask, false), reduced(x, params.axes_mask, true);
    const T* px = InputData<T>(call, 0);
    T* py = OutputData<T>(call);
    for (int64_t g = 0; g < kept.size; ++g) {
      const int64_t base = kept.Offset(g);
      double sum = 0, squares = 0;
      for (int64_t i = 0; i < reduced.size; ++i) {
        const double v = px[base + reduced.Offset(i)];
        sum += v;
        squares += v * v;
      }
      const double mean = sum / static_cast<double>(reduced.size);
      const double var = squares / static_cast<double>(reduced.size) - mean * mean;
      const double denominator = sqrt(var > 0 ? var : 0) + 1e-9;
      for (int64_t i = 0; i < reduced.size; ++i) {
        const int64_t at = base + reduced.Offset(i);
        py[at] = static_cast<T>((px[at] - mean) / denominator);
      }
    }
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_FLOAT_KERNEL(batch_norm, BatchNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(instance_norm, InstanceNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(layer_norm, LayerNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(lrn, LrnKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(mean_variance_norm, MeanVarianceNormKernel, outputs[0].dtype)
