// Helpers for unit tests that compile graphs into artifacts and run them: random
// constants, the register-tile targets this CPU can run, and an artifact run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/ir.h"
#include "kiln/runtime.h"

namespace kiln {

// A f32 tensor of normal samples (mean 0, standard deviation `scale`), seeded.
std::shared_ptr<Tensor> Random(std::vector<int64_t> dims, uint32_t seed, float scale = 1.0f);

// Makes `output` the graph's output and infers its types (the test fails if that fails).
std::unique_ptr<Graph> WithOutput(std::unique_ptr<Graph> graph, Value* output);

// Reshape(input, shape) appended to the graph, the shape a 1-D int64 constant.
Node* AddReshape(Graph& graph, const std::string& name, Value* input, const std::vector<int64_t>& shape);

// The GEMM core's two register tiles (gemm_core.h) by the targets that select them: 6x16
// for AVX2 (x86-64-v3) and 12x32 for AVX-512F (x86-64-v4), the wide one only where this
// CPU can run it. Tests of GEMM-shaped kernels run on each.
std::vector<std::string> TileTargets();

// Folds the graph's constants and generates its artifact for `target_spec` (any target:
// nothing runs), with the naive memory plan: for tests of what codegen chose.
absl::StatusOr<ArtifactBytes> GenerateFor(Graph& graph, const std::string& target_spec);

// Runs `pipeline` on the graph, compiles it for `target` (this machine must run it) and
// runs the artifact on `input` (the graph's one input) once per thread count; returns the
// output (graph output 0) of each run, in order.
std::vector<Tensor> RunArtifact(Graph& graph, const std::string& pipeline, const Tensor& input,
                                const std::vector<int32_t>& thread_counts, const std::string& target_spec = "host");
// RunArtifact for a graph of any inputs (in graph-input order) and outputs: every graph
// output of each run.
std::vector<std::vector<Tensor>> RunArtifactOutputs(Graph& graph, const std::string& pipeline,
                                                    const std::vector<Tensor>& inputs,
                                                    const std::vector<int32_t>& thread_counts,
                                                    const std::string& target_spec = "host");

// Runs `pipeline` on the graph, compiles it for `target_spec` and loads the artifact (the
// file is removed once loaded); nullptr after a test failure.
kiln_module* CompileAndLoad(Graph& graph, const std::string& pipeline, const std::string& target_spec);

// Compiles the graph with `pipeline` for this machine (its inputs may have symbolic dims,
// or feed inputs that decide shapes) and runs it once through kiln_session_run_shaped on
// `inputs`: every graph output, with the dims the artifact gave it.
std::vector<Tensor> RunShapedArtifact(Graph& graph, const std::string& pipeline, const std::vector<Tensor>& inputs);

}  // namespace kiln
