// Sizes and durations with units: see units.h.
#include "kiln/common/units.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

struct Unit {
  const char* name;
  double factor;
};

// The longest spellings first is not needed: each entry is matched whole.
constexpr Unit kSizeUnits[] = {
    {"", 1},
    {"b", 1},
    {"k", 1024.0},
    {"ki", 1024.0},
    {"kib", 1024.0},
    {"kb", 1e3},
    {"m", 1048576.0},
    {"mi", 1048576.0},
    {"mib", 1048576.0},
    {"mb", 1e6},
    {"g", 1073741824.0},
    {"gi", 1073741824.0},
    {"gib", 1073741824.0},
    {"gb", 1e9},
    {"t", 1099511627776.0},
    {"ti", 1099511627776.0},
    {"tib", 1099511627776.0},
    {"tb", 1e12},
};

constexpr Unit kDurationUnits[] = {
    {"ms", 1}, {"s", 1000}, {"sec", 1000}, {"m", 60000}, {"min", 60000}, {"h", 3600000}, {"d", 86400000},
};

// Splits "12.5GiB" into 12.5 and "gib" (lowercase, spaces between allowed).
bool SplitNumber(std::string_view std_text, double* number, std::string* unit) {
  absl::string_view text = absl::StripAsciiWhitespace(absl::string_view(std_text.data(), std_text.size()));
  size_t end = 0;
  while (end < text.size() && (absl::ascii_isdigit(text[end]) || text[end] == '.')) ++end;
  if (end == 0) return false;
  if (!absl::SimpleAtod(text.substr(0, end), number) || !std::isfinite(*number) || *number < 0) return false;
  *unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(end)));
  return true;
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(std::string_view text) {
  double number = 0;
  std::string unit;
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(text),
                                                   "' is not a size: expected a number and a unit, e.g. 512M, 20GiB, "
                                                   "1.5T (K/M/G/T and Ki/Mi/KiB... are powers of 1024, KB/MB/GB "
                                                   "powers of 1000)"));
  };
  if (!SplitNumber(text, &number, &unit)) return bad();
  for (const Unit& u : kSizeUnits) {
    if (unit != u.name) continue;
    const double bytes = std::round(number * u.factor);
    if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max())) {
      return absl::OutOfRangeError(absl::StrCat("size '", std::string(text), "' is too large"));
    }
    return static_cast<int64_t>(bytes);
  }
  return bad();
}

absl::StatusOr<int64_t> ParseDurationMs(std::string_view text, int64_t bare_unit_ms) {
  double number = 0;
  std::string unit;
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(text),
                     "' is not a duration: expected a number and a unit (ms, s, m, h, d), e.g. 30s, 5m, 30d"));
  };
  if (!SplitNumber(text, &number, &unit)) return bad();
  double factor = -1;
  if (unit.empty()) factor = static_cast<double>(bare_unit_ms);
  for (const Unit& u : kDurationUnits) {
    if (unit == u.name) factor = u.factor;
  }
  if (factor < 0) return bad();
  const double ms = std::round(number * factor);
  if (ms > static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return absl::OutOfRangeError(absl::StrCat("duration '", std::string(text), "' is too long"));
  }
  return static_cast<int64_t>(ms);
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (unit < 4 && std::fabs(value) >= 1024.0) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.1f %s", value, kNames[unit]);
  }
  return text;
}

std::string FormatDurationMs(double ms) {
  char text[64];
  if (ms < 1000) {
    std::snprintf(text, sizeof(text), "%.0f ms", ms);
  } else if (ms < 60000) {
    std::snprintf(text, sizeof(text), "%.1f s", ms / 1000);
  } else if (ms < 3600000) {
    std::snprintf(text, sizeof(text), "%.1f min", ms / 60000);
  } else if (ms < 86400000) {
    std::snprintf(text, sizeof(text), "%.1f h", ms / 3600000);
  } else {
    std::snprintf(text, sizeof(text), "%.1f d", ms / 86400000);
  }
  return text;
}

}  // namespace kiln
