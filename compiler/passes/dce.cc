// dce: removes nodes whose results never reach a graph output.
//   %t = Op(%x)        ; %t has no users and is not returned
//   =>  (node removed)
#include <unordered_set>

#include "kiln/common/status.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

class DeadCodeElimination : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    std::unordered_set<const Value*> live(graph.outputs().begin(), graph.outputs().end());
    std::vector<Node*> nodes = graph.nodes();
    bool changed = false;
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* node = *it;
      bool used = false;
      for (const Value* out : node->outputs()) used |= live.count(out) != 0;
      if (!used) {
        graph.RemoveNode(node);
        changed = true;
        continue;
      }
      for (const Value* in : node->inputs()) {  // a control node's captured values among them
        if (in != nullptr) live.insert(in);
      }
      for (const auto& [key, body] : node->subgraphs()) {
        KILN_ASSIGN_OR_RETURN(bool removed, Run(*body, context));
        if (removed) body->Compact();
        changed |= removed;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateDeadCodeElimination(const PassInvocation&) {
  return std::make_unique<DeadCodeElimination>();
}

}  // namespace kiln
