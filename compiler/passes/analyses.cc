// The graph analyses that are not one pass's own (see analyses.h); the memory plan lives
// with plan-memory.
#include "kiln/compiler/analyses.h"

namespace kiln {

UseListAnalysis::Result UseListAnalysis::Compute(const Graph& graph, AnalysisManager&) {
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

Liveness LivenessAnalysis::Compute(const Graph& graph, AnalysisManager&) {
  Liveness liveness;
  const std::vector<Node*> nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Value* in : nodes[i]->inputs()) {
      if (in != nullptr) liveness.last_read[in] = i;  // in order: the last reader wins
    }
    for (const Value* out : nodes[i]->outputs()) liveness.defined[out] = i;
  }
  return liveness;
}

}  // namespace kiln
