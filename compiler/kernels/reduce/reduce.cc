// Reductions (ReduceSum … ReduceLogSumExp), ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax.
#include "kiln/kernels/reduce.h"
#include "fast_math.h"
#include "kernel_common.h"
#include "kernel_ops.h"

using namespace kiln_kernels;

namespace {

struct ReduceKernel {
  // Parameters: kiln_reduce_params' op and axes_mask (kiln/kernels/reduce.h).
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_reduce_params& params) {
    const kiln_ktensor& in = call->inputs[0];
    const int op = static_cast<int>(params.op);
    const int64_t mask = params.axes_mask;
    int64_t strides[kMaxRank];
    ContiguousStrides(in.dims, in.rank, strides);
    int64_t kept_dims[kMaxRank], kept_strides[kMaxRank], red_dims[kMaxRank], red_strides[kMaxRank];
    int32_t kept = 0, reduced = 0;
    int64_t reduce_count = 1;
    for (int32_t d = 0; d < in.rank; ++d) {
      if (mask & (int64_t{1} << d)) {
        red_dims[reduced] = in.dims[d];
        red_strides[reduced++] = strides[d];
        reduce_count *= in.dims[d];
      } else {
        kept_dims[kept] = in.dims[d];
        kept_strides[kept++] = strides[d];
      }
    }
    const T* pi = static_cast<const T*>(in.data);
    T* po = OutputData<T>(call);
    const int64_t out_n = Numel(call->outputs[0]);
    if constexpr (kFastKernels && std::is_same_v<T, float>) {
      // Sum, mean or max over trailing axes (GlobalAveragePool, LayerNorm's ReduceMean):
      // contiguous rows, reduced with 16 float partials that vectorize, rows in parallel.
      const int64_t suffix = reduced > 0 ? (int64_t{1} << in.rank) - (int64_t{1} << (in.rank - reduced)) : 0;
      if (mask == suffix && reduce_count > 0 &&
          (op == KILN_REDUCE_SUM || op == KILN_REDUCE_MEAN || op == KILN_REDUCE_MAX)) {
        return ReduceRows(call, pi, po, out_n, reduce_count, op);
      }
    }
    IndexWalker out_walker(kept_dims, kept);
    int64_t out_offset[1] = {0};
    const int64_t* out_strides[1] = {kept_strides};
    for (int64_t o = 0; o < out_n; ++o) {
      // Floating types accumulate in double: the oracle should not lose bits to order.
      using Acc = typename Select<T>::Acc;
      Acc acc = Init<Acc>(op);
      Acc max_value = 0;
      if (op == KILN_REDUCE_LOG_SUM_EXP) {
        if constexpr (kIsFloat<Acc>) {
          max_value = -INFINITY;
        } else {
          max_value = INT64_MIN;
        }
        Walk(pi + out_offset[0], red_dims, red_strides, reduced, reduce_count, [&](T v) {
          if (static_cast<Acc>(v) > max_value) max_value = static_cast<Acc>(v);
        });
        if (reduce_count == 0 || max_value == -INFINITY) max_value = 0;
      }
      Walk(pi + out_offset[0], red_dims, red_strides, reduced, reduce_count, [&](T value) {
        const Acc v = static_cast<Acc>(value);
        switch (op) {
          case KILN_REDUCE_SUM:
          case KILN_REDUCE_MEAN:
          case KILN_REDUCE_LOG_SUM: acc += v; break;
          case KILN_REDUCE_MAX:
            if (v > acc) acc = v;
            break;
          case KILN_REDUCE_MIN:
            if (v < acc) acc = v;
            break;
          case KILN_REDUCE_PROD: acc *= v; break;
          case KILN_REDUCE_L1: acc += v < 0 ? -v : v; break;
          case KILN_REDUCE_L2:
          case KILN_REDUCE_SUM_SQUARE: acc += v * v; break;
          case KILN_REDUCE_LOG_SUM_EXP: acc += static_cast<Acc>(exp(static_cast<double>(v - max_value))); break;
        }
      });
      switch (op) {
        case KILN_REDUCE_MEAN: acc = reduce_count ? static_cast<Acc>(acc / static_cast<Acc>(reduce_count)) : acc; break;
        case KILN_REDUCE_L2: acc = static_cast<Acc>(sqrt(static_cast<double>(acc))); break;
        case KILN_REDUCE_LOG_SUM: acc = static_cast<Acc>(log(static_cast<double>(acc))); break;
        case KILN_REDUCE_LOG_SUM_EXP: acc = static_cast<Acc>(log(static_cast<double>(acc))) + max_value; break;
      }
      po[o] = static_cast<T>(acc);
      out_walker.Next(out_offset, out_strides);
    }
    return KILN_KERR_OK;
  }

  __attribute__((noinline)) static int32_t ReduceRows(const kiln_kcall* call, const float* pi, float* po, int64_t rows,
                                                      int64_t n, int op) {
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* x = pi + r * n;
        float lanes[16];
        int64_t k = 0;
        if (op == KILN_REDUCE_MAX) {
          float m = -INFINITY;
          for (int l = 0; l < 16; ++l) lanes[l] = -INFINITY;
          for (; k + 16 <= n; k += 16) {
            for (int l = 0; l < 16; ++l) lanes[l] = x[k + l] > lanes[l] ? x[k + l] : lanes[l];
          }
          for (; k < n; ++k) m = x[k] > m ? x[k] : m;
          for (int l = 0; l < 16; ++l) m = lanes[l] > m ? lanes[l] : m;
          po[r] = m;
          continue;
        }
        const float sum = SumRow16(x, n, [](float v) { return v; });
        po[r] = op == KILN_REDUCE_MEAN ? sum / static_cast<float>(n) : sum;
      }
    };
    ParallelFor(call, rows, n >= 1024 ? 1 : 1024 / n + 1, body);
    return KILN_KERR_OK;
  }

  template <typename T, bool kFloat = kIsFloat<T>>
  struct Select {
    using Acc = int64_t;
  };
  template <typename T>
  struct Select<T, true> {
    using Acc = double;
  };

  template <typename Acc>
  static Acc Init(int op) {
    constexpr bool kFloatAcc = kIsFloat<Acc>;
    switch (op) {
      case KILN_REDUCE_MAX:
        if constexpr (kFloatAcc) return -INFINITY;
        return INT64_MIN;
      case KILN_REDUCE_MIN:
        if constexpr (kFloatAcc) return INFINITY;
        return INT64_MAX;
      case KILN_REDUCE_PROD: return 1;
      default: return 0;
    }
  }

  template <typename T, typename F>
  static void Walk(const T* base, const int64_t* dims, const int64_t* strides, int32_t rank, int64_t count, F f) {
    IndexWalker walker(dims, rank);
    int64_t offset[1] = {0};
    const int64_t* s[1] = {strides};
    for (int64_t i = 0; i < count; ++i) {
      f(base[offset[0]]);
      walker.Next(offset, s);
    }
  }
};

struct ArgReduce {
  // Parameters: kiln_reduce_params' op (1: ArgMin), axis and select_last_index.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_reduce_params& params) {
    const bool is_min = params.op != 0, last = params.select_last_index != 0;
    const AxisExtents e = SplitAtAxis(call->inputs[0], params.axis);
    const T* pi = InputData<T>(call, 0);
    int64_t* po = OutputData<int64_t>(call);
    ForEachAxisLine(e, [&](int64_t line, int64_t first) {
      int64_t best = 0;
      T best_value = pi[first];
      for (int64_t k = 1; k < e.len; ++k) {
        const T v = pi[first + k * e.inner];
        const bool better =
            is_min ? (last ? v <= best_value : v < best_value) : (last ? v >= best_value : v > best_value);
        if (better) {
          best = k;
          best_value = v;
        }
      }
      po[line] = best;
    });
    return KILN_KERR_OK;
  }
};

// Softmax / LogSoftmax over contiguous f32 rows (the last axis: attention scores,
// classifier heads): the max and the sum run on independent partial results so the loops
// vectorize without reassociation, and exp is FastExpNonPositiveV (<= 2 ulp; x - max is
// never positive) on vectors of V, 16 lanes where the target has them, instead of two
// double-precision libm calls per element. Not in the reference build (kFastKernels).
template <typename V>
static int32_t SoftmaxRows(const float* pi, float* po, int64_t rows, int64_t len, bool log_softmax,
                           const kiln_kcall* call) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* __restrict x = pi + row * len;
      float* __restrict y = po + row * len;
      // A NaN never becomes the maximum unless it is x[0], as in the reference.
      V lanes;  // (explicit vectors: 6 % faster than a loop over an array of lanes)
      KILN_SPLAT_V(V, lanes, x[0]);
      int64_t k = 0;
      for (; k + L <= len; k += L) {
        V v;
        memcpy(&v, x + k, sizeof(V));
        lanes = v > lanes ? v : lanes;
      }
      float max_value = x[0];
      for (int l = 0; l < L; ++l) max_value = lanes[l] > max_value ? lanes[l] : max_value;
      for (; k < len; ++k) max_value = x[k] > max_value ? x[k] : max_value;
      V sums = {}, shift;
      KILN_SPLAT_V(V, shift, max_value);
      k = 0;
      for (; k + L <= len; k += L) {
        V e;
        memcpy(&e, x + k, sizeof(V));
        e -= shift;
        FastExpNonPositiveV(e);
        if (!log_softmax) memcpy(y + k, &e, sizeof(V));
        sums += e;
      }
      // The tail as one more vector padded with the maximum, whose padding is neither
      // stored nor summed (ViT-S/16's 197-long rows ran 5 scalar exps each).
      float sum = 0.f;
      if (k < len) {
        alignas(64) float tail[L];
        for (int l = 0; l < L; ++l) tail[l] = k + l < len ? x[k + l] : max_value;
        V e;
        memcpy(&e, tail, sizeof(V));
        e -= shift;
        FastExpNonPositiveV(e);
        for (int64_t l = 0; l < len - k; ++l) {
          if (!log_softmax) y[k + l] = e[l];
          sum += e[l];
        }
      }
      for (int l = 0; l < L; ++l) sum += sums[l];
      if (log_softmax) {
        const float shift = max_value + static_cast<float>(log(static_cast<double>(sum)));
        for (int64_t q = 0; q < len; ++q) y[q] = x[q] - shift;
      } else {
        const float scale = 1.0f / sum;
        for (int64_t q = 0; q < len; ++q) y[q] *= scale;
      }
    }
  };
  ParallelFor(call, rows, 8, body);
  return KILN_KERR_OK;
}

struct Softmax {
  // Parameters: kiln_reduce_params' op (kiln_softmax_op), axis and coerce_2d.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_reduce_params& params) {
    const int op = static_cast<int>(params.op);
    const kiln_ktensor& in = call->inputs[0];
    const AxisExtents e = params.coerce_2d != 0 ? FlattenAtAxis(in, params.axis) : SplitAtAxis(in, params.axis);
    const int64_t outer = e.outer, len = e.len, inner = e.inner;
    const T* pi = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    if constexpr (std::is_same_v<T, float> && kFastKernels) {
      if (inner == 1 && op != KILN_HARDMAX) {
        if (WideVectors()) return SoftmaxRows<v16f>(pi, po, outer, len, op == KILN_LOG_SOFTMAX, call);
        return SoftmaxRows<v8f>(pi, po, outer, len, op == KILN_LOG_SOFTMAX, call);
      }
    }
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t o = row / inner, j = row % inner;
        const T* x = pi + o * len * inner + j;
        T* y = po + o * len * inner + j;
        T max_value = x[0];
        int64_t arg = 0;
        for (int64_t k = 1; k < len; ++k) {
          if (x[k * inner] > max_value) {
            max_value = x[k * inner];
            arg = k;
          }
        }
        if (op == KILN_HARDMAX) {
          for (int64_t k = 0; k < len; ++k) y[k * inner] = k == arg ? T(1) : T(0);
          continue;
        }
        double sum = 0;
        for (int64_t k = 0; k < len; ++k) sum += exp(static_cast<double>(x[k * inner] - max_value));
        if (op == KILN_LOG_SOFTMAX) {
          const double log_sum = log(sum);
          for (int64_t k = 0; k < len; ++k) y[k * inner] = static_cast<T>(x[k * inner] - max_value - log_sum);
        } else {
          for (int64_t k = 0; k < len; ++k)
            y[k * inner] = static_cast<T>(exp(static_cast<double>(x[k * inner] - max_value)) / sum);
        }
      }
    };
    ParallelFor(call, outer * inner, 64, body);
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_NUMERIC_KERNEL(reduce, ReduceKernel, inputs[0].dtype)
KILN_NUMERIC_KERNEL(arg_reduce, ArgReduce, inputs[0].dtype)
KILN_FLOAT_KERNEL(softmax, Softmax, inputs[0].dtype)
