// Opset 18's bitwise ops and CenterCropPad, from the ONNX specification.
#include <cstring>

#include "ref_util.h"

namespace kiln::ref {
namespace {

// BitwiseAnd/Or/Xor: integers, numpy broadcasting, on the two's-complement bits.
RefFn Bitwise(std::function<int64_t(int64_t, int64_t)> op) {
  return [op](const Node&, const Inputs& in) -> Outputs {
    const Tensor &a = *in[0], &b = *in[1];
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastDims({a.dims(), b.dims()}));
    Tensor out(a.dtype(), dims);
    const std::vector<int64_t> sa = BroadcastStrides(a.dims(), dims), sb = BroadcastStrides(b.dims(), dims);
    std::vector<int64_t> index(dims.size(), 0);
    for (int64_t i = 0; i < out.num_elements(); ++i, NextIndex(index, dims)) {
      StoreInt(out, i, op(LoadInt(a, Dot(index, sa)), LoadInt(b, Dot(index, sb))));
    }
    return std::vector<Tensor>{std::move(out)};
  };
}

Outputs BitwiseNot(const Node&, const Inputs& in) {
  Tensor out(in[0]->dtype(), in[0]->dims());
  for (int64_t i = 0; i < out.num_elements(); ++i) StoreInt(out, i, ~LoadInt(*in[0], i));
  return std::vector<Tensor>{std::move(out)};
}

// CenterCropPad: each listed axis cropped or zero-padded to its target size, centred (the
// odd element goes to the end).
Outputs CenterCropPad(const Node& node, const Inputs& in) {
  const Tensor& x = *in[0];
  const int64_t rank = x.rank();
  const std::vector<int64_t> targets = IntsOf(*in[1]);
  std::vector<int64_t> axes = node.GetInts("axes");
  if (axes.empty()) {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  if (axes.size() != targets.size()) return Invalid("shape and axes differ in length");
  std::vector<int64_t> dims = x.dims(), shift(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axes[i], rank));
    const int64_t size = x.dims()[axis], target = targets[i];
    dims[axis] = target;
    // Output index o reads input o + shift: a crop starts (size - target) / 2 in, a pad
    // places the input (target - size) / 2 in.
    shift[axis] = size > target ? (size - target) / 2 : -((target - size) / 2);
  }
  Tensor out(x.dtype(), dims);
  std::memset(out.data(), 0, static_cast<size_t>(out.size_bytes()));
  const std::vector<int64_t> strides = Strides(x.dims());
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i, NextIndex(index, dims)) {
    int64_t at = 0;
    bool inside = true;
    for (int64_t d = 0; d < rank && inside; ++d) {
      const int64_t src = index[d] + shift[d];
      inside = src >= 0 && src < x.dims()[d];
      at += src * strides[d];
    }
    if (inside) CopyElement(x, at, out, i);
  }
  return std::vector<Tensor>{std::move(out)};
}

}  // namespace

void AddBitwiseOps(RefTable& table) {
  table["BitwiseAnd"] = Bitwise([](int64_t a, int64_t b) { return a & b; });
  table["BitwiseOr"] = Bitwise([](int64_t a, int64_t b) { return a | b; });
  table["BitwiseXor"] = Bitwise([](int64_t a, int64_t b) { return a ^ b; });
  table["BitwiseNot"] = BitwiseNot;
  table["CenterCropPad"] = CenterCropPad;
}

}  // namespace kiln::ref
