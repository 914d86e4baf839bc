// RegexFullMatch's pattern compiled at compile time: the RE2 syntax Kiln takes, checked and
// turned into the NFA program the regex_full_match kernel runs (kiln/kernels/strings.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::ops {

// The program for `pattern`; an error says what in the pattern is invalid RE2 syntax or
// syntax Kiln does not take (Unicode classes \p, (?i) on non-ASCII letters, ...) and at
// which byte, as "at byte 3: missing ) for the group opened here".
absl::StatusOr<std::vector<int32_t>> CompileRegex(std::string_view pattern);

}  // namespace kiln::ops
