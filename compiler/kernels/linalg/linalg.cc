// Linear algebra: Einsum (any equation, as one loop nest over its labels) and Det (LU
// decomposition with partial pivoting, in double, in the call's scratch).
#include "kiln/kernels/linalg.h"
#include "kernel_common.h"

using namespace kiln_kernels;

namespace {

// Label ids: the 52 letters, then one per dim that '...' stands for, right-aligned.
constexpr int kMaxLabels = KILN_EINSUM_LETTERS + KILN_MAX_RANK;

// The equation resolved against the call's tensors: every label's extent, and per tensor
// (operands, then the output at index num_operands) the stride each label steps it by
// (summed where a label repeats in a term: a diagonal; 0 where it does not occur or a
// broadcast '...' dim is 1).
struct EinsumPlan {
  int64_t extent[kMaxLabels];
  int64_t strides[KILN_EINSUM_MAX_OPERANDS + 1][kMaxLabels];
  bool used[kMaxLabels];
  int32_t ellipsis_rank;
};

// The number of labels before the end marker and whether '...' is among them.
KILN_ALWAYS_INLINE int32_t TermLength(const int64_t* term, bool* has_ellipsis) {
  int32_t n = 0;
  *has_ellipsis = false;
  for (; n < KILN_EINSUM_MAX_TERM && term[n] != KILN_EINSUM_END; ++n) *has_ellipsis |= term[n] == KILN_EINSUM_ELLIPSIS;
  return n;
}

// Walks tensor t's axes against its term: f(axis, label id).
template <typename F>
KILN_ALWAYS_INLINE void ForEachAxisLabel(const int64_t* term, const kiln_ktensor& t, int32_t ellipsis_rank, F f) {
  bool has_ellipsis;
  const int32_t n = TermLength(term, &has_ellipsis);
  const int32_t covered = has_ellipsis ? t.rank - (n - 1) : 0;  // dims '...' stands for here
  int32_t axis = 0;
  for (int32_t k = 0; k < n; ++k) {
    if (term[k] != KILN_EINSUM_ELLIPSIS) {
      f(axis++, static_cast<int32_t>(term[k]));
      continue;
    }
    for (int32_t j = 0; j < covered; ++j) f(axis++, KILN_EINSUM_LETTERS + ellipsis_rank - covered + j);
  }
}

// Row-major strides of t's axes.
KILN_ALWAYS_INLINE void AxisStrides(const kiln_ktensor& t, int64_t* strides) {
  int64_t s = 1;
  for (int32_t a = t.rank; a-- > 0;) {
    strides[a] = s;
    s *= t.dims[a];
  }
}

KILN_ALWAYS_INLINE int32_t PlanEinsum(const kiln_kcall* call, const kiln_einsum_params& p, EinsumPlan* plan) {
  const int64_t ops = p.num_operands;
  if (ops < 1 || ops > KILN_EINSUM_MAX_OPERANDS || call->num_inputs != ops) return KILN_KERR_UNSUPPORTED;
  for (int i = 0; i < kMaxLabels; ++i) {
    plan->extent[i] = 1;
    plan->used[i] = false;
    for (int k = 0; k <= KILN_EINSUM_MAX_OPERANDS; ++k) plan->strides[k][i] = 0;
  }
  plan->ellipsis_rank = 0;
  for (int64_t k = 0; k < ops; ++k) {
    bool has_ellipsis;
    const int32_t n = TermLength(p.terms[k], &has_ellipsis);
    const int32_t covered = has_ellipsis ? call->inputs[k].rank - (n - 1) : 0;
    if (covered > plan->ellipsis_rank) plan->ellipsis_rank = covered;
  }
  auto tensor = [&](int64_t k) -> const kiln_ktensor& { return k < ops ? call->inputs[k] : call->outputs[0]; };
  for (int64_t k = 0; k <= ops; ++k) {  // extents: a dim of 1 broadcasts against a larger one
    ForEachAxisLabel(p.terms[k], tensor(k), plan->ellipsis_rank, [&](int32_t axis, int32_t label) {
      plan->used[label] = true;
      if (tensor(k).dims[axis] != 1) plan->extent[label] = tensor(k).dims[axis];
    });
  }
  for (int64_t k = 0; k <= ops; ++k) {
    int64_t axis_stride[KILN_MAX_RANK];
    AxisStrides(tensor(k), axis_stride);
    ForEachAxisLabel(p.terms[k], tensor(k), plan->ellipsis_rank, [&](int32_t axis, int32_t label) {
      if (tensor(k).dims[axis] == plan->extent[label]) plan->strides[k][label] += axis_stride[axis];
    });
  }
  return KILN_KERR_OK;
}

// The sum over the summed labels of the operands' product, from the operands' offsets at
// one output element: an odometer over all but the last summed label, the last one the
// inner loop (a dot product when it is a matrix product's inner dim).
template <typename T>
KILN_ALWAYS_INLINE T SumOfProducts(const kiln_kcall* call, const EinsumPlan& plan, int64_t ops, const int32_t* summed,
                                   int32_t num_summed, const int64_t* base) {
  const T* data[KILN_EINSUM_MAX_OPERANDS];
  for (int64_t k = 0; k < ops; ++k) data[k] = InputData<T>(call, static_cast<int32_t>(k));
  if (num_summed == 0) {
    T product = T(1);
    for (int64_t k = 0; k < ops; ++k) product *= data[k][base[k]];
    return product;
  }
  const int32_t inner = summed[num_summed - 1];
  const int64_t inner_extent = plan.extent[inner];
  int64_t offsets[KILN_EINSUM_MAX_OPERANDS], index[kMaxLabels] = {};
  for (int64_t k = 0; k < ops; ++k) offsets[k] = base[k];
  T sum = T(0);
  for (;;) {
    for (int64_t j = 0; j < inner_extent; ++j) {
      T product = T(1);
      for (int64_t k = 0; k < ops; ++k) product *= data[k][offsets[k] + j * plan.strides[k][inner]];
      sum += product;
    }
    int32_t d = num_summed - 2;
    for (; d >= 0; --d) {
      const int32_t label = summed[d];
      for (int64_t k = 0; k < ops; ++k) offsets[k] += plan.strides[k][label];
      if (++index[label] < plan.extent[label]) break;
      for (int64_t k = 0; k < ops; ++k) offsets[k] -= plan.strides[k][label] * plan.extent[label];
      index[label] = 0;
    }
    if (d < 0) return sum;
  }
}

// Each output element (in parallel over them) is the sum, over the labels not in the
// output, of the operands' product.
struct Einsum {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_einsum_params& p) {
    EinsumPlan plan;
    if (int32_t rc = PlanEinsum(call, p, &plan); rc != KILN_KERR_OK) return rc;
    const int64_t ops = p.num_operands;
    int32_t out_labels[KILN_MAX_RANK + KILN_EINSUM_MAX_TERM], num_out = 0, summed[kMaxLabels], num_summed = 0;
    bool in_output[kMaxLabels] = {};
    ForEachAxisLabel(p.terms[ops], call->outputs[0], plan.ellipsis_rank, [&](int32_t, int32_t label) {
      out_labels[num_out++] = label;
      in_output[label] = true;
    });
    for (int32_t i = 0; i < kMaxLabels; ++i) {
      if (plan.used[i] && !in_output[i]) {
        if (plan.extent[i] == 0) num_summed = -1;  // an empty sum
        if (num_summed >= 0) summed[num_summed++] = i;
      }
    }
    T* out = OutputData<T>(call);
    auto body = [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        int64_t base[KILN_EINSUM_MAX_OPERANDS] = {};
        for (int64_t rest = o, a = num_out - 1; a >= 0; --a) {  // o's index along each output label
          const int32_t label = out_labels[a];
          const int64_t i = rest % plan.extent[label];
          rest /= plan.extent[label];
          for (int64_t k = 0; k < ops; ++k) base[k] += i * plan.strides[k][label];
        }
        out[o] = num_summed < 0 ? T(0) : SumOfProducts<T>(call, plan, ops, summed, num_summed, base);
      }
    };
    ParallelFor(call, Numel(call->outputs[0]), 16, body);
    return KILN_KERR_OK;
  }
};

// inputs: X [*, M, M]; output [*]; scratch (the last output): M * M doubles.
struct Det {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& x = call->inputs[0];
    const int64_t m = x.dims[x.rank - 1], matrices = Numel(call->outputs[0]);  // 0 x 0: det 1
    double* a = static_cast<double*>(call->outputs[call->num_outputs - 1].data);
    const T* px = InputData<T>(call, 0);
    T* out = OutputData<T>(call);
    for (int64_t b = 0; b < matrices; ++b) {
      for (int64_t i = 0; i < m * m; ++i) a[i] = px[b * m * m + i];
      double det = 1;
      for (int64_t col = 0; col < m && det != 0; ++col) {
        int64_t pivot = col;
        for (int64_t r = col + 1; r < m; ++r) pivot = fabs(a[r * m + col]) > fabs(a[pivot * m + col]) ? r : pivot;
        if (pivot != col) {
          for (int64_t c = 0; c < m; ++c) {
            const double t = a[col * m + c];
            a[col * m + c] = a[pivot * m + c];
            a[pivot * m + c] = t;
          }
          det = -det;
        }
        det *= a[col * m + col];
        if (a[col * m + col] == 0) break;
        for (int64_t r = col + 1; r < m; ++r) {
          const double f = a[r * m + col] / a[col * m + col];
          for (int64_t c = col; c < m; ++c) a[r * m + c] -= f * a[col * m + c];
        }
      }
      out[b] = static_cast<T>(det);
    }
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_FLOAT_KERNEL(einsum, Einsum, outputs[0].dtype)
KILN_FLOAT_KERNEL(det, Det, inputs[0].dtype)
