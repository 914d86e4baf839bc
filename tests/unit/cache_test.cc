// Cache on a real directory and SQLite index: streamed writes, LRU eviction under a
// budget with holds, the action cache, and reconciliation with the disk on reopen.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/cache/cache.h"
#include "tests/unit/temp_dir.h"

namespace kiln::cache {
namespace {

std::string TempRoot() { return kiln::testing::MakeTempDir("kiln-cache"); }

std::string Bytes(char c, size_t n) { return std::string(n, c); }

// LRU order is by millisecond timestamps: keep accesses apart.
void Tick() { std::this_thread::sleep_for(std::chrono::milliseconds(3)); }

TEST(CacheTest, StreamedWriterCommitsOnlyMatchingBytes) {
  auto cache = Cache::Open({TempRoot(), 0});
  ASSERT_TRUE(cache.ok());
  const std::string data = Bytes('x', 3000);
  const Digest digest = DigestOf(data);
  {
    auto writer = (*cache)->NewWriter();
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(data.substr(0, 1000)).ok());
    ASSERT_TRUE((*writer)->Append(data.substr(1000)).ok());
    ASSERT_TRUE((*writer)->Commit(digest).ok());
  }
  ASSERT_TRUE((*cache)->Record(digest).ok());
  EXPECT_TRUE((*cache)->Contains(digest));
  EXPECT_EQ((*cache)->total_bytes(), 3000);
  {
    auto writer = (*cache)->NewWriter();
    ASSERT_TRUE((*writer)->Append("not it").ok());
    absl::Status s = (*writer)->Commit(DigestOf("something else"));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  EXPECT_FALSE((*cache)->Contains(DigestOf("not it")));
  EXPECT_TRUE(std::filesystem::is_empty((*cache)->blobs().root() + "/tmp"));
}

TEST(CacheTest, EvictsLeastRecentlyUsedFirstAndSkipsHeldBlobs) {
  auto cache = Cache::Open({TempRoot(), 2500});
  ASSERT_TRUE(cache.ok());
  auto a = (*cache)->Put(Bytes('a', 1000));
  Tick();
  auto b = (*cache)->Put(Bytes('b', 1000));
  Tick();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*cache)->Get(*a).ok());  // a is now more recent than b
  Tick();
  auto hold_b = (*cache)->HoldBlob(*b);  // ...but b is held
  auto c = (*cache)->Put(Bytes('c', 1000));
  ASSERT_TRUE(c.ok());
  // Over budget by 500: b is oldest but held, so a goes.
  EXPECT_FALSE((*cache)->Contains(*a));
  EXPECT_TRUE((*cache)->Contains(*b));
  EXPECT_TRUE((*cache)->Contains(*c));
  EXPECT_EQ((*cache)->counters().evictions.load(), 1);
  EXPECT_EQ((*cache)->total_bytes(), 2000);
}

TEST(CacheTest, NeededCallbackProtectsBlobs) {
  auto cache = Cache::Open({TempRoot(), 1500});
  ASSERT_TRUE(cache.ok());
  auto a = (*cache)->Put(Bytes('a', 1000));
  ASSERT_TRUE(a.ok());
  const std::string needed = a->sha256_hex;
  (*cache)->SetNeededCallback([needed](const std::string& sha) { return sha == needed; });
  Tick();
  auto b = (*cache)->Put(Bytes('b', 1000));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*cache)->Contains(*a));
  EXPECT_FALSE((*cache)->Contains(*b));  // the only unneeded blob, though newest
}

TEST(CacheTest, ActionCacheMissesWhenABlobIsGone) {
  auto cache = Cache::Open({TempRoot(), 0});
  ASSERT_TRUE(cache.ok());
  ActionResult result;
  result.artifact = *(*cache)->Put("artifact");
  result.report = *(*cache)->Put("report");
  result.manifest = *(*cache)->Put("manifest");
  result.details = "opaque";
  ASSERT_TRUE((*cache)->PutAction("key1", result).ok());
  auto hit = (*cache)->LookupAction("key1");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->artifact, result.artifact);
  EXPECT_EQ(hit->details, "opaque");
  EXPECT_FALSE((*cache)->LookupAction("key2").has_value());
  ASSERT_TRUE((*cache)->blobs().Remove(result.report).ok());
  EXPECT_FALSE((*cache)->LookupAction("key1").has_value());
}

TEST(CacheTest, CorruptBlobIsDroppedFromTheIndex) {
  auto cache = Cache::Open({TempRoot(), 0});
  ASSERT_TRUE(cache.ok());
  auto d = (*cache)->Put(Bytes('z', 100));
  ASSERT_TRUE(d.ok());
  {
    std::fstream f((*cache)->blobs().PathOf(*d), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('!');
  }
  EXPECT_EQ((*cache)->Verify(*d).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE((*cache)->Contains(*d));
  EXPECT_EQ((*cache)->total_bytes(), 0);
  EXPECT_EQ((*cache)->counters().corrupt_blobs.load(), 1);
}

TEST(CacheTest, ReopenReconcilesIndexWithDisk) {
  const std::string root = TempRoot();
  Digest kept, removed, unindexed;
  {
    auto cache = Cache::Open({root, 0});
    ASSERT_TRUE(cache.ok());
    kept = *(*cache)->Put(Bytes('k', 10));
    removed = *(*cache)->Put(Bytes('r', 20));
    // Written to the store but never indexed (a crash between rename and index insert).
    unindexed = *(*cache)->blobs().Put(Bytes('u', 40));
  }
  std::filesystem::remove(BlobStore::Open(root).value()->PathOf(removed));
  auto cache = Cache::Open({root, 0});
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ((*cache)->blob_count(), 2);
  EXPECT_EQ((*cache)->total_bytes(), 50);
  EXPECT_TRUE((*cache)->Contains(unindexed));
  EXPECT_TRUE((*cache)->Contains(kept));
}

}  // namespace
}  // namespace kiln::cache
