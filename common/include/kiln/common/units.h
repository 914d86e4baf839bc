// Sizes and durations as people write them in flags and config: "20GiB", "512M", "30d",
// "1500ms". Parse errors say what was expected.
//
// Sizes: a number (fractions allowed) and an optional unit. K, M, G, T, with or without
// "i" or "iB" (K, Ki, KiB ...), are binary (1024^n), as in `du`, kubectl ("Gi") and most
// infrastructure flags; KB, MB, GB, TB are decimal (1000^n); B or no unit means bytes.
// Durations: a number and a unit: ms, s, m (minutes), h, d; a bare number takes the
// caller's default unit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kiln {

absl::StatusOr<int64_t> ParseByteSize(std::string_view text);
// `bare_unit_ms`: what a number without a unit means (1000 for seconds, 1 for ms).
absl::StatusOr<int64_t> ParseDurationMs(std::string_view text, int64_t bare_unit_ms = 1000);

// "1.5 GiB", "96 KiB", "512 B": the largest binary unit that keeps the number >= 1.
std::string FormatBytes(int64_t bytes);
// "250 ms", "12.3 s", "4.0 min", "2.0 h", "3.0 d".
std::string FormatDurationMs(double ms);

}  // namespace kiln
