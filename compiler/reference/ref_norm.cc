// Normalizations, from the ONNX specification: BatchNormalization (inference and training),
// InstanceNormalization, LayerNormalization (with its optional Mean and InvStdDev) and LRN.
#include <cmath>

#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

// The number of elements per channel of an [N, C, ...] tensor.
int64_t PlaneSize(const Tensor& x) {
  int64_t size = 1;
  for (int64_t d = 2; d < x.rank(); ++d) size *= x.dims()[d];
  return size;
}

Outputs BatchNormalization(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(scale, in, 1);
  KILN_REF_INPUT(bias, in, 2);
  KILN_REF_INPUT(mean, in, 3);
  KILN_REF_INPUT(var, in, 4);
  const double epsilon = node.GetFloat("epsilon", 1e-5);
  const int64_t channels = x->rank() > 1 ? x->dims()[1] : 1, plane = PlaneSize(*x);
  // Training mode (opset 14 on, asked for by its running-statistics outputs): normalise by
  // the batch's own per-channel mean and population variance, and blend them into the
  // running ones with `momentum`.
  const bool training = node.GetInt("training_mode", 0) != 0 || node.outputs().size() > 1;
  std::vector<double> use_mean(static_cast<size_t>(channels)), use_var(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    use_mean[c] = LoadDouble(*mean, c);
    use_var[c] = LoadDouble(*var, c);
  }
  std::vector<double> batch_mean(use_mean), batch_var(use_var);
  if (training) {
    const int64_t count = x->num_elements() / channels;
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0, squares = 0;
      for (int64_t i = 0; i < x->num_elements(); ++i) {
        if ((i / plane) % channels == c) sum += LoadDouble(*x, i);
      }
      batch_mean[c] = sum / static_cast<double>(count);
      for (int64_t i = 0; i < x->num_elements(); ++i) {
        if ((i / plane) % channels == c)
          squares += (LoadDouble(*x, i) - batch_mean[c]) * (LoadDouble(*x, i) - batch_mean[c]);
      }
      batch_var[c] = squares / static_cast<double>(count);
    }
  }
  Tensor out(x->dtype(), x->dims());
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const int64_t c = (i / plane) % channels;
    const double normalized = (LoadDouble(*x, i) - batch_mean[c]) / std::sqrt(batch_var[c] + epsilon);
    StoreDouble(out, i, LoadDouble(*scale, c) * normalized + LoadDouble(*bias, c));
  }
  std::vector<Tensor> results;
  results.push_back(std::move(out));
  if (training) {
    const double momentum = node.GetFloat("momentum", 0.9);
    Tensor running_mean(mean->dtype(), mean->dims()), running_var(var->dtype(), var->dims());
    for (int64_t c = 0; c < channels; ++c) {
      StoreDouble(running_mean, c, use_mean[c] * momentum + batch_mean[c] * (1 - momentum));
      StoreDouble(running_var, c, use_var[c] * momentum + batch_var[c] * (1 - momentum));
    }
    results.push_back(std::move(running_mean));
    results.push_back(std::move(running_var));
  }
  return results;
}

// Mean and variance (population, 1/n) of x[first .. first + count).
std::pair<double, double> Moments(const Tensor& x, int64_t first, int64_t count) {
  double sum = 0, squares = 0;
  for (int64_t i = 0; i < count; ++i) sum += LoadDouble(x, first + i);
  const double mean = sum / static_cast<double>(count);
  for (int64_t i = 0; i < count; ++i) {
    const double d = LoadDouble(x, first + i) - mean;
    squares += d * d;
  }
  return {mean, squares / static_cast<double>(count)};
}

Outputs InstanceNormalization(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(scale, in, 1);
  KILN_REF_INPUT(bias, in, 2);
  const double epsilon = node.GetFloat("epsilon", 1e-5);
  const int64_t channels = x->dims()[1], plane = PlaneSize(*x);
  Tensor out(x->dtype(), x->dims());
  for (int64_t p = 0; p < x->num_elements() / plane; ++p) {
    const auto [mean, variance] = Moments(*x, p * plane, plane);
    const int64_t c = p % channels;
    for (int64_t i = p * plane; i < (p + 1) * plane; ++i) {
      const double normalized = (LoadDouble(*x, i) - mean) / std::sqrt(variance + epsilon);
      StoreDouble(out, i, LoadDouble(*scale, c) * normalized + LoadDouble(*bias, c));
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

// Normalizes over the dims from `axis` on; Scale and B broadcast over those dims.
Outputs LayerNormalization(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(scale, in, 1);
  const Tensor* bias = OptionalInput(in, 2);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", -1), x->rank()));
  const double epsilon = node.GetFloat("epsilon", 1e-5);
  std::vector<int64_t> inner_dims(x->dims().begin() + axis, x->dims().end()), stat_dims = x->dims();
  for (int64_t d = axis; d < x->rank(); ++d) stat_dims[d] = 1;
  const int64_t inner = NumElements(inner_dims), outer = NumElements(stat_dims);
  const std::vector<int64_t> scale_strides = BroadcastStrides(scale->dims(), inner_dims);
  const std::vector<int64_t> bias_strides = bias ? BroadcastStrides(bias->dims(), inner_dims) : std::vector<int64_t>{};
  const DType stash = static_cast<DType>(node.GetInt("stash_type", 1));
  Tensor out(x->dtype(), x->dims()), means(stash, stat_dims), inv_std(stash, stat_dims);
  for (int64_t o = 0; o < outer; ++o) {
    const auto [mean, variance] = Moments(*x, o * inner, inner);
    const double inverse = 1.0 / std::sqrt(variance + epsilon);
    StoreDouble(means, o, mean);
    StoreDouble(inv_std, o, inverse);
    std::vector<int64_t> index(inner_dims.size(), 0);
    for (int64_t i = 0; i < inner; ++i) {
      double y = (LoadDouble(*x, o * inner + i) - mean) * inverse * LoadDouble(*scale, Dot(index, scale_strides));
      if (bias) y += LoadDouble(*bias, Dot(index, bias_strides));
      StoreDouble(out, o * inner + i, y);
      NextIndex(index, inner_dims);
    }
  }
  std::vector<Tensor> results;
  results.push_back(std::move(out));
  if (node.outputs().size() > 1) results.push_back(std::move(means));
  if (node.outputs().size() > 2) results.push_back(std::move(inv_std));
  return results;
}

// y = x / (bias + alpha / size * sum of x^2 over the channels [c - (size-1)/2, c + ceil((size-1)/2)]) ^ beta
Outputs Lrn(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const double alpha = node.GetFloat("alpha", 1e-4), beta = node.GetFloat("beta", 0.75),
               bias = node.GetFloat("bias", 1.0);
  const int64_t size = node.GetInt("size", 1), channels = x->dims()[1], plane = PlaneSize(*x);
  const int64_t below = (size - 1) / 2, above = size - 1 - below;
  Tensor out(x->dtype(), x->dims());
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const int64_t c = (i / plane) % channels;
    double sum = 0;
    for (int64_t k = std::max<int64_t>(0, c - below); k <= std::min(channels - 1, c + above); ++k) {
      const double v = LoadDouble(*x, i + (k - c) * plane);
      sum += v * v;
    }
    StoreDouble(out, i, LoadDouble(*x, i) / std::pow(bias + alpha / static_cast<double>(size) * sum, beta));
  }
  return std::vector<Tensor>{std::move(out)};
}

}  // namespace

void AddNormOps(RefTable& table) {
  table["BatchNormalization"] = BatchNormalization;
  table["InstanceNormalization"] = InstanceNormalization;
  table["LayerNormalization"] = LayerNormalization;
  table["LRN"] = Lrn;
}

}  // namespace kiln::ref
