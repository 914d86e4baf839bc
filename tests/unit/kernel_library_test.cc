// The per-target kernel library (kernel_library.h) and the parallel glue (codegen/glue.h):
// kernels compile once and are found afterwards; a graph large enough to be split into
// several glue modules still matches the interpreter, and compiling it twice gives the
// same bytes.
#include <cstdlib>
#include <random>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/common/file.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/kernel_library.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/target.h"
#include "temp_dir.h"

namespace kiln {
namespace {

TEST(KernelLibraryTest, CompilesOnceThenFindsTheCache) {
  const std::string cache = testing::MakeTempDir("kiln-kernel-cache");
  setenv("KILN_CACHE_DIR", cache.c_str(), 1);
  setenv("KILN_KERNEL_DIR", "", 1);
  auto target = ResolveTarget("x86-64-v3");
  ASSERT_TRUE(target.ok());
  auto first = GetKernelObjects(*target, {"kiln_k_unary_f32", "kiln_k_softmax_f32"});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->compiled, 2);
  ASSERT_EQ(first->objects.size(), 2u);
  EXPECT_EQ(first->objects[0], cache + "/kernels/" + KernelLibraryKey(*target) + "/kiln_k_unary_f32.o");
  EXPECT_TRUE(FileExists(first->objects[0]) && FileExists(first->objects[1]));
  auto again = GetKernelObjects(*target, {"kiln_k_softmax_f32"});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->compiled, 0);
  EXPECT_EQ(again->objects[0], first->objects[1]);
  // Another target is another directory.
  auto v4 = ResolveTarget("x86-64-v4");
  ASSERT_TRUE(v4.ok());
  EXPECT_NE(KernelLibraryKey(*v4), KernelLibraryKey(*target));
  auto missing = GetKernelObjects(*target, {"kiln_k_no_such_kernel"});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("kiln_k_no_such_kernel"), std::string::npos) << missing.status();
  unsetenv("KILN_CACHE_DIR");
  unsetenv("KILN_KERNEL_DIR");
}

TEST(KernelLibraryTest, ListsEveryExportedKernel) {
  const std::vector<std::string> kernels = AllKernels();
  for (const char* name : {"kiln_k_conv_f32", "kiln_k_matmul_f32", "kiln_k_qconv", "kiln_k_gather_b4"}) {
    EXPECT_NE(std::find(kernels.begin(), kernels.end(), name), kernels.end()) << name;
  }
}

// A chain of `layers` x (MatMul, Tanh): no fusion runs, so every node is a call and the
// glue has 2 * layers nodes.
std::unique_ptr<Graph> MatMulTanhChain(int layers) {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {3, 8}));
  g->AddInput(x);
  Value* v = x;
  for (int i = 0; i < layers; ++i) {
    Value* w = g->AddConstant("w" + std::to_string(i), Random({8, 8}, 100 + i, 0.4f));
    v = g->AddNode("MatMul", "mm" + std::to_string(i), {v, w}, {"m" + std::to_string(i)}, 13)->output(0);
    v = g->AddNode("Tanh", "t" + std::to_string(i), {v}, {"t" + std::to_string(i)}, 13)->output(0);
  }
  g->AddOutput(v);
  EXPECT_TRUE(InferTypes(*g).ok());
  return g;
}

TEST(CodegenTest, LargeGraphIsSplitIntoModulesAndMatchesTheInterpreter) {
  // 700 nodes: 11 parts of 64 nodes, built as two modules on two threads.
  std::unique_ptr<Graph> g = MatMulTanhChain(350);
  std::shared_ptr<Tensor> input = Random({3, 8}, 7);
  auto reference = RunGraph(*g, {*input});
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<Tensor> got = RunArtifact(*g, "", *input, {1, 2});
  ASSERT_EQ(got.size(), 2u);
  for (const Tensor& out : got) {
    ASSERT_EQ(out.num_elements(), (*reference)[0].num_elements());
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      EXPECT_NEAR(out.data_as<float>()[i], (*reference)[0].data_as<float>()[i], 1e-5) << i;
    }
  }
  // The split depends on the graph alone: two compiles give the same bytes.
  std::unique_ptr<Graph> h = MatMulTanhChain(350);
  auto first = GenerateFor(*h, "x86-64-v3");
  auto second = GenerateFor(*h, "x86-64-v3");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(first->shared_object == second->shared_object);
}

}  // namespace
}  // namespace kiln
