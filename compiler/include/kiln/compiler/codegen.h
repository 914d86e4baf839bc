// Target specs, LLVM code generation and linking of the artifact shared object.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/common/file.h"
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

// What an artifact's bytes are made of (CompileReport.ArtifactSize says what each part
// holds); the parts sum to its size.
struct ArtifactSize {
  int64_t weights_given = 0;
  int64_t weights_added = 0;
  int64_t weights_alignment = 0;
  int64_t code = 0;
  int64_t tables = 0;
  int64_t elf_overhead = 0;
  int64_t total() const { return weights_given + weights_added + weights_alignment + code + tables + elf_overhead; }
};

struct ArtifactBytes {
  std::string shared_object;  // empty when written to CodegenOptions::output_path
  int64_t artifact_bytes = 0;
  ArtifactSize size;
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

// Everything LLD needs, compiled into a scratch directory: the glue objects, the weights
// object and the kernel library's objects. Nothing here points into the graph, so a caller
// may free the graph and its weights before the link maps and writes as many bytes again.
struct ArtifactObjects {
  TempDirectory directory;
  std::vector<std::string> paths;
  ArtifactBytes bytes;  // all but the linked artifact's size (and the link's time)
};

// GenerateArtifact's first part: plan, glue, weights object, kernel library.
absl::StatusOr<ArtifactObjects> CompileArtifactObjects(const Graph& graph, const MemoryPlan& plan,
                                                       const CodegenOptions& options);
// Its second: LLD links the objects into the artifact (options.output_path, or bytes).
absl::StatusOr<ArtifactBytes> LinkArtifact(ArtifactObjects objects, const CodegenOptions& options);

// Lowers the graph to one LLVM module of glue (a kernel call per node, fused elementwise
// loops, the descriptor), optimises it for the target, writes the weights as their own
// object, and links both with the target's compiled kernel library (kernel_library.h)
// into a self-contained shared object with LLD.
absl::StatusOr<ArtifactBytes> GenerateArtifact(const Graph& graph, const MemoryPlan& plan,
                                               const CodegenOptions& options);

// An ELF file's bytes by kind of section, from its section headers (`read` returns `size`
// bytes at `offset`): the loaded ones, of which executable, and the file's size.
struct ElfSections {
  int64_t loaded = 0;
  int64_t executable = 0;
  int64_t file = 0;
};
absl::StatusOr<ElfSections> ReadElfSections(
    int64_t file_size, const std::function<absl::StatusOr<std::string>(int64_t offset, int64_t size)>& read);

// Links ELF objects into a shared object at `output_path` (in-process LLD).
absl::Status LinkSharedObjectTo(const std::vector<std::string>& objects, const TargetSpec& target,
                                const std::string& output_path);
// The same, returning its bytes.
absl::StatusOr<std::string> LinkSharedObject(const std::vector<std::string>& objects, const TargetSpec& target,
                                             const std::string& output_path);

}  // namespace kiln
