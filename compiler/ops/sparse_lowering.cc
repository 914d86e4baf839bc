// Artifacts: a MatMul or Gemm whose constant weight is mostly zero 1x16 blocks (the prune
// pass's --prune-weights) runs on the block-sparse kernel (compiler/kernels/sparse/):
//   %y = MatMul(%x : f32[.., K], B : f32[K, N] const, bias?)
//     =>  sparse_matmul(%x, values[blocks, 16], k[blocks], start[N/16 + 1], bias?)
//   %y = Gemm(%x : f32[M, K], B const, C : f32[N] or [1, N]?)  (transA 0, alpha = beta = 1)
//     =>  the same, B transposed first where transB = 1
// where at most kSparseMaxBlockDensity of B's blocks hold a nonzero; above it the dense
// kernels are faster and the node lowers as before. kiln.algorithm = "sparse" on the node
// asks for the sparse kernel at any density (tests, measuring the crossover), "dense"
// for the dense one.
#include <vector>

#include "kiln/compiler/sparse.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

static_assert(kSparseBlockCols == KILN_SPARSE_BLOCK_COLS, "the lowering packs the kernel's blocks");

// B's element (k, n) of the [K, N] it means, whatever its layout.
struct WeightView {
  const float* data;
  int64_t K, N;
  bool transposed;  // stored [N, K] (Gemm's transB)
  float At(int64_t k, int64_t n) const { return transposed ? data[n * K + k] : data[k * N + n]; }
  bool BlockNonzero(int64_t k, int64_t panel) const {
    for (int64_t j = 0; j < KILN_SPARSE_BLOCK_COLS; ++j) {
      if (At(k, panel * KILN_SPARSE_BLOCK_COLS + j) != 0.0f) return true;
    }
    return false;
  }
};

std::optional<WeightView> ViewWeight(const Node& node) {
  const bool gemm = node.op() == "Gemm";
  if (!gemm && node.op() != "MatMul") return std::nullopt;
  if (node.inputs().size() < 2 || node.input(1) == nullptr) return std::nullopt;
  const Value* b = node.input(1);
  if (!b->is_constant() || b->type().dtype != DType::kFloat32 || !b->type().IsStatic()) return std::nullopt;
  const std::vector<int64_t> dims = b->type().StaticDims();
  if (dims.size() != 2) return std::nullopt;
  const bool transposed = gemm && node.GetInt("transB", 0) != 0;
  const int64_t K = transposed ? dims[1] : dims[0], N = transposed ? dims[0] : dims[1];
  if (K == 0 || N == 0 || N % KILN_SPARSE_BLOCK_COLS != 0) return std::nullopt;
  return WeightView{b->constant()->data_as<float>(), K, N, transposed};
}

// The kernel's three weight operands: values, each block's k, each panel's first block.
struct PackedBlocks {
  std::shared_ptr<Tensor> values, ks, start;
};

PackedBlocks PackBlocks(const WeightView& w, int64_t nonzero) {
  const int64_t panels = w.N / KILN_SPARSE_BLOCK_COLS;
  PackedBlocks packed;
  packed.values = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{nonzero, KILN_SPARSE_BLOCK_COLS});
  packed.ks = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{nonzero});
  packed.start = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{panels + 1});
  float* values = packed.values->data_as<float>();
  int32_t* ks = packed.ks->data_as<int32_t>();
  int32_t* start = packed.start->data_as<int32_t>();
  int64_t b = 0;
  for (int64_t p = 0; p < panels; ++p) {
    start[p] = static_cast<int32_t>(b);
    for (int64_t k = 0; k < w.K; ++k) {
      if (!w.BlockNonzero(k, p)) continue;
      for (int64_t j = 0; j < KILN_SPARSE_BLOCK_COLS; ++j)
        values[b * KILN_SPARSE_BLOCK_COLS + j] = w.At(k, p * KILN_SPARSE_BLOCK_COLS + j);
      ks[b++] = static_cast<int32_t>(k);
    }
  }
  start[panels] = static_cast<int32_t>(b);
  return packed;
}

// The bias operand: MatMul's fused [N], or Gemm's C when it is [N] or [1, N].
std::optional<KernelOperand> BiasOperand(const Node& node, int64_t N) {
  if (node.inputs().size() < 3 || node.input(2) == nullptr) return KernelOperand{-1, nullptr};
  const TensorType& c = node.input(2)->type();
  if (c.dtype != DType::kFloat32 || !c.IsStatic()) return std::nullopt;
  const std::vector<int64_t> dims = c.StaticDims();
  const bool row = (dims.size() == 1 && dims[0] == N) || (dims.size() == 2 && dims[0] == 1 && dims[1] == N);
  if (!row) return std::nullopt;
  return KernelOperand{2, nullptr};
}

// Whether the kernel can run the node, its weight aside: a static f32 input [.., K], a
// bias it reads as [N], no residual, Gemm's transA = 0 and alpha = beta = 1.
bool Fits(const Node& node, const WeightView& w) {
  const TensorType& x = node.input(0)->type();
  if (x.dtype != DType::kFloat32 || !x.IsStatic()) return false;
  const std::vector<int64_t> a = x.StaticDims();
  if (a.empty() || a.back() != w.K || !BiasOperand(node, w.N)) return false;
  if (node.inputs().size() > 3 && node.input(3) != nullptr) return false;  // a fused residual
  return node.op() != "Gemm" || (node.GetInt("transA", 0) == 0 && node.GetFloat("alpha", 1.0) == 1.0 &&
                                 (node.inputs().size() < 3 || node.GetFloat("beta", 1.0) == 1.0));
}

}  // namespace

absl::StatusOr<std::optional<KernelCall>> LowerSparseMatMul(const Node& node) {
  const std::string algorithm = node.GetString("kiln.algorithm", "");
  if (algorithm == "dense") return std::nullopt;
  const bool forced = algorithm == "sparse";
  // Where the sparse kernel does not apply: the dense lowering, or an error if it was asked for.
  auto not_applicable = [&]() -> absl::StatusOr<std::optional<KernelCall>> {
    if (!forced) return std::optional<KernelCall>();
    return NodeError(node,
                     "kiln.algorithm 'sparse' needs a constant 2-D f32 weight with N a multiple of 16, an f32 "
                     "input, a bias of [N] and (Gemm) transA = 0, alpha = beta = 1");
  };
  const std::optional<WeightView> w = ViewWeight(node);
  if (!w || !Fits(node, *w)) return not_applicable();
  if (!RunsSparse(node)) return std::nullopt;  // the blocks above the crossover
  const std::optional<BlockCount> count = CountWeightBlocks(node);
  const std::vector<int64_t> a = StaticDims(node.input(0));
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < a.size(); ++i) rows *= a[i];
  kiln_sparse_matmul_params params{};
  params.rows = rows;
  params.K = w->K;
  params.N = w->N;
  KILN_ASSIGN_OR_RETURN(params.activation, FusedActivation(node));
  PackedBlocks packed = PackBlocks(*w, count->nonzero);
  std::vector<KernelOperand> inputs = {KernelOperand{0, nullptr}, KernelOperand{-1, std::move(packed.values)},
                                       KernelOperand{-1, std::move(packed.ks)},
                                       KernelOperand{-1, std::move(packed.start)}, *BiasOperand(node, w->N)};
  return std::optional<KernelCall>(CallWithParams<kernel::sparse_matmul>(std::move(inputs), params));
}

}  // namespace kiln::ops

namespace kiln {

std::optional<BlockCount> CountWeightBlocks(const Node& node) {
  const std::optional<ops::WeightView> w = ops::ViewWeight(node);
  if (!w) return std::nullopt;
  BlockCount count;
  const int64_t panels = w->N / KILN_SPARSE_BLOCK_COLS;
  count.blocks = w->K * panels;
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t k = 0; k < w->K; ++k) count.nonzero += w->BlockNonzero(k, p);
  }
  return count;
}

bool RunsSparse(const Node& node) {
  const std::optional<ops::WeightView> w = ops::ViewWeight(node);
  if (!w || !ops::Fits(node, *w) || node.GetString("kiln.algorithm", "") == "dense") return false;
  return node.GetString("kiln.algorithm", "") == "sparse" ||
         CountWeightBlocks(node)->density() <= kSparseMaxBlockDensity;
}

}  // namespace kiln
