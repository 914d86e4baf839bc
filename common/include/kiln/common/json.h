// JSON only through protobuf's printer and parser: reports, manifests and the CLI's --json
// output are protobuf messages. Field names stay as written in the .proto (snake_case);
// fields at their default value are printed too, so readers always find every key.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace kiln {

struct JsonOptions {
  bool pretty = true;          // indented, one field per line, and a final newline
  bool print_defaults = true;  // zero/empty fields are printed, not omitted
};

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, const JsonOptions& options = {});
// Unknown fields are an error (the message names the field), so a typo is not ignored.
absl::Status FromJson(std::string_view json, google::protobuf::Message* message);

}  // namespace kiln
