// One logging library for the service processes (spdlog): lines carry the program, and
// where known the job id and tenant; `--log-format json` writes JSON lines for log
// collectors instead of text. Usage:
//   kiln::log::Init(options);                      // once, from main
//   kiln::log::Info({job_id}, "leased to {}", worker);
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "fmt/format.h"

namespace kiln::log {

enum class Level { kDebug, kInfo, kWarning, kError };
enum class Format { kText, kJson };

struct Options {
  std::string program = "kiln";
  Format format = Format::kText;
  Level level = Level::kInfo;
};

// "text" / "json"; "debug" / "info" / "warning" / "error" (for flags).
absl::StatusOr<Format> ParseFormat(std::string_view text);
absl::StatusOr<Level> ParseLevel(std::string_view text);

// Logs go to stderr. Safe to call again (the last call wins); logging before Init uses
// the defaults.
void Init(const Options& options);

// Context for a line: empty fields are left out.
struct Fields {
  std::string job_id;
  std::string tenant;
  std::string worker;
};

void Write(Level level, const Fields& fields, std::string_view message);

// log::Debug, log::Info, log::Warning, log::Error: a line at that level, formatted by fmt.
template <Level kLevel>
struct Logger {
  template <typename... Args>
  void operator()(const Fields& fields, fmt::format_string<Args...> format, Args&&... args) const {
    Write(kLevel, fields, fmt::format(format, std::forward<Args>(args)...));
  }
};
inline constexpr Logger<Level::kDebug> Debug;
inline constexpr Logger<Level::kInfo> Info;
inline constexpr Logger<Level::kWarning> Warning;
inline constexpr Logger<Level::kError> Error;

}  // namespace kiln::log
