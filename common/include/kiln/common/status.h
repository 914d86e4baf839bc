// Status plumbing for errors that cross a boundary (absl::Status / absl::StatusOr): the
// early-return macros and a prefix that keeps the code while saying where it happened.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace kiln {

// The same status with "prefix: " in front of its message (OK stays OK).
inline absl::Status Annotate(const absl::Status& status, std::string_view prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(std::string(prefix), ": ", status.message()));
}

namespace status_internal {
inline absl::Status AsStatus(absl::Status status) { return status; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& value) {
  return value.status();
}
}  // namespace status_internal

}  // namespace kiln

#define KILN_STATUS_CONCAT_INNER(a, b) a##b
#define KILN_STATUS_CONCAT(a, b) KILN_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` (an absl::Status or absl::StatusOr) from the enclosing
// function when it is not OK.
#define KILN_RETURN_IF_ERROR(expr)                                                                                   \
  do {                                                                                                               \
    if (absl::Status kiln_status = ::kiln::status_internal::AsStatus((expr)); !kiln_status.ok()) return kiln_status; \
  } while (false)

// `KILN_ASSIGN_OR_RETURN(auto x, F());` declares x from the StatusOr's value, or returns
// its status from the enclosing function.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_STATUS_CONCAT(kiln_statusor_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(*statusor)
