// The spatial window of a convolution or pooling kernel call, shared by nn.cc and quant.cc.
#pragma once

#include "kernel_common.h"
#include "kiln/kernels/params.h"

namespace kiln_kernels {

// The window's spatial parameters (kiln_window) and the call's extents, widened to three
// dimensions (leading dims of extent 1) so that one loop nest serves 1-D to 3-D.
struct Window {
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};

  void Load(const kiln_window& p, const kiln_ktensor& x, const kiln_ktensor& y) {
    const int64_t r = p.rank;
    const int64_t shift = 3 - r;
    for (int64_t i = 0; i < r; ++i) kernel[shift + i] = p.kernel[i];
    for (int64_t i = 0; i < r; ++i) stride[shift + i] = p.strides[i];
    for (int64_t i = 0; i < r; ++i) pad[shift + i] = p.pads_begin[i];
    for (int64_t i = 0; i < r; ++i) dilation[shift + i] = p.dilations[i];
    for (int64_t i = 0; i < r; ++i) in[shift + i] = x.dims[2 + i];
    for (int64_t i = 0; i < r; ++i) out[shift + i] = y.dims[2 + i];
  }
  // The positional form (rank, kernel[r], strides[r], pads_begin[r], pads_end[r],
  // dilations[r]) of the kernels not yet on a struct; returns the position after it.
  const int64_t* Load(const int64_t* p, const kiln_ktensor& x, const kiln_ktensor& y) {
    kiln_window window{};
    window.rank = *p++;
    for (int64_t i = 0; i < window.rank; ++i) {
      window.kernel[i] = p[i];
      window.strides[i] = p[window.rank + i];
      window.pads_begin[i] = p[2 * window.rank + i];
      window.dilations[i] = p[4 * window.rank + i];
    }
    Load(window, x, y);
    return p + 5 * window.rank;
  }
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
};

}  // namespace kiln_kernels
