/* Parameters of the recurrent kernel (rnn: ONNX RNN, GRU and LSTM). Only what the
 * attributes decide lives here; sequence length, batch, input and hidden sizes come from
 * the tensors at run time, and sequence_lens is a run-time input. */
#ifndef KILN_KERNELS_RNN_H_
#define KILN_KERNELS_RNN_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cell: how many gates it has and how they combine. */
enum { KILN_RNN_CELL_SIMPLE = 0, KILN_RNN_CELL_GRU = 1, KILN_RNN_CELL_LSTM = 2 };
enum { KILN_RNN_FORWARD = 0, KILN_RNN_REVERSE = 1, KILN_RNN_BIDIRECTIONAL = 2 };
/* Activations ONNX's recurrent ops take that are no unary op of their own (activation
 * codes are otherwise kiln_unary_op codes): Affine alpha*x + beta, ScaledTanh
 * alpha*tanh(beta*x). */
enum { KILN_RNN_ACT_AFFINE = 1000, KILN_RNN_ACT_SCALED_TANH = 1001 };
enum { KILN_RNN_MAX_ACTIVATIONS = 3 };

/* Inputs, always eight (absent ones null): X, W, R, B, sequence_lens, initial_h, initial_c,
 * P (the last two LSTM only). Outputs: the node's (Y, Y_h, Y_c; trailing ones may be
 * missing), then the scratch (kiln_rnn scratch bytes, see compiler/ops/rnn_ops.cc). */
typedef struct kiln_rnn_params {
  int64_t cell;      /* KILN_RNN_CELL_* */
  int64_t direction; /* KILN_RNN_FORWARD, _REVERSE, _BIDIRECTIONAL */
  int64_t layout;    /* 0: X [seq, batch, input]; 1: X [batch, seq, input] */
  int64_t has_clip;  /* clip the gates' pre-activations to [-clip, clip] */
  double clip;
  int64_t linear_before_reset; /* GRU */
  int64_t input_forget;        /* LSTM: f = 1 - i */
  /* 1: W and R come transposed, [dirs, input, gates*hidden] and [dirs, hidden,
   * gates*hidden] (the lowering's copy of constant weights), so no run transposes them */
  int64_t weights_transposed;
  /* [direction][f, g, h]: the cell's activations in ONNX order (RNN f; GRU f, g; LSTM
   * f, g, h), the reverse direction's in row 1. */
  kiln_activation activations[2][KILN_RNN_MAX_ACTIVATIONS];
} kiln_rnn_params;
KILN_PARAMS_LAYOUT(kiln_rnn_params, 8 + 2 * KILN_RNN_MAX_ACTIVATIONS * 3);

/* The scratch the kernel works in, in elements of X's type, for one direction at a time:
 * W and R transposed ([input, gates*hidden], [hidden, gates*hidden]; unused when they come
 * transposed), the projected input
 * of every step ([seq*batch, gates*hidden]), one step's gates ([batch, gates*hidden]) and
 * the states h, c and GRU's r*h ([batch, hidden] each). The lowering sizes the scratch
 * with it and the kernel lays it out with it. */
static inline int64_t kiln_rnn_scratch_elements(int64_t seq, int64_t batch, int64_t input, int64_t hidden,
                                                int64_t gates) {
  return gates * hidden * (input + hidden + seq * batch + batch) + 3 * batch * hidden;
}

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_RNN_H_ */
