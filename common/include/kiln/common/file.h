// File I/O with Status errors that name the path: whole-file reads and writes, and an
// atomic write (temporary file, fsync, rename, directory fsync) for what must survive a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

// NotFound when the file does not exist; other failures name the path and the reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Up to `size` bytes at `offset` (fewer at the end of the file).
absl::StatusOr<std::string> ReadFileRange(const std::string& path, int64_t offset, int64_t size);
absl::Status WriteFile(const std::string& path, std::string_view bytes);
// Readers see the old bytes or the new ones, never a part: PATH.tmp.PID is written,
// fsynced and renamed over PATH, then the directory is fsynced.
absl::Status WriteFileAtomic(const std::string& path, std::string_view bytes);
bool FileExists(const std::string& path);
// Creates the directory and its parents (no error when it exists).
absl::Status MakeDirectories(const std::string& path);
// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDirectory {
 public:
  static absl::StatusOr<TempDirectory> Create(std::string_view prefix);
  TempDirectory(TempDirectory&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDirectory& operator=(TempDirectory&&) = delete;
  ~TempDirectory();
  const std::string& path() const { return path_; }

 private:
  explicit TempDirectory(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// A file mapped read-only: its bytes without a heap copy. A model of hundreds of megabytes
// is read this way so that, once imported, its pages can go back to the kernel instead of
// staying resident through the rest of a compile.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) { other.data_ = nullptr; }
  MappedFile& operator=(MappedFile&&) = delete;
  ~MappedFile();
  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }
  // Drops the pages read so far from this process (MADV_DONTNEED); the bytes stay valid and
  // a later read brings them back from the page cache or the file.
  void ReleaseResidentPages() const;

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

// An absl::Status from errno for an operation on `path`: "cannot open PATH: No such file...".
absl::Status ErrnoStatus(int error, std::string_view what, std::string_view path);

}  // namespace kiln
