/* Parameters of the convolution kernels: conv (direct loops and the implicit GEMM),
 * conv_transpose, conv_winograd (F(4x4, 3x3); in 3-D with F(2, 3) along depth) and
 * blocked_conv (NCHW16c, blocked.cc).
 * One struct: each kernel reads the fields named for it; the lowering leaves the others
 * zero. */
#ifndef KILN_KERNELS_CONV_H_
#define KILN_KERNELS_CONV_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_conv_params {
  int64_t group;              /* conv, conv_transpose */
  kiln_window window;         /* conv, conv_transpose (its pads apply to the uncropped output);
                                 conv_winograd reads pads_begin only (2 or 3 of them) */
  kiln_activation activation; /* conv, conv_winograd */
  /* conv, artifacts only: the weight comes pre-packed, 1: per group in panels of gemm::kMr
   * rows ([ceil(OC/group / kMr)][K][kMr], zero past the last row); 2: a conv's over few
   * output positions (group 1, OC a multiple of 16; see ops/nn_ops.cc) transposed into
   * 16-column panels [OC/16][C x taps][16]; 4: a grouped 2-D conv's (at most 64 output positions
   * per image, OC/group a multiple of 16 up to 64, C/group x taps up to 512) transposed per
   * group, [group][C/group x taps][OC/group]. conv_bf16: 0: 12-row panels of bf16 pairs;
   * 1: few output positions, 32-column panels, the positions the product's rows
   * (kernels/bf16/bf16.cc). */
  int64_t packed_weights;
  int64_t job_cols;        /* conv: the job width in output positions (--tune), 0: default */
  int64_t tiles_per_chunk; /* conv_winograd: tiles transformed at a time (sizes the scratch) */
  /* blocked_conv (also reads window, 2-D, and activation): 0 pointwise, 1 depthwise,
   * 2 dense from an NCHW input; the true channel counts (blocked tensors pad them). */
  int64_t blocked_kind;
  int64_t in_channels, out_channels;
} kiln_conv_params;
KILN_PARAMS_LAYOUT(kiln_conv_params, 1 + (1 + 5 * KILN_MAX_SPATIAL) + 3 + 3 + 3);

/* conv's packed_weights 2, shared by the lowering (ops/nn_ops.cc) and the kernel
 * (kernels/conv/conv.cc): the most output positions per image, and the floats of the
 * kernel's X^T buffer (positions x input channels, on the stack). */
enum { KILN_CONV_FEW_POSITIONS = 49, KILN_CONV_FEW_POSITIONS_FLOATS = 104 * 1024 };

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_CONV_H_ */
