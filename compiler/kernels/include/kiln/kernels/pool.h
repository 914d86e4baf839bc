/* Parameters of the pooling kernel (MaxPool, AveragePool, LpPool). */
#ifndef KILN_KERNELS_POOL_H_
#define KILN_KERNELS_POOL_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_pool_params {
  int64_t op; /* kiln_pool_op */
  kiln_window window;
  int64_t count_include_pad; /* AveragePool */
  double p;                  /* LpPool's norm */
  int64_t storage_order;     /* MaxPool: 1 numbers the Indices output's spatial positions column-major */
} kiln_pool_params;
KILN_PARAMS_LAYOUT(kiln_pool_params, 1 + (1 + 5 * KILN_MAX_SPATIAL) + 3);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_POOL_H_ */
