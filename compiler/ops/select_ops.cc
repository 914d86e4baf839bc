// Ops whose output size follows from input data: NonZero, Compress, Unique,
// NonMaxSuppression and the window generators HannWindow, HammingWindow, BlackmanWindow.
// Their shapes come from their run-time rules (dynamic_ops.cc), evaluated at compile time
// when the deciding inputs are constants, so one rule serves both; the kernels read every
// size from their tensors.
#include "kiln/kernels/movement.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

// Compress's and Unique's axis, normalised; -1 without one (the input flattened).
int64_t AxisOrFlattened(const Node& node) { return node.has_attr("axis") ? AxisAttr(node, 0, node.input(0)) : -1; }

absl::StatusOr<KernelCall> LowerNonZero(const Node& node) { return Call<kernel::nonzero>(PassInputs(node, 1)); }

absl::StatusOr<KernelCall> LowerCompress(const Node& node) {
  kiln_movement_params params{};
  params.axis = AxisOrFlattened(node);
  return CallWithParams<kernel::compress>(PassInputs(node, 2), params);
}

absl::StatusOr<KernelCall> LowerUnique(const Node& node) {
  kiln_movement_params params{};
  params.axis = AxisOrFlattened(node);
  params.sorted = node.GetInt("sorted", 1) != 0;
  return CallWithParams<kernel::unique>(PassInputs(node, 1), params);
}

absl::StatusOr<KernelCall> LowerNonMaxSuppression(const Node& node) {
  kiln_nms_params params{};
  params.center_point_box = node.GetInt("center_point_box", 0) != 0;
  return CallWithParams<kernel::non_max_suppression>(PassInputs(node, node.inputs().size()), params);
}

std::function<absl::StatusOr<KernelCall>(const Node&)> LowerWindowFunction(int64_t kind) {
  return [kind](const Node& node) -> absl::StatusOr<KernelCall> {
    kiln_window_function_params params{};
    params.kind = kind;
    params.periodic = node.GetInt("periodic", 1) != 0;
    return CallWithParams<kernel::window_function>({}, params);
  };
}

}  // namespace

void RegisterSelectOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"NonZero", 1, 1, 0b1, InferByDynamicRule, LowerNonZero},
      {"Compress", 2, 2, 0b10, InferByDynamicRule, LowerCompress},
      {"Unique", 1, 1, 0b1, InferByDynamicRule, LowerUnique},
      {"NonMaxSuppression", 2, 5, 0b11111, InferByDynamicRule, LowerNonMaxSuppression},
      {"HannWindow", 1, 1, 0b1, InferByDynamicRule, LowerWindowFunction(KILN_WINDOW_HANN)},
      {"HammingWindow", 1, 1, 0b1, InferByDynamicRule, LowerWindowFunction(KILN_WINDOW_HAMMING)},
      {"BlackmanWindow", 1, 1, 0b1, InferByDynamicRule, LowerWindowFunction(KILN_WINDOW_BLACKMAN)},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
