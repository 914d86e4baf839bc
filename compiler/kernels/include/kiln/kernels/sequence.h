/* Sequences and optionals at run time, and the parameters of their kernels
 * (kernels/sequence/).
 *
 * A sequence value is a kiln_ktensor of dtype KILN_DTYPE_SEQUENCE and rank 1: dims[0] is
 * its length and data an array of that many element kiln_ktensors (the runtime's
 * kiln_tensor, runtime.h, has the same layout). An optional is its tensor's or its
 * sequence's kiln_ktensor, with data NULL when it is empty.
 *
 * The sequence kernels take their outputs' buffers from exec->alloc themselves (their
 * sizes follow from the values) and set each output's data, dims, rank and dtype. Values
 * are immutable and a kernel's result owns all it points to: a sequence is one block, its
 * element array first (so the block is its data pointer), then its length, the elements'
 * dims and their data, each copied in; a tensor is one block, its data first, then its
 * dims. Releasing the data pointer releases the whole value, elements included. */
#ifndef KILN_KERNELS_SEQUENCE_H_
#define KILN_KERNELS_SEQUENCE_H_

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The dtype of a sequence's kiln_ktensor; runtime.h's KILN_DTYPE_SEQUENCE, outside
 * ONNX's TensorProto.DataType numbers. */
enum { KILN_DTYPE_SEQUENCE_CODE = 1000 };

typedef struct kiln_sequence_params {
  int64_t axis;          /* SplitToSequence, ConcatFromSequence: normalised at run time */
  int64_t keepdims;      /* SplitToSequence without split: keep the split axis (size 1) */
  int64_t new_axis;      /* ConcatFromSequence: stack along a new axis */
  int64_t require_value; /* value_copy: an empty optional is an error (OptionalGetElement) */
} kiln_sequence_params;
KILN_PARAMS_LAYOUT(kiln_sequence_params, 4);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_SEQUENCE_H_ */
