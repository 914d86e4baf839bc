// Graph -> ONNX ModelProto: writes a graph of standard ONNX ops back out (the QDQ model of
// `kiln quantize`, for other runtimes to run). Constants become initializers; Kiln's own
// ops and attributes (kiln.*) have no ONNX meaning and are refused. Control-flow bodies
// are written back in ONNX's form: a captured value (kCapturedAttr, a body input of Kiln's)
// becomes a read of the enclosing graph's value by its name.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ops.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

// The name each value is written under: its own, or, for a body's captured input, the
// name of the enclosing graph's value it stands for.
using Names = std::map<const Value*, std::string>;

const std::string& NameOf(const Names& names, const Value* value) {
  auto it = names.find(value);
  return it != names.end() ? it->second : value->name();
}

void SetType(onnx::ValueInfoProto* info, const Value* value) {
  info->set_name(value->name());
  auto* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(static_cast<int32_t>(value->type().dtype));
  auto* shape = tensor->mutable_shape();
  for (const Dim& d : value->type().shape) {
    auto* dim = shape->add_dim();
    if (d.known()) {
      dim->set_dim_value(d.size);
    } else if (!d.symbol.empty()) {
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
  }
  return absl::OkStatus();
}

absl::Status ExportGraph(const Graph& graph, size_t num_captured, Names names, onnx::GraphProto* g, int& opset);

// A control-flow body: its own inputs, its captured ones read by the enclosing names.
absl::Status ExportBody(const Node& node, const std::string& key, const Graph& body, const Names& names,
                        onnx::AttributeProto* attr, int& opset) {
  attr->set_name(key);
  attr->set_type(onnx::AttributeProto::GRAPH);
  const size_t captured = node.num_captured();
  if (body.inputs().size() < captured) {
    return absl::InternalError(absl::StrCat(NodeLabel(node), ": subgraph '", key, "' lacks its captured inputs"));
  }
  Names inner = names;
  const size_t first = node.inputs().size() - captured, own = body.inputs().size() - captured;
  for (size_t k = 0; k < captured; ++k) inner[body.inputs()[own + k]] = NameOf(names, node.input(first + k));
  attr->mutable_g()->set_name(key);
  return ExportGraph(body, captured, std::move(inner), attr->mutable_g(), opset);
}

absl::Status ExportNode(const Node& node, const Names& names, onnx::GraphProto* g, int& opset) {
  if (node.op().rfind("kiln.", 0) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(NodeLabel(node), ": a Kiln op has no ONNX form; export before the passes that make it"));
  }
  opset = std::max(opset, node.opset());
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(node.op());
  n->set_name(node.name());
  const size_t own = node.inputs().size() - std::min(node.inputs().size(), node.num_captured());
  for (size_t i = 0; i < own; ++i) n->add_input(node.input(i) != nullptr ? NameOf(names, node.input(i)) : "");
  for (const Value* out : node.outputs()) n->add_output(out->name());
  for (const auto& [key, value] : node.attrs()) {
    if (key == kCapturedAttr) continue;  // the body reads the enclosing values by name
    if (key.rfind("kiln.", 0) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(NodeLabel(node), ": attribute '", key, "' has no ONNX form"));
    }
    if (const auto* body = std::get_if<Subgraph>(&value)) {
      KILN_RETURN_IF_ERROR(ExportBody(node, key, **body, names, n->add_attribute(), opset));
      continue;
    }
    if (auto s = SetAttribute(n->add_attribute(), key, value); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(NodeLabel(node), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

// `graph` into `g`, its last `num_captured` inputs left out (a body's captured values).
absl::Status ExportGraph(const Graph& graph, size_t num_captured, Names names, onnx::GraphProto* g, int& opset) {
  for (size_t i = 0; i + num_captured < graph.inputs().size(); ++i) SetType(g->add_input(), graph.inputs()[i]);
  for (const Value* v : graph.values()) {
    if (!v->is_constant()) continue;
    if (!g->add_initializer()->ParseFromString(SerializeTensorProto(*v->constant(), v->name()))) {
      return absl::InternalError(absl::StrCat("constant '", v->name(), "' does not serialize"));
    }
  }
  for (const Node* node : graph.nodes()) KILN_RETURN_IF_ERROR(ExportNode(*node, names, g, opset));
  for (const Value* out : graph.outputs()) {
    // A body output that is a captured value: ONNX graph outputs are the graph's own.
    if (NameOf(names, out) != out->name() || (num_captured > 0 && graph.IsGraphInput(out))) {
      onnx::NodeProto* copy = g->add_node();
      copy->set_op_type("Identity");
      copy->set_name(graph.name() + "." + out->name() + ".out");
      copy->add_input(NameOf(names, out));
      copy->add_output(out->name() + ".out");
      SetType(g->add_output(), out);
      g->mutable_output()->rbegin()->set_name(out->name() + ".out");
      continue;
    }
    SetType(g->add_output(), out);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ExportOnnxModel(const Graph& graph, const std::string& graph_name) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("kiln");
  int opset = 1;
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name(graph_name);
  KILN_RETURN_IF_ERROR(ExportGraph(graph, 0, {}, g, opset));
  model.add_opset_import()->set_version(opset);
  if (opset > kNewestOnnxCheckedOpset) return model.SerializeAsString();
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the exported model fails the ONNX checker: ", e.what()));
  }
  return model.SerializeAsString();
}

}  // namespace kiln
