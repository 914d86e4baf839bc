// BlobStore on a real directory: digests, dedup, verification on read, crash leftovers.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/cache/blob_store.h"
#include "tests/unit/temp_dir.h"

namespace kiln::cache {
namespace {

std::string TempRoot() { return kiln::testing::MakeTempDir("kiln-blobs"); }

TEST(BlobStoreTest, DigestIsSha256) {
  // FIPS 180-2 test vector.
  EXPECT_EQ(DigestOf("abc").sha256_hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestOf("abc").size_bytes, 3);
  EXPECT_EQ(DigestOf("").sha256_hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(BlobStoreTest, PutThenGetRoundTripsAndDeduplicates) {
  auto store = BlobStore::Open(TempRoot());
  ASSERT_TRUE(store.ok()) << store.status();
  auto digest = (*store)->Put("model bytes");
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_TRUE((*store)->Contains(*digest));
  // Fan-out path: sha256/ab/cdef...
  EXPECT_EQ((*store)->PathOf(*digest),
            (*store)->root() + "/sha256/" + digest->sha256_hex.substr(0, 2) + "/" + digest->sha256_hex.substr(2));
  auto again = (*store)->Put("model bytes");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *digest);
  auto bytes = (*store)->Get(*digest);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "model bytes");
}

TEST(BlobStoreTest, MissingBlobIsNotFound) {
  auto store = BlobStore::Open(TempRoot());
  ASSERT_TRUE(store.ok());
  auto bytes = (*store)->Get(DigestOf("never stored"));
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kNotFound);
}

TEST(BlobStoreTest, CorruptBlobIsDetectedRemovedAndNeverServed) {
  auto store = BlobStore::Open(TempRoot());
  ASSERT_TRUE(store.ok());
  auto digest = (*store)->Put("the artifact");
  ASSERT_TRUE(digest.ok());
  {
    std::ofstream file((*store)->PathOf(*digest), std::ios::binary | std::ios::trunc);
    file << "the artifacT";  // same size, one byte flipped
  }
  auto bytes = (*store)->Get(*digest);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss) << bytes.status();
  EXPECT_FALSE((*store)->Contains(*digest));
  EXPECT_EQ((*store)->Get(*digest).status().code(), absl::StatusCode::kNotFound);
  // Storing it again repairs it.
  ASSERT_TRUE((*store)->Put("the artifact").ok());
  EXPECT_EQ(*(*store)->Get(*digest), "the artifact");
}

TEST(BlobStoreTest, PutExpectingRejectsAMismatchAndStoresNothing) {
  auto store = BlobStore::Open(TempRoot());
  ASSERT_TRUE(store.ok());
  Digest claimed = DigestOf("what the client meant");
  absl::Status s = (*store)->PutExpecting(claimed, "what arrived");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find(claimed.sha256_hex), std::string::npos) << s;
  EXPECT_FALSE((*store)->Contains(DigestOf("what arrived")));
  EXPECT_TRUE((*store)->PutExpecting(DigestOf("what arrived"), "what arrived").ok());
  EXPECT_EQ((*store)->PutExpecting(Digest{"XYZ", 3}, "abc").code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlobStoreTest, OpenClearsTemporaryFilesACrashLeft) {
  const std::string root = TempRoot();
  ASSERT_TRUE(BlobStore::Open(root).ok());
  const std::string leftover = root + "/tmp/12345.0.deadbeef";
  {
    std::ofstream(leftover) << "half a blob";
  }
  ASSERT_EQ(access(leftover.c_str(), F_OK), 0);
  auto store = BlobStore::Open(root);
  ASSERT_TRUE(store.ok());
  EXPECT_NE(access(leftover.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace kiln::cache
