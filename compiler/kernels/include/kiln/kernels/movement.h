/* Parameters of the data-movement kernels: concat, split, gather, gather_elements,
 * gather_nd, scatter_elements, scatter_nd, one_hot, cumsum, trilu, eye_like, reverse_sequence
 * (one struct),
 * strided_copy and pad (their per-dim arrays). tile, fill, range and copy take none. */
#ifndef KILN_KERNELS_MOVEMENT_H_
#define KILN_KERNELS_MOVEMENT_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_movement_params {
  int64_t axis;               /* concat, split, gather, gather_elements, scatter_elements, one_hot,
                                 cumsum, compress, unique, reverse_sequence (the time axis):
                                 normalised (>= 0); compress, unique: -1 for none (the input
                                 flattened) */
  int64_t batch_dims;         /* gather_nd */
  int64_t reduction;          /* scatter_elements, scatter_nd: 0 none, 1 add, 2 mul, 3 max, 4 min */
  int64_t upper;              /* trilu */
  int64_t k;                  /* trilu, eye_like: the diagonal */
  int64_t exclusive, reverse; /* cumsum */
  int64_t sorted;             /* unique: ascending (else in order of first occurrence) */
  int64_t batch_axis;         /* reverse_sequence */
} kiln_movement_params;
KILN_PARAMS_LAYOUT(kiln_movement_params, 9);

/* Output element (i_0 .. i_{rank-1}) of a row-major view with these dims reads
 * input[offset + sum(i_k * strides[k])]: Transpose, Slice, Expand, Depth/SpaceToDepth. */
typedef struct kiln_strided_copy_params {
  int64_t rank;
  int64_t offset;
  int64_t dims[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK];
} kiln_strided_copy_params;
KILN_PARAMS_LAYOUT(kiln_strided_copy_params, 2 + 2 * KILN_MAX_RANK);

/* The constant value is input 2 when given, else 0; the end pads follow from the shapes. */
typedef struct kiln_pad_params {
  int64_t mode; /* kiln_pad_mode */
  int64_t pads_begin[KILN_MAX_RANK];
} kiln_pad_params;
KILN_PARAMS_LAYOUT(kiln_pad_params, 1 + KILN_MAX_RANK);

enum kiln_window_function_kind { KILN_WINDOW_HANN = 0, KILN_WINDOW_HAMMING = 1, KILN_WINDOW_BLACKMAN = 2 };

/* HannWindow, HammingWindow, BlackmanWindow: output 0's length is the window's size. */
typedef struct kiln_window_function_params {
  int64_t kind;     /* kiln_window_function_kind */
  int64_t periodic; /* 1: the period is the size (else the size - 1, a symmetric window) */
} kiln_window_function_params;
KILN_PARAMS_LAYOUT(kiln_window_function_params, 2);

/* NonMaxSuppression. */
typedef struct kiln_nms_params {
  int64_t center_point_box; /* 1: boxes are [x_center, y_center, width, height], else two corners */
} kiln_nms_params;
KILN_PARAMS_LAYOUT(kiln_nms_params, 1);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_MOVEMENT_H_ */
