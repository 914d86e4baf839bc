// dce: removes nodes whose results never reach a graph output.
//   %t = Op(%x)        ; %t has no users and is not returned
//   =>  (node removed)
#include <unordered_set>

#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

class DeadCodeElimination : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
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
      for (const Value* in : node->inputs()) {
        if (in != nullptr) live.insert(in);
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
