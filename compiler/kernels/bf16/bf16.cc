// The bf16 products (`--precision bf16`): MatMul/Gemm with a constant B and Conv as an
// implicit GEMM, both operands rounded to bf16 (nearest even), products summed in f32 by
// vdpbf16ps (AVX512-BF16: two bf16 products added into each f32 lane). The weights come
// pre-packed in bf16 at compile time (ops/bf16_ops.cc); activations are rounded while they
// are packed. Lowering calls these kernels only for targets with avx512bf16; elsewhere the
// kernels answer KILN_KERR_UNSUPPORTED (and their vector code folds away: Bf16Dot()).
//
// Operands travel as 32-bit words, each a pair of bf16 for k = 2p (low half) and 2p + 1
// (high half), the form vdpbf16ps reads. A is in panels of kRows rows, [K/2][kRows] words
// per panel; B in panels of kCols columns, [K/2][kCols] words per panel; both zero past
// the edges (an odd K's last pair has a zero high half). The micro-kernel keeps a 12 x 32
// tile of C in 24 registers and reads one contiguous stream of each.
#include <cstring>

#include "gemm_core.h"
#include "im2col.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "kernel_window.h"
#include "kiln/kernels/conv.h"
#include "kiln/kernels/gemm.h"
#include "unary_math.h"
#include "winograd_core.h"

#ifndef KILN_REFERENCE_KERNELS
#include <immintrin.h>
#endif

using namespace kiln_kernels;

#ifndef KILN_REFERENCE_KERNELS
// Whether the target has vdpbf16ps; codegen defines kiln_bf16_dot per target as it does
// kiln_int8_dot, so on other targets the vector code below is dead and never selected.
extern "C" const int32_t kiln_bf16_dot;
#endif

namespace {

constexpr int kRows = 12;      // rows of C per micro-kernel and per A panel
constexpr int64_t kCols = 32;  // columns of C per micro-kernel and per B panel (two 16-lane halves)
// K block (elements, even): one B panel's block (kKc/2 x 32 words, 16 KiB) and one A panel's
// (6 KiB) stay in Zen 4's 32 KiB L1 together (at 512 the B block alone would fill it).
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 240;  // rows of A per block (a multiple of kRows)
constexpr int64_t kMaxJobCols = 256;

// f32 -> bf16 bits, rounded to nearest even; a NaN stays a (quiet) NaN.
inline uint32_t RoundedHigh(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
// The word of the pair (lo: k even, hi: k + 1).
inline uint32_t PairWord(float lo, float hi) { return RoundedHigh(hi) | (RoundedHigh(lo) >> 16); }

// What a full tile does after its last K block, in registers: add a per-row bias (a Conv's)
// or a per-column bias (a MatMul's), a residual laid out as C, then ReLU or Clip (as
// gemm::Epilogue). Pointers are at the tile's first row and column; null: none.
struct TileEpilogue {
  const float* row_bias = nullptr;
  const float* col_bias = nullptr;
  const float* residual = nullptr;
  int64_t residual_ld = 0;
  int32_t kind = gemm::Epilogue::kNone;
  float lo = 0.f, hi = 0.f;
};

#ifndef KILN_REFERENCE_KERNELS
inline bool Bf16Dot() { return kiln_bf16_dot != 0; }

// C[0..MR, 0..32) (+)= A panel · B panel over kp pairs: A's pair (i, p) is a[p * kRows + i]
// (one stream at constant offsets: reading kRows row streams instead, as MatMul's A lies,
// measured 25 % slower on 128x768x3072), B's columns q at b[p * kCols + q].
template <int MR>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline void Tile(int64_t kp, const uint32_t* a,
                                                                              const uint32_t* b, float* c, int64_t ldc,
                                                                              bool accumulate, const TileEpilogue* ep) {
  __m512 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc1[i] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kCols);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kCols + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[p * kRows + i]));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
  }
  if (ep != nullptr) {
    for (int i = 0; i < MR; ++i) {
      if (ep->row_bias != nullptr) {
        const __m512 bias = _mm512_set1_ps(ep->row_bias[i]);
        acc0[i] = _mm512_add_ps(acc0[i], bias);
        acc1[i] = _mm512_add_ps(acc1[i], bias);
      }
      if (ep->col_bias != nullptr) {
        acc0[i] = _mm512_add_ps(acc0[i], _mm512_loadu_ps(ep->col_bias));
        acc1[i] = _mm512_add_ps(acc1[i], _mm512_loadu_ps(ep->col_bias + 16));
      }
      if (ep->residual != nullptr) {
        acc0[i] = _mm512_add_ps(acc0[i], _mm512_loadu_ps(ep->residual + i * ep->residual_ld));
        acc1[i] = _mm512_add_ps(acc1[i], _mm512_loadu_ps(ep->residual + i * ep->residual_ld + 16));
      }
    }
    // vmaxps/vminps return the second operand when either is NaN: a NaN sum becomes 0 under
    // ReLU and stays NaN under Clip, as gemm::Epilogue's comparisons have it.
    if (ep->kind == gemm::Epilogue::kRelu) {
      const __m512 zero = _mm512_setzero_ps();
      for (int i = 0; i < MR; ++i) {
        acc0[i] = _mm512_max_ps(acc0[i], zero);
        acc1[i] = _mm512_max_ps(acc1[i], zero);
      }
    } else if (ep->kind == gemm::Epilogue::kClip) {
      const __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi);
      for (int i = 0; i < MR; ++i) {
        acc0[i] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc0[i]));
        acc1[i] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc1[i]));
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

// Not inlined: one copy per artifact for every bf16 node.
__attribute__((target("avx512f,avx512bf16"), noinline)) void MicroKernel(int rows, int64_t kp, const uint32_t* a,
                                                                         const uint32_t* b, float* c, int64_t ldc,
                                                                         bool accumulate, const TileEpilogue* ep) {
  switch (rows) {
#define KILN_BF16_CASE(R) \
  case R: Tile<R>(kp, a, b, c, ldc, accumulate, ep); break
    KILN_BF16_CASE(12);
    KILN_BF16_CASE(11);
    KILN_BF16_CASE(10);
    KILN_BF16_CASE(9);
    KILN_BF16_CASE(8);
    KILN_BF16_CASE(7);
    KILN_BF16_CASE(6);
    KILN_BF16_CASE(5);
    KILN_BF16_CASE(4);
    KILN_BF16_CASE(3);
    KILN_BF16_CASE(2);
    default: Tile<1>(kp, a, b, c, ldc, accumulate, ep); break;
#undef KILN_BF16_CASE
  }
}
#else
inline bool Bf16Dot() { return false; }
void MicroKernel(int, int64_t, const uint32_t*, const uint32_t*, float*, int64_t, bool, const TileEpilogue*) {}
#endif

// C[m0..m1, n0..n1) = A · B over K (m0 a multiple of kRows; n1 - n0 <= kMaxJobCols where
// pack_b packs into buf). pack_a(k0, kb, i0, i1, buf, &stride) returns the A panels of rows
// i0..i1 over k0..k0+kb (panel q, rows i0 + kRows q.., at result + q * stride); pack_b(k0, kb, buf, &stride) the B
// panels of the job's columns (panel t at result + t * stride). After the last K block, a full tile takes epilogue(i,
// j, &tile_epilogue) in registers, then finish(i, rows, j, cols, true); a partial tile gets finish(i, rows, j, cols,
// false) alone, which then applies all of it.
template <typename PackA, typename PackB, typename Epilogue, typename Finish>
void BlockBf16(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float* c, int64_t ldc, PackA& pack_a,
               PackB& pack_b, Epilogue& epilogue, Finish& finish) {
  alignas(64) uint32_t a_buf[(kMc / kRows) * (kKc / 2) * kRows];
  alignas(64) uint32_t b_buf[(kMaxJobCols / kCols) * (kKc / 2) * kCols];
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kb = K - k0 < kKc ? K - k0 : kKc, kp = (kb + 1) / 2;
    const bool accumulate = k0 > 0, last = k0 + kb >= K;
    int64_t b_stride = 0;
    const uint32_t* b = pack_b(k0, kb, b_buf, &b_stride);
    for (int64_t mb = m0; mb < m1; mb += kMc) {
      const int64_t mb1 = m1 - mb < kMc ? m1 : mb + kMc;
      int64_t a_stride = 0;
      const uint32_t* a = pack_a(k0, kb, mb, mb1, a_buf, &a_stride);
      for (int64_t j = n0; j < n1; j += kCols) {
        const int64_t cols = n1 - j < kCols ? n1 - j : kCols;
        const uint32_t* bj = b + (j - n0) / kCols * b_stride;
        for (int64_t i = mb; i < mb1; i += kRows) {
          const int rows = static_cast<int>(mb1 - i < kRows ? mb1 - i : kRows);
          const uint32_t* ai = a + (i - mb) / kRows * a_stride;
          float* cij = c + i * ldc + j;
          if (cols == kCols) {
            TileEpilogue ep;
            if (last) epilogue(i, j, &ep);
            MicroKernel(rows, kp, ai, bj, cij, ldc, accumulate, last ? &ep : nullptr);
            if (last) finish(i, rows, j, cols, true);
            continue;
          }
          {
            alignas(64) float tile[kRows * kCols];
            for (int r = 0; r < rows; ++r) {
              for (int64_t q = 0; q < kCols; ++q) tile[r * kCols + q] = accumulate && q < cols ? cij[r * ldc + q] : 0.f;
            }
            MicroKernel(rows, kp, ai, bj, tile, kCols, accumulate, nullptr);
            for (int r = 0; r < rows; ++r) memcpy(cij + r * ldc, tile + r * kCols, sizeof(float) * cols);
          }
          if (last) finish(i, rows, j, cols, false);
        }
      }
    }
  }
}

// A[i0..i1, k0..k0+kb) of a row-major f32 A (row stride lda) rounded to pair words, in
// panels of kRows rows ([kp][kRows] words, zero past row i1 and past K): the micro-kernel
// then reads one stream with constant offsets rather than kRows row streams.
inline const uint32_t* PackRowsBf16(const float* a, int64_t lda, int64_t k0, int64_t kb, int64_t i0, int64_t i1,
                                    uint32_t* buf, int64_t* stride) {
  const int64_t kp = (kb + 1) / 2, full = kb / 2;
  for (int64_t i = i0; i < i1; i += kRows) {
    uint32_t* panel = buf + (i - i0) / kRows * kp * kRows;
    const int rows = static_cast<int>(i1 - i < kRows ? i1 - i : kRows);
    const float* src[kRows];
    for (int r = 0; r < kRows; ++r) src[r] = a + (i + (r < rows ? r : 0)) * lda + k0;
    for (int64_t p = 0; p < full; ++p) {
      for (int r = 0; r < kRows; ++r) panel[p * kRows + r] = PairWord(src[r][2 * p], src[r][2 * p + 1]);
    }
    if (full < kp) {
      for (int r = 0; r < kRows; ++r) panel[full * kRows + r] = PairWord(src[r][2 * full], 0.f);
    }
    // Rows past i1 repeat row i (read, never stored): zero them so no NaN meets a zero.
    for (int r = rows; r < kRows; ++r) {
      for (int64_t p = 0; p < kp; ++p) panel[p * kRows + r] = 0;
    }
  }
  *stride = kp * kRows;
  return buf;
}

// Rows k0..k0+kb of a row-major f32 B block (row k at rows + k * ld, nb columns) as panels
// [kp][kCols] words, zero past nb and past kb.
inline void PackColumnsBf16(const float* rows, int64_t ld, int64_t kb, int64_t nb, uint32_t* buf, int64_t* stride) {
  const int64_t kp = (kb + 1) / 2;
  *stride = kp * kCols;
  for (int64_t t = 0; t * kCols < nb; ++t) {
    uint32_t* panel = buf + t * kp * kCols;
    const int64_t j0 = t * kCols, width = nb - j0 < kCols ? nb - j0 : kCols;
    for (int64_t p = 0; p < kp; ++p) {
      const float* lo = rows + 2 * p * ld + j0;
      uint32_t* out = panel + p * kCols;
      if (2 * p + 1 < kb) {
        const float* hi = lo + ld;
        for (int64_t q = 0; q < width; ++q) out[q] = PairWord(lo[q], hi[q]);
      } else {
        for (int64_t q = 0; q < width; ++q) out[q] = PairWord(lo[q], 0.f);
      }
      for (int64_t q = width; q < kCols; ++q) out[q] = 0;
    }
  }
}

struct MatMulBf16Kernel {
  // Inputs: A [.., M, K] f32, B pre-packed: [ceil(N/32)][ceil(K/2)][32] bf16 pair words (a
  // constant [K, N] weight), an optional bias [N]. Parameters: kiln_matmul_params (shape
  // and activation; B has no batch dims).
  __attribute__((noinline)) static int32_t RunF32(const kiln_kcall* call, const kiln_matmul_params& params) {
    if (!Bf16Dot()) return KILN_KERR_UNSUPPORTED;
    const int64_t M = params.shape.M, K = params.shape.K, N = params.shape.N;
    const int64_t kp_all = (K + 1) / 2;
    const int32_t batch_rank = static_cast<int32_t>(params.shape.batch_rank);
    int64_t batches = 1;
    for (int32_t i = 0; i < batch_rank; ++i) batches *= params.shape.batch_dims[i];
    const float* pa = InputData<float>(call, 0);
    const uint32_t* pb = static_cast<const uint32_t*>(call->inputs[1].data);
    const float* bias = OptionalInputData<float>(call, 2);
    const float* residual = OptionalInputData<float>(call, 3);  // laid out as C (the fuse pass's)
    float* pc = OutputData<float>(call);
    const kiln_activation act = params.activation;
    // Each job rounds its rows of A to bf16 once for all its columns: on one thread one
    // job takes every column (A converted once); with a pool, 256-column jobs.
    const bool parallel = call->exec != nullptr && call->exec->parallel_for != nullptr;
    const int64_t kJobCols = parallel ? kMaxJobCols : (N + kCols - 1) / kCols * kCols;
    const int64_t chunks = (N + kJobCols - 1) / kJobCols;
    const gemm::RowSplit split = gemm::SplitRows(call, M, chunks * batches);
    const int64_t groups = split.groups;
    auto jobs = [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t batch = job / (groups * chunks), rg = job / chunks % groups, cc = job % chunks;
        int64_t a_off = 0, rest = batch;
        for (int32_t d = batch_rank - 1; d >= 0; --d) {
          a_off += rest % params.shape.batch_dims[d] * params.shape.a_batch_strides[d];
          rest /= params.shape.batch_dims[d];
        }
        const float* a = pa + a_off;
        float* c = pc + batch * M * N;
        const float* res = residual != nullptr ? residual + batch * M * N : nullptr;
        const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + 1);
        const int64_t n0 = cc * kJobCols, n1 = n0 + kJobCols < N ? n0 + kJobCols : N;
        auto pack_a = [&](int64_t k0, int64_t kb, int64_t i0, int64_t i1, uint32_t* buf, int64_t* stride) {
          return PackRowsBf16(a, K, k0, kb, i0, i1, buf, stride);
        };
        auto pack_b = [&](int64_t k0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
          *stride = kp_all * kCols;
          return pb + n0 / kCols * kp_all * kCols + k0 / 2 * kCols;
        };
        auto epilogue = [&](int64_t i, int64_t j, TileEpilogue* ep) {
          ep->col_bias = bias != nullptr ? bias + j : nullptr;
          ep->residual = res != nullptr ? res + i * N + j : nullptr;
          ep->residual_ld = N;
          if (act.code == KILN_UNARY_RELU) ep->kind = gemm::Epilogue::kRelu;
        };
        auto finish = [&](int64_t i, int rows, int64_t j, int64_t cols, bool in_registers) {
          for (int r = 0; r < rows; ++r) {
            float* row = c + (i + r) * N + j;
            if (!in_registers && bias != nullptr) {
              for (int64_t q = 0; q < cols; ++q) row[q] += bias[j + q];
            }
            if (!in_registers && res != nullptr) {
              for (int64_t q = 0; q < cols; ++q) row[q] += res[(i + r) * N + j + q];
            }
            if (!in_registers || act.code != KILN_UNARY_RELU) ApplyActivation(row, cols, act.code, act.alpha, act.beta);
          }
        };
        BlockBf16(m0, m1, n0, n1, K, c, N, pack_a, pack_b, epilogue, finish);
      }
    };
    ParallelFor(call, batches * groups * chunks, 1, jobs);
    return KILN_KERR_OK;
  }
};

struct ConvBf16Kernel {
  // Inputs: X [N, C, *in] f32, W pre-packed per group in panels of 12 rows,
  // [group][ceil(OC/group / 12)][ceil(K/2)][12] bf16 pair words (K = C/group x kernel
  // size), B [OC] optional, then as the fuse pass writes them an input scale (input 3,
  // may be omitted) and a residual (input 4). Parameters: kiln_conv_params (group,
  // window, activation, job_cols).
  __attribute__((noinline)) static int32_t RunF32(const kiln_kcall* call, const kiln_conv_params& params);
};

int32_t ConvBf16Kernel::RunF32(const kiln_kcall* call, const kiln_conv_params& params) {
  if (!Bf16Dot()) return KILN_KERR_UNSUPPORTED;
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const Window w(params.window, X, Y);
  const int64_t group = params.group;
  const kiln_activation act = params.activation;
  const int64_t batch = X.dims[0], in_channels = X.dims[1], out_channels = Y.dims[1];
  const int64_t icg = in_channels / group, ocg = out_channels / group;
  const int64_t in_size = w.in_size(), out_size = w.out_size(), kernel_size = w.kernel_size();
  const int64_t K = icg * kernel_size, kp_all = (K + 1) / 2;
  const int64_t panels = (ocg + kRows - 1) / kRows;
  const float* px = static_cast<const float*>(X.data);
  const uint32_t* pw = static_cast<const uint32_t*>(call->inputs[1].data);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pscale = OptionalInputData<float>(call, 3);
  const int64_t scale_batch_stride = pscale != nullptr && call->inputs[3].dims[0] > 1 ? in_channels : 0;
  const float* pres = OptionalInputData<float>(call, 4);
  float* py = static_cast<float*>(Y.data);
  const bool pointwise = kernel_size == 1 && w.stride[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 &&
                         w.pad[0] == 0 && w.pad[1] == 0 && w.pad[2] == 0 && in_size == out_size;
  const int64_t first_cols = params.job_cols != 0 && params.job_cols % kCols == 0 && params.job_cols <= kMaxJobCols
                                 ? params.job_cols
                                 : kMaxJobCols;
  // As the f32 implicit GEMM (conv.cc): gemm::SplitConvJobs.
  const gemm::ConvJobs plan = gemm::SplitConvJobs(call, out_size, ocg, first_cols, kCols, kernel_size, batch, group);
  const int64_t cols = plan.cols;
  const gemm::RowSplit split = plan.split;
  const int64_t kk_hw = w.kernel[1] * w.kernel[2];
  auto jobs = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end;) {
      const gemm::ConvJobs::Job at = plan.Next(&job, end);  // row groups of one chunk run together
      const int64_t rg = at.rg, cc = at.cc, g = at.g, n = at.n, taken = at.taken;
      const float* x = px + (n * in_channels + g * icg) * in_size;
      const float* scale = pscale != nullptr ? pscale + n * scale_batch_stride + g * icg : nullptr;
      float* c = py + (n * out_channels + g * ocg) * out_size;
      const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + taken);
      const int64_t n0 = cc * cols, n1 = n0 + cols < out_size ? n0 + cols : out_size;
      WindowStarts starts;
      starts.Fill(w, n0, n1 - n0);
      const uint32_t* wg = pw + g * panels * kp_all * kRows;
      auto pack_a = [&](int64_t k0, int64_t, int64_t i0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
        *stride = kp_all * kRows;
        return wg + i0 / kRows * kp_all * kRows + k0 / 2 * kRows;
      };
      auto pack_b = [&](int64_t k0, int64_t kb, uint32_t* buf, int64_t* stride) -> const uint32_t* {
        const int64_t nb = n1 - n0;
        if (pointwise && scale == nullptr) {
          PackColumnsBf16(x + k0 * in_size + n0, in_size, kb, nb, buf, stride);
          return buf;
        }
        alignas(64) float staged[kKc * kMaxJobCols];
        for (int64_t k = 0; k < kb; ++k) {
          float* out = staged + k * nb;
          const int64_t kidx = k0 + k, ic = kidx / kernel_size, r = kidx % kernel_size;
          const float* xin = x + ic * in_size;
          if (pointwise) {
            const float s = scale[ic];
            for (int64_t j = 0; j < nb; ++j) out[j] = xin[n0 + j] * s;
            continue;
          }
          const int64_t kd = r / kk_hw, kh = r / w.kernel[2] % w.kernel[1], kw = r % w.kernel[2];
          PackTapRow(w, starts, xin, kd * w.dilation[0], kh * w.dilation[1], kw * w.dilation[2],
                     scale != nullptr ? scale + ic : nullptr, nb, out);
        }
        PackColumnsBf16(staged, nb, kb, nb, buf, stride);
        return buf;
      };
      gemm::Epilogue ep;
      ep.row_bias = pbias != nullptr ? pbias + g * ocg : nullptr;
      if (pres != nullptr) {
        ep.residual = pres + (n * out_channels + g * ocg) * out_size;
        ep.residual_ld = out_size;
      }
      if (act.code == KILN_UNARY_RELU) ep.kind = gemm::Epilogue::kRelu;
      if (act.code == KILN_UNARY_CLIP) {
        ep.kind = gemm::Epilogue::kClip;
        ep.lo = static_cast<float>(act.alpha);
        ep.hi = static_cast<float>(act.beta);
      }
      const bool other_activation = act.code >= 0 && ep.kind == gemm::Epilogue::kNone;
      auto epilogue = [&](int64_t i, int64_t j, TileEpilogue* tile) {
        tile->row_bias = ep.row_bias != nullptr ? ep.row_bias + i : nullptr;
        tile->residual = ep.residual != nullptr ? ep.residual + i * ep.residual_ld + j : nullptr;
        tile->residual_ld = ep.residual_ld;
        tile->kind = ep.kind;
        tile->lo = ep.lo;
        tile->hi = ep.hi;
      };
      auto finish = [&](int64_t i, int rows, int64_t j, int64_t tile_cols, bool in_registers) {
        for (int r = 0; r < rows; ++r) {
          float* row = c + (i + r) * out_size + j;
          if (!in_registers) {
            for (int64_t q = 0; q < tile_cols; ++q) row[q] = ep.Apply(row[q], i + r, j + q);
          }
          if (other_activation) ApplyActivation(row, tile_cols, act.code, act.alpha, act.beta);
        }
      };
      BlockBf16(m0, m1, n0, n1, K, c, out_size, pack_a, pack_b, epilogue, finish);
    }
  };
  ParallelFor(call, plan.Count(batch), 1, jobs);
  return KILN_KERR_OK;
}

struct WinogradBf16Kernel {
  // As conv_winograd (winograd_core.h), its 36 GEMMs in bf16: inputs X, U as 32-column panels
  // of bf16 pair words [36][ceil(OC/32)][C/2][32], B (may be omitted), R (optional);
  // outputs Y and the scratch: V as bf16 panels (36 x ceil(tiles_per_chunk / 12) x 12 x C/2
  // words), then M (36 x tiles_per_chunk x OC floats).
  __attribute__((noinline)) static int32_t RunF32(const kiln_kcall* call, const kiln_conv_params& params) {
    if (!Bf16Dot()) return KILN_KERR_UNSUPPORTED;
    const uint32_t* pu = static_cast<const uint32_t*>(call->inputs[1].data);
    const int64_t C = call->inputs[0].dims[1], OC = call->outputs[0].dims[1];
    const int64_t kp = (C + 1) / 2, u_stride = (OC + kCols - 1) / kCols * kp * kCols;
    // V rounded to bf16 as the input transform stores it, straight into the A panels the
    // micro-kernel reads, [36][ceil(tc/12)][C/2][12] words (C is a multiple of 8), so no
    // pass converts it (converting it per GEMM cost as much as the GEMM at 64 channels).
    // Rows past tc in the last panel are never read (the micro-kernel reads `rows` rows).
    const int64_t chunk_panels = (params.tiles_per_chunk + kRows - 1) / kRows;
    auto v_xi = [=](float* v, int64_t xi, int64_t tc) {
      return reinterpret_cast<uint32_t*>(v) + xi * ((tc + kRows - 1) / kRows) * kp * kRows;
    };
    auto store_v = [=](float* v, int64_t xi, int64_t tc, int64_t t, int64_t c0, const gemm::v8f& values) {
      uint32_t* out = v_xi(v, xi, tc) + (t / kRows * kp + c0 / 2) * kRows + t % kRows;
      for (int q = 0; q < 4; ++q) out[q * kRows] = PairWord(values[2 * q], values[2 * q + 1]);
    };
    auto multiply = [=](float* v, int64_t xi, int64_t tc, int64_t t0, int64_t t1, int64_t n0, int64_t n1, float* m) {
      const uint32_t* panels = v_xi(v, xi, tc);
      auto pack_a = [&](int64_t k0, int64_t, int64_t i0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
        *stride = kp * kRows;
        return panels + i0 / kRows * kp * kRows + k0 / 2 * kRows;
      };
      auto pack_b = [&](int64_t k0, int64_t, uint32_t*, int64_t* stride) -> const uint32_t* {
        *stride = kp * kCols;
        return pu + xi * u_stride + n0 / kCols * kp * kCols + k0 / 2 * kCols;
      };
      auto epilogue = [](int64_t, int64_t, TileEpilogue*) {};
      auto finish = [](int64_t, int, int64_t, int64_t, bool) {};
      BlockBf16(t0, t1, n0, n1, C, m, OC, pack_a, pack_b, epilogue, finish);
    };
    return winograd::WinogradRun(call, params, kMaxJobCols, 36 * chunk_panels * kp * kRows, kp * int64_t{4}, store_v,
                                 multiply);
  }
};

}  // namespace

KILN_F32_KERNEL(conv_winograd_bf16, WinogradBf16Kernel, outputs[0].dtype)
KILN_F32_KERNEL(matmul_bf16, MatMulBf16Kernel, outputs[0].dtype)
KILN_F32_KERNEL(conv_bf16, ConvBf16Kernel, outputs[0].dtype)
