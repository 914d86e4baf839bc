// BlobStore: see blob_store.h.
#include "kiln/cache/blob_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::cache {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

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

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no blob at ", path));
    return ErrnoError("cannot open", path);
  }
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return ErrnoError("cannot read", path);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return bytes;
}

}  // namespace

Digest DigestOf(std::string_view bytes) {
  unsigned char hash[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), hash, &length, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[hash[i] >> 4];
    hex += kHex[hash[i] & 15];
  }
  return Digest{hex, static_cast<int64_t>(bytes.size())};
}

absl::Status ValidateDigest(const Digest& digest) {
  if (digest.sha256_hex.size() != 64) {
    return absl::InvalidArgumentError(absl::StrCat("digest '", digest.sha256_hex, "' has ", digest.sha256_hex.size(),
                                                   " characters; a sha256 digest is 64 lowercase hex digits"));
  }
  for (char c : digest.sha256_hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return absl::InvalidArgumentError(absl::StrCat("digest '", digest.sha256_hex, "' is not lowercase hex"));
    }
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

absl::StatusOr<Digest> BlobStore::Put(std::string_view bytes) {
  Digest digest = DigestOf(bytes);
  if (Contains(digest)) return digest;
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(root_, "/tmp/", getpid(), ".", counter++, ".", digest.sha256_hex.substr(0, 16));
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status s = WriteAll(fd, bytes, tmp);
  if (s.ok() && fsync(fd) != 0) s = ErrnoError("cannot fsync", tmp);
  close(fd);
  const std::string dir = absl::StrCat(root_, "/sha256/", digest.sha256_hex.substr(0, 2));
  if (s.ok()) s = MakeDirectory(dir);
  if (s.ok() && rename(tmp.c_str(), PathOf(digest).c_str()) != 0) s = ErrnoError("cannot rename into", PathOf(digest));
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  if (auto synced = SyncDirectory(dir); !synced.ok()) return synced;
  return digest;
}

absl::Status BlobStore::PutExpecting(const Digest& expected, std::string_view bytes) {
  if (auto s = ValidateDigest(expected); !s.ok()) return s;
  const Digest actual = DigestOf(bytes);
  if (!(actual == expected)) {
    return absl::InvalidArgumentError(absl::StrCat("the bytes sent have digest ", actual.sha256_hex, "/", actual.size_bytes,
                                                   " but the request names ", expected.sha256_hex, "/",
                                                   expected.size_bytes, "; send the bytes again or fix the digest"));
  }
  return Put(bytes).status();
}

absl::StatusOr<std::string> BlobStore::Get(const Digest& digest) {
  if (auto s = ValidateDigest(digest); !s.ok()) return s;
  auto bytes = ReadAll(PathOf(digest));
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
