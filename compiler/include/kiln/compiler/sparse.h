// Block-sparse weights: a MatMul's or Gemm's constant B seen as 1x16 blocks (one row k of
// B [K, N], 16 consecutive output columns), the unit the prune pass zeroes and the
// sparse_matmul kernel skips (kiln/kernels/sparse.h). Shared by the lowering, which picks
// the sparse kernel below the crossover, and the prune pass, which reports it.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/compiler/ir.h"

namespace kiln {

// Columns per block: KILN_SPARSE_BLOCK_COLS of kiln/kernels/sparse.h (checked where both are seen).
inline constexpr int64_t kSparseBlockCols = 16;

// The crossover: the sparse kernel runs where at most this share of B's blocks holds a
// nonzero. Measured on BERT-base's Linear shapes (128 rows; 768x768, 768x3072, 3072x768),
// each layer alone against the dense panel kernel, alternating, 1 and 2 threads, Zen 4
// (AVX-512): at 70 % of the blocks the sparse kernel was 1.2-1.7x faster in every layer,
// at 80 % 1.05-1.5x, at 90 % even (0.9-1.1x); 70 % leaves a margin (bench/RESULTS.md).
inline constexpr double kSparseMaxBlockDensity = 0.7;

// A constant weight as the kernel reads it: B's [K, N] with N a multiple of 16.
struct BlockCount {
  int64_t blocks = 0;   // all of them, K * N / 16
  int64_t nonzero = 0;  // those with a nonzero
  double density() const { return blocks > 0 ? static_cast<double>(nonzero) / static_cast<double>(blocks) : 1.0; }
};

// The weight of a MatMul (input 1, [K, N]) or a Gemm (input 1, [K, N], or [N, K] with
// transB) in 1x16 blocks; std::nullopt where it is not a 2-D f32 constant with N a
// multiple of 16 (or the node is neither).
std::optional<BlockCount> CountWeightBlocks(const Node& node);

// Whether an artifact runs the node on the block-sparse kernel (what the lowering decides:
// its weight's blocks under the crossover, or kiln.algorithm, and the kernel fits the node).
bool RunsSparse(const Node& node);

}  // namespace kiln
