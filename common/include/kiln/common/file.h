// File I/O with Status errors that name the path: whole-file reads and writes, and an
// atomic write (temporary file, fsync, rename, directory fsync) for what must survive a crash.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

// NotFound when the file does not exist; other failures name the path and the reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);
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

// An absl::Status from errno for an operation on `path`: "cannot open PATH: No such file...".
absl::Status ErrnoStatus(int error, std::string_view what, std::string_view path);

}  // namespace kiln
