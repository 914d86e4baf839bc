// The content-addressed blob store under the service's cache: every blob (model upload,
// input set, artifact, report) is named by the SHA-256 of its bytes and lives at
// ROOT/sha256/ab/cdef... . Writes go to a temporary file in ROOT/tmp, are fsynced and
// renamed into place (then the directory is fsynced), so a crash leaves either the whole
// blob or nothing. Every read re-hashes the bytes: a blob that no longer matches its
// name is deleted and reported as DataLoss, never returned.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/common/sha256.h"

namespace kiln::cache {

struct Digest {
  std::string sha256_hex;  // 64 lowercase hex digits
  int64_t size_bytes = 0;
  bool operator==(const Digest& other) const {
    return sha256_hex == other.sha256_hex && size_bytes == other.size_bytes;
  }
};

// The digest of `bytes`.
Digest DigestOf(std::string_view bytes);
// Checks the form of a digest a client sent: 64 lowercase hex digits, size >= 0.
absl::Status ValidateDigest(const Digest& digest);

class BlobStore {
 public:
  // A blob arriving in pieces (an upload stream): bytes go to a temporary file while
  // they are hashed; Commit checks them against the expected digest, then fsyncs and
  // renames. Destroying an uncommitted writer deletes the temporary file.
  class Writer {
   public:
    ~Writer();
    absl::Status Append(std::string_view bytes);
    int64_t bytes_written() const { return written_; }
    // InvalidArgument (nothing stored) when the bytes do not match `expected`.
    absl::Status Commit(const Digest& expected);

   private:
    friend class BlobStore;
    Writer(BlobStore* store, std::string tmp_path, int fd);
    BlobStore* store_;
    std::string tmp_path_;
    int fd_;
    Sha256 hash_;
    int64_t written_ = 0;
  };

  // Creates ROOT/sha256 and ROOT/tmp as needed and clears temporary files a crash left.
  static absl::StatusOr<std::unique_ptr<BlobStore>> Open(const std::string& root);

  // Stores `bytes` (a no-op when the blob is already there) and returns its digest.
  absl::StatusOr<Digest> Put(std::string_view bytes);
  // Stores `bytes` that the client says have digest `expected`; a mismatch is
  // InvalidArgument naming both digests, and nothing is stored.
  absl::Status PutExpecting(const Digest& expected, std::string_view bytes);
  // The bytes of a blob, verified. NotFound when absent; DataLoss (and the blob is
  // removed) when the stored bytes no longer hash to the digest.
  absl::StatusOr<std::string> Get(const Digest& digest);
  bool Contains(const Digest& digest) const;
  absl::StatusOr<std::unique_ptr<Writer>> NewWriter();
  // Re-hashes the stored blob without holding it in memory: OK, NotFound, or DataLoss
  // (and the corrupt blob is removed).
  absl::Status Verify(const Digest& digest);
  // Up to `length` bytes from `offset` (not verified: call Verify first).
  absl::StatusOr<std::string> ReadRange(const Digest& digest, int64_t offset, int64_t length) const;
  absl::Status Remove(const Digest& digest);

  // Where the blob lives (it may not exist).
  std::string PathOf(const Digest& digest) const;
  const std::string& root() const { return root_; }

 private:
  explicit BlobStore(std::string root) : root_(std::move(root)) {}
  absl::Status Install(const std::string& tmp_path, const Digest& digest);
  std::string root_;
};

}  // namespace kiln::cache
