// DType tables and the host Tensor.
#include "kiln/compiler/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/kernels/float8.h"
#include "kiln/kernels/fp16.h"

namespace kiln {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  int64_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kFloat32, "f32", 4},
    {DType::kUInt8, "u8", 1},
    {DType::kInt8, "i8", 1},
    {DType::kUInt16, "u16", 2},
    {DType::kInt16, "i16", 2},
    {DType::kInt32, "i32", 4},
    {DType::kInt64, "i64", 8},
    {DType::kString, "string", 8},
    {DType::kBool, "bool", 1},
    {DType::kFloat16, "f16", 2},
    {DType::kFloat64, "f64", 8},
    {DType::kUInt32, "u32", 4},
    {DType::kUInt64, "u64", 8},
    {DType::kBFloat16, "bf16", 2},
    {DType::kFloat8E4M3FN, "f8e4m3fn", 1},
    {DType::kFloat8E4M3FNUZ, "f8e4m3fnuz", 1},
    {DType::kFloat8E5M2, "f8e5m2", 1},
    {DType::kFloat8E5M2FNUZ, "f8e5m2fnuz", 1},
    {DType::kUInt4, "u4", 1},
    {DType::kInt4, "i4", 1},
};

}  // namespace

const char* ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kTensor: return "tensor";
    case ValueKind::kSequence: return "sequence";
    case ValueKind::kOptional: return "optional tensor";
    case ValueKind::kOptionalSequence: return "optional sequence";
  }
  return "?";
}

Tensor Tensor::Sequence(DType element_dtype, std::vector<Tensor> elements) {
  Tensor t;
  t.kind_ = ValueKind::kSequence;
  t.element_dtype_ = element_dtype;
  t.elements_ = std::move(elements);
  return t;
}

Tensor Tensor::Optional(ValueKind kind, DType element_dtype, const Tensor* value) {
  Tensor t;
  t.kind_ = kind;
  t.element_dtype_ = element_dtype;
  if (value != nullptr) t.elements_.push_back(*value);
  return t;
}

int64_t DTypeSize(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "undefined";
}

absl::StatusOr<DType> DTypeFromName(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown element type '", std::string(name), "'"));
}

bool IsFloat(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 || d == DType::kBFloat16 || IsFloat8(d);
}
bool IsFloat8(DType d) {
  return d == DType::kFloat8E4M3FN || d == DType::kFloat8E4M3FNUZ || d == DType::kFloat8E5M2 ||
         d == DType::kFloat8E5M2FNUZ;
}
bool IsLowBit(DType d) { return IsFloat8(d) || d == DType::kUInt4 || d == DType::kInt4; }
bool IsSignedInt(DType d) {
  return d == DType::kInt8 || d == DType::kInt16 || d == DType::kInt32 || d == DType::kInt64 || d == DType::kInt4;
}
bool IsUnsignedInt(DType d) {
  return d == DType::kUInt8 || d == DType::kUInt16 || d == DType::kUInt32 || d == DType::kUInt64 || d == DType::kUInt4;
}

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  storage_.resize((size_bytes() + sizeof(Block) - 1) / sizeof(Block));
  if (dtype_ == DType::kString) {
    strings_.resize(static_cast<size_t>(num_elements()));
    PointAtStrings();
  }
}

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_),
      kind_(other.kind_),
      element_dtype_(other.element_dtype_),
      dims_(other.dims_),
      elements_(other.elements_),
      storage_(other.storage_),
      strings_(other.strings_) {
  PointAtStrings();
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this == &other) return *this;
  dtype_ = other.dtype_;
  dims_ = other.dims_;
  storage_ = other.storage_;
  kind_ = other.kind_;
  element_dtype_ = other.element_dtype_;
  elements_ = other.elements_;
  strings_ = other.strings_;
  PointAtStrings();
  return *this;
}

void Tensor::PointAtStrings() {
  if (dtype_ != DType::kString) return;
  auto** pointers = data_as<const char*>();
  for (size_t i = 0; i < strings_.size(); ++i) pointers[i] = strings_[i].c_str();
}

void Tensor::SetString(int64_t i, std::string_view text) {
  strings_[static_cast<size_t>(i)].assign(text.data(), text.size());
  data_as<const char*>()[i] = strings_[static_cast<size_t>(i)].c_str();
}

void Tensor::AdoptStrings() {
  const char* const* pointers = data_as<const char*>();
  std::vector<std::string> texts(strings_.size());
  for (size_t i = 0; i < texts.size(); ++i) texts[i] = pointers[i] != nullptr ? pointers[i] : "";
  strings_ = std::move(texts);
  PointAtStrings();
}

double Tensor::GetAsDouble(int64_t i) const {
  switch (dtype_) {
    case DType::kFloat32: return data_as<float>()[i];
    case DType::kFloat64: return data_as<double>()[i];
    case DType::kFloat16: return HalfToFloat(data_as<uint16_t>()[i]);
    case DType::kBFloat16: return kiln_bfloat16_to_float(data_as<uint16_t>()[i]);
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ: return kiln_float8_to_float(data_as<uint8_t>()[i], static_cast<int32_t>(dtype_));
    default: return static_cast<double>(GetAsInt64(i));
  }
}

int64_t Tensor::GetAsInt64(int64_t i) const {
  switch (dtype_) {
    case DType::kInt8:
    case DType::kInt4: return data_as<int8_t>()[i];
    case DType::kUInt8:
    case DType::kUInt4: return data_as<uint8_t>()[i];
    case DType::kBool: return data_as<uint8_t>()[i];
    case DType::kInt16: return data_as<int16_t>()[i];
    case DType::kUInt16: return data_as<uint16_t>()[i];
    case DType::kInt32: return data_as<int32_t>()[i];
    case DType::kUInt32: return data_as<uint32_t>()[i];
    case DType::kInt64: return data_as<int64_t>()[i];
    case DType::kUInt64: return static_cast<int64_t>(data_as<uint64_t>()[i]);
    case DType::kFloat32: return static_cast<int64_t>(data_as<float>()[i]);
    case DType::kFloat64: return static_cast<int64_t>(data_as<double>()[i]);
    case DType::kFloat16: return static_cast<int64_t>(HalfToFloat(data_as<uint16_t>()[i]));
    case DType::kBFloat16: return static_cast<int64_t>(kiln_bfloat16_to_float(data_as<uint16_t>()[i]));
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ: {
      const float v = kiln_float8_to_float(data_as<uint8_t>()[i], static_cast<int32_t>(dtype_));
      return v == v ? static_cast<int64_t>(v) : 0;
    }
    default: return 0;
  }
}

// The kernel library's conversions (kiln/kernels/fp16.h): one rounding for both.
float HalfToFloat(uint16_t h) { return kiln_half_to_float(h); }

uint16_t FloatToHalf(float f) { return kiln_float_to_half(f); }

}  // namespace kiln
