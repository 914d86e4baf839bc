/* Parameters of the loss kernels: nll_loss (NegativeLogLikelihoodLoss) and
 * softmax_cross_entropy (SoftmaxCrossEntropyLoss). */
#ifndef KILN_KERNELS_LOSS_H_
#define KILN_KERNELS_LOSS_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kiln_loss_reduction { KILN_LOSS_NONE = 0, KILN_LOSS_SUM = 1, KILN_LOSS_MEAN = 2 };

typedef struct kiln_loss_params {
  int64_t reduction;        /* kiln_loss_reduction */
  int64_t has_ignore_index; /* 1 when the node gives ignore_index */
  int64_t ignore_index;     /* a target equal to it contributes nothing (loss and weight 0) */
} kiln_loss_params;
KILN_PARAMS_LAYOUT(kiln_loss_params, 3);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_LOSS_H_ */
