/* Shape functions: the output dims of a node whose shapes are known only at run time
 * (symbolic input dims, or dims that follow from input data such as Reshape's shape).
 *
 * A shape function is a kernel of the library (kiln_k_shape_<rule>, UNTYPED) called before
 * the node's kernel: its inputs are the node's inputs (dims always, data where the rule
 * reads it), its outputs the node's outputs, whose `dims` arrays it writes (the caller
 * passes writable storage of each output's rank; the ranks are known at compile time),
 * plus one last output whose `data` is a writable copy of the node kernel's parameter
 * struct, or NULL: rules whose kernel has shape-derived parameters (matmul's batch
 * strides, a window's SAME pads) complete them there.
 *
 * The compiler runs the same functions at compile time with -1 for every dim it does not
 * know and NULL data for inputs it does not know, so one rule defines a node's shape for
 * type inference and at run time; a rule gives -1 where the result depends on an unknown. */
#ifndef KILN_KERNELS_SHAPE_H_
#define KILN_KERNELS_SHAPE_H_
#include "kiln/kernels/params.h"
#ifdef __cplusplus
extern "C" {
#endif
enum kiln_shape_flags {
  KILN_SHAPE_TRANS_A = 1,                /* gemm */
  KILN_SHAPE_TRANS_B = 2,                /* gemm */
  KILN_SHAPE_CEIL_MODE = 4,              /* window; split: num_outputs' rounded-up parts */
  KILN_SHAPE_SAME_UPPER = 8,             /* window: auto_pad */
  KILN_SHAPE_SAME_LOWER = 16,            /* window: auto_pad */
  KILN_SHAPE_VALID = 32,                 /* window: auto_pad */
  KILN_SHAPE_ALLOW_ZERO = 64,            /* reshape */
  KILN_SHAPE_CHANNELS_FROM_WEIGHT = 128, /* window: output channels are input 1's dim 0 (Conv) */
  /* unsqueeze, squeeze, reduce, pad, split: the axes (pads, sizes) are input 1's data,
   * read at run time, not `ints` */
  KILN_SHAPE_FROM_INPUT = 256,
  KILN_SHAPE_KEEPDIMS = 512,          /* reduce */
  KILN_SHAPE_NOOP_EMPTY_AXES = 1024,  /* reduce: no axes reduce none (else all) */
  KILN_SHAPE_HAS_AXIS = 2048,         /* compress, unique: `axis` is given (else the input is flattened) */
  KILN_SHAPE_CENTER_POINT_BOX = 4096, /* non_max_suppression: boxes are [x, y, width, height] */
  KILN_SHAPE_CENTER_CROP_PAD = 8192,  /* pad: `ints` are CenterCropPad's extents (-1: kept), centred */
};
typedef struct kiln_shape_params {
  int64_t axis;  /* flatten, concat, gather, one_hot, split, compress, arg_reduce: normalised (>= 0) */
  int64_t flags; /* kiln_shape_flags */
  /* window: where the kiln_window lies in the kernel's parameter struct, in bytes */
  int64_t window_offset;
  int64_t num_ints; /* entries of ints used */
  /* transpose: perm; unsqueeze, squeeze, reduce: axes (normalised, sorted); pad: pads
   * (begins, then ends); split: the sizes; non_max_suppression: 1 for each node input given;
   * resize: the resized axes, then at [KILN_MAX_RANK] the scales and sizes inputs (-1: none)
   * and the keep_aspect_ratio_policy */
  int64_t ints[2 * KILN_MAX_RANK];
} kiln_shape_params;
KILN_PARAMS_LAYOUT(kiln_shape_params, 4 + 2 * KILN_MAX_RANK);
#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_SHAPE_H_ */
