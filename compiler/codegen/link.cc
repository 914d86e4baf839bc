// Links the emitted object into a shared object with LLD, in-process. For the host the
// artifact records libm and libc as its only dependencies; for other targets undefined
// libc/libm symbols are left for the loader there.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kiln/common/file.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/frontend.h"
#include "lld/Common/Driver.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

LLD_HAS_DRIVER(elf)

namespace kiln {
namespace {

// LLD keeps global state; one link at a time per process.
std::mutex& LinkMutex() {
  static std::mutex mutex;
  return mutex;
}

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(base && *base ? base : "/tmp", "/kiln-link-XXXXXX");
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

absl::StatusOr<std::string> LinkSharedObject(const std::string& object, const TargetSpec& target) {
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a temporary directory for linking");
  const std::string object_path = dir.path() + "/model.o";
  const std::string output_path = dir.path() + "/model.so";
  if (absl::Status s = WriteFile(object_path, object); !s.ok()) return s;

  llvm::Triple triple(target.triple);
  std::vector<std::string> args = {"ld.lld",
                                   "-shared",
                                   "--gc-sections",
                                   "-O1",
                                   "--hash-style=gnu",
                                   "-z",
                                   "noexecstack",
                                   "-z",
                                   "relro",
                                   "-z",
                                   "now",
                                   "--no-undefined-version",
                                   "-o",
                                   output_path,
                                   object_path};
  const bool native = triple.getArch() == llvm::Triple(llvm::sys::getProcessTriple()).getArch() && triple.isOSLinux();
  if (native && triple.getArch() == llvm::Triple::x86_64) {
    for (const char* dir_path : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"})
      args.push_back(absl::StrCat("-L", dir_path));
    args.insert(args.end(), {"--as-needed", "-lm", "-lc"});
  } else {
    args.push_back("--allow-shlib-undefined");
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::string out_text, err_text;
  llvm::raw_string_ostream out_stream(out_text), err_stream(err_text);
  {
    std::lock_guard<std::mutex> lock(LinkMutex());
    lld::Result result = lld::lldMain(argv, out_stream, err_stream, {{lld::Gnu, &lld::elf::link}});
    if (result.retCode != 0) {
      return absl::InternalError(absl::StrCat("linking the artifact with LLD failed: ", err_stream.str()));
    }
  }
  return ReadFile(output_path);
}

}  // namespace kiln
