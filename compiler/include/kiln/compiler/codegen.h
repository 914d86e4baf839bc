// Target specs, LLVM code generation and linking of the artifact shared object.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/passes.h"

namespace kiln {

struct TargetSpec {
  std::string name;      // what the user asked for: "host", "x86-64-v3", or "custom"
  std::string triple;    // e.g. x86_64-unknown-linux-gnu
  std::string cpu;       // e.g. znver4
  std::string features;  // e.g. +avx2,+fma
  bool is_host = false;  // code may be run on this machine (validation, latency)
};

// Accepts "host", a preset (x86-64, x86-64-v2, x86-64-v3, x86-64-v4, znver3, znver4,
// skylake-avx512, aarch64, neoverse-v1), or "triple=T[,cpu=C][,features=F]".
absl::StatusOr<TargetSpec> ResolveTarget(const std::string& spec);
std::vector<std::string> TargetPresets();
// The canonical text of a target (cache keys, manifests): triple/cpu/sorted features.
std::string CanonicalTarget(const TargetSpec& target);

struct CodegenOptions {
  TargetSpec target;
  std::string manifest_json;
  std::string compiler_version;
};

struct ArtifactBytes {
  std::string shared_object;
  int64_t workspace_bytes = 0;
  int64_t object_bytes = 0;
};

// Lowers the graph to one LLVM module (kernel library linked in), optimises it for the
// target, emits an object file and links a self-contained shared object with LLD.
absl::StatusOr<ArtifactBytes> GenerateArtifact(const Graph& graph, const MemoryPlan& plan,
                                               const CodegenOptions& options);

// Links one ELF object into a shared object (in-process LLD).
absl::StatusOr<std::string> LinkSharedObject(const std::string& object, const TargetSpec& target);

}  // namespace kiln
