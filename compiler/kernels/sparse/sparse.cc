// The block-sparse matrix product: C [rows, N] = A [rows, K] . B (+ bias), B a pruned
// constant weight kept as 1x16 blocks (kiln/kernels/sparse.h). A tile of C (MR rows, one
// 16-column panel) stays in registers while the panel's blocks stream past: per block
// one load of its 16 values and, per row, one broadcast of A[row, k] and one multiply-add,
// the dense core's inner step (gemm_core.h) with the zero rows of the panel skipped. Work
// is then proportional to the blocks kept. Written with generic vector types: 16-lane
// vectors where the target has AVX-512F, two 8-lane ones elsewhere (AVX2, aarch64).
#include "kiln/kernels/sparse.h"
#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "unary_math.h"

using namespace kiln_kernels;

namespace {

constexpr int64_t kBlockCols = KILN_SPARSE_BLOCK_COLS;

// Rows of C per tile: with 16-lane vectors one accumulator per row (16 of AVX-512's 32
// registers); with 8-lane ones two per row (12 of AVX2's 16).
template <typename V>
constexpr int TileRows() {
  return sizeof(V) == sizeof(v16f) ? 16 : 6;
}

// C[0..MR, 0..16) = bias (or 0) + sum over the panel's blocks b of A[.., k_b] x values[b].
template <typename V, int MR>
inline void SparseTile(const float* a, int64_t lda, const float* values, const int32_t* ks, int64_t blocks,
                       const float* bias, float* c, int64_t ldc) {
#ifdef __clang__
  // As in the dense core: a multiply-add may fuse into one FMA (the sums are reassociated
  // by the block order anyway).
#pragma clang fp contract(fast)
#endif
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int NV = static_cast<int>(kBlockCols) / L;
  V acc[MR][NV];
  V init[NV];
  for (int v = 0; v < NV; ++v) {
    if (bias != nullptr) {
      memcpy(&init[v], bias + v * L, sizeof(V));
    } else {
      init[v] = V{};
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = init[v];
  }
  const float* rows[MR];
  for (int i = 0; i < MR; ++i) rows[i] = a + i * lda;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t k = ks[b];
    V bv[NV];
    for (int v = 0; v < NV; ++v) memcpy(&bv[v], values + b * kBlockCols + v * L, sizeof(V));
    for (int i = 0; i < MR; ++i) {
      V av;
      KILN_SPLAT_V(V, av, rows[i][k]);
      for (int v = 0; v < NV; ++v) acc[i][v] += av * bv[v];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) memcpy(c + i * ldc + v * L, &acc[i][v], sizeof(V));
  }
}

// SparseTile for `rows` (1..MR) rows: one instance per count, the last tile of a job.
template <typename V, int MR>
inline void SparseTileRows(int rows, const float* a, int64_t lda, const float* values, const int32_t* ks,
                           int64_t blocks, const float* bias, float* c, int64_t ldc) {
  if constexpr (MR > 0) {
    if (rows == MR) return SparseTile<V, MR>(a, lda, values, ks, blocks, bias, c, ldc);
    SparseTileRows<V, MR - 1>(rows, a, lda, values, ks, blocks, bias, c, ldc);
  }
}

// Rows per job (a multiple of the tile's) and panels per job: a job's panels stay in L1
// while its row tiles pass over them.
constexpr int64_t kJobRows = 96;
constexpr int64_t kJobPanels = 4;

template <typename V>
__attribute__((noinline)) int32_t RunSparse(const kiln_kcall* call, const kiln_sparse_matmul_params& params) {
  constexpr int MR = TileRows<V>();
  const int64_t rows = params.rows, K = params.K, N = params.N;
  if (N % kBlockCols != 0) return KILN_KERR_UNSUPPORTED;
  const float* pa = InputData<float>(call, 0);
  const float* values = InputData<float>(call, 1);
  const int32_t* ks = InputData<int32_t>(call, 2);
  const int32_t* start = InputData<int32_t>(call, 3);
  const float* bias = OptionalInputData<float>(call, 4);
  float* pc = OutputData<float>(call);
  const kiln_activation act = params.activation;
  const int64_t job_rows = (kJobRows + MR - 1) / MR * MR;
  const int64_t row_jobs = (rows + job_rows - 1) / job_rows;
  const int64_t panels = N / kBlockCols, panel_jobs = (panels + kJobPanels - 1) / kJobPanels;
  auto jobs = [=](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t r0 = job / panel_jobs * job_rows, p0 = job % panel_jobs * kJobPanels;
      const int64_t r1 = r0 + job_rows < rows ? r0 + job_rows : rows;
      const int64_t p1 = p0 + kJobPanels < panels ? p0 + kJobPanels : panels;
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t first = start[p], blocks = start[p + 1] - first;
        const float* panel_bias = bias != nullptr ? bias + p * kBlockCols : nullptr;
        for (int64_t r = r0; r < r1; r += MR) {
          const int64_t n = r1 - r < MR ? r1 - r : MR;
          float* c = pc + r * N + p * kBlockCols;
          const float* a = pa + r * K;
          const float* vals = values + first * kBlockCols;
          if (n == MR) {
            SparseTile<V, MR>(a, K, vals, ks + first, blocks, panel_bias, c, N);
          } else {
            SparseTileRows<V, MR - 1>(static_cast<int>(n), a, K, vals, ks + first, blocks, panel_bias, c, N);
          }
          if (act.code >= 0) {
            for (int64_t i = 0; i < n; ++i) ApplyActivation(c + i * N, kBlockCols, act.code, act.alpha, act.beta);
          }
        }
      }
    }
  };
  ParallelFor(call, row_jobs * panel_jobs, 1, jobs);
  return KILN_KERR_OK;
}

struct SparseMatMulKernel {
  static int32_t RunF32(const kiln_kcall* call, const kiln_sparse_matmul_params& params) {
    if (params.rows == 0 || params.N == 0) return KILN_KERR_OK;
    return WideVectors() ? RunSparse<v16f>(call, params) : RunSparse<v8f>(call, params);
  }
};

}  // namespace

KILN_F32_KERNEL(sparse_matmul, SparseMatMulKernel, outputs[0].dtype)
