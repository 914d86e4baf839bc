// LLVM target machines and target traits: see llvm_target.h.
#include "llvm_target.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/Transforms/IPO/GlobalDCE.h"

namespace kiln::codegen {

void InitializeLlvmTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> MakeTargetMachine(const TargetSpec& target, bool sections) {
  InitializeLlvmTargets();
  std::string error;
  const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (llvm_target == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("LLVM has no target for '", target.triple, "': ", error));
  }
  llvm::TargetOptions options;
  options.FunctionSections = sections;
  options.DataSections = sections;
  std::unique_ptr<llvm::TargetMachine> machine(
      llvm_target->createTargetMachine(target.triple, target.cpu, target.features, options, llvm::Reloc::PIC_,
                                       std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (machine == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create an LLVM target machine for ", target.triple, "/",
                                                   target.cpu, "/", target.features));
  }
  return machine;
}

TargetTraits TraitsOf(const llvm::TargetMachine& machine) {
  // Asked of x86 targets only: LLVM complains on stderr about a feature name its target
  // does not know.
  const bool x86 = machine.getTargetTriple().isX86();
  const llvm::MCSubtargetInfo* features = machine.getMCSubtargetInfo();
  TargetTraits traits;
  traits.wide_vectors = x86 && features->checkFeatures("+avx512f");
  traits.gemm_tile = traits.wide_vectors ? "12x32" : "6x16";
  traits.int8_dot_name = "plain";
  if (x86 && features->checkFeatures("+avx512f,+avx512bw,+avx512vl,+avx512vnni")) {
    traits.int8_dot = 1;
    traits.int8_dot_name = "avx512-vnni";
  } else if (x86 && features->checkFeatures("+avx2,+fma,+avxvnni")) {
    traits.int8_dot = 2;
    traits.int8_dot_name = "avx-vnni";
  }
  traits.bf16_dot = x86 && features->checkFeatures("+avx512f,+avx512bf16");
  traits.byte_permute = x86 && features->checkFeatures("+avx512f,+avx512bw,+avx512vl,+avx512vbmi");
  return traits;
}

void SetTargetAttributes(llvm::Function& function, const TargetSpec& target) {
  function.removeFnAttr("target-cpu");
  function.removeFnAttr("target-features");
  function.removeFnAttr("tune-cpu");
  function.addFnAttr("target-cpu", target.cpu);
  if (!target.features.empty()) function.addFnAttr("target-features", target.features);
}

void OptimizeO3(llvm::Module& module, llvm::TargetMachine& machine, bool drop_unused) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder passes(&machine, tuning);
  passes.registerModuleAnalyses(mam);
  passes.registerCGSCCAnalyses(cgam);
  passes.registerFunctionAnalyses(fam);
  passes.registerLoopAnalyses(lam);
  passes.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager pipeline;
  if (drop_unused) pipeline.addPass(llvm::GlobalDCEPass());
  pipeline.addPass(passes.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3));
  pipeline.run(module, mam);
}

}  // namespace kiln::codegen
