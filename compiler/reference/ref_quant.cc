// Quantization ops, from the ONNX specification: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, and the integer / quantized forms of MatMul and Conv, computed
// exactly in double (int8 products and their sums are exact there) and requantized with
// round-half-to-even and saturation.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

// A scale or zero point that is a scalar or has one element per index along an axis.
double PerAxis(const Tensor* t, int64_t index) {
  if (t == nullptr) return 0.0;
  return LoadDouble(*t, t->num_elements() == 1 ? 0 : index);
}

std::pair<double, double> Range(DType dtype) {
  switch (dtype) {
    case DType::kInt8: return {-128, 127};
    case DType::kUInt8: return {0, 255};
    case DType::kInt16: return {-32768, 32767};
    case DType::kUInt16: return {0, 65535};
    case DType::kInt32: return {-2147483648.0, 2147483647.0};
    default: return {-INFINITY, INFINITY};
  }
}

// The specification divides x by the scale in x's type; the quotient is rounded to that type
// before it is rounded to an integer (x / scale can land just off a .5 in double).
double RoundTo(double v, DType dtype) {
  Tensor t(dtype, {});
  StoreDouble(t, 0, v);
  return LoadDouble(t, 0);
}

double Saturate(double v, DType dtype) {
  const auto [lo, hi] = Range(dtype);
  return std::clamp(v, lo, hi);
}

// Index along `axis` of flat element i of a tensor with `dims`.
int64_t IndexAlong(int64_t i, const std::vector<int64_t>& dims, int64_t axis) {
  int64_t inner = 1;
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  return (i / inner) % dims[axis];
}

Outputs QuantizeLinear(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(scale, in, 1);
  const Tensor* zero_point = OptionalInput(in, 2);
  const DType dtype = zero_point ? zero_point->dtype() : DType::kUInt8;
  int64_t axis = 0;
  if (scale->num_elements() > 1) {
    KILN_ASSIGN_OR_RETURN(axis, NormalizeAxis(node.GetInt("axis", 1), x->rank()));
  }
  Tensor out(dtype, x->dims());
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const int64_t c = scale->num_elements() == 1 ? 0 : IndexAlong(i, x->dims(), axis);
    const double q =
        std::nearbyint(RoundTo(LoadDouble(*x, i) / PerAxis(scale, c), x->dtype())) + PerAxis(zero_point, c);
    StoreDouble(out, i, Saturate(q, dtype));
  }
  return std::vector<Tensor>{std::move(out)};
}

Outputs DequantizeLinear(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(scale, in, 1);
  const Tensor* zero_point = OptionalInput(in, 2);
  int64_t axis = 0;
  if (scale->num_elements() > 1) {
    KILN_ASSIGN_OR_RETURN(axis, NormalizeAxis(node.GetInt("axis", 1), x->rank()));
  }
  Tensor out(scale->dtype(), x->dims());
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const int64_t c = scale->num_elements() == 1 ? 0 : IndexAlong(i, x->dims(), axis);
    StoreDouble(out, i, (LoadDouble(*x, i) - PerAxis(zero_point, c)) * PerAxis(scale, c));
  }
  return std::vector<Tensor>{std::move(out)};
}

// y_scale = (max(0, max x) - min(0, min x)) / 255, y_zero_point = saturate(round(-min / scale)),
// y = saturate(round(x / y_scale) + y_zero_point), all to uint8.
Outputs DynamicQuantizeLinear(const Node&, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  double lo = 0, hi = 0;
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    lo = std::min(lo, LoadDouble(*x, i));
    hi = std::max(hi, LoadDouble(*x, i));
  }
  Tensor scale(DType::kFloat32, {}), zero_point(DType::kUInt8, {}), y(DType::kUInt8, x->dims());
  StoreDouble(scale, 0, (hi - lo) / 255.0);
  const double s = LoadDouble(scale, 0);  // the float32 scale is what the outputs are defined with
  const double zp = s == 0 ? 0 : Saturate(std::nearbyint(-lo / s), DType::kUInt8);
  StoreDouble(zero_point, 0, zp);
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const double q = std::nearbyint(RoundTo(LoadDouble(*x, i) / s, x->dtype()));
    StoreDouble(y, i, s == 0 ? zp : Saturate(q + zp, DType::kUInt8));
  }
  std::vector<Tensor> results;
  results.push_back(std::move(y));
  results.push_back(std::move(scale));
  results.push_back(std::move(zero_point));
  return results;
}

// `t` minus its zero point, which is a scalar or has one element per index along `axis`.
Dense Shifted(const Tensor& t, const Tensor* zero_point, int64_t axis) {
  Dense dense = ToDense(t);
  if (zero_point == nullptr) return dense;
  for (int64_t i = 0; i < static_cast<int64_t>(dense.values.size()); ++i) {
    const int64_t c = zero_point->num_elements() == 1 ? 0 : IndexAlong(i, dense.dims, axis);
    dense.values[i] -= LoadDouble(*zero_point, c);
  }
  return dense;
}

// A per-row zero point of A is along A's second-to-last axis; B's per-column one along its last.
int64_t RowAxis(const Tensor& t) { return std::max<int64_t>(t.rank() - 2, 0); }
int64_t ColumnAxis(const Tensor& t) { return t.rank() - 1; }

Outputs MatMulInteger(const Node&, const Inputs& in) {
  KILN_REF_INPUT(a, in, 0);
  KILN_REF_INPUT(b, in, 1);
  KILN_ASSIGN_OR_RETURN(Dense y, MatMulDense(Shifted(*a, OptionalInput(in, 2), RowAxis(*a)),
                                             Shifted(*b, OptionalInput(in, 3), ColumnAxis(*b))));
  return std::vector<Tensor>{FromDense(y, DType::kInt32)};
}

// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
Outputs QLinearMatMul(const Node&, const Inputs& in) {
  KILN_REF_INPUT(a, in, 0);
  KILN_REF_INPUT(a_scale, in, 1);
  KILN_REF_INPUT(b, in, 3);
  KILN_REF_INPUT(b_scale, in, 4);
  KILN_REF_INPUT(y_scale, in, 6);
  const Tensor* y_zero_point = OptionalInput(in, 7);
  KILN_ASSIGN_OR_RETURN(Dense y, MatMulDense(Shifted(*a, OptionalInput(in, 2), RowAxis(*a)),
                                             Shifted(*b, OptionalInput(in, 5), ColumnAxis(*b))));
  const DType dtype = y_zero_point ? y_zero_point->dtype() : DType::kUInt8;
  const int64_t n = y.dims.back(), m = y.dims.size() > 1 ? y.dims[y.dims.size() - 2] : 1;
  for (int64_t i = 0; i < static_cast<int64_t>(y.values.size()); ++i) {
    const double scale = PerAxis(a_scale, (i / n) % m) * PerAxis(b_scale, i % n) / LoadDouble(*y_scale, 0);
    y.values[i] = Saturate(std::nearbyint(y.values[i] * scale) + PerAxis(y_zero_point, 0), dtype);
  }
  return std::vector<Tensor>{FromDense(y, dtype)};
}

Outputs ConvInteger(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(w, in, 1);
  KILN_ASSIGN_OR_RETURN(Dense y,
                        Convolve(node, Shifted(*x, OptionalInput(in, 2), 1), Shifted(*w, OptionalInput(in, 3), 0)));
  return std::vector<Tensor>{FromDense(y, DType::kInt32)};
}

// Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B.
Outputs QLinearConv(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(x_scale, in, 1);
  KILN_REF_INPUT(w, in, 3);
  KILN_REF_INPUT(w_scale, in, 4);
  KILN_REF_INPUT(y_scale, in, 6);
  const Tensor* y_zero_point = OptionalInput(in, 7);
  const Tensor* bias = OptionalInput(in, 8);
  KILN_ASSIGN_OR_RETURN(Dense y,
                        Convolve(node, Shifted(*x, OptionalInput(in, 2), 1), Shifted(*w, OptionalInput(in, 5), 0)));
  const DType dtype = y_zero_point ? y_zero_point->dtype() : DType::kUInt8;
  const int64_t maps = y.dims[1], plane = static_cast<int64_t>(y.values.size()) / (y.dims[0] * maps);
  for (int64_t i = 0; i < static_cast<int64_t>(y.values.size()); ++i) {
    const int64_t m = (i / plane) % maps;
    const double acc = y.values[i] + (bias ? LoadDouble(*bias, m) : 0.0);
    const double scale = LoadDouble(*x_scale, 0) * PerAxis(w_scale, m) / LoadDouble(*y_scale, 0);
    y.values[i] = Saturate(std::nearbyint(acc * scale) + PerAxis(y_zero_point, 0), dtype);
  }
  return std::vector<Tensor>{FromDense(y, dtype)};
}

}  // namespace

void AddQuantOps(RefTable& table) {
  table["QuantizeLinear"] = QuantizeLinear;
  table["DequantizeLinear"] = DequantizeLinear;
  table["DynamicQuantizeLinear"] = DynamicQuantizeLinear;
  table["MatMulInteger"] = MatMulInteger;
  table["QLinearMatMul"] = QLinearMatMul;
  table["ConvInteger"] = ConvInteger;
  table["QLinearConv"] = QLinearConv;
}

}  // namespace kiln::ref
