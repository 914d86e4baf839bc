// Target specs: host detection, named presets and explicit triple/cpu/features.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/compiler/target.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

namespace kiln {
namespace {

struct Preset {
  const char* name;
  const char* triple;
  const char* cpu;
  const char* features;
};

constexpr Preset kPresets[] = {
    {"x86-64", "x86_64-unknown-linux-gnu", "x86-64", ""},
    {"x86-64-v2", "x86_64-unknown-linux-gnu", "x86-64-v2", ""},
    {"x86-64-v3", "x86_64-unknown-linux-gnu", "x86-64-v3", ""},
    {"x86-64-v4", "x86_64-unknown-linux-gnu", "x86-64-v4", ""},
    {"znver3", "x86_64-unknown-linux-gnu", "znver3", ""},
    {"znver4", "x86_64-unknown-linux-gnu", "znver4", ""},
    {"skylake-avx512", "x86_64-unknown-linux-gnu", "skylake-avx512", ""},
    {"aarch64", "aarch64-unknown-linux-gnu", "generic", "+neon"},
    {"neoverse-v1", "aarch64-unknown-linux-gnu", "neoverse-v1", ""},
};

void InitLlvmTargets() {
  static bool done = [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    return true;
  }();
  (void)done;
}

}  // namespace

std::vector<std::string> TargetPresets() {
  std::vector<std::string> names = {"host"};
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

absl::StatusOr<TargetSpec> ResolveTarget(const std::string& spec) {
  InitLlvmTargets();
  TargetSpec target;
  const std::string host_triple = llvm::Triple(llvm::sys::getProcessTriple()).normalize();
  if (spec.empty() || spec == "host") {
    target.name = "host";
    target.triple = host_triple;
    target.cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> features;
    for (const auto& entry : llvm::sys::getHostCPUFeatures()) {
      features.push_back(absl::StrCat(entry.getValue() ? "+" : "-", entry.getKey().str()));
    }
    std::sort(features.begin(), features.end());
    target.features = absl::StrJoin(features, ",");
    target.is_host = true;
    return target;
  }
  for (const Preset& p : kPresets) {
    if (spec == p.name) {
      target = TargetSpec{p.name, llvm::Triple(p.triple).normalize(), p.cpu, p.features, false};
      break;
    }
  }
  if (target.name.empty()) {
    if (spec.find('=') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unknown target '", spec, "'; use one of ",
                                                     absl::StrJoin(TargetPresets(), ", "),
                                                     " or triple=T[,cpu=C][,features=+a,+b]"));
    }
    target.name = "custom";
    target.cpu = "generic";
    // features may contain commas, so it must come last: triple=...,cpu=...,features=...
    std::string rest = spec;
    size_t features_at = rest.find("features=");
    if (features_at != std::string::npos) {
      target.features = rest.substr(features_at + 9);
      rest = rest.substr(0, features_at);
    }
    for (absl::string_view part : absl::StrSplit(rest, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
      if (kv.first == "triple")
        target.triple = llvm::Triple(kv.second).normalize();
      else if (kv.first == "cpu")
        target.cpu = kv.second;
      else
        return absl::InvalidArgumentError(
            absl::StrCat("target spec '", spec, "': unknown key '", kv.first, "' (use triple, cpu, features)"));
    }
    if (target.triple.empty())
      return absl::InvalidArgumentError(absl::StrCat("target spec '", spec, "' needs triple=..."));
  }
  std::string error;
  const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (llvm_target == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("target '", spec, "': ", error));
  }
  llvm::Triple triple(target.triple);
  if (!triple.isOSLinux() || !triple.isOSBinFormatELF()) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", spec, "': only Linux ELF targets are supported, got ", target.triple));
  }
  target.is_host = target.triple == host_triple && target.name != "custom";
  if (target.name == "custom" && target.triple == host_triple) {
    // An explicit spec (e.g. a canonical "host" sent to a worker) runs here when this CPU
    // has every feature it turns on.
    llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
    target.is_host = !host.empty();
    for (absl::string_view f : absl::StrSplit(target.features, ',', absl::SkipEmpty())) {
      if (f[0] == '+' && !host.lookup(llvm::StringRef(f.data() + 1, f.size() - 1))) target.is_host = false;
    }
  }
  if (target.is_host) {
    // A preset runs here only if this CPU has what it asks for; LLVM knows the answer.
    llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
    const std::map<std::string, std::vector<std::string>> needs = {{"x86-64-v3", {"avx2", "fma", "bmi2"}},
                                                                   {"x86-64-v4", {"avx512f", "avx512bw", "avx512vl"}},
                                                                   {"znver4", {"avx512f"}},
                                                                   {"skylake-avx512", {"avx512f"}},
                                                                   {"znver3", {"avx2"}}};
    auto it = needs.find(target.name);
    if (it != needs.end()) {
      for (const std::string& f : it->second) {
        if (!host.lookup(f)) target.is_host = false;
      }
    }
  }
  return target;
}

std::string CanonicalTarget(const TargetSpec& target) {
  std::vector<std::string> features = absl::StrSplit(target.features, ',', absl::SkipEmpty());
  std::sort(features.begin(), features.end());
  return absl::StrCat(target.triple, "/", target.cpu, "/", absl::StrJoin(features, ","));
}

}  // namespace kiln
