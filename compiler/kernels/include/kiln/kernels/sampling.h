/* Parameters of the sampling kernels: grid_sample (GridSample) and roi_align (RoiAlign).
 * The output extents come from the output tensor, not from here. */
#ifndef KILN_KERNELS_SAMPLING_H_
#define KILN_KERNELS_SAMPLING_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kiln_grid_mode { KILN_GRID_BILINEAR = 0, KILN_GRID_NEAREST = 1, KILN_GRID_BICUBIC = 2 };
enum kiln_grid_padding { KILN_GRID_PAD_ZEROS = 0, KILN_GRID_PAD_BORDER = 1, KILN_GRID_PAD_REFLECTION = 2 };
enum kiln_roi_mode { KILN_ROI_AVG = 0, KILN_ROI_MAX = 1 };

typedef struct kiln_sampling_params {
  int64_t mode;           /* grid_sample: kiln_grid_mode; roi_align: kiln_roi_mode */
  int64_t padding_mode;   /* grid_sample: kiln_grid_padding */
  int64_t align_corners;  /* grid_sample */
  int64_t sampling_ratio; /* roi_align: samples per bin and axis, 0 for ceil(roi extent / bins) */
  double spatial_scale;   /* roi_align */
  int64_t half_pixel;     /* roi_align: coordinate_transformation_mode half_pixel (1) or output_half_pixel (0) */
} kiln_sampling_params;
KILN_PARAMS_LAYOUT(kiln_sampling_params, 6);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_SAMPLING_H_ */
