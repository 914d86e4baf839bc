// The reference interpreter: runs a graph node by node on host tensors, calling the
// natively compiled kernel library. It is the oracle for constant folding, accuracy
// validation and the conformance runner's interpreter mode.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"

namespace kiln {

// Runs one node. Outputs are allocated from the node's output types where those are
// static; otherwise from the shapes its inputs have now (its inference on the actual input
// dims and shape-deciding values, or its run-time shape function where an output's dims
// follow from input data: NonZero, NonMaxSuppression, TopK's k). Sequences and optionals
// are values of their kind (Tensor::kind()); If, Loop, Scan and SequenceMap run their
// bodies with RunGraph.
absl::StatusOr<std::vector<Tensor>> EvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs);

// Runs the graph on `inputs` (in graph-input order) and returns the graph outputs.
// `observe`, when given, sees every graph input and node output as it is computed
// (calibration for quantization reads activation ranges this way), control-flow bodies'
// values included: once per iteration, so an observer that widens a min/max range gets the
// union over the iterations, and one that keeps a tensor keeps the last iteration's.
absl::StatusOr<std::vector<Tensor>> RunGraph(const Graph& graph, const std::vector<Tensor>& inputs,
                                             const std::function<void(const Value*, const Tensor&)>& observe = nullptr);

}  // namespace kiln
