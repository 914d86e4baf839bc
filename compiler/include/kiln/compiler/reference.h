// The independent reference: every op evaluated with plain code written from the ONNX
// specification, sharing no source with the kernel library or the op table's lowerings.
// Validation (the accuracy report) and the conformance runner's reference mode compare
// compiled artifacts against it, so a kernel bug cannot pass its own check.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"

namespace kiln {

// Evaluates one node of the imported (ONNX-level) graph. Output shapes follow from the
// inputs, as the specification defines them, not from the node's inferred types.
absl::StatusOr<std::vector<Tensor>> ReferenceEvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs);

// Runs the graph on `inputs` (in graph-input order) and returns the graph outputs.
absl::StatusOr<std::vector<Tensor>> ReferenceRunGraph(const Graph& graph, const std::vector<Tensor>& inputs);

// True when the reference has its own evaluation of `op`.
bool HasReference(std::string_view op);
// Every op the reference evaluates, sorted.
std::vector<std::string> ReferenceOps();

}  // namespace kiln
