// Matrix products: MatMul (numpy broadcasting over batch dims, an optional fused bias) and
// Gemm, both with a fused activation; f32 runs on the register-blocked core (gemm_core.h).
#include "kiln/kernels/gemm.h"
#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "unary_math.h"

using namespace kiln_kernels;

namespace {

// Sums of 4 rows of A x 4 rows of B (a 4 x 4 block of C = A B^T) over all K, in 16-lane
// vectors (the wide targets' 32 registers hold its 16 sums, 4 of B and one of A). Rows past
// the ends are clamped (computed again, not stored). sums[r][q] = A row r . B row q.
inline void DotBlock4x4(const float* const* a, const float* const* b, int64_t K, float sums[4][4]) {
  v16f acc[4][4] = {};
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    KILN_FAST_MATH_CONTRACT
    v16f bv[4];
    for (int q = 0; q < 4; ++q) memcpy(&bv[q], b[q] + k, sizeof(v16f));
    for (int r = 0; r < 4; ++r) {
      v16f av;
      memcpy(&av, a[r] + k, sizeof(v16f));
      for (int q = 0; q < 4; ++q) acc[r][q] += av * bv[q];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int q = 0; q < 4; ++q) {
      // The two 8-lane halves added, then their lanes (the order of the sum is free).
      const v8f h = __builtin_shufflevector(acc[r][q], acc[r][q], 0, 1, 2, 3, 4, 5, 6, 7) +
                    __builtin_shufflevector(acc[r][q], acc[r][q], 8, 9, 10, 11, 12, 13, 14, 15);
      float sum = 0.f;
      for (int64_t t = k; t < K; ++t) sum += a[r][t] * b[q][t];
      for (int l = 0; l < 8; ++l) sum += h[l];
      sums[r][q] = sum;
    }
  }
}

// Rows of C from which a MatMul of a pre-packed B runs whole rows per job (row groups
// only) rather than 64-column chunks: each chunk re-reads all of A, each row group all of B,
// so with at most kMinJobs (8) row groups whole rows read less once M passes 8 x 64.
// ViT-S/16 at batch 8 ([1576 x 1536] x [1536 x 384], one thread): 18.5 -> 17.3 ms.
constexpr int64_t kWholeRowsMin = 512;

struct MatMulKernel {
  // Parameters: kiln_matmul_params (kiln/kernels/gemm.h). Optional input 2: a bias [N];
  // optional input 3 (the fuse pass's): a residual laid out as C, added after the bias and
  // before the activation.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_matmul_params& params) {
    if constexpr (std::is_same_v<T, float> && kBlockedGemm) {
      if (params.shape.K > 0) return RunShared(call, params);
    }
    return Body<T, false>(call, params);
  }
  // The f32 path through the register-blocked core, not inlined: one copy per artifact.
  __attribute__((noinline)) static int32_t RunShared(const kiln_kcall* call, const kiln_matmul_params& params) {
    return Body<float, true>(call, params);
  }

  template <typename T, bool kBlocked>
  static int32_t Body(const kiln_kcall* call, const kiln_matmul_params& params) {
    const int64_t M = params.shape.M, K = params.shape.K, N = params.shape.N;
    const int32_t batch_rank = static_cast<int32_t>(params.shape.batch_rank);
    const int64_t* batch_dims = params.shape.batch_dims;
    const int64_t* a_strides = params.shape.a_batch_strides;
    const int64_t* b_strides = params.shape.b_batch_strides;
    // Row strides (transposes folded in by the fuse pass), else contiguous operands.
    const int64_t lda = params.lda != 0 ? params.lda : K, ldb = params.ldb != 0 ? params.ldb : N;
    const int64_t ldc = params.ldc != 0 ? params.ldc : N;
    const bool b_transposed = params.b_transposed != 0;
    const int64_t activation = params.activation.code;
    const bool b_panels = params.b_panels != 0;
    if (b_panels && (!kBlocked || N % gemm::kNr != 0)) return KILN_KERR_UNSUPPORTED;
    const double act_alpha = params.activation.alpha, act_beta = params.activation.beta;
    const T* bias = OptionalInputData<T>(call, 2);
    const T* residual = OptionalInputData<T>(call, 3);
    int64_t batches = 1;
    for (int32_t i = 0; i < batch_rank; ++i) batches *= batch_dims[i];
    const T* pa = InputData<T>(call, 0);
    const T* pb = InputData<T>(call, 1);
    T* pc = OutputData<T>(call);
    // Offsets of A, B and C (and the residual, laid out as C) for one batch entry.
    auto batch_offsets = [&](int64_t batch, int64_t* a_off, int64_t* b_off, int64_t* c_off) {
      int64_t rest = batch;
      *a_off = *b_off = 0;
      *c_off = params.ldc != 0 ? 0 : batch * M * N;
      for (int32_t d = batch_rank - 1; d >= 0; --d) {
        const int64_t idx = rest % batch_dims[d];
        rest /= batch_dims[d];
        *a_off += idx * a_strides[d];
        *b_off += idx * b_strides[d];
        if (params.ldc != 0) *c_off += idx * params.c_batch_strides[d];
      }
    };
    if constexpr (kBlocked) {
      {
        // Register-blocked core; jobs are (batch, row group, column chunk). With A's rows
        // a multiple of 4 KiB apart, PanelBlock copies each block of A first: one chunk of
        // every column then, so the copy serves them all (one thread, Zen 4, alternating
        // runs: 1024^3 22.1 -> 21.9 ms, 128x3072x768 5.99 -> 5.74 ms).
        const bool whole_rows = b_panels && (gemm::AliasedRows(lda) || M >= kWholeRowsMin);
        const int64_t width = whole_rows ? N : gemm::kNc;
        const int64_t chunks = whole_rows ? 1 : gemm::ColumnChunks(N);
        const gemm::RowSplit split = gemm::SplitRows(call, M, chunks * batches);
        const int64_t groups = split.groups;
        auto jobs = [=](int64_t begin, int64_t end) {
          for (int64_t job = begin; job < end; ++job) {
            const int64_t batch = job / (groups * chunks), rg = job / chunks % groups, cc = job % chunks;
            int64_t a_off, b_off, c_off;
            batch_offsets(batch, &a_off, &b_off, &c_off);
            const float* b = pb + b_off;
            float* c = pc + c_off;
            const int64_t m0 = split.Begin(rg), m1 = split.Begin(rg + 1);
            const int64_t n0 = cc * width, n1 = n0 + width < N ? n0 + width : N;
            auto pack = [&](int64_t k0, int64_t kb, int64_t c0, int64_t nb, float* dst, int64_t* ld) -> const float* {
              if (b_transposed) {
                gemm::PackTransposedColumns(b + c0 * ldb + k0, ldb, kb, nb, dst, *ld);
                return dst;
              }
              for (int64_t k = 0; k < kb; ++k) memcpy(dst + k * *ld, b + (k0 + k) * ldb + c0, sizeof(float) * nb);
              return dst;
            };
            // The bias, the residual and the activation, on each block of rows as soon as
            // it is done (still in L2).
            auto finish = [&](int64_t r0, int64_t r1) {
              for (int64_t i = r0; i < r1; ++i) {
                float* row = c + i * ldc + n0;
                if (bias) {
                  for (int64_t j = 0; j < n1 - n0; ++j) row[j] += bias[n0 + j];
                }
                if (residual) {
                  const float* r = residual + c_off + i * ldc + n0;
                  for (int64_t j = 0; j < n1 - n0; ++j) row[j] += r[j];
                }
                ApplyActivation(row, n1 - n0, activation, act_alpha, act_beta);
              }
            };
            if (b_panels) {
              gemm::PanelBlock(m0, m1, n0, n1, K, pa + a_off, lda, pb, c, ldc, finish);
            } else {
              gemm::Block(m0, m1, n0, n1, K, pa + a_off, lda, 1, c, ldc, pack);
              finish(m0, m1);
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
        int64_t a_off = 0, b_off = 0, c_off = 0;
        batch_offsets(batch, &a_off, &b_off, &c_off);
        const T* a = pa + a_off + i * lda;
        const T* b = pb + b_off;
        T* c = pc + c_off + i * ldc;
        const T* r = residual != nullptr ? residual + c_off + i * ldc : nullptr;
        for (int64_t j = 0; j < N; ++j) c[j] = bias ? bias[j] : T(0);
        for (int64_t k = 0; k < K; ++k) {
          const T aik = a[k];
          for (int64_t j = 0; j < N; ++j) c[j] += aik * (b_transposed ? b[j * ldb + k] : b[k * ldb + j]);
        }
        if (r != nullptr) {
          for (int64_t j = 0; j < N; ++j) c[j] += r[j];
        }
        ApplyActivation(c, N, activation, act_alpha, act_beta);
      }
    };
    ParallelFor(call, batches * M, 4, body);
    return KILN_KERR_OK;
  }
};

struct GemmKernel {
  // Up to this many rows with B transposed ([N, K], a Linear layer's weight) run as dot
  // products (FewRowsTransB).
  static constexpr int64_t kFewRows = 16;

  // C = alpha A B^T + beta C for a few rows (a classifier head at batch 8): each row of B
  // is read once, from where it lies, and multiplied with four rows of A at a time (four
  // independent sums). The blocked core would first gather B^T column by column on every
  // call: MobileNetV3-small's [8, 1024] x [1000, 1024]^T took 3.1 ms of its 9.
  __attribute__((noinline)) static int32_t FewRowsTransB(const kiln_kcall* call, const kiln_gemm_params& params,
                                                         int64_t M, int64_t K, int64_t N, const int64_t* c_strides) {
    const float* pa = InputData<float>(call, 0);
    const float* pb = InputData<float>(call, 1);
    float* pc = OutputData<float>(call);
    const bool has_c = call->num_inputs > 2 && call->inputs[2].data != nullptr;
    const float* pbias = has_c ? InputData<float>(call, 2) : nullptr;
    const float alpha = static_cast<float>(params.alpha), beta = static_cast<float>(params.beta);
    const int64_t cs0 = c_strides[0], cs1 = c_strides[1];
    const kiln_activation act = params.activation;
    constexpr int64_t kChunk = 32;
    auto jobs = [=](int64_t begin, int64_t end) {
      for (int64_t chunk = begin; chunk < end; ++chunk) {
        const int64_t n0 = chunk * kChunk, n1 = n0 + kChunk < N ? n0 + kChunk : N;
        // Wide targets: 4 rows of B x 4 of A per block, so each vector of A read serves
        // four rows of B (the 4 x 1 form below read A once per row of B: load-bound, and
        // MobileNetV3-small's [8, 1024] x [1000, 1024]^T head ran at twice ONNX Runtime's time).
        for (int64_t j0 = n0; WideVectors() && j0 < n1; j0 += 4) {
          const float* b[4];
          for (int q = 0; q < 4; ++q) b[q] = pb + (j0 + q < n1 ? j0 + q : j0) * K;
          for (int64_t i0 = 0; i0 < M; i0 += 4) {
            const float* a[4];
            for (int r = 0; r < 4; ++r) a[r] = pa + (i0 + r < M ? i0 + r : i0) * K;
            float sums[4][4];
            DotBlock4x4(a, b, K, sums);
            for (int r = 0; r < 4 && i0 + r < M; ++r) {
              for (int q = 0; q < 4 && j0 + q < n1; ++q) {
                float v = alpha * sums[r][q];
                if (has_c) v += beta * pbias[(i0 + r) * cs0 + (j0 + q) * cs1];
                pc[(i0 + r) * N + j0 + q] = v;
              }
            }
          }
        }
        for (int64_t j = WideVectors() ? n1 : n0; j < n1; ++j) {
          const float* __restrict b = pb + j * K;
          for (int64_t i0 = 0; i0 < M; i0 += 4) {
            const float* a[4];
            for (int r = 0; r < 4; ++r) a[r] = pa + (i0 + r < M ? i0 + r : i0) * K;
            v8f lanes[4][2] = {};
            int64_t k = 0;
            for (; k + 16 <= K; k += 16) {
              KILN_FAST_MATH_CONTRACT
              v8f b0, b1;
              KILN_LOAD8(b0, b + k);
              KILN_LOAD8(b1, b + k + 8);
              for (int r = 0; r < 4; ++r) {
                v8f a0, a1;
                KILN_LOAD8(a0, a[r] + k);
                KILN_LOAD8(a1, a[r] + k + 8);
                lanes[r][0] += a0 * b0;
                lanes[r][1] += a1 * b1;
              }
            }
            for (int r = 0; r < 4 && i0 + r < M; ++r) {
              float sum = 0.f;
              for (int64_t q = k; q < K; ++q) sum += a[r][q] * b[q];
              const v8f both = lanes[r][0] + lanes[r][1];
              for (int l = 0; l < 8; ++l) sum += both[l];
              float v = alpha * sum;
              if (has_c) v += beta * pbias[(i0 + r) * cs0 + j * cs1];
              pc[(i0 + r) * N + j] = v;
            }
          }
        }
        for (int64_t i = 0; i < M; ++i) ApplyActivation(pc + i * N + n0, n1 - n0, act.code, act.alpha, act.beta);
      }
    };
    ParallelFor(call, (N + kChunk - 1) / kChunk, 1, jobs);
    return KILN_KERR_OK;
  }

  // Parameters: kiln_gemm_params (kiln/kernels/gemm.h). C (input 2) broadcasts to [M, N].
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_gemm_params& params) {
    if constexpr (std::is_same_v<T, float> && kBlockedGemm) {
      const kiln_ktensor& A = call->inputs[0];
      if ((params.trans_a != 0 ? A.dims[0] : A.dims[1]) > 0) return RunShared(call, params);
    }
    return Body<T, false>(call, params);
  }
  __attribute__((noinline)) static int32_t RunShared(const kiln_kcall* call, const kiln_gemm_params& params) {
    return Body<float, true>(call, params);
  }

  template <typename T, bool kBlocked>
  static int32_t Body(const kiln_kcall* call, const kiln_gemm_params& params) {
    const kiln_ktensor& A = call->inputs[0];
    const kiln_ktensor& B = call->inputs[1];
    const kiln_activation& act = params.activation;
    const bool ta = params.trans_a != 0, tb = params.trans_b != 0;
    const T alpha = static_cast<T>(params.alpha), beta = static_cast<T>(params.beta);
    const int64_t M = ta ? A.dims[1] : A.dims[0], K = ta ? A.dims[0] : A.dims[1];
    const int64_t N = tb ? B.dims[0] : B.dims[1];
    const T* pa = static_cast<const T*>(A.data);
    const T* pb = static_cast<const T*>(B.data);
    T* pc = OutputData<T>(call);
    const bool has_c = call->num_inputs > 2 && call->inputs[2].data != nullptr;
    int64_t c_strides[2] = {0, 0};
    if (has_c) BroadcastStrides(call->inputs[2], call->outputs[0].dims, 2, c_strides);
    const T* pbias = has_c ? InputData<T>(call, 2) : nullptr;
    if constexpr (kBlocked) {
      if (tb && M > 1 && M <= kFewRows && !ta) return FewRowsTransB(call, params, M, K, N, c_strides);
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
              if (tb) {
                gemm::PackTransposedColumns(pb + c0 * K + k0, K, kb, nb, dst, *ldb);
                return dst;
              }
              for (int64_t k = 0; k < kb; ++k) memcpy(dst + k * *ldb, pb + (k0 + k) * N + c0, sizeof(float) * nb);
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

}  // namespace

KILN_NUMERIC_KERNEL(matmul, MatMulKernel, outputs[0].dtype)
KILN_NUMERIC_KERNEL(gemm, GemmKernel, outputs[0].dtype)
