// If, Loop and Scan from the ONNX specification: each body run by the reference itself
// (ReferenceRunGraph on the subgraph), with the node's captured inputs (kCapturedAttr) as
// the body's last inputs.
#include <cstring>

#include "kiln/common/status.h"
#include "kiln/compiler/reference.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

// The node's captured inputs, copied for the body.
std::vector<Tensor> Captured(const Node& node, const Inputs& in) {
  std::vector<Tensor> values;
  for (size_t i = in.size() - std::min(in.size(), node.num_captured()); i < in.size(); ++i) values.push_back(*in[i]);
  return values;
}

absl::StatusOr<std::vector<Tensor>> RunBody(const Node& node, const char* key, std::vector<Tensor> inputs,
                                            const std::vector<Tensor>& captured) {
  const Graph* body = node.GetGraph(key);
  if (body == nullptr) return Invalid(absl::StrCat("no graph attribute '", key, "'"));
  inputs.insert(inputs.end(), captured.begin(), captured.end());
  absl::StatusOr<std::vector<Tensor>> outputs = ReferenceRunGraph(*body, inputs);
  if (!outputs.ok()) return Invalid(absl::StrCat("subgraph '", key, "': ", outputs.status().message()));
  return outputs;
}

Tensor Scalar(DType dtype, int64_t value) {
  Tensor t(dtype, {});
  StoreInt(t, 0, value);
  return t;
}

// Sizes around `axis` of `dims` in bytes: rows before it, bytes of one slice after it.
std::pair<int64_t, int64_t> AroundAxis(const std::vector<int64_t>& dims, int64_t axis, DType dtype) {
  int64_t outer = 1, inner = DTypeSize(dtype);
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d < axis) outer *= dims[d];
    if (d > axis) inner *= dims[d];
  }
  return {outer, inner};
}

// x's slice `index` along `axis`, that axis dropped.
Tensor Slice(const Tensor& x, int64_t axis, int64_t index) {
  std::vector<int64_t> dims = x.dims();
  const int64_t n = dims[axis];
  const auto [outer, inner] = AroundAxis(dims, axis, x.dtype());
  dims.erase(dims.begin() + axis);
  Tensor out(x.dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(static_cast<char*>(out.data()) + o * inner,
                static_cast<const char*>(x.data()) + (o * n + index) * inner, static_cast<size_t>(inner));
  }
  return out;
}

// The parts stacked along a new `axis`; `empty` gives the result's dims when there are none.
absl::StatusOr<Tensor> Stack(const std::vector<Tensor>& parts, int64_t axis, const TensorType& empty) {
  if (parts.empty()) {
    std::vector<int64_t> dims;
    for (const Dim& d : empty.shape) dims.push_back(d.known() ? d.size : 0);
    if (!dims.empty()) dims[axis] = 0;
    return Tensor(empty.dtype, dims);
  }
  std::vector<int64_t> dims = parts[0].dims();
  for (const Tensor& p : parts) {
    if (p.dims() != dims || p.dtype() != parts[0].dtype()) return Invalid("scan outputs differ in shape");
  }
  dims.insert(dims.begin() + axis, static_cast<int64_t>(parts.size()));
  Tensor out(parts[0].dtype(), dims);
  const auto [outer, inner] = AroundAxis(dims, axis, out.dtype());
  const int64_t n = static_cast<int64_t>(parts.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(static_cast<char*>(out.data()) + (o * n + t) * inner,
                  static_cast<const char*>(parts[t].data()) + o * inner, static_cast<size_t>(inner));
    }
  }
  return out;
}

Outputs If(const Node& node, const Inputs& in) {
  return RunBody(node, LoadInt(*in[0], 0) != 0 ? "then_branch" : "else_branch", {}, Captured(node, in));
}

Outputs Loop(const Node& node, const Inputs& in) {
  const std::vector<Tensor> captured = Captured(node, in);
  const size_t num_carried = in.size() - 2 - captured.size();
  const int64_t trips = in[0] != nullptr ? LoadInt(*in[0], 0) : INT64_MAX;
  bool cond = in[1] != nullptr ? LoadInt(*in[1], 0) != 0 : true;
  std::vector<Tensor> carried;
  for (size_t k = 0; k < num_carried; ++k) carried.push_back(*in[2 + k]);
  const size_t num_scans = node.outputs().size() - num_carried;
  std::vector<std::vector<Tensor>> scans(num_scans);
  for (int64_t i = 0; i < trips && cond; ++i) {
    std::vector<Tensor> inputs = {Scalar(DType::kInt64, i), Scalar(DType::kBool, cond ? 1 : 0)};
    inputs.insert(inputs.end(), carried.begin(), carried.end());
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, RunBody(node, "body", std::move(inputs), captured));
    if (outputs.size() != 1 + num_carried + num_scans) return Invalid("the body's outputs do not match the node's");
    cond = LoadInt(outputs[0], 0) != 0;
    for (size_t k = 0; k < num_carried; ++k) carried[k] = std::move(outputs[1 + k]);
    for (size_t k = 0; k < num_scans; ++k) scans[k].push_back(std::move(outputs[1 + num_carried + k]));
  }
  std::vector<Tensor> results = std::move(carried);
  for (size_t k = 0; k < num_scans; ++k) {
    KILN_ASSIGN_OR_RETURN(Tensor stacked, Stack(scans[k], 0, node.output(num_carried + k)->type()));
    results.push_back(std::move(stacked));
  }
  return results;
}

// One scan over `states` and `xs` (each scanned along its axis); the final states and each
// scan output stacked.
struct ScanSpec {
  std::vector<int64_t> in_axes, in_reverse, out_axes, out_reverse;
};

absl::StatusOr<std::vector<Tensor>> ScanOnce(const Node& node, const ScanSpec& spec, std::vector<Tensor> states,
                                             const std::vector<Tensor>& xs, const std::vector<Tensor>& captured) {
  const size_t num_states = states.size();
  const size_t num_scans = node.outputs().size() - num_states;
  const int64_t length = xs[0].dims()[spec.in_axes[0]];
  for (size_t k = 0; k < xs.size(); ++k) {
    if (xs[k].dims()[spec.in_axes[k]] != length) return Invalid("scan inputs differ in length");
  }
  std::vector<std::vector<Tensor>> scans(num_scans);
  for (int64_t t = 0; t < length; ++t) {
    std::vector<Tensor> inputs = states;
    for (size_t k = 0; k < xs.size(); ++k) {
      inputs.push_back(Slice(xs[k], spec.in_axes[k], spec.in_reverse[k] ? length - 1 - t : t));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, RunBody(node, "body", std::move(inputs), captured));
    if (outputs.size() != num_states + num_scans) return Invalid("the body's outputs do not match the node's");
    for (size_t k = 0; k < num_states; ++k) states[k] = std::move(outputs[k]);
    for (size_t k = 0; k < num_scans; ++k) scans[k].push_back(std::move(outputs[num_states + k]));
  }
  std::vector<Tensor> results = std::move(states);
  for (size_t k = 0; k < num_scans; ++k) {
    if (spec.out_reverse[k]) std::reverse(scans[k].begin(), scans[k].end());
    TensorType empty = node.output(num_states + k)->type();
    KILN_ASSIGN_OR_RETURN(Tensor stacked, Stack(scans[k], spec.out_axes[k], empty));
    results.push_back(std::move(stacked));
  }
  return results;
}

std::vector<int64_t> PerItem(const Node& node, const char* attr, size_t n) {
  std::vector<int64_t> values = node.GetInts(attr);
  values.resize(n, 0);
  return values;
}

Outputs Scan(const Node& node, const Inputs& in) {
  const std::vector<Tensor> captured = Captured(node, in);
  const size_t num_scan_inputs = static_cast<size_t>(node.GetInt("num_scan_inputs", 0));
  const bool batched = node.opset() < 9;  // opset 8: [sequence_lens,] and a batch dim first
  const size_t first = batched ? 1 : 0;
  if (batched && in[0] != nullptr) return Invalid("sequence_lens is not supported");
  const size_t own = in.size() - captured.size();
  if (num_scan_inputs < 1 || num_scan_inputs + first > own) return Invalid("num_scan_inputs does not fit the inputs");
  const size_t num_states = own - first - num_scan_inputs;
  const size_t num_scans = node.outputs().size() - num_states;
  ScanSpec spec;
  spec.in_reverse = PerItem(node, batched ? "directions" : "scan_input_directions", num_scan_inputs);
  spec.out_reverse = PerItem(node, "scan_output_directions", num_scans);
  spec.in_axes = PerItem(node, "scan_input_axes", num_scan_inputs);
  spec.out_axes = PerItem(node, "scan_output_axes", num_scans);
  if (batched) std::fill(spec.out_reverse.begin(), spec.out_reverse.end(), 0);
  for (size_t k = 0; k < num_scan_inputs; ++k) {
    const int64_t rank = in[first + num_states + k]->rank() - (batched ? 1 : 0);
    if (batched) spec.in_axes[k] = 0;
    KILN_ASSIGN_OR_RETURN(spec.in_axes[k], NormalizeAxis(spec.in_axes[k], rank));
  }
  for (size_t k = 0; k < num_scans; ++k) {
    const int64_t rank = node.output(num_states + k)->type().shape.size() - (batched ? 1 : 0);
    if (batched) spec.out_axes[k] = 0;
    KILN_ASSIGN_OR_RETURN(spec.out_axes[k], NormalizeAxis(spec.out_axes[k], rank));
  }
  std::vector<Tensor> states, xs;
  if (!batched) {
    for (size_t k = 0; k < num_states; ++k) states.push_back(*in[first + k]);
    for (size_t k = 0; k < num_scan_inputs; ++k) xs.push_back(*in[first + num_states + k]);
    return ScanOnce(node, spec, std::move(states), xs, captured);
  }
  // Opset 8: one scan per batch entry, the results stacked along the batch.
  const int64_t batch = in[first + num_states]->dims()[0];
  std::vector<std::vector<Tensor>> per_output(node.outputs().size());
  for (int64_t b = 0; b < batch; ++b) {
    states.clear();
    xs.clear();
    for (size_t k = 0; k < num_states; ++k) states.push_back(Slice(*in[first + k], 0, b));
    for (size_t k = 0; k < num_scan_inputs; ++k) xs.push_back(Slice(*in[first + num_states + k], 0, b));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> results, ScanOnce(node, spec, std::move(states), xs, captured));
    for (size_t k = 0; k < results.size(); ++k) per_output[k].push_back(std::move(results[k]));
  }
  std::vector<Tensor> results;
  for (size_t k = 0; k < per_output.size(); ++k) {
    KILN_ASSIGN_OR_RETURN(Tensor stacked, Stack(per_output[k], 0, node.output(k)->type()));
    results.push_back(std::move(stacked));
  }
  return results;
}

}  // namespace

void AddControlOps(RefTable& table) {
  table["If"] = If;
  table["Loop"] = Loop;
  table["Scan"] = Scan;
}

}  // namespace kiln::ref
