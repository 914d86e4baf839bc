// What the interpreter's files share: running a graph on borrowed tensors with an observer,
// and control flow (control.cc), whose bodies run through the same walk.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"

namespace kiln::interp {

using Observer = std::function<void(const Value*, const Tensor&)>;

// RunGraph over tensors the caller keeps alive (a body's captured weights are not copied
// per iteration).
absl::StatusOr<std::vector<Tensor>> RunGraphOn(const Graph& graph, const std::vector<const Tensor*>& inputs,
                                               const Observer& observe);

// EvaluateNode, passing `observe` into control-flow bodies.
absl::StatusOr<std::vector<Tensor>> EvaluateNodeObserved(const Node& node, const std::vector<const Tensor*>& inputs,
                                                         const Observer& observe);

// If, Loop, Scan and SequenceMap: their bodies run by RunGraphOn.
absl::StatusOr<std::vector<Tensor>> RunControlNode(const Node& node, const std::vector<const Tensor*>& inputs,
                                                   const Observer& observe);

}  // namespace kiln::interp
