// Host tensors and the runtime's shaped API (kiln_session_run_shaped): a Tensor seen as a
// kiln_tensor, and a run's output copied into a Tensor. Header-only: its users link the
// runtime already.
#pragma once

#include <cstring>
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

}  // namespace kiln
