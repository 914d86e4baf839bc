// BlobStore: see blob_store.h.
#include "kiln/cache/blob_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/common/file.h"
#include "kiln/common/sha256.h"

namespace kiln::cache {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) { return ErrnoStatus(errno, what, path); }

absl::Status MakeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("cannot create directory", path);
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("cannot open directory", path);
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) return ErrnoError("cannot fsync directory", path);
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", path);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

Digest DigestOf(std::string_view bytes) { return Digest{Sha256Hex(bytes), static_cast<int64_t>(bytes.size())}; }

absl::Status ValidateDigest(const Digest& digest) {
  if (digest.sha256_hex.size() != 64) {
    return absl::InvalidArgumentError(absl::StrCat("digest '", digest.sha256_hex, "' has ", digest.sha256_hex.size(),
                                                   " characters; a sha256 digest is 64 lowercase hex digits"));
  }
  if (!IsLowercaseHex(digest.sha256_hex)) {
    return absl::InvalidArgumentError(absl::StrCat("digest '", digest.sha256_hex, "' is not lowercase hex"));
  }
  if (digest.size_bytes < 0) return absl::InvalidArgumentError("a digest's size_bytes cannot be negative");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BlobStore>> BlobStore::Open(const std::string& root) {
  for (const std::string& dir : {root, root + "/sha256", root + "/tmp"}) {
    if (auto s = MakeDirectory(dir); !s.ok()) return s;
  }
  // Temporary files are only ever half-written blobs of a process that died.
  if (DIR* tmp = opendir((root + "/tmp").c_str())) {
    while (dirent* entry = readdir(tmp)) {
      if (entry->d_name[0] != '.') unlink((root + "/tmp/" + entry->d_name).c_str());
    }
    closedir(tmp);
  }
  return std::unique_ptr<BlobStore>(new BlobStore(root));
}

std::string BlobStore::PathOf(const Digest& digest) const {
  return absl::StrCat(root_, "/sha256/", digest.sha256_hex.substr(0, 2), "/", digest.sha256_hex.substr(2));
}

bool BlobStore::Contains(const Digest& digest) const {
  struct stat st;
  return ValidateDigest(digest).ok() && stat(PathOf(digest).c_str(), &st) == 0 && st.st_size == digest.size_bytes;
}

static std::string TempPath(const std::string& root, const std::string& tag) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(root, "/tmp/", getpid(), ".", counter++, ".", tag);
}

absl::Status BlobStore::Install(const std::string& tmp, const Digest& digest) {
  const std::string dir = absl::StrCat(root_, "/sha256/", digest.sha256_hex.substr(0, 2));
  absl::Status s = MakeDirectory(dir);
  if (s.ok() && rename(tmp.c_str(), PathOf(digest).c_str()) != 0) s = ErrnoError("cannot rename into", PathOf(digest));
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  return SyncDirectory(dir);
}

absl::StatusOr<Digest> BlobStore::Put(std::string_view bytes) {
  Digest digest = DigestOf(bytes);
  if (Contains(digest)) return digest;
  const std::string tmp = TempPath(root_, digest.sha256_hex.substr(0, 16));
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status s = WriteAll(fd, bytes, tmp);
  if (s.ok() && fsync(fd) != 0) s = ErrnoError("cannot fsync", tmp);
  close(fd);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  if (auto installed = Install(tmp, digest); !installed.ok()) return installed;
  return digest;
}

BlobStore::Writer::Writer(BlobStore* store, std::string tmp_path, int fd)
    : store_(store), tmp_path_(std::move(tmp_path)), fd_(fd) {}

BlobStore::Writer::~Writer() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(tmp_path_.c_str());
  }
}

absl::Status BlobStore::Writer::Append(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("the blob writer is already committed");
  hash_.Update(bytes);
  written_ += static_cast<int64_t>(bytes.size());
  return WriteAll(fd_, bytes, tmp_path_);
}

absl::Status BlobStore::Writer::Commit(const Digest& expected) {
  if (fd_ < 0) return absl::FailedPreconditionError("the blob writer is already committed");
  const Digest actual{hash_.FinishHex(), written_};
  if (!(actual == expected)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the bytes sent have digest ", actual.sha256_hex, "/", actual.size_bytes, " but the request names ",
        expected.sha256_hex, "/", expected.size_bytes, "; send the bytes again or fix the digest"));
  }
  absl::Status s;
  if (fsync(fd_) != 0) s = ErrnoError("cannot fsync", tmp_path_);
  close(fd_);
  fd_ = -1;
  if (!s.ok()) {
    unlink(tmp_path_.c_str());
    return s;
  }
  if (store_->Contains(expected)) {
    unlink(tmp_path_.c_str());
    return absl::OkStatus();
  }
  return store_->Install(tmp_path_, expected);
}

absl::StatusOr<std::unique_ptr<BlobStore::Writer>> BlobStore::NewWriter() {
  const std::string tmp = TempPath(root_, "upload");
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  return std::unique_ptr<Writer>(new Writer(this, tmp, fd));
}

absl::Status BlobStore::Verify(const Digest& digest) {
  if (auto s = ValidateDigest(digest); !s.ok()) return s;
  const std::string path = PathOf(digest);
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("blob ", digest.sha256_hex, " is not in the cache"));
    return ErrnoError("cannot open", path);
  }
  Sha256 hash;
  std::string buffer(1 << 16, '\0');
  int64_t total = 0;
  absl::Status s;
  for (;;) {
    ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = ErrnoError("cannot read", path);
      break;
    }
    if (n == 0) break;
    hash.Update(std::string_view(buffer.data(), static_cast<size_t>(n)));
    total += n;
  }
  close(fd);
  const std::string hex = hash.FinishHex();
  if (!s.ok()) return s;
  if (hex != digest.sha256_hex || total != digest.size_bytes) {
    unlink(path.c_str());
    return absl::DataLossError(absl::StrCat("blob ", digest.sha256_hex, " was corrupt on disk and has been removed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> BlobStore::ReadRange(const Digest& digest, int64_t offset, int64_t length) const {
  const std::string path = PathOf(digest);
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("blob ", digest.sha256_hex, " is not in the cache"));
    return ErrnoError("cannot open", path);
  }
  std::string bytes(static_cast<size_t>(length), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = pread(fd, bytes.data() + got, bytes.size() - got, offset + static_cast<int64_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return ErrnoError("cannot read", path);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  bytes.resize(got);
  return bytes;
}

absl::Status BlobStore::PutExpecting(const Digest& expected, std::string_view bytes) {
  if (auto s = ValidateDigest(expected); !s.ok()) return s;
  const Digest actual = DigestOf(bytes);
  if (!(actual == expected)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the bytes sent have digest ", actual.sha256_hex, "/", actual.size_bytes, " but the request names ",
        expected.sha256_hex, "/", expected.size_bytes, "; send the bytes again or fix the digest"));
  }
  return Put(bytes).status();
}

absl::StatusOr<std::string> BlobStore::Get(const Digest& digest) {
  if (auto s = ValidateDigest(digest); !s.ok()) return s;
  auto bytes = ReadFile(PathOf(digest));
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(absl::StrCat("blob ", digest.sha256_hex, " is not in the cache"));
  }
  if (!bytes.ok()) return bytes.status();
  if (!(DigestOf(*bytes) == digest)) {
    unlink(PathOf(digest).c_str());
    return absl::DataLossError(absl::StrCat("blob ", digest.sha256_hex, " was corrupt on disk and has been removed"));
  }
  return bytes;
}

absl::Status BlobStore::Remove(const Digest& digest) {
  if (auto s = ValidateDigest(digest); !s.ok()) return s;
  if (unlink(PathOf(digest).c_str()) != 0 && errno != ENOENT) return ErrnoError("cannot remove", PathOf(digest));
  return absl::OkStatus();
}

}  // namespace kiln::cache
