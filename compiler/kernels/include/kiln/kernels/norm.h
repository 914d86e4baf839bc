/* Parameters of the normalization kernels: batch_norm, instance_norm, layer_norm, lrn. */
#ifndef KILN_KERNELS_NORM_H_
#define KILN_KERNELS_NORM_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_norm_params {
  double epsilon; /* batch_norm, instance_norm, layer_norm */
  int64_t axis;   /* layer_norm: the first normalized axis (normalised, >= 0) */
  int64_t size;   /* lrn: the window of channels */
  double alpha;   /* lrn */
  double beta;    /* lrn */
  double bias;    /* lrn */
} kiln_norm_params;
KILN_PARAMS_LAYOUT(kiln_norm_params, 6);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_NORM_H_ */
