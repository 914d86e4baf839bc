// Links the model's objects (glue, weights, the target's kernel library) into a shared
// object with LLD, in-process. For the host the artifact records libm and libc as its only
// dependencies; for other targets undefined libc/libm symbols are left for the loader there.
#include <elf.h>

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kiln/common/file.h"
#include "kiln/common/status.h"
#include "kiln/compiler/codegen.h"
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

}  // namespace

absl::Status LinkSharedObjectTo(const std::vector<std::string>& objects, const TargetSpec& target,
                                const std::string& output_path) {
  llvm::Triple triple(target.triple);
  // --gc-sections keeps only the kernels the model calls (the library is compiled with
  // one section per function); -O1 merges identical strings.
  std::vector<std::string> args = {
      "ld.lld", "-shared", "--gc-sections",          "-O1", "--hash-style=gnu", "-z", "noexecstack", "-z", "relro",
      "-z",     "now",     "--no-undefined-version", "-o",  output_path};
  args.insert(args.end(), objects.begin(), objects.end());
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
  return absl::OkStatus();
}

absl::StatusOr<ElfSections> ReadElfSections(
    int64_t file_size, const std::function<absl::StatusOr<std::string>(int64_t offset, int64_t size)>& read) {
  KILN_ASSIGN_OR_RETURN(const std::string header_bytes, read(0, sizeof(Elf64_Ehdr)));
  Elf64_Ehdr header;
  if (header_bytes.size() != sizeof(header)) return absl::InternalError("the artifact is shorter than an ELF header");
  std::memcpy(&header, header_bytes.data(), sizeof(header));
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_shentsize != sizeof(Elf64_Shdr)) {
    return absl::InternalError("the artifact is not a 64-bit ELF file");
  }
  const int64_t table_size = static_cast<int64_t>(header.e_shnum) * static_cast<int64_t>(sizeof(Elf64_Shdr));
  KILN_ASSIGN_OR_RETURN(const std::string table, read(static_cast<int64_t>(header.e_shoff), table_size));
  if (static_cast<int64_t>(table.size()) != table_size)
    return absl::InternalError("the artifact's section headers are cut short");
  ElfSections sections;
  sections.file = file_size;
  for (int i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr section;
    std::memcpy(&section, table.data() + i * sizeof(Elf64_Shdr), sizeof(section));
    if ((section.sh_flags & SHF_ALLOC) == 0 || section.sh_type == SHT_NOBITS) continue;
    sections.loaded += static_cast<int64_t>(section.sh_size);
    if (section.sh_flags & SHF_EXECINSTR) sections.executable += static_cast<int64_t>(section.sh_size);
  }
  return sections;
}

absl::StatusOr<std::string> LinkSharedObject(const std::vector<std::string>& objects, const TargetSpec& target,
                                             const std::string& output_path) {
  KILN_RETURN_IF_ERROR(LinkSharedObjectTo(objects, target, output_path));
  return ReadFile(output_path);
}

}  // namespace kiln
