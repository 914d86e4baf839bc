// Legacy rewrites of old models (private to the frontend): what opsets 1 to 8 meant that
// libonnx's version converter does not carry to opset 7, or that its checker refuses though
// every exporter wrote it and every runtime accepts it.
#pragma once

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx_import {

// Rewrites `model` of default-domain `opset` (below 9) in place so that the version
// converter and the checker take it with its old meaning; shapes inferred into value_info
// beforehand let the rank-dependent rewrites see ranks. An error is the reason with the
// node, op and opset it is about.
absl::Status RewriteLegacyOps(onnx::ModelProto& model, int opset);

}  // namespace kiln::onnx_import
