/* Parameters of the spatial kernels (kernels/spatial/spatial.cc): global_lp_pool
 * (GlobalLpPool), lp_normalize (LpNormalization), max_roi_pool (MaxRoiPool), col2im
 * (Col2Im), affine_grid (AffineGrid) and deform_conv (DeformConv). Extents come from the
 * tensors (pooled shape, image shape, grid size: the output's dims), not from here. */
#ifndef KILN_KERNELS_SPATIAL_H_
#define KILN_KERNELS_SPATIAL_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_spatial_params {
  int64_t p;             /* global_lp_pool, lp_normalize: the norm's order */
  int64_t axis;          /* lp_normalize: the normalised axis, non-negative */
  int64_t align_corners; /* affine_grid */
  int64_t group;         /* deform_conv: channel groups of the weights */
  int64_t offset_group;  /* deform_conv: channel groups sharing one offset (and mask) */
  double spatial_scale;  /* max_roi_pool */
  kiln_window window;    /* col2im: block_shape as kernel; deform_conv: W's spatial dims as kernel */
} kiln_spatial_params;
KILN_PARAMS_LAYOUT(kiln_spatial_params, 6 + 1 + 5 * KILN_MAX_SPATIAL);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_SPATIAL_H_ */
