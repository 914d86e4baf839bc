// Host tensors and the runtime's shaped API (kiln_session_run_shaped): a Tensor seen as a
// kiln_tensor, and a run's output copied into a Tensor. Header-only: its users link the
// runtime already.
#pragma once

#include <cstring>
#include <deque>
#include <vector>

#include "kiln/compiler/tensor.h"
#include "kiln/runtime.h"

namespace kiln {

// `t` as an input of kiln_session_run_shaped; valid while `t` is.
inline kiln_tensor RuntimeView(const Tensor& t) {
  return kiln_tensor{const_cast<void*>(t.data()), t.dims().data(), static_cast<int32_t>(t.rank()),
                     static_cast<int32_t>(t.dtype())};
}

// A copy of an output the session owns (valid only until its next run); a string output's
// texts are copied too.
inline Tensor FromRuntime(const kiln_tensor& t) {
  Tensor copy(static_cast<DType>(t.dtype), std::vector<int64_t>(t.dims, t.dims + t.rank));
  if (copy.size_bytes() > 0) std::memcpy(copy.data(), t.data, static_cast<size_t>(copy.size_bytes()));
  if (copy.dtype() == DType::kString) copy.AdoptStrings();  // the texts, not the session's pointers
  return copy;
}

// What a sequence input's slot points to: its element array and its length.
struct RuntimeSequences {
  std::deque<std::vector<kiln_tensor>> elements;
  std::deque<int64_t> lengths;
};

// A value of any kind as an input of kiln_session_run_shaped (runtime.h): a sequence is a
// slot of dtype KILN_DTYPE_SEQUENCE over an element array kept in `store`, an empty
// optional a slot without data. Valid while `value` and `store` are.
inline kiln_tensor RuntimeValue(const Tensor& value, RuntimeSequences& store) {
  switch (value.kind()) {
    case ValueKind::kTensor: return RuntimeView(value);
    case ValueKind::kSequence: {
      std::vector<kiln_tensor>& elements = store.elements.emplace_back();
      for (const Tensor& t : value.elements()) elements.push_back(RuntimeView(t));
      const int64_t& length = store.lengths.emplace_back(static_cast<int64_t>(elements.size()));
      return kiln_tensor{elements.data(), &length, 1, KILN_DTYPE_SEQUENCE};
    }
    case ValueKind::kOptional:
    case ValueKind::kOptionalSequence:
      if (!value.elements().empty()) return RuntimeValue(value.elements()[0], store);
      return kiln_tensor{
          nullptr, nullptr, 0,
          value.kind() == ValueKind::kOptional ? static_cast<int32_t>(value.element_dtype()) : KILN_DTYPE_SEQUENCE};
  }
  return kiln_tensor{};
}

// A copy of an output of `info`'s kind (a sequence's elements and an optional's value
// included) that the session owns.
inline Tensor FromRuntimeValue(const kiln_tensor& t, const kiln_tensor_info& info) {
  const auto kind = static_cast<ValueKind>(info.kind);
  const auto element_dtype = static_cast<DType>(info.element_dtype);
  if (kind == ValueKind::kTensor) return FromRuntime(t);
  if (kind == ValueKind::kOptional || kind == ValueKind::kOptionalSequence) {
    if (t.data == nullptr) return Tensor::Optional(kind, element_dtype, nullptr);
    kiln_tensor_info inner = info;
    inner.kind = kind == ValueKind::kOptional ? KILN_VALUE_TENSOR : KILN_VALUE_SEQUENCE;
    Tensor value = FromRuntimeValue(t, inner);
    return Tensor::Optional(kind, element_dtype, &value);
  }
  std::vector<Tensor> elements;
  const auto* items = static_cast<const kiln_tensor*>(t.data);
  for (int64_t i = 0; t.dims != nullptr && i < t.dims[0]; ++i) elements.push_back(FromRuntime(items[i]));
  return Tensor::Sequence(element_dtype, std::move(elements));
}

}  // namespace kiln
