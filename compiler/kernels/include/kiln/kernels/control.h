/* Control flow drivers (compiler/kernels/control/): If, Loop and Scan run bodies that
 * codegen compiled to functions of their own, with the dynamic entry's signature. The glue
 * calls a driver with the node's inputs, output tensors whose rank, element type and dims
 * storage it set, and the body functions; the driver fills each output's dims and data
 * (from exec->alloc: the glue releases it as any buffer). A body's outputs are its own
 * buffers (data and dims from exec->alloc); the driver releases what it does not keep. */
#ifndef KILN_KERNELS_CONTROL_H_
#define KILN_KERNELS_CONTROL_H_

#include <stdint.h>

#include "kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t (*kiln_body_fn)(const kiln_ktensor* inputs, kiln_ktensor* outputs, const kiln_kexec* exec);

/* params, by op:
 *   If:   [num_captured]                                  bodies: then, else
 *   Loop: [num_carried, num_captured]                     body
 *   Scan: [num_states, num_scan_inputs, num_captured, batched (opset 8), then per scan
 *          input its axis and reverse flag, per scan output its axis and reverse flag]
 *   SequenceMap: [num_captured]                       body (run per position; each output
 *          a sequence gathering the body's output at every position)
 * Loop's carried values and SequenceMap's values may be sequences or optionals: the drivers
 * copy those as kiln/kernels/sequence.h lays them out (one owning block). */
typedef struct kiln_control_call {
  const kiln_ktensor* inputs;
  kiln_ktensor* outputs;
  const kiln_kexec* exec;
  kiln_body_fn bodies[2];
  const int64_t* params;
  int32_t num_inputs;
  int32_t num_outputs;
} kiln_control_call;

int32_t kiln_k_control_if(const kiln_control_call* call);
int32_t kiln_k_control_loop(const kiln_control_call* call);
int32_t kiln_k_control_scan(const kiln_control_call* call);
int32_t kiln_k_control_sequence_map(const kiln_control_call* call);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_CONTROL_H_ */
