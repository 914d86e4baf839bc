// The base layer (common/): sizes and durations with units, sha256 against known vectors,
// atomic file writes, JSON through protobuf, the Status macros and log lines.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"
#include "kiln/common/file.h"
#include "kiln/common/json.h"
#include "kiln/common/log.h"
#include "kiln/common/sha256.h"
#include "kiln/common/status.h"
#include "kiln/common/units.h"
#include "temp_dir.h"

namespace kiln {
namespace {

TEST(UnitsTest, ByteSizesTakeBinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseByteSize("512"), 512);
  EXPECT_EQ(*ParseByteSize("512B"), 512);
  EXPECT_EQ(*ParseByteSize("20G"), int64_t{20} << 30);
  EXPECT_EQ(*ParseByteSize("20Gi"), int64_t{20} << 30);
  EXPECT_EQ(*ParseByteSize("20GiB"), int64_t{20} << 30);
  EXPECT_EQ(*ParseByteSize("20gib"), int64_t{20} << 30);
  EXPECT_EQ(*ParseByteSize("20GB"), int64_t{20} * 1000 * 1000 * 1000);
  EXPECT_EQ(*ParseByteSize("1.5K"), 1536);
  EXPECT_EQ(*ParseByteSize(" 2 MiB "), 2 * 1048576);
  for (const char* bad : {"", "G", "-1G", "1.2.3K", "12X", "ten"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
  EXPECT_NE(ParseByteSize("12X").status().message().find("'12X' is not a size"), std::string::npos);
  EXPECT_FALSE(ParseByteSize("99999999T").ok());
}

TEST(UnitsTest, DurationsTakeUnitsAndADefault) {
  EXPECT_EQ(*ParseDurationMs("1500ms"), 1500);
  EXPECT_EQ(*ParseDurationMs("30s"), 30000);
  EXPECT_EQ(*ParseDurationMs("5m"), 300000);
  EXPECT_EQ(*ParseDurationMs("2h"), 7200000);
  EXPECT_EQ(*ParseDurationMs("30d"), int64_t{30} * 86400000);
  EXPECT_EQ(*ParseDurationMs("30"), 30000);  // bare: seconds by default
  EXPECT_EQ(*ParseDurationMs("30", 1), 30);  // or the caller's unit
  EXPECT_EQ(*ParseDurationMs("0.5s"), 500);
  for (const char* bad : {"", "s", "5 weeks", "-3s"}) EXPECT_FALSE(ParseDurationMs(bad).ok()) << bad;
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(int64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(FormatDurationMs(250), "250 ms");
  EXPECT_EQ(FormatDurationMs(90000), "1.5 min");
}

TEST(Sha256Test, MatchesKnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 hash;
  hash.Update("a");
  hash.Update("bc");
  EXPECT_EQ(hash.FinishHex(), Sha256Hex("abc"));
  hash.Update("");  // starts over after FinishHex
  EXPECT_EQ(hash.FinishHex(), Sha256Hex(""));
}

TEST(FileTest, AtomicWriteReplacesAndErrorsNameThePath) {
  const std::string dir = testing::MakeTempDir("kiln-common");
  const std::string path = dir + "/sub/x.bin";
  ASSERT_TRUE(MakeDirectories(dir + "/sub").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, std::string("se\0cond", 7)).ok());
  EXPECT_EQ(*ReadFile(path), std::string("se\0cond", 7));
  EXPECT_FALSE(FileExists(path + ".tmp." + std::to_string(getpid())));
  auto missing = ReadFile(dir + "/nope");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_NE(missing.status().message().find(dir + "/nope"), std::string::npos);
  EXPECT_FALSE(ReadFile(dir).ok());  // a directory is not a file
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  KILN_ASSIGN_OR_RETURN(int half, Half(x));
  KILN_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  KILN_RETURN_IF_ERROR(Half(x));
  return absl::OkStatus();
}

TEST(StatusTest, MacrosReturnEarlyAndAnnotateKeepsTheCode) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_FALSE(Quarter(6).ok());
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_EQ(CheckEven(3).message(), "odd");
  absl::Status annotated = Annotate(absl::NotFoundError("no such input"), "model.onnx");
  EXPECT_TRUE(absl::IsNotFound(annotated));
  EXPECT_EQ(annotated.message(), "model.onnx: no such input");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

TEST(JsonTest, RoundTripsThroughProtobufAndRefusesUnknownFields) {
  google::protobuf::Struct message;
  (*message.mutable_fields())["name"].set_string_value("a \"quoted\"\nline");
  (*message.mutable_fields())["size"].set_number_value(96256);
  auto json = ToJson(message);
  ASSERT_TRUE(json.ok());
  EXPECT_NE(json->find("\\\"quoted\\\"\\n"), std::string::npos);
  EXPECT_EQ(json->back(), '\n');
  google::protobuf::Struct back;
  ASSERT_TRUE(FromJson(*json, &back).ok());
  EXPECT_EQ(back.fields().at("name").string_value(), "a \"quoted\"\nline");
  google::protobuf::Value value;
  EXPECT_FALSE(FromJson("{\"kind\": ", &value).ok());
}

TEST(LogTest, JsonLinesCarryTheFields) {
  auto format = log::ParseFormat("json");
  ASSERT_TRUE(format.ok());
  EXPECT_FALSE(log::ParseFormat("xml").ok());
  EXPECT_FALSE(log::ParseLevel("loud").ok());
  log::Options options;
  options.program = "common_test";
  options.format = *format;
  log::Init(options);
  ::testing::internal::CaptureStderr();
  log::Info({"job-1", "tenant-a", ""}, "compiled {} nodes", 7);
  log::Debug({}, "not shown at info level");
  const std::string line = ::testing::internal::GetCapturedStderr();
  google::protobuf::Struct parsed;
  ASSERT_TRUE(FromJson(line, &parsed).ok()) << line;
  EXPECT_EQ(parsed.fields().at("message").string_value(), "compiled 7 nodes");
  EXPECT_EQ(parsed.fields().at("job").string_value(), "job-1");
  EXPECT_EQ(parsed.fields().at("tenant").string_value(), "tenant-a");
  EXPECT_EQ(parsed.fields().at("level").string_value(), "info");
  EXPECT_EQ(parsed.fields().count("worker"), 0u);
}

}  // namespace
}  // namespace kiln
