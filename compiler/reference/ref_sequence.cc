// Reference: sequence and optional ops, from the ONNX specification (opsets 11-21).
// Values are Tensors of kind kSequence / kOptional* (tensor.h); element data is copied.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/reference.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

absl::StatusOr<const Tensor*> SequenceInput(const Inputs& in, size_t i) {
  const Tensor* t = OptionalInput(in, i);
  if (t == nullptr || t->kind() != ValueKind::kSequence) {
    return Invalid(absl::StrCat("input ", i, " must be a sequence"));
  }
  return t;
}

// A position input (a scalar) in [-n, n - 1], or [-n, n] where `end_ok`, made non-negative.
absl::StatusOr<int64_t> Position(const Tensor& t, int64_t n, bool end_ok) {
  if (!t.is_tensor() || t.num_elements() != 1) return Invalid("position must be a scalar tensor");
  int64_t p = t.GetAsInt64(0);
  if (p < -n || p > (end_ok ? n : n - 1)) {
    return Invalid(absl::StrCat("position ", p, " is out of range for a sequence of ", n));
  }
  return p < 0 ? p + n : p;
}

Outputs One(Tensor t) {
  std::vector<Tensor> out;
  out.push_back(std::move(t));
  return out;
}

// Elements [begin, end) of the row-major slice of `x` along `axis` (dims `dims` kept).
Tensor SliceAxis(const Tensor& x, int64_t axis, int64_t begin, int64_t length) {
  std::vector<int64_t> dims = x.dims();
  dims[axis] = length;
  Tensor out(x.dtype(), dims);
  std::vector<int64_t> index(dims.size(), 0);
  const std::vector<int64_t> strides = Strides(x.dims());
  int64_t k = 0;
  if (out.num_elements() == 0) return out;
  do {
    std::vector<int64_t> src = index;
    src[axis] += begin;
    CopyElement(x, Dot(src, strides), out, k++);
  } while (NextIndex(index, dims));
  return out;
}

Outputs SplitToSequence(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), x->rank()));
  const int64_t extent = x->dims()[axis];
  const Tensor* split = OptionalInput(in, 1);
  std::vector<int64_t> lengths;
  if (split == nullptr) {
    lengths.assign(extent, 1);
  } else if (split->rank() == 0) {
    const int64_t chunk = split->GetAsInt64(0);
    if (chunk <= 0) return Invalid("split must be positive");
    for (int64_t start = 0; start < extent; start += chunk) lengths.push_back(std::min(chunk, extent - start));
  } else {
    lengths = IntsOf(*split);
    int64_t total = 0;
    for (int64_t l : lengths) total += l;
    if (total != extent) return Invalid("split does not add up to the axis");
  }
  const bool drop = split == nullptr && node.GetInt("keepdims", 1) == 0;
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t length : lengths) {
    Tensor piece = SliceAxis(*x, axis, start, length);
    start += length;
    if (drop) {
      std::vector<int64_t> dims = piece.dims();
      dims.erase(dims.begin() + axis);
      Tensor squeezed(piece.dtype(), dims);
      for (int64_t i = 0; i < piece.num_elements(); ++i) CopyElement(piece, i, squeezed, i);
      piece = std::move(squeezed);
    }
    pieces.push_back(std::move(piece));
  }
  return One(Tensor::Sequence(x->dtype(), std::move(pieces)));
}

Outputs ConcatFromSequence(const Node& node, const Inputs& in) {
  KILN_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(in, 0));
  const std::vector<Tensor>& items = seq->elements();
  if (items.empty()) return Invalid("an empty sequence has nothing to concatenate");
  const bool new_axis = node.GetInt("new_axis", 0) != 0;
  const int64_t rank = items[0].rank();
  KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node.GetInt("axis", 0), rank + (new_axis ? 1 : 0)));
  // Each element seen with the new axis of size 1 where there is one.
  std::vector<Tensor> parts;
  for (const Tensor& t : items) {
    if (t.rank() != rank || t.dtype() != items[0].dtype()) return Invalid("elements differ in rank or type");
    std::vector<int64_t> dims = t.dims();
    if (new_axis) dims.insert(dims.begin() + axis, 1);
    Tensor part(t.dtype(), dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) CopyElement(t, i, part, i);
    parts.push_back(std::move(part));
  }
  std::vector<int64_t> dims = parts[0].dims();
  dims[axis] = 0;
  for (const Tensor& p : parts) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (static_cast<int64_t>(d) != axis && p.dims()[d] != parts[0].dims()[d]) {
        return Invalid("elements differ off the concatenation axis");
      }
    }
    dims[axis] += p.dims()[axis];
  }
  Tensor out(parts[0].dtype(), dims);
  if (out.num_elements() == 0) return One(std::move(out));
  std::vector<int64_t> index(dims.size(), 0);
  int64_t k = 0;
  do {
    int64_t along = index[axis];
    size_t p = 0;
    while (along >= parts[p].dims()[axis]) along -= parts[p++].dims()[axis];
    std::vector<int64_t> src = index;
    src[axis] = along;
    CopyElement(parts[p], Dot(src, Strides(parts[p].dims())), out, k++);
  } while (NextIndex(index, dims));
  return One(std::move(out));
}

void AddSequenceBuilders(RefTable& table) {
  table["SequenceEmpty"] = [](const Node& node, const Inputs&) -> Outputs {
    return One(Tensor::Sequence(static_cast<DType>(node.GetInt("dtype", 1)), {}));
  };
  table["SequenceConstruct"] = [](const Node&, const Inputs& in) -> Outputs {
    std::vector<Tensor> items;
    for (const Tensor* t : in) {
      if (t == nullptr || !t->is_tensor()) return Invalid("SequenceConstruct takes tensors");
      items.push_back(*t);
    }
    const DType dtype = items.empty() ? DType::kFloat32 : items[0].dtype();
    return One(Tensor::Sequence(dtype, std::move(items)));
  };
  table["SequenceInsert"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(in, 0));
    KILN_REF_INPUT(tensor, in, 1);
    std::vector<Tensor> items = seq->elements();
    int64_t at = static_cast<int64_t>(items.size());
    if (const Tensor* p = OptionalInput(in, 2)) {
      KILN_ASSIGN_OR_RETURN(at, Position(*p, at, true));
    }
    items.insert(items.begin() + at, *tensor);
    return One(Tensor::Sequence(seq->element_dtype(), std::move(items)));
  };
  table["SequenceErase"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(in, 0));
    std::vector<Tensor> items = seq->elements();
    const int64_t n = static_cast<int64_t>(items.size());
    if (n == 0) return Invalid("cannot erase from an empty sequence");
    int64_t at = n - 1;
    if (const Tensor* p = OptionalInput(in, 1)) {
      KILN_ASSIGN_OR_RETURN(at, Position(*p, n, false));
    }
    items.erase(items.begin() + at);
    return One(Tensor::Sequence(seq->element_dtype(), std::move(items)));
  };
}

void AddSequenceReaders(RefTable& table) {
  table["SequenceAt"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(in, 0));
    KILN_REF_INPUT(position, in, 1);
    KILN_ASSIGN_OR_RETURN(int64_t at, Position(*position, static_cast<int64_t>(seq->elements().size()), false));
    return One(seq->elements()[at]);
  };
  table["SequenceLength"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(in, 0));
    Tensor out(DType::kInt64, {});
    out.data_as<int64_t>()[0] = static_cast<int64_t>(seq->elements().size());
    return One(std::move(out));
  };
  table["SplitToSequence"] = SplitToSequence;
  table["ConcatFromSequence"] = ConcatFromSequence;
}

void AddOptionalOps(RefTable& table) {
  table["Optional"] = [](const Node& node, const Inputs& in) -> Outputs {
    const Tensor* x = OptionalInput(in, 0);
    if (x == nullptr) {
      KILN_ASSIGN_OR_RETURN(TensorType type, ParseType(node.GetString("type", "")));
      return One(Tensor::Optional(type.is_tensor() ? ValueKind::kOptional : ValueKind::kOptionalSequence, type.dtype,
                                  nullptr));
    }
    if (x->kind() != ValueKind::kTensor && x->kind() != ValueKind::kSequence) {
      return Invalid("Optional takes a tensor or a sequence");
    }
    return One(
        Tensor::Optional(x->is_tensor() ? ValueKind::kOptional : ValueKind::kOptionalSequence, x->element_dtype(), x));
  };
  // Opset 18 lets both take a tensor or a sequence (present) or nothing (empty).
  table["OptionalHasElement"] = [](const Node&, const Inputs& in) -> Outputs {
    const Tensor* x = OptionalInput(in, 0);
    Tensor out(DType::kBool, {});
    const bool empty =
        x == nullptr ||
        ((x->kind() == ValueKind::kOptional || x->kind() == ValueKind::kOptionalSequence) && x->elements().empty());
    out.data_as<bool>()[0] = !empty;
    return One(std::move(out));
  };
  table["OptionalGetElement"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    if (x->kind() == ValueKind::kTensor || x->kind() == ValueKind::kSequence) return One(*x);
    if (x->elements().empty()) return Invalid("the optional is empty");
    return One(x->elements()[0]);
  };
}

// SequenceMap: the body on each position's elements (a tensor input whole, captured values
// after), each body output gathered into a sequence.
Outputs SequenceMap(const Node& node, const Inputs& in) {
  const Graph* body = node.GetGraph("body");
  if (body == nullptr) return Invalid("no graph attribute 'body'");
  KILN_ASSIGN_OR_RETURN(const Tensor* first, SequenceInput(in, 0));
  const size_t own = in.size() - std::min(in.size(), node.num_captured());
  const size_t n = first->elements().size();
  for (size_t i = 1; i < own; ++i) {
    if (in[i]->kind() == ValueKind::kSequence && in[i]->elements().size() != n) {
      return Invalid("the input sequences differ in length");
    }
  }
  std::vector<std::vector<Tensor>> results(body->outputs().size());
  for (size_t position = 0; position < n; ++position) {
    std::vector<Tensor> args;
    for (size_t i = 0; i < in.size(); ++i) {
      const bool element = i < own && in[i]->kind() == ValueKind::kSequence;
      args.push_back(element ? in[i]->elements()[position] : *in[i]);
    }
    absl::StatusOr<std::vector<Tensor>> outputs = ReferenceRunGraph(*body, args);
    if (!outputs.ok()) return Invalid(absl::StrCat("subgraph 'body': ", outputs.status().message()));
    for (size_t k = 0; k < outputs->size() && k < results.size(); ++k) results[k].push_back((*outputs)[k]);
  }
  std::vector<Tensor> out;
  for (size_t k = 0; k < results.size(); ++k) {
    out.push_back(Tensor::Sequence(node.output(k)->type().dtype, std::move(results[k])));
  }
  return out;
}

}  // namespace

void AddSequenceOps(RefTable& table) {
  table["SequenceMap"] = SequenceMap;
  AddSequenceBuilders(table);
  AddSequenceReaders(table);
  AddOptionalOps(table);
}

}  // namespace kiln::ref
