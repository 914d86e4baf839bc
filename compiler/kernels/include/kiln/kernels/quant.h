/* Parameters of the quantization kernels: quantize_linear, dequantize_linear, qmatmul,
 * qconv and qgemm (dynamic_quantize_linear takes none). One struct: each kernel reads the
 * fields named for it; the lowering leaves the others zero. */
#ifndef KILN_KERNELS_QUANT_H_
#define KILN_KERNELS_QUANT_H_

#include "kiln/kernels/gemm.h"
#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an integer product writes: int32 sums; Y requantized to Y's scale and zero point;
 * or f32 sum * x_scale * w_scale + B (kiln.QLinearConvToFloat, kiln.QLinearMatMulToFloat). */
enum kiln_quant_mode { KILN_QUANT_SUM_INT32 = 0, KILN_QUANT_REQUANTIZE = 1, KILN_QUANT_TO_FLOAT = 2 };

typedef struct kiln_quant_params {
  /* quantize_linear, dequantize_linear: X seen as [outer, channels, inner], one scale and
   * zero point per channel. */
  int64_t outer, channels, inner;
  int64_t mode;            /* qmatmul, qconv, qgemm: kiln_quant_mode */
  kiln_matmul_shape shape; /* qmatmul */
  int64_t group;           /* qconv */
  kiln_window window;      /* qconv */
  int64_t relu;            /* qconv: clamp at Y's zero point (requantized) or at 0 (f32) */
  /* qconv (artifacts): the weights packed for QConvFast (s8 [G][ceil(OC/G / 8)][K/4][8][4]),
   * then the fields below as that path reads them. */
  int64_t packed_weights;
  int64_t x_zero_point;       /* qconv packed: X's zero point as the packed kernel sees it */
  int64_t x_signed;           /* qconv packed: X (qgemm: A) is s8 */
  int64_t y_zero_point;       /* qconv packed, qgemm */
  int64_t clamp_lo, clamp_hi; /* qconv packed, qgemm: Y's range (with relu folded in) */
  int64_t rows, K, N;         /* qgemm */
  /* qconv packed, one group of fewer than four channels (conv stems): K runs over (kh, kw,
   * channel) as one sequence in words of four, rather than over (kh, kw, quad of channels). */
  int64_t flat_k;
  /* qconv packed: where there are too few chunks of columns to share among threads, the
   * output channels are split into ranges of this many row panels (an even number), each
   * range its own jobs; the scratch then holds every chunk's packed columns too. 0: none. */
  int64_t panel_range;
} kiln_quant_params;
KILN_PARAMS_LAYOUT(kiln_quant_params, 4 + (4 + 3 * KILN_MAX_RANK) + 1 + (1 + 5 * KILN_MAX_SPATIAL) + 7 + 3 + 2);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_QUANT_H_ */
