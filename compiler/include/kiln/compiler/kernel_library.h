// The kernel library compiled for a target. Each kernel (an exported kiln_k_* function of
// the library's bitcode, embedded in the compiler) is compiled once per (kernel bitcode,
// target): specialised for the target, optimised at -O3 and emitted as its own object file.
// A compile then generates only the model's glue (a call per node, fused loops, the
// descriptor) and links it against the objects of the kernels it calls.
//
// Objects live in DIR/<bitcode hash>/<target hash>/<kernel>.o, beside <kernel>.uses (what
// it asks of the target). Directories searched in order: $KILN_KERNEL_DIR (colon-separated)
// and <prefix>/lib/kiln/kernels, read-only and prebuilt at install time (`kiln kernels`),
// then the cache ($KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; kernels/
// below it), where a missing kernel is compiled on first use. Objects are published by
// rename, so concurrent compiles never link half of one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/target.h"

namespace kiln {

struct KernelObjects {
  std::vector<std::string> objects;  // one .o path per kernel asked for
  // What the kernels ask of the target: kUsesVectorTile when their code depends on the
  // GEMM core's tile, kUsesInt8Dot on the int8 dot product.
  enum Use : uint32_t { kUsesVectorTile = 1, kUsesInt8Dot = 2 };
  uint32_t uses = 0;
  int compiled = 0;  // kernels compiled now (the rest were found)
  double compile_ms = 0;
};

// The objects of `kernels` (kiln_k_* names) for `target`, compiling (on every core) and
// caching those not found.
absl::StatusOr<KernelObjects> GetKernelObjects(const TargetSpec& target, const std::vector<std::string>& kernels);

// Compiles `kernels` for `target` into `root` (a prebuilt directory, or the cache's
// kernels/ directory), skipping those already there; for `kiln kernels`.
absl::StatusOr<KernelObjects> BuildKernels(const TargetSpec& target, const std::vector<std::string>& kernels,
                                           const std::string& root);

// Every kernel the library exports.
std::vector<std::string> AllKernels();

// Directories searched for prebuilt kernels, then the cache directory (last).
std::vector<std::string> KernelLibrarySearchPath();

// "<bitcode hash>/<target hash>": where a target's objects live below a directory.
std::string KernelLibraryKey(const TargetSpec& target);

}  // namespace kiln
