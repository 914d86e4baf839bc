// JSON through protobuf's util: see json.h.
#include "kiln/common/json.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace kiln {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, const JsonOptions& options) {
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = options.pretty;
  print.always_print_primitive_fields = options.print_defaults;
  print.preserve_proto_field_names = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, print);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print ", message.GetTypeName(), " as JSON: ", status.message().as_string()));
  }
  if (options.pretty) json += '\n';
  return json;
}

absl::Status FromJson(std::string_view json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(google::protobuf::StringPiece(json.data(), json.size()),
                                                            message, parse);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a valid ", message->GetTypeName(), " in JSON: ", status.message().as_string()));
  }
  return absl::OkStatus();
}

}  // namespace kiln
