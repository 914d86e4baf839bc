// The graph analyses that are not one pass's own (see analyses.h); the memory plan lives
// with plan-memory.
#include "kiln/compiler/analyses.h"

namespace kiln {

UseListAnalysis::Result UseListAnalysis::Compute(const Graph& graph) {
  Result users;
  for (Node* node : graph.nodes()) {
    for (const Value* in : node->inputs()) {
      if (in == nullptr) continue;
      std::vector<Node*>& list = users[in];
      if (list.empty() || list.back() != node) list.push_back(node);  // a node reading twice counts once
    }
  }
  return users;
}

}  // namespace kiln
