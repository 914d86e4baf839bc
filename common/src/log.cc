// Logging through spdlog: see log.h. Text lines read
//   2026-11-25T03:41:07.123Z info kilnd job=J tenant=T: message
// JSON lines are a google.protobuf.Struct printed by protobuf (JSON only through protobuf):
//   {"time":"...","level":"info","program":"kilnd","job":"J","message":"..."}
#include "kiln/common/log.h"

#include <ctime>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "kiln/common/json.h"
#include "kiln/common/time.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace kiln::log {
namespace {

struct State {
  std::mutex mutex;
  Options options;
  std::shared_ptr<spdlog::logger> logger;
};

State& GetState() {
  static State* state = [] {
    auto* s = new State();
    s->logger = std::make_shared<spdlog::logger>("kiln", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    s->logger->set_pattern("%v");
    s->logger->set_level(spdlog::level::trace);
    return s;
  }();
  return *state;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarning: return "warning";
    case Level::kError: return "error";
  }
  return "info";
}

spdlog::level::level_enum SpdLevel(Level level) {
  switch (level) {
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarning: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
  }
  return spdlog::level::info;
}

std::string TimestampUtc() {
  const int64_t ms = UnixMillis();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc;
  gmtime_r(&seconds, &utc);
  char text[40];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  char with_ms[48];
  std::snprintf(with_ms, sizeof(with_ms), "%s.%03dZ", text, static_cast<int>(ms % 1000));
  return with_ms;
}

std::string JsonLine(const Options& options, Level level, const Fields& fields, std::string_view message) {
  google::protobuf::Struct line;
  auto& f = *line.mutable_fields();
  f["time"].set_string_value(TimestampUtc());
  f["level"].set_string_value(LevelName(level));
  f["program"].set_string_value(options.program);
  if (!fields.job_id.empty()) f["job"].set_string_value(fields.job_id);
  if (!fields.tenant.empty()) f["tenant"].set_string_value(fields.tenant);
  if (!fields.worker.empty()) f["worker"].set_string_value(fields.worker);
  f["message"].set_string_value(std::string(message));
  JsonOptions compact;
  compact.pretty = false;
  auto json = ToJson(line, compact);
  return json.ok() ? *json : absl::StrCat("{\"message\":\"log line not printable\"}");
}

std::string TextLine(const Options& options, Level level, const Fields& fields, std::string_view message) {
  std::string line = absl::StrCat(TimestampUtc(), " ", LevelName(level), " ", options.program);
  if (!fields.job_id.empty()) absl::StrAppend(&line, " job=", fields.job_id);
  if (!fields.tenant.empty()) absl::StrAppend(&line, " tenant=", fields.tenant);
  if (!fields.worker.empty()) absl::StrAppend(&line, " worker=", fields.worker);
  absl::StrAppend(&line, ": ", std::string(message));
  return line;
}

}  // namespace

absl::StatusOr<Format> ParseFormat(std::string_view text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return absl::InvalidArgumentError(absl::StrCat("log format '", std::string(text), "' is not one of text, json"));
}

absl::StatusOr<Level> ParseLevel(std::string_view text) {
  for (Level level : {Level::kDebug, Level::kInfo, Level::kWarning, Level::kError}) {
    if (text == LevelName(level)) return level;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", std::string(text), "' is not one of debug, info, warning, error"));
}

void Init(const Options& options) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.options = options;
}

void Write(Level level, const Fields& fields, std::string_view message) {
  State& state = GetState();
  Options options;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    options = state.options;
  }
  if (static_cast<int>(level) < static_cast<int>(options.level)) return;
  const std::string line = options.format == Format::kJson ? JsonLine(options, level, fields, message)
                                                           : TextLine(options, level, fields, message);
  state.logger->log(SpdLevel(level), "{}", line);
  if (level >= Level::kWarning) state.logger->flush();
}

}  // namespace kiln::log
