// Target specs: what a compile is for. Host detection, named presets and explicit
// triple/cpu/features, and the canonical text that enters cache keys and manifests.
// Its own library (kiln_target) so the service can canonicalise targets without the
// rest of the compiler.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

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

}  // namespace kiln
