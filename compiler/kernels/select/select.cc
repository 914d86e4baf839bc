// Kernels of the ops whose output size follows from input data: NonZero, Compress, Unique,
// NonMaxSuppression and the window generators (Hann, Hamming, Blackman). Their shape functions (shape/shape.cc)
// count what the output holds, so a kernel only fills the buffer it is given.
#include "axis_slices.h"
#include "kernel_common.h"
#include "kiln/kernels/movement.h"
#include "non_max_suppression.h"

using namespace kiln_kernels;

namespace {

bool IsNonZero(const kiln_ktensor& t, int64_t i) { return LoadAsDouble(t.data, t.dtype, i) != 0; }

void CopyBytes(char* dst, const char* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

// Copies slice j of `from` over slice k of `to` (same element type and slice shape), or
// swaps the two.
void MoveSlice(const AxisSlices& from, int64_t j, const AxisSlices& to, int64_t k, bool swap) {
  const int64_t element = ElementSize(from.t.dtype);
  for (int64_t e = 0; e < from.outer * from.inner; ++e) {
    char* src = static_cast<char*>(from.t.data) + from.Offset(j, e) * element;
    char* dst = static_cast<char*>(to.t.data) + to.Offset(k, e) * element;
    for (int64_t b = 0; b < element; ++b) {
      const char kept = dst[b];
      dst[b] = src[b];
      if (swap) src[b] = kept;
    }
  }
}

}  // namespace

// NonZero: output [rank, count] (i64): column k is the multi-index of the k-th nonzero
// element in row-major order.
KILN_KERNEL(nonzero) {
  const kiln_ktensor &x = call->inputs[0], &out = call->outputs[0];
  const int64_t count = out.dims[1], n = Numel(x);
  auto* po = static_cast<int64_t*>(out.data);
  int64_t index[kMaxRank] = {0};
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (IsNonZero(x, i)) {
      if (k >= count) return KILN_KERR_SHAPE;
      for (int32_t d = 0; d < x.rank; ++d) po[d * count + k] = index[d];
      ++k;
    }
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      if (++index[d] < x.dims[d]) break;
      index[d] = 0;
    }
  }
  return k == count ? KILN_KERR_OK : KILN_KERR_SHAPE;
}

// Compress: the slices along `axis` (of the flattened input when axis is -1) whose
// condition is true, in order; conditions past the output's count are never reached.
KILN_KERNEL(compress) {
  KILN_PARAMS(kiln_movement_params, params, call);
  const kiln_ktensor &x = call->inputs[0], &condition = call->inputs[1], &out = call->outputs[0];
  const int64_t element = ElementSize(x.dtype);
  int64_t outer = 1, len = Numel(x), inner = 1, kept = Numel(out);
  if (params.axis >= 0) {
    len = x.dims[params.axis];
    kept = out.dims[params.axis];
    for (int32_t d = 0; d < params.axis; ++d) outer *= x.dims[d];
    for (int32_t d = static_cast<int32_t>(params.axis) + 1; d < x.rank; ++d) inner *= x.dims[d];
  }
  const int64_t n = Numel(condition) < len ? Numel(condition) : len, row = inner * element;
  const char* pi = static_cast<const char*>(x.data);
  char* po = static_cast<char*>(out.data);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t k = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (!IsNonZero(condition, j)) continue;
      if (k >= kept) return KILN_KERR_SHAPE;
      CopyBytes(po + (o * kept + k++) * row, pi + (o * len + j) * row, row);
    }
  }
  return KILN_KERR_OK;
}

// HannWindow, HammingWindow, BlackmanWindow: w[n] for n < size over the period N (the
// size, or the size - 1 for a symmetric window), as the ONNX operators define them.
KILN_KERNEL(window_function) {
  KILN_PARAMS(kiln_window_function_params, params, call);
  const kiln_ktensor& out = call->outputs[0];
  const int64_t size = out.dims[0];
  const double period = static_cast<double>(params.periodic ? size : size - 1);
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t n = 0; n < size; ++n) {
    const double phase = two_pi * static_cast<double>(n) / period;
    double w;
    switch (params.kind) {
      case KILN_WINDOW_HANN: w = 0.5 - 0.5 * cos(phase); break;
      case KILN_WINDOW_HAMMING: w = 25.0 / 46.0 - (1.0 - 25.0 / 46.0) * cos(phase); break;
      default: w = 0.42 - 0.5 * cos(phase) + 0.08 * cos(2 * phase); break;
    }
    switch (out.dtype) {
      case kF32: static_cast<float*>(out.data)[n] = static_cast<float>(w); break;
      case kF64: static_cast<double*>(out.data)[n] = w; break;
      default: return KILN_KERR_DTYPE;
    }
  }
  return KILN_KERR_OK;
}

// Unique: the distinct slices along `axis` (elements without one) into Y in order of
// first occurrence, then sorted in place when `sorted` (a selection sort: O(distinct^2)
// comparisons, each slice swapped at most once); then each input slice's place in Y gives
// inverse_indices, counts and the first indices, for the outputs the node has.
KILN_KERNEL(unique) {
  KILN_PARAMS(kiln_movement_params, params, call);
  const kiln_ktensor &x = call->inputs[0], &y = call->outputs[0];
  const AxisSlices in(x, params.axis), out(y, params.axis);
  int64_t distinct = 0;
  for (int64_t j = 0; j < in.count; ++j) {
    if (!in.IsFirstOccurrence(j)) continue;
    if (distinct >= out.count) return KILN_KERR_SHAPE;
    MoveSlice(in, j, out, distinct++, false);
  }
  if (distinct != out.count) return KILN_KERR_SHAPE;
  for (int64_t a = 0; params.sorted && a < distinct; ++a) {
    int64_t least = a;
    for (int64_t b = a + 1; b < distinct; ++b) least = out.Compare(b, out, least) < 0 ? b : least;
    if (least != a) MoveSlice(out, least, out, a, true);
  }
  auto output = [&](int32_t k) {
    return k < call->num_outputs ? static_cast<int64_t*>(call->outputs[k].data) : nullptr;
  };
  int64_t *indices = output(1), *inverse = output(2), *counts = output(3);
  for (int64_t at = 0; at < distinct; ++at) {
    if (indices != nullptr) indices[at] = -1;
    if (counts != nullptr) counts[at] = 0;
  }
  for (int64_t j = 0; j < in.count; ++j) {
    int64_t at = 0;
    while (at < distinct && in.Compare(j, out, at) != 0) ++at;
    if (at == distinct) return KILN_KERR_SHAPE;
    if (inverse != nullptr) inverse[j] = at;
    if (counts != nullptr) ++counts[at];
    if (indices != nullptr && indices[at] < 0) indices[at] = j;
  }
  return KILN_KERR_OK;
}

// NonMaxSuppression: selected_indices [selected, 3] (batch, class, box), i64.
KILN_KERNEL(non_max_suppression) {
  KILN_PARAMS(kiln_nms_params, params, call);
  NmsProblem nms(call, params.center_point_box != 0);
  if (int32_t rc = nms.Check(); rc != KILN_KERR_OK) return rc;
  const kiln_ktensor& out = call->outputs[0];
  auto* po = static_cast<int64_t*>(out.data);
  int64_t row = 0;
  bool overflow = false;
  nms.Select([&](int64_t b, int64_t c, int64_t i) {
    if (row >= out.dims[0]) {
      overflow = true;
      return;
    }
    po[row * 3] = b, po[row * 3 + 1] = c, po[row * 3 + 2] = i;
    ++row;
  });
  return overflow || row != out.dims[0] ? KILN_KERR_SHAPE : KILN_KERR_OK;
}
