// Model weights as an ELF relocatable object written directly, without passing hundreds
// of megabytes through LLVM IR and the assembler: one read-only section holding every
// constant at a 64-byte aligned offset, and one hidden symbol at its start that the
// generated code addresses them from. Private to compiler/codegen.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"

namespace kiln::codegen {

// Lays out blobs at aligned offsets, then writes them as an object file.
class DataObject {
 public:
  static constexpr int64_t kAlignment = 64;  // whole cache lines; aligned vector loads everywhere

  // Places `size` bytes at the next aligned offset and returns it, or the offset of bytes
  // placed before that are the same (the packed weights of one constant that several nodes
  // read, as split-batch's copies of a graph do, are made once per node). `data` must stay
  // alive until Write().
  int64_t Add(const void* data, int64_t size);
  int64_t size_bytes() const { return size_; }
  int64_t payload_bytes() const { return payload_; }  // size_bytes() less the alignment gaps

  // Writes the object for `triple` (x86_64 or aarch64 Linux) with `symbol` naming the
  // start of the data.
  absl::Status Write(const std::string& path, const std::string& triple, const std::string& symbol) const;

 private:
  struct Blob {
    const void* data;
    int64_t size;
    int64_t offset;
  };
  std::vector<Blob> blobs_;
  std::unordered_multimap<uint64_t, size_t> by_content_;  // a hash of the bytes -> blobs_ index
  int64_t size_ = 0;
  int64_t payload_ = 0;
};

}  // namespace kiln::codegen
