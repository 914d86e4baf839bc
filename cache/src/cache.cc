// Cache: see cache.h.
#include "kiln/cache/cache.h"

#include <dirent.h>
#include <sys/stat.h>

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/common/time.h"

namespace kiln::cache {

absl::StatusOr<std::unique_ptr<Cache>> Cache::Open(const Options& options) {
  std::unique_ptr<Cache> cache(new Cache());
  auto blobs = BlobStore::Open(options.root);
  if (!blobs.ok()) return blobs.status();
  cache->blobs_ = std::move(*blobs);
  cache->budget_bytes_ = options.budget_bytes;
  auto db = SqliteDb::Open(options.root + "/index.db");
  if (!db.ok()) return db.status();
  cache->db_ = std::move(*db);
  if (auto s = cache->db_->Exec(
          "CREATE TABLE IF NOT EXISTS blobs (sha256 TEXT PRIMARY KEY, size_bytes INTEGER NOT NULL,"
          " last_access_ms INTEGER NOT NULL);"
          "CREATE INDEX IF NOT EXISTS blobs_lru ON blobs(last_access_ms);"
          "CREATE TABLE IF NOT EXISTS actions (action_key TEXT PRIMARY KEY,"
          " artifact TEXT NOT NULL, artifact_size INTEGER NOT NULL, report TEXT NOT NULL, report_size INTEGER NOT NULL,"
          " manifest TEXT NOT NULL, manifest_size INTEGER NOT NULL, details BLOB, created_ms INTEGER NOT NULL);");
      !s.ok()) {
    return s;
  }
  if (auto s = cache->Reconcile(); !s.ok()) return s;
  if (auto s = cache->EvictToBudget(); !s.ok()) return s;
  return cache;
}

// The index can lag the disk by one blob after a crash (renamed, not yet indexed) or lead
// it (indexed, then removed by hand): make the index match what is on disk.
absl::Status Cache::Reconcile() {
  std::set<std::string> on_disk;
  std::map<std::string, int64_t> sizes;
  const std::string base = blobs_->root() + "/sha256";
  if (DIR* top = opendir(base.c_str())) {
    while (dirent* fan = readdir(top)) {
      if (fan->d_name[0] == '.') continue;
      const std::string dir = base + "/" + fan->d_name;
      if (DIR* sub = opendir(dir.c_str())) {
        while (dirent* file = readdir(sub)) {
          if (file->d_name[0] == '.') continue;
          struct stat st;
          if (stat((dir + "/" + file->d_name).c_str(), &st) != 0) continue;
          std::string hex = std::string(fan->d_name) + file->d_name;
          on_disk.insert(hex);
          sizes[hex] = st.st_size;
        }
        closedir(sub);
      }
    }
    closedir(top);
  }
  std::lock_guard<std::mutex> lock(db_->mutex());
  Transaction txn(*db_);
  if (!txn.status().ok()) return txn.status();
  std::set<std::string> indexed;
  {
    Statement q = db_->Prepare("SELECT sha256 FROM blobs");
    while (q.Step()) indexed.insert(q.Text(0));
  }
  for (const std::string& hex : indexed) {
    if (!on_disk.count(hex)) {
      if (auto s = db_->Prepare("DELETE FROM blobs WHERE sha256 = ?").Bind(1, hex).Run(); !s.ok()) return s;
    }
  }
  const int64_t now = UnixMillis();
  for (const std::string& hex : on_disk) {
    if (!indexed.count(hex)) {
      auto s = db_->Prepare("INSERT INTO blobs (sha256, size_bytes, last_access_ms) VALUES (?, ?, ?)")
                   .Bind(1, hex)
                   .Bind(2, sizes[hex])
                   .Bind(3, now)
                   .Run();
      if (!s.ok()) return s;
    }
  }
  if (auto s = txn.Commit(); !s.ok()) return s;
  int64_t total = 0;
  for (const auto& [hex, size] : sizes) total += size;
  total_bytes_ = total;
  blob_count_ = static_cast<int64_t>(sizes.size());
  return absl::OkStatus();
}

void Cache::SetNeededCallback(std::function<bool(const std::string&)> is_needed) {
  std::lock_guard<std::mutex> lock(evict_mutex_);
  is_needed_ = std::move(is_needed);
}

absl::Status Cache::Record(const Digest& digest) {
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Statement insert =
        db_->Prepare("INSERT OR IGNORE INTO blobs (sha256, size_bytes, last_access_ms) VALUES (?, ?, ?)");
    insert.Bind(1, digest.sha256_hex).Bind(2, digest.size_bytes).Bind(3, UnixMillis());
    if (auto s = insert.Run(); !s.ok()) return s;
    if (db_->Changes() == 1) {
      total_bytes_ += digest.size_bytes;
      blob_count_ += 1;
    } else {
      auto s = db_->Prepare("UPDATE blobs SET last_access_ms = ? WHERE sha256 = ?")
                   .Bind(1, UnixMillis())
                   .Bind(2, digest.sha256_hex)
                   .Run();
      if (!s.ok()) return s;
    }
  }
  return EvictToBudget();
}

absl::StatusOr<Digest> Cache::Put(std::string_view bytes) {
  auto digest = blobs_->Put(bytes);
  if (!digest.ok()) return digest.status();
  if (auto s = Record(*digest); !s.ok()) return s;
  return digest;
}

void Cache::Touch(const Digest& digest) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  db_->Prepare("UPDATE blobs SET last_access_ms = ? WHERE sha256 = ?")
      .Bind(1, UnixMillis())
      .Bind(2, digest.sha256_hex)
      .Run()
      .IgnoreError();
}

void Cache::Forget(const Digest& digest) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  Statement size = db_->Prepare("SELECT size_bytes FROM blobs WHERE sha256 = ?");
  size.Bind(1, digest.sha256_hex);
  if (!size.Step()) return;
  const int64_t bytes = size.Int(0);
  if (db_->Prepare("DELETE FROM blobs WHERE sha256 = ?").Bind(1, digest.sha256_hex).Run().ok() && db_->Changes() == 1) {
    total_bytes_ -= bytes;
    blob_count_ -= 1;
  }
}

absl::StatusOr<std::string> Cache::Get(const Digest& digest) {
  auto bytes = blobs_->Get(digest);
  if (bytes.ok()) {
    Touch(digest);
  } else if (absl::IsDataLoss(bytes.status())) {
    counters_.corrupt_blobs++;
    Forget(digest);
  }
  return bytes;
}

absl::Status Cache::Verify(const Digest& digest) {
  absl::Status s = blobs_->Verify(digest);
  if (s.ok()) {
    Touch(digest);
  } else if (absl::IsDataLoss(s)) {
    counters_.corrupt_blobs++;
    Forget(digest);
  }
  return s;
}

Cache::Hold::Hold(Cache* cache, std::string sha256_hex) : cache_(cache), sha256_hex_(std::move(sha256_hex)) {
  std::lock_guard<std::mutex> lock(cache_->holds_mutex_);
  cache_->holds_[sha256_hex_]++;
}

Cache::Hold::Hold(Hold&& other) noexcept : cache_(other.cache_), sha256_hex_(std::move(other.sha256_hex_)) {
  other.cache_ = nullptr;
}

Cache::Hold::~Hold() {
  if (cache_ == nullptr) return;
  std::lock_guard<std::mutex> lock(cache_->holds_mutex_);
  if (--cache_->holds_[sha256_hex_] == 0) cache_->holds_.erase(sha256_hex_);
}

bool Cache::IsHeld(const std::string& sha256_hex) {
  {
    std::lock_guard<std::mutex> lock(holds_mutex_);
    if (holds_.count(sha256_hex)) return true;
  }
  return is_needed_ && is_needed_(sha256_hex);
}

absl::Status Cache::EvictToBudget() {
  if (budget_bytes_ <= 0 || total_bytes_ <= budget_bytes_) return absl::OkStatus();
  std::lock_guard<std::mutex> evict_lock(evict_mutex_);
  std::vector<std::pair<std::string, int64_t>> candidates;
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Statement q = db_->Prepare("SELECT sha256, size_bytes FROM blobs ORDER BY last_access_ms ASC");
    while (q.Step()) candidates.emplace_back(q.Text(0), q.Int(1));
  }
  for (const auto& [hex, size] : candidates) {
    if (total_bytes_ <= budget_bytes_) break;
    if (IsHeld(hex)) continue;
    Digest digest{hex, size};
    if (auto s = blobs_->Remove(digest); !s.ok()) return s;
    Forget(digest);
    counters_.evictions++;
    counters_.evicted_bytes += size;
  }
  return absl::OkStatus();
}

std::optional<ActionResult> Cache::LookupAction(const std::string& action_key) {
  ActionResult result;
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Statement q = db_->Prepare(
        "SELECT artifact, artifact_size, report, report_size, manifest, manifest_size, details, created_ms"
        " FROM actions WHERE action_key = ?");
    q.Bind(1, action_key);
    if (!q.Step()) return std::nullopt;
    result.artifact = {q.Text(0), q.Int(1)};
    result.report = {q.Text(2), q.Int(3)};
    result.manifest = {q.Text(4), q.Int(5)};
    result.details = q.Text(6);
    result.created_ms = q.Int(7);
  }
  for (const Digest* d : {&result.artifact, &result.report, &result.manifest}) {
    if (!blobs_->Contains(*d)) {
      std::lock_guard<std::mutex> lock(db_->mutex());
      db_->Prepare("DELETE FROM actions WHERE action_key = ?").Bind(1, action_key).Run().IgnoreError();
      return std::nullopt;
    }
  }
  for (const Digest* d : {&result.artifact, &result.report, &result.manifest}) Touch(*d);
  return result;
}

absl::Status Cache::PutAction(const std::string& action_key, const ActionResult& result) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  Statement insert = db_->Prepare(
      "INSERT OR REPLACE INTO actions (action_key, artifact, artifact_size, report, report_size, manifest,"
      " manifest_size, details, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  insert.Bind(1, action_key)
      .Bind(2, result.artifact.sha256_hex)
      .Bind(3, result.artifact.size_bytes)
      .Bind(4, result.report.sha256_hex)
      .Bind(5, result.report.size_bytes)
      .Bind(6, result.manifest.sha256_hex)
      .Bind(7, result.manifest.size_bytes)
      .BindBlob(8, result.details)
      .Bind(9, UnixMillis());
  return insert.Run();
}

}  // namespace kiln::cache
