// The LLVM-free target library against the LLVM the compiler links: its tables of CPU and
// feature names (compiler/target/llvm_names.inc) are LLVM's, each preset lists exactly the
// codegen features its CPU turns on, and host detection (cpuid / HWCAP) names the CPU and
// features LLVM's own detection finds on this machine.
#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/compiler/target.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

namespace kiln {
namespace {

#include "../../compiler/target/llvm_names.inc"

std::unique_ptr<llvm::MCSubtargetInfo> SubtargetFor(const std::string& triple, const std::string& cpu) {
  static bool initialised = [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    return true;
  }();
  (void)initialised;
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  EXPECT_NE(target, nullptr) << error;
  return std::unique_ptr<llvm::MCSubtargetInfo>(target->createMCSubtargetInfo(triple, cpu, ""));
}

template <size_t N>
std::set<std::string> AsSet(const char* const (&names)[N]) {
  return std::set<std::string>(std::begin(names), std::end(names));
}

TEST(TargetLlvmTest, NameTablesAreLlvms) {
  for (const auto& [triple, cpus, features] :
       {std::tuple{"x86_64-unknown-linux-gnu", AsSet(kX86Cpus), AsSet(kX86Features)},
        std::tuple{"aarch64-unknown-linux-gnu", AsSet(kAarch64Cpus), AsSet(kAarch64Features)}}) {
    auto sti = SubtargetFor(triple, "");
    std::set<std::string> llvm_cpus, llvm_features;
    for (const auto& kv : sti->getAllProcessorDescriptions()) llvm_cpus.insert(kv.Key);
    for (const auto& kv : sti->getAllProcessorFeatures()) llvm_features.insert(kv.Key);
    EXPECT_EQ(cpus, llvm_cpus) << triple << ": regenerate compiler/target/llvm_names.inc for this LLVM";
    EXPECT_EQ(features, llvm_features) << triple << ": regenerate compiler/target/llvm_names.inc for this LLVM";
    for (const std::string& name : CodegenFeatureNames(triple)) EXPECT_TRUE(features.count(name)) << name;
  }
}

TEST(TargetLlvmTest, PresetsListWhatTheirCpuTurnsOn) {
  for (const std::string& preset : TargetPresets()) {
    if (preset == "host") continue;
    auto target = ResolveTarget(preset);
    ASSERT_TRUE(target.ok()) << target.status();
    auto sti = SubtargetFor(target->triple, target->cpu);
    ASSERT_TRUE(sti->isCPUStringValid(target->cpu)) << preset;
    std::vector<std::string> want;
    for (const std::string& name : CodegenFeatureNames(target->triple)) {
      if (sti->checkFeatures("+" + name)) want.push_back("+" + name);
    }
    std::sort(want.begin(), want.end());
    std::string joined;
    for (const std::string& f : want) joined += (joined.empty() ? "" : ",") + f;
    EXPECT_EQ(target->features, joined) << preset;
  }
}

TEST(TargetLlvmTest, HostDetectionAgreesWithLlvm) {
  const v1::Target& host = HostTarget();
  const std::string llvm_cpu = llvm::sys::getHostCPUName().str();
  // Where Kiln's tables do not know the model it names the x86-64 level instead: fine for
  // correctness (every feature is explicit), so only a known name must match LLVM's.
  if (host.cpu().rfind("x86-64", 0) != 0 && host.cpu() != "generic") EXPECT_EQ(host.cpu(), llvm_cpu);
  llvm::StringMap<bool> llvm_features = llvm::sys::getHostCPUFeatures();
  for (const std::string& f : host.features()) {
    const std::string name = f.substr(1);
    EXPECT_EQ(f[0] == '+', llvm_features.lookup(name)) << name << ": Kiln says " << f;
  }
}

}  // namespace
}  // namespace kiln
