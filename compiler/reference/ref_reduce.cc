// Reductions and ops along an axis, from the ONNX specification: Reduce*, ArgMax/ArgMin,
// Softmax/LogSoftmax/Hardmax, CumSum. Each output element gathers its input elements into a
// list and a plain function of that list gives its value.
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

using ReduceFn = double (*)(const std::vector<double>&);

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double Mean(const std::vector<double>& v) { return Sum(v) / static_cast<double>(v.size()); }
double Maximum(const std::vector<double>& v) {
  double m = -INFINITY;
  for (double x : v) m = std::isnan(x) || x > m ? x : m;
  return m;
}
double Minimum(const std::vector<double>& v) {
  double m = INFINITY;
  for (double x : v) m = std::isnan(x) || x < m ? x : m;
  return m;
}
double Product(const std::vector<double>& v) {
  double p = 1;
  for (double x : v) p *= x;
  return p;
}
double LogSum(const std::vector<double>& v) { return std::log(Sum(v)); }
// Shifted by the maximum so that large inputs do not overflow exp; mathematically the same.
double LogSumExp(const std::vector<double>& v) {
  const double m = Maximum(v);
  if (!std::isfinite(m)) return m == -INFINITY ? -INFINITY : m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
double SumSquare(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}
double L1(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::fabs(x);
  return s;
}
double L2(const std::vector<double>& v) { return std::sqrt(SumSquare(v)); }

// The axes a Reduce* node reduces over: an attribute before the opset that made them an
// input (13 for ReduceSum, 18 for the rest). None given: all axes, unless
// noop_with_empty_axes, which reduces over none: each element is a group of its own, so the
// op's per-element part still applies (ReduceL1 gives |x|, ReduceSumSquare x*x, as the ONNX
// reference and ONNX Runtime do), not an identity.
absl::StatusOr<std::set<int64_t>> ReduceAxes(const Node& node, const Inputs& in, int64_t rank) {
  const std::vector<int64_t> axes = AxesFromAttrOrInput(node, in, "axes", 1);
  std::set<int64_t> result;
  if (axes.empty()) {
    if (node.GetInt("noop_with_empty_axes", 0) != 0) return result;
    for (int64_t a = 0; a < rank; ++a) result.insert(a);
    return result;
  }
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(a, rank));
    result.insert(axis);
  }
  return result;
}

Outputs Reduce(const Node& node, const Inputs& in, ReduceFn fn) {
  KILN_REF_INPUT(x, in, 0);
  KILN_ASSIGN_OR_RETURN(std::set<int64_t> axes, ReduceAxes(node, in, x->rank()));
  const bool keepdims = node.GetInt("keepdims", 1) != 0;
  std::vector<int64_t> kept_dims, out_dims;
  for (int64_t a = 0; a < x->rank(); ++a) {
    const bool reduced = axes.count(a) != 0;
    kept_dims.push_back(reduced ? 1 : x->dims()[a]);
    if (!reduced || keepdims) out_dims.push_back(reduced ? 1 : x->dims()[a]);
  }
  std::vector<std::vector<double>> groups(NumElements(kept_dims));
  const std::vector<int64_t> kept_strides = Strides(kept_dims);
  std::vector<int64_t> index(x->rank(), 0);
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    int64_t group = 0;
    for (int64_t a = 0; a < x->rank(); ++a) group += (axes.count(a) ? 0 : index[a]) * kept_strides[a];
    groups[group].push_back(LoadDouble(*x, i));
    NextIndex(index, x->dims());
  }
  Tensor out(x->dtype(), out_dims);
  for (int64_t g = 0; g < static_cast<int64_t>(groups.size()); ++g) StoreDouble(out, g, fn(groups[g]));
  return std::vector<Tensor>{std::move(out)};
}

// A tensor seen as [outer, length, inner] around the axis an op works along.
struct Lines {
  int64_t outer = 1, length = 1, inner = 1;
  int64_t At(int64_t o, int64_t k, int64_t i) const { return (o * length + k) * inner + i; }
};

Lines LinesAround(const std::vector<int64_t>& dims, int64_t first, int64_t last) {
  Lines lines;
  for (int64_t a = 0; a < static_cast<int64_t>(dims.size()); ++a) {
    if (a < first) lines.outer *= dims[a];
    if (a >= first && a <= last) lines.length *= dims[a];
    if (a > last) lines.inner *= dims[a];
  }
  return lines;
}

Outputs ArgExtreme(const Node& node, const Inputs& in, bool want_max) {
  KILN_REF_INPUT(x, in, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), x->rank()));
  const bool keepdims = node.GetInt("keepdims", 1) != 0, last = node.GetInt("select_last_index", 0) != 0;
  std::vector<int64_t> out_dims;
  for (int64_t a = 0; a < x->rank(); ++a) {
    if (a != axis) out_dims.push_back(x->dims()[a]);
    if (a == axis && keepdims) out_dims.push_back(1);
  }
  const Lines lines = LinesAround(x->dims(), axis, axis);
  Tensor out(DType::kInt64, out_dims);
  for (int64_t o = 0; o < lines.outer; ++o) {
    for (int64_t i = 0; i < lines.inner; ++i) {
      int64_t best = 0;
      double best_value = LoadDouble(*x, lines.At(o, 0, i));
      for (int64_t k = 1; k < lines.length; ++k) {
        const double v = LoadDouble(*x, lines.At(o, k, i));
        const bool better =
            want_max ? (v > best_value || (last && v == best_value)) : (v < best_value || (last && v == best_value));
        if (better) best = k, best_value = v;
      }
      StoreInt(out, o * lines.inner + i, best);
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// Before opset 13 these ops flatten the input to 2-D at `axis` (default 1) and work along
// the second dimension; from 13 they work along the one axis (default -1).
Outputs SoftmaxFamily(const Node& node, const Inputs& in, SoftmaxKind kind) {
  KILN_REF_INPUT(x, in, 0);
  const bool coerce_2d = node.opset() < 13;
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", coerce_2d ? 1 : -1), x->rank()));
  const Lines lines = LinesAround(x->dims(), axis, coerce_2d ? x->rank() - 1 : axis);
  Tensor out(x->dtype(), x->dims());
  std::vector<double> line(lines.length);
  for (int64_t o = 0; o < lines.outer; ++o) {
    for (int64_t i = 0; i < lines.inner; ++i) {
      for (int64_t k = 0; k < lines.length; ++k) line[k] = LoadDouble(*x, lines.At(o, k, i));
      const double m = Maximum(line);
      int64_t first_max = 0;
      while (first_max + 1 < lines.length && line[first_max] != m) ++first_max;
      double sum = 0;
      for (double v : line) sum += std::exp(v - m);
      for (int64_t k = 0; k < lines.length; ++k) {
        double y = 0;
        if (kind == SoftmaxKind::kSoftmax) y = std::exp(line[k] - m) / sum;
        if (kind == SoftmaxKind::kLogSoftmax) y = line[k] - m - std::log(sum);
        if (kind == SoftmaxKind::kHardmax) y = k == first_max ? 1.0 : 0.0;
        StoreDouble(out, lines.At(o, k, i), y);
      }
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

Outputs CumSum(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(axis_input, in, 1);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(LoadInt(*axis_input, 0), x->rank()));
  const bool exclusive = node.GetInt("exclusive", 0) != 0, reverse = node.GetInt("reverse", 0) != 0;
  const Lines lines = LinesAround(x->dims(), axis, axis);
  const bool real = IsFloatType(x->dtype());
  Tensor out(x->dtype(), x->dims());
  for (int64_t o = 0; o < lines.outer; ++o) {
    for (int64_t i = 0; i < lines.inner; ++i) {
      double real_sum = 0;
      int64_t int_sum = 0;
      for (int64_t step = 0; step < lines.length; ++step) {
        const int64_t at = lines.At(o, reverse ? lines.length - 1 - step : step, i);
        if (!exclusive) real_sum += LoadDouble(*x, at), int_sum += LoadInt(*x, at);
        if (real) StoreDouble(out, at, real_sum);
        if (!real) StoreInt(out, at, int_sum);
        if (exclusive) real_sum += LoadDouble(*x, at), int_sum += LoadInt(*x, at);
      }
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

void AddReduce(RefTable& table, const char* op, ReduceFn fn) {
  table[op] = [fn](const Node& node, const Inputs& in) { return Reduce(node, in, fn); };
}

}  // namespace

void AddReduceOps(RefTable& table) {
  AddReduce(table, "ReduceSum", Sum);
  AddReduce(table, "ReduceMean", Mean);
  AddReduce(table, "ReduceMax", Maximum);
  AddReduce(table, "ReduceMin", Minimum);
  AddReduce(table, "ReduceProd", Product);
  AddReduce(table, "ReduceLogSum", LogSum);
  AddReduce(table, "ReduceLogSumExp", LogSumExp);
  AddReduce(table, "ReduceSumSquare", SumSquare);
  AddReduce(table, "ReduceL1", L1);
  AddReduce(table, "ReduceL2", L2);
  table["ArgMax"] = [](const Node& node, const Inputs& in) { return ArgExtreme(node, in, true); };
  table["ArgMin"] = [](const Node& node, const Inputs& in) { return ArgExtreme(node, in, false); };
  table["Softmax"] = [](const Node& node, const Inputs& in) { return SoftmaxFamily(node, in, SoftmaxKind::kSoftmax); };
  table["LogSoftmax"] = [](const Node& node, const Inputs& in) {
    return SoftmaxFamily(node, in, SoftmaxKind::kLogSoftmax);
  };
  table["Hardmax"] = [](const Node& node, const Inputs& in) { return SoftmaxFamily(node, in, SoftmaxKind::kHardmax); };
  table["CumSum"] = CumSum;
}

}  // namespace kiln::ref
