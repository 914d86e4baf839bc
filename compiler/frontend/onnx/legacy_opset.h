// Legacy rewrites of old models (private to the frontend): what opsets 1 to 8 meant that
// libonnx's version converter does not carry to opset 7, or has no adapter for, or that its
// checker refuses though exporters wrote it and runtimes accept it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx_import {

// One old model's way through the converter: BeforeConverter, libonnx's ConvertVersion to
// opset 7 (for models older than 7), AfterConverter. Errors are the reason with the node,
// op and opset they are about.
class LegacyUpgrade {
 public:
  explicit LegacyUpgrade(int opset) : opset_(opset) {}

  // Rewrites what the converter would get wrong (shapes inferred into value_info beforehand
  // let the rank-dependent rewrites see ranks), and parks the nodes it has no adapter for:
  // each becomes Identity stand-ins, its opset-7 form kept here.
  absl::Status BeforeConverter(onnx::ModelProto& model);
  // Puts the parked nodes back in their opset-7 form and rewrites what the checker refuses.
  absl::Status AfterConverter(onnx::ModelProto& model);

 private:
  int opset_;
  std::map<std::string, std::vector<onnx::NodeProto>> parked_;  // opset-7 forms, by stand-in name
};

}  // namespace kiln::onnx_import
