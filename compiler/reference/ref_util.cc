// Element access, index walks and input reading shared by the reference's op families.
#include "ref_util.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::ref {
namespace {

// Rounds `v` to nearest even in a binary format with `mantissa_bits` stored fraction bits
// and `exponent_bits` exponent bits (IEEE half, bfloat16) and returns its bit pattern.
// Done from double directly so there is one rounding, not double -> float -> half.
uint32_t EncodeNarrowFloat(double v, int mantissa_bits, int exponent_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const uint32_t all_ones = (1u << exponent_bits) - 1;
  const uint32_t sign = std::signbit(v) ? 1u << (mantissa_bits + exponent_bits) : 0u;
  if (std::isnan(v)) return sign | all_ones << mantissa_bits | 1u << (mantissa_bits - 1);
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | all_ones << mantissa_bits;
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  int exponent = e - 1;  // a is in [2^exponent, 2^(exponent+1))
  const int min_exponent = 1 - bias;
  if (exponent < min_exponent) {
    // Subnormal: a multiple of 2^(min_exponent - mantissa_bits). Rounding up to 2^m lands
    // on the smallest normal number, whose bit pattern is the same integer.
    const double q = std::nearbyint(std::ldexp(a, mantissa_bits - min_exponent));
    return sign | static_cast<uint32_t>(q);
  }
  double q = std::nearbyint(std::ldexp(a, mantissa_bits - exponent));
  if (q == std::ldexp(1.0, mantissa_bits + 1)) {
    q /= 2;
    ++exponent;
  }
  if (exponent + bias >= static_cast<int>(all_ones)) return sign | all_ones << mantissa_bits;
  return sign | static_cast<uint32_t>(exponent + bias) << mantissa_bits |
         (static_cast<uint32_t>(q) - (1u << mantissa_bits));
}

double DecodeNarrowFloat(uint32_t bits, int mantissa_bits, int exponent_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const uint32_t all_ones = (1u << exponent_bits) - 1;
  const bool negative = (bits >> (mantissa_bits + exponent_bits)) & 1;
  const uint32_t exponent = (bits >> mantissa_bits) & all_ones;
  const uint32_t fraction = bits & ((1u << mantissa_bits) - 1);
  double magnitude;
  if (exponent == all_ones) {
    magnitude = fraction != 0 ? std::nan("") : INFINITY;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(fraction), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(fraction + (1u << mantissa_bits)),
                           static_cast<int>(exponent) - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

template <typename T>
T Element(const Tensor& t, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(t.data()) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

template <typename T>
void SetElement(Tensor& t, int64_t i, T v) {
  std::memcpy(static_cast<char*>(t.data()) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

struct Float8Format {
  int exponent_bits, mantissa_bits, bias;
  bool uz;       // NaN is 0x80; no negative zero, no infinity
  bool has_inf;  // E5M2: S.11111.00 is infinity, S.11111.xx NaN; E4M3FN: S.1111.111 NaN
};

Float8Format FormatOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat8E4M3FN: return {4, 3, 7, false, false};
    case DType::kFloat8E4M3FNUZ: return {4, 3, 8, true, false};
    case DType::kFloat8E5M2: return {5, 2, 15, false, true};
    default: return {5, 2, 16, true, false};
  }
}

// The value of a magnitude code 0..0x7f, NaN where the code is not a finite number.
double Float8Magnitude(uint32_t code, const Float8Format& f) {
  const uint32_t exponent = code >> f.mantissa_bits, fraction = code & ((1u << f.mantissa_bits) - 1);
  const uint32_t top = (1u << f.exponent_bits) - 1;
  if (!f.uz && f.has_inf && exponent == top) return fraction == 0 ? INFINITY : std::nan("");
  if (!f.uz && !f.has_inf && code == 0x7f) return std::nan("");
  if (exponent == 0) return std::ldexp(fraction, 1 - f.bias - f.mantissa_bits);
  return std::ldexp(fraction + (1u << f.mantissa_bits), static_cast<int>(exponent) - f.bias - f.mantissa_bits);
}

}  // namespace

double DecodeFloat8(uint8_t bits, DType dtype) {
  const Float8Format f = FormatOf(dtype);
  if (f.uz && bits == 0x80) return std::nan("");
  const double magnitude = Float8Magnitude(bits & 0x7fu, f);
  return bits & 0x80 ? -magnitude : magnitude;
}

void SetFloat8(Tensor& t, int64_t i, uint8_t bits) { t.data_as<uint8_t>()[i] = bits; }

uint8_t EncodeFloat8(double v, DType dtype, bool saturate) {
  const Float8Format f = FormatOf(dtype);
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const uint8_t nan = f.uz ? 0x80 : static_cast<uint8_t>(sign | 0x7f);
  if (std::isnan(v)) return nan;
  // The finite magnitudes in code order, then one step past the largest (code `largest` + 1,
  // the overflow): the nearest, ties to the even code.
  uint32_t largest = 0;
  while (largest < 0x7f && std::isfinite(Float8Magnitude(largest + 1, f))) ++largest;
  const double top = Float8Magnitude(largest, f);
  const double past = top + (top - Float8Magnitude(largest - 1, f));
  const double a = std::fabs(v);
  uint32_t best = largest + 1;  // at or past the step beyond the largest (infinity too): overflow
  double best_distance = a >= past ? -1 : INFINITY;
  for (uint32_t code = 0; code <= largest + 1; ++code) {
    const double value = code <= largest ? Float8Magnitude(code, f) : past;
    const double distance = std::fabs(value - a);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) best = code, best_distance = distance;
  }
  if (best > largest) {
    if (saturate) return static_cast<uint8_t>(sign | largest);
    return f.has_inf ? static_cast<uint8_t>(sign | 0x7c) : nan;
  }
  if (best == 0 && f.uz) return 0;
  return static_cast<uint8_t>(sign | best);
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

bool IsFloatType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16 || dtype == DType::kFloat8E4M3FN || dtype == DType::kFloat8E4M3FNUZ ||
         dtype == DType::kFloat8E5M2 || dtype == DType::kFloat8E5M2FNUZ;
}

bool IsUnsigned(DType dtype) {
  return dtype == DType::kUInt8 || dtype == DType::kUInt16 || dtype == DType::kUInt32 || dtype == DType::kUInt64 ||
         dtype == DType::kBool || dtype == DType::kUInt4;
}

double LoadDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return Element<float>(t, i);
    case DType::kFloat64: return Element<double>(t, i);
    case DType::kFloat16: return DecodeNarrowFloat(Element<uint16_t>(t, i), 10, 5);
    case DType::kBFloat16: return DecodeNarrowFloat(Element<uint16_t>(t, i), 7, 8);
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ: return DecodeFloat8(Element<uint8_t>(t, i), t.dtype());
    case DType::kUInt64: return static_cast<double>(Element<uint64_t>(t, i));
    default: return static_cast<double>(LoadInt(t, i));
  }
}

int64_t LoadInt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt4:  // one per byte, sign-extended
    case DType::kInt8: return Element<int8_t>(t, i);
    case DType::kUInt4:
    case DType::kUInt8:
    case DType::kBool: return Element<uint8_t>(t, i);
    case DType::kInt16: return Element<int16_t>(t, i);
    case DType::kUInt16: return Element<uint16_t>(t, i);
    case DType::kInt32: return Element<int32_t>(t, i);
    case DType::kUInt32: return Element<uint32_t>(t, i);
    case DType::kInt64: return Element<int64_t>(t, i);
    case DType::kUInt64: return static_cast<int64_t>(Element<uint64_t>(t, i));
    default: {
      const double v = LoadDouble(t, i);
      return std::isfinite(v) ? static_cast<int64_t>(v) : 0;
    }
  }
}

void StoreDouble(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kFloat32: SetElement<float>(t, i, static_cast<float>(v)); return;
    case DType::kFloat64: SetElement<double>(t, i, v); return;
    case DType::kFloat16: SetElement<uint16_t>(t, i, static_cast<uint16_t>(EncodeNarrowFloat(v, 10, 5))); return;
    case DType::kBFloat16: SetElement<uint16_t>(t, i, static_cast<uint16_t>(EncodeNarrowFloat(v, 7, 8))); return;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ: SetElement<uint8_t>(t, i, EncodeFloat8(v, t.dtype(), true)); return;
    case DType::kBool: SetElement<uint8_t>(t, i, v != 0 ? 1 : 0); return;
    case DType::kUInt64:
      if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) {
        SetElement<uint64_t>(t, i, static_cast<uint64_t>(v));
        return;
      }
      [[fallthrough]];
    default:
      // Out-of-range conversions are undefined in C++ and implementation-defined in ONNX;
      // keep them deterministic.
      if (!std::isfinite(v) || std::fabs(v) >= 9223372036854775807.0) v = 0;
      StoreInt(t, i, static_cast<int64_t>(v));
  }
}

void StoreInt(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::kInt8: SetElement<int8_t>(t, i, static_cast<int8_t>(v)); return;
    case DType::kUInt8: SetElement<uint8_t>(t, i, static_cast<uint8_t>(v)); return;
    case DType::kInt4:
      SetElement<int8_t>(t, i, static_cast<int8_t>((v & 0xf) >= 8 ? (v & 0xf) - 16 : (v & 0xf)));
      return;
    case DType::kUInt4: SetElement<uint8_t>(t, i, static_cast<uint8_t>(v & 0xf)); return;
    case DType::kBool: SetElement<uint8_t>(t, i, v != 0 ? 1 : 0); return;
    case DType::kInt16: SetElement<int16_t>(t, i, static_cast<int16_t>(v)); return;
    case DType::kUInt16: SetElement<uint16_t>(t, i, static_cast<uint16_t>(v)); return;
    case DType::kInt32: SetElement<int32_t>(t, i, static_cast<int32_t>(v)); return;
    case DType::kUInt32: SetElement<uint32_t>(t, i, static_cast<uint32_t>(v)); return;
    case DType::kInt64: SetElement<int64_t>(t, i, v); return;
    case DType::kUInt64: SetElement<uint64_t>(t, i, static_cast<uint64_t>(v)); return;
    default: StoreDouble(t, i, static_cast<double>(v));
  }
}

void CopyElement(const Tensor& src, int64_t src_index, Tensor& dst, int64_t dst_index) {
  const int64_t size = DTypeSize(src.dtype());
  std::memcpy(static_cast<char*>(dst.data()) + dst_index * size,
              static_cast<const char*>(src.data()) + src_index * size, size);
}

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

bool NextIndex(std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  for (size_t i = dims.size(); i-- > 0;) {
    if (++index[i] < dims[i]) return true;
    index[i] = 0;
  }
  return false;
}

absl::StatusOr<std::vector<int64_t>> BroadcastDims(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o != 1) {
        std::vector<std::string> texts;
        for (const auto& t : shapes) texts.push_back(absl::StrCat("[", absl::StrJoin(t, ","), "]"));
        return Invalid(absl::StrCat("shapes ", absl::StrJoin(texts, " and "), " do not broadcast"));
      }
      o = s[i];
    }
  }
  return out;
}

std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_dims) {
  std::vector<int64_t> strides(out_dims.size(), 0);
  const std::vector<int64_t> own = Strides(dims);
  const size_t offset = out_dims.size() - dims.size();
  for (size_t i = 0; i < dims.size(); ++i) strides[offset + i] = dims[i] == 1 ? 0 : own[i];
  return strides;
}

int64_t Dot(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t sum = 0;
  for (size_t i = 0; i < index.size(); ++i) sum += index[i] * strides[i];
  return sum;
}

absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return Invalid(absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> IntsOf(const Tensor& t) {
  std::vector<int64_t> values(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) values[i] = LoadInt(t, i);
  return values;
}

const Tensor* OptionalInput(const Inputs& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

std::vector<int64_t> AxesFromAttrOrInput(const Node& node, const Inputs& in, const char* attr, size_t input) {
  if (node.has_attr(attr)) return node.GetInts(attr);
  const Tensor* t = OptionalInput(in, input);
  return t != nullptr ? IntsOf(*t) : std::vector<int64_t>{};
}

}  // namespace kiln::ref

namespace kiln::ref {

absl::StatusOr<std::vector<int64_t>> ForEachBroadcast(const std::vector<const Tensor*>& inputs,
                                                      const std::function<void(int64_t, const int64_t*)>& visit) {
  std::vector<std::vector<int64_t>> shapes;
  for (const Tensor* t : inputs) shapes.push_back(t->dims());
  absl::StatusOr<std::vector<int64_t>> out_dims = BroadcastDims(shapes);
  if (!out_dims.ok()) return out_dims.status();
  std::vector<std::vector<int64_t>> strides;
  for (const Tensor* t : inputs) strides.push_back(BroadcastStrides(t->dims(), *out_dims));
  const int64_t count = NumElements(*out_dims);
  std::vector<int64_t> index(out_dims->size(), 0), offsets(inputs.size(), 0);
  for (int64_t flat = 0; flat < count; ++flat) {
    for (size_t k = 0; k < inputs.size(); ++k) offsets[k] = Dot(index, strides[k]);
    visit(flat, offsets.data());
    NextIndex(index, *out_dims);
  }
  return out_dims;
}

}  // namespace kiln::ref

namespace kiln::ref {

Dense ToDense(const Tensor& t) {
  Dense dense{t.dims(), std::vector<double>(t.num_elements())};
  for (int64_t i = 0; i < t.num_elements(); ++i) dense.values[i] = LoadDouble(t, i);
  return dense;
}

Tensor FromDense(const Dense& dense, DType dtype) {
  Tensor out(dtype, dense.dims);
  for (int64_t i = 0; i < out.num_elements(); ++i) StoreDouble(out, i, dense.values[i]);
  return out;
}

namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

}  // namespace

absl::StatusOr<Window> SlidingWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                     const std::vector<int64_t>& kernel) {
  const size_t n = in_spatial.size();
  Window w;
  w.kernel = kernel;
  w.strides = node.GetInts("strides", std::vector<int64_t>(n, 1));
  w.dilations = node.GetInts("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * n, 0));
  if (w.kernel.size() != n || w.strides.size() != n || w.dilations.size() != n || pads.size() != 2 * n) {
    return Invalid("kernel_shape, strides, dilations or pads do not match the spatial rank");
  }
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  const bool ceil_mode = node.GetInt("ceil_mode", 0) != 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
    int64_t begin = pads[i], end = pads[i + n];
    if (auto_pad == "VALID") begin = end = 0;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t out = (in_spatial[i] + w.strides[i] - 1) / w.strides[i];
      const int64_t total = std::max<int64_t>((out - 1) * w.strides[i] + extent - in_spatial[i], 0);
      begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end = total - begin;
    }
    const int64_t span = in_spatial[i] + begin + end - extent;
    if (span < 0) return Invalid("the window is larger than the padded input");
    int64_t out = (ceil_mode ? FloorDiv(span + w.strides[i] - 1, w.strides[i]) : FloorDiv(span, w.strides[i])) + 1;
    // In ceil mode a last window that would start inside the end padding is dropped.
    if (ceil_mode && (out - 1) * w.strides[i] >= in_spatial[i] + begin) --out;
    w.pad_begin.push_back(begin);
    w.pad_end.push_back(end);
    w.out.push_back(out);
  }
  return w;
}

}  // namespace kiln::ref
