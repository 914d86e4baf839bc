// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, from the ONNX specification.
#include <algorithm>
#include <cmath>
#include <string>

#include "ref_nn_util.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

// loss[n][d1]... = -input[n][t][d1]... * weight[t] with t = target[n][d1]...; a target equal
// to ignore_index gives 0 and weighs 0. "mean" is sum(loss) / sum(weights of the targets
// not ignored), "sum" the sum, "none" the loss itself.
Result Nll(const Node& node, DType dtype, const std::vector<int64_t>& dims, const std::vector<double>& log_prob,
           const Tensor& target, const Tensor* weight) {
  const std::vector<int64_t> target_dims = target.dims();
  const std::vector<int64_t> labels = Ints(target);
  const bool has_ignore = node.has_attr("ignore_index");
  const int64_t ignore = node.GetInt("ignore_index", 0);
  std::vector<double> loss(labels.size());
  double total = 0, weight_total = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t t = labels[i];
    if (has_ignore && t == ignore) continue;
    if (t < 0 || t >= dims[1]) return absl::InvalidArgumentError("a target is out of the class range");
    std::vector<int64_t> index = Unflatten(target_dims, static_cast<int64_t>(i));
    index.insert(index.begin() + 1, t);
    const double w = weight != nullptr ? weight->GetAsDouble(t) : 1.0;
    loss[i] = -log_prob[Flatten(dims, index)] * w;
    total += loss[i];
    weight_total += w;
  }
  const std::string reduction = node.GetString("reduction", "mean");
  if (reduction == "none") return std::vector<Tensor>{FloatTensor(dtype, target_dims, loss)};
  if (reduction == "sum") return std::vector<Tensor>{FloatTensor(dtype, {}, {total})};
  if (reduction == "mean") return std::vector<Tensor>{FloatTensor(dtype, {}, {total / weight_total})};
  return absl::InvalidArgumentError("reduction '" + reduction + "' is not none, sum or mean");
}

Result NegativeLogLikelihoodLoss(const Node& node, const Inputs& in) {
  return Nll(node, in[0]->dtype(), in[0]->dims(), Doubles(*in[0]), *in[1], in.size() > 2 ? in[2] : nullptr);
}

// log_prob = log(softmax(scores, axis 1)); the loss is the NLL of log_prob.
Result SoftmaxCrossEntropyLoss(const Node& node, const Inputs& in) {
  const std::vector<int64_t> dims = in[0]->dims();
  const std::vector<double> scores = Doubles(*in[0]);
  std::vector<double> log_prob(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    std::vector<int64_t> index = Unflatten(dims, static_cast<int64_t>(i));
    double max = -INFINITY, sum = 0;  // log(sum(exp(s))) = max + log(sum(exp(s - max))), no overflow
    for (int64_t c = 0; c < dims[1]; ++c) {
      index[1] = c;
      max = std::max(max, scores[Flatten(dims, index)]);
    }
    for (int64_t c = 0; c < dims[1]; ++c) {
      index[1] = c;
      sum += std::exp(scores[Flatten(dims, index)] - max);
    }
    log_prob[i] = scores[i] - max - std::log(sum);
  }
  Result results = Nll(node, in[0]->dtype(), dims, log_prob, *in[1], in.size() > 2 ? in[2] : nullptr);
  if (results.ok() && node.outputs().size() > 1) results->push_back(FloatTensor(in[0]->dtype(), dims, log_prob));
  return results;
}

}  // namespace

void AddLossOps(RefTable& table) {
  table["NegativeLogLikelihoodLoss"] = NegativeLogLikelihoodLoss;
  table["SoftmaxCrossEntropyLoss"] = SoftmaxCrossEntropyLoss;
}

}  // namespace kiln::ref
