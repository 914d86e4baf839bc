// The reference interpreter: runs a graph node by node on host tensors, calling the
// natively compiled kernel library. It is the oracle for constant folding, accuracy
// validation and the conformance runner's interpreter mode.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"

namespace kiln {

// Runs one node; outputs are allocated from the node's (static) output types.
absl::StatusOr<std::vector<Tensor>> EvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs);

// Runs the graph on `inputs` (in graph-input order) and returns the graph outputs.
// `observe`, when given, sees every graph input and node output as it is computed
// (calibration for quantization reads activation ranges this way).
absl::StatusOr<std::vector<Tensor>> RunGraph(const Graph& graph, const std::vector<Tensor>& inputs,
                                             const std::function<void(const Value*, const Tensor&)>& observe = nullptr);

}  // namespace kiln
