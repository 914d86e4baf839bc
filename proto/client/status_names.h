// gRPC status code names as the API documents them ("INVALID_ARGUMENT"), for metrics
// labels on the server and error messages in clients.
#pragma once

#include "grpcpp/support/status.h"

namespace kiln::client {

inline const char* StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  return index >= 0 && index <= 16 ? kNames[index] : "UNKNOWN";
}

}  // namespace kiln::client
