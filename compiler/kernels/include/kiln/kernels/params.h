/* The rules and shared pieces of the kernel parameter structs (kiln/kernels/<family>.h).
 *
 * Each op family passes its parameters to the kernel library as one plain C struct, by
 * pointer (kiln_kcall.params). The compiler's lowering (compiler/ops) fills it by field
 * name, the kernel reads it by field name, and codegen copies the filled bytes into the
 * artifact as a constant, so a renamed, removed or retyped parameter is a compile error on
 * both sides rather than a shifted position in an array. Fields are int64_t or double
 * only: every target lays such a struct out the same way (no padding, 8-byte alignment),
 * and KILN_PARAMS_LAYOUT pins each struct's size so that a field added on one side shows
 * as a compile error in the compiler and in the bitcode build alike. */
#ifndef KILN_KERNELS_PARAMS_H_
#define KILN_KERNELS_PARAMS_H_

#include <stdint.h>

#ifdef __cplusplus
#define KILN_PARAMS_LAYOUT(type, words)                            \
  static_assert(sizeof(type) == 8 * (words) && alignof(type) == 8, \
                #type " changed: update its size here, the lowering and the kernel together")
#else
#define KILN_PARAMS_LAYOUT(type, words) \
  _Static_assert(sizeof(type) == 8 * (words), #type " changed: update its size here, the lowering and the kernel")
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Ranks the structs have room for. */
enum { KILN_MAX_RANK = 8, KILN_MAX_SPATIAL = 3 };

/* An activation applied in a producer's epilogue (the fuse pass names it in the IR as
 * kiln.activation; the lowering maps the name to a kiln_unary_op code). */
typedef struct kiln_activation {
  int64_t code; /* kiln_unary_op, -1 for none */
  double alpha;
  double beta;
} kiln_activation;
KILN_PARAMS_LAYOUT(kiln_activation, 3);

/* The spatial window of a convolution or pooling, after auto_pad; `rank` spatial dims. */
typedef struct kiln_window {
  int64_t rank;
  int64_t kernel[KILN_MAX_SPATIAL];
  int64_t strides[KILN_MAX_SPATIAL];
  int64_t pads_begin[KILN_MAX_SPATIAL];
  int64_t pads_end[KILN_MAX_SPATIAL];
  int64_t dilations[KILN_MAX_SPATIAL];
} kiln_window;
KILN_PARAMS_LAYOUT(kiln_window, 1 + 5 * KILN_MAX_SPATIAL);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_PARAMS_H_ */
