// Elementwise ops, from the ONNX specification.
#include "ref_ops.h"

namespace kiln::ref {

void AddElementwiseOps(RefTable& table) {
  table["Identity"] = [](const Node&, const Inputs& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{*in[0]};
  };
}

}  // namespace kiln::ref
