// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its log-softmax over the
// class axis, then the same weighted, reduced gather of -log p[n, target, d...]).
#include "kiln/kernels/loss.h"
#include "kernel_common.h"

using namespace kiln_kernels;

namespace {

// Target element i of an int32 or int64 tensor.
KILN_ALWAYS_INLINE int64_t TargetAt(const kiln_ktensor& target, int64_t i) {
  return target.dtype == kI32 ? static_cast<const int32_t*>(target.data)[i]
                              : static_cast<const int64_t*>(target.data)[i];
}

// inputs: X [N, C, d...] (log-probabilities, or scores the functor turns into them),
// target [N, d...], weight [C] (optional); output 0: the loss, [N, d...] for reduction
// none, a scalar otherwise. log_prob(line, first, c) is log p of class c on the class line
// starting at element `first` (the classes lie `inner` apart). Sums in double; a mean
// divides by the summed weights of the targets not ignored.
template <typename T, typename LogProb>
KILN_ALWAYS_INLINE int32_t GatherLoss(const kiln_kcall* call, const kiln_loss_params& params, LogProb log_prob) {
  const AxisExtents e = SplitAtAxis(call->inputs[0], 1);
  const kiln_ktensor& target = call->inputs[1];
  const T* weight = call->num_inputs > 2 ? static_cast<const T*>(call->inputs[2].data) : nullptr;
  T* out = OutputData<T>(call, 0);
  double loss_sum = 0, weight_sum = 0;
  for (int64_t n = 0; n < e.outer; ++n) {
    for (int64_t d = 0; d < e.inner; ++d) {
      const int64_t i = n * e.inner + d;
      const int64_t t = TargetAt(target, i);
      double loss = 0, w = 0;
      if (!(params.has_ignore_index && t == params.ignore_index)) {
        if (t < 0 || t >= e.len) return KILN_KERR_INDEX;
        w = weight != nullptr ? static_cast<double>(weight[t]) : 1.0;
        loss = -log_prob(i, n * e.len * e.inner + d, t) * w;
      }
      if (params.reduction == KILN_LOSS_NONE) out[i] = static_cast<T>(loss);
      loss_sum += loss;
      weight_sum += w;
    }
  }
  if (params.reduction == KILN_LOSS_SUM) out[0] = static_cast<T>(loss_sum);
  if (params.reduction == KILN_LOSS_MEAN) out[0] = static_cast<T>(loss_sum / weight_sum);
  return KILN_KERR_OK;
}

struct NllLoss {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_loss_params& params) {
    const T* x = InputData<T>(call, 0);
    const int64_t inner = SplitAtAxis(call->inputs[0], 1).inner;
    return GatherLoss<T>(call, params,
                         [=](int64_t, int64_t first, int64_t c) { return static_cast<double>(x[first + c * inner]); });
  }
};

// log(sum_c exp(x[first + c * inner])), shifted by the line's maximum.
template <typename T>
KILN_ALWAYS_INLINE double LogSumExp(const T* x, int64_t first, int64_t len, int64_t inner) {
  double max = x[first];
  for (int64_t c = 1; c < len; ++c) max = x[first + c * inner] > max ? x[first + c * inner] : max;
  double sum = 0;
  for (int64_t c = 0; c < len; ++c) sum += exp(x[first + c * inner] - max);
  return max + log(sum);
}

// Outputs: the loss, then log_prob [N, C, d...] when the node has it.
struct SoftmaxCrossEntropy {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_loss_params& params) {
    const T* x = InputData<T>(call, 0);
    const AxisExtents e = SplitAtAxis(call->inputs[0], 1);
    if (call->num_outputs > 1 && call->outputs[1].data != nullptr) {
      T* log_prob = OutputData<T>(call, 1);
      ForEachAxisLine(e, [&](int64_t, int64_t first) {
        const double lse = LogSumExp(x, first, e.len, e.inner);
        for (int64_t c = 0; c < e.len; ++c) {
          log_prob[first + c * e.inner] = static_cast<T>(x[first + c * e.inner] - lse);
        }
      });
    }
    return GatherLoss<T>(call, params, [&](int64_t, int64_t first, int64_t c) {
      return static_cast<double>(x[first + c * e.inner]) - LogSumExp(x, first, e.len, e.inner);
    });
  }
};

}  // namespace

KILN_FLOAT_KERNEL(nll_loss, NllLoss, inputs[0].dtype)
KILN_FLOAT_KERNEL(softmax_cross_entropy, SoftmaxCrossEntropy, inputs[0].dtype)
