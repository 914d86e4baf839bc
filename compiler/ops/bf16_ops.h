// The bf16 lowerings of Conv, MatMul and Gemm (bf16_ops.cc): for nodes the bf16 pass marked
// (kiln.precision = "bf16"), a call of the bf16 kernels (kernels/bf16) with the weight
// pre-packed as bf16 pairs. nullopt: the node is not marked.
#pragma once

#include <optional>

#include "op_helpers.h"

namespace kiln::ops {

bool MarkedBf16(const Node& node);
// The f32 Winograd lowering (nn_ops.cc): its U, rounded and repacked, serves the bf16 one.
// A 2-D conv takes it only where U per tile, at u_element_bytes an element, is at most
// max_u_bytes_per_tile.
absl::StatusOr<std::optional<KernelCall>> LowerWinogradConvF32(const Node& node, int64_t u_element_bytes,
                                                               int64_t max_u_bytes_per_tile);
absl::StatusOr<std::optional<KernelCall>> LowerConvBf16(const Node& node);
absl::StatusOr<std::optional<KernelCall>> LowerMatMulBf16(const Node& node);
absl::StatusOr<std::optional<KernelCall>> LowerGemmBf16(const Node& node);

}  // namespace kiln::ops
