// The ONNX frontend: ModelProto bytes -> checked, shape-inferred graph IR.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/ops.h"

namespace kiln {

// The newest opset libonnx 1.12's checker and shape inference know: models (imported or
// exported) of newer opsets skip them, and Kiln's own type inference checks each node.
inline constexpr int kNewestOnnxCheckedOpset = 17;

struct ImportOptions {
  // Used in error messages ("resnet50.onnx: node ...").
  std::string model_label = "model";
  // Overrides for graph input shapes (symbolic dims become static).
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Supplies the bytes of an external-data file named by a tensor's `location`. Unset:
  // external data is refused. Implementations must never reach outside the upload.
  std::function<absl::StatusOr<std::string>(const std::string& location)> external_data;
  // Called once the model's bytes are parsed, when the import reads them no more: a caller
  // whose bytes are a file mapping gives its pages back (MappedFile::ReleaseResidentPages).
  std::function<void()> after_parse;
};

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(std::string_view model_bytes, const ImportOptions& options);

// Every construct of the model Kiln cannot compile, found in one walk that goes on past
// each (kiln compile --check): node-level import errors (domain, attribute, element type,
// unsupported op), then CheckGraph's (type inference, dynamic shapes, kernel lowering).
// An error status only for what stops the whole model: it does not parse, its opset is
// out of range, libonnx's checker rejects it, --input-shape names no input.
absl::StatusOr<std::vector<NodeProblem>> CheckOnnxModel(std::string_view model_bytes, const ImportOptions& options);

// An external-data resolver that reads files inside `directory` only: absolute paths and
// paths that climb out with ".." are refused.
std::function<absl::StatusOr<std::string>(const std::string&)> DirectoryExternalData(std::string directory);

// Graph -> serialized ONNX ModelProto (standard ops only; a kiln.* op or attribute is an
// error), checked by the ONNX checker up to kNewestOnnxCheckedOpset: `kiln quantize` writes
// its QDQ model with it.
absl::StatusOr<std::string> ExportOnnxModel(const Graph& graph, const std::string& graph_name);

// ONNX TensorProto <-> Tensor (the input/output file format of `kiln run`).
absl::StatusOr<Tensor> ParseTensorProto(std::string_view bytes, std::string* name = nullptr);
std::string SerializeTensorProto(const Tensor& tensor, const std::string& name);
// A value of any kind (tensor.h ValueKind) from its file: a TensorProto, a SequenceProto or
// an OptionalProto as `kind` says (value_proto.cc), and back.
absl::StatusOr<Tensor> ParseValueProto(std::string_view bytes, ValueKind kind, std::string* name = nullptr);
std::string SerializeValueProto(const Tensor& value, const std::string& name);

}  // namespace kiln
