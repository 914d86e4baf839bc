/* Parameters of the resampling kernel (resize: ONNX Resize and Upsample).
 * Attribute-derived values only: the kernel reads roi, scales and sizes from its inputs
 * and every extent from the tensors' dims at run time. */
#ifndef KILN_KERNELS_RESIZE_H_
#define KILN_KERNELS_RESIZE_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_resize_mode {
  KILN_RESIZE_NEAREST = 0,
  KILN_RESIZE_LINEAR = 1,
  KILN_RESIZE_CUBIC = 2
} kiln_resize_mode;

/* coordinate_transformation_mode: how an output coordinate maps to an input one. */
typedef enum kiln_resize_coordinates {
  KILN_RESIZE_HALF_PIXEL = 0,
  KILN_RESIZE_HALF_PIXEL_SYMMETRIC = 1,
  KILN_RESIZE_PYTORCH_HALF_PIXEL = 2,
  KILN_RESIZE_ALIGN_CORNERS = 3,
  KILN_RESIZE_ASYMMETRIC = 4,
  KILN_RESIZE_TF_HALF_PIXEL_FOR_NN = 5,
  KILN_RESIZE_TF_CROP_AND_RESIZE = 6,
} kiln_resize_coordinates;

typedef enum kiln_resize_nearest {
  KILN_NEAREST_ROUND_PREFER_FLOOR = 0,
  KILN_NEAREST_ROUND_PREFER_CEIL = 1,
  KILN_NEAREST_FLOOR = 2,
  KILN_NEAREST_CEIL = 3,
  KILN_NEAREST_SIMPLE = 4, /* Resize-10 and Upsample: ceil on an axis scaled down, floor otherwise */
} kiln_resize_nearest;

typedef enum kiln_resize_aspect {
  KILN_ASPECT_STRETCH = 0,
  KILN_ASPECT_NOT_LARGER = 1,
  KILN_ASPECT_NOT_SMALLER = 2,
} kiln_resize_aspect;

/* The most input elements one axis' filter may span: an antialiased linear filter spans
 * 2 / scale of them, a cubic one 4 / scale (so a cubic may downscale by up to 32). */
enum { KILN_RESIZE_MAX_TAPS = 128 };

/* Inputs: X, roi, scales, sizes (each but X may be omitted: data NULL or no elements).
 * roi, scales and sizes list the axes in `axes` (all axes when num_axes is 0). A scale
 * comes from scales when given, else from sizes / input dims (keep_aspect_ratio_policy). */
typedef struct kiln_resize_params {
  int64_t mode;        /* kiln_resize_mode */
  int64_t coordinates; /* kiln_resize_coordinates */
  int64_t nearest;     /* kiln_resize_nearest */
  int64_t exclude_outside;
  int64_t antialias;         /* linear and cubic: widen the filter by 1/scale when downsampling */
  int64_t keep_aspect_ratio; /* kiln_resize_aspect */
  double cubic_coeff_a;
  double extrapolation_value;
  int64_t num_axes;
  int64_t axes[KILN_MAX_RANK]; /* normalised (>= 0) */
} kiln_resize_params;
KILN_PARAMS_LAYOUT(kiln_resize_params, 9 + KILN_MAX_RANK);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_RESIZE_H_ */
