// Neural-network kernels: MatMul, Gemm, Conv, ConvTranspose, pooling, normalisations, LRN.
// Spatial kernels see 1-D and 2-D problems as 3-D ones with leading extents of 1, so one
// loop nest serves all three ranks.
#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kernel_window.h"
#include "kiln/kernels/conv.h"
#include "kiln/kernels/gemm.h"
#include "kiln/kernels/norm.h"
#include "kiln/kernels/pool.h"
#include "unary_math.h"

using namespace kiln_kernels;

namespace {

struct MatMulKernel {
  // Parameters: kiln_matmul_params (kiln/kernels/gemm.h). Optional input 2: a bias [N].
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    if constexpr (std::is_same_v<T, float> && kBlockedGemm) {
      KILN_PARAMS(kiln_matmul_params, params, call);
      if (params.shape.K > 0) return RunShared(call);
    }
    return Body<T, false>(call);
  }
  // The f32 path through the register-blocked core, not inlined: one copy per artifact.
  __attribute__((noinline)) static int32_t RunShared(const kiln_kcall* call) { return Body<float, true>(call); }

  template <typename T, bool kBlocked>
  static int32_t Body(const kiln_kcall* call) {
    KILN_PARAMS(kiln_matmul_params, params, call);
    const int64_t M = params.shape.M, K = params.shape.K, N = params.shape.N;
    const int32_t batch_rank = static_cast<int32_t>(params.shape.batch_rank);
    const int64_t* batch_dims = params.shape.batch_dims;
    const int64_t* a_strides = params.shape.a_batch_strides;
    const int64_t* b_strides = params.shape.b_batch_strides;
    const int64_t activation = params.activation.code;
    const bool b_panels = params.b_panels != 0;
    if (b_panels && (!kBlocked || N % gemm::kNr != 0)) return KILN_KERR_UNSUPPORTED;
    const double act_alpha = params.activation.alpha, act_beta = params.activation.beta;
    const T* bias = call->num_inputs > 2 ? static_cast<const T*>(call->inputs[2].data) : nullptr;
    int64_t batches = 1;
    for (int32_t i = 0; i < batch_rank; ++i) batches *= batch_dims[i];
    const T* pa = static_cast<const T*>(call->inputs[0].data);
    const T* pb = static_cast<const T*>(call->inputs[1].data);
    T* pc = static_cast<T*>(call->outputs[0].data);
    auto batch_offsets = [&](int64_t batch, int64_t* a_off, int64_t* b_off) {
      int64_t rest = batch;
      *a_off = *b_off = 0;
      for (int32_t d = batch_rank - 1; d >= 0; --d) {
        const int64_t idx = rest % batch_dims[d];
        rest /= batch_dims[d];
        *a_off += idx * a_strides[d];
        *b_off += idx * b_strides[d];
      }
    };
    if constexpr (kBlocked) {
      {
        // Register-blocked core; jobs are (batch, row group, column chunk). With A's rows
        // a multiple of 4 KiB apart, PanelBlock copies each block of A first: one chunk of
        // every column then, so the copy serves them all (one thread, Zen 4, alternating
        // runs: 1024^3 22.1 -> 21.9 ms, 128x3072x768 5.99 -> 5.74 ms).
        const bool whole_rows = b_panels && gemm::AliasedRows(K);
        const int64_t width = whole_rows ? N : gemm::kNc;
        const int64_t chunks = whole_rows ? 1 : gemm::ColumnChunks(N);
        const gemm::RowSplit split = gemm::SplitRows(call, M, chunks * batches);
        const int64_t groups = split.groups;
        auto jobs = [=](int64_t begin, int64_t end) {
          for (int64_t job = begin; job < end; ++job) {
            const int64_t batch = job / (groups * chunks), rg = job / chunks % groups, cc = job % chunks;
            int64_t a_off, b_off;
            batch_offsets(batch, &a_off, &b_off);
            const float* b = pb + b_off;
            float* c = pc + batch * M * N;
            const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + 1);
            const int64_t n0 = cc * width, n1 = n0 + width < N ? n0 + width : N;
            auto pack = [&](int64_t k0, int64_t kb, int64_t c0, int64_t nb, float* dst, int64_t* ldb) -> const float* {
              for (int64_t k = 0; k < kb; ++k) memcpy(dst + k * *ldb, b + (k0 + k) * N + c0, sizeof(float) * nb);
              return dst;
            };
            if (b_panels) {
              gemm::PanelBlock(m0, m1, n0, n1, K, pa + a_off, K, pb, c, N);
            } else {
              gemm::Block(m0, m1, n0, n1, K, pa + a_off, K, 1, c, N, pack);
            }
            for (int64_t i = m0; i < m1; ++i) {
              float* row = c + i * N + n0;
              if (bias) {
                for (int64_t j = 0; j < n1 - n0; ++j) row[j] += bias[n0 + j];
              }
              ApplyActivation(row, n1 - n0, activation, act_alpha, act_beta);
            }
          }
        };
        ParallelFor(call, batches * groups * chunks, 1, jobs);
        return KILN_KERR_OK;
      }
    }
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t batch = row / M, i = row % M;
        int64_t a_off = 0, b_off = 0, rest = batch;
        for (int32_t d = batch_rank - 1; d >= 0; --d) {
          const int64_t idx = rest % batch_dims[d];
          rest /= batch_dims[d];
          a_off += idx * a_strides[d];
          b_off += idx * b_strides[d];
        }
        const T* a = pa + a_off + i * K;
        const T* b = pb + b_off;
        T* c = pc + row * N;
        for (int64_t j = 0; j < N; ++j) c[j] = bias ? bias[j] : T(0);
        for (int64_t k = 0; k < K; ++k) {
          const T aik = a[k];
          const T* brow = b + k * N;
          for (int64_t j = 0; j < N; ++j) c[j] += aik * brow[j];
        }
        ApplyActivation(c, N, activation, act_alpha, act_beta);
      }
    };
    ParallelFor(call, batches * M, 4, body);
    return KILN_KERR_OK;
  }
};

struct GemmKernel {
  // Parameters: kiln_gemm_params (kiln/kernels/gemm.h). C (input 2) broadcasts to [M, N].
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    if constexpr (std::is_same_v<T, float> && kBlockedGemm) {
      KILN_PARAMS(kiln_gemm_params, params, call);
      const kiln_ktensor& A = call->inputs[0];
      if ((params.trans_a != 0 ? A.dims[0] : A.dims[1]) > 0) return RunShared(call);
    }
    return Body<T, false>(call);
  }
  __attribute__((noinline)) static int32_t RunShared(const kiln_kcall* call) { return Body<float, true>(call); }

  template <typename T, bool kBlocked>
  static int32_t Body(const kiln_kcall* call) {
    const kiln_ktensor& A = call->inputs[0];
    const kiln_ktensor& B = call->inputs[1];
    KILN_PARAMS(kiln_gemm_params, params, call);
    const kiln_activation& act = params.activation;
    const bool ta = params.trans_a != 0, tb = params.trans_b != 0;
    const T alpha = static_cast<T>(params.alpha), beta = static_cast<T>(params.beta);
    const int64_t M = ta ? A.dims[1] : A.dims[0], K = ta ? A.dims[0] : A.dims[1];
    const int64_t N = tb ? B.dims[0] : B.dims[1];
    const T* pa = static_cast<const T*>(A.data);
    const T* pb = static_cast<const T*>(B.data);
    T* pc = static_cast<T*>(call->outputs[0].data);
    const bool has_c = call->num_inputs > 2 && call->inputs[2].data != nullptr;
    int64_t c_strides[2] = {0, 0};
    if (has_c) BroadcastStrides(call->inputs[2], call->outputs[0].dims, 2, c_strides);
    const T* pbias = has_c ? static_cast<const T*>(call->inputs[2].data) : nullptr;
    if constexpr (kBlocked) {
      if (M == 1) {
        // One row (a classifier head at batch 1): a matrix-vector product that streams B
        // once. Packing B for the blocked core would copy (or, transposed, gather) all of
        // it on every call.
        constexpr int64_t kChunk = 64;
        auto jobs = [=](int64_t begin, int64_t end) {
          for (int64_t chunk = begin; chunk < end; ++chunk) {
            const int64_t n0 = chunk * kChunk, n1 = n0 + kChunk < N ? n0 + kChunk : N;
            float* __restrict c = pc + n0;
            if (tb) {
              for (int64_t j = n0; j < n1; ++j) c[j - n0] = gemm::Dot(pa, pb + j * K, K);
            } else {
              for (int64_t j = 0; j < n1 - n0; ++j) c[j] = 0.f;
              for (int64_t k = 0; k < K; ++k) {
                const float ak = pa[k];
                const float* __restrict brow = pb + k * N + n0;
                for (int64_t j = 0; j < n1 - n0; ++j) c[j] += ak * brow[j];
              }
            }
            for (int64_t j = n0; j < n1; ++j) {
              float v = alpha * pc[j];
              if (has_c) v += beta * pbias[j * c_strides[1]];
              pc[j] = v;
            }
            ApplyActivation(pc + n0, n1 - n0, act.code, act.alpha, act.beta);
          }
        };
        ParallelFor(call, (N + kChunk - 1) / kChunk, 1, jobs);
        return KILN_KERR_OK;
      }
      {
        const int64_t chunks = gemm::ColumnChunks(N);
        const gemm::RowSplit split = gemm::SplitRows(call, M, chunks);
        const int64_t groups = split.groups;
        auto jobs = [=](int64_t begin, int64_t end) {
          for (int64_t job = begin; job < end; ++job) {
            const int64_t rg = job / chunks, cc = job % chunks;
            const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + 1);
            const int64_t n0 = cc * gemm::kNc, n1 = n0 + gemm::kNc < N ? n0 + gemm::kNc : N;
            auto pack = [&](int64_t k0, int64_t kb, int64_t c0, int64_t nb, float* dst, int64_t* ldb) -> const float* {
              for (int64_t k = 0; k < kb; ++k) {
                float* out = dst + k * *ldb;
                if (tb) {
                  for (int64_t j = 0; j < nb; ++j) out[j] = pb[(c0 + j) * K + k0 + k];
                } else {
                  memcpy(out, pb + (k0 + k) * N + c0, sizeof(float) * nb);
                }
              }
              return dst;
            };
            gemm::Block(m0, m1, n0, n1, K, pa, ta ? 1 : K, ta ? M : 1, pc, N, pack);
            for (int64_t i = m0; i < m1; ++i) {
              float* c = pc + i * N;
              for (int64_t j = n0; j < n1; ++j) {
                float v = alpha * c[j];
                if (has_c) v += beta * pbias[i * c_strides[0] + j * c_strides[1]];
                c[j] = v;
              }
              ApplyActivation(c + n0, n1 - n0, act.code, act.alpha, act.beta);
            }
          }
        };
        ParallelFor(call, groups * chunks, 1, jobs);
        return KILN_KERR_OK;
      }
    }
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T* c = pc + i * N;
        for (int64_t j = 0; j < N; ++j) c[j] = 0;
        for (int64_t k = 0; k < K; ++k) {
          const T aik = ta ? pa[k * M + i] : pa[i * K + k];
          if (tb) {
            for (int64_t j = 0; j < N; ++j) c[j] += aik * pb[j * K + k];
          } else {
            const T* brow = pb + k * N;
            for (int64_t j = 0; j < N; ++j) c[j] += aik * brow[j];
          }
        }
        for (int64_t j = 0; j < N; ++j) {
          T v = alpha * c[j];
          if (has_c) v += beta * pbias[i * c_strides[0] + j * c_strides[1]];
          c[j] = v;
        }
        ApplyActivation(c, N, act.code, act.alpha, act.beta);
      }
    };
    ParallelFor(call, M, 4, body);
    return KILN_KERR_OK;
  }
};

// Depthwise 2-D f32 convolution (group == C == OC), dilation 1, with a KHxKW window and
// column stride SW fixed at compile time (3x3 and 5x5, strides 1 and 2: MobileNet and
// EfficientNet). Per output row, the KH input rows are picked once (a zero row stands in
// for rows in the padding), then the interior columns, whose taps are all inside the
// image, run as one loop over ow with the taps unrolled, which LLVM vectorizes; the few
// border columns take the checked scalar path. Serves planes with rows wider than
// RunDepthwiseBlocked takes (below). Not in the reference interpreter's build.
// Not inlined: one copy per window shape serves every node. Inlined into each node,
// EfficientNet-B0 took 56 s to compile instead of 15.
constexpr int64_t kDepthwiseMaxWidth = 1024;  // widest input row the zero row covers

template <int KH, int KW, int SW>
__attribute__((noinline)) static int32_t RunDepthwise2D(const kiln_kcall* call, const Window& w,
                                                        const kiln_activation& act) {
  const int64_t activation = act.code;
  const float* px = static_cast<const float*>(call->inputs[0].data);
  const float* pw = static_cast<const float*>(call->inputs[1].data);
  const float* pbias = call->num_inputs > 2 ? static_cast<const float*>(call->inputs[2].data) : nullptr;
  float* py = static_cast<float*>(call->outputs[0].data);
  const int64_t channels = call->inputs[0].dims[1], jobs = call->inputs[0].dims[0] * channels;
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2], SH = w.stride[1], PH = w.pad[1], PW = w.pad[2];
  // Interior columns: 0 <= ow * SW - PW and ow * SW - PW + KW - 1 < W.
  const int64_t ow_lo = (PW + SW - 1) / SW;
  const int64_t ow_hi = W - KW + PW < 0 ? 0 : ((W - KW + PW) / SW + 1 < OW ? (W - KW + PW) / SW + 1 : OW);
  const float alpha = static_cast<float>(act.alpha), beta = static_cast<float>(act.beta);
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float zero_row[kDepthwiseMaxWidth] = {};
    for (int64_t job = begin; job < end; ++job) {
      const int64_t c = job % channels;
      const float* x = px + job * H * W;
      float* y = py + job * OH * OW;
      float taps[KH * KW];
      for (int k = 0; k < KH * KW; ++k) taps[k] = pw[c * KH * KW + k];
      const float bias = pbias ? pbias[c] : 0.f;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const float* rows[KH];
        for (int kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * SH - PH + kh;
          rows[kh] = ih >= 0 && ih < H ? x + ih * W : zero_row;
        }
        float* __restrict yrow = y + oh * OW;
        auto border = [&](int64_t ow) {
          float acc = bias;
          for (int kh = 0; kh < KH; ++kh) {
            for (int kw = 0; kw < KW; ++kw) {
              const int64_t iw = ow * SW - PW + kw;
              if (iw >= 0 && iw < W) acc += taps[kh * KW + kw] * rows[kh][iw];
            }
          }
          yrow[ow] = acc;
        };
        for (int64_t ow = 0; ow < ow_lo && ow < OW; ++ow) border(ow);
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
          const int64_t iw = ow * SW - PW;
          float acc = bias;
          for (int kh = 0; kh < KH; ++kh) {
            for (int kw = 0; kw < KW; ++kw) acc += taps[kh * KW + kw] * rows[kh][iw + kw];
          }
          yrow[ow] = acc;
        }
        for (int64_t ow = ow_hi > ow_lo ? ow_hi : ow_lo; ow < OW; ++ow) border(ow);
        ApplyActivation(yrow, OW, activation, alpha, beta);
      }
    }
  };
  ParallelFor(call, jobs, 1, body);
  return KILN_KERR_OK;
}

// Depthwise 2-D f32 convolution with eight channels in the lanes of one vector, for planes
// where RunDepthwise2D's rows are too short to fill its vectors (14x14 and 7x7 planes
// with hundreds of channels in MobileNetV2 and EfficientNet). Per block of eight channels
// and strip of output rows, the input rows the strip reads are transposed into a
// zero-padded [rows][padded width][8] buffer, so each output pixel is KH*KW full-width
// multiply-adds with no edge checks; the strip's outputs, [pixels][8], are transposed
// back into the eight NCHW planes. The transposes go 8 pixels at a time in flattened
// (row-major) pixel order, so a 7- or 14-wide row costs no scalar remainder per row.
// Window KHxKW and stride S (both axes) fixed at compile time; pads >= 0, dilation 1.
constexpr int64_t kDepthwiseStripFloats = 16384;  // padded input rows of a strip (64 KiB)
constexpr int64_t kDepthwiseOutFloats = 8192;     // a strip's outputs (32 KiB)
// Padded input rows at most this wide take this path. Measured against RunDepthwise2D
// (single-node models, best of 200 runs): 3x3 stride 1 on 7x7 to 56x56 planes 2.5x to 1.15x
// faster, 3x3 and 5x5 stride 2 with 28-wide outputs 1.05x and 1.7x; with 112-wide input
// rows (3x3 on 112x112, either stride) the transposes cost more than they save on AVX2.
// On an AVX-512 host (16-lane loops leave short rows to their scalar remainder) stride 2
// wins up to 128: 96x112x112 3x3 0.31 -> 0.24 ms, 5x5 0.63 -> 0.40; stride 1 at 112 wide
// still loses (32 channels: 0.11 -> 0.15 ms). For AVX2 code (x86-64-v3, same host) 5x5
// stride 2 wins too (0.61 -> 0.43 ms) but 3x3 stride 2 does not (0.23 -> 0.25).
constexpr int64_t kDepthwiseBlockedMaxWidth = 64;
constexpr int64_t kDepthwiseBlockedMaxWidthStride2 = 128;  // wide targets, or 5x5 windows
static_assert(kDepthwiseStripFloats >= kDepthwiseBlockedMaxWidthStride2 * 16 * 5 &&
                  kDepthwiseOutFloats >= kDepthwiseBlockedMaxWidthStride2 / 2 * 16 &&
                  kDepthwiseOutFloats >= kDepthwiseBlockedMaxWidth * 16,
              "a strip holds at least one output row of 16 channels");

template <int KH, int KW, int S>
static bool DepthwiseBlockedFits(const Window& w, int64_t max_width = 0) {
  if (max_width == 0) {
    max_width = S == 2 && (WideVectors() || KW >= 5) ? kDepthwiseBlockedMaxWidthStride2 : kDepthwiseBlockedMaxWidth;
  }
  const int64_t padded_w = (w.out[2] - 1) * S + KW;
  return w.pad[1] >= 0 && w.pad[2] >= 0 && padded_w <= max_width;
}

// kMaxPool: the same walk computes a max pool (MaxPool's rule: a NaN never wins): the
// padding is -inf instead of zero, each pixel the max of its taps; no weight, bias or
// activation. V: the vector of channels, v8f, or v16f on targets with AVX-512F (sixteen
// channels per block: the transposes stay 8x8, each filling one half of the lanes).
template <int KH, int KW, int S, bool kMaxPool, typename V>
__attribute__((noinline)) static int32_t RunDepthwiseBlockedLanes(const kiln_kcall* call, const Window& w,
                                                                  const kiln_activation& act) {
#ifdef __clang__
#pragma clang fp contract(fast)  // a Conv's sums are reassociated anyway (see MicroKernel)
#endif
  const int64_t activation = act.code;
  using gemm::v8f;
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  const float* px = static_cast<const float*>(call->inputs[0].data);
  const float* pw = kMaxPool ? nullptr : static_cast<const float*>(call->inputs[1].data);
  const float* pbias = !kMaxPool && call->num_inputs > 2 ? static_cast<const float*>(call->inputs[2].data) : nullptr;
  float* py = static_cast<float*>(call->outputs[0].data);
  const int64_t channels = call->inputs[0].dims[1], blocks = (channels + L - 1) / L;
  const int64_t jobs = call->inputs[0].dims[0] * blocks;
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2], PH = w.pad[1], PW = w.pad[2];
  const int64_t padded_w = (OW - 1) * S + KW, row_floats = padded_w * L;
  // Output rows per strip: as many as keep its input rows and its outputs in the buffers.
  const int64_t by_in = (kDepthwiseStripFloats / row_floats - KH) / S + 1, by_out = kDepthwiseOutFloats / (OW * L);
  const int64_t strip = by_in < by_out ? by_in : by_out;
  // Input columns that land in a padded row: iw = column - PW for columns < padded_w.
  const int64_t iw_end = W < padded_w - PW ? W : padded_w - PW;
  const float alpha = kMaxPool ? 0.f : static_cast<float>(act.alpha);
  const float beta = kMaxPool ? 0.f : static_cast<float>(act.beta);
  // ReLU and Clip (ReLU6) on each output vector as it is computed, as the GEMM core's
  // epilogue does them; other activations on each finished strip.
  const int32_t in_registers = kMaxPool                        ? gemm::Epilogue::kNone
                               : activation == KILN_UNARY_RELU ? gemm::Epilogue::kRelu
                               : activation == KILN_UNARY_CLIP ? gemm::Epilogue::kClip
                                                               : gemm::Epilogue::kNone;
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float in[kDepthwiseStripFloats];
    alignas(64) float out[kDepthwiseOutFloats];
    // A block of at most 8 channels never writes the upper half of 16 lanes: zeroed here,
    // those lanes compute finite results (no denormal or NaN inputs) that are never stored.
    if constexpr (L > 8) memset(in, 0, sizeof(in));
    V pad, lo, hi;
    KILN_SPLAT_V(V, pad, kMaxPool ? -INFINITY : 0.f);
    KILN_SPLAT_V(V, lo, alpha);
    KILN_SPLAT_V(V, hi, beta);
    const v8f zero8 = {};
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / blocks, c0 = job % blocks * L;
      const int64_t lanes = channels - c0 < L ? channels - c0 : L;
      const float* x = px + (n * channels + c0) * H * W;
      float* y = py + (n * channels + c0) * OH * OW;
      alignas(64) float tap_lanes[KH * KW][L] = {};
      alignas(64) float bias_lanes[L] = {};
      for (int64_t l = 0; !kMaxPool && l < lanes; ++l) {
        for (int k = 0; k < KH * KW; ++k) tap_lanes[k][l] = pw[(c0 + l) * KH * KW + k];
        if (pbias != nullptr) bias_lanes[l] = pbias[c0 + l];
      }
      V taps[KH * KW], bias;
      for (int k = 0; k < KH * KW; ++k) memcpy(&taps[k], tap_lanes[k], sizeof(V));
      memcpy(&bias, bias_lanes, sizeof(V));
      for (int64_t oh0 = 0; oh0 < OH; oh0 += strip) {
        const int64_t oh1 = oh0 + strip < OH ? oh0 + strip : OH;
        const int64_t rows_in = (oh1 - oh0 - 1) * S + KH, ih0 = oh0 * S - PH;
        // Padding: rows outside the image, and the columns left and right of it.
        for (int64_t r = 0; r < rows_in; ++r) {
          float* dst = in + r * row_floats;
          const bool outside = ih0 + r < 0 || ih0 + r >= H;
          for (int64_t col = 0; col < (outside ? padded_w : PW); ++col) memcpy(dst + col * L, &pad, sizeof(V));
          for (int64_t col = PW + iw_end; !outside && col < padded_w; ++col) memcpy(dst + col * L, &pad, sizeof(V));
        }
        // The image rows the strip reads, eight flattened pixels of eight channels per
        // transpose (lanes h * 8.. of the block: channels c0 + h * 8..).
        const int64_t ih_lo = ih0 < 0 ? 0 : ih0, ih_hi = ih0 + rows_in < H ? ih0 + rows_in : H;
        const int64_t p_end = ih_hi * W;
        for (int h = 0; h * 8 < lanes; ++h) {
          const int64_t sub = lanes - h * 8 < 8 ? lanes - h * 8 : 8;
          const float* xh = x + h * 8 * H * W;
          int64_t p = ih_lo * W, ih = ih_lo, iw = 0;
          auto place = [&](const float* lanes8) {
            if (iw < iw_end) memcpy(in + ((ih - ih0) * padded_w + PW + iw) * L + h * 8, lanes8, sizeof(v8f));
            if (++iw == W) {
              iw = 0;
              ++ih;
            }
          };
          for (; p + 8 <= p_end; p += 8) {
            v8f block[8];
            if (sub == 8) {  // (tested once per block, not per lane)
              for (int l = 0; l < 8; ++l) KILN_LOAD8(block[l], xh + l * H * W + p);
            } else {
              for (int l = 0; l < 8; ++l) {
                if (l < sub) {
                  KILN_LOAD8(block[l], xh + l * H * W + p);
                } else {
                  block[l] = zero8;
                }
              }
            }
            gemm::Transpose8x8(block);
            if (iw + 8 <= iw_end) {
              // All eight in one row of the strip: consecutive pixels, no bookkeeping each.
              float* dst = in + ((ih - ih0) * padded_w + PW + iw) * L + h * 8;
              for (int j = 0; j < 8; ++j) memcpy(dst + j * L, &block[j], sizeof(v8f));
              iw += 8;
              if (iw == W) {
                iw = 0;
                ++ih;
              }
            } else {
              for (int j = 0; j < 8; ++j) place(reinterpret_cast<const float*>(&block[j]));
            }
          }
          for (; p < p_end; ++p) {
            alignas(32) float pixel[8] = {};
            for (int64_t l = 0; l < sub; ++l) pixel[l] = xh[l * H * W + p];
            place(pixel);
          }
        }
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          const float* rows[KH];
          for (int kh = 0; kh < KH; ++kh) rows[kh] = in + ((oh - oh0) * S + kh) * row_floats;
          float* orow = out + (oh - oh0) * OW * L;
          for (int64_t ow = 0; ow < OW; ++ow) {
            V acc = kMaxPool ? pad : bias;
            for (int kh = 0; kh < KH; ++kh) {
              for (int kw = 0; kw < KW; ++kw) {
                V v;
                memcpy(&v, rows[kh] + (ow * S + kw) * L, sizeof(V));
                if constexpr (kMaxPool) {
                  acc = v > acc ? v : acc;
                } else {
                  acc += taps[kh * KW + kw] * v;
                }
              }
            }
            acc = gemm::ReluOrClip(acc, in_registers, lo, hi);
            memcpy(orow + ow * L, &acc, sizeof(V));
          }
        }
        // Back to the planes: the strip's outputs are contiguous in each plane. Activations
        // other than ReLU and Clip first, on the strip while it is in L1 (lanes past the
        // block's channels hold finite values that are never stored).
        const int64_t q0 = oh0 * OW, count = (oh1 - oh0) * OW;
        if (!kMaxPool && in_registers == gemm::Epilogue::kNone)
          ApplyActivation(out, count * L, activation, alpha, beta);
        for (int h = 0; h * 8 < lanes; ++h) {
          const int64_t sub = lanes - h * 8 < 8 ? lanes - h * 8 : 8;
          float* yh = y + h * 8 * OH * OW;
          int64_t q = 0;
          for (; q + 8 <= count; q += 8) {
            v8f block[8];
            for (int j = 0; j < 8; ++j) KILN_LOAD8(block[j], out + (q + j) * L + h * 8);
            gemm::Transpose8x8(block);
            if (sub == 8) {
              for (int l = 0; l < 8; ++l) KILN_STORE8(yh + l * OH * OW + q0 + q, block[l]);
            } else {
              for (int64_t l = 0; l < sub; ++l) KILN_STORE8(yh + l * OH * OW + q0 + q, block[l]);
            }
          }
          for (; q < count; ++q) {
            for (int64_t l = 0; l < sub; ++l) yh[l * OH * OW + q0 + q] = out[q * L + h * 8 + l];
          }
        }
      }
    }
  };
  ParallelFor(call, jobs, 1, body);
  return KILN_KERR_OK;
}

template <int KH, int KW, int S, bool kMaxPool = false>
static int32_t RunDepthwiseBlocked(const kiln_kcall* call, const Window& w, const kiln_activation& act) {
  if (WideVectors()) return RunDepthwiseBlockedLanes<KH, KW, S, kMaxPool, v16f>(call, w, act);
  return RunDepthwiseBlockedLanes<KH, KW, S, kMaxPool, v8f>(call, w, act);
}

struct ConvKernel {
  // inputs: X [N, C, *in], W [OC, C/group, *kernel], B [OC] optional, then as the fuse
  // pass writes them: an input scale (below; may be omitted) and a residual R shaped as Y,
  // added after the bias and before the activation (Relu(Add(Conv(X), R)), ResNet's skip).
  // Parameters: kiln_conv_params (kiln/kernels/conv.h).
  // f32 with at least 4 output channels per group runs as an implicit GEMM; the direct
  // loop nest below serves depthwise convolutions and f64. In artifacts a constant weight
  // may come pre-packed (packed_weights): per group, rows in panels of gemm::kMr,
  // [ceil(OC/group / kMr)][K][kMr], zero past the last row; job_cols, when not 0, is the
  // job width in output positions (--tune's choice).
  // Not inlined: one copy per artifact serves every such Conv (the shapes are runtime
  // values there; the time goes into the shared micro-kernel either way).
  __attribute__((noinline)) static int32_t ImplicitGemm(const kiln_kcall* call, const Window& w, int64_t group,
                                                        const kiln_activation& act, bool packed, int64_t cols);
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const kiln_ktensor& W = call->inputs[1];
    const kiln_ktensor& Y = call->outputs[0];
    KILN_PARAMS(kiln_conv_params, params, call);
    const int64_t group = params.group;
    Window w;
    w.Load(params.window, X, Y);
    const kiln_activation& act = params.activation;
    const int64_t activation = act.code;
    const bool packed = params.packed_weights != 0;
    const int64_t default_cols = WideVectors() ? gemm::kWideConvNc : gemm::kConvNc;
    int64_t cols = params.job_cols != 0 ? params.job_cols : default_cols;
    if (cols < gemm::kNr || cols > gemm::kMaxNc || cols % gemm::kNr != 0) cols = default_cols;
    const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
    const int64_t ic_per_group = in_channels / group, oc_per_group = out_channels / group;
    const T* px = static_cast<const T*>(X.data);
    const T* pw = static_cast<const T*>(W.data);
    const T* pbias = call->num_inputs > 2 ? static_cast<const T*>(call->inputs[2].data) : nullptr;
    // The input scale (inputs[3], [N or 1, C, 1...]): X[n, c] is read as X[n, c] * scale.
    const T* pscale = call->num_inputs > 3 ? static_cast<const T*>(call->inputs[3].data) : nullptr;
    const int64_t scale_batch_stride = pscale != nullptr && call->inputs[3].dims[0] > 1 ? in_channels : 0;
    const T* pres = call->num_inputs > 4 ? static_cast<const T*>(call->inputs[4].data) : nullptr;
    T* py = static_cast<T*>(Y.data);
    const int64_t in_size = w.in_size(), out_size = w.out_size(), kernel_size = w.kernel_size();
    if constexpr (std::is_same_v<T, float> && kBlockedGemm) {
      if (oc_per_group >= 4 && ic_per_group * kernel_size > 0) {
        return ImplicitGemm(call, w, group, act, packed, cols);
      }
      if (packed) return KILN_KERR_UNSUPPORTED;
      const bool depthwise_2d = pscale == nullptr && pres == nullptr && X.rank == 4 && group == in_channels &&
                                group == out_channels && w.dilation[1] == 1 && w.dilation[2] == 1 &&
                                w.in[2] <= kDepthwiseMaxWidth;
      const bool square = w.stride[1] == w.stride[2] && w.kernel[1] == w.kernel[2];
      if (depthwise_2d && square) {
        if (w.kernel[1] == 3 && w.stride[1] == 1 && DepthwiseBlockedFits<3, 3, 1>(w))
          return RunDepthwiseBlocked<3, 3, 1>(call, w, act);
        if (w.kernel[1] == 3 && w.stride[1] == 2 && DepthwiseBlockedFits<3, 3, 2>(w))
          return RunDepthwiseBlocked<3, 3, 2>(call, w, act);
        if (w.kernel[1] == 5 && w.stride[1] == 1 && DepthwiseBlockedFits<5, 5, 1>(w))
          return RunDepthwiseBlocked<5, 5, 1>(call, w, act);
        if (w.kernel[1] == 5 && w.stride[1] == 2 && DepthwiseBlockedFits<5, 5, 2>(w))
          return RunDepthwiseBlocked<5, 5, 2>(call, w, act);
      }
      if (depthwise_2d && w.kernel[1] == 3 && w.kernel[2] == 3 && w.stride[2] == 1)
        return RunDepthwise2D<3, 3, 1>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 3 && w.kernel[2] == 3 && w.stride[2] == 2)
        return RunDepthwise2D<3, 3, 2>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 5 && w.kernel[2] == 5 && w.stride[2] == 1)
        return RunDepthwise2D<5, 5, 1>(call, w, act);
      if (depthwise_2d && w.kernel[1] == 5 && w.kernel[2] == 5 && w.stride[2] == 2)
        return RunDepthwise2D<5, 5, 2>(call, w, act);
    }
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t n = job / out_channels, oc = job % out_channels;
        const int64_t g = oc / oc_per_group;
        T* y = py + job * out_size;
        const T bias = pbias ? pbias[oc] : T(0);
        for (int64_t i = 0; i < out_size; ++i) y[i] = bias;
        for (int64_t ic = 0; ic < ic_per_group; ++ic) {
          const T* x = px + (n * in_channels + g * ic_per_group + ic) * in_size;
          const T* wk = pw + (oc * ic_per_group + ic) * kernel_size;
          const T scale = pscale != nullptr ? pscale[n * scale_batch_stride + g * ic_per_group + ic] : T(1);
          for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
            for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
              for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                const T weight = wk[(kd * w.kernel[1] + kh) * w.kernel[2] + kw];
                for (int64_t od = 0; od < w.out[0]; ++od) {
                  const int64_t id = od * w.stride[0] + kd * w.dilation[0] - w.pad[0];
                  if (id < 0 || id >= w.in[0]) continue;
                  for (int64_t oh = 0; oh < w.out[1]; ++oh) {
                    const int64_t ih = oh * w.stride[1] + kh * w.dilation[1] - w.pad[1];
                    if (ih < 0 || ih >= w.in[1]) continue;
                    const T* xrow = x + (id * w.in[1] + ih) * w.in[2];
                    T* yrow = y + (od * w.out[1] + oh) * w.out[2];
                    // Valid output columns: 0 <= ow*stride + kw*dilation - pad < in.
                    const int64_t shift = kw * w.dilation[2] - w.pad[2];
                    int64_t lo = shift >= 0 ? 0 : (-shift + w.stride[2] - 1) / w.stride[2];
                    int64_t hi = w.in[2] - shift <= 0 ? 0 : (w.in[2] - shift + w.stride[2] - 1) / w.stride[2];
                    if (hi > w.out[2]) hi = w.out[2];
                    if (pscale != nullptr) {
                      // As Conv(Mul(X, scale)) computes it: the product rounded first.
                      for (int64_t ow = lo; ow < hi; ++ow)
                        yrow[ow] += weight * T(xrow[ow * w.stride[2] + shift] * scale);
                    } else if (w.stride[2] == 1) {
                      for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += weight * xrow[ow + shift];
                    } else {
                      for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += weight * xrow[ow * w.stride[2] + shift];
                    }
                  }
                }
              }
            }
          }
        }
        if (pres != nullptr) {
          const T* r = pres + job * out_size;
          for (int64_t i = 0; i < out_size; ++i) y[i] += r[i];
        }
        ApplyActivation(y, out_size, activation, act.alpha, act.beta);
      }
    };
    ParallelFor(call, batch * out_channels, 1, body);
    return KILN_KERR_OK;
  }
};

// Conv as a GEMM per (image, group): C[oc, p] = W[oc, (ic, kd, kh, kw)] · X'[(ic, kd, kh, kw), p]
// where X' (im2col) is never materialised: each packed block of it is gathered from X
// when the core asks for it. Jobs are (image, group, column chunk, row group), row group
// fastest.
int32_t ConvKernel::ImplicitGemm(const kiln_kcall* call, const Window& w, int64_t group, const kiln_activation& act,
                                 bool packed, int64_t cols) {
  const int64_t activation = act.code;
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t icg = in_channels / group, ocg = out_channels / group;
  const int64_t in_size = w.in_size(), out_size = w.out_size(), kernel_size = w.kernel_size();
  const int64_t K = icg * kernel_size;
  const float* px = static_cast<const float*>(X.data);
  const float* pw = static_cast<const float*>(call->inputs[1].data);
  const float* pbias = call->num_inputs > 2 ? static_cast<const float*>(call->inputs[2].data) : nullptr;
  // The input scale (see Run): applied to each packed row of B, i.e. per input channel.
  const float* pscale = call->num_inputs > 3 ? static_cast<const float*>(call->inputs[3].data) : nullptr;
  const int64_t scale_batch_stride = pscale != nullptr && call->inputs[3].dims[0] > 1 ? in_channels : 0;
  const float* pres = call->num_inputs > 4 ? static_cast<const float*>(call->inputs[4].data) : nullptr;  // the residual
  float* py = static_cast<float*>(Y.data);
  const bool pointwise = kernel_size == 1 && w.stride[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 &&
                         w.pad[0] == 0 && w.pad[1] == 0 && w.pad[2] == 0 && in_size == out_size;
  // Column chunks of equal width (a multiple of kNr): the pool partitions jobs statically,
  // so a short last chunk (784 positions as 3 x 256 + 16) left one of two threads with 272
  // columns against 512. With a pool and a real im2col (a window larger than 1x1), at least
  // two chunks once there are 128 positions, so two threads pack different halves of it
  // rather than each packing all of it (1x1 convs copy B cheaply and would stream their
  // weights once per chunk instead: ResNet-50's 14x14 ones measured 20 % slower split).
  const bool parallel = call->exec != nullptr && call->exec->parallel_for != nullptr;
  int64_t chunks = (out_size + cols - 1) / cols;
  if (parallel && chunks == 1 && out_size >= 128 && kernel_size > 1) chunks = 2;
  cols = ((out_size + chunks - 1) / chunks + gemm::kNr - 1) / gemm::kNr * gemm::kNr;
  chunks = (out_size + cols - 1) / cols;
  const gemm::RowSplit split = gemm::SplitRows(call, ocg, chunks * batch * group);
  const int64_t groups = split.groups;
  const int64_t kk_hw = w.kernel[1] * w.kernel[2];
  auto jobs = [=](int64_t begin, int64_t end) {
    // Jobs are numbered row group fastest, and a range's consecutive row groups of one
    // chunk run as one Block, so B (the chunk's im2col) is packed once per thread rather
    // than once per row group: with 2 threads, ResNet-50's stride-2 3x3 conv into 7x7
    // packed its 4608 x 49 im2col 8 times (one chunk split into 8 row groups) and ran 1.09x
    // faster than on one thread.
    for (int64_t job = begin; job < end;) {
      const int64_t rg = job % groups, cc = job / groups % chunks, g = job / (groups * chunks) % group;
      const int64_t n = job / (groups * chunks * group);
      const int64_t taken = (job - rg + groups < end ? job - rg + groups : end) - job;  // row groups run together
      job += taken;
      const float* x = px + (n * in_channels + g * icg) * in_size;
      const float* scale = pscale != nullptr ? pscale + n * scale_batch_stride + g * icg : nullptr;
      float* c = py + (n * out_channels + g * ocg) * out_size;
      const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + taken);
      const int64_t n0 = cc * cols, n1 = n0 + cols < out_size ? n0 + cols : out_size;
      // Where each output position of the chunk starts reading: its output column, and
      // the input coordinates of the window's first tap.
      int64_t ow0[gemm::kMaxNc], d0[gemm::kMaxNc], h0[gemm::kMaxNc], w0[gemm::kMaxNc];
      // (Divided once, then stepped: three divisions per position cost a quarter of a
      // stride-2 stem conv's packing time.)
      int64_t ow = n0 % w.out[2], oh = n0 / w.out[2] % w.out[1], od = n0 / (w.out[2] * w.out[1]);
      for (int64_t j = 0; j < n1 - n0; ++j) {
        ow0[j] = ow;
        d0[j] = od * w.stride[0] - w.pad[0];
        h0[j] = oh * w.stride[1] - w.pad[1];
        w0[j] = ow * w.stride[2] - w.pad[2];
        if (++ow == w.out[2]) {
          ow = 0;
          if (++oh == w.out[1]) {
            oh = 0;
            ++od;
          }
        }
      }
      // Packs rows k0.. of the implicit im2col matrix. Output positions of one output row
      // read one input row: a strided (for stride 1, contiguous) run, zero outside.
      auto pack = [&](int64_t k0, int64_t kb, int64_t c0, int64_t nb, float* dst, int64_t* ldb) -> const float* {
        // X is already the B matrix of a 1x1 Conv: [input channels, positions]. With few
        // output channels, packing would cost as much as the product; with many, the
        // packed copy pays for itself by staying in cache.
        if (pointwise && m1 - m0 <= 32 && scale == nullptr) {
          *ldb = in_size;
          return x + k0 * in_size + c0;
        }
        for (int64_t k = 0; k < kb; ++k) {
          float* out = dst + k * *ldb;
          const int64_t kidx = k0 + k, ic = kidx / kernel_size, r = kidx % kernel_size;
          const float* xin = x + ic * in_size;
          if (pointwise && scale != nullptr) {
            const float s = scale[ic];
            for (int64_t j = 0; j < nb; ++j) out[j] = xin[c0 + j] * s;
            continue;
          }
          if (pointwise) {
            memcpy(out, xin + c0, sizeof(float) * nb);
            continue;
          }
          const int64_t kd = r / kk_hw, kh = r / w.kernel[2] % w.kernel[1], kw = r % w.kernel[2];
          const int64_t dd = kd * w.dilation[0], dh = kh * w.dilation[1], dw = kw * w.dilation[2];
          const int64_t sw = w.stride[2];
          for (int64_t j = 0; j < nb;) {
            const int64_t run = w.out[2] - ow0[j] < nb - j ? w.out[2] - ow0[j] : nb - j;
            const int64_t id = d0[j] + dd, ih = h0[j] + dh;
            float* o = out + j;
            if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
              for (int64_t q = 0; q < run; ++q) o[q] = 0.f;
            } else {
              const float* src = xin + (id * w.in[1] + ih) * w.in[2];
              const int64_t iw0 = w0[j] + dw;
              // Valid q: 0 <= iw0 + q*sw < in width.
              int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
              int64_t hi = w.in[2] - iw0 <= 0 ? 0 : (w.in[2] - iw0 + sw - 1) / sw;
              if (lo > run) lo = run;
              if (hi > run) hi = run;
              if (hi < lo) hi = lo;
              for (int64_t q = 0; q < lo; ++q) o[q] = 0.f;
              if (sw == 1) {
                memcpy(o + lo, src + iw0 + lo, sizeof(float) * (hi - lo));
              } else if (sw == 2) {
                // A constant stride as explicit vectors: two loads of eight and a shuffle
                // of the even lanes per eight outputs. (A runtime stride gathers element by
                // element, which costs as much as the product for stride-2 layers with few
                // output channels, CNN stems; left to the vectorizer, runs shorter than 68
                // stayed scalar, and rows of 112 split by 256-wide jobs often are.) A
                // vector step reads 16 floats, so it runs only while they lie in the row.
                const float* s2 = src + iw0;
                int64_t q = lo;
                for (; q + 8 <= hi && iw0 + 2 * q + 16 <= w.in[2]; q += 8) {
                  gemm::v8f a, b;
                  KILN_LOAD8(a, s2 + 2 * q);
                  KILN_LOAD8(b, s2 + 2 * q + 8);
                  const gemm::v8f even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
                  KILN_STORE8(o + q, even);
                }
                for (; q < hi; ++q) o[q] = s2[2 * q];
              } else {
                for (int64_t q = lo; q < hi; ++q) o[q] = src[iw0 + q * sw];
              }
              for (int64_t q = hi; q < run; ++q) o[q] = 0.f;
              if (scale != nullptr) {
                for (int64_t q = lo; q < hi; ++q) o[q] *= scale[ic];  // the image, not its zero padding
              }
            }
            j += run;
          }
        }
        return dst;
      };
      // Bias, residual, ReLU and Clip happen in the GEMM core's epilogue (in registers, or
      // in L1 with a residual); other activations after.
      gemm::Epilogue ep;
      ep.row_bias = pbias != nullptr ? pbias + g * ocg : nullptr;
      if (pres != nullptr) {
        ep.residual = pres + (n * out_channels + g * ocg) * out_size;
        ep.residual_ld = out_size;
      }
      if (activation == KILN_UNARY_RELU) ep.kind = gemm::Epilogue::kRelu;
      if (activation == KILN_UNARY_CLIP) {
        ep.kind = gemm::Epilogue::kClip;
        ep.lo = static_cast<float>(act.alpha);
        ep.hi = static_cast<float>(act.beta);
      }
      if (packed) {
        const int64_t panels = (ocg + gemm::kMr - 1) / gemm::kMr;
        gemm::Block(m0, m1, n0, n1, K, pw + g * panels * gemm::kMr * K, K, 1, c, out_size, pack, gemm::kMr * K, &ep);
      } else {
        gemm::Block(m0, m1, n0, n1, K, pw + g * ocg * K, K, 1, c, out_size, pack, 0, &ep);
      }
      if (ep.kind == gemm::Epilogue::kNone) {
        for (int64_t oc = m0; oc < m1; ++oc) {
          ApplyActivation(c + oc * out_size + n0, n1 - n0, activation, act.alpha, act.beta);
        }
      }
    }
  };
  ParallelFor(call, batch * group * groups * chunks, 1, jobs);
  return KILN_KERR_OK;
}

struct ConvTransposeKernel {
  // inputs: X [N, C, *in], W [C, OC/group, *kernel], B optional. Parameters:
  // kiln_conv_params' group and window, whose pads apply to the full (uncropped) output.
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const kiln_ktensor& W = call->inputs[1];
    const kiln_ktensor& Y = call->outputs[0];
    KILN_PARAMS(kiln_conv_params, params, call);
    const int64_t group = params.group;
    Window w;
    w.Load(params.window, X, Y);
    const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
    const int64_t ic_per_group = in_channels / group, oc_per_group = out_channels / group;
    const T* px = static_cast<const T*>(X.data);
    const T* pw = static_cast<const T*>(W.data);
    const T* pbias = call->num_inputs > 2 ? static_cast<const T*>(call->inputs[2].data) : nullptr;
    T* py = static_cast<T*>(Y.data);
    const int64_t in_size = w.in_size(), out_size = w.out_size(), kernel_size = w.kernel_size();
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t oc = 0; oc < out_channels; ++oc) {
        T* y = py + (n * out_channels + oc) * out_size;
        const T bias = pbias ? pbias[oc] : T(0);
        for (int64_t i = 0; i < out_size; ++i) y[i] = bias;
        const int64_t g = oc / oc_per_group, ocg = oc % oc_per_group;
        for (int64_t icg = 0; icg < ic_per_group; ++icg) {
          const int64_t ic = g * ic_per_group + icg;
          const T* x = px + (n * in_channels + ic) * in_size;
          const T* wk = pw + (ic * oc_per_group + ocg) * kernel_size;
          for (int64_t id = 0; id < w.in[0]; ++id)
            for (int64_t ih = 0; ih < w.in[1]; ++ih)
              for (int64_t iw = 0; iw < w.in[2]; ++iw) {
                const T xv = x[(id * w.in[1] + ih) * w.in[2] + iw];
                for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
                  const int64_t od = id * w.stride[0] + kd * w.dilation[0] - w.pad[0];
                  if (od < 0 || od >= w.out[0]) continue;
                  for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
                    const int64_t oh = ih * w.stride[1] + kh * w.dilation[1] - w.pad[1];
                    if (oh < 0 || oh >= w.out[1]) continue;
                    for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                      const int64_t ow = iw * w.stride[2] + kw * w.dilation[2] - w.pad[2];
                      if (ow < 0 || ow >= w.out[2]) continue;
                      y[(od * w.out[1] + oh) * w.out[2] + ow] += xv * wk[(kd * w.kernel[1] + kh) * w.kernel[2] + kw];
                    }
                  }
                }
              }
        }
      }
    }
    return KILN_KERR_OK;
  }
};

// 2-D f32 max pooling, and average pooling that does not count padding, with dilation 1
// and no Indices output: the common CNN case. Per output row, each (kh, kw) tap is one
// pass over the row's outputs whose input column is inside the image, so the inner loop
// has no bounds checks and vectorizes (a strided load for stride 2). Max keeps the
// reference's rule (a NaN never wins); the average sums in f32.
// Not in the reference interpreter's build (kFastKernels), so validation compares this
// against the plain loop below.

static int32_t RunPool2D(const kiln_kcall* call, const Window& w, bool is_max) {
  const float* px = static_cast<const float*>(call->inputs[0].data);
  float* py = static_cast<float*>(call->outputs[0].data);
  const int64_t planes = call->inputs[0].dims[0] * call->inputs[0].dims[1];
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2];
  const int64_t KH = w.kernel[1], KW = w.kernel[2], SH = w.stride[1], SW = w.stride[2], PH = w.pad[1], PW = w.pad[2];
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const float* x = px + plane * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        float* __restrict out = py + (plane * OH + oh) * OW;
        const int64_t ih0 = oh * SH - PH;
        const int64_t kh_lo = ih0 < 0 ? -ih0 : 0, kh_hi = KH < H - ih0 ? KH : H - ih0;
        for (int64_t ow = 0; ow < OW; ++ow) out[ow] = is_max ? -INFINITY : 0.f;
        for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
          const float* row = x + (ih0 + kh) * W;
          for (int64_t kw = 0; kw < KW; ++kw) {
            // Outputs whose input column ow * SW + kw - PW lies in [0, W).
            const int64_t shift = kw - PW;
            int64_t ow_lo = shift >= 0 ? 0 : (-shift + SW - 1) / SW;
            int64_t ow_hi = W - 1 - shift < 0 ? 0 : (W - 1 - shift) / SW + 1;
            if (ow_hi > OW) ow_hi = OW;
            const float* __restrict src = row + shift;
            if (is_max) {
              for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
                const float v = src[ow * SW];
                out[ow] = v > out[ow] ? v : out[ow];
              }
            } else {
              for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow] += src[ow * SW];
            }
          }
        }
        if (!is_max) {
          const int64_t rows = kh_hi > kh_lo ? kh_hi - kh_lo : 0;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t iw0 = ow * SW - PW;
            const int64_t lo = iw0 < 0 ? -iw0 : 0, hi = KW < W - iw0 ? KW : W - iw0;
            const int64_t count = rows * (hi > lo ? hi - lo : 0);
            out[ow] = count ? out[ow] / static_cast<float>(count) : 0.f;
          }
        }
      }
    }
  };
  ParallelFor(call, planes, 1, body);
  return KILN_KERR_OK;
}

// 2-D f32 max pooling with a KW-wide window at column stride 2 (3x3 and 2x2 at stride 2:
// ResNet, SqueezeNet, VGG) on NCHW planes, with no transposes: a window's max is the max
// over its columns of each column's max over its rows. Per output row, the max of its input
// rows goes into a row buffer whose pad columns (and the columns a ceil_mode window reads
// past the image) hold -inf; each output is then the max of KW consecutive buffer entries,
// the even and odd entries split out of two vectors by shuffles. Rows at least one vector
// wide end with a vector that overlaps the one before it (a max computed twice is the same
// max), so there is no scalar remainder. Window height, row stride and pads are run-time.
// A NaN never wins, as in the reference loop: each max starts from -inf and takes a value
// only when it is greater.
// Rows of 16 outputs or more (so W >= 31: one vector of either width fits) take this path.
// Measured (single MaxPool nodes, Zen 4, median of 3 x 500 runs, against
// RunDepthwiseBlocked's max pool, which transposes to 16 channels per vector and back):
// 64x111x111 (SqueezeNet) 0.19 -> 0.11 ms at 1 thread, 0.095 -> 0.086 at 2; 64x112x112
// pad 1 (ResNet) 0.17 -> 0.11 and 0.091 -> 0.059; 128x55x55 0.080 -> 0.060 and 0.043 -> 0.038.
constexpr int64_t kPoolRowFloats = 4096;  // the row buffer: padded input rows this wide at most

template <typename V, int KW>
__attribute__((noinline)) static int32_t RunMaxPoolRows(const kiln_kcall* call, const Window& w) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  static_assert((L == 8 || L == 16) && (KW == 2 || KW == 3), "8 or 16 lanes, 2- or 3-wide windows");
  const float* px = static_cast<const float*>(call->inputs[0].data);
  float* py = static_cast<float*>(call->outputs[0].data);
  const int64_t planes = call->inputs[0].dims[0] * call->inputs[0].dims[1];
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2];
  const int64_t KH = w.kernel[1], SH = w.stride[1], PH = w.pad[1], PW = w.pad[2];
  const int64_t padded_w = (OW - 1) * 2 + KW;
  auto even = [](V a, V b) {
    if constexpr (L == 16) {
      return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    } else {
      return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
    }
  };
  auto odd = [](V a, V b) {
    if constexpr (L == 16) {
      return __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    } else {
      return __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
    }
  };
  auto body = [=](int64_t begin, int64_t end) {
    alignas(64) float buf[kPoolRowFloats];
    for (int64_t c = 0; c < PW; ++c) buf[c] = -INFINITY;
    for (int64_t c = PW + W; c < padded_w; ++c) buf[c] = -INFINITY;
    float* row = buf + PW;
    V ninf;
    KILN_SPLAT_V(V, ninf, -INFINITY);
    for (int64_t plane = begin; plane < end; ++plane) {
      const float* x = px + plane * H * W;
      float* y = py + plane * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t ih0 = oh * SH - PH;
        const int64_t lo = ih0 < 0 ? 0 : ih0, hi = ih0 + KH < H ? ih0 + KH : H;
        for (int64_t iw = 0;; iw += L) {
          if (iw + L > W) iw = W - L;
          V m = ninf;
          for (int64_t ih = lo; ih < hi; ++ih) {
            V v;
            memcpy(&v, x + ih * W + iw, sizeof(V));
            m = v > m ? v : m;
          }
          memcpy(row + iw, &m, sizeof(V));
          if (iw + L >= W) break;
        }
        float* out = y + oh * OW;
        for (int64_t ow = 0;; ow += L) {
          if (ow + L > OW) ow = OW - L;
          V a0, a1;
          memcpy(&a0, buf + ow * 2, sizeof(V));
          memcpy(&a1, buf + ow * 2 + L, sizeof(V));
          const V e = even(a0, a1), o = odd(a0, a1);
          V m = o > e ? o : e;
          if constexpr (KW == 3) {
            memcpy(&a0, buf + ow * 2 + 2, sizeof(V));
            memcpy(&a1, buf + ow * 2 + 2 + L, sizeof(V));
            const V e2 = even(a0, a1);
            m = e2 > m ? e2 : m;
          }
          memcpy(out + ow, &m, sizeof(V));
          if (ow + L >= OW) break;
        }
      }
    }
  };
  ParallelFor(call, planes, 1, body);
  return KILN_KERR_OK;
}

template <int KW>
static int32_t RunMaxPoolRowsLanes(const kiln_kcall* call, const Window& w) {
  if (WideVectors()) return RunMaxPoolRows<v16f, KW>(call, w);
  return RunMaxPoolRows<gemm::v8f, KW>(call, w);
}

// Padded input rows at most this wide take RunDepthwiseBlocked's max pool.
constexpr int64_t kPoolBlockedMaxWidth = 128;
static_assert(kDepthwiseStripFloats >= kPoolBlockedMaxWidth * 16 * 3 &&
                  kDepthwiseOutFloats >= kPoolBlockedMaxWidth / 2 * 16,
              "a strip holds at least one pooled row");

struct PoolKernel {
  // Parameters: kiln_pool_params (kiln/kernels/pool.h).
  // Output 1 (MaxPool Indices) is filled when present, row-major over N, C and space.
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const kiln_ktensor& Y = call->outputs[0];
    KILN_PARAMS(kiln_pool_params, params, call);
    const int op = static_cast<int>(params.op);
    Window w;
    w.Load(params.window, X, Y);
    const bool count_include_pad = params.count_include_pad != 0;
    if constexpr (std::is_same_v<T, float> && kFastKernels) {
      const bool plain_2d = X.rank == 4 && w.dilation[1] == 1 && w.dilation[2] == 1 && call->num_outputs == 1;
      // Max pooling at column stride 2 with rows of 16 outputs or more: the row walk.
      if (plain_2d && op == KILN_POOL_MAX && w.stride[2] == 2 && (w.kernel[2] == 2 || w.kernel[2] == 3) &&
          w.pad[1] >= 0 && w.pad[2] >= 0 && w.out[2] >= 16 && (w.out[2] - 1) * 2 + w.kernel[2] <= kPoolRowFloats &&
          w.pad[2] + w.in[2] <= kPoolRowFloats) {
        return w.kernel[2] == 3 ? RunMaxPoolRowsLanes<3>(call, w) : RunMaxPoolRowsLanes<2>(call, w);
      }
      // Narrower 3x3 stride-2 max pooling: 8 or 16 channels per vector, as depthwise
      // convolutions go (256x27x27: 0.042 ms against 0.048 for the row walk).
      if (plain_2d && op == KILN_POOL_MAX && w.kernel[1] == 3 && w.kernel[2] == 3 && w.stride[1] == 2 &&
          w.stride[2] == 2 && DepthwiseBlockedFits<3, 3, 2>(w, kPoolBlockedMaxWidth)) {
        return RunDepthwiseBlocked<3, 3, 2, true>(call, w, kiln_activation{-1, 0, 0});
      }
      if (plain_2d && (op == KILN_POOL_MAX || (op == KILN_POOL_AVERAGE && !count_include_pad))) {
        return RunPool2D(call, w, op == KILN_POOL_MAX);
      }
    }
    const double p = params.p;
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(Y.data);
    int64_t* indices = call->num_outputs > 1 ? static_cast<int64_t*>(call->outputs[1].data) : nullptr;
    const int64_t planes = X.dims[0] * X.dims[1];
    const int64_t in_size = w.in_size(), out_size = w.out_size();
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* x = px + plane * in_size;
        for (int64_t od = 0; od < w.out[0]; ++od)
          for (int64_t oh = 0; oh < w.out[1]; ++oh)
            for (int64_t ow = 0; ow < w.out[2]; ++ow) {
              double acc = op == KILN_POOL_MAX ? -INFINITY : 0.0;
              int64_t arg = 0, count = 0;
              for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
                const int64_t id = od * w.stride[0] + kd * w.dilation[0] - w.pad[0];
                for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
                  const int64_t ih = oh * w.stride[1] + kh * w.dilation[1] - w.pad[1];
                  for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                    const int64_t iw = ow * w.stride[2] + kw * w.dilation[2] - w.pad[2];
                    const bool inside = id >= 0 && id < w.in[0] && ih >= 0 && ih < w.in[1] && iw >= 0 && iw < w.in[2];
                    if (!inside) {
                      // Padding counts for the average only inside the padded extent.
                      if (count_include_pad && id < w.in[0] + w.pad[0] && ih < w.in[1] + w.pad[1] &&
                          iw < w.in[2] + w.pad[2])
                        ++count;
                      continue;
                    }
                    const int64_t at = (id * w.in[1] + ih) * w.in[2] + iw;
                    const double v = static_cast<double>(x[at]);
                    ++count;
                    if (op == KILN_POOL_MAX) {
                      if (v > acc) {
                        acc = v;
                        arg = at;
                      }
                    } else if (op == KILN_POOL_LP) {
                      acc += pow(v < 0 ? -v : v, p);
                    } else {
                      acc += v;
                    }
                  }
                }
              }
              const int64_t o = (od * w.out[1] + oh) * w.out[2] + ow;
              if (op == KILN_POOL_AVERAGE) acc = count ? acc / static_cast<double>(count) : 0.0;
              if (op == KILN_POOL_LP) acc = pow(acc, 1.0 / p);
              py[plane * out_size + o] = static_cast<T>(acc);
              if (indices) indices[plane * out_size + o] = plane * in_size + arg;
            }
      }
    };
    ParallelFor(call, planes, 1, body);
    return KILN_KERR_OK;
  }
};

struct BatchNormKernel {
  // inputs: X, scale, bias, mean, var; parameters: kiln_norm_params' epsilon
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const T* scale = static_cast<const T*>(call->inputs[1].data);
    const T* bias = static_cast<const T*>(call->inputs[2].data);
    const T* mean = static_cast<const T*>(call->inputs[3].data);
    const T* var = static_cast<const T*>(call->inputs[4].data);
    KILN_PARAMS(kiln_norm_params, params, call);
    const double eps = params.epsilon;
    const int64_t batch = X.dims[0], channels = X.rank > 1 ? X.dims[1] : 1;
    int64_t spatial = 1;
    for (int32_t i = 2; i < X.rank; ++i) spatial *= X.dims[i];
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < channels; ++c) {
        const double inv = 1.0 / sqrt(static_cast<double>(var[c]) + eps);
        const T a = static_cast<T>(scale[c] * inv);
        const T b = static_cast<T>(bias[c] - mean[c] * scale[c] * inv);
        const T* x = px + (n * channels + c) * spatial;
        T* y = py + (n * channels + c) * spatial;
        for (int64_t i = 0; i < spatial; ++i) y[i] = a * x[i] + b;
      }
    }
    return KILN_KERR_OK;
  }
};

struct InstanceNormKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    const T* scale = static_cast<const T*>(call->inputs[1].data);
    const T* bias = static_cast<const T*>(call->inputs[2].data);
    KILN_PARAMS(kiln_norm_params, params, call);
    const double eps = params.epsilon;
    const int64_t channels = X.dims[1];
    int64_t spatial = 1;
    for (int32_t i = 2; i < X.rank; ++i) spatial *= X.dims[i];
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    for (int64_t plane = 0; plane < X.dims[0] * channels; ++plane) {
      const T* x = px + plane * spatial;
      T* y = py + plane * spatial;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < spatial; ++i) mean += x[i];
      mean /= static_cast<double>(spatial);
      for (int64_t i = 0; i < spatial; ++i) var += (x[i] - mean) * (x[i] - mean);
      var /= static_cast<double>(spatial);
      const double inv = 1.0 / sqrt(var + eps);
      const int64_t c = plane % channels;
      for (int64_t i = 0; i < spatial; ++i) y[i] = static_cast<T>((x[i] - mean) * inv * scale[c] + bias[c]);
    }
    return KILN_KERR_OK;
  }
};

struct LayerNormKernel {
  // inputs: X, Scale, B (optional); parameters: kiln_norm_params' axis and epsilon.
  // Outputs: Y, Mean and InvStdDev (optional, shape [outer..., 1...]).
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    KILN_PARAMS(kiln_norm_params, params, call);
    const int64_t axis = params.axis;
    const double eps = params.epsilon;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= X.dims[i];
    for (int32_t i = static_cast<int32_t>(axis); i < X.rank; ++i) inner *= X.dims[i];
    const kiln_ktensor& S = call->inputs[1];
    const T* scale = static_cast<const T*>(S.data);
    const bool has_bias = call->num_inputs > 2 && call->inputs[2].data != nullptr;
    const T* bias = has_bias ? static_cast<const T*>(call->inputs[2].data) : nullptr;
    const int64_t scale_n = Numel(S), bias_n = has_bias ? Numel(call->inputs[2]) : 1;
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    T* mean_out = call->num_outputs > 1 && call->outputs[1].data ? static_cast<T*>(call->outputs[1].data) : nullptr;
    T* inv_out = call->num_outputs > 2 && call->outputs[2].data ? static_cast<T*>(call->outputs[2].data) : nullptr;
    if constexpr (std::is_same_v<T, float> && kFastKernels) {
      // Artifacts, f32 with per-element scale and bias (the fuse pass's LayerNorm): sums in
      // f32 over 16 partial lanes (vectorizable without reassociation), mean first, then
      // the variance of x - mean (no cancellation), then one pass writing y.
      if (scale_n == inner && bias_n == (has_bias ? inner : 1)) {
        auto fast = [=](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            const float* x = px + o * inner;
            float* y = py + o * inner;
            const float mean = SumRow16(x, inner, [](float v) { return v; }) / static_cast<float>(inner);
            const float squares = SumRow16(x, inner, [mean](float v) { return (v - mean) * (v - mean); });
            const float inv = 1.f / sqrtf(squares / static_cast<float>(inner) + static_cast<float>(eps));
            if (bias != nullptr) {
              for (int64_t i = 0; i < inner; ++i) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
            } else {
              for (int64_t i = 0; i < inner; ++i) y[i] = (x[i] - mean) * inv * scale[i];
            }
            if (mean_out) mean_out[o] = mean;
            if (inv_out) inv_out[o] = inv;
          }
        };
        ParallelFor(call, outer, 8, fast);
        return KILN_KERR_OK;
      }
    }
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T* x = px + o * inner;
        T* y = py + o * inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += x[i];
        mean /= static_cast<double>(inner);
        for (int64_t i = 0; i < inner; ++i) var += (x[i] - mean) * (x[i] - mean);
        var /= static_cast<double>(inner);
        const double inv = 1.0 / sqrt(var + eps);
        for (int64_t i = 0; i < inner; ++i) {
          double v = (x[i] - mean) * inv * static_cast<double>(scale[i % scale_n]);
          if (bias) v += static_cast<double>(bias[i % bias_n]);
          y[i] = static_cast<T>(v);
        }
        if (mean_out) mean_out[o] = static_cast<T>(mean);
        if (inv_out) inv_out[o] = static_cast<T>(inv);
      }
    };
    ParallelFor(call, outer, 8, body);
    return KILN_KERR_OK;
  }
};

struct LrnKernel {
  // Parameters: kiln_norm_params' size, alpha, beta and bias.
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& X = call->inputs[0];
    KILN_PARAMS(kiln_norm_params, params, call);
    const int64_t size = params.size;
    const double alpha = params.alpha, beta = params.beta, bias = params.bias;
    const int64_t channels = X.dims[1];
    int64_t spatial = 1;
    for (int32_t i = 2; i < X.rank; ++i) spatial *= X.dims[i];
    const T* px = static_cast<const T*>(X.data);
    T* py = static_cast<T*>(call->outputs[0].data);
    const int64_t before = (size - 1) / 2, after = size - 1 - before;
    for (int64_t n = 0; n < X.dims[0]; ++n)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t s = 0; s < spatial; ++s) {
          double square_sum = 0;
          for (int64_t k = c - before; k <= c + after; ++k) {
            if (k < 0 || k >= channels) continue;
            const double v = px[(n * channels + k) * spatial + s];
            square_sum += v * v;
          }
          const int64_t at = (n * channels + c) * spatial + s;
          py[at] = static_cast<T>(px[at] / pow(bias + alpha / static_cast<double>(size) * square_sum, beta));
        }
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_NUMERIC_KERNEL(matmul, MatMulKernel, outputs[0].dtype)
KILN_NUMERIC_KERNEL(gemm, GemmKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(conv, ConvKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(conv_transpose, ConvTransposeKernel, outputs[0].dtype)
KILN_NUMERIC_KERNEL(pool, PoolKernel, inputs[0].dtype)
KILN_FLOAT_KERNEL(batch_norm, BatchNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(instance_norm, InstanceNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(layer_norm, LayerNormKernel, outputs[0].dtype)
KILN_FLOAT_KERNEL(lrn, LrnKernel, outputs[0].dtype)
