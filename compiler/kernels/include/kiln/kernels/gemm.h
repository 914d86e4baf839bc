/* Parameters of the matrix-product kernels: matmul (numpy.matmul with broadcast batch
 * dims) and gemm (ONNX Gemm). The quantized products (quant.h) reuse kiln_matmul_shape. */
#ifndef KILN_KERNELS_GEMM_H_
#define KILN_KERNELS_GEMM_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A [.., M, K] times B [.., K, N] over `batch_rank` broadcast batch dims; the strides are
 * in elements, 0 where an operand broadcasts along that dim. */
typedef struct kiln_matmul_shape {
  int64_t M, K, N;
  int64_t batch_rank;
  int64_t batch_dims[KILN_MAX_RANK];
  int64_t a_batch_strides[KILN_MAX_RANK];
  int64_t b_batch_strides[KILN_MAX_RANK];
} kiln_matmul_shape;
KILN_PARAMS_LAYOUT(kiln_matmul_shape, 4 + 3 * KILN_MAX_RANK);

/* Inputs: A, B, an optional bias [N] and an optional residual laid out as C (the fuse
 * pass's). */
typedef struct kiln_matmul_params {
  kiln_matmul_shape shape;
  kiln_activation activation;
  /* Artifacts only: B is a constant [K, N] f32 pre-packed in 16-column panels
   * ([N/16][K][16], N a multiple of 16; see gemm::PanelBlock). */
  int64_t b_panels;
  /* Strided operands: transposes the fuse pass folded into the product (f32; 0 where the
   * operand is contiguous). lda: A's row stride (its K axis contiguous). ldb: B's row
   * stride, or with b_transposed set its column stride (B's K axis contiguous). ldc: C's
   * row stride, with c_batch_strides its batch strides (read only when ldc is not 0). */
  int64_t lda, ldb, ldc, b_transposed;
  int64_t c_batch_strides[KILN_MAX_RANK];
} kiln_matmul_params;
KILN_PARAMS_LAYOUT(kiln_matmul_params, 4 + 3 * KILN_MAX_RANK + 3 + 1 + 4 + KILN_MAX_RANK);

/* Inputs: A, B, an optional C that broadcasts to [M, N]. */
typedef struct kiln_gemm_params {
  int64_t trans_a, trans_b;
  double alpha, beta;
  kiln_activation activation;
} kiln_gemm_params;
KILN_PARAMS_LAYOUT(kiln_gemm_params, 4 + 3);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_GEMM_H_ */
