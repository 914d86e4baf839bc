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

  KILN_ALWAYS_INLINE Window(const kiln_window& p, const kiln_ktensor& x, const kiln_ktensor& y) {
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

// The taps of the window placed at position (pd, ph, pw) that land inside a grid of
// extent `bound`: f(tap, at) for each tap (kd, kh, kw) whose coordinate p * stride +
// k * dilation - pad lies in [0, bound) in every dim, tap being its index in the kernel and
// at the coordinate's index in the grid. qconv gathers with it (p an output position, the
// grid the input), ConvTranspose scatters (p an input position, the grid the output).
template <typename F>
KILN_ALWAYS_INLINE void ForEachTapInside(const Window& w, const int64_t (&bound)[3], int64_t pd, int64_t ph, int64_t pw,
                                         F f) {
  for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
    const int64_t d = pd * w.stride[0] + kd * w.dilation[0] - w.pad[0];
    if (d < 0 || d >= bound[0]) continue;
    for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
      const int64_t h = ph * w.stride[1] + kh * w.dilation[1] - w.pad[1];
      if (h < 0 || h >= bound[1]) continue;
      for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
        const int64_t x = pw * w.stride[2] + kw * w.dilation[2] - w.pad[2];
        if (x < 0 || x >= bound[2]) continue;
        f((kd * w.kernel[1] + kh) * w.kernel[2] + kw, (d * bound[1] + h) * bound[2] + x);
      }
    }
  }
}

// A grouped convolution's extents (Conv, ConvTranspose, ConvInteger): X [N, C, *in] and
// Y [N, OC, *out] in `group` groups of C / group input and OC / group output channels;
// the sizes are the window's (Window::in_size, ...).
struct ConvExtents {
  int64_t group, batch, in_channels, out_channels, ic_per_group, oc_per_group;
  int64_t in_size, out_size, kernel_size;

  KILN_ALWAYS_INLINE ConvExtents(int64_t groups, const Window& w, const kiln_ktensor& x, const kiln_ktensor& y)
      : group(groups),
        batch(x.dims[0]),
        in_channels(x.dims[1]),
        out_channels(y.dims[1]),
        ic_per_group(in_channels / group),
        oc_per_group(out_channels / group),
        in_size(w.in_size()),
        out_size(w.out_size()),
        kernel_size(w.kernel_size()) {}
};

}  // namespace kiln_kernels
