/* Parameters of the block-sparse matrix product (compiler/kernels/sparse/): a MatMul whose
 * constant weight B [K, N] the prune pass left mostly zero, stored by lowering as blocks of
 * 16 consecutive output columns of one row k ("1x16" blocks), only the blocks with a
 * nonzero. */
#ifndef KILN_KERNELS_SPARSE_H_
#define KILN_KERNELS_SPARSE_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Columns per block of B: one 16-column panel (two 8-lane or one 16-lane vector). */
#define KILN_SPARSE_BLOCK_COLS 16

/* Inputs: A [.., K] f32 (its leading dims folded into `rows`); the blocks' values f32
 * [blocks, 16]; each block's row k of B, i32 [blocks]; each panel's first block, i32
 * [N / 16 + 1] (panel p holds blocks [start[p], start[p + 1]), by increasing k); an
 * optional bias [N]. Output C [.., N] = A . B (+ bias), then the activation. */
typedef struct kiln_sparse_matmul_params {
  int64_t rows, K, N; /* N a multiple of 16 */
  kiln_activation activation;
} kiln_sparse_matmul_params;
KILN_PARAMS_LAYOUT(kiln_sparse_matmul_params, 3 + 3);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_SPARSE_H_ */
