/* The calling convention between generated code and the kernel library.
 *
 * The kernel library is plain, freestanding C++ (no exceptions, no allocation, libm only).
 * The build compiles it twice: natively, where the reference interpreter calls it, and to
 * LLVM bitcode, which codegen links into every artifact so LLVM can inline and specialise
 * each call for the constant shapes and attributes it sees. */
#ifndef KILN_KERNEL_ABI_H_
#define KILN_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A string tensor's data is an array of `const char*`, one NUL-terminated UTF-8 text per
 * element (the texts a kernel makes come from exec->alloc_text). */
typedef struct kiln_ktensor {
  void* data; /* NULL for an omitted optional input */
  const int64_t* dims;
  int32_t rank;
  int32_t dtype; /* ONNX TensorProto.DataType number */
} kiln_ktensor;

/* Work-sharing hook: runs fn(ctx, begin, end) over [0, n) split into chunks, possibly on
 * several threads; returns when all chunks are done. */
typedef void (*kiln_range_fn)(void* ctx, int64_t begin, int64_t end);
typedef struct kiln_kexec {
  void* pool;
  void (*parallel_for)(void* pool, int64_t n, int64_t min_chunk, kiln_range_fn fn, void* ctx);
  void (*kernel_done)(void* profile_ctx, int32_t kernel_index); /* profiling; kernels never call it */
  void* profile_ctx;
  /* Buffers for run-time shapes (the glue calls them; kernels never do). */
  void* arena;
  void* (*alloc)(void* arena, int64_t bytes);
  void (*release)(void* arena, void* data);
  void* (*slot)(void* arena, int32_t slot, int64_t bytes);
  /* The text of string outputs (kernels call it, from the calling thread): bytes that stay
   * valid until the session's next run; NULL when out of memory. */
  void* text_arena;
  char* (*alloc_text)(void* text_arena, int64_t bytes);
} kiln_kexec;

typedef struct kiln_kcall {
  const kiln_ktensor* inputs;
  const kiln_ktensor* outputs;
  /* The op family's parameter struct (kiln/kernels/<family>.h), NULL for kernels without
   * parameters; params_size is its size, checked at the kernel's entry (KILN_PARAMS). */
  const void* params;
  int64_t params_size;
  const kiln_kexec* exec; /* may be NULL: run serially */
  int32_t num_inputs;
  int32_t num_outputs;
} kiln_kcall;

/* Every kernel: returns 0 on success, a KILN_KERR_* code otherwise. */
typedef int32_t (*kiln_kernel_fn)(const kiln_kcall* call);

enum {
  KILN_KERR_OK = 0,
  KILN_KERR_DTYPE = 1,       /* element type not handled by this kernel */
  KILN_KERR_INDEX = 2,       /* an index input was out of range */
  KILN_KERR_UNSUPPORTED = 3, /* parameter combination not implemented */
  KILN_KERR_PARAMS = 4,      /* the parameter struct is not the one the kernel reads */
  KILN_KERR_SHAPE = 5,       /* input shapes that do not agree (a shape function's refusal) */
  KILN_KERR_MEMORY = 6,      /* the glue could not get a buffer for a run-time shape */
  KILN_KERR_VALUE = 7,       /* an input value the op cannot convert (a string that is no number) */
};

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNEL_ABI_H_ */
