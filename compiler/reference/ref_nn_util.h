// Helpers of the reference evaluations of ref_loss.cc, ref_sampling.cc, ref_linalg.cc and
// ref_nn_extra.cc: tensors read into and written from doubles, row-major index arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/compiler/tensor.h"

namespace kiln::ref {

inline std::vector<double> Doubles(const Tensor& t) {
  std::vector<double> values(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) values[i] = t.GetAsDouble(i);
  return values;
}

inline std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> values(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) values[i] = t.GetAsInt64(i);
  return values;
}

// A tensor of a float type (f16, f32, f64) holding `values` in row-major order.
inline Tensor FloatTensor(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values) {
  Tensor t(dtype, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (dtype == DType::kFloat64) {
      t.data_as<double>()[i] = values[i];
    } else if (dtype == DType::kFloat16) {
      t.data_as<uint16_t>()[i] = FloatToHalf(static_cast<float>(values[i]));
    } else {
      t.data_as<float>()[i] = static_cast<float>(values[i]);
    }
  }
  return t;
}

// The row-major position of a multi-index, and back.
inline int64_t Flatten(const std::vector<int64_t>& dims, const std::vector<int64_t>& index) {
  int64_t at = 0;
  for (size_t d = 0; d < dims.size(); ++d) at = at * dims[d] + index[d];
  return at;
}
inline std::vector<int64_t> Unflatten(const std::vector<int64_t>& dims, int64_t at) {
  std::vector<int64_t> index(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    index[d] = at % dims[d];
    at /= dims[d];
  }
  return index;
}

}  // namespace kiln::ref
