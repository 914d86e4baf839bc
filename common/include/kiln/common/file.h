// File I/O with Status errors that name the path: whole-file reads and writes, and an
// atomic write (temporary file, fsync, rename, directory fsync) for what must survive a crash.
#pragma once

#include <string>
#include <string_view>
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
// An absl::Status from errno for an operation on `path`: "cannot open PATH: No such file...".
absl::Status ErrnoStatus(int error, std::string_view what, std::string_view path);

}  // namespace kiln
