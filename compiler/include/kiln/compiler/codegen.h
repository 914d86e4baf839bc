// Target specs, LLVM code generation and linking of the artifact shared object.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/target.h"

namespace kiln {

struct CodegenOptions {
  TargetSpec target;
  std::string manifest_json;
  std::string compiler_version;
  // Where the linker writes the artifact (under a temporary name, then renamed): a large
  // model's bytes are then written once and not read back. Empty: returned as bytes.
  std::string output_path;
  // Test only: a kernel name from kernel_list.inc ("gemm", "softmax", "binary", ...) whose
  // calls the glue follows with a deliberate error, +0.01 on the first element of a float
  // output, so tests can show that validation catches a wrong kernel. The name also covers
  // its variants ("conv": conv, conv_winograd, conv_transpose). Empty (always, outside
  // tests) emits nothing. CompileModel sets it from KILN_TEST_INJECT_KERNEL_BUG.
  std::string inject_kernel_bug;
};

struct ArtifactBytes {
  std::string shared_object;  // empty when written to CodegenOptions::output_path
  int64_t artifact_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t object_bytes = 0;
  // Where codegen's time went, in order: plan (each node's kernel call, the weights'
  // layout), glue (building, optimising and emitting the glue modules in parallel while
  // the weights object is written), kernel-library (finding the called kernels' objects,
  // or once per target compiling them), link (LLD).
  std::vector<std::pair<std::string, double>> phase_ms;
  // The GEMM core's register tile for this target (rows x columns of C): "12x32" where the
  // target has AVX-512F, else "6x16" (gemm_core.h). Empty when no kernel uses the core.
  std::string gemm_tile;
  // The int8 kernels' dot product for the target: "avx512-vnni", "avx-vnni" or "plain"
  // (empty when the module has no int8 kernel library).
  std::string int8_dot;
};

// Lowers the graph to one LLVM module of glue (a kernel call per node, fused elementwise
// loops, the descriptor), optimises it for the target, writes the weights as their own
// object, and links both with the target's compiled kernel library (kernel_library.h)
// into a self-contained shared object with LLD.
absl::StatusOr<ArtifactBytes> GenerateArtifact(const Graph& graph, const MemoryPlan& plan,
                                               const CodegenOptions& options);

// Links ELF objects into a shared object at `output_path` (in-process LLD).
absl::Status LinkSharedObjectTo(const std::vector<std::string>& objects, const TargetSpec& target,
                                const std::string& output_path);
// The same, returning its bytes.
absl::StatusOr<std::string> LinkSharedObject(const std::vector<std::string>& objects, const TargetSpec& target,
                                             const std::string& output_path);

}  // namespace kiln
