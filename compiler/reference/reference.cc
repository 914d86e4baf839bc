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
  std::unordered_map<const Value*, const Tensor*> env;
  std::vector<std::unique_ptr<Tensor>> owned;
  for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs()[i]] = &inputs[i];
  auto lookup = [&](const Value* v) -> const Tensor* {
    if (v == nullptr) return nullptr;
    if (v->is_constant()) return v->constant().get();
    auto it = env.find(v);
    return it == env.end() ? nullptr : it->second;
  };
  for (const Node* node : graph.nodes()) {
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
      owned.push_back(std::make_unique<Tensor>(std::move(results[i])));
      env[node->outputs()[i]] = owned.back().get();
    }
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
