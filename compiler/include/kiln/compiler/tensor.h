// Element types and dense host tensors: the constant data of the IR and the values the
// reference interpreter computes. DType numbers are ONNX's TensorProto.DataType numbers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
  // One byte per element: the four float8 formats of ONNX (opset 19) ...
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  // ... and the 4-bit integers (opset 21), held one per byte inside Kiln (host Tensors,
  // kernels, artifacts, the runtime API; an int4 sign-extended); only ONNX TensorProtos
  // pack them two to a byte, low nibble first (the importer unpacks, the writer packs).
  kUInt4 = 21,
  kInt4 = 22,
};

// Bytes per element; 0 for kUndefined. A kString element is a pointer (8 bytes) to its
// NUL-terminated UTF-8 text, in host Tensors as in artifacts (64-bit targets only).
int64_t DTypeSize(DType dtype);
// Short printable name ("f32", "i64", "bool"), used by the IR printer and the manifest.
const char* DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(std::string_view name);
bool IsFloat(DType dtype);  // f8 included
bool IsFloat8(DType dtype);
// The types of this line of work that only some ops take: float8, int4 and uint4.
bool IsLowBit(DType dtype);
bool IsSignedInt(DType dtype);
bool IsUnsignedInt(DType dtype);
inline bool IsInteger(DType dtype) { return IsSignedInt(dtype) || IsUnsignedInt(dtype); }

int64_t NumElements(const std::vector<int64_t>& dims);

// What a value is (ONNX's TypeProto kinds, maps aside): a tensor, a sequence of tensors, or
// an optional holding a tensor or a sequence. Tensors are by far the common case; the
// other kinds exist only at the edges of sequence and optional ops.
enum class ValueKind : uint8_t { kTensor = 0, kSequence = 1, kOptional = 2, kOptionalSequence = 3 };
const char* ValueKindName(ValueKind kind);

// A dense, row-major host tensor. Bytes are 64-byte aligned so kernels may use aligned loads.
// A kString tensor owns its texts; its data() is the array of `const char*` to them (as a
// kernel sees a string tensor), kept pointing at the owned copies through copies.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> dims);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  // A sequence of tensors of `element_dtype`.
  static Tensor Sequence(DType element_dtype, std::vector<Tensor> elements);
  // An optional (kOptional or kOptionalSequence): empty, or holding a copy of `value`.
  static Tensor Optional(ValueKind kind, DType element_dtype, const Tensor* value);

  // A sequence or optional has no data of its own: dtype kUndefined, no dims, no bytes;
  // elements() holds a sequence's tensors, or an optional's value (none when empty).
  ValueKind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == ValueKind::kTensor; }
  DType element_dtype() const { return is_tensor() ? dtype_ : element_dtype_; }
  const std::vector<Tensor>& elements() const { return elements_; }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t num_elements() const { return NumElements(dims_); }
  int64_t size_bytes() const { return num_elements() * DTypeSize(dtype_); }

  void* data() { return storage_.data(); }
  const void* data() const { return storage_.data(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(storage_.data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(storage_.data());
  }

  // Element i converted to double / int64 (for attribute-like small tensors: shapes, axes).
  double GetAsDouble(int64_t i) const;
  int64_t GetAsInt64(int64_t i) const;

  // kString only: element i's text, and setting it (a copy is kept).
  std::string_view GetString(int64_t i) const { return strings_[static_cast<size_t>(i)]; }
  void SetString(int64_t i, std::string_view text);
  // kString only: takes a copy of the text each element's pointer points at (a kernel wrote
  // the pointers into data()), so the tensor owns them again.
  void AdoptStrings();

 private:
  void PointAtStrings();

  struct alignas(64) Block {
    unsigned char bytes[64];
  };
  DType dtype_ = DType::kUndefined;
  ValueKind kind_ = ValueKind::kTensor;
  DType element_dtype_ = DType::kUndefined;  // sequences and optionals only
  std::vector<int64_t> dims_;
  std::vector<Tensor> elements_;
  // Block-typed so the allocation is 64-byte aligned; data() reinterprets it as bytes.
  std::vector<Block> storage_;
  std::vector<std::string> strings_;  // kString: element texts, data() points at them
};

// IEEE half <-> float conversion (round to nearest even).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

}  // namespace kiln
