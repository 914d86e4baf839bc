// LLVM code generation for one model: plan the glue (glue.h), build its modules in
// parallel (a kernel call per node into the target's compiled kernel library, fused
// elementwise loops, the descriptor), optimise and emit each, write the weights as their
// own object (data_object.h), and link everything into a self-contained shared object.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <system_error>
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
    // Parts, and the bodies of control-flow nodes, are called across modules; kiln_module_v1
    // is the artifact's one export.
    if (name != "kiln_module_v1" && !name.starts_with("kiln_part_") && !name.starts_with("kiln_body_")) {
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
    }
    const bool generated = name == "kiln_entry" || name == "kiln_module_v1" || name.starts_with("kiln_loop_") ||
                           name.starts_with("kiln_body_") || name.starts_with("kiln_part_");
    // A kernel the scalar ops' bitcode brought along (kiln_k_*, which the glue calls) stays
    // a call: inlined at each call site it made Faster R-CNN's glue parts 50,000 lines of
    // IR for 64 nodes.
    if (!generated && !name.starts_with("kiln_k_") && !f.hasFnAttribute(llvm::Attribute::NoInline)) {
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

// Runs `work` on a new thread, or on this one when no thread can be made (under a job's
// memory limit a thread's stack may not fit): the result is the same, only later.
std::optional<std::thread> StartOrRun(const std::function<void()>& work) {
  try {
    return std::thread(work);
  } catch (const std::system_error&) {
    work();
    return std::nullopt;
  }
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
  std::vector<std::optional<std::thread>> pool;
  for (size_t t = 1; t < threads; ++t) pool.push_back(StartOrRun(work));
  work();
  for (std::optional<std::thread>& thread : pool) {
    if (thread.has_value()) thread->join();
  }
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

// The linked artifact's code, tables and ELF overhead, from its section headers; the
// weights (already in result.size) are part of its loaded read-only data.
absl::Status SplitCodeAndTables(const CodegenOptions& options, ArtifactBytes& result) {
  std::function<absl::StatusOr<std::string>(int64_t, int64_t)> read;
  if (options.output_path.empty()) {
    read = [&](int64_t offset, int64_t size) -> absl::StatusOr<std::string> {
      const std::string& bytes = result.shared_object;
      if (offset < 0 || offset > static_cast<int64_t>(bytes.size())) return std::string();
      return bytes.substr(static_cast<size_t>(offset), static_cast<size_t>(size));
    };
  } else {
    read = [&](int64_t offset, int64_t size) { return ReadFileRange(options.output_path, offset, size); };
  }
  KILN_ASSIGN_OR_RETURN(ElfSections sections, ReadElfSections(result.artifact_bytes, read));
  ArtifactSize& size = result.size;
  const int64_t weights = size.weights_given + size.weights_added + size.weights_alignment;
  size.code = sections.executable;
  size.tables = sections.loaded - sections.executable - weights;
  size.elf_overhead = sections.file - sections.loaded;
  if (size.tables < 0 || size.elf_overhead < 0) {
    return absl::InternalError(absl::StrCat("the artifact's sections (", sections.loaded, " loaded bytes of ",
                                            sections.file, ") do not hold its ", weights, " bytes of weights"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ArtifactObjects> CompileArtifactObjects(const Graph& graph, const MemoryPlan& plan,
                                                       const CodegenOptions& options) {
  PhaseClock clock;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine,
                        codegen::MakeTargetMachine(options.target, /*sections=*/false));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<codegen::GluePlan> glue, codegen::PlanGlue(graph, plan, options));
  clock.End("plan");
  KILN_ASSIGN_OR_RETURN(TempDirectory dir, TempDirectory::Create("kiln-link"));
  ArtifactObjects result{std::move(dir), {}, {}};
  const std::string weights_path = result.directory.path() + "/weights.o";
  // The weights object is written while LLVM works on the glue.
  absl::Status weights_written;
  std::optional<std::thread> weights_writer = StartOrRun(
      [&] { weights_written = glue->weights.Write(weights_path, options.target.triple, codegen::kWeightsSymbol); });
  std::vector<GlueObject> modules = CompileGlue(*glue, options.target);
  if (weights_writer.has_value()) weights_writer->join();
  std::set<std::string> kernels;
  ArtifactBytes& bytes = result.bytes;
  for (size_t i = 0; i < modules.size(); ++i) {
    KILN_RETURN_IF_ERROR(modules[i].status);
    result.paths.push_back(absl::StrCat(result.directory.path(), "/glue", i, ".o"));
    KILN_RETURN_IF_ERROR(WriteFile(result.paths.back(), modules[i].object));
    kernels.insert(modules[i].kernels.begin(), modules[i].kernels.end());
    bytes.object_bytes += static_cast<int64_t>(modules[i].object.size());
  }
  KILN_RETURN_IF_ERROR(weights_written);
  result.paths.push_back(weights_path);
  clock.End("glue");
  // The kernels' objects: found, or compiled now for this target and cached.
  KILN_ASSIGN_OR_RETURN(KernelObjects kernel_objects,
                        GetKernelObjects(options.target, std::vector<std::string>(kernels.begin(), kernels.end())));
  DescribeKernels(kernel_objects, codegen::TraitsOf(*machine), bytes);
  result.paths.insert(result.paths.end(), kernel_objects.objects.begin(), kernel_objects.objects.end());
  clock.End("kernel-library");
  bytes.object_bytes += glue->weights.size_bytes();
  bytes.size = codegen::WeightsSize(*glue);
  bytes.workspace_bytes = plan.arena_bytes;
  bytes.phase_ms = clock.Take();
  return result;
}

absl::StatusOr<ArtifactBytes> LinkArtifact(ArtifactObjects objects, const CodegenOptions& options) {
  Stopwatch clock;
  ArtifactBytes result = std::move(objects.bytes);
  KILN_RETURN_IF_ERROR(Link(objects.paths, options, objects.directory.path(), result));
  result.phase_ms.emplace_back("link", clock.ElapsedMs());
  KILN_RETURN_IF_ERROR(SplitCodeAndTables(options, result));
  return result;
}

absl::StatusOr<ArtifactBytes> GenerateArtifact(const Graph& graph, const MemoryPlan& plan,
                                               const CodegenOptions& options) {
  KILN_ASSIGN_OR_RETURN(ArtifactObjects objects, CompileArtifactObjects(graph, plan, options));
  return LinkArtifact(std::move(objects), options);
}

}  // namespace kiln
