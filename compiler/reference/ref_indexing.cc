// Indexing and generating ops, from the ONNX specification: Gather*, Scatter*, OneHot,
// Trilu, Pad, ConstantOfShape, EyeLike, Range. Negative indices count from the end.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

std::vector<Tensor> One(Tensor t) {
  std::vector<Tensor> out;
  out.push_back(std::move(t));
  return out;
}

absl::StatusOr<int64_t> IndexInto(int64_t index, int64_t size) {
  if (index < -size || index >= size) return Invalid(absl::StrCat("index ", index, " is out of range for ", size));
  return index < 0 ? index + size : index;
}

Outputs Gather(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(data, in, 0);
  KILN_REF_INPUT(indices, in, 1);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), data->rank()));
  std::vector<int64_t> dims(data->dims().begin(), data->dims().begin() + axis);
  dims.insert(dims.end(), indices->dims().begin(), indices->dims().end());
  dims.insert(dims.end(), data->dims().begin() + axis + 1, data->dims().end());
  Tensor out(data->dtype(), dims);
  const std::vector<int64_t> strides = Strides(data->dims()), index_strides = Strides(indices->dims());
  std::vector<int64_t> index(dims.size(), 0);
  const int64_t q = indices->rank();
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    int64_t at = 0, which = 0;
    for (int64_t a = 0; a < axis; ++a) at += index[a] * strides[a];
    for (int64_t a = 0; a < q; ++a) which += index[axis + a] * index_strides[a];
    KILN_ASSIGN_OR_RETURN(int64_t picked, IndexInto(LoadInt(*indices, which), data->dims()[axis]));
    at += picked * strides[axis];
    for (int64_t a = axis + 1; a < data->rank(); ++a) at += index[a - 1 + q] * strides[a];
    CopyElement(*data, at, out, i);
    NextIndex(index, dims);
  }
  return One(std::move(out));
}

Outputs GatherElements(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(data, in, 0);
  KILN_REF_INPUT(indices, in, 1);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), data->rank()));
  Tensor out(data->dtype(), indices->dims());
  const std::vector<int64_t> strides = Strides(data->dims());
  std::vector<int64_t> index(indices->rank(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::vector<int64_t> src = index;
    KILN_ASSIGN_OR_RETURN(src[axis], IndexInto(LoadInt(*indices, i), data->dims()[axis]));
    CopyElement(*data, Dot(src, strides), out, i);
    NextIndex(index, indices->dims());
  }
  return One(std::move(out));
}

Outputs GatherND(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(data, in, 0);
  KILN_REF_INPUT(indices, in, 1);
  const int64_t b = node.GetInt("batch_dims", 0), q = indices->rank(), k = indices->dims().back();
  std::vector<int64_t> dims(indices->dims().begin(), indices->dims().end() - 1);
  dims.insert(dims.end(), data->dims().begin() + b + k, data->dims().end());
  Tensor out(data->dtype(), dims);
  const std::vector<int64_t> strides = Strides(data->dims());
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    // The index tuple sits at indices[index[0 .. q-2], :].
    int64_t tuple = 0;
    for (int64_t a = 0; a < q - 1; ++a) tuple = tuple * indices->dims()[a] + index[a];
    int64_t at = 0;
    for (int64_t a = 0; a < b; ++a) at += index[a] * strides[a];
    for (int64_t j = 0; j < k; ++j) {
      KILN_ASSIGN_OR_RETURN(int64_t picked, IndexInto(LoadInt(*indices, tuple * k + j), data->dims()[b + j]));
      at += picked * strides[b + j];
    }
    for (int64_t a = b + k; a < data->rank(); ++a) at += index[q - 1 + a - b - k] * strides[a];
    CopyElement(*data, at, out, i);
    NextIndex(index, dims);
  }
  return One(std::move(out));
}

// Writes `update` over out[at] with the scatter's reduction ("none", "add", "mul", "max", "min").
void ScatterInto(Tensor& out, int64_t at, const Tensor& updates, int64_t from, const std::string& reduction) {
  if (reduction == "none") return CopyElement(updates, from, out, at);
  // In double for floats, in int64 for integers (exact), the same rule for both.
  auto reduce = [&reduction](auto a, auto b) {
    if (reduction == "add") return a + b;
    if (reduction == "mul") return a * b;
    if (reduction == "max") return std::max(a, b);
    if (reduction == "min") return std::min(a, b);
    return a;
  };
  if (IsFloatType(out.dtype())) return StoreDouble(out, at, reduce(LoadDouble(out, at), LoadDouble(updates, from)));
  StoreInt(out, at, reduce(LoadInt(out, at), LoadInt(updates, from)));
}

Outputs ScatterElements(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(data, in, 0);
  KILN_REF_INPUT(indices, in, 1);
  KILN_REF_INPUT(updates, in, 2);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), data->rank()));
  const std::string reduction = node.GetString("reduction", "none");
  Tensor out = *data;
  const std::vector<int64_t> strides = Strides(data->dims());
  std::vector<int64_t> index(indices->rank(), 0);
  for (int64_t i = 0; i < indices->num_elements(); ++i) {
    std::vector<int64_t> target = index;
    KILN_ASSIGN_OR_RETURN(target[axis], IndexInto(LoadInt(*indices, i), data->dims()[axis]));
    ScatterInto(out, Dot(target, strides), *updates, i, reduction);
    NextIndex(index, indices->dims());
  }
  return One(std::move(out));
}

Outputs ScatterND(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(data, in, 0);
  KILN_REF_INPUT(indices, in, 1);
  KILN_REF_INPUT(updates, in, 2);
  const std::string reduction = node.GetString("reduction", "none");
  const int64_t k = indices->dims().back(), tuples = indices->num_elements() / std::max<int64_t>(k, 1);
  const std::vector<int64_t> strides = Strides(data->dims());
  int64_t slice = 1;
  for (int64_t a = k; a < data->rank(); ++a) slice *= data->dims()[a];
  Tensor out = *data;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t at = 0;
    for (int64_t j = 0; j < k; ++j) {
      KILN_ASSIGN_OR_RETURN(int64_t picked, IndexInto(LoadInt(*indices, t * k + j), data->dims()[j]));
      at += picked * strides[j];
    }
    for (int64_t e = 0; e < slice; ++e) ScatterInto(out, at + e, *updates, t * slice + e, reduction);
  }
  return One(std::move(out));
}

Outputs OneHot(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(indices, in, 0);
  KILN_REF_INPUT(depth_input, in, 1);
  KILN_REF_INPUT(values, in, 2);
  const int64_t depth = static_cast<int64_t>(LoadDouble(*depth_input, 0));
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", -1), indices->rank() + 1));
  std::vector<int64_t> dims = indices->dims();
  dims.insert(dims.begin() + axis, depth);
  Tensor out(values->dtype(), dims);
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::vector<int64_t> at = index;
    at.erase(at.begin() + axis);
    int64_t hot = static_cast<int64_t>(LoadDouble(*indices, Dot(at, Strides(indices->dims()))));
    if (hot < 0) hot += depth;
    CopyElement(*values, hot == index[axis] ? 1 : 0, out, i);
    NextIndex(index, dims);
  }
  return One(std::move(out));
}

Outputs Trilu(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const int64_t k = OptionalInput(in, 1) ? LoadInt(*in[1], 0) : 0;
  const bool upper = node.GetInt("upper", 1) != 0;
  Tensor out = *x;
  std::vector<int64_t> index(x->rank(), 0);
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const int64_t row = index[x->rank() - 2], column = index[x->rank() - 1];
    const bool keep = upper ? column - row >= k : column - row <= k;
    if (!keep) StoreDouble(out, i, 0);
    NextIndex(index, x->dims());
  }
  return One(std::move(out));
}

// Pad: `pads` and `value` are attributes before opset 11, inputs (with `axes` from 18) after.
Outputs Pad(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const int64_t rank = x->rank();
  std::vector<int64_t> given, axes;
  double value = node.GetFloat("value", 0.0);
  const Tensor* constant = nullptr;
  if (node.opset() < 11) {
    given = node.GetInts("pads");
  } else {
    KILN_REF_INPUT(pads_input, in, 1);
    given = IntsOf(*pads_input);
    constant = OptionalInput(in, 2);
    if (const Tensor* t = OptionalInput(in, 3)) axes = IntsOf(*t);
  }
  if (axes.empty()) {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  const int64_t n = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(given.size()) != 2 * n) return Invalid("pads has the wrong length");
  std::vector<int64_t> before(rank, 0), dims = x->dims();
  for (int64_t k = 0; k < n; ++k) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(axes[k], rank));
    before[axis] = given[k];
    dims[axis] += given[k] + given[k + n];
  }
  const std::string mode = node.GetString("mode", "constant");
  const std::vector<int64_t> strides = Strides(x->dims());
  Tensor out(x->dtype(), dims);
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    int64_t at = 0;
    bool outside = false;
    for (int64_t a = 0; a < rank; ++a) {
      const int64_t size = x->dims()[a];
      int64_t s = index[a] - before[a];
      if (s < 0 || s >= size) {
        if (mode == "edge") s = std::clamp<int64_t>(s, 0, size - 1);
        if (mode == "wrap") s = ((s % size) + size) % size;
        while (mode == "reflect" && size > 1 && (s < 0 || s >= size)) s = s < 0 ? -s : 2 * (size - 1) - s;
        if (mode == "reflect" && size == 1) s = 0;
        outside = mode == "constant";
      }
      at += s * strides[a];
    }
    if (!outside) {
      CopyElement(*x, at, out, i);
    } else if (constant != nullptr) {
      CopyElement(*constant, 0, out, i);
    } else {
      StoreDouble(out, i, value);
    }
    NextIndex(index, dims);
  }
  return One(std::move(out));
}

Outputs ConstantOfShape(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(shape, in, 0);
  const Tensor* value = node.GetTensor("value");
  Tensor out(value ? value->dtype() : DType::kFloat32, IntsOf(*shape));
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    if (value) CopyElement(*value, 0, out, i);
    if (!value) StoreDouble(out, i, 0);
  }
  return One(std::move(out));
}

Outputs EyeLike(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const DType dtype = node.has_attr("dtype") ? static_cast<DType>(node.GetInt("dtype", 1)) : x->dtype();
  const int64_t k = node.GetInt("k", 0), columns = x->dims()[1];
  Tensor out(dtype, x->dims());
  for (int64_t i = 0; i < out.num_elements(); ++i) StoreDouble(out, i, i % columns - i / columns == k ? 1 : 0);
  return One(std::move(out));
}

Outputs Range(const Node&, const Inputs& in) {
  KILN_REF_INPUT(start, in, 0);
  KILN_REF_INPUT(limit, in, 1);
  KILN_REF_INPUT(delta, in, 2);
  const double s = LoadDouble(*start, 0), l = LoadDouble(*limit, 0), d = LoadDouble(*delta, 0);
  const int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((l - s) / d)), 0);
  Tensor out(start->dtype(), {n});
  for (int64_t i = 0; i < n; ++i) {
    if (IsFloatType(start->dtype())) StoreDouble(out, i, s + static_cast<double>(i) * d);
    if (!IsFloatType(start->dtype())) StoreInt(out, i, LoadInt(*start, 0) + i * LoadInt(*delta, 0));
  }
  return One(std::move(out));
}

}  // namespace

void AddIndexingOps(RefTable& table) {
  table["Gather"] = Gather;
  table["GatherElements"] = GatherElements;
  table["GatherND"] = GatherND;
  table["ScatterElements"] = ScatterElements;
  table["Scatter"] = ScatterElements;  // the deprecated name, without reductions
  table["ScatterND"] = ScatterND;
  table["OneHot"] = OneHot;
  table["Trilu"] = Trilu;
  table["Pad"] = Pad;
  table["ConstantOfShape"] = ConstantOfShape;
  table["EyeLike"] = EyeLike;
  table["Range"] = Range;
}

}  // namespace kiln::ref
