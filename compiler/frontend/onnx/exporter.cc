// Graph -> ONNX ModelProto: writes a graph of standard ONNX ops back out (the QDQ model of
// `kiln quantize`, for other runtimes to run). Constants become initializers; Kiln's own
// ops and attributes (kiln.*) have no ONNX meaning and are refused.
#include "absl/strings/str_cat.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ops.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

void SetType(onnx::ValueInfoProto* info, const Value* value) {
  info->set_name(value->name());
  auto* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(static_cast<int32_t>(value->type().dtype));
  auto* shape = tensor->mutable_shape();
  for (const Dim& d : value->type().shape) {
    auto* dim = shape->add_dim();
    if (d.known()) {
      dim->set_dim_value(d.size);
    } else {
      dim->set_dim_param(d.symbol);
    }
  }
}

absl::Status SetAttribute(onnx::AttributeProto* attr, const std::string& name, const AttrValue& value) {
  attr->set_name(name);
  if (const auto* v = std::get_if<int64_t>(&value)) {
    attr->set_type(onnx::AttributeProto::INT);
    attr->set_i(*v);
  } else if (const auto* v = std::get_if<double>(&value)) {
    attr->set_type(onnx::AttributeProto::FLOAT);
    attr->set_f(static_cast<float>(*v));
  } else if (const auto* v = std::get_if<std::string>(&value)) {
    attr->set_type(onnx::AttributeProto::STRING);
    attr->set_s(*v);
  } else if (const auto* v = std::get_if<std::vector<int64_t>>(&value)) {
    attr->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : *v) attr->add_ints(x);
  } else if (const auto* v = std::get_if<std::vector<double>>(&value)) {
    attr->set_type(onnx::AttributeProto::FLOATS);
    for (double x : *v) attr->add_floats(static_cast<float>(x));
  } else if (const auto* v = std::get_if<std::vector<std::string>>(&value)) {
    attr->set_type(onnx::AttributeProto::STRINGS);
    for (const std::string& x : *v) attr->add_strings(x);
  } else if (const auto* v = std::get_if<std::shared_ptr<const Tensor>>(&value)) {
    attr->set_type(onnx::AttributeProto::TENSOR);
    if (!attr->mutable_t()->ParseFromString(SerializeTensorProto(**v, name))) {
      return absl::InternalError(absl::StrCat("attribute '", name, "': tensor does not serialize"));
    }
  } else if (std::holds_alternative<Subgraph>(value)) {
    // Subgraphs hold their captured values as inputs, which ONNX bodies do not have.
    return absl::UnimplementedError(absl::StrCat("attribute '", name, "': subgraphs are not exported"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ExportOnnxModel(const Graph& graph, const std::string& graph_name) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("kiln");
  int opset = 1;
  for (const Node* node : graph.nodes()) opset = std::max(opset, node->opset());
  model.add_opset_import()->set_version(opset);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name(graph_name);
  for (const Value* in : graph.inputs()) SetType(g->add_input(), in);
  for (const Value* out : graph.outputs()) SetType(g->add_output(), out);
  for (const Value* v : graph.values()) {
    if (!v->is_constant()) continue;
    if (!g->add_initializer()->ParseFromString(SerializeTensorProto(*v->constant(), v->name()))) {
      return absl::InternalError(absl::StrCat("constant '", v->name(), "' does not serialize"));
    }
  }
  for (const Node* node : graph.nodes()) {
    if (node->op().rfind("kiln.", 0) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(NodeLabel(*node), ": a Kiln op has no ONNX form; export before the passes that make it"));
    }
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(node->op());
    n->set_name(node->name());
    for (const Value* in : node->inputs()) n->add_input(in != nullptr ? in->name() : "");
    for (const Value* out : node->outputs()) n->add_output(out->name());
    for (const auto& [key, value] : node->attrs()) {
      if (key.rfind("kiln.", 0) == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(NodeLabel(*node), ": attribute '", key, "' has no ONNX form"));
      }
      if (auto s = SetAttribute(n->add_attribute(), key, value); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(NodeLabel(*node), ": ", s.message()));
      }
    }
  }
  if (opset > kNewestOnnxCheckedOpset) return model.SerializeAsString();
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the exported model fails the ONNX checker: ", e.what()));
  }
  return model.SerializeAsString();
}

}  // namespace kiln
