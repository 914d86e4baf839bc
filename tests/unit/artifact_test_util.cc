// Helpers for unit tests that compile graphs into artifacts and run them.
#include "artifact_test_util.h"
#include "kiln/common/file.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "gtest/gtest.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/runtime_tensor.h"
#include "kiln/compiler/target.h"
#include "kiln/runtime.h"

namespace kiln {

std::shared_ptr<Tensor> Random(std::vector<int64_t> dims, uint32_t seed, float scale) {
  auto t = std::make_shared<Tensor>(DType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  for (int64_t i = 0; i < t->num_elements(); ++i) t->data_as<float>()[i] = dist(rng);
  return t;
}

std::unique_ptr<Graph> WithOutput(std::unique_ptr<Graph> graph, Value* output) {
  graph->AddOutput(output);
  EXPECT_TRUE(InferTypes(*graph).ok());
  return graph;
}

Node* AddReshape(Graph& graph, const std::string& name, Value* input, const std::vector<int64_t>& shape) {
  auto tensor = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(shape.size())});
  std::copy(shape.begin(), shape.end(), tensor->data_as<int64_t>());
  return graph.AddNode("Reshape", name, {input, graph.AddConstant(graph.UniqueName(name + ".shape"), tensor)},
                       {graph.UniqueName(name)}, 13);
}

std::vector<std::string> TileTargets() {
  std::vector<std::string> targets = {"x86-64-v3"};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd")) {
    targets.push_back("x86-64-v4");
  }
  return targets;
}

absl::StatusOr<ArtifactBytes> GenerateFor(Graph& graph, const std::string& target_spec) {
  PassContext ctx;
  if (auto folded = RunPipeline(graph, "fold-constants", {}, ctx); !folded.ok()) return folded.status();
  auto target = ResolveTarget(target_spec);
  if (!target.ok()) return target.status();
  return GenerateArtifact(graph, NaiveMemoryPlan(graph), CodegenOptions{*target, "{}", "test"});
}

kiln_module* CompileAndLoad(Graph& graph, const std::string& pipeline, const std::string& target_spec) {
  PassContext ctx;
  auto stats = RunPipeline(graph, pipeline, {}, ctx);
  EXPECT_TRUE(stats.ok()) << stats.status();
  auto target = ResolveTarget(target_spec);
  EXPECT_TRUE(target.ok());
  if (!stats.ok() || !target.ok()) return nullptr;
  CodegenOptions options{*target, "{}", "test"};
  auto artifact = GenerateArtifact(graph, PlannedOrNaiveMemory(graph, ctx), options);
  EXPECT_TRUE(artifact.ok()) << artifact.status();
  if (!artifact.ok()) return nullptr;
  std::string path = "/tmp/kiln-unit-" + std::to_string(getpid()) + ".so";
  EXPECT_TRUE(WriteFile(path, artifact->shared_object).ok());
  kiln_module* module = nullptr;
  EXPECT_EQ(kiln_module_load(path.c_str(), &module), KILN_OK) << kiln_last_error();
  unlink(path.c_str());
  return module;
}

std::vector<std::vector<Tensor>> RunArtifactOutputs(Graph& graph, const std::string& pipeline,
                                                    const std::vector<Tensor>& inputs,
                                                    const std::vector<int32_t>& thread_counts,
                                                    const std::string& target_spec) {
  std::vector<std::vector<Tensor>> runs;
  kiln_module* module = CompileAndLoad(graph, pipeline, target_spec);
  if (module == nullptr) return runs;
  std::vector<const void*> ins;
  for (const Tensor& t : inputs) ins.push_back(t.data());
  for (int32_t threads : thread_counts) {
    kiln_session* session = nullptr;
    kiln_session_options session_options{sizeof(kiln_session_options), threads};
    EXPECT_EQ(kiln_session_create(module, &session_options, &session), KILN_OK) << kiln_last_error();
    std::vector<Tensor>& outputs = runs.emplace_back();
    std::vector<void*> outs;
    for (const Value* y : graph.outputs())
      outs.push_back(outputs.emplace_back(y->type().dtype, y->type().StaticDims()).data());
    EXPECT_EQ(kiln_session_run(session, ins.data(), outs.data()), KILN_OK) << kiln_last_error();
    kiln_session_destroy(session);
  }
  kiln_module_unload(module);
  return runs;
}

std::vector<Tensor> RunShapedArtifact(Graph& graph, const std::string& pipeline, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs;
  kiln_module* module = CompileAndLoad(graph, pipeline, "host");
  if (module == nullptr) return outputs;
  kiln_session* session = nullptr;
  kiln_session_options session_options{sizeof(kiln_session_options), 1};
  EXPECT_EQ(kiln_session_create(module, &session_options, &session), KILN_OK) << kiln_last_error();
  std::vector<kiln_tensor> ins, outs(graph.outputs().size());
  for (const Tensor& t : inputs) ins.push_back(RuntimeView(t));
  const kiln_status status = kiln_session_run_shaped(session, ins.data(), outs.data());
  EXPECT_EQ(status, KILN_OK) << kiln_last_error();
  for (size_t i = 0; status == KILN_OK && i < outs.size(); ++i) outputs.push_back(FromRuntime(outs[i]));
  kiln_session_destroy(session);
  kiln_module_unload(module);
  return outputs;
}

std::vector<Tensor> RunArtifact(Graph& graph, const std::string& pipeline, const Tensor& input,
                                const std::vector<int32_t>& thread_counts, const std::string& target_spec) {
  std::vector<Tensor> outputs;
  for (std::vector<Tensor>& run : RunArtifactOutputs(graph, pipeline, {input}, thread_counts, target_spec)) {
    outputs.push_back(std::move(run[0]));
  }
  return outputs;
}

}  // namespace kiln
