/* Parameters of the linear-algebra kernels: einsum (Einsum). det (Det) takes none. */
#ifndef KILN_KERNELS_LINALG_H_
#define KILN_KERNELS_LINALG_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KILN_EINSUM_MAX_OPERANDS = 4,
  KILN_EINSUM_MAX_TERM = 12, /* labels of one term, the ellipsis marker and the end marker */
  KILN_EINSUM_LETTERS = 52,  /* label ids 0-25 are 'a'-'z', 26-51 'A'-'Z' */
  KILN_EINSUM_ELLIPSIS = -1, /* where '...' stands in a term */
  KILN_EINSUM_END = -2       /* after a term's last label */
};

/* The equation: one term per operand, then the output's (explicit, or the implicit one:
 * the ellipsis, then the labels seen once, in alphabetical order). The dims '...' stands
 * for follow from each operand's rank at run time. */
typedef struct kiln_einsum_params {
  int64_t num_operands;
  int64_t terms[KILN_EINSUM_MAX_OPERANDS + 1][KILN_EINSUM_MAX_TERM];
} kiln_einsum_params;
KILN_PARAMS_LAYOUT(kiln_einsum_params, 1 + (KILN_EINSUM_MAX_OPERANDS + 1) * KILN_EINSUM_MAX_TERM);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_LINALG_H_ */
