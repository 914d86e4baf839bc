// cse: merges nodes that compute the same thing, and constants with equal contents.
//   %a = Relu(%x) ; %b = Relu(%x)    =>   %a = Relu(%x) ; uses of %b read %a
// Random ops (OpSchema::random) are never merged: two draws are two values.
#include <cstring>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

std::string AttrKey(const Node& node) {
  // The printer's attribute text is canonical (sorted keys, exact values); reuse it by
  // printing a one-node description.
  std::ostringstream key;
  key << node.op() << "|" << node.opset() << "|" << node.outputs().size() << "|";
  for (const Value* in : node.inputs()) key << static_cast<const void*>(in) << ",";
  key << "|";
  for (const auto& [name, value] : node.attrs()) {
    key << name << "=";
    std::visit(
        [&key](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, double> || std::is_same_v<V, std::string>) {
            key << v;
          } else if constexpr (std::is_same_v<V, Subgraph>) {
            key << "graph@" << static_cast<const void*>(v.get());  // the same body only
          } else if constexpr (std::is_same_v<V, std::shared_ptr<const Tensor>>) {
            key << static_cast<int>(v->dtype()) << ":";
            key.write(static_cast<const char*>(v->data()), v->size_bytes());
          } else {
            for (const auto& item : v) key << item << ",";
          }
        },
        value);
    key << ";";
  }
  return key.str();
}

std::string ConstantKey(const Tensor& t) {
  std::string key = absl::StrCat(static_cast<int>(t.dtype()), ":");
  for (int64_t d : t.dims()) absl::StrAppend(&key, d, ",");
  key.append(static_cast<const char*>(t.data()), t.size_bytes());
  return key;
}

class CommonSubexpressionElimination : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
    bool changed = false;
    // Constants first, so nodes reading equal constants become equal too. Large weights
    // are compared too: duplicated weights are common in exported models.
    std::map<std::string, Value*> constants;
    for (Node* node : graph.nodes()) {
      for (size_t i = 0; i < node->inputs().size(); ++i) {
        Value* in = node->input(i);
        if (in == nullptr || !in->is_constant() || in->producer() != nullptr) continue;
        auto [it, inserted] = constants.emplace(ConstantKey(*in->constant()), in);
        if (!inserted && it->second != in) {
          node->set_input(i, it->second);
          changed = true;
        }
      }
    }
    std::map<std::string, Node*> seen;
    for (Node* node : graph.nodes()) {
      // Two unseeded random draws are not the same value.
      if (const OpSchema* schema = FindOp(node->op()); schema != nullptr && schema->random) continue;
      auto [it, inserted] = seen.emplace(AttrKey(*node), node);
      if (inserted) continue;
      for (size_t i = 0; i < node->outputs().size(); ++i) {
        if (graph.IsGraphOutput(node->output(i)) && graph.IsGraphOutput(it->second->output(i))) continue;
        graph.ReplaceAllUses(node->output(i), it->second->output(i));
      }
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateCommonSubexpressionElimination(const PassInvocation&) {
  return std::make_unique<CommonSubexpressionElimination>();
}

}  // namespace kiln
