// Writes the weights object: see data_object.h. The file is
//   ELF header | data section | .symtab | .strtab | .shstrtab | section headers
// with sections [0] null, [1] .rodata.kiln_data, [2] .symtab, [3] .strtab, [4] .shstrtab.
#include "data_object.h"

#include <elf.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kiln/common/file.h"

namespace kiln::codegen {
namespace {

int64_t AlignUp(int64_t value, int64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

}  // namespace

int64_t DataObject::Add(const void* data, int64_t size) {
  const uint64_t hash = std::hash<std::string_view>()(std::string_view(static_cast<const char*>(data), size));
  for (auto [it, end] = by_content_.equal_range(hash); it != end; ++it) {
    const Blob& blob = blobs_[it->second];
    if (blob.size == size && memcmp(blob.data, data, size) == 0) return blob.offset;
  }
  const int64_t offset = AlignUp(size_, kAlignment);
  by_content_.emplace(hash, blobs_.size());
  blobs_.push_back(Blob{data, size, offset});
  size_ = offset + size;
  payload_ += size;
  return offset;
}

absl::Status DataObject::Write(const std::string& path, const std::string& triple, const std::string& symbol) const {
  uint16_t machine = 0;
  if (triple.rfind("x86_64", 0) == 0) machine = EM_X86_64;
  if (triple.rfind("aarch64", 0) == 0) machine = EM_AARCH64;
  if (machine == 0) return absl::UnimplementedError(absl::StrCat("no ELF machine type for target triple ", triple));

  const std::string section_names = std::string("\0.rodata.kiln_data\0.symtab\0.strtab\0.shstrtab\0", 45);
  const std::string symbol_names = std::string("\0", 1) + symbol + std::string("\0", 1);
  const int64_t data_offset = AlignUp(sizeof(Elf64_Ehdr), kAlignment);
  const int64_t data_size = std::max<int64_t>(size_, 1);  // a symbol needs a byte to stand on
  const int64_t symtab_offset = AlignUp(data_offset + data_size, 8);
  const int64_t symtab_size = 2 * sizeof(Elf64_Sym);
  const int64_t strtab_offset = symtab_offset + symtab_size;
  const int64_t shstrtab_offset = strtab_offset + static_cast<int64_t>(symbol_names.size());
  const int64_t headers_offset = AlignUp(shstrtab_offset + static_cast<int64_t>(section_names.size()), 8);

  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_ident[EI_DATA] = ELFDATA2LSB;
  header.e_ident[EI_VERSION] = EV_CURRENT;
  header.e_type = ET_REL;
  header.e_machine = machine;
  header.e_version = EV_CURRENT;
  header.e_shoff = static_cast<Elf64_Off>(headers_offset);
  header.e_ehsize = sizeof(Elf64_Ehdr);
  header.e_shentsize = sizeof(Elf64_Shdr);
  header.e_shnum = 5;
  header.e_shstrndx = 4;

  Elf64_Sym symbols[2] = {};
  symbols[1].st_name = 1;
  symbols[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
  symbols[1].st_other = STV_HIDDEN;
  symbols[1].st_shndx = 1;
  symbols[1].st_size = static_cast<Elf64_Xword>(size_);

  Elf64_Shdr sections[5] = {};
  auto section = [&](int i, uint32_t name, uint32_t type, uint64_t flags, int64_t offset, int64_t size,
                     uint64_t alignment) {
    sections[i].sh_name = name;
    sections[i].sh_type = type;
    sections[i].sh_flags = flags;
    sections[i].sh_offset = static_cast<Elf64_Off>(offset);
    sections[i].sh_size = static_cast<Elf64_Xword>(size);
    sections[i].sh_addralign = alignment;
  };
  section(1, 1, SHT_PROGBITS, SHF_ALLOC, data_offset, data_size, kAlignment);
  section(2, 19, SHT_SYMTAB, 0, symtab_offset, symtab_size, 8);
  sections[2].sh_link = 3;  // its names are in .strtab
  sections[2].sh_info = 1;  // the first global symbol
  sections[2].sh_entsize = sizeof(Elf64_Sym);
  section(3, 27, SHT_STRTAB, 0, strtab_offset, static_cast<int64_t>(symbol_names.size()), 1);
  section(4, 35, SHT_STRTAB, 0, shstrtab_offset, static_cast<int64_t>(section_names.size()), 1);

  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  if (file == nullptr) return ErrnoStatus(errno, "cannot create", path);
  int64_t at = 0;
  bool ok = true;
  auto put = [&](const void* bytes, int64_t size) {
    ok = ok && std::fwrite(bytes, 1, static_cast<size_t>(size), file.get()) == static_cast<size_t>(size);
    at += size;
  };
  auto pad_to = [&](int64_t offset) {
    static const char kZeros[kAlignment] = {};
    while (at < offset) put(kZeros, std::min<int64_t>(offset - at, kAlignment));
  };
  put(&header, sizeof(header));
  pad_to(data_offset);
  for (const Blob& blob : blobs_) {
    pad_to(data_offset + blob.offset);
    put(blob.data, blob.size);
  }
  pad_to(data_offset + data_size);
  pad_to(symtab_offset);
  put(symbols, symtab_size);
  put(symbol_names.data(), static_cast<int64_t>(symbol_names.size()));
  put(section_names.data(), static_cast<int64_t>(section_names.size()));
  pad_to(headers_offset);
  put(sections, sizeof(sections));
  if (!ok || std::fflush(file.get()) != 0) return ErrnoStatus(errno, "cannot write", path);
  return absl::OkStatus();
}

}  // namespace kiln::codegen
