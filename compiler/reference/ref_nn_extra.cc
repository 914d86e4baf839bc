// MeanVarianceNormalization, ReverseSequence and Dropout, from the ONNX specification.
#include <algorithm>
#include <cmath>
#include <random>

#include "ref_nn_util.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

// Y = (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9), the expectations over `axes`
// (default [0, 2, 3]): the specification's function body.
Result MeanVarianceNormalization(const Node& node, const Inputs& in) {
  const std::vector<int64_t> dims = in[0]->dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<bool> reduced(dims.size(), false);
  for (int64_t axis : node.GetInts("axes", {0, 2, 3})) reduced[axis < 0 ? axis + rank : axis] = true;
  const std::vector<double> x = Doubles(*in[0]);
  // Each element's group: its index with the reduced axes set to 0.
  auto group = [&](int64_t i) {
    std::vector<int64_t> index = Unflatten(dims, i);
    for (size_t d = 0; d < dims.size(); ++d) index[d] = reduced[d] ? 0 : index[d];
    return Flatten(dims, index);
  };
  std::vector<double> sum(x.size(), 0.0), squares(x.size(), 0.0), count(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t g = group(static_cast<int64_t>(i));
    sum[g] += x[i];
    squares[g] += x[i] * x[i];
    count[g] += 1;
  }
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t g = group(static_cast<int64_t>(i));
    const double mean = sum[g] / count[g];
    // The variance cannot be negative, but E[X^2] - E[X]^2 can round below 0 (a constant
    // group): taken as 0, as the kernel does, rather than a NaN from the square root.
    y[i] = (x[i] - mean) / (std::sqrt(std::max(squares[g] / count[g] - mean * mean, 0.0)) + 1e-9);
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), dims, y)};
}

// Along time_axis, batch entry b's first sequence_lens[b] elements in reverse order, the
// rest as they were; works on the bytes, so any element type.
Result ReverseSequence(const Node& node, const Inputs& in) {
  const std::vector<int64_t> dims = in[0]->dims();
  const int64_t time = node.GetInt("time_axis", 0), batch = node.GetInt("batch_axis", 1);
  const std::vector<int64_t> lens = Ints(*in[1]);
  Tensor out(in[0]->dtype(), dims);
  const int64_t size = DTypeSize(in[0]->dtype());
  const auto* src = static_cast<const unsigned char*>(in[0]->data());
  auto* dst = static_cast<unsigned char*>(out.data());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::vector<int64_t> index = Unflatten(dims, i);
    const int64_t len = lens[index[batch]];
    if (len < 0 || len > dims[time]) return absl::InvalidArgumentError("a sequence length is out of range");
    if (index[time] < len) index[time] = len - 1 - index[time];
    const int64_t from = Flatten(dims, index);
    for (int64_t b = 0; b < size; ++b) dst[i * size + b] = src[from * size + b];
  }
  return std::vector<Tensor>{std::move(out)};
}

// Dropout: out of training (training_mode absent or false) or at ratio 0, the input and an
// all-true mask. In training the specification leaves the draws to the implementation;
// Kiln draws as ONNX's reference does, numpy.random.seed(seed) then uniform(0, 1) per
// element: MT19937 (std::mt19937 shares its seeding) and numpy's 53-bit doubles.
double NumpyUniform(std::mt19937& generator) {
  const double a = static_cast<double>(generator() >> 5), b = static_cast<double>(generator() >> 6);
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

Result Dropout(const Node& node, const Inputs& in) {
  const double ratio = in.size() > 1 && in[1] != nullptr ? in[1]->GetAsDouble(0) : 0.5;
  const bool training = in.size() > 2 && in[2] != nullptr && in[2]->GetAsInt64(0) != 0;
  const std::vector<double> x = Doubles(*in[0]);
  std::vector<double> y(x.size());
  Tensor mask(DType::kBool, in[0]->dims());
  std::mt19937 generator(static_cast<uint32_t>(node.GetInt("seed", 0)));
  for (size_t i = 0; i < x.size(); ++i) {
    const bool keep = !training || ratio == 0 || NumpyUniform(generator) >= ratio;
    y[i] = keep ? (training && ratio != 0 ? x[i] / (1 - ratio) : x[i]) : 0.0;
    mask.data_as<uint8_t>()[i] = keep ? 1 : 0;
  }
  std::vector<Tensor> results{FloatTensor(in[0]->dtype(), in[0]->dims(), y)};
  if (node.outputs().size() > 1) results.push_back(std::move(mask));
  return results;
}

}  // namespace

void AddNnExtraOps(RefTable& table) {
  table["Dropout"] = Dropout;
  table["MeanVarianceNormalization"] = MeanVarianceNormalization;
  table["ReverseSequence"] = ReverseSequence;
}

}  // namespace kiln::ref
