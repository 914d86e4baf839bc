// File I/O: see file.h.
#include "kiln/common/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace kiln {

absl::Status ErrnoStatus(int error, std::string_view what, std::string_view path) {
  const std::string message = std::string(what) + " " + std::string(path) + ": " + std::strerror(error);
  switch (error) {
    case ENOENT: return absl::NotFoundError(message);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT: return absl::ResourceExhaustedError(message);
    case EEXIST: return absl::AlreadyExistsError(message);
    default: return absl::InternalError(message);
  }
}

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoStatus(error, "cannot stat", path);
  }
  if (S_ISDIR(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(path + " is a directory, not a file");
  }
  const size_t size = static_cast<size_t>(info.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int error = errno;
      close(fd);
      return ErrnoStatus(error, "cannot map", path);
    }
  }
  close(fd);  // the mapping keeps the file
  return MappedFile(data, size);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, size_);
}

void MappedFile::ReleaseResidentPages() const {
  if (data_ != nullptr) madvise(data_, size_, MADV_DONTNEED);
}

absl::StatusOr<std::string> ReadFileRange(const std::string& path, int64_t offset, int64_t size) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  std::string bytes(static_cast<size_t>(std::max<int64_t>(size, 0)), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset) + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return ErrnoStatus(error, "cannot read", path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  bytes.resize(done);
  return bytes;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat info;
  if (fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(path + " is a directory, not a file");
  }
  std::string bytes;
  if (info.st_size > 0) bytes.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return ErrnoStatus(error, "cannot read", path);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return bytes;
}

namespace {

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "cannot write", path);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status WriteTo(const std::string& path, std::string_view bytes, bool sync) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot open for writing", path);
  absl::Status status = WriteAll(fd, bytes, path);
  if (status.ok() && sync && fsync(fd) != 0) status = ErrnoStatus(errno, "cannot fsync", path);
  if (close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "cannot close", path);
  return status;
}

}  // namespace

absl::Status WriteFile(const std::string& path, std::string_view bytes) { return WriteTo(path, bytes, false); }

absl::Status WriteFileAtomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  if (absl::Status s = WriteTo(tmp, bytes, true); !s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(error, "cannot rename into place", path);
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

absl::Status MakeDirectories(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create directory ", path, ": ", error.message()));
  return absl::OkStatus();
}

absl::StatusOr<TempDirectory> TempDirectory::Create(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + std::string(prefix) + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return ErrnoStatus(errno, "cannot create a temporary directory", pattern);
  return TempDirectory(pattern);
}

TempDirectory::~TempDirectory() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace kiln
