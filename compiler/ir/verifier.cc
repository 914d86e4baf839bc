// Structural checks on the IR; run after import and after every pass.
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/ir.h"

namespace kiln {

absl::Status VerifyGraph(const Graph& graph) {
  std::unordered_set<const Value*> defined;
  std::unordered_set<std::string> names;
  auto define = [&](const Value* v, const std::string& where) -> absl::Status {
    if (!defined.insert(v).second) {
      return absl::InternalError(absl::StrCat("value '", v->name(), "' defined twice (", where, ")"));
    }
    if (!names.insert(v->name()).second) {
      return absl::InternalError(absl::StrCat("value name '", v->name(), "' used by two values (", where, ")"));
    }
    if (v->type().dtype == DType::kUndefined) {
      return absl::InternalError(absl::StrCat("value '", v->name(), "' has no element type (", where, ")"));
    }
    if (v->is_constant() && !v->type().is_tensor()) {
      return absl::InternalError(absl::StrCat("value '", v->name(), "' is a constant ", ValueKindName(v->type().kind),
                                              " (", where, "); constants are tensors"));
    }
    return absl::OkStatus();
  };
  for (const Value* in : graph.inputs()) {
    if (auto s = define(in, "graph input"); !s.ok()) return s;
  }
  for (const Value* v : graph.values()) {
    if (v->is_constant() && !graph.IsGraphInput(v) && v->producer() == nullptr) {
      if (auto s = define(v, "constant"); !s.ok()) return s;
    }
  }
  for (const Node* node : graph.nodes()) {
    std::string where = absl::StrCat("node '", node->name(), "' (", node->op(), ")");
    for (const Value* in : node->inputs()) {
      if (in != nullptr && defined.count(in) == 0) {
        return absl::InternalError(absl::StrCat(where, " reads '", in->name(), "' before it is defined"));
      }
    }
    // A subgraph is verified on its own: its definitions are its inputs, constants and nodes.
    for (const auto& [key, body] : node->subgraphs()) {
      if (node->num_captured() > node->inputs().size()) {
        return absl::InternalError(absl::StrCat(where, " captures more values than it has inputs"));
      }
      if (auto s = VerifyGraph(*body); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(where, ": subgraph '", key, "': ", s.message()));
      }
    }
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      const Value* out = node->outputs()[i];
      if (out->producer() != node || out->producer_output() != static_cast<int>(i)) {
        return absl::InternalError(absl::StrCat(where, " output ", i, " has a wrong producer link"));
      }
      if (auto s = define(out, where); !s.ok()) return s;
    }
  }
  for (const Value* out : graph.outputs()) {
    if (defined.count(out) == 0) {
      return absl::InternalError(absl::StrCat("graph output '", out->name(), "' is never defined"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln
