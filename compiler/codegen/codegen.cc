// LLVM code generation for one model: plan the glue (glue.h), build its modules in
// parallel (a kernel call per node into the target's compiled kernel library, fused
// elementwise loops, the descriptor), optimise and emit each, write the weights as their
// own object (data_object.h), and link everything into a self-contained shared object.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "data_object.h"
#include "glue.h"
#include "kernel_bitcode.h"
#include "kiln/common/file.h"
#include "kiln/common/status.h"
#include "kiln/common/time.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/kernel_library.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Linker/Linker.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm_target.h"

namespace kiln {
namespace {

// The fused loops call the kernel library's scalar ops (kiln_s_unary_f32, ...): those come
// into the glue as bitcode and are inlined with their constant op codes, so the loops
// vectorize; everything else the glue calls stays in the compiled library.
absl::Status LinkScalarOps(llvm::Module& module) {
  std::set<size_t> needed;
  for (const llvm::Function& f : module) {
    if (!f.isDeclaration() || !f.getName().starts_with("kiln_s_")) continue;
    auto it = codegen::BitcodeSymbols().find(f.getName().str());
    if (it == codegen::BitcodeSymbols().end()) {
      return absl::InternalError(absl::StrCat("no kernel bitcode defines ", f.getName().str()));
    }
    needed.insert(it->second);
  }
  for (size_t index : needed) {
    const codegen::EmbeddedBitcode& blob = codegen::KernelBitcode()[index];
    auto lazy = llvm::getLazyBitcodeModule(llvm::MemoryBufferRef(blob.bytes, blob.stem), module.getContext());
    if (!lazy) return absl::InternalError("the embedded kernel bitcode does not parse: " + toString(lazy.takeError()));
    (*lazy)->setTargetTriple(module.getTargetTriple());
    (*lazy)->setDataLayout(module.getDataLayout());
    if (llvm::Linker::linkModules(module, std::move(*lazy), llvm::Linker::LinkOnlyNeeded)) {
      return absl::InternalError(absl::StrCat("linking the scalar ops of ", blob.stem, " into the module failed"));
    }
  }
  return absl::OkStatus();
}

// Every function gets the target's CPU and features (bitcode from the library was compiled
// for a generic CPU, whose attributes would cap the vector width); everything but the
// descriptor is internal; what came from the library is inlined where it is called.
void RetargetGlue(llvm::Module& module, const TargetSpec& target) {
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    codegen::SetTargetAttributes(f, target);
    const llvm::StringRef name = f.getName();
    // Parts are called across modules; kiln_module_v1 is the artifact's one export.
    if (name != "kiln_module_v1" && !name.starts_with("kiln_part_")) f.setLinkage(llvm::GlobalValue::InternalLinkage);
    const bool generated = name == "kiln_entry" || name == "kiln_module_v1" || name.starts_with("kiln_loop_") ||
                           name.starts_with("kiln_body_") || name.starts_with("kiln_part_");
    if (!generated && !f.hasFnAttribute(llvm::Attribute::NoInline)) {
      f.removeFnAttr(llvm::Attribute::OptimizeNone);
      f.addFnAttr(llvm::Attribute::AlwaysInline);
    }
  }
  for (llvm::GlobalVariable& g : module.globals()) {
    if (!g.isDeclaration()) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
}

absl::StatusOr<std::string> EmitObject(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream stream(object);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, stream, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return absl::InternalError("the target cannot emit object files");
  }
  codegen.run(module);
  return std::string(object.data(), object.size());
}

// Times codegen's phases for the compile report.
class PhaseClock {
 public:
  void End(const char* name) {
    phases_.emplace_back(name, clock_.ElapsedMs());
    clock_.Restart();
  }
  std::vector<std::pair<std::string, double>> Take() { return std::move(phases_); }

 private:
  Stopwatch clock_;
  std::vector<std::pair<std::string, double>> phases_;
};

// What the called kernels ask of the target, for the compile report.
void DescribeKernels(const KernelObjects& kernels, const codegen::TargetTraits& traits, ArtifactBytes& result) {
  if (kernels.uses & KernelObjects::kUsesVectorTile) result.gemm_tile = traits.gemm_tile;
  if (kernels.uses & KernelObjects::kUsesInt8Dot) result.int8_dot = traits.int8_dot_name;
}

// Developer aid: KILN_DUMP_LLVM_IR=FILE writes the optimised glue module as text.
void MaybeDumpModule(const llvm::Module& module) {
  const char* dump = std::getenv("KILN_DUMP_LLVM_IR");
  if (dump == nullptr || *dump == '\0') return;
  std::error_code error;
  llvm::raw_fd_ostream file(dump, error);
  if (!error) module.print(file, nullptr);
}

// One glue module built, optimised and emitted: its object bytes and the kernels it calls.
struct GlueObject {
  absl::Status status;
  std::string object;
  std::vector<std::string> kernels;
};

GlueObject CompileGlueModule(const codegen::GluePlan& plan, size_t index, const TargetSpec& target) {
  GlueObject result;
  auto machine = codegen::MakeTargetMachine(target, /*sections=*/false);
  if (!machine.ok()) return {machine.status()};
  llvm::LLVMContext ctx;
  llvm::Module module(absl::StrCat(plan.graph->name(), ".", index), ctx);
  module.setTargetTriple(target.triple);
  module.setDataLayout((*machine)->createDataLayout());
  result.status = codegen::BuildGlueModule(plan, index, module);
  if (result.status.ok()) result.status = LinkScalarOps(module);
  if (!result.status.ok()) return result;
  RetargetGlue(module, target);
  std::string verify_errors;
  llvm::raw_string_ostream verify_stream(verify_errors);
  if (llvm::verifyModule(module, &verify_stream)) {
    return {absl::InternalError("generated LLVM IR is invalid: " + verify_errors)};
  }
  result.kernels = codegen::CalledKernels(module);
  codegen::OptimizeO3(module, **machine);
  if (index == 0) MaybeDumpModule(module);
  auto object = EmitObject(module, **machine);
  if (!object.ok()) return {object.status()};
  result.object = std::move(*object);
  return result;
}

// The plan's modules on up to as many threads as the machine has cores (the split itself
// depends on the graph only, so the artifact does not depend on the machine).
std::vector<GlueObject> CompileGlue(const codegen::GluePlan& plan, const TargetSpec& target) {
  std::vector<GlueObject> objects(plan.num_modules);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < objects.size(); i = next++) objects[i] = CompileGlueModule(plan, i, target);
  };
  const size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), plan.num_modules);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  return objects;
}

}  // namespace

// LLD writes the artifact: into the scratch directory and read back, or straight to the
// caller's path (a temporary name beside it, renamed when complete).
absl::Status Link(const std::vector<std::string>& objects, const CodegenOptions& options, const std::string& scratch,
                  ArtifactBytes& result) {
  if (options.output_path.empty()) {
    KILN_ASSIGN_OR_RETURN(result.shared_object, LinkSharedObject(objects, options.target, scratch + "/model.so"));
    result.artifact_bytes = static_cast<int64_t>(result.shared_object.size());
    return absl::OkStatus();
  }
  const std::string temporary = absl::StrCat(options.output_path, ".kiln-tmp-", getpid());
  absl::Status linked = LinkSharedObjectTo(objects, options.target, temporary);
  std::error_code error;
  if (linked.ok()) std::filesystem::rename(temporary, options.output_path, error);
  if (!linked.ok() || error) {
    std::filesystem::remove(temporary, error);
    return linked.ok() ? absl::InternalError(absl::StrCat("cannot write ", options.output_path, ": ", error.message()))
                       : linked;
  }
  result.artifact_bytes = static_cast<int64_t>(std::filesystem::file_size(options.output_path, error));
  return absl::OkStatus();
}

absl::StatusOr<ArtifactBytes> GenerateArtifact(const Graph& graph, const MemoryPlan& plan,
                                               const CodegenOptions& options) {
  PhaseClock clock;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine,
                        codegen::MakeTargetMachine(options.target, /*sections=*/false));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<codegen::GluePlan> glue, codegen::PlanGlue(graph, plan, options));
  clock.End("plan");
  KILN_ASSIGN_OR_RETURN(TempDirectory dir, TempDirectory::Create("kiln-link"));
  const std::string weights_path = dir.path() + "/weights.o";
  // The weights object is written while LLVM works on the glue.
  absl::Status weights_written;
  std::thread weights_writer(
      [&] { weights_written = glue->weights.Write(weights_path, options.target.triple, codegen::kWeightsSymbol); });
  std::vector<GlueObject> modules = CompileGlue(*glue, options.target);
  weights_writer.join();
  std::vector<std::string> objects;
  std::set<std::string> kernels;
  ArtifactBytes result;
  for (size_t i = 0; i < modules.size(); ++i) {
    KILN_RETURN_IF_ERROR(modules[i].status);
    objects.push_back(absl::StrCat(dir.path(), "/glue", i, ".o"));
    KILN_RETURN_IF_ERROR(WriteFile(objects.back(), modules[i].object));
    kernels.insert(modules[i].kernels.begin(), modules[i].kernels.end());
    result.object_bytes += static_cast<int64_t>(modules[i].object.size());
  }
  KILN_RETURN_IF_ERROR(weights_written);
  objects.push_back(weights_path);
  clock.End("glue");
  // The kernels' objects: found, or compiled now for this target and cached.
  KILN_ASSIGN_OR_RETURN(KernelObjects kernel_objects,
                        GetKernelObjects(options.target, std::vector<std::string>(kernels.begin(), kernels.end())));
  DescribeKernels(kernel_objects, codegen::TraitsOf(*machine), result);
  objects.insert(objects.end(), kernel_objects.objects.begin(), kernel_objects.objects.end());
  clock.End("kernel-library");
  KILN_RETURN_IF_ERROR(Link(objects, options, dir.path(), result));
  clock.End("link");
  result.object_bytes += glue->weights.size_bytes();
  result.workspace_bytes = plan.arena_bytes;
  result.phase_ms = clock.Take();
  return result;
}

}  // namespace kiln
