// The block-sparse MatMul/Gemm kernel (compiler/kernels/sparse/) against a plain dense
// product on odd shapes (primes, one row, tails that are not a multiple of the tile),
// empty panels and block densities from 0 to 100 %, on each register tile this CPU runs;
// and where lowering picks it: a weight the prune pass left sparse, above the crossover.
#include <cmath>
#include <random>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/sparse.h"

namespace kiln {
namespace {

// A [K, N] weight whose 1x16 blocks are each kept with probability `density` (all zero
// otherwise); panel 1, where there is one, is left empty whatever the density.
std::shared_ptr<Tensor> BlockSparseWeight(int64_t K, int64_t N, double density, uint32_t seed) {
  std::shared_ptr<Tensor> w = Random({K, N}, seed, 0.3f);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  float* data = w->data_as<float>();
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t p = 0; p < N / kSparseBlockCols; ++p) {
      const bool keep = p != 1 && coin(rng) < density;
      if (keep) continue;
      for (int64_t j = 0; j < kSparseBlockCols; ++j) data[k * N + p * kSparseBlockCols + j] = 0.0f;
    }
  }
  return w;
}

struct Case {
  std::vector<int64_t> x_dims;  // [.., K]
  int64_t N;
  double density;
  bool bias = false, relu = false;
  bool gemm = false, trans_b = false;
};

// x -> MatMul (or Gemm) by the case's weight (+ bias, Relu: fused by the pipeline).
std::unique_ptr<Graph> SparseNet(const Case& c, const std::shared_ptr<Tensor>& w, const std::shared_ptr<Tensor>& bias,
                                 const std::string& algorithm) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, c.x_dims));
  g->AddInput(x);
  std::shared_ptr<Tensor> weight = w;
  const int64_t K = c.x_dims.back();
  if (c.trans_b) {  // stored [N, K]
    weight = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{c.N, K});
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n = 0; n < c.N; ++n) weight->data_as<float>()[n * K + k] = w->data_as<float>()[k * c.N + n];
    }
  }
  std::vector<Value*> inputs = {x, g->AddConstant("w", weight)};
  if (c.gemm && c.bias) inputs.push_back(g->AddConstant("c", bias));
  Node* mm = g->AddNode(c.gemm ? "Gemm" : "MatMul", "mm", inputs, {"y"}, 13);
  if (c.trans_b) mm->mutable_attrs()["transB"] = int64_t{1};
  if (!algorithm.empty()) mm->mutable_attrs()["kiln.algorithm"] = algorithm;
  Value* y = mm->output(0);
  if (!c.gemm && c.bias) y = g->AddNode("Add", "add", {y, g->AddConstant("b", bias)}, {"yb"}, 13)->output(0);
  if (c.relu) y = g->AddNode("Relu", "relu", {y}, {"yr"}, 13)->output(0);
  return WithOutput(std::move(g), y);
}

// The product in double: y[r, n] = sum_k x[r, k] w[k, n] (+ bias[n]), Relu'd.
std::vector<double> DenseProduct(const Case& c, const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t K = c.x_dims.back(), rows = x.num_elements() / K;
  std::vector<double> y(rows * c.N);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < c.N; ++n) {
      double sum = bias != nullptr ? bias->data_as<float>()[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) sum += double{x.data_as<float>()[r * K + k]} * w.data_as<float>()[k * c.N + n];
      y[r * c.N + n] = c.relu && sum < 0 ? 0.0 : sum;
    }
  }
  return y;
}

// The kernel name the MatMul/Gemm lowers to in an artifact.
std::string ArtifactKernel(const Graph& graph) {
  for (const Node* node : graph.nodes()) {
    if (node->op() != "MatMul" && node->op() != "Gemm") continue;
    absl::StatusOr<KernelCall> call = LowerForArtifact(*FindOp(node->op()), *node);
    EXPECT_TRUE(call.ok()) << call.status();
    return call.ok() ? call->kernel : "";
  }
  return "";
}

TEST(SparseMatMulTest, MatchesDenseProduct) {
  const std::vector<Case> cases = {
      {{1, 7}, 16, 0.5},                              // one row, one panel
      {{13, 97}, 48, 0.1, true},                      // 13 rows: a partial tile; the empty panel
      {{2, 3, 61}, 80, 0.3, true, true},              // batch dims folded into rows, fused Relu
      {{250, 300}, 32, 0.05},                         // several row jobs
      {{37, 64}, 64, 0.0, true},                      // no block at all: the bias alone
      {{37, 64}, 64, 1.0},                            // every block (panel 1 aside)
      {{19, 130}, 48, 0.2, true, false, true, true},  // Gemm, transB, C [N]
      {{6, 33}, 16, 0.4, false, true, true, false},   // Gemm without C, Relu
  };
  for (const Case& c : cases) {
    const int64_t K = c.x_dims.back();
    std::shared_ptr<Tensor> w = BlockSparseWeight(K, c.N, c.density, 7);
    std::shared_ptr<Tensor> bias = Random({c.N}, 11, 0.5f);
    std::shared_ptr<Tensor> x = Random(c.x_dims, 13);
    const std::vector<double> want = DenseProduct(c, *x, *w, c.bias ? bias.get() : nullptr);
    for (const std::string& target : TileTargets()) {
      SCOPED_TRACE(::testing::Message() << target << ": x " << x->num_elements() / K << "x" << K << ", N " << c.N
                                        << ", density " << c.density << (c.gemm ? " (Gemm)" : ""));
      std::unique_ptr<Graph> g = SparseNet(c, w, bias, "sparse");
      PassContext ctx;
      ASSERT_TRUE(RunPipeline(*g, "fold-constants,fuse", {}, ctx).ok());
      ASSERT_EQ(ArtifactKernel(*g), "sparse_matmul");
      const std::vector<Tensor> runs = RunArtifact(*g, "fold-constants", *x, {1, 2}, target);
      ASSERT_EQ(runs.size(), 2u);
      for (const Tensor& got : runs) {
        ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size()));
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i)
          worst = std::max(worst, std::fabs(got.data_as<float>()[i] - want[i]) / (1.0 + std::fabs(want[i])));
        EXPECT_LT(worst, 1e-5);
      }
    }
  }
}

// The kernel compiles for every target (generic vectors): AVX2, AVX-512 and aarch64.
TEST(SparseMatMulTest, CompilesForEveryTarget) {
  const Case c{{13, 97}, 48, 0.1, true};
  for (const char* target : {"x86-64-v3", "x86-64-v4", "aarch64"}) {
    SCOPED_TRACE(target);
    std::unique_ptr<Graph> g = SparseNet(c, BlockSparseWeight(97, 48, 0.1, 3), Random({48}, 5), "sparse");
    auto artifact = GenerateFor(*g, target);
    EXPECT_TRUE(artifact.ok()) << artifact.status();
  }
}

// Weight pruning at a high ratio leaves 1x16 blocks few enough for the sparse kernel; at
// a low one, or element by element (few whole blocks zero), the dense kernel stays.
TEST(SparseMatMulTest, PrunedWeightLowersToSparseKernelAboveCrossover) {
  const Case c{{128, 96}, 64, 1.0};
  for (const auto& [pipeline, kernel] :
       std::vector<std::pair<std::string, std::string>>{{"prune{weights=0.9}", "sparse_matmul"},
                                                        {"prune{weights=0.7}", "sparse_matmul"},
                                                        {"prune{weights=0.2}", "matmul"},
                                                        {"prune{weights=0.9 weight-unit=element}", "matmul"}}) {
    SCOPED_TRACE(pipeline);
    std::unique_ptr<Graph> g = SparseNet(c, Random({96, 64}, 17), nullptr, "");
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, pipeline, {}, ctx).ok());
    EXPECT_EQ(ArtifactKernel(*g), kernel);
    const PruningSummary& summary = ctx.pruning_summary;
    EXPECT_EQ(summary.blockable_layers, 1);
    EXPECT_EQ(summary.sparse_layers, kernel == "sparse_matmul" ? 1 : 0);
  }
  // A Gemm the sparse kernel cannot run (alpha != 1) keeps a dense one (MatMul's on B
  // pre-packed, alpha folded into it), and the summary does not count it as sparse.
  {
    std::unique_ptr<Graph> g =
        SparseNet(Case{{128, 96}, 64, 1.0, false, false, true}, Random({96, 64}, 23), nullptr, "");
    g->nodes()[0]->mutable_attrs()["alpha"] = 0.5;
    PassContext ctx;
    ASSERT_TRUE(RunPipeline(*g, "prune{weights=0.9}", {}, ctx).ok());
    EXPECT_EQ(ArtifactKernel(*g), "matmul");
    EXPECT_EQ(ctx.pruning_summary.blockable_layers, 1);
    EXPECT_EQ(ctx.pruning_summary.sparse_layers, 0);
  }
  // kiln.algorithm = "dense" keeps the dense kernel at any density.
  std::unique_ptr<Graph> g = SparseNet(c, BlockSparseWeight(96, 64, 0.05, 19), nullptr, "dense");
  EXPECT_EQ(ArtifactKernel(*g), "matmul");
}

}  // namespace
}  // namespace kiln
