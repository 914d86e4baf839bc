// The independent reference's table and its graph walk.
#include "kiln/compiler/reference.h"

#include <memory>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "ref_ops.h"

namespace kiln {
namespace {

const ref::RefTable& Table() {
  static const ref::RefTable* table = [] {
    auto* t = new ref::RefTable;
    ref::AddElementwiseOps(*t);
    ref::AddRnnOps(*t);
    ref::AddDynamicOps(*t);
    ref::AddResizeOps(*t);
    ref::AddLossOps(*t);
    ref::AddSamplingOps(*t);
    ref::AddLinalgOps(*t);
    ref::AddNnExtraOps(*t);
    ref::AddReduceOps(*t);
    ref::AddMovementOps(*t);
    ref::AddIndexingOps(*t);
    ref::AddConvOps(*t);
    ref::AddMatMulOps(*t);
    ref::AddPoolOps(*t);
    ref::AddNormOps(*t);
    ref::AddQuantOps(*t);
    ref::AddBitwiseOps(*t);
    ref::AddRandomOps(*t);
    ref::AddSignalOps(*t);
    ref::AddSpatialOps(*t);
    ref::AddControlOps(*t);
    ref::AddSequenceOps(*t);
    ref::AddStringOps(*t);
    ref::AddTextOps(*t);
    ref::AddLowBitOps(*t);
    return t;
  }();
  return *table;
}

std::string Label(const Node& node) {
  return absl::StrCat("node '", node.name(), "' (", node.op(), ", opset ", node.opset(), ")");
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ReferenceEvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs) {
  auto it = Table().find(node.op());
  if (it == Table().end()) {
    return absl::UnimplementedError(absl::StrCat(Label(node), ": the reference has no evaluation of this op"));
  }
  absl::StatusOr<std::vector<Tensor>> results = it->second(node, inputs);
  if (!results.ok()) {
    return absl::Status(results.status().code(), absl::StrCat(Label(node), ": ", results.status().message()));
  }
  if (results->size() > node.outputs().size()) {
    return absl::InternalError(absl::StrCat(Label(node), ": the reference made ", results->size(),
                                            " outputs, the node has ", node.outputs().size()));
  }
  return results;
}

absl::StatusOr<std::vector<Tensor>> ReferenceRunGraph(const Graph& graph, const std::vector<Tensor>& inputs) {
  if (inputs.size() != graph.inputs().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph has ", graph.inputs().size(), " inputs, got ", inputs.size()));
  }
  // Before any work: a graph with an op the reference lacks cannot be checked at all, and
  // validation must say which node, not fall back to code that shares the kernels.
  for (const Node* node : graph.nodes()) {
    if (!HasReference(node->op())) {
      return absl::UnimplementedError(
          absl::StrCat(Label(*node), ": the reference has no evaluation of op '", node->op(), "'"));
    }
  }
  const std::vector<Node*> nodes = graph.nodes();
  // Each computed value is freed after its last reader: a large model's activations would
  // otherwise all stay alive at once, under the validation job's memory limit.
  std::unordered_map<const Value*, size_t> last_use;
  for (size_t k = 0; k < nodes.size(); ++k) {
    for (const Value* in : nodes[k]->inputs()) last_use[in] = k;
  }
  std::unordered_map<const Value*, const Tensor*> env;
  std::unordered_map<const Value*, std::unique_ptr<Tensor>> owned;
  for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs()[i]] = &inputs[i];
  auto lookup = [&](const Value* v) -> const Tensor* {
    if (v == nullptr) return nullptr;
    if (v->is_constant()) return v->constant().get();
    auto it = env.find(v);
    return it == env.end() ? nullptr : it->second;
  };
  auto release_if_dead = [&](const Value* v, size_t k) {
    auto use = last_use.find(v);
    if ((use == last_use.end() || use->second <= k) && !graph.IsGraphOutput(v) && owned.erase(v) != 0) env.erase(v);
  };
  for (size_t k = 0; k < nodes.size(); ++k) {
    const Node* node = nodes[k];
    std::vector<const Tensor*> args;
    for (const Value* in : node->inputs()) {
      const Tensor* t = lookup(in);
      if (in != nullptr && t == nullptr) {
        return absl::InternalError(absl::StrCat(Label(*node), ": input '", in->name(), "' has no value"));
      }
      args.push_back(t);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> results, ReferenceEvaluateNode(*node, args));
    for (size_t i = 0; i < results.size(); ++i) {
      auto& slot = owned[node->outputs()[i]];
      slot = std::make_unique<Tensor>(std::move(results[i]));
      env[node->outputs()[i]] = slot.get();
    }
    for (const Value* in : node->inputs()) release_if_dead(in, k);
    for (const Value* out : node->outputs()) release_if_dead(out, k);
  }
  std::vector<Tensor> outputs;
  for (const Value* out : graph.outputs()) {
    const Tensor* t = lookup(out);
    if (t == nullptr) return absl::InternalError(absl::StrCat("graph output '", out->name(), "' has no value"));
    outputs.push_back(*t);
  }
  return outputs;
}

bool HasReference(std::string_view op) { return Table().find(op) != Table().end(); }

std::vector<std::string> ReferenceOps() {
  std::vector<std::string> ops;
  for (const auto& [name, fn] : Table()) ops.push_back(name);
  return ops;
}

}  // namespace kiln
