// The service's cache: the blob store plus an SQLite index (size and last access of every
// blob, for LRU eviction under a size budget) and the action cache (action key -> the
// digests of the artifact, report and manifest a compile produced).
//
// Eviction never removes a held blob: one a download is streaming or a running job needs
// (Hold), or one the owner's `is_needed` callback names (the models of queued jobs).
// An action-cache entry whose blobs are gone is dropped on lookup, so a hit always means
// every blob can be served.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kiln/cache/blob_store.h"
#include "kiln/common/sqlite_db.h"

namespace kiln::cache {

struct ActionResult {
  Digest artifact, report, manifest;
  std::string details;  // opaque to the cache (the service stores its result proto here)
  int64_t created_ms = 0;
};

struct CacheCounters {
  std::atomic<int64_t> evictions{0};
  std::atomic<int64_t> evicted_bytes{0};
  std::atomic<int64_t> corrupt_blobs{0};
};

class Cache {
 public:
  struct Options {
    std::string root;          // blobs under ROOT/sha256, index in ROOT/index.db
    int64_t budget_bytes = 0;  // 0: unlimited
  };
  static absl::StatusOr<std::unique_ptr<Cache>> Open(const Options& options);

  // Blob names a caller (e.g. the queue) still needs; evaluated during eviction.
  void SetNeededCallback(std::function<bool(const std::string& sha256_hex)> is_needed);

  absl::StatusOr<Digest> Put(std::string_view bytes);
  // A streamed upload: the writer's Commit, then Record.
  absl::StatusOr<std::unique_ptr<BlobStore::Writer>> NewWriter() { return blobs_->NewWriter(); }
  // Indexes a blob just written through a writer (and evicts if over budget).
  absl::Status Record(const Digest& digest);
  // Verified whole read; refreshes the blob's LRU position. A corrupt blob is dropped
  // (DataLoss), and any action-cache entry naming it no longer hits.
  absl::StatusOr<std::string> Get(const Digest& digest);
  // Verified without reading it into memory; refreshes LRU. For streamed downloads.
  absl::Status Verify(const Digest& digest);
  absl::StatusOr<std::string> ReadRange(const Digest& digest, int64_t offset, int64_t length) const {
    return blobs_->ReadRange(digest, offset, length);
  }
  bool Contains(const Digest& digest) const { return blobs_->Contains(digest); }

  // While a Hold lives, eviction skips the blob.
  class Hold {
   public:
    Hold(Cache* cache, std::string sha256_hex);
    Hold(Hold&& other) noexcept;
    Hold& operator=(Hold&&) = delete;
    ~Hold();

   private:
    Cache* cache_;
    std::string sha256_hex_;
  };
  Hold HoldBlob(const Digest& digest) { return Hold(this, digest.sha256_hex); }

  // The action cache. Lookup misses (and forgets the entry) when a named blob is gone.
  std::optional<ActionResult> LookupAction(const std::string& action_key);
  absl::Status PutAction(const std::string& action_key, const ActionResult& result);

  // Evicts least-recently-used unheld blobs until the total is within the budget.
  absl::Status EvictToBudget();
  int64_t total_bytes() const { return total_bytes_.load(); }
  int64_t blob_count() const { return blob_count_.load(); }
  int64_t budget_bytes() const { return budget_bytes_; }
  const CacheCounters& counters() const { return counters_; }
  BlobStore& blobs() { return *blobs_; }

 private:
  Cache() = default;
  absl::Status Reconcile();
  void Touch(const Digest& digest);
  void Forget(const Digest& digest);
  bool IsHeld(const std::string& sha256_hex);

  std::unique_ptr<BlobStore> blobs_;
  std::unique_ptr<SqliteDb> db_;
  int64_t budget_bytes_ = 0;
  std::atomic<int64_t> total_bytes_{0};
  std::atomic<int64_t> blob_count_{0};
  std::mutex holds_mutex_;
  std::map<std::string, int> holds_;
  std::function<bool(const std::string&)> is_needed_;
  std::mutex evict_mutex_;
  CacheCounters counters_;
};

}  // namespace kiln::cache
