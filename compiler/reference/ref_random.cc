// RandomUniform, RandomNormal, their *Like forms, Bernoulli and Multinomial. ONNX leaves the
// generator to the implementation; Kiln's is defined once, in kiln/kernels/random.h (draw i
// of a node from its key and i alone), and the distributions here follow that header's
// definitions, so a seeded node draws the same numbers in the reference as compiled.
#include <cmath>

#include "kiln/kernels/random.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

uint64_t KeyOf(const Node& node) {
  return node.has_attr("seed") ? kiln_random_seed_key(node.GetFloat("seed", 0.0)) : kiln_random_unseeded_key();
}

DType DTypeOf(const Node& node, DType fallback) {
  return node.has_attr("dtype") ? static_cast<DType>(node.GetInt("dtype", 1)) : fallback;
}

// Uniform or normal values of `dims`.
Tensor Draw(const Node& node, DType dtype, const std::vector<int64_t>& dims) {
  const bool normal = node.op() == "RandomNormal" || node.op() == "RandomNormalLike";
  const double a = normal ? node.GetFloat("mean", 0.0) : node.GetFloat("low", 0.0);
  const double b = normal ? node.GetFloat("scale", 1.0) : node.GetFloat("high", 1.0);
  const uint64_t key = KeyOf(node);
  Tensor out(dtype, dims);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const uint64_t at = static_cast<uint64_t>(i);
    StoreDouble(out, i, normal ? a + b * kiln_random_normal(key, at) : a + (b - a) * kiln_random_uniform(key, at));
  }
  return out;
}

Outputs RandomOp(const Node& node, const Inputs&) {
  return std::vector<Tensor>{Draw(node, DTypeOf(node, DType::kFloat32), node.GetInts("shape"))};
}

Outputs RandomLikeOp(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  return std::vector<Tensor>{Draw(node, DTypeOf(node, x->dtype()), x->dims())};
}

Outputs BernoulliOp(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(p, in, 0);
  const uint64_t key = KeyOf(node);
  Tensor out(DTypeOf(node, p->dtype()), p->dims());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    StoreDouble(out, i, kiln_random_uniform(key, static_cast<uint64_t>(i)) < LoadDouble(*p, i) ? 1.0 : 0.0);
  }
  return std::vector<Tensor>{std::move(out)};
}

// Sample s of row b: the class where the running sum of the row's softmax weights first
// passes u(b * samples + s) times their total.
Outputs MultinomialOp(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  if (x->dims().size() != 2) return Invalid("input must be [batch_size, class_size]");
  const int64_t batch = x->dims()[0], classes = x->dims()[1], samples = node.GetInt("sample_size", 1);
  const uint64_t key = KeyOf(node);
  Tensor out(DTypeOf(node, DType::kInt32), {batch, samples});
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> weights(static_cast<size_t>(classes));
    double peak = -INFINITY, total = 0;
    for (int64_t c = 0; c < classes; ++c) peak = std::max(peak, LoadDouble(*x, b * classes + c));
    for (int64_t c = 0; c < classes; ++c) total += weights[c] = std::exp(LoadDouble(*x, b * classes + c) - peak);
    for (int64_t s = 0; s < samples; ++s) {
      const double target = kiln_random_uniform(key, static_cast<uint64_t>(b * samples + s)) * total;
      int64_t chosen = classes - 1;
      double running = 0;
      for (int64_t c = 0; c < classes; ++c) {
        running += weights[c];
        if (running > target) {
          chosen = c;
          break;
        }
      }
      StoreInt(out, b * samples + s, chosen);
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

}  // namespace

void AddRandomOps(RefTable& table) {
  table["RandomUniform"] = RandomOp;
  table["RandomNormal"] = RandomOp;
  table["RandomUniformLike"] = RandomLikeOp;
  table["RandomNormalLike"] = RandomLikeOp;
  table["Bernoulli"] = BernoulliOp;
  table["Multinomial"] = MultinomialOp;
}

}  // namespace kiln::ref
