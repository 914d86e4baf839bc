/* Kiln runtime: load a compiled Kiln artifact (an ELF shared object) and run it.
 *
 * This is the only header a user of an artifact needs. Plain C, libc only. Every call
 * returns a kiln_status; on failure kiln_last_error() gives a message for a person.
 * Structs passed in carry a struct_size field so the ABI can grow. */
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_ABI_VERSION 4

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1,
  KILN_ERROR_LOAD = 2,         /* dlopen failed or the file is not a Kiln artifact */
  KILN_ERROR_ABI_MISMATCH = 3, /* artifact built for another ABI version */
  KILN_ERROR_OUT_OF_MEMORY = 4,
  KILN_ERROR_RUNTIME = 5, /* a kernel reported an error (e.g. index out of range) */
} kiln_status;

/* Element types use ONNX TensorProto.DataType numbers (1 = float32, 7 = int64, ...). In
 * a descriptor, a dim of -1 is known only at run time (a symbolic dim such as the batch).
 *
 * Float8 (dtypes 17 to 20: E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ) are one byte per element, their
 * ONNX bits. uint4 and int4 (21, 22) are one element per byte too, NOT packed as in ONNX
 * files: a uint4 byte holds 0..15, an int4 byte -8..7 (sign-extended, so it reads as int8).
 * Callers that hold packed data unpack it (low nibble first) before a run.
 *
 * Strings (dtype 8): an element is a `const char*` to a NUL-terminated UTF-8 text, so a
 * string tensor's data is an array of pointers (8 bytes each; 64-bit targets only). The
 * caller owns its inputs' texts. An output's texts live in memory the session owns, valid
 * until its next run or its destruction; an output element an op passes through unchanged
 * (Identity, Reshape, a StringNormalizer that changes no case) may point at an input's
 * text instead, so keep the inputs as long as the outputs. */
typedef struct kiln_tensor_info {
  const char* name;
  int32_t dtype; /* KILN_DTYPE_SEQUENCE for a sequence (or an optional one) */
  int32_t rank;
  const int64_t* dims;
  int32_t kind;          /* kiln_value_kind */
  int32_t element_dtype; /* a sequence's tensors' dtype; else dtype */
} kiln_tensor_info;

/* What a graph input or output is. A sequence of tensors travels as one kiln_tensor of
 * dtype KILN_DTYPE_SEQUENCE and rank 1: dims[0] is its length and data an array of that
 * many element kiln_tensors. An optional travels as its tensor or its sequence, with data
 * NULL when it is empty. Sequences and optionals run through kiln_session_run_shaped only;
 * a sequence output, like any shaped output, is the session's (elements included) until
 * its next run. */
typedef enum kiln_value_kind {
  KILN_VALUE_TENSOR = 0,
  KILN_VALUE_SEQUENCE = 1,
  KILN_VALUE_OPTIONAL = 2,          /* an optional tensor */
  KILN_VALUE_OPTIONAL_SEQUENCE = 3, /* an optional sequence */
} kiln_value_kind;
#define KILN_DTYPE_SEQUENCE 1000

/* A tensor with its shape: dense row-major data, `rank` dims. */
typedef struct kiln_tensor {
  void* data;
  const int64_t* dims;
  int32_t rank;
  int32_t dtype;
} kiln_tensor;

/* Hooks the artifact calls (mirrors the kernel ABI): work sharing for parallel loops;
 * when profiling, kernel_done(profile_ctx, i) after kernel i of the entry function; for
 * artifacts with run-time shapes, the session's buffers (64-byte aligned; NULL when out of
 * memory); and the text of string outputs (ABI 4). */
typedef void (*kiln_range_fn)(void* ctx, int64_t begin, int64_t end);
typedef struct kiln_exec_hooks {
  void* pool;
  void (*parallel_for)(void* pool, int64_t n, int64_t min_chunk, kiln_range_fn fn, void* ctx);
  void (*kernel_done)(void* profile_ctx, int32_t kernel_index);
  void* profile_ctx;
  void* arena;
  void* (*alloc)(void* arena, int64_t bytes);
  void (*release)(void* arena, void* data);
  /* Slot `slot` of the memory plan of an artifact with run-time shapes: a buffer of at
   * least `bytes`, kept by the session and grown only when a run needs more, so runs at
   * sizes seen before allocate nothing. NULL when out of memory. */
  void* (*slot)(void* arena, int32_t slot, int64_t bytes);
  /* The text of string outputs: bytes valid until the session's next run. */
  void* text_arena;
  char* (*alloc_text)(void* text_arena, int64_t bytes);
} kiln_exec_hooks;

/* Returns 0, or (node index + 1) << 8 | kernel error code. */
typedef int32_t (*kiln_entry_fn)(void* const* inputs, void* const* outputs, void* workspace,
                                 const kiln_exec_hooks* exec);

/* The entry of an artifact with run-time shapes: inputs with their dims; it sets each
 * outputs[i] (data and dims from exec->alloc; the runtime releases them at the session's
 * next run). Returns 0 or as kiln_entry_fn. */
typedef int32_t (*kiln_dynamic_entry_fn)(const kiln_tensor* inputs, kiln_tensor* outputs, const kiln_exec_hooks* exec);

/* What kiln_module_v1() in an artifact returns. */
typedef struct kiln_module_desc {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* compiler_version;
  const char* target;
  const char* manifest_json;
  int32_t num_inputs;
  int32_t num_outputs;
  const kiln_tensor_info* inputs;
  const kiln_tensor_info* outputs;
  uint64_t workspace_bytes;
  kiln_entry_fn entry;
  int32_t num_kernels;             /* nodes of the compiled graph, in execution order */
  const char* const* kernel_names; /* "node_name (Op)" per kernel, for profiles */
  /* Set (and entry NULL) when some shape is known only at run time: run the artifact with
   * kiln_session_run_shaped. */
  kiln_dynamic_entry_fn dynamic_entry;
} kiln_module_desc;

typedef struct kiln_module kiln_module;
typedef struct kiln_session kiln_session;

typedef struct kiln_session_options {
  uint32_t struct_size; /* sizeof(kiln_session_options) */
  int32_t num_threads;  /* 0: one per online CPU */
} kiln_session_options;

kiln_status kiln_module_load(const char* path, kiln_module** out_module);
void kiln_module_unload(kiln_module* module);
kiln_status kiln_module_describe(const kiln_module* module, const kiln_module_desc** out_desc);

kiln_status kiln_session_create(const kiln_module* module, const kiln_session_options* options,
                                kiln_session** out_session);
/* inputs[i] / outputs[i]: dense row-major buffers in the order of the descriptor. The
 * calling thread runs kernels too: give it at least 1 MiB of stack (the GEMM core keeps
 * its packed blocks, up to ~300 KiB, on the stack; the pool's own threads have the
 * system default, 8 MiB on Debian). */
kiln_status kiln_session_run(kiln_session* session, const void* const* inputs, void* const* outputs);
/* Like kiln_session_run, and adds each kernel's wall time in milliseconds to
 * kernel_ms[i] (an array of desc->num_kernels doubles the caller zeroes). */
kiln_status kiln_session_run_profiled(kiln_session* session, const void* const* inputs, void* const* outputs,
                                      double* kernel_ms);
/* Runs on inputs of any shape the artifact accepts (a descriptor dim of -1 takes any
 * size): inputs[i] carry their dims; the runtime sets outputs[i] (data, dims, rank, dtype)
 * to buffers the session owns, valid until its next run or its destruction. Works for
 * every artifact; the only way to run one with run-time shapes. */
kiln_status kiln_session_run_shaped(kiln_session* session, const kiln_tensor* inputs, kiln_tensor* outputs);
/* Like kiln_session_run_shaped, and adds each kernel's wall time in milliseconds to
 * kernel_ms[i] (an array of desc->num_kernels doubles the caller zeroes). */
kiln_status kiln_session_run_shaped_profiled(kiln_session* session, const kiln_tensor* inputs, kiln_tensor* outputs,
                                             double* kernel_ms);
/* What a session holds for artifacts with run-time shapes: the planned slots' bytes (sized
 * by the largest run so far), the pool's (graph outputs, copies), and how many times it has
 * called the allocator since it was made: a run at sizes seen before adds nothing. */
typedef struct kiln_memory_stats {
  uint32_t struct_size; /* set by the caller: sizeof(kiln_memory_stats) */
  int64_t planned_bytes;
  int64_t pool_bytes;
  int64_t allocations;
} kiln_memory_stats;
kiln_status kiln_session_memory_stats(const kiln_session* session, kiln_memory_stats* stats);
int32_t kiln_session_num_threads(const kiln_session* session);
void kiln_session_destroy(kiln_session* session);

/* Bytes per element of a dtype, 0 if unknown (a string element is a pointer: 8). */
size_t kiln_dtype_size(int32_t dtype);

/* The message of the last failed call on this thread ("" if none). */
const char* kiln_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_H_ */
