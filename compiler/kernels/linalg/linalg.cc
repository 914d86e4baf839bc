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

struct Einsum {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_einsum_params& p) {
    EinsumPlan plan;
    if (int32_t rc = PlanEinsum(call, p, &plan); rc != KILN_KERR_OK) return rc;
    const int64_t ops = p.num_operands;
    // The loop nest: every used label, output labels and summed ones alike; the output
    // (zeroed first) accumulates the product of the operands at each point.
    int32_t labels[kMaxLabels], count = 0;
    for (int32_t i = 0; i < kMaxLabels; ++i) {
      if (plan.used[i]) labels[count++] = i;
    }
    T* out = OutputData<T>(call);
    const int64_t out_n = Numel(call->outputs[0]);
    for (int64_t i = 0; i < out_n; ++i) out[i] = T(0);
    int64_t index[kMaxLabels] = {};
    int64_t offsets[KILN_EINSUM_MAX_OPERANDS + 1] = {};
    for (int32_t i = 0; i < count; ++i) {
      if (plan.extent[labels[i]] == 0) return KILN_KERR_OK;
    }
    for (;;) {
      T product = T(1);
      for (int64_t k = 0; k < ops; ++k) product *= InputData<T>(call, static_cast<int32_t>(k))[offsets[k]];
      out[offsets[ops]] += product;
      int32_t d = count - 1;
      for (; d >= 0; --d) {  // the odometer: the last label fastest
        const int32_t label = labels[d];
        for (int64_t k = 0; k <= ops; ++k) offsets[k] += plan.strides[k][label];
        if (++index[label] < plan.extent[label]) break;
        for (int64_t k = 0; k <= ops; ++k) offsets[k] -= plan.strides[k][label] * plan.extent[label];
        index[label] = 0;
      }
      if (d < 0) break;
    }
    return KILN_KERR_OK;
  }
};

// inputs: X [*, M, M]; output [*]; scratch (the last output): M * M doubles.
struct Det {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& x = call->inputs[0];
    const int64_t m = x.dims[x.rank - 1], matrices = Numel(x) / (m * m > 0 ? m * m : 1);
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
