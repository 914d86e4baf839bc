// Kernels of the ops whose output size follows from input data: NonZero, Compress and the
// window generators (Hann, Hamming, Blackman). Their shape functions (shape/shape.cc) count
// what the output holds, so a kernel only fills the buffer it is given.
#include "kernel_common.h"
#include "kiln/kernels/movement.h"

using namespace kiln_kernels;

namespace {

bool IsNonZero(const kiln_ktensor& t, int64_t i) { return LoadAsDouble(t.data, t.dtype, i) != 0; }

void CopyBytes(char* dst, const char* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
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
