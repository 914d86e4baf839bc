/* Parameters of the reduction kernels: reduce, arg_reduce, softmax and topk. */
#ifndef KILN_KERNELS_REDUCE_H_
#define KILN_KERNELS_REDUCE_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_reduce_params {
  int64_t op;                /* reduce: kiln_reduce_op; softmax: kiln_softmax_op; arg_reduce: 1 ArgMin, 0 ArgMax */
  int64_t axes_mask;         /* reduce: bit i set where axis i is reduced (the output keeps the
                                input's order of kept axes, so keepdims does not matter) */
  int64_t axis;              /* arg_reduce, softmax: normalised (>= 0) */
  int64_t select_last_index; /* arg_reduce */
  int64_t coerce_2d;         /* softmax, opset < 13: the input seen as [prod(dims[:axis]), prod(dims[axis:])] */
} kiln_reduce_params;
KILN_PARAMS_LAYOUT(kiln_reduce_params, 5);

/* TopK: inputs X and K (K may be omitted: k is then the outputs' extent along axis, which
 * it must equal when given); outputs Values and Indices (int64). Ties keep the lower
 * index first. */
typedef struct kiln_topk_params {
  int64_t axis; /* normalised (>= 0) */
  int64_t largest;
  int64_t sorted;
} kiln_topk_params;
KILN_PARAMS_LAYOUT(kiln_topk_params, 3);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_REDUCE_H_ */
