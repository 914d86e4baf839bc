// Elementwise kernels: unary math, broadcasting binary ops, Where, Cast, Clip.
#include "kiln/kernels/elementwise.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kiln/kernels/fp16.h"
#include "unary_math.h"

#include <utility>  // header-only: std::index_sequence

using namespace kiln_kernels;

namespace {

struct UnaryKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_elementwise_params& params) {
    const int op = static_cast<int>(params.op);
    const double alpha = params.alpha, beta = params.beta;
    const T* in = InputData<T>(call, 0);
    const int64_t n = Numel(call->outputs[0]);
    if (op == KILN_UNARY_IS_NAN || op == KILN_UNARY_IS_INF) {
      bool* out = OutputData<bool>(call);
      const bool negative = params.detect_negative != 0, positive = params.detect_positive != 0;
      for (int64_t i = 0; i < n; ++i) {
        double v = static_cast<double>(in[i]);
        out[i] = op == KILN_UNARY_IS_NAN ? v != v : ((positive && v == INFINITY) || (negative && v == -INFINITY));
      }
      return KILN_KERR_OK;
    }
    T* out = OutputData<T>(call);
    // The activations' own loops are vectorized; the per-element switch below is not (a
    // standalone Gelu: 9 ns per element).
    const bool activation_loop = HasActivationLoop(op);
    auto body = [=](int64_t begin, int64_t end) {
      if (activation_loop) {
        if (out != in) memcpy(out + begin, in + begin, sizeof(T) * (end - begin));
        ApplyActivation(out + begin, end - begin, op, alpha, beta);
        return;
      }
      for (int64_t i = begin; i < end; ++i) out[i] = ApplyUnary<T>(op, in[i], alpha, beta);
    };
    ParallelFor(call, n, 1 << 14, body);
    return KILN_KERR_OK;
  }
};

template <typename T>
inline T FloorMod(T a, T b) {
  if constexpr (kIsFloat<T>) {
    T r = fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else {
    if (b == 0) return 0;
    T r = static_cast<T>(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
  }
}

template <typename T>
inline T ApplyArith(int op, T a, T b) {
  switch (op) {
    case KILN_BINARY_ADD: return static_cast<T>(a + b);
    case KILN_BINARY_SUB: return static_cast<T>(a - b);
    case KILN_BINARY_MUL: return static_cast<T>(a * b);
    case KILN_BINARY_DIV:
      if constexpr (!kIsFloat<T>) {
        if (b == 0) return 0;
      }
      return static_cast<T>(a / b);
    case KILN_BINARY_MAX: return a > b || a != a ? a : b;
    case KILN_BINARY_MIN: return a < b || a != a ? a : b;
    case KILN_BINARY_MOD: return FloorMod(a, b);
    case KILN_BINARY_FMOD:
      if constexpr (kIsFloat<T>) {
        return fmod(a, b);
      } else {
        return b == 0 ? T(0) : static_cast<T>(a % b);
      }
    case KILN_BINARY_PRELU: return a < 0 ? static_cast<T>(a * b) : a;
    case KILN_BINARY_AND: return a && b;
    case KILN_BINARY_OR: return a || b;
    case KILN_BINARY_XOR: return (a != 0) != (b != 0);
    case KILN_BINARY_SHIFT_LEFT:
      if constexpr (!kIsFloat<T>) return static_cast<T>(a << b);
      return a;
    case KILN_BINARY_BITWISE_AND:
      if constexpr (!kIsFloat<T>) return static_cast<T>(a & b);
      return a;
    case KILN_BINARY_BITWISE_OR:
      if constexpr (!kIsFloat<T>) return static_cast<T>(a | b);
      return a;
    case KILN_BINARY_BITWISE_XOR:
      if constexpr (!kIsFloat<T>) return static_cast<T>(a ^ b);
      return a;
    case KILN_BINARY_SHIFT_RIGHT:
      if constexpr (!kIsFloat<T>) return static_cast<T>(a >> b);
      return a;
    default: return a;
  }
}

template <typename T>
inline bool ApplyCompareT(int op, T a, T b) {
  switch (op) {
    case KILN_BINARY_EQUAL: return a == b;
    case KILN_BINARY_LESS: return a < b;
    case KILN_BINARY_GREATER: return a > b;
    case KILN_BINARY_LESS_EQUAL: return a <= b;
    case KILN_BINARY_GREATER_EQUAL: return a >= b;
    default: return false;
  }
}

// Walks the output of an op with N broadcast operands (numpy rules): f(i, at_0, ...,
// at_N-1) for each output element i, at_k the offset of operand k's element. The innermost
// dim runs as a flat loop, each operand stepping by its own stride; the walker covers the
// outer dims.
template <typename F, size_t... K>
KILN_ALWAYS_INLINE void BroadcastWalk(const kiln_ktensor* const (&operands)[sizeof...(K)], const kiln_ktensor& out,
                                      std::index_sequence<K...>, F f) {
  constexpr int N = sizeof...(K);
  const int32_t r = out.rank;
  int64_t strides[N][kMaxRank], steps[N];
  const int64_t* stride_rows[N];
  for (int k = 0; k < N; ++k) {
    BroadcastStrides(*operands[k], out.dims, r, strides[k]);
    stride_rows[k] = strides[k];
    steps[k] = r > 0 ? strides[k][r - 1] : 0;
  }
  const int64_t n = Numel(out), inner = r > 0 ? out.dims[r - 1] : 1;
  int64_t offsets[N] = {};
  IndexWalker walker(out.dims, r > 0 ? r - 1 : 0);
  for (int64_t base = 0; base < n; base += inner) {
    for (int64_t j = 0; j < inner; ++j) f(base + j, (offsets[K] + j * steps[K])...);
    walker.Next(offsets, stride_rows);
  }
}

// Loops over the output, reading a and b with broadcast strides; `f(i, ia, ib)` does one
// element. Equal shapes and scalar operands take a flat loop LLVM can vectorize.
template <typename F>
inline void BroadcastLoop2(const kiln_ktensor& a, const kiln_ktensor& b, const kiln_ktensor& out, F f) {
  const int64_t n = Numel(out);
  const int64_t na = Numel(a), nb = Numel(b);
  if (na == n && nb == n) {
    for (int64_t i = 0; i < n; ++i) f(i, i, i);
    return;
  }
  if (na == n && nb == 1) {
    for (int64_t i = 0; i < n; ++i) f(i, i, 0);
    return;
  }
  if (na == 1 && nb == n) {
    for (int64_t i = 0; i < n; ++i) f(i, 0, i);
    return;
  }
  const kiln_ktensor* const operands[2] = {&a, &b};
  BroadcastWalk(operands, out, std::make_index_sequence<2>(), f);
}

struct BinaryKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_elementwise_params& params) {
    const int op = static_cast<int>(params.op);
    const kiln_ktensor& a = call->inputs[0];
    const kiln_ktensor& b = call->inputs[1];
    const kiln_ktensor& out = call->outputs[0];
    const T* pa = static_cast<const T*>(a.data);
    if (op == KILN_BINARY_POW) {
      // The exponent may have another element type than the base.
      T* po = static_cast<T*>(out.data);
      if (b.dtype == a.dtype) {
        const T* pb = static_cast<const T*>(b.data);
        BroadcastLoop2(a, b, out, [&](int64_t i, int64_t ia, int64_t ib) {
          po[i] = static_cast<T>(pow(static_cast<double>(pa[ia]), static_cast<double>(pb[ib])));
        });
      } else {
        BroadcastLoop2(a, b, out, [&](int64_t i, int64_t ia, int64_t ib) {
          po[i] = static_cast<T>(pow(static_cast<double>(pa[ia]), LoadAsDouble(b.data, b.dtype, ib)));
        });
      }
      return KILN_KERR_OK;
    }
    const T* pb = static_cast<const T*>(b.data);
    if (op >= KILN_BINARY_EQUAL && op <= KILN_BINARY_GREATER_EQUAL) {
      bool* po = static_cast<bool*>(out.data);
      BroadcastLoop2(a, b, out,
                     [&](int64_t i, int64_t ia, int64_t ib) { po[i] = ApplyCompareT<T>(op, pa[ia], pb[ib]); });
      return KILN_KERR_OK;
    }
    T* po = static_cast<T*>(out.data);
    switch (op) {  // hoisted so each loop body is a single operation LLVM can vectorize
      case KILN_BINARY_ADD:
        BroadcastLoop2(a, b, out, [&](int64_t i, int64_t ia, int64_t ib) { po[i] = static_cast<T>(pa[ia] + pb[ib]); });
        break;
      case KILN_BINARY_SUB:
        BroadcastLoop2(a, b, out, [&](int64_t i, int64_t ia, int64_t ib) { po[i] = static_cast<T>(pa[ia] - pb[ib]); });
        break;
      case KILN_BINARY_MUL:
        BroadcastLoop2(a, b, out, [&](int64_t i, int64_t ia, int64_t ib) { po[i] = static_cast<T>(pa[ia] * pb[ib]); });
        break;
      default:
        BroadcastLoop2(a, b, out,
                       [&](int64_t i, int64_t ia, int64_t ib) { po[i] = ApplyArith<T>(op, pa[ia], pb[ib]); });
    }
    return KILN_KERR_OK;
  }
};

// One element of a binary op as kiln.Elementwise and the scalar entry points see it; the
// same arithmetic as BinaryKernel (Pow through double, like the unfused kernel).
template <typename T>
inline T ScalarBinary(int op, T a, T b) {
  if (op == KILN_BINARY_POW) return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
  return ApplyArith<T>(op, a, b);
}

// kiln.Elementwise in the reference interpreter: a fused chain evaluated element by
// element, op by op, exactly as the unfused kernels would. (Codegen does not call this: it
// generates the loop itself.) Parameters: kiln_fused_elementwise_params.
struct FusedElementwiseKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_fused_elementwise_params& params) {
    const int64_t num_ops = params.num_ops;
    const int32_t n_in = call->num_inputs;
    if (n_in > KILN_FUSED_MAX_INPUTS || num_ops > KILN_FUSED_MAX_OPS || num_ops < 1) return KILN_KERR_UNSUPPORTED;
    const kiln_ktensor& out = call->outputs[0];
    int64_t strides[KILN_FUSED_MAX_INPUTS][kMaxRank];
    const int64_t* stride_ptrs[KILN_FUSED_MAX_INPUTS];
    for (int32_t k = 0; k < KILN_FUSED_MAX_INPUTS; ++k) {
      for (int32_t d = 0; d < kMaxRank; ++d) strides[k][d] = 0;
      if (k < n_in) BroadcastStrides(call->inputs[k], out.dims, out.rank, strides[k]);
      stride_ptrs[k] = strides[k];
    }
    int64_t offsets[KILN_FUSED_MAX_INPUTS] = {0};
    T* po = static_cast<T*>(out.data);
    IndexWalker walker(out.dims, out.rank);
    const int64_t n = Numel(out);
    T values[KILN_FUSED_MAX_INPUTS + KILN_FUSED_MAX_OPS];
    for (int64_t i = 0; i < n; ++i) {
      for (int32_t k = 0; k < n_in; ++k) values[k] = static_cast<const T*>(call->inputs[k].data)[offsets[k]];
      for (int64_t op = 0; op < num_ops; ++op) {
        const int64_t* ins = params.program[op];
        values[n_in + op] = ins[0] ? ScalarBinary<T>(static_cast<int>(ins[1]), values[ins[2]], values[ins[3]])
                                   : ApplyUnary<T>(static_cast<int>(ins[1]), values[ins[2]], params.op_params[op][0],
                                                   params.op_params[op][1]);
      }
      po[i] = values[n_in + num_ops - 1];
      walker.Next(offsets, stride_ptrs);
    }
    return KILN_KERR_OK;
  }
};

struct WhereKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const bool* pc = InputData<bool>(call, 0);
    const T* px = InputData<T>(call, 1);
    const T* py = InputData<T>(call, 2);
    T* po = OutputData<T>(call);
    const kiln_ktensor* const operands[3] = {&call->inputs[0], &call->inputs[1], &call->inputs[2]};
    BroadcastWalk(operands, call->outputs[0], std::make_index_sequence<3>(),
                  [&](int64_t i, int64_t ic, int64_t ix, int64_t iy) { po[i] = pc[ic] ? px[ix] : py[iy]; });
    return KILN_KERR_OK;
  }
};

template <typename From>
struct CastTo {
  template <typename To>
  static int32_t Run(const From* in, void* out_data, int64_t n) {
    To* out = static_cast<To*>(out_data);
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kIsFloat<From> && !kIsFloat<To>) {
        // Float to integer: NaN and out-of-range values are undefined in C++; pin them.
        double v = static_cast<double>(in[i]);
        out[i] = v != v ? To(0) : static_cast<To>(v);
      } else {
        out[i] = static_cast<To>(in[i]);
      }
    }
    return KILN_KERR_OK;
  }
};

struct CastFrom {
  template <typename From>
  static int32_t Run(const kiln_kcall* call) {
    const From* in = InputData<From>(call, 0);
    const int64_t n = Numel(call->outputs[0]);
    void* out = call->outputs[0].data;
    KILN_DISPATCH_NUMERIC(call->outputs[0].dtype, CastTo<From>, in, out, n);
  }
};

struct ClipKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_elementwise_params& params) {
    const T* in = InputData<T>(call, 0);
    T* out = OutputData<T>(call);
    // Whether a min/max bound is present; the bounds come as inputs 1/2 (opset 11+) or as
    // alpha/beta (opset 6).
    T lo = 0, hi = 0;
    const bool has_lo = params.has_min != 0, has_hi = params.has_max != 0;
    if (has_lo) {
      lo = call->num_inputs > 1 && call->inputs[1].data ? InputData<T>(call, 1)[0] : static_cast<T>(params.alpha);
    }
    if (has_hi) {
      hi = call->num_inputs > 2 && call->inputs[2].data ? InputData<T>(call, 2)[0] : static_cast<T>(params.beta);
    }
    const int64_t n = Numel(call->outputs[0]);
    for (int64_t i = 0; i < n; ++i) {
      T v = in[i];
      if (has_lo && v < lo) v = lo;
      if (has_hi && v > hi) v = hi;
      out[i] = v;
    }
    return KILN_KERR_OK;
  }
};

// MT19937 seeded as numpy.random.seed does (init_genrand), drawing doubles in [0, 1) as
// numpy's random_sample does (27 + 26 bits): the stream ONNX's reference Dropout draws its
// mask from, so a seeded Dropout matches it element for element.
class Mt19937 {
 public:
  explicit Mt19937(uint32_t seed) {
    state_[0] = seed;
    for (int i = 1; i < kN; ++i) state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + i;
  }
  double NextDouble() {
    const uint32_t a = Next() >> 5, b = Next() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

 private:
  static constexpr int kN = 624, kM = 397;
  uint32_t Next() {
    if (index_ >= kN) Twist();
    uint32_t y = state_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  void Twist() {
    for (int i = 0; i < kN; ++i) {
      const uint32_t y = (state_[i] & 0x80000000u) | (state_[(i + 1) % kN] & 0x7fffffffu);
      state_[i] = state_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  uint32_t state_[kN];
  int index_ = kN;
};

// Dropout with training_mode given at run time: inputs X, ratio (optional, default 0.5),
// training_mode (optional bool, default false); outputs Y and the bool mask (optional).
// Out of training, or at ratio 0, Y = X and the mask is all true; in training element i
// (row-major) is kept when the i-th draw is at least the ratio, and scaled by 1 / (1 - ratio).
struct DropoutKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_elementwise_params& params) {
    const bool has_ratio = call->num_inputs > 1 && call->inputs[1].data != nullptr;
    const double ratio = has_ratio ? LoadAsDouble(call->inputs[1].data, call->inputs[1].dtype, 0) : 0.5;
    const bool training = call->num_inputs > 2 && call->inputs[2].data != nullptr &&
                          static_cast<const uint8_t*>(call->inputs[2].data)[0] != 0;
    const double drop = training ? ratio : 0.0;
    if (drop < 0 || drop > 1) return KILN_KERR_UNSUPPORTED;
    const double scale = drop < 1 ? 1.0 / (1.0 - drop) : 0.0;
    const T* x = InputData<T>(call, 0);
    T* y = OutputData<T>(call);
    uint8_t* mask = call->num_outputs > 1 && call->outputs[1].data != nullptr ? OutputData<uint8_t>(call, 1) : nullptr;
    const int64_t n = Numel(call->outputs[0]);
    Mt19937 draws(static_cast<uint32_t>(params.seed));
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = drop == 0 || draws.NextDouble() >= drop;
      y[i] = keep ? (drop == 0 ? x[i] : static_cast<T>(x[i] * scale)) : T(0);
      if (mask != nullptr) mask[i] = keep ? 1 : 0;
    }
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_NUMERIC_KERNEL(unary, UnaryKernel, inputs[0].dtype)

KILN_NUMERIC_KERNEL(binary, BinaryKernel, inputs[0].dtype)
KILN_FLOAT_KERNEL(fused_elementwise, FusedElementwiseKernel, outputs[0].dtype)

KILN_NUMERIC_KERNEL(where, WhereKernel, outputs[0].dtype)

KILN_NUMERIC_KERNEL(clip, ClipKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(dropout, DropoutKernel, outputs[0].dtype)

namespace {

// The 16-bit float types (f16, bf16): their bits <-> float.
KILN_ALWAYS_INLINE bool IsFloat16(int32_t dtype) { return dtype == kF16 || dtype == kBF16; }
KILN_ALWAYS_INLINE float Float16ToFloat(int32_t dtype, uint16_t bits) {
  return dtype == kF16 ? kiln_half_to_float(bits) : kiln_bfloat16_to_float(bits);
}
KILN_ALWAYS_INLINE uint16_t FloatToFloat16(int32_t dtype, float f) {
  return dtype == kF16 ? kiln_float_to_half(f) : kiln_float_to_bfloat16(f);
}

}  // namespace

namespace {

// The conversions narrow-float models run between every pair of ops (legalize-float16), one
// loop per pair of types so that each vectorizes.
template <typename From, typename To, To (*convert)(From)>
KILN_ALWAYS_INLINE void ConvertLoop(const void* in, void* out, int64_t n) {
  const From* src = static_cast<const From*>(in);
  To* dst = static_cast<To*>(out);
  for (int64_t i = 0; i < n; ++i) dst[i] = convert(src[i]);
}

// Whether `in` -> `out` was one of those pairs (and is done).
bool CastBetweenFloat32AndNarrow(const kiln_ktensor& in, const kiln_ktensor& out, int64_t n) {
  if (in.dtype == kF16 && out.dtype == kF32) {
    ConvertLoop<uint16_t, float, kiln_half_to_float>(in.data, out.data, n);
  } else if (in.dtype == kBF16 && out.dtype == kF32) {
    ConvertLoop<uint16_t, float, kiln_bfloat16_to_float>(in.data, out.data, n);
  } else if (in.dtype == kF32 && out.dtype == kF16) {
    ConvertLoop<float, uint16_t, kiln_float_to_half>(in.data, out.data, n);
  } else if (in.dtype == kF32 && out.dtype == kBF16) {
    ConvertLoop<float, uint16_t, kiln_float_to_bfloat16>(in.data, out.data, n);
  } else {
    return false;
  }
  return true;
}

}  // namespace

KILN_KERNEL(cast) {
  const kiln_ktensor& in = call->inputs[0];
  const kiln_ktensor& out = call->outputs[0];
  const int64_t n = Numel(out);
  if (CastBetweenFloat32AndNarrow(in, out, n)) return KILN_KERR_OK;
  if (IsFloat16(in.dtype)) {  // f16 or bf16 -> float -> target
    const uint16_t* src = static_cast<const uint16_t*>(in.data);
    if (out.dtype == in.dtype) {
      memcpy(out.data, in.data, n * 2);
      return KILN_KERR_OK;
    }
    for (int64_t i = 0; i < n; ++i) {
      float f = Float16ToFloat(in.dtype, src[i]);
      switch (out.dtype) {
        case kF32: static_cast<float*>(out.data)[i] = f; break;
        case kF64: static_cast<double*>(out.data)[i] = f; break;
        case kF16:
        case kBF16: static_cast<uint16_t*>(out.data)[i] = FloatToFloat16(out.dtype, f); break;
        default: {
          kiln_ktensor one_in = {&f, nullptr, 0, kF32};
          kiln_ktensor one_out = out;
          one_out.data = static_cast<char*>(out.data) + i * ElementSize(out.dtype);
          one_out.rank = 0;
          kiln_kcall one = *call;
          one.inputs = &one_in;
          one.outputs = &one_out;
          int32_t rc = kiln_k_cast(&one);
          if (rc != KILN_KERR_OK) return rc;
        }
      }
    }
    return KILN_KERR_OK;
  }
  if (IsFloat16(out.dtype)) {
    uint16_t* dst = static_cast<uint16_t*>(out.data);
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = FloatToFloat16(out.dtype, static_cast<float>(LoadAsDouble(in.data, in.dtype, i)));
    }
    return KILN_KERR_OK;
  }
  KILN_DISPATCH_NUMERIC(in.dtype, CastFrom, call);
}

// Scalar entry points for loops that codegen generates (kiln.Elementwise): one element of
// a unary or binary op. Inlined with a constant op code, each folds to straight-line code
// the loop vectorizer can widen.
extern "C" float kiln_s_unary_f32(int32_t op, float x, double alpha, double beta) {
  return ApplyUnary<float>(op, x, alpha, beta);
}
extern "C" double kiln_s_unary_f64(int32_t op, double x, double alpha, double beta) {
  return ApplyUnary<double>(op, x, alpha, beta);
}
extern "C" float kiln_s_binary_f32(int32_t op, float a, float b) { return ScalarBinary<float>(op, a, b); }
extern "C" double kiln_s_binary_f64(int32_t op, double a, double b) { return ScalarBinary<double>(op, a, b); }
