// The per-target kernel library: see kiln/compiler/kernel_library.h.
#include "kiln/compiler/kernel_library.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernel_bitcode.h"
#include "kiln/common/file.h"
#include "kiln/common/sha256.h"
#include "kiln/common/status.h"
#include "kiln/common/time.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm_target.h"

#define X(stem)                                    \
  extern "C" const char kiln_kbc_##stem##_begin[]; \
  extern "C" const char kiln_kbc_##stem##_end[];
#include "kernel_bitcode.inc"
#undef X

namespace kiln {
namespace codegen {

const std::vector<EmbeddedBitcode>& KernelBitcode() {
  static const auto* blobs = new std::vector<EmbeddedBitcode>{
#define X(stem) \
  {#stem,       \
   llvm::StringRef(kiln_kbc_##stem##_begin, static_cast<size_t>(kiln_kbc_##stem##_end - kiln_kbc_##stem##_begin))},
#include "kernel_bitcode.inc"
#undef X
  };
  return *blobs;
}

const std::string& KernelBitcodeHash() {
  static const std::string* hash = [] {
    Sha256 sha;
    // The format of a compiled library: bump when how it is built changes.
    sha.Update("kiln-kernel-library-v2 llvm-" LLVM_VERSION_STRING "\n");
    for (const EmbeddedBitcode& blob : KernelBitcode()) {
      sha.Update(blob.stem);
      sha.Update(std::string_view(blob.bytes.data(), blob.bytes.size()));
    }
    return new std::string(sha.FinishHex().substr(0, 16));
  }();
  return *hash;
}

const std::map<std::string, size_t>& BitcodeSymbols() {
  static const auto* sources = [] {
    auto* map = new std::map<std::string, size_t>();
    llvm::LLVMContext context;
    const std::vector<EmbeddedBitcode>& blobs = codegen::KernelBitcode();
    for (size_t i = 0; i < blobs.size(); ++i) {
      auto module = llvm::getLazyBitcodeModule(llvm::MemoryBufferRef(blobs[i].bytes, blobs[i].stem), context);
      if (!module) {
        llvm::consumeError(module.takeError());
        continue;
      }
      for (const llvm::Function& f : **module) {
        if ((f.isMaterializable() || !f.isDeclaration()) &&
            (f.getName().starts_with("kiln_k_") || f.getName().starts_with("kiln_s_"))) {
          (*map)[f.getName().str()] = i;
        }
      }
    }
    return map;
  }();
  return *sources;
}

}  // namespace codegen

namespace {

using codegen::EmbeddedBitcode;

constexpr char kWideVectors[] = "kiln_wide_vectors";
constexpr char kInt8Dot[] = "kiln_int8_dot";
constexpr char kBf16Dot[] = "kiln_bf16_dot";
constexpr char kBytePermute[] = "kiln_byte_permute";

bool IsKernelEntry(llvm::StringRef name) { return name.starts_with("kiln_k_"); }

// What `kernel` asks of the target, through its calls: read before -O3 folds the loads of
// the knobs into constants.
uint32_t KernelUses(const llvm::Function& kernel) {
  uint32_t uses = 0;
  std::set<const llvm::Function*> seen = {&kernel};
  std::vector<const llvm::Function*> stack = {&kernel};
  while (!stack.empty()) {
    const llvm::Function* f = stack.back();
    stack.pop_back();
    for (const llvm::Instruction& inst : llvm::instructions(*f)) {
      for (const llvm::Value* operand : inst.operands()) {
        if (const auto* g = llvm::dyn_cast<llvm::GlobalVariable>(operand->stripPointerCasts())) {
          if (g->getName() == kWideVectors) uses |= KernelObjects::kUsesVectorTile;
          if (g->getName() == kInt8Dot) uses |= KernelObjects::kUsesInt8Dot;
        }
      }
      if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
        const llvm::Function* callee = call->getCalledFunction();
        if (callee != nullptr && !callee->isDeclaration() && seen.insert(callee).second) stack.push_back(callee);
      }
    }
  }
  return uses;
}

// The knobs become constants for this target; every function is retargeted to its CPU
// (the bitcode was compiled for a generic one, whose attributes would cap the vector
// width); `kernel` stays visible to the glue (hidden in the artifact), everything else is
// internal and inlined into it, as the kernels once were into each call.
void Specialise(llvm::Module& module, const std::string& kernel, const TargetSpec& target,
                const codegen::TargetTraits& traits) {
  llvm::Type* i32 = llvm::Type::getInt32Ty(module.getContext());
  for (const auto& [name, value] : {std::pair<const char*, int32_t>{kWideVectors, traits.wide_vectors ? 1 : 0},
                                    {kInt8Dot, traits.int8_dot},
                                    {kBf16Dot, traits.bf16_dot ? 1 : 0},
                                    {kBytePermute, traits.byte_permute ? 1 : 0}}) {
    if (llvm::GlobalVariable* knob = module.getGlobalVariable(name); knob != nullptr) {
      knob->setInitializer(llvm::ConstantInt::get(i32, static_cast<uint64_t>(value)));
      knob->setConstant(true);
      knob->setLinkage(llvm::GlobalValue::InternalLinkage);
    }
  }
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    codegen::SetTargetAttributes(f, target);
    f.removeFnAttr(llvm::Attribute::OptimizeNone);
    if (f.getName() == kernel) {
      f.setLinkage(llvm::GlobalValue::ExternalLinkage);
      f.setVisibility(llvm::GlobalValue::HiddenVisibility);
      continue;
    }
    // What the library marks noinline on purpose stays a function. A shared micro-kernel
    // (a noinline template or inline function: linkonce_odr) keeps its ODR linkage, hidden:
    // the linker then keeps one copy per artifact for every kernel that calls it, and no
    // caller's constants specialise it (as they could an internal copy, which LLVM may
    // then schedule worse for everyone).
    if (f.hasFnAttribute(llvm::Attribute::NoInline) && f.hasLinkOnceODRLinkage()) {
      f.setVisibility(llvm::GlobalValue::HiddenVisibility);
      continue;
    }
    f.setLinkage(llvm::GlobalValue::InternalLinkage);
    if (!f.hasFnAttribute(llvm::Attribute::NoInline)) f.addFnAttr(llvm::Attribute::AlwaysInline);
  }
  for (llvm::GlobalVariable& g : module.globals()) {
    if (!g.isDeclaration() && !g.getName().starts_with("llvm.")) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
}

// One kernel for one target: its source's bitcode -> specialised, -O3, DIR/<kernel>.o
// and DIR/<kernel>.uses, each written under a temporary name and renamed into place.
absl::StatusOr<uint32_t> CompileKernel(const std::string& kernel, const TargetSpec& target,
                                       const std::string& directory) {
  auto source = codegen::BitcodeSymbols().find(kernel);
  if (source == codegen::BitcodeSymbols().end()) {
    return absl::InternalError(absl::StrCat("the kernel library has no kernel named ", kernel));
  }
  const EmbeddedBitcode& blob = codegen::KernelBitcode()[source->second];
  llvm::LLVMContext context;
  auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(blob.bytes, blob.stem), context);
  if (!module) {
    return absl::InternalError(absl::StrCat("the embedded kernel bitcode ", blob.stem,
                                            " does not parse: ", llvm::toString(module.takeError())));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine,
                        codegen::MakeTargetMachine(target, /*sections=*/true));
  (*module)->setTargetTriple(target.triple);
  (*module)->setDataLayout(machine->createDataLayout());
  const uint32_t uses = KernelUses(*(*module)->getFunction(kernel));
  Specialise(**module, kernel, target, codegen::TraitsOf(*machine));
  // Drop the rest of the source first: only `kernel` and what it calls are compiled.
  codegen::OptimizeO3(**module, *machine, /*drop_unused=*/true);
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream stream(object);
  llvm::legacy::PassManager emit;
  if (machine->addPassesToEmitFile(emit, stream, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return absl::InternalError(absl::StrCat("LLVM cannot emit object files for ", target.triple));
  }
  emit.run(**module);
  const std::string path = directory + "/" + kernel;
  KILN_RETURN_IF_ERROR(WriteFileAtomic(path + ".uses", absl::StrCat(uses, "\n")));
  KILN_RETURN_IF_ERROR(WriteFileAtomic(path + ".o", std::string_view(object.data(), object.size())));
  return uses;
}

absl::StatusOr<uint32_t> ReadUses(const std::string& object_path) {
  const std::string uses_path = object_path.substr(0, object_path.size() - 2) + ".uses";
  KILN_ASSIGN_OR_RETURN(std::string text, ReadFile(uses_path));
  return static_cast<uint32_t>(std::strtoul(text.c_str(), nullptr, 10));
}

// Compiles `kernels` into `directory` on up to as many threads as the machine has cores.
absl::StatusOr<uint32_t> CompileKernels(const std::vector<std::string>& kernels, const TargetSpec& target,
                                        const std::string& directory) {
  std::vector<absl::StatusOr<uint32_t>> results(kernels.size(), uint32_t{0});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < kernels.size(); i = next++) results[i] = CompileKernel(kernels[i], target, directory);
  };
  const size_t threads = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), kernels.size()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  uint32_t uses = 0;
  for (const auto& result : results) {
    if (!result.ok()) return result.status();
    uses |= *result;
  }
  return uses;
}

// Serialises compiles into one directory across processes (kilnd's workers, parallel tests).
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

std::string CacheRoot() {
  auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
  };
  if (!env("KILN_CACHE_DIR").empty()) return env("KILN_CACHE_DIR") + "/kernels";
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/kiln/kernels";
  if (!env("HOME").empty()) return env("HOME") + "/.cache/kiln/kernels";
  return absl::StrCat("/tmp/kiln-cache-", getuid(), "/kernels");
}

// <prefix>/lib/kiln/kernels for the running binary at <prefix>/bin/...
std::string InstalledRoot() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  return (exe.parent_path().parent_path() / "lib" / "kiln" / "kernels").string();
}

}  // namespace

std::string KernelLibraryKey(const TargetSpec& target) {
  return absl::StrCat(codegen::KernelBitcodeHash(), "/", Sha256Hex(CanonicalTarget(target)).substr(0, 16));
}

std::vector<std::string> KernelLibrarySearchPath() {
  std::vector<std::string> roots;
  if (const char* dirs = std::getenv("KILN_KERNEL_DIR"); dirs != nullptr && *dirs != '\0') {
    for (absl::string_view dir : absl::StrSplit(dirs, ':', absl::SkipEmpty())) roots.emplace_back(dir);
  }
  if (std::string installed = InstalledRoot(); !installed.empty()) roots.push_back(installed);
  roots.push_back(CacheRoot());
  return roots;
}

std::vector<std::string> AllKernels() {
  std::vector<std::string> kernels;
  for (const auto& [name, source] : codegen::BitcodeSymbols()) {
    if (IsKernelEntry(name)) kernels.push_back(name);
  }
  return kernels;
}

absl::StatusOr<KernelObjects> BuildKernels(const TargetSpec& target, const std::vector<std::string>& kernels,
                                           const std::string& root) {
  const std::string directory = root + "/" + KernelLibraryKey(target);
  KILN_RETURN_IF_ERROR(MakeDirectories(directory));
  KernelObjects result;
  std::vector<std::string> missing;
  auto collect = [&]() -> absl::Status {
    missing.clear();
    result.uses = 0;
    for (const std::string& kernel : kernels) {
      const std::string object = directory + "/" + kernel + ".o";
      if (!FileExists(object)) {
        missing.push_back(kernel);
        continue;
      }
      KILN_ASSIGN_OR_RETURN(uint32_t uses, ReadUses(object));
      result.uses |= uses;
    }
    return absl::OkStatus();
  };
  KILN_RETURN_IF_ERROR(collect());
  if (!missing.empty()) {
    FileLock lock(directory + "/.lock");
    KILN_RETURN_IF_ERROR(collect());  // another process may have compiled some meanwhile
    Stopwatch clock;
    auto uses = CompileKernels(missing, target, directory);
    if (!uses.ok()) return Annotate(uses.status(), absl::StrCat("compiling kernels for ", CanonicalTarget(target)));
    result.uses |= *uses;
    result.compiled = static_cast<int>(missing.size());
    result.compile_ms = clock.ElapsedMs();
  }
  for (const std::string& kernel : kernels) result.objects.push_back(directory + "/" + kernel + ".o");
  return result;
}

absl::StatusOr<KernelObjects> GetKernelObjects(const TargetSpec& target, const std::vector<std::string>& kernels) {
  const std::vector<std::string> roots = KernelLibrarySearchPath();
  const std::string key = KernelLibraryKey(target);
  KernelObjects found;
  std::vector<std::string> rest;
  for (const std::string& kernel : kernels) {
    bool prebuilt = false;
    for (size_t i = 0; i + 1 < roots.size() && !prebuilt; ++i) {
      const std::string object = roots[i] + "/" + key + "/" + kernel + ".o";
      if (!FileExists(object)) continue;
      KILN_ASSIGN_OR_RETURN(uint32_t uses, ReadUses(object));
      found.objects.push_back(object);
      found.uses |= uses;
      prebuilt = true;
    }
    if (!prebuilt) rest.push_back(kernel);
  }
  if (rest.empty()) return found;
  KILN_ASSIGN_OR_RETURN(KernelObjects cached, BuildKernels(target, rest, roots.back()));
  found.objects.insert(found.objects.end(), cached.objects.begin(), cached.objects.end());
  found.uses |= cached.uses;
  found.compiled = cached.compiled;
  found.compile_ms = cached.compile_ms;
  return found;
}

}  // namespace kiln
