/* Parameters of the float8 / 4-bit kernels (compiler/kernels/lowbit/): cast_lowbit,
 * quantize_lowbit and dequantize_lowbit. One struct: each kernel reads the fields named for
 * it; the lowering leaves the others zero. */
#ifndef KILN_KERNELS_LOWBIT_H_
#define KILN_KERNELS_LOWBIT_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_lowbit_params {
  /* cast_lowbit, quantize_lowbit: into float8, 1 clamps +-inf and values past the largest
   * finite one to it; 0 makes them NaN (E5M2: infinity). */
  int64_t saturate;
  /* quantize_lowbit, dequantize_lowbit: X seen as [outer, channels, inner] around the axis;
   * the scale (and zero point) has one element (outer = channels = 1), one per channel, or
   * (block_size > 0) one per block of block_size channels: [outer, ceil(channels /
   * block_size), inner]. */
  int64_t outer, channels, inner, block_size;
} kiln_lowbit_params;
KILN_PARAMS_LAYOUT(kiln_lowbit_params, 5);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_LOWBIT_H_ */
