// MatMul and Gemm, from the ONNX specification (numpy matmul semantics for MatMul).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {

absl::StatusOr<Dense> MatMulDense(const Dense& a_in, const Dense& b_in) {
  Dense a = a_in, b = b_in;
  if (a.dims.empty() || b.dims.empty()) return Invalid("MatMul operands must have rank 1 or more");
  const bool a_vector = a.dims.size() == 1, b_vector = b.dims.size() == 1;
  if (a_vector) a.dims.insert(a.dims.begin(), 1);
  if (b_vector) b.dims.push_back(1);
  const int64_t m = a.dims[a.dims.size() - 2], k = a.dims.back(), n = b.dims.back();
  if (b.dims[b.dims.size() - 2] != k) {
    return Invalid(absl::StrCat("MatMul of [", absl::StrJoin(a_in.dims, ","), "] and [", absl::StrJoin(b_in.dims, ","),
                                "]: inner dimensions differ"));
  }
  const std::vector<int64_t> a_batch(a.dims.begin(), a.dims.end() - 2), b_batch(b.dims.begin(), b.dims.end() - 2);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> batch, BroadcastDims({a_batch, b_batch}));
  const std::vector<int64_t> a_strides = BroadcastStrides(a_batch, batch), b_strides = BroadcastStrides(b_batch, batch);
  Dense y;
  y.dims = batch;
  if (!a_vector) y.dims.push_back(m);
  if (!b_vector) y.dims.push_back(n);
  const int64_t batches = NumElements(batch);
  y.values.assign(batches * m * n, 0.0);
  std::vector<int64_t> index(batch.size(), 0);
  for (int64_t t = 0; t < batches; ++t) {
    const double* pa = &a.values[Dot(index, a_strides) * m * k];
    const double* pb = &b.values[Dot(index, b_strides) * k * n];
    double* py = &y.values[t * m * n];
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const double av = pa[i * k + p];
        for (int64_t j = 0; j < n; ++j) py[i * n + j] += av * pb[p * n + j];
      }
    }
    NextIndex(index, batch);
  }
  return y;
}

namespace {

Outputs MatMul(const Node&, const Inputs& in) {
  KILN_REF_INPUT(a, in, 0);
  KILN_REF_INPUT(b, in, 1);
  KILN_ASSIGN_OR_RETURN(Dense y, MatMulDense(ToDense(*a), ToDense(*b)));
  return std::vector<Tensor>{FromDense(y, a->dtype())};
}

Dense Transposed2d(const Dense& x) {
  Dense t{{x.dims[1], x.dims[0]}, std::vector<double>(x.values.size())};
  for (int64_t i = 0; i < x.dims[0]; ++i) {
    for (int64_t j = 0; j < x.dims[1]; ++j) t.values[j * x.dims[0] + i] = x.values[i * x.dims[1] + j];
  }
  return t;
}

// Y = alpha * A' B' + beta * C, with C broadcast to [M, N].
Outputs Gemm(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(a_input, in, 0);
  KILN_REF_INPUT(b_input, in, 1);
  if (a_input->rank() != 2 || b_input->rank() != 2) return Invalid("Gemm needs 2-D A and B");
  Dense a = ToDense(*a_input), b = ToDense(*b_input);
  if (node.GetInt("transA", 0) != 0) a = Transposed2d(a);
  if (node.GetInt("transB", 0) != 0) b = Transposed2d(b);
  KILN_ASSIGN_OR_RETURN(Dense y, MatMulDense(a, b));
  const double alpha = node.GetFloat("alpha", 1.0), beta = node.GetFloat("beta", 1.0);
  for (double& v : y.values) v *= alpha;
  if (const Tensor* c = OptionalInput(in, 2)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastDims({y.dims, c->dims()}));
    if (dims != y.dims) return Invalid("C does not broadcast to [M, N]");
    const std::vector<int64_t> strides = BroadcastStrides(c->dims(), y.dims);
    std::vector<int64_t> index(2, 0);
    for (double& v : y.values) {
      v += beta * LoadDouble(*c, Dot(index, strides));
      NextIndex(index, y.dims);
    }
  }
  return std::vector<Tensor>{FromDense(y, a_input->dtype())};
}

}  // namespace

void AddMatMulOps(RefTable& table) {
  table["MatMul"] = MatMul;
  table["Gemm"] = Gemm;
}

}  // namespace kiln::ref
