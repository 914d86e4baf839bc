// The spatial window of a convolution or pooling kernel call, shared by conv, pool and quant.
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
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
};

}  // namespace kiln_kernels
