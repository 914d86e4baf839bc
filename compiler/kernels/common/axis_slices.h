// A tensor seen as `count` slices along an axis (each element of the flattened tensor
// when there is none), compared lexicographically: Unique's shape function counts the
// distinct slices with it and its kernel orders them. A kernel may not allocate, and
// scratch sized by run-time dims is not available yet, so finding a slice's first
// occurrence scans the earlier ones: O(count^2) slice comparisons in all.
#pragma once

#include "kernel_common.h"

namespace kiln_kernels {

struct AxisSlices {
  const kiln_ktensor& t;
  int64_t outer = 1, count = 1, inner = 1;

  AxisSlices(const kiln_ktensor& tensor, int64_t axis) : t(tensor) {
    for (int32_t d = 0; d < t.rank; ++d) {
      int64_t& side = axis < 0 ? count : d < axis ? outer : d == axis ? count : inner;
      side *= t.dims[d];
    }
  }

  // Where element e (o * inner + i) of slice j lies in the tensor.
  int64_t Offset(int64_t j, int64_t e) const { return ((e / inner) * count + j) * inner + e % inner; }

  // -1, 0 or 1 as slice j is below, equal to or above slice k of `other` (of the same
  // element type and slice shape); 64-bit integers compare exactly, the rest as double.
  int Compare(int64_t j, const AxisSlices& other, int64_t k) const {
    for (int64_t e = 0; e < outer * inner; ++e) {
      const int64_t p = Offset(j, e), q = other.Offset(k, e);
      int order;
      if (t.dtype == kI64 || t.dtype == kU64) {
        const int64_t a = static_cast<const int64_t*>(t.data)[p], b = static_cast<const int64_t*>(other.t.data)[q];
        const bool below = t.dtype == kU64 ? static_cast<uint64_t>(a) < static_cast<uint64_t>(b) : a < b;
        order = a == b ? 0 : below ? -1 : 1;
      } else {
        const double a = LoadAsDouble(t.data, t.dtype, p), b = LoadAsDouble(other.t.data, other.t.dtype, q);
        order = a < b ? -1 : a > b ? 1 : 0;
      }
      if (order != 0) return order;
    }
    return 0;
  }

  bool IsFirstOccurrence(int64_t j) const {
    for (int64_t k = 0; k < j; ++k) {
      if (Compare(k, *this, j) == 0) return false;
    }
    return true;
  }

  int64_t CountDistinct() const {
    int64_t n = 0;
    for (int64_t j = 0; j < count; ++j) n += IsFirstOccurrence(j);
    return n;
  }
};

}  // namespace kiln_kernels
