// Conv and ConvTranspose, from the ONNX specification. Spatial dims are padded to three
// (leading 1s) so one set of plain loops serves 1-D, 2-D and 3-D; the loop order keeps
// the innermost loop on contiguous output so ResNet-sized layers take well under seconds.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

// A Window's per-axis numbers padded to three spatial axes.
struct Window3 {
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad[3];
};

Window3 Pad3(const std::vector<int64_t>& in_spatial, const Window& w) {
  Window3 w3;
  const size_t lead = 3 - in_spatial.size();
  for (size_t i = 0; i < 3; ++i) {
    const bool real = i >= lead;
    w3.in[i] = real ? in_spatial[i - lead] : 1;
    w3.out[i] = real ? w.out[i - lead] : 1;
    w3.kernel[i] = real ? w.kernel[i - lead] : 1;
    w3.stride[i] = real ? w.strides[i - lead] : 1;
    w3.dilation[i] = real ? w.dilations[i - lead] : 1;
    w3.pad[i] = real ? w.pad_begin[i - lead] : 0;
  }
  return w3;
}

std::vector<int64_t> Spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

}  // namespace

absl::StatusOr<Dense> Convolve(const Node& node, const Dense& x, const Dense& w) {
  if (x.dims.size() < 3 || x.dims.size() > 5 || w.dims.size() != x.dims.size()) {
    return Invalid("Conv needs X and W of the same rank, 3 to 5");
  }
  const int64_t batch = x.dims[0], channels = x.dims[1], maps = w.dims[0], group = node.GetInt("group", 1);
  if (group <= 0 || channels % group != 0 || maps % group != 0 || w.dims[1] * group != channels) {
    return Invalid(
        absl::StrCat("W's ", w.dims[1], " channels per group do not match X's ", channels, " in ", group, " groups"));
  }
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape", Spatial(w.dims));
  KILN_ASSIGN_OR_RETURN(Window window, SlidingWindow(node, Spatial(x.dims), kernel));
  const Window3 g = Pad3(Spatial(x.dims), window);
  const int64_t per_group_in = channels / group, per_group_out = maps / group;
  const int64_t in_size = g.in[0] * g.in[1] * g.in[2], out_size = g.out[0] * g.out[1] * g.out[2];
  const int64_t kernel_size = g.kernel[0] * g.kernel[1] * g.kernel[2];
  Dense y;
  y.dims = {batch, maps};
  y.dims.insert(y.dims.end(), window.out.begin(), window.out.end());
  y.values.assign(batch * maps * out_size, 0.0);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t m = 0; m < maps; ++m) {
      double* out = &y.values[(n * maps + m) * out_size];
      const int64_t first_channel = (m / per_group_out) * per_group_in;
      for (int64_t c = 0; c < per_group_in; ++c) {
        const double* in = &x.values[(n * channels + first_channel + c) * in_size];
        const double* weights = &w.values[(m * per_group_in + c) * kernel_size];
        for (int64_t kz = 0; kz < g.kernel[0]; ++kz) {
          for (int64_t ky = 0; ky < g.kernel[1]; ++ky) {
            for (int64_t kx = 0; kx < g.kernel[2]; ++kx) {
              const double weight = weights[(kz * g.kernel[1] + ky) * g.kernel[2] + kx];
              for (int64_t oz = 0; oz < g.out[0]; ++oz) {
                const int64_t iz = oz * g.stride[0] - g.pad[0] + kz * g.dilation[0];
                if (iz < 0 || iz >= g.in[0]) continue;
                for (int64_t oy = 0; oy < g.out[1]; ++oy) {
                  const int64_t iy = oy * g.stride[1] - g.pad[1] + ky * g.dilation[1];
                  if (iy < 0 || iy >= g.in[1]) continue;
                  const double* row = in + (iz * g.in[1] + iy) * g.in[2];
                  double* out_row = out + (oz * g.out[1] + oy) * g.out[2];
                  for (int64_t ox = 0; ox < g.out[2]; ++ox) {
                    const int64_t ix = ox * g.stride[2] - g.pad[2] + kx * g.dilation[2];
                    if (ix >= 0 && ix < g.in[2]) out_row[ox] += weight * row[ix];
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return y;
}

namespace {

// Adds bias b[m] to every element of output map m.
void AddBias(Dense& y, const Tensor* bias) {
  if (bias == nullptr) return;
  const int64_t maps = y.dims[1], size = static_cast<int64_t>(y.values.size()) / (y.dims[0] * maps);
  for (size_t i = 0; i < y.values.size(); ++i) y.values[i] += LoadDouble(*bias, (i / size) % maps);
}

Outputs Conv(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(w, in, 1);
  KILN_ASSIGN_OR_RETURN(Dense y, Convolve(node, ToDense(*x), ToDense(*w)));
  AddBias(y, OptionalInput(in, 2));
  return std::vector<Tensor>{FromDense(y, x->dtype())};
}

// Python's floor division, which the specification's padding formulas use.
int64_t FloorHalf(int64_t total) { return total >= 0 ? total / 2 : -((-total + 1) / 2); }

// ConvTranspose's output size and padding: given pads, or output_shape / SAME auto_pad, from
// which the total padding follows and is split as the specification says.
absl::Status TransposedWindow(const Node& node, const std::vector<int64_t>& in_spatial, Window& w) {
  const size_t n = in_spatial.size();
  const std::vector<int64_t> output_padding = node.GetInts("output_padding", std::vector<int64_t>(n, 0));
  const std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * n, 0));
  std::vector<int64_t> output_shape = node.GetInts("output_shape");
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  if (output_padding.size() != n || pads.size() != 2 * n) return Invalid("output_padding or pads has the wrong length");
  if (output_shape.size() > n) output_shape.erase(output_shape.begin(), output_shape.end() - n);
  w.pad_begin.assign(n, 0), w.pad_end.assign(n, 0), w.out.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t natural =
        w.strides[i] * (in_spatial[i] - 1) + output_padding[i] + (w.kernel[i] - 1) * w.dilations[i] + 1;
    if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t target = output_shape.empty() ? in_spatial[i] * w.strides[i] : output_shape[i];
      const int64_t total = natural - target;
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? FloorHalf(total) : total - FloorHalf(total);
      w.pad_end[i] = total - w.pad_begin[i];
      w.out[i] = target;
    } else {
      if (auto_pad != "VALID") w.pad_begin[i] = pads[i], w.pad_end[i] = pads[i + n];
      w.out[i] = natural - w.pad_begin[i] - w.pad_end[i];
    }
  }
  return absl::OkStatus();
}

Outputs ConvTranspose(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x_input, in, 0);
  KILN_REF_INPUT(w_input, in, 1);
  const Dense x = ToDense(*x_input), w = ToDense(*w_input);
  if (x.dims.size() < 3 || x.dims.size() > 5 || w.dims.size() != x.dims.size()) {
    return Invalid("ConvTranspose needs X and W of the same rank, 3 to 5");
  }
  const int64_t batch = x.dims[0], channels = x.dims[1], group = node.GetInt("group", 1);
  if (group <= 0 || w.dims[0] != channels || channels % group != 0) return Invalid("W does not match X's channels");
  const int64_t per_group_in = channels / group, per_group_out = w.dims[1], maps = per_group_out * group;
  const size_t n = x.dims.size() - 2;
  Window window;
  window.kernel = node.GetInts("kernel_shape", Spatial(w.dims));
  window.strides = node.GetInts("strides", std::vector<int64_t>(n, 1));
  window.dilations = node.GetInts("dilations", std::vector<int64_t>(n, 1));
  if (absl::Status s = TransposedWindow(node, Spatial(x.dims), window); !s.ok()) return s;
  const Window3 g = Pad3(Spatial(x.dims), window);
  const int64_t in_size = g.in[0] * g.in[1] * g.in[2], out_size = g.out[0] * g.out[1] * g.out[2];
  const int64_t kernel_size = g.kernel[0] * g.kernel[1] * g.kernel[2];
  Dense y{{batch, maps}, std::vector<double>(batch * maps * out_size, 0.0)};
  y.dims.insert(y.dims.end(), window.out.begin(), window.out.end());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < channels; ++c) {
      const double* input = &x.values[(b * channels + c) * in_size];
      for (int64_t m = 0; m < per_group_out; ++m) {
        double* out = &y.values[(b * maps + (c / per_group_in) * per_group_out + m) * out_size];
        const double* weights = &w.values[(c * per_group_out + m) * kernel_size];
        for (int64_t i = 0; i < in_size; ++i) {
          const int64_t iz = i / (g.in[1] * g.in[2]), iy = (i / g.in[2]) % g.in[1], ix = i % g.in[2];
          for (int64_t k = 0; k < kernel_size; ++k) {
            const int64_t kz = k / (g.kernel[1] * g.kernel[2]), ky = (k / g.kernel[2]) % g.kernel[1],
                          kx = k % g.kernel[2];
            const int64_t oz = iz * g.stride[0] + kz * g.dilation[0] - g.pad[0];
            const int64_t oy = iy * g.stride[1] + ky * g.dilation[1] - g.pad[1];
            const int64_t ox = ix * g.stride[2] + kx * g.dilation[2] - g.pad[2];
            if (oz < 0 || oz >= g.out[0] || oy < 0 || oy >= g.out[1] || ox < 0 || ox >= g.out[2]) continue;
            out[(oz * g.out[1] + oy) * g.out[2] + ox] += input[i] * weights[k];
          }
        }
      }
    }
  }
  AddBias(y, OptionalInput(in, 2));
  return std::vector<Tensor>{FromDense(y, x_input->dtype())};
}

}  // namespace

void AddConvOps(RefTable& table) {
  table["Conv"] = Conv;
  table["ConvTranspose"] = ConvTranspose;
}

}  // namespace kiln::ref
