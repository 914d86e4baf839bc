/* Parameters of the elementwise kernels: unary, binary, clip, and fused_elementwise (the
 * reference form of a kiln.Elementwise chain; artifacts generate that loop themselves). */
#ifndef KILN_KERNELS_ELEMENTWISE_H_
#define KILN_KERNELS_ELEMENTWISE_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kiln.Elementwise: at most this many external inputs and ops in one chain. */
enum { KILN_FUSED_MAX_INPUTS = 8, KILN_FUSED_MAX_OPS = 32 };

typedef struct kiln_elementwise_params {
  int64_t op;                               /* unary: kiln_unary_op; binary: kiln_binary_op */
  double alpha, beta;                       /* unary: the op's attributes; clip: the bounds of opset 6 */
  int64_t detect_negative, detect_positive; /* unary IsInf */
  /* clip: whether each bound applies; opset 11 takes it from input 1 / 2, opset 6 from
   * alpha / beta. */
  int64_t has_min, has_max;
  int64_t seed; /* dropout: the generator's seed (the node's, else 0) */
} kiln_elementwise_params;
KILN_PARAMS_LAYOUT(kiln_elementwise_params, 8);

/* Op k of the chain: program[k] = {binary, code, a, b}, where operand index i names
 * external input i when i < the number of inputs, else the result of op i - inputs;
 * op_params[k] = {alpha, beta} of a unary op. The last op's result is the output. */
typedef struct kiln_fused_elementwise_params {
  int64_t num_ops;
  int64_t program[KILN_FUSED_MAX_OPS][4];
  double op_params[KILN_FUSED_MAX_OPS][2];
} kiln_fused_elementwise_params;
KILN_PARAMS_LAYOUT(kiln_fused_elementwise_params, 1 + 6 * KILN_FUSED_MAX_OPS);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_ELEMENTWISE_H_ */
