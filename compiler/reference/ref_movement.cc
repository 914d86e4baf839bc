// Data movement and shape ops, from the ONNX specification: each output element names the
// input element it copies (Remap), so no op converts values it only moves.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

// Output element at each index of `dims` copies src[source(index)].
Tensor Remap(const Tensor& src, const std::vector<int64_t>& dims,
             const std::function<int64_t(const std::vector<int64_t>&)>& source) {
  Tensor out(src.dtype(), dims);
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    CopyElement(src, source(index), out, i);
    NextIndex(index, dims);
  }
  return out;
}

Tensor WithDims(const Tensor& src, const std::vector<int64_t>& dims) {
  return Remap(src, dims, [&](const std::vector<int64_t>& index) { return Dot(index, Strides(dims)); });
}

std::vector<Tensor> One(Tensor t) {
  std::vector<Tensor> out;
  out.push_back(std::move(t));
  return out;
}

Outputs Reshape(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(data, in, 0);
  KILN_REF_INPUT(shape, in, 1);
  std::vector<int64_t> dims = IntsOf(*shape);
  const bool allow_zero = node.GetInt("allowzero", 0) != 0;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allow_zero) {
      if (static_cast<int64_t>(i) >= data->rank()) return Invalid("shape copies a dimension the input lacks");
      dims[i] = data->dims()[i];
    }
    if (dims[i] == -1) {
      infer_at = static_cast<int64_t>(i);
    } else {
      known *= dims[i];
    }
  }
  if (infer_at >= 0) dims[infer_at] = known == 0 ? 0 : data->num_elements() / known;
  if (NumElements(dims) != data->num_elements()) {
    return Invalid(
        absl::StrCat("cannot reshape ", data->num_elements(), " elements to [", absl::StrJoin(dims, ","), "]"));
  }
  return One(WithDims(*data, dims));
}

Outputs Flatten(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  int64_t axis = node.GetInt("axis", 1);
  if (axis < 0) axis += x->rank();
  if (axis < 0 || axis > x->rank()) return Invalid(absl::StrCat("axis ", axis, " is out of range"));
  int64_t outer = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= x->dims()[a];
  return One(WithDims(*x, {outer, outer == 0 ? 0 : x->num_elements() / outer}));
}

Outputs Squeeze(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  std::vector<int64_t> axes = AxesFromAttrOrInput(node, in, "axes", 1);
  std::vector<bool> drop(x->rank(), false);
  for (int64_t a = 0; a < x->rank(); ++a) drop[a] = axes.empty() && x->dims()[a] == 1;
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(a, x->rank()));
    if (x->dims()[axis] != 1) return Invalid(absl::StrCat("cannot squeeze axis ", a, " of size ", x->dims()[axis]));
    drop[axis] = true;
  }
  std::vector<int64_t> dims;
  for (int64_t a = 0; a < x->rank(); ++a) {
    if (!drop[a]) dims.push_back(x->dims()[a]);
  }
  return One(WithDims(*x, dims));
}

Outputs Unsqueeze(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  std::vector<int64_t> axes = AxesFromAttrOrInput(node, in, "axes", 1);
  const int64_t rank = x->rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(a, rank));
    inserted[axis] = true;
  }
  std::vector<int64_t> dims;
  for (int64_t a = 0, from = 0; a < rank; ++a) dims.push_back(inserted[a] ? 1 : x->dims()[from++]);
  return One(WithDims(*x, dims));
}

Outputs Transpose(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  std::vector<int64_t> perm = node.GetInts("perm");
  if (perm.empty()) {
    for (int64_t a = x->rank(); a-- > 0;) perm.push_back(a);
  }
  if (static_cast<int64_t>(perm.size()) != x->rank()) return Invalid("perm does not match the input's rank");
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(x->dims()[p]);
  const std::vector<int64_t> strides = Strides(x->dims());
  return One(Remap(*x, dims, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t a = 0; a < perm.size(); ++a) at += index[a] * strides[perm[a]];
    return at;
  }));
}

// Slice: starts/ends/axes are attributes before opset 10, inputs (with steps) from then on.
Outputs Slice(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (node.opset() < 10) {
    starts = node.GetInts("starts"), ends = node.GetInts("ends"), axes = node.GetInts("axes");
  } else {
    KILN_REF_INPUT(starts_input, in, 1);
    KILN_REF_INPUT(ends_input, in, 2);
    starts = IntsOf(*starts_input), ends = IntsOf(*ends_input);
    if (const Tensor* t = OptionalInput(in, 3)) axes = IntsOf(*t);
    if (const Tensor* t = OptionalInput(in, 4)) steps = IntsOf(*t);
  }
  if (axes.empty()) {
    for (size_t a = 0; a < starts.size(); ++a) axes.push_back(static_cast<int64_t>(a));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> first(x->rank(), 0), step(x->rank(), 1), dims = x->dims();
  for (size_t k = 0; k < axes.size(); ++k) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(axes[k], x->rank()));
    const int64_t size = x->dims()[axis], s = steps[k];
    if (s == 0) return Invalid("a slice step is 0");
    int64_t b = starts[k] < 0 ? starts[k] + size : starts[k];
    int64_t e = ends[k] < 0 ? ends[k] + size : ends[k];
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, size), e = std::clamp<int64_t>(e, 0, size);
      dims[axis] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, size - 1), e = std::clamp<int64_t>(e, -1, size - 1);
      dims[axis] = b > e ? (b - e - s - 1) / -s : 0;
    }
    first[axis] = b, step[axis] = s;
  }
  const std::vector<int64_t> strides = Strides(x->dims());
  return One(Remap(*x, dims, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t a = 0; a < index.size(); ++a) at += (first[a] + index[a] * step[a]) * strides[a];
    return at;
  }));
}

Outputs Expand(const Node&, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(shape, in, 1);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastDims({x->dims(), IntsOf(*shape)}));
  const std::vector<int64_t> strides = BroadcastStrides(x->dims(), dims);
  return One(Remap(*x, dims, [&](const std::vector<int64_t>& index) { return Dot(index, strides); }));
}

Outputs Concat(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(first, in, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), first->rank()));
  std::vector<int64_t> dims = first->dims();
  dims[axis] = 0;
  for (const Tensor* t : in) dims[axis] += t->dims()[axis];
  Tensor out(first->dtype(), dims);
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    int64_t along = index[axis];
    size_t k = 0;
    while (along >= in[k]->dims()[axis]) along -= in[k++]->dims()[axis];
    std::vector<int64_t> src_index = index;
    src_index[axis] = along;
    CopyElement(*in[k], Dot(src_index, Strides(in[k]->dims())), out, i);
    NextIndex(index, dims);
  }
  return One(std::move(out));
}

// Split sizes: the `split` attribute (before 13) or input, else equal parts (the last one
// smaller when the size does not divide, as opset 18's num_outputs allows).
Outputs Split(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), x->rank()));
  std::vector<int64_t> sizes = AxesFromAttrOrInput(node, in, "split", 1);
  const int64_t total = x->dims()[axis];
  if (sizes.empty()) {
    const int64_t parts = static_cast<int64_t>(node.outputs().size());
    const int64_t each = (total + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, total - p * each));
  }
  std::vector<Tensor> outs;
  int64_t offset = 0;
  const std::vector<int64_t> strides = Strides(x->dims());
  for (int64_t size : sizes) {
    std::vector<int64_t> dims = x->dims();
    dims[axis] = size;
    outs.push_back(Remap(
        *x, dims, [&](const std::vector<int64_t>& index) { return Dot(index, strides) + offset * strides[axis]; }));
    offset += size;
  }
  if (offset != total) return Invalid(absl::StrCat("split sizes add up to ", offset, ", the axis has ", total));
  return outs;
}

Outputs Tile(const Node&, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(repeats_input, in, 1);
  const std::vector<int64_t> repeats = IntsOf(*repeats_input);
  if (static_cast<int64_t>(repeats.size()) != x->rank()) return Invalid("repeats does not match the input's rank");
  std::vector<int64_t> dims = x->dims();
  for (size_t a = 0; a < dims.size(); ++a) dims[a] *= repeats[a];
  const std::vector<int64_t> strides = Strides(x->dims());
  return One(Remap(*x, dims, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t a = 0; a < index.size(); ++a) at += (index[a] % x->dims()[a]) * strides[a];
    return at;
  }));
}

Outputs DepthToSpace(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const int64_t b = node.GetInt("blocksize", 1);
  const bool crd = node.GetString("mode", "DCR") == "CRD";
  const int64_t n = x->dims()[0], c = x->dims()[1], h = x->dims()[2], w = x->dims()[3];
  const int64_t oc = c / (b * b);
  return One(Remap(*x, {n, oc, h * b, w * b}, [&](const std::vector<int64_t>& i) {
    const int64_t bh = i[2] % b, bw = i[3] % b;
    // DCR: channel = (bh * b + bw) * oc + c; CRD: channel = (c * b + bh) * b + bw.
    const int64_t channel = crd ? (i[1] * b + bh) * b + bw : (bh * b + bw) * oc + i[1];
    return ((i[0] * c + channel) * h + i[2] / b) * w + i[3] / b;
  }));
}

Outputs SpaceToDepth(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const int64_t b = node.GetInt("blocksize", 1);
  const int64_t n = x->dims()[0], c = x->dims()[1], h = x->dims()[2], w = x->dims()[3];
  return One(Remap(*x, {n, c * b * b, h / b, w / b}, [&](const std::vector<int64_t>& i) {
    const int64_t block = i[1] / c, channel = i[1] % c;
    return ((i[0] * c + channel) * h + i[2] * b + block / b) * w + i[3] * b + block % b;
  }));
}

Outputs Shape(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const int64_t rank = x->rank();
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clamp(node.GetInt("start", 0)), end = clamp(node.GetInt("end", rank));
  Tensor out(DType::kInt64, {std::max<int64_t>(end - start, 0)});
  for (int64_t a = start; a < end; ++a) StoreInt(out, a - start, x->dims()[a]);
  return One(std::move(out));
}

Outputs Size(const Node&, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  Tensor out(DType::kInt64, {});
  StoreInt(out, 0, x->num_elements());
  return One(std::move(out));
}

}  // namespace

void AddMovementOps(RefTable& table) {
  table["Reshape"] = Reshape;
  table["Flatten"] = Flatten;
  table["Squeeze"] = Squeeze;
  table["Unsqueeze"] = Unsqueeze;
  table["Transpose"] = Transpose;
  table["Slice"] = Slice;
  table["Expand"] = Expand;
  table["Concat"] = Concat;
  table["Split"] = Split;
  table["Tile"] = Tile;
  table["DepthToSpace"] = DepthToSpace;
  table["SpaceToDepth"] = SpaceToDepth;
  table["Shape"] = Shape;
  table["Size"] = Size;
}

}  // namespace kiln::ref
