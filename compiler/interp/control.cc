// Control flow in the interpreter: If, Loop, Scan and SequenceMap run their bodies with
// RunGraphOn on host tensors, the node's captured inputs (kCapturedAttr) after each body's
// own. Artifacts run the same bodies compiled, through the drivers of kernels/control; the
// interpreter walks them as graphs instead, so a body's values are seen (`observe`, each
// iteration: an observer that keeps min/max gets the range over all iterations) and a
// body's shapes may change from one iteration to the next.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "interp_internal.h"
#include "kiln/common/status.h"
#include "kiln/compiler/ops.h"

namespace kiln::interp {
namespace {

using Inputs = std::vector<const Tensor*>;

absl::Status Error(const Node& node, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": ", message));
}

// The node's captured inputs (its last num_captured()).
Inputs Captured(const Node& node, const Inputs& in) {
  return Inputs(in.end() - static_cast<std::ptrdiff_t>(std::min(in.size(), node.num_captured())), in.end());
}

absl::StatusOr<std::vector<Tensor>> RunBody(const Node& node, const char* key, Inputs args, const Inputs& captured,
                                            const Observer& observe) {
  const Graph* body = node.GetGraph(key);
  if (body == nullptr) return Error(node, absl::StrCat("needs the graph attribute '", key, "'"));
  args.insert(args.end(), captured.begin(), captured.end());
  absl::StatusOr<std::vector<Tensor>> outputs = RunGraphOn(*body, args, observe);
  if (!outputs.ok()) {
    return absl::Status(outputs.status().code(),
                        absl::StrCat(NodeLabel(node), ": subgraph '", key, "': ", outputs.status().message()));
  }
  return outputs;
}

absl::StatusOr<const Tensor*> TensorInput(const Node& node, const Inputs& in, size_t i, const char* what) {
  if (i >= in.size() || in[i] == nullptr) return Error(node, absl::StrCat(what, " is required"));
  if (!in[i]->is_tensor() || in[i]->num_elements() < 1) return Error(node, absl::StrCat(what, " must be one value"));
  return in[i];
}

Tensor Scalar(DType dtype, int64_t value) {
  Tensor t(dtype, {});
  if (dtype == DType::kBool) {
    t.data_as<uint8_t>()[0] = value != 0;
  } else {
    t.data_as<int64_t>()[0] = value;
  }
  return t;
}

// Copies `count` elements from src[from] to dst[to] (string texts as texts).
void CopyElements(const Tensor& src, int64_t from, Tensor& dst, int64_t to, int64_t count) {
  if (src.dtype() == DType::kString) {
    for (int64_t i = 0; i < count; ++i) dst.SetString(to + i, src.GetString(from + i));
    return;
  }
  const int64_t size = DTypeSize(src.dtype());
  if (count > 0) {
    std::memcpy(static_cast<char*>(dst.data()) + to * size, static_cast<const char*>(src.data()) + from * size,
                static_cast<size_t>(count * size));
  }
}

// Elements before `axis` (outer) and after it (inner) in `dims`.
std::pair<int64_t, int64_t> AroundAxis(const std::vector<int64_t>& dims, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d < axis) outer *= dims[d];
    if (d > axis) inner *= dims[d];
  }
  return {outer, inner};
}

// Slice `index` of `x` along `axis`, that axis dropped.
Tensor SliceAlong(const Tensor& x, int64_t axis, int64_t index) {
  std::vector<int64_t> dims = x.dims();
  const int64_t n = dims[axis];
  const auto [outer, inner] = AroundAxis(dims, axis);
  dims.erase(dims.begin() + axis);
  Tensor out(x.dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) CopyElements(x, (o * n + index) * inner, out, o * inner, inner);
  return out;
}

// `parts` (of one shape) stacked along a new `axis`; none: `element`'s dims (0 where
// unknown) with a 0 inserted at the axis.
absl::StatusOr<Tensor> StackAlong(const Node& node, const std::vector<Tensor>& parts, int64_t axis,
                                  const TensorType& element) {
  if (parts.empty()) {
    std::vector<int64_t> dims;
    for (const Dim& d : element.shape) dims.push_back(d.known() ? d.size : 0);
    dims.insert(dims.begin() + std::min<int64_t>(axis, static_cast<int64_t>(dims.size())), 0);
    return Tensor(element.dtype, dims);
  }
  std::vector<int64_t> dims = parts[0].dims();
  for (const Tensor& p : parts) {
    if (!p.is_tensor() || p.dims() != dims || p.dtype() != parts[0].dtype()) {
      return Error(node, "the iterations' scan outputs differ in shape or element type");
    }
  }
  dims.insert(dims.begin() + axis, static_cast<int64_t>(parts.size()));
  Tensor out(parts[0].dtype(), dims);
  const auto [outer, inner] = AroundAxis(dims, axis);
  const int64_t n = static_cast<int64_t>(parts.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t t = 0; t < n; ++t) CopyElements(parts[t], o * inner, out, (o * n + t) * inner, inner);
  }
  return out;
}

absl::StatusOr<std::vector<Tensor>> RunIf(const Node& node, const Inputs& in, const Observer& observe) {
  KILN_ASSIGN_OR_RETURN(const Tensor* cond, TensorInput(node, in, 0, "the condition"));
  return RunBody(node, cond->GetAsInt64(0) != 0 ? "then_branch" : "else_branch", {}, Captured(node, in), observe);
}

// Loop(M, cond, carried..., captured...): the body (i, cond, carried..., captured...) ->
// (cond, carried..., scan values...) while i < M and cond; scan outputs stacked along a
// new axis 0.
absl::StatusOr<std::vector<Tensor>> RunLoop(const Node& node, const Inputs& in, const Observer& observe) {
  const Inputs captured = Captured(node, in);
  const size_t own = in.size() - captured.size();
  if (own < 2 || node.outputs().size() < own - 2) return Error(node, "needs the trip count and condition inputs");
  const size_t num_carried = own - 2, num_scans = node.outputs().size() - num_carried;
  const Graph* body = node.GetGraph("body");
  if (body == nullptr || body->outputs().size() != 1 + num_carried + num_scans) {
    return Error(node, absl::StrCat("needs a body with the condition, ", num_carried,
                                    " loop-carried values and one output per scan output"));
  }
  int64_t trips = INT64_MAX;
  bool cond = true;
  if (in[0] != nullptr) {
    KILN_ASSIGN_OR_RETURN(const Tensor* m, TensorInput(node, in, 0, "the trip count"));
    trips = m->GetAsInt64(0);
  }
  if (in[1] != nullptr) {
    KILN_ASSIGN_OR_RETURN(const Tensor* c, TensorInput(node, in, 1, "the condition"));
    cond = c->GetAsInt64(0) != 0;
  }
  Inputs carried(in.begin() + 2, in.begin() + 2 + static_cast<std::ptrdiff_t>(num_carried));
  std::vector<Tensor> state;  // the last iteration's carried values, which `carried` points at
  std::vector<std::vector<Tensor>> scans(num_scans);
  for (int64_t i = 0; i < trips && cond; ++i) {
    const Tensor iteration = Scalar(DType::kInt64, i), condition = Scalar(DType::kBool, cond);
    Inputs args = {&iteration, &condition};
    args.insert(args.end(), carried.begin(), carried.end());
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, RunBody(node, "body", std::move(args), captured, observe));
    cond = outputs[0].is_tensor() && outputs[0].num_elements() > 0 && outputs[0].GetAsInt64(0) != 0;
    state.assign(std::make_move_iterator(outputs.begin() + 1),
                 std::make_move_iterator(outputs.begin() + 1 + static_cast<std::ptrdiff_t>(num_carried)));
    for (size_t k = 0; k < num_carried; ++k) carried[k] = &state[k];
    for (size_t k = 0; k < num_scans; ++k) scans[k].push_back(std::move(outputs[1 + num_carried + k]));
  }
  std::vector<Tensor> results;
  for (size_t k = 0; k < num_carried; ++k) {
    // A carried optional sequence the body returns as a sequence is a sequence out of the
    // loop (InferLoop); after no iteration, an empty one is the empty sequence.
    const Tensor& value = *carried[k];
    const TensorType& type = node.output(k)->type();
    if (type.kind == ValueKind::kSequence && value.kind() == ValueKind::kOptionalSequence) {
      results.push_back(value.elements().empty() ? Tensor::Sequence(type.dtype, {}) : value.elements()[0]);
    } else {
      results.push_back(value);
    }
  }
  for (size_t k = 0; k < num_scans; ++k) {
    const TensorType& element = body->outputs()[1 + num_carried + k]->type();
    KILN_ASSIGN_OR_RETURN(Tensor stacked, StackAlong(node, scans[k], 0, element));
    results.push_back(std::move(stacked));
  }
  return results;
}

// One scan's axes and directions, each axis normalised.
struct ScanSpec {
  size_t num_states = 0, num_scan_inputs = 0;
  std::vector<int64_t> in_axes, in_reverse, out_axes, out_reverse;
};

absl::StatusOr<int64_t> Axis(const Node& node, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    return Error(node, absl::StrCat(what, " ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

// One pass over the scan inputs: the final states, then each scan output stacked.
absl::StatusOr<std::vector<Tensor>> ScanOnce(const Node& node, const ScanSpec& spec, std::vector<Tensor> states,
                                             const std::vector<Tensor>& xs, const Inputs& captured,
                                             const Observer& observe) {
  const size_t num_scans = node.outputs().size() - spec.num_states;
  const int64_t length = xs[0].dims()[spec.in_axes[0]];
  for (size_t k = 0; k < xs.size(); ++k) {
    if (xs[k].dims()[spec.in_axes[k]] != length) return Error(node, "the scan inputs differ in length");
  }
  std::vector<std::vector<Tensor>> scans(num_scans);
  for (int64_t t = 0; t < length; ++t) {
    std::vector<Tensor> slices;
    for (size_t k = 0; k < xs.size(); ++k) {
      slices.push_back(SliceAlong(xs[k], spec.in_axes[k], spec.in_reverse[k] ? length - 1 - t : t));
    }
    Inputs args;
    for (const Tensor& s : states) args.push_back(&s);
    for (const Tensor& s : slices) args.push_back(&s);
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, RunBody(node, "body", std::move(args), captured, observe));
    if (outputs.size() != spec.num_states + num_scans) {
      return Error(
          node, absl::StrCat("the body returned ", outputs.size(), " values; expected ", spec.num_states + num_scans));
    }
    for (size_t k = 0; k < spec.num_states; ++k) states[k] = std::move(outputs[k]);
    for (size_t k = 0; k < num_scans; ++k) scans[k].push_back(std::move(outputs[spec.num_states + k]));
  }
  std::vector<Tensor> results = std::move(states);
  for (size_t k = 0; k < num_scans; ++k) {
    if (spec.out_reverse[k]) std::reverse(scans[k].begin(), scans[k].end());
    const Graph* body = node.GetGraph("body");
    const int64_t axis = spec.out_axes[k];
    KILN_ASSIGN_OR_RETURN(Tensor stacked,
                          StackAlong(node, scans[k], axis, body->outputs()[spec.num_states + k]->type()));
    results.push_back(std::move(stacked));
  }
  return results;
}

std::vector<int64_t> PerItem(const Node& node, const char* attr, size_t n) {
  std::vector<int64_t> values = node.GetInts(attr);
  values.resize(n, 0);
  return values;
}

// Scan's layout: opset 8 has [sequence_lens,] first and a batch dim before everything.
absl::StatusOr<ScanSpec> ScanSpecOf(const Node& node, const Inputs& in, size_t own, bool batched) {
  ScanSpec spec;
  const size_t first = batched ? 1 : 0;
  const int64_t m = node.GetInt("num_scan_inputs", 0);
  if (m < 1 || static_cast<size_t>(m) + first > own) return Error(node, "num_scan_inputs does not fit the inputs");
  spec.num_scan_inputs = static_cast<size_t>(m);
  spec.num_states = own - first - spec.num_scan_inputs;
  if (node.outputs().size() < spec.num_states) return Error(node, "has fewer outputs than states");
  const size_t num_scans = node.outputs().size() - spec.num_states;
  spec.in_reverse = PerItem(node, batched ? "directions" : "scan_input_directions", spec.num_scan_inputs);
  spec.out_reverse = PerItem(node, "scan_output_directions", num_scans);
  spec.in_axes = PerItem(node, "scan_input_axes", spec.num_scan_inputs);
  spec.out_axes = PerItem(node, "scan_output_axes", num_scans);
  if (batched) std::fill(spec.out_reverse.begin(), spec.out_reverse.end(), 0);
  for (size_t k = 0; k < spec.num_scan_inputs; ++k) {
    const Tensor* x = in[first + spec.num_states + k];
    if (x == nullptr || !x->is_tensor()) return Error(node, absl::StrCat("scan input ", k, " is not a tensor"));
    if (batched) spec.in_axes[k] = 0;
    KILN_ASSIGN_OR_RETURN(spec.in_axes[k], Axis(node, spec.in_axes[k], x->rank() - (batched ? 1 : 0), "scan axis"));
  }
  const Graph* body = node.GetGraph("body");
  if (body == nullptr || body->outputs().size() != node.outputs().size()) {
    return Error(node, "needs a body with one output per node output");
  }
  for (size_t k = 0; k < num_scans; ++k) {
    const int64_t rank = static_cast<int64_t>(body->outputs()[spec.num_states + k]->type().shape.size()) + 1;
    if (batched) spec.out_axes[k] = 0;
    KILN_ASSIGN_OR_RETURN(spec.out_axes[k], Axis(node, spec.out_axes[k], rank, "scan output axis"));
  }
  return spec;
}

absl::StatusOr<std::vector<Tensor>> RunScan(const Node& node, const Inputs& in, const Observer& observe) {
  const Inputs captured = Captured(node, in);
  const bool batched = node.opset() < 9;
  const size_t first = batched ? 1 : 0, own = in.size() - captured.size();
  if (batched && !in.empty() && in[0] != nullptr) return Error(node, "sequence_lens is not supported");
  KILN_ASSIGN_OR_RETURN(ScanSpec spec, ScanSpecOf(node, in, own, batched));
  for (size_t k = 0; k < spec.num_states; ++k) {
    if (in[first + k] == nullptr) return Error(node, absl::StrCat("state ", k, " is missing"));
  }
  std::vector<Tensor> states, xs;
  if (!batched) {
    for (size_t k = 0; k < spec.num_states; ++k) states.push_back(*in[first + k]);
    for (size_t k = 0; k < spec.num_scan_inputs; ++k) xs.push_back(*in[first + spec.num_states + k]);
    return ScanOnce(node, spec, std::move(states), xs, captured, observe);
  }
  // Opset 8: one scan per batch entry, the results stacked along the batch.
  const int64_t batch = in[first + spec.num_states]->dims()[0];
  std::vector<std::vector<Tensor>> per_output(node.outputs().size());
  for (int64_t b = 0; b < batch; ++b) {
    states.clear();
    xs.clear();
    for (size_t k = 0; k < spec.num_states; ++k) states.push_back(SliceAlong(*in[first + k], 0, b));
    for (size_t k = 0; k < spec.num_scan_inputs; ++k) xs.push_back(SliceAlong(*in[first + spec.num_states + k], 0, b));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> results, ScanOnce(node, spec, std::move(states), xs, captured, observe));
    for (size_t k = 0; k < results.size(); ++k) per_output[k].push_back(std::move(results[k]));
  }
  std::vector<Tensor> results;
  for (size_t k = 0; k < per_output.size(); ++k) {
    TensorType element = node.output(k)->type();
    if (!element.shape.empty()) element.shape.erase(element.shape.begin());
    KILN_ASSIGN_OR_RETURN(Tensor stacked, StackAlong(node, per_output[k], 0, element));
    results.push_back(std::move(stacked));
  }
  return results;
}

// SequenceMap(sequence, additional..., captured...): the body on each position's elements
// (a tensor input whole), each body output gathered into a sequence.
absl::StatusOr<std::vector<Tensor>> RunSequenceMap(const Node& node, const Inputs& in, const Observer& observe) {
  const Inputs captured = Captured(node, in);
  const size_t own = in.size() - captured.size();
  if (own < 1 || in[0] == nullptr || in[0]->kind() != ValueKind::kSequence) {
    return Error(node, "input 0 must be a sequence");
  }
  const size_t length = in[0]->elements().size();
  for (size_t i = 0; i < own; ++i) {
    if (in[i] == nullptr) return Error(node, absl::StrCat("input ", i, " is missing"));
    if (in[i]->kind() == ValueKind::kSequence && in[i]->elements().size() != length) {
      return Error(node, "the input sequences differ in length");
    }
  }
  std::vector<std::vector<Tensor>> gathered(node.outputs().size());
  for (size_t position = 0; position < length; ++position) {
    Inputs args;
    for (size_t i = 0; i < own; ++i) {
      args.push_back(in[i]->kind() == ValueKind::kSequence ? &in[i]->elements()[position] : in[i]);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, RunBody(node, "body", std::move(args), captured, observe));
    if (outputs.size() != gathered.size()) return Error(node, "the body's outputs do not match the node's");
    for (size_t k = 0; k < outputs.size(); ++k) gathered[k].push_back(std::move(outputs[k]));
  }
  std::vector<Tensor> results;
  for (size_t k = 0; k < gathered.size(); ++k) {
    results.push_back(Tensor::Sequence(node.output(k)->type().dtype, std::move(gathered[k])));
  }
  return results;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> RunControlNode(const Node& node, const Inputs& inputs, const Observer& observe) {
  if (node.op() == "If") return RunIf(node, inputs, observe);
  if (node.op() == "Loop") return RunLoop(node, inputs, observe);
  if (node.op() == "Scan") return RunScan(node, inputs, observe);
  if (node.op() == "SequenceMap") return RunSequenceMap(node, inputs, observe);
  return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": the interpreter does not run this op's subgraphs"));
}

}  // namespace kiln::interp
