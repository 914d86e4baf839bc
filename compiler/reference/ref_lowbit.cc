// The reference for float8 (opset 19) and int4 / uint4 (opset 21), from the ONNX
// specification: Cast and CastLike into and out of them (float8 `saturate`, a double through
// float32 first; a 4-bit cast rounds to nearest even, then keeps the low 4 bits), and
// QuantizeLinear / DequantizeLinear with those types, int16 / uint16, output_dtype and
// blocked scales (block_size).
// Registered last: it extends the entries of ref_elementwise.cc, ref_strings.cc, ref_quant.cc.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

bool IsFloat8Type(DType d) {
  return d == DType::kFloat8E4M3FN || d == DType::kFloat8E4M3FNUZ || d == DType::kFloat8E5M2 ||
         d == DType::kFloat8E5M2FNUZ;
}
bool Is4Bit(DType d) { return d == DType::kInt4 || d == DType::kUInt4; }
bool IsLowBitType(DType d) { return IsFloat8Type(d) || Is4Bit(d); }

// One element of Cast into `out`: float8 with `saturate`; 4-bit from a float rounded to
// nearest even (NaN and infinities: 0) and wrapped; the rest as the other casts do.
void CastElement(const Tensor& x, int64_t i, Tensor& out, bool saturate) {
  const DType to = out.dtype();
  if (IsFloat8Type(to)) {
    // A double goes through float32 first, as ONNX's reference (numpy_helper) and ONNX
    // Runtime do: 1.0625 + 1e-12 is the tie 1.0625 there, and rounds to even (1), not up.
    const double v = x.dtype() == DType::kFloat64 ? static_cast<float>(LoadDouble(x, i)) : LoadDouble(x, i);
    SetFloat8(out, i, EncodeFloat8(v, to, saturate));
  } else if (Is4Bit(to) && IsFloatType(x.dtype())) {
    const double r = std::nearbyint(LoadDouble(x, i));
    StoreInt(out, i, std::isfinite(r) && std::fabs(r) < 9e18 ? static_cast<int64_t>(r) : 0);
  } else if (IsFloatType(x.dtype()) || IsFloatType(to)) {
    StoreDouble(out, i, LoadDouble(x, i));
  } else {
    StoreInt(out, i, LoadInt(x, i));
  }
}

RefFn CastWithLowBit(RefFn cast, bool like) {
  return [cast, like](const Node& node, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    const DType to = like ? (in.size() > 1 && in[1] != nullptr ? in[1]->dtype() : DType::kUndefined)
                          : static_cast<DType>(node.GetInt("to", 0));
    if (!IsLowBitType(x->dtype()) && !IsLowBitType(to)) return cast(node, in);
    if (x->dtype() == DType::kString || to == DType::kString) {
      return Invalid(absl::StrCat("Cast between ", DTypeName(x->dtype()), " and ", DTypeName(to)));
    }
    Tensor out(to, x->dims());
    const bool saturate = node.GetInt("saturate", 1) != 0;
    for (int64_t i = 0; i < x->num_elements(); ++i) CastElement(*x, i, out, saturate);
    return std::vector<Tensor>{std::move(out)};
  };
}

// The integer range of a quantized type (float8: none, its encoding saturates).
std::pair<double, double> QuantizedRange(DType d) {
  switch (d) {
    case DType::kInt4: return {-8, 7};
    case DType::kUInt4: return {0, 15};
    case DType::kInt8: return {-128, 127};
    case DType::kUInt8: return {0, 255};
    case DType::kInt16: return {-32768, 32767};
    case DType::kUInt16: return {0, 65535};
    default: return {-2147483648.0, 2147483647.0};
  }
}

// For element i of X, the index of its scale: 0 (per tensor), its index along the axis
// (per axis), or the scale element of its block (block_size > 0: the scale has X's shape
// with the axis divided into blocks).
struct ScaleMap {
  std::vector<int64_t> x_dims, scale_dims;
  int64_t axis = 0, block = 0;
  bool per_tensor = true;

  int64_t Index(int64_t i) const {
    std::vector<int64_t> index(x_dims.size());
    for (size_t d = x_dims.size(); d-- > 0;) index[d] = i % x_dims[d], i /= x_dims[d];
    if (per_tensor) return 0;
    if (block == 0) return index[static_cast<size_t>(axis)];
    index[static_cast<size_t>(axis)] /= block;
    int64_t flat = 0;
    for (size_t d = 0; d < index.size(); ++d) flat = flat * scale_dims[d] + index[d];
    return flat;
  }
};

absl::StatusOr<ScaleMap> MapScale(const Node& node, const Tensor& x, const Tensor& scale) {
  ScaleMap map{x.dims(), scale.dims(), 0, node.GetInt("block_size", 0), false};
  map.per_tensor = map.block == 0 && scale.num_elements() == 1;
  if (map.per_tensor) return map;
  KILN_ASSIGN_OR_RETURN(map.axis, NormalizeAxis(node.GetInt("axis", 1), x.rank()));
  if (map.block > 0 && scale.rank() != x.rank()) return Invalid("a blocked scale has X's rank");
  return map;
}

// Whether QuantizeLinear / DequantizeLinear is one ref_quant.cc computes (uint8 / int8 / int32
// per tensor or axis).
bool IsClassic(const Node& node, const Inputs& in, bool quantize) {
  if (node.GetInt("block_size", 0) != 0) return false;
  const auto classic = [](DType d) { return d == DType::kUInt8 || d == DType::kInt8; };
  if (!quantize) return in[0] != nullptr && (classic(in[0]->dtype()) || in[0]->dtype() == DType::kInt32);
  const int64_t out = node.GetInt("output_dtype", 0);
  const Tensor* zp = OptionalInput(in, 2);
  return (out == 0 || classic(static_cast<DType>(out))) && (zp == nullptr || classic(zp->dtype()));
}

// y = saturate(round(x / scale) + zero_point), or for float8 x / scale + zero_point rounded
// into the format; the quotient is computed in x's type.
Outputs Quantize(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(scale, in, 1);
  const Tensor* zp = OptionalInput(in, 2);
  const int64_t output_dtype = node.GetInt("output_dtype", 0);
  const DType type = zp != nullptr ? zp->dtype() : output_dtype != 0 ? static_cast<DType>(output_dtype) : DType::kUInt8;
  KILN_ASSIGN_OR_RETURN(const ScaleMap map, MapScale(node, *x, *scale));
  const bool saturate = node.GetInt("saturate", 1) != 0;
  const auto [lo, hi] = QuantizedRange(type);
  Tensor out(type, x->dims());
  Tensor quotient(x->dtype(), {});
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const int64_t k = map.Index(i);
    StoreDouble(quotient, 0, LoadDouble(*x, i) / LoadDouble(*scale, k));
    const double z = zp != nullptr ? LoadDouble(*zp, k) : 0.0;
    if (IsFloat8Type(type)) {
      SetFloat8(out, i, EncodeFloat8(LoadDouble(quotient, 0) + z, type, saturate));
    } else {
      StoreInt(out, i, static_cast<int64_t>(std::clamp(std::nearbyint(LoadDouble(quotient, 0)) + z, lo, hi)));
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

// y = (x - zero_point) * scale, in the scale's type.
Outputs Dequantize(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(scale, in, 1);
  const Tensor* zp = OptionalInput(in, 2);
  KILN_ASSIGN_OR_RETURN(const ScaleMap map, MapScale(node, *x, *scale));
  Tensor out(scale->dtype(), x->dims());
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const int64_t k = map.Index(i);
    StoreDouble(out, i, (LoadDouble(*x, i) - (zp != nullptr ? LoadDouble(*zp, k) : 0.0)) * LoadDouble(*scale, k));
  }
  return std::vector<Tensor>{std::move(out)};
}

RefFn QuantizeWithLowBit(RefFn classic, bool quantize) {
  return [classic, quantize](const Node& node, const Inputs& in) -> Outputs {
    if (IsClassic(node, in, quantize)) return classic(node, in);
    return quantize ? Quantize(node, in) : Dequantize(node, in);
  };
}

}  // namespace

void AddLowBitOps(RefTable& table) {
  table["Cast"] = CastWithLowBit(table.at("Cast"), false);
  table["CastLike"] = CastWithLowBit(table.at("CastLike"), true);
  table["QuantizeLinear"] = QuantizeWithLowBit(table.at("QuantizeLinear"), true);
  table["DequantizeLinear"] = QuantizeWithLowBit(table.at("DequantizeLinear"), false);
}

}  // namespace kiln::ref
