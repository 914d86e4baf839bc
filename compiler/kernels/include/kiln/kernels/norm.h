/* Parameters of the normalization kernels: batch_norm, instance_norm, layer_norm, lrn,
 * mean_variance_norm. */
#ifndef KILN_KERNELS_NORM_H_
#define KILN_KERNELS_NORM_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_norm_params {
  double epsilon;    /* batch_norm, instance_norm, layer_norm */
  int64_t axis;      /* layer_norm: the first normalized axis (normalised, >= 0) */
  int64_t size;      /* lrn: the window of channels */
  double alpha;      /* lrn */
  double beta;       /* lrn */
  double bias;       /* lrn */
  int64_t axes_mask; /* mean_variance_norm: bit i set where axis i is normalized over */
  int64_t training;  /* batch_norm: normalize with the batch's statistics and write the
                        running ones (outputs 1 and 2, when present) */
  double momentum;   /* batch_norm, training */
} kiln_norm_params;
KILN_PARAMS_LAYOUT(kiln_norm_params, 9);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_NORM_H_ */
