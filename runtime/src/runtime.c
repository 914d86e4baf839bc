/* The Kiln runtime: loads an artifact with dlopen, checks its ABI, and runs it with a
 * small fixed thread pool (static partitioning, the calling thread takes the first chunk,
 * so N threads means N-1 pool workers and no oversubscription). */
#define _GNU_SOURCE
#include "kiln/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char last_error[512];

static kiln_status fail(kiln_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_error, sizeof(last_error), format, args);
  va_end(args);
  return status;
}

const char* kiln_last_error(void) { return last_error; }

size_t kiln_dtype_size(int32_t dtype) {
  switch (dtype) {
    case 1:
    case 6:
    case 12: return 4;
    case 2:
    case 3:
    case 9:
    case 17: /* the float8 formats */
    case 18:
    case 19:
    case 20:
    case 21: /* uint4 and int4: one element per byte */
    case 22: return 1;
    case 4:
    case 5:
    case 10:
    case 16: return 2;
    case 7:
    case 8: /* string: a const char* */
    case 11:
    case 13: return 8;
    default: return 0;
  }
}

struct kiln_module {
  void* handle;
  const kiln_module_desc* desc;
};

kiln_status kiln_module_load(const char* path, kiln_module** out_module) {
  if (path == NULL || out_module == NULL)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "path and out_module must not be NULL");
  /* dlopen searches the library path for bare names; make plain file names local. */
  char resolved[4096];
  if (strchr(path, '/') == NULL) {
    snprintf(resolved, sizeof(resolved), "./%s", path);
    path = resolved;
  }
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) return fail(KILN_ERROR_LOAD, "cannot load %s: %s", path, dlerror());
  typedef const kiln_module_desc* (*describe_fn)(void);
  describe_fn describe = (describe_fn)dlsym(handle, "kiln_module_v1");
  if (describe == NULL) {
    dlclose(handle);
    return fail(KILN_ERROR_LOAD, "%s is not a Kiln artifact (no kiln_module_v1 symbol)", path);
  }
  const kiln_module_desc* desc = describe();
  if (desc == NULL || desc->struct_size < sizeof(kiln_module_desc) || desc->abi_version != KILN_ABI_VERSION) {
    unsigned version = desc ? desc->abi_version : 0;
    dlclose(handle);
    return fail(KILN_ERROR_ABI_MISMATCH, "%s has ABI version %u; this runtime supports %d", path, version,
                KILN_ABI_VERSION);
  }
  kiln_module* module = calloc(1, sizeof(*module));
  if (module == NULL) {
    dlclose(handle);
    return fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory");
  }
  module->handle = handle;
  module->desc = desc;
  *out_module = module;
  return KILN_OK;
}

void kiln_module_unload(kiln_module* module) {
  if (module == NULL) return;
  dlclose(module->handle);
  free(module);
}

kiln_status kiln_module_describe(const kiln_module* module, const kiln_module_desc** out_desc) {
  if (module == NULL || out_desc == NULL)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "module and out_desc must not be NULL");
  *out_desc = module->desc;
  return KILN_OK;
}

/* ---- thread pool ----
 * One job at a time (the entry function is sequential; each node may split its work into
 * at most one chunk per thread). Between jobs the workers spin briefly before sleeping on a
 * condition variable, and the caller spins for completion: a model runs hundreds of
 * parallel regions per inference, and a futex wake-up per region costs more than many of
 * them take.
 *
 * Chunks are claimed, not assigned: the caller runs chunk 0, and every other chunk goes to
 * whoever claims it first, the caller included once its own is done. A worker the OS has
 * not scheduled (another process has the core) then delays nothing: the caller does its
 * share. With chunks given to fixed threads, each of a model's hundreds of regions waited
 * for that worker's next time slice (BERT-tiny at 2 threads on a busy 2-core machine: 50 ms
 * instead of 0.3). A claim is a compare-and-swap of one word holding the job's generation,
 * its chunk count and the next chunk, so a worker that wakes late for an old job claims
 * nothing of a new one; a job's fields stay put until its every chunk is done. Chunk
 * boundaries depend only on n and the chunk count, so results do not depend on who ran
 * which chunk. */

#if defined(__x86_64__) || defined(__i386__)
#define KILN_CPU_RELAX() __builtin_ia32_pause()
#else
#define KILN_CPU_RELAX() ((void)0)
#endif

enum { KILN_SPIN_ITERATIONS = 1 << 14, KILN_MAX_CHUNKS = 0xffff };

/* The job word: generation (32 bits) | chunk count (16) | next chunk to claim (16). */
#define KILN_JOB_GEN(word) ((uint32_t)((word) >> 32))
#define KILN_JOB_CHUNKS(word) ((int)(((word) >> 16) & 0xffff))
#define KILN_JOB_NEXT(word) ((int)((word) & 0xffff))

typedef struct pool {
  pthread_mutex_t mutex;
  pthread_cond_t work_ready;
  pthread_t* threads;
  int num_workers;
  atomic_int stop;
  atomic_int sleepers;
  /* the current job: n, fn and ctx are written before the job word is */
  atomic_uint_fast64_t job;
  atomic_int done; /* chunks of the current job finished */
  int64_t n;
  kiln_range_fn fn;
  void* ctx;
} pool;

/* Claims and runs chunks of job generation `gen` until none is left. */
static void claim_chunks(pool* p, uint32_t gen) {
  uint_fast64_t word = atomic_load(&p->job);
  while (KILN_JOB_GEN(word) == gen && KILN_JOB_NEXT(word) < KILN_JOB_CHUNKS(word)) {
    if (!atomic_compare_exchange_weak(&p->job, &word, word + 1)) continue; /* word reloaded */
    const int chunk = KILN_JOB_NEXT(word), chunks = KILN_JOB_CHUNKS(word);
    const int64_t begin = p->n * chunk / chunks, end = p->n * (chunk + 1) / chunks;
    if (begin < end) p->fn(p->ctx, begin, end);
    atomic_fetch_add(&p->done, 1);
    word = atomic_load(&p->job);
  }
}

static void* worker_main(void* raw) {
  pool* p = raw;
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen;
    int spins = 0;
    while ((gen = KILN_JOB_GEN(atomic_load(&p->job))) == seen && !atomic_load(&p->stop)) {
      if (++spins < KILN_SPIN_ITERATIONS) {
        KILN_CPU_RELAX();
        continue;
      }
      /* Sleep. The caller writes the job word, then looks at sleepers; we count ourselves
       * in, then look at the job word: one of us sees the other (sequentially consistent). */
      pthread_mutex_lock(&p->mutex);
      atomic_fetch_add(&p->sleepers, 1);
      while (KILN_JOB_GEN(atomic_load(&p->job)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->work_ready, &p->mutex);
      atomic_fetch_sub(&p->sleepers, 1);
      pthread_mutex_unlock(&p->mutex);
      spins = 0;
    }
    if (atomic_load(&p->stop)) break;
    seen = gen;
    claim_chunks(p, gen);
  }
  return NULL;
}

static void pool_parallel_for(void* raw, int64_t n, int64_t min_chunk, kiln_range_fn fn, void* ctx) {
  pool* p = raw;
  int64_t chunks = p->num_workers + 1;
  if (min_chunk < 1) min_chunk = 1;
  if (n / min_chunk < chunks) chunks = n / min_chunk > 0 ? n / min_chunk : 1;
  if (chunks > KILN_MAX_CHUNKS) chunks = KILN_MAX_CHUNKS;
  if (chunks <= 1 || p->num_workers == 0) {
    fn(ctx, 0, n);
    return;
  }
  /* Every chunk of the previous job is done (we waited), so no one reads these now. */
  p->n = n;
  p->fn = fn;
  p->ctx = ctx;
  atomic_store(&p->done, 0);
  const uint32_t gen = KILN_JOB_GEN(atomic_load(&p->job)) + 1;
  /* Chunk 0 is the caller's: the word starts at next = 1. */
  atomic_store(&p->job, ((uint_fast64_t)gen << 32) | ((uint_fast64_t)chunks << 16) | 1u);
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mutex);
    pthread_cond_broadcast(&p->work_ready);
    pthread_mutex_unlock(&p->mutex);
  }
  const int64_t end0 = n / chunks;
  if (end0 > 0) fn(ctx, 0, end0);
  atomic_fetch_add(&p->done, 1);
  claim_chunks(p, gen);
  for (int spins = 0; atomic_load(&p->done) < chunks; ++spins) {
    if (spins < KILN_SPIN_ITERATIONS) {
      KILN_CPU_RELAX();
    } else {
      sched_yield();
    }
  }
}

static void pool_destroy(pool* p) {
  if (p == NULL) return;
  pthread_mutex_lock(&p->mutex);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->work_ready);
  pthread_mutex_unlock(&p->mutex);
  for (int i = 0; i < p->num_workers; ++i) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mutex);
  pthread_cond_destroy(&p->work_ready);
  free(p->threads);
  free(p);
}

static pool* pool_create(int num_workers) {
  pool* p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  pthread_mutex_init(&p->mutex, NULL);
  pthread_cond_init(&p->work_ready, NULL);
  p->threads = calloc((size_t)(num_workers > 0 ? num_workers : 1), sizeof(pthread_t));
  if (p->threads == NULL) {
    pool_destroy(p);
    return NULL;
  }
  for (int i = 0; i < num_workers; ++i) {
    if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) break;
    p->num_workers = i + 1;
  }
  return p;
}

/* ---- buffers for run-time shapes ----
 * Blocks in power-of-two size classes, each with a 64-byte header holding its class and
 * the next block ever made, kept on per-class free lists for the session's life: after the
 * first run at a shape, later runs take every buffer from the lists without calling malloc.
 * The session frees every block it made, also those a failed run never gave back. */
enum { KILN_SIZE_CLASSES = 48, KILN_BLOCK_HEADER = 64 };
typedef struct block_header {
  int size_class;
  void* next_made;
} block_header;
_Static_assert(sizeof(block_header) <= KILN_BLOCK_HEADER, "a block's header fits before its data");
typedef struct planned_slot {
  void* data;
  int64_t capacity;
} planned_slot;
typedef struct arena {
  void* free_lists[KILN_SIZE_CLASSES];
  void* made; /* every block, through block_header.next_made */
  /* The slots of the artifact's memory plan (exec->slot), grown on demand. */
  planned_slot* slots;
  int32_t num_slots;
  int64_t pool_bytes, slot_bytes, allocations; /* kiln_session_memory_stats */
} arena;

static void* arena_alloc(void* raw, int64_t bytes) {
  arena* a = raw;
  int size_class = 6; /* 64 bytes */
  while (size_class < KILN_SIZE_CLASSES && ((int64_t)1 << size_class) < bytes) ++size_class;
  if (size_class >= KILN_SIZE_CLASSES) return NULL;
  char* block = a->free_lists[size_class];
  if (block != NULL) {
    a->free_lists[size_class] = *(void**)(block + KILN_BLOCK_HEADER);
    return block + KILN_BLOCK_HEADER;
  }
  block = aligned_alloc(64, KILN_BLOCK_HEADER + ((size_t)1 << size_class));
  if (block == NULL) return NULL;
  a->pool_bytes += (int64_t)1 << size_class;
  a->allocations += 1;
  ((block_header*)block)->size_class = size_class;
  ((block_header*)block)->next_made = a->made;
  a->made = block;
  return block + KILN_BLOCK_HEADER;
}

static void arena_release(void* raw, void* data) {
  if (data == NULL) return;
  arena* a = raw;
  char* block = (char*)data - KILN_BLOCK_HEADER;
  const int size_class = ((block_header*)block)->size_class;
  *(void**)data = a->free_lists[size_class];
  a->free_lists[size_class] = block;
}

/* A slot grows to the size asked, rounded up to 4 KiB; its old contents are dead by then
 * (the plan gives a slot to a new buffer only after the last reader of the one before). */
static void* arena_slot(void* raw, int32_t slot, int64_t bytes) {
  arena* a = raw;
  if (slot < 0) return NULL;
  if (slot >= a->num_slots) {
    int32_t grown = a->num_slots > 0 ? a->num_slots : 16;
    while (grown <= slot) grown *= 2;
    planned_slot* slots = realloc(a->slots, (size_t)grown * sizeof(planned_slot));
    if (slots == NULL) return NULL;
    memset(slots + a->num_slots, 0, (size_t)(grown - a->num_slots) * sizeof(planned_slot));
    a->slots = slots;
    a->num_slots = grown;
    a->allocations += 1;
  }
  planned_slot* s = &a->slots[slot];
  if (s->capacity < bytes) {
    const int64_t rounded = (bytes + 4095) & ~(int64_t)4095;
    free(s->data);
    a->slot_bytes -= s->capacity;
    s->data = aligned_alloc(64, (size_t)rounded);
    s->capacity = s->data != NULL ? rounded : 0;
    a->slot_bytes += s->capacity;
    a->allocations += 1;
  }
  return s->data;
}

static void arena_destroy(arena* a) {
  for (int32_t i = 0; i < a->num_slots; ++i) free(a->slots[i].data);
  free(a->slots);
  for (char* block = a->made; block != NULL;) {
    char* next = ((block_header*)block)->next_made;
    free(block);
    block = next;
  }
}

/* ---- the text of string outputs ----
 * Chunks from malloc, bump-allocated; a run's texts stay until the session's next run,
 * which frees every chunk but the largest and starts that one over. */
typedef struct text_chunk {
  struct text_chunk* next;
  size_t size, used;
} text_chunk;
typedef struct text_arena {
  text_chunk* chunks; /* newest first */
} text_arena;

static char* text_alloc(void* raw, int64_t bytes) {
  text_arena* a = raw;
  if (bytes < 0) return NULL;
  const size_t need = ((size_t)bytes + 15) / 16 * 16;
  text_chunk* c = a->chunks;
  if (c == NULL || c->size - c->used < need) {
    size_t size = c != NULL && c->size * 2 > need ? c->size * 2 : need;
    if (size < 4096) size = 4096;
    c = malloc(sizeof(text_chunk) + size);
    if (c == NULL) return NULL;
    c->next = a->chunks;
    c->size = size;
    c->used = 0;
    a->chunks = c;
  }
  char* text = (char*)(c + 1) + c->used;
  c->used += need;
  return text;
}

static void text_reset(text_arena* a) {
  text_chunk* keep = NULL;
  for (text_chunk* c = a->chunks; c != NULL;) {
    text_chunk* next = c->next;
    if (keep == NULL || c->size > keep->size) {
      free(keep);
      keep = c;
    } else {
      free(c);
    }
    c = next;
  }
  if (keep != NULL) {
    keep->next = NULL;
    keep->used = 0;
  }
  a->chunks = keep;
}

static void text_destroy(text_arena* a) {
  for (text_chunk* c = a->chunks; c != NULL;) {
    text_chunk* next = c->next;
    free(c);
    c = next;
  }
  a->chunks = NULL;
}

/* ---- sessions ---- */

struct kiln_session {
  const kiln_module* module;
  void* workspace;
  pool* threads;
  int num_threads;
  kiln_exec_hooks hooks;
  arena buffers;
  text_arena texts;
  /* kiln_session_run_shaped's outputs of the last run (data and dims), released at the next */
  void** held;
  int32_t num_held;
};

kiln_status kiln_session_create(const kiln_module* module, const kiln_session_options* options,
                                kiln_session** out_session) {
  if (module == NULL || out_session == NULL)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "module and out_session must not be NULL");
  int threads = 0;
  if (options != NULL) {
    if (options->struct_size < sizeof(kiln_session_options))
      return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_session_options.struct_size is %u, expected %zu",
                  options->struct_size, sizeof(kiln_session_options));
    threads = options->num_threads;
  }
  if (threads < 0) return fail(KILN_ERROR_INVALID_ARGUMENT, "num_threads must be >= 0, got %d", threads);
  if (threads == 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    threads = online > 0 ? (int)online : 1;
  }
  kiln_session* session = calloc(1, sizeof(*session));
  if (session == NULL) return fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory");
  session->module = module;
  session->num_threads = threads;
  uint64_t bytes = module->desc->workspace_bytes;
  if (bytes > 0) {
    size_t rounded = (size_t)((bytes + 63) / 64 * 64);
    session->workspace = aligned_alloc(64, rounded);
    if (session->workspace == NULL) {
      free(session);
      return fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate %llu workspace bytes", (unsigned long long)bytes);
    }
  }
  if (threads > 1) {
    session->threads = pool_create(threads - 1);
    if (session->threads == NULL) {
      free(session->workspace);
      free(session);
      return fail(KILN_ERROR_OUT_OF_MEMORY, "cannot start %d threads", threads - 1);
    }
    session->hooks.pool = session->threads;
    session->hooks.parallel_for = pool_parallel_for;
  }
  session->hooks.arena = &session->buffers;
  session->hooks.alloc = arena_alloc;
  session->hooks.release = arena_release;
  session->hooks.slot = arena_slot;
  session->hooks.text_arena = &session->texts;
  session->hooks.alloc_text = text_alloc;
  session->held = calloc((size_t)module->desc->num_outputs * 2 + 1, sizeof(void*));
  if (session->held == NULL) {
    kiln_session_destroy(session);
    return fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory");
  }
  *out_session = session;
  return KILN_OK;
}

/* The entry's result: 0, or (node + 1) << 8 | kernel error code. */
static kiln_status entry_status(const kiln_session* session, int32_t rc) {
  if (rc == 0) return KILN_OK;
  const int node = (rc >> 8) - 1, code = rc & 0xff;
  const char* what = code == 2   ? "an index input is out of range"
                     : code == 1 ? "unsupported element type"
                     : code == 5 ? "its input shapes do not agree"
                     : code == 6 ? "out of memory for a buffer"
                     : code == 7 ? "an input value cannot be converted (a string that is no number)"
                                 : "kernel error";
  const kiln_module_desc* desc = session->module->desc;
  const char* name = node >= 0 && node < desc->num_kernels ? desc->kernel_names[node] : "?";
  return fail(code == 6 ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_RUNTIME,
              "node %d (%s) of the compiled graph failed: %s (code %d)", node, name, what, code);
}

static kiln_status run_with(kiln_session* session, const void* const* inputs, void* const* outputs,
                            const kiln_exec_hooks* hooks) {
  if (session == NULL) return fail(KILN_ERROR_INVALID_ARGUMENT, "session must not be NULL");
  const kiln_module_desc* desc = session->module->desc;
  for (int32_t i = 0; i < desc->num_inputs; ++i) {
    if (inputs == NULL || inputs[i] == NULL)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "input %d ('%s') is NULL", i, desc->inputs[i].name);
  }
  for (int32_t i = 0; i < desc->num_outputs; ++i) {
    if (outputs == NULL || outputs[i] == NULL)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "output %d ('%s') is NULL", i, desc->outputs[i].name);
  }
  if (desc->entry == NULL)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "this artifact has shapes known only at run time: run it with kiln_session_run_shaped");
  text_reset(&session->texts);
  return entry_status(session, desc->entry((void* const*)inputs, outputs, session->workspace, hooks));
}

kiln_status kiln_session_run(kiln_session* session, const void* const* inputs, void* const* outputs) {
  /* The hooks always: string kernels take their text from them (no pool: serial loops). */
  return run_with(session, inputs, outputs, session != NULL ? &session->hooks : NULL);
}

/* A sequence input: its length and each element's dtype and dims. */
static kiln_status check_sequence_input(int32_t i, const kiln_tensor_info* info, const kiln_tensor* t) {
  if (t->dtype != KILN_DTYPE_SEQUENCE || t->rank != 1 || t->dims == NULL || t->dims[0] < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "input %d ('%s'): expected a sequence (dtype %d, rank 1, a length)", i,
                info->name, KILN_DTYPE_SEQUENCE);
  const kiln_tensor* elements = t->data;
  if (elements == NULL && t->dims[0] > 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "input %d ('%s') has no elements", i, info->name);
  for (int64_t k = 0; k < t->dims[0]; ++k) {
    if (elements[k].dtype != info->element_dtype || (elements[k].rank > 0 && elements[k].dims == NULL))
      return fail(KILN_ERROR_INVALID_ARGUMENT, "input %d ('%s'): element %lld is not a tensor of dtype %d", i,
                  info->name, (long long)k, info->element_dtype);
  }
  return KILN_OK;
}

/* Checks inputs[i] against the descriptor: dtype, rank, and every dim it fixes. */
static kiln_status check_shaped_inputs(const kiln_module_desc* desc, const kiln_tensor* inputs) {
  for (int32_t i = 0; i < desc->num_inputs; ++i) {
    const kiln_tensor_info* info = &desc->inputs[i];
    const kiln_tensor* t = &inputs[i];
    const int optional = info->kind == KILN_VALUE_OPTIONAL || info->kind == KILN_VALUE_OPTIONAL_SEQUENCE;
    if (optional && t->data == NULL) continue; /* empty */
    if (info->kind == KILN_VALUE_SEQUENCE || info->kind == KILN_VALUE_OPTIONAL_SEQUENCE) {
      kiln_status status = check_sequence_input(i, info, t);
      if (status != KILN_OK) return status;
      continue;
    }
    if (t->dtype != info->dtype || t->rank != info->rank)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "input %d ('%s'): expected dtype %d and rank %d, got dtype %d rank %d",
                  i, info->name, info->dtype, info->rank, t->dtype, t->rank);
    for (int32_t d = 0; d < info->rank; ++d) {
      if (t->dims == NULL || t->dims[d] < 0 || (info->dims[d] >= 0 && t->dims[d] != info->dims[d]))
        return fail(KILN_ERROR_INVALID_ARGUMENT, "input %d ('%s'): dim %d is %lld, the artifact takes %lld", i,
                    info->name, d, t->dims ? (long long)t->dims[d] : -1LL, (long long)info->dims[d]);
    }
    int64_t elements = 1;
    for (int32_t d = 0; d < t->rank; ++d) elements *= t->dims[d];
    if (t->data == NULL && elements > 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "input %d ('%s') has no data", i, info->name);
  }
  return KILN_OK;
}

/* A static artifact run through the shaped API: its outputs in session buffers. */
static kiln_status run_static_shaped(kiln_session* session, const kiln_tensor* inputs, kiln_tensor* outputs,
                                     const kiln_exec_hooks* hooks) {
  const kiln_module_desc* desc = session->module->desc;
  const void* in[desc->num_inputs > 0 ? desc->num_inputs : 1];
  void* out[desc->num_outputs > 0 ? desc->num_outputs : 1];
  /* An empty input may come without storage; the static entry takes none as NULL. */
  static char empty;
  for (int32_t i = 0; i < desc->num_inputs; ++i) in[i] = inputs[i].data != NULL ? inputs[i].data : &empty;
  for (int32_t i = 0; i < desc->num_outputs; ++i) {
    const kiln_tensor_info* info = &desc->outputs[i];
    int64_t bytes = (int64_t)kiln_dtype_size(info->dtype);
    for (int32_t d = 0; d < info->rank; ++d) bytes *= info->dims[d];
    out[i] = arena_alloc(&session->buffers, bytes > 0 ? bytes : 1);
    if (out[i] == NULL) return fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate output %d", i);
    session->held[session->num_held++] = out[i];
    outputs[i] = (kiln_tensor){out[i], info->dims, info->rank, info->dtype};
  }
  return run_with(session, in, out, hooks);
}

/* static_hooks: what a static artifact's entry gets (NULL: serial); a dynamic entry always
 * gets a full set, since it allocates through them. */
static kiln_status run_shaped_with(kiln_session* session, const kiln_tensor* inputs, kiln_tensor* outputs,
                                   const kiln_exec_hooks* static_hooks, const kiln_exec_hooks* dynamic_hooks) {
  if (session == NULL || (inputs == NULL && session->module->desc->num_inputs > 0) || outputs == NULL)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "session, inputs and outputs must not be NULL");
  const kiln_module_desc* desc = session->module->desc;
  kiln_status status = check_shaped_inputs(desc, inputs);
  if (status != KILN_OK) return status;
  for (int32_t i = 0; i < session->num_held; ++i) arena_release(&session->buffers, session->held[i]);
  session->num_held = 0;
  if (desc->dynamic_entry == NULL) return run_static_shaped(session, inputs, outputs, static_hooks);
  for (int32_t i = 0; i < desc->num_outputs; ++i) outputs[i] = (kiln_tensor){NULL, NULL, 0, 0};
  text_reset(&session->texts);
  status = entry_status(session, desc->dynamic_entry(inputs, outputs, dynamic_hooks));
  for (int32_t i = 0; i < desc->num_outputs; ++i) {
    if (outputs[i].data != NULL) session->held[session->num_held++] = outputs[i].data;
    if (outputs[i].dims != NULL) session->held[session->num_held++] = (void*)outputs[i].dims;
  }
  return status;
}

/* Profiling: the time between consecutive kernel_done calls is the kernel's. */
typedef struct profile_state {
  double* kernel_ms;
  struct timespec last;
} profile_state;

static void profile_kernel_done(void* ctx, int32_t kernel_index) {
  profile_state* state = (profile_state*)ctx;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  state->kernel_ms[kernel_index] +=
      (double)(now.tv_sec - state->last.tv_sec) * 1e3 + (double)(now.tv_nsec - state->last.tv_nsec) * 1e-6;
  state->last = now;
}

kiln_status kiln_session_run_profiled(kiln_session* session, const void* const* inputs, void* const* outputs,
                                      double* kernel_ms) {
  if (session == NULL || kernel_ms == NULL)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "session and kernel_ms must not be NULL");
  profile_state state;
  state.kernel_ms = kernel_ms;
  kiln_exec_hooks hooks = session->hooks; /* pool may be NULL: kernels then run serially */
  hooks.kernel_done = profile_kernel_done;
  hooks.profile_ctx = &state;
  clock_gettime(CLOCK_MONOTONIC, &state.last);
  return run_with(session, inputs, outputs, &hooks);
}

kiln_status kiln_session_run_shaped(kiln_session* session, const kiln_tensor* inputs, kiln_tensor* outputs) {
  if (session == NULL) return fail(KILN_ERROR_INVALID_ARGUMENT, "session must not be NULL");
  return run_shaped_with(session, inputs, outputs, &session->hooks, &session->hooks);
}

kiln_status kiln_session_run_shaped_profiled(kiln_session* session, const kiln_tensor* inputs, kiln_tensor* outputs,
                                             double* kernel_ms) {
  if (session == NULL || kernel_ms == NULL)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "session and kernel_ms must not be NULL");
  profile_state state;
  state.kernel_ms = kernel_ms;
  kiln_exec_hooks hooks = session->hooks;
  hooks.kernel_done = profile_kernel_done;
  hooks.profile_ctx = &state;
  clock_gettime(CLOCK_MONOTONIC, &state.last);
  return run_shaped_with(session, inputs, outputs, &hooks, &hooks);
}

kiln_status kiln_session_memory_stats(const kiln_session* session, kiln_memory_stats* stats) {
  if (session == NULL || stats == NULL || stats->struct_size < sizeof(kiln_memory_stats))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "session and stats (with struct_size set) must not be NULL");
  stats->planned_bytes = session->buffers.slot_bytes;
  stats->pool_bytes = session->buffers.pool_bytes;
  stats->allocations = session->buffers.allocations;
  return KILN_OK;
}

int32_t kiln_session_num_threads(const kiln_session* session) { return session ? session->num_threads : 0; }

void kiln_session_destroy(kiln_session* session) {
  if (session == NULL) return;
  pool_destroy(session->threads);
  if (session->held != NULL) {
    for (int32_t i = 0; i < session->num_held; ++i) arena_release(&session->buffers, session->held[i]);
  }
  arena_destroy(&session->buffers);
  text_destroy(&session->texts);
  free(session->held);
  free(session->workspace);
  free(session);
}
