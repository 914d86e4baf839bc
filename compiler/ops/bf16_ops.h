// The bf16 lowerings of Conv, MatMul and Gemm (bf16_ops.cc): for nodes the bf16 pass marked
// (kiln.precision = "bf16"), a call of the bf16 kernels (kernels/bf16) with the weight
// pre-packed as bf16 pairs. nullopt: the node is not marked.
#pragma once

#include <optional>

#include "op_helpers.h"

namespace kiln::ops {

bool MarkedBf16(const Node& node);
// The f32 Winograd lowering (nn_ops.cc): its U, rounded and repacked, serves the bf16 one.
absl::StatusOr<std::optional<KernelCall>> LowerWinogradConvF32(const Node& node);
absl::StatusOr<std::optional<KernelCall>> LowerConvBf16(const Node& node);
absl::StatusOr<std::optional<KernelCall>> LowerMatMulBf16(const Node& node);
absl::StatusOr<std::optional<KernelCall>> LowerGemmBf16(const Node& node);

}  // namespace kiln::ops
