// Target specs: what a compile is for. The host (detected with cpuid on x86-64, HWCAP on
// aarch64), named presets, and explicit triple/cpu/features checked against the names LLVM
// knows. Its own library (kiln_target) with no LLVM in it, so kilnd resolves targets
// without linking the compiler.
#pragma once

#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "kiln/v1/spec.pb.h"

namespace kiln {

// The form codegen reads (LLVM takes the features as one comma-separated string).
struct TargetSpec {
  std::string name;      // the preset: "host", "x86-64-v3", ..., or "custom"
  std::string triple;    // e.g. x86_64-unknown-linux-gnu
  std::string cpu;       // e.g. znver4
  std::string features;  // e.g. +avx2,+fma (sorted)
  bool is_host = false;  // code for it runs on this machine (validation, latency, tuning)
};

// "host", a preset (TargetPresets()), or "triple=T[,cpu=C][,features=+a,-b]" as text, the
// form of --target flags; resolved.
absl::StatusOr<TargetSpec> ResolveTarget(const std::string& spec);
// The text form as an unresolved message: {preset} or {preset "custom", triple, cpu,
// features}. Errors name the text and say what is accepted.
absl::StatusOr<v1::Target> ParseTarget(absl::string_view text);
// Fills a message's triple/cpu/features from its preset, or checks and normalises an
// explicit one (preset "custom"). A "host" message whose fields are filled already is kept
// as it is: it was resolved on the machine that first normalised it (kilnd's, for a job).
// Idempotent. Errors are InvalidArgument and name the field ("target.cpu ...").
absl::StatusOr<v1::Target> ResolveTarget(const v1::Target& target);

// The struct codegen reads, from a resolved message (is_host: CanRunHere).
TargetSpec ToTargetSpec(const v1::Target& target);
v1::Target ToTargetProto(const TargetSpec& target);

std::vector<std::string> TargetPresets();  // "host" first
// The canonical text of a target (job listings, tuning and kernel caches): triple/cpu/features.
std::string CanonicalTarget(const TargetSpec& target);
std::string CanonicalTarget(const v1::Target& target);

// Whether code for a resolved target runs on this machine: the same architecture, and every
// feature it turns on (itself or through its CPU) is one this machine has.
bool CanRunHere(const v1::Target& target);

// This machine, as `ResolveTarget("host")` gives it: the LLVM CPU name (from the vendor,
// family and model; else the x86-64 level its features reach) and an explicit + or - for
// every feature codegen may use (CodegenFeatureNames), so an artifact never uses an
// instruction this machine lacks even where the CPU name would imply it.
const v1::Target& HostTarget();
// The features codegen may use on the triple's architecture (LLVM's names): LLVM
// vectorises with them or the kernels ask for them. Presets list theirs among these.
std::vector<std::string> CodegenFeatureNames(absl::string_view triple);

// Host detection from raw CPU identification, for tests.
struct X86CpuId {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  int family = 0, model = 0;
  // Registers of cpuid leaves 1, 7.0, 7.1 and 0x80000001 ({eax, ebx, ecx, edx} each) and
  // xgetbv(0): which register state the OS saves (AVX and AVX-512 need it).
  unsigned leaf1[4] = {}, leaf7[4] = {}, leaf7_1[4] = {}, ext1[4] = {};
  unsigned long long xcr0 = 0;
};
v1::Target X86HostTarget(const X86CpuId& id);
v1::Target Aarch64HostTarget(unsigned long hwcap, unsigned long hwcap2, unsigned implementer, unsigned part);

}  // namespace kiln
