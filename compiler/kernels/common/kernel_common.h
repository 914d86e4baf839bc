// Helpers shared by the kernel library: element-type dispatch and index arithmetic.
// Freestanding: no standard library beyond <math.h>, <stdint.h>, <string.h>.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>  // header-only: compile-time traits, nothing to link

#include "kernel_abi.h"
#include "kiln/kernels/conv.h"
#include "kiln/kernels/elementwise.h"
#include "kiln/kernels/gemm.h"
#include "kiln/kernels/linalg.h"
#include "kiln/kernels/loss.h"
#include "kiln/kernels/lowbit.h"
#include "kiln/kernels/movement.h"
#include "kiln/kernels/norm.h"
#include "kiln/kernels/pool.h"
#include "kiln/kernels/quant.h"
#include "kiln/kernels/random.h"
#include "kiln/kernels/reduce.h"
#include "kiln/kernels/resize.h"
#include "kiln/kernels/rnn.h"
#include "kiln/kernels/sampling.h"
#include "kiln/kernels/sequence.h"
#include "kiln/kernels/shape.h"
#include "kiln/kernels/signal.h"
#include "kiln/kernels/sparse.h"
#include "kiln/kernels/spatial.h"
#include "kiln/kernels/strings.h"

// Binds `name` to the call's parameter struct P (kiln/kernels/<family>.h), or returns
// KILN_KERR_PARAMS when the call carries another struct. In artifacts the size is a
// constant and the check folds away.
#define KILN_PARAMS(P, name, call)                                     \
  if ((call)->params == nullptr || (call)->params_size != sizeof(P)) { \
    return KILN_KERR_PARAMS;                                           \
  }                                                                    \
  const P& name = *static_cast<const P*>((call)->params)

#define KILN_KERNEL(name) extern "C" int32_t kiln_k_##name(const kiln_kcall* call)

// Typed kernels: one exported function per element type (kiln_k_<name>_f32, ...), which
// is what codegen calls, so an artifact links only the instantiations it uses; plus an
// untyped kiln_k_<name> that dispatches on `dtype_expr` for the interpreter. Both run
// Impl::Run<T> through WithParams, which binds the parameter struct kernel_list.inc names
// for the kernel.
#define KILN_TYPED_ENTRY(name, Impl, suffix, T)                                               \
  extern "C" int32_t kiln_k_##name##_##suffix(const kiln_kcall* call) {                       \
    return kiln_kernels::WithParams<kiln_kernels::kernel::name, Impl>::template Run<T>(call); \
  }
#define KILN_NUMERIC_KERNEL(name, Impl, dtype_expr)                           \
  KILN_TYPED_ENTRY(name, Impl, f32, float)                                    \
  KILN_TYPED_ENTRY(name, Impl, f64, double)                                   \
  KILN_TYPED_ENTRY(name, Impl, i8, int8_t)                                    \
  KILN_TYPED_ENTRY(name, Impl, u8, uint8_t)                                   \
  KILN_TYPED_ENTRY(name, Impl, i16, int16_t)                                  \
  KILN_TYPED_ENTRY(name, Impl, u16, uint16_t)                                 \
  KILN_TYPED_ENTRY(name, Impl, i32, int32_t)                                  \
  KILN_TYPED_ENTRY(name, Impl, u32, uint32_t)                                 \
  KILN_TYPED_ENTRY(name, Impl, i64, int64_t)                                  \
  KILN_TYPED_ENTRY(name, Impl, u64, uint64_t)                                 \
  KILN_TYPED_ENTRY(name, Impl, bool, bool)                                    \
  KILN_KERNEL(name) {                                                         \
    using Bound = kiln_kernels::WithParams<kiln_kernels::kernel::name, Impl>; \
    KILN_DISPATCH_NUMERIC(call->dtype_expr, Bound, call);                     \
  }
#define KILN_FLOAT_KERNEL(name, Impl, dtype_expr)                             \
  KILN_TYPED_ENTRY(name, Impl, f32, float)                                    \
  KILN_TYPED_ENTRY(name, Impl, f64, double)                                   \
  KILN_KERNEL(name) {                                                         \
    using Bound = kiln_kernels::WithParams<kiln_kernels::kernel::name, Impl>; \
    KILN_DISPATCH_FLOAT(call->dtype_expr, Bound, call);                       \
  }
// Kernels with an f32 body only (Impl::RunF32: Winograd, the blocked convolution),
// exported as KILN_FLOAT_KERNEL exports them; f64 answers KILN_KERR_DTYPE.
#define KILN_F32_KERNEL(name, Impl, dtype_expr) KILN_FLOAT_KERNEL(name, kiln_kernels::F32Only<Impl>, dtype_expr)

// One tag per kernel of kernel_list.inc, as compiler/ops has them: kernel::pad::Params is
// the struct kiln_k_pad reads (void for none).
namespace kiln_kernels::kernel {
#define NONE void
#define X(name, typing, source, params) \
  struct name {                         \
    using Params = params;              \
  };
#include "kernel_list.inc"
#undef X
#undef NONE
}  // namespace kiln_kernels::kernel

namespace kiln_kernels {

// The reference interpreter's build (KILN_REFERENCE_KERNELS) keeps every op on its plain,
// obviously-correct loop; artifacts take the fast paths (the blocked GEMM core, the
// pooling, depthwise and softmax paths, fast exp). Comparing an artifact with the
// interpreter then checks those paths against code that shares nothing with them.
#ifdef KILN_REFERENCE_KERNELS
inline constexpr bool kFastKernels = false;
#else
inline constexpr bool kFastKernels = true;
#endif

// Whether the target has 16-lane f32 vectors and 32 vector registers (AVX-512F): the
// GEMM core then takes its 12 x 32 tile instead of 6 x 16. Codegen defines
// kiln_wide_vectors in every artifact as a constant for the target it compiles for, so the
// branch folds away and only one tile's code remains; the interpreter's build never asks.
#ifdef KILN_REFERENCE_KERNELS
inline bool WideVectors() { return false; }
#else
extern "C" const int32_t kiln_wide_vectors;
inline bool WideVectors() { return kiln_wide_vectors != 0; }
#endif

// The even and the odd lanes of the concatenation of a and b (L lanes each, 8, 16 or 32;
// any element type): a stride-2 row split in two (pooling, conv stems and im2col rows).
// kFirst 0 takes lanes 0, 2, 4, ..., 1 takes lanes 1, 3, 5, ....
template <int kFirst, typename V>
__attribute__((always_inline)) inline V EveryOtherLane(V a, V b) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(a[0]));
  constexpr int F = kFirst;
  if constexpr (L == 32) {
    return __builtin_shufflevector(a, b, F, F + 2, F + 4, F + 6, F + 8, F + 10, F + 12, F + 14, F + 16, F + 18, F + 20,
                                   F + 22, F + 24, F + 26, F + 28, F + 30, F + 32, F + 34, F + 36, F + 38, F + 40,
                                   F + 42, F + 44, F + 46, F + 48, F + 50, F + 52, F + 54, F + 56, F + 58, F + 60,
                                   F + 62);
  } else if constexpr (L == 16) {
    return __builtin_shufflevector(a, b, F, F + 2, F + 4, F + 6, F + 8, F + 10, F + 12, F + 14, F + 16, F + 18, F + 20,
                                   F + 22, F + 24, F + 26, F + 28, F + 30);
  } else {
    return __builtin_shufflevector(a, b, F, F + 2, F + 4, F + 6, F + 8, F + 10, F + 12, F + 14);
  }
}
template <typename V>
__attribute__((always_inline)) inline V EvenLanes(V a, V b) {
  return EveryOtherLane<0>(a, b);
}
template <typename V>
__attribute__((always_inline)) inline V OddLanes(V a, V b) {
  return EveryOtherLane<1>(a, b);
}

// The int8 kernels' dot product (vpdpbusd: four u8 x s8 products summed into each i32
// lane): on 512-bit vectors where the target has AVX-512 VNNI, on two 256-bit halves where
// it has AVX-VNNI (VEX-encoded, as on CPUs without AVX-512), plain i32 arithmetic
// otherwise. Set by codegen like kiln_wide_vectors.
enum Int8Dot : int32_t { kInt8DotPlain = 0, kInt8DotAvx512Vnni = 1, kInt8DotAvxVnni = 2 };
#ifdef KILN_REFERENCE_KERNELS
inline int32_t Int8DotProduct() { return kInt8DotPlain; }
#else
extern "C" const int32_t kiln_int8_dot;
inline int32_t Int8DotProduct() { return kiln_int8_dot; }
#endif

// Whether the target has AVX-512 VBMI's byte permutes (vpermt2b: any 64 bytes of two
// registers' 128): the int8 conv stem gathers its columns with them. Set by codegen like
// kiln_wide_vectors.
#ifdef KILN_REFERENCE_KERNELS
inline bool BytePermute() { return false; }
#else
extern "C" const int32_t kiln_byte_permute;
inline bool BytePermute() { return kiln_byte_permute != 0; }
#endif

enum DTypeId : int32_t {
  kF32 = 1,
  kU8 = 2,
  kI8 = 3,
  kU16 = 4,
  kI16 = 5,
  kI32 = 6,
  kI64 = 7,
  kString = 8,
  kBool = 9,
  kF16 = 10,
  kF64 = 11,
  kU32 = 12,
  kU64 = 13,
  kBF16 = 16,
  kF8E4M3FN = 17,  // float8 and 4-bit integers: one element per byte (kiln/kernels/float8.h)
  kF8E4M3FNUZ = 18,
  kF8E5M2 = 19,
  kF8E5M2FNUZ = 20,
  kU4 = 21,
  kI4 = 22,  // sign-extended
};

// A kernel's Run with its parameter struct bound: K::Params, the struct kernel_list.inc
// names for kernel K, is checked against the call (KILN_KERR_PARAMS for another) and passed
// as Impl::Run<T>(call, params); a kernel without one runs as Impl::Run<T>(call). One check,
// here, for every typed kernel, and a Run that reads another struct does not compile.
template <typename K, typename Impl>
struct WithParams {
  template <typename T>
  __attribute__((always_inline)) static int32_t Run(const kiln_kcall* call) {
    using P = typename K::Params;
    if constexpr (std::is_void_v<P>) {
      return Impl::template Run<T>(call);
    } else {
      KILN_PARAMS(P, params, call);
      return Impl::template Run<T>(call, params);
    }
  }
};

// KILN_F32_KERNEL's Run: Impl::RunF32 for f32, KILN_KERR_DTYPE for any other type.
template <typename Impl>
struct F32Only {
  template <typename T, typename... Params>
  __attribute__((always_inline)) static int32_t Run(const kiln_kcall* call, const Params&... params) {
    if constexpr (std::is_same_v<T, float>) {
      return Impl::RunF32(call, params...);
    } else {
      return KILN_KERR_DTYPE;
    }
  }
};

// Sum over i < n of f(x[i]) in f32 with 16 partial sums, so the loop vectorizes without
// reassociating (the library builds without fast-math); the tail, then the partial sums
// in order, are added last. The row reductions' (ReduceMean, LayerNorm) shared loop.
template <typename F>
inline float SumRow16(const float* x, int64_t n, F f) {
  float lanes[16] = {};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] += f(x[k + l]);
  }
  float sum = 0.f;
  for (; k < n; ++k) sum += f(x[k]);
  for (int l = 0; l < 16; ++l) sum += lanes[l];
  return sum;
}

// Set-up helpers run once per call, before a kernel's loops: always inlined, so that in
// artifacts the extents they compute fold to the constants the shapes are.
#define KILN_ALWAYS_INLINE __attribute__((always_inline)) inline

// A tensor seen as [outer, len, inner], as the axis kernels (Concat, Gather, ArgMax,
// Softmax, ...) walk it.
struct AxisExtents {
  int64_t outer, len, inner;
};

// t as [product of dims before `axis`, dims[axis], product of dims after it].
KILN_ALWAYS_INLINE AxisExtents SplitAtAxis(const kiln_ktensor& t, int64_t axis) {
  AxisExtents e{1, t.dims[axis], 1};
  for (int64_t i = 0; i < axis; ++i) e.outer *= t.dims[i];
  for (int32_t i = static_cast<int32_t>(axis) + 1; i < t.rank; ++i) e.inner *= t.dims[i];
  return e;
}

// The axis kernels' walk over a tensor as [outer, len, inner], one line along the axis at a
// time: f(line, first) for each of the outer * inner lines, with line = o * inner + j its
// index in the tensor without the axis and first = o * len * inner + j the offset of its
// first element; the line's elements lie at first + k * inner, k < len.
template <typename F>
KILN_ALWAYS_INLINE void ForEachAxisLine(const AxisExtents& e, F f) {
  for (int64_t o = 0; o < e.outer; ++o) {
    for (int64_t j = 0; j < e.inner; ++j) f(o * e.inner + j, o * e.len * e.inner + j);
  }
}

// t coerced to 2-D at `axis` (LayerNormalization, Softmax before opset 13): rows of the
// dims before `axis`, each of the product of the dims from `axis` on; inner is 1.
KILN_ALWAYS_INLINE AxisExtents FlattenAtAxis(const kiln_ktensor& t, int64_t axis) {
  AxisExtents e{1, 1, 1};
  for (int64_t i = 0; i < axis; ++i) e.outer *= t.dims[i];
  for (int32_t i = static_cast<int32_t>(axis); i < t.rank; ++i) e.len *= t.dims[i];
  return e;
}

// A call's tensor data, typed.
template <typename T>
KILN_ALWAYS_INLINE const T* InputData(const kiln_kcall* call, int32_t i) {
  return static_cast<const T*>(call->inputs[i].data);
}
template <typename T>
KILN_ALWAYS_INLINE T* OutputData(const kiln_kcall* call, int32_t i = 0) {
  return static_cast<T*>(call->outputs[i].data);
}
// An optional input: nullptr when the call has no input i.
template <typename T>
KILN_ALWAYS_INLINE const T* OptionalInputData(const kiln_kcall* call, int32_t i) {
  return call->num_inputs > i ? static_cast<const T*>(call->inputs[i].data) : nullptr;
}

inline int64_t Numel(const kiln_ktensor& t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t.rank; ++i) n *= t.dims[i];
  return n;
}

inline int64_t ElementSize(int32_t dtype) {
  switch (dtype) {
    case kF64:
    case kI64:
    case kU64:
    case kString: return 8;  // a const char* (kernel_abi.h)
    case kF32:
    case kI32:
    case kU32: return 4;
    case kF16:
    case kBF16:
    case kI16:
    case kU16: return 2;
    default: return 1;
  }
}

// Calls F::template Run<T>(args...) for the element type; all numeric types and bool.
#define KILN_DISPATCH_NUMERIC(dtype, F, ...)                                \
  switch (dtype) {                                                          \
    case kiln_kernels::kF32: return F::template Run<float>(__VA_ARGS__);    \
    case kiln_kernels::kF64: return F::template Run<double>(__VA_ARGS__);   \
    case kiln_kernels::kI8: return F::template Run<int8_t>(__VA_ARGS__);    \
    case kiln_kernels::kU8: return F::template Run<uint8_t>(__VA_ARGS__);   \
    case kiln_kernels::kI16: return F::template Run<int16_t>(__VA_ARGS__);  \
    case kiln_kernels::kU16: return F::template Run<uint16_t>(__VA_ARGS__); \
    case kiln_kernels::kI32: return F::template Run<int32_t>(__VA_ARGS__);  \
    case kiln_kernels::kU32: return F::template Run<uint32_t>(__VA_ARGS__); \
    case kiln_kernels::kI64: return F::template Run<int64_t>(__VA_ARGS__);  \
    case kiln_kernels::kU64: return F::template Run<uint64_t>(__VA_ARGS__); \
    case kiln_kernels::kBool: return F::template Run<bool>(__VA_ARGS__);    \
    default: return KILN_KERR_DTYPE;                                        \
  }

#define KILN_DISPATCH_FLOAT(dtype, F, ...)                                \
  switch (dtype) {                                                        \
    case kiln_kernels::kF32: return F::template Run<float>(__VA_ARGS__);  \
    case kiln_kernels::kF64: return F::template Run<double>(__VA_ARGS__); \
    default: return KILN_KERR_DTYPE;                                      \
  }

// Reads element i of a tensor of any numeric type as double (for mixed-type inputs such
// as Pow's exponent or Clip's bounds).
inline double LoadAsDouble(const void* data, int32_t dtype, int64_t i) {
  switch (dtype) {
    case kF32: return static_cast<const float*>(data)[i];
    case kF64: return static_cast<const double*>(data)[i];
    case kI8: return static_cast<const int8_t*>(data)[i];
    case kU8: return static_cast<const uint8_t*>(data)[i];
    case kI16: return static_cast<const int16_t*>(data)[i];
    case kU16: return static_cast<const uint16_t*>(data)[i];
    case kI32: return static_cast<const int32_t*>(data)[i];
    case kU32: return static_cast<const uint32_t*>(data)[i];
    case kI64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case kU64: return static_cast<double>(static_cast<const uint64_t*>(data)[i]);
    case kBool: return static_cast<const bool*>(data)[i] ? 1.0 : 0.0;
    default: return 0.0;
  }
}

inline int64_t LoadAsInt64(const void* data, int32_t dtype, int64_t i) {
  switch (dtype) {
    case kI32: return static_cast<const int32_t*>(data)[i];
    case kI64: return static_cast<const int64_t*>(data)[i];
    default: return static_cast<int64_t>(LoadAsDouble(data, dtype, i));
  }
}

constexpr int kMaxRank = 8;

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;

// Row-major strides of `dims`, written into `strides`.
inline void ContiguousStrides(const int64_t* dims, int32_t rank, int64_t* strides) {
  int64_t s = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    strides[i] = s;
    s *= dims[i];
  }
}

// Strides for reading `in` broadcast (numpy rules) to an output of rank `out_rank`:
// 0 where the input dimension is 1 or missing.
inline void BroadcastStrides(const kiln_ktensor& in, const int64_t* out_dims, int32_t out_rank, int64_t* strides) {
  int64_t in_strides[kMaxRank];
  ContiguousStrides(in.dims, in.rank, in_strides);
  int32_t offset = out_rank - in.rank;
  for (int32_t i = 0; i < out_rank; ++i) {
    int32_t j = i - offset;
    strides[i] = (j < 0 || in.dims[j] == 1) ? 0 : in_strides[j];
  }
}

// Walks a multi-dimensional index over `dims`, keeping up to 3 linear offsets in step.
struct IndexWalker {
  int64_t index[kMaxRank] = {0};
  const int64_t* dims;
  int32_t rank;
  explicit IndexWalker(const int64_t* d, int32_t r) : dims(d), rank(r) {}
  // Advances the index by one; updates offsets[k] using strides[k][dim].
  template <int N>
  void Next(int64_t (&offsets)[N], const int64_t* const (&strides)[N]) {
    for (int32_t d = rank - 1; d >= 0; --d) {
      ++index[d];
      for (int k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (index[d] < dims[d]) return;
      for (int k = 0; k < N; ++k) offsets[k] -= strides[k][d] * dims[d];
      index[d] = 0;
    }
  }
};

inline bool SameDims(const kiln_ktensor& a, const kiln_ktensor& b) {
  if (a.rank != b.rank) return false;
  for (int32_t i = 0; i < a.rank; ++i) {
    if (a.dims[i] != b.dims[i]) return false;
  }
  return true;
}

// Runs body(begin, end) over [0, n), in parallel when the call has an executor.
// Bodies capture by value, and each run works on its own copy of the closure: the copy
// never escapes, so its fields (shapes, strides, pointers) live in registers. Loads from
// the shared closure, whose address goes to the pool, could alias every float store in
// the loop (the library builds without strict aliasing) and would be redone each
// iteration, which stops vectorization.
template <typename Body>
void ParallelFor(const kiln_kcall* call, int64_t n, int64_t min_chunk, const Body& body) {
  if (call->exec == nullptr || call->exec->parallel_for == nullptr || n <= min_chunk) {
    Body local = body;
    local(0, n);
    return;
  }
  call->exec->parallel_for(
      call->exec->pool, n, min_chunk,
      [](void* ctx, int64_t begin, int64_t end) {
        Body local = *static_cast<const Body*>(ctx);
        local(begin, end);
      },
      const_cast<Body*>(&body));
}

}  // namespace kiln_kernels
