// ONNX import: parse, run the ONNX checker and shape inference, then build the graph IR.
// Multi-input variadic ops (Sum, Mean, Max, Min) are expanded into binary chains and
// Dropout (unless in training mode) into Identity here, so later stages see one form of each.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "expand_ops.h"
#include "kiln/common/file.h"
#include "kiln/common/status.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ops.h"
#include "legacy_opset.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

namespace kiln {
namespace {

constexpr int kMinOpset = 7;
// Older models are upgraded to kMinOpset by libonnx's version converter on import.
constexpr int kOldestUpgradable = 1;
// Models below this opset get the legacy rewrites (legacy_opset.h) first.
constexpr int kLegacyRewritesBefore = 9;
constexpr int kMaxOpset = 21;

// An ONNX element type by name, for errors about the ones Kiln does not compute with
// (float8 and 4-bit types came with opsets 19 and 21).
std::string ElementTypeName(int32_t elem_type) {
  switch (elem_type) {
    case onnx::TensorProto::STRING: return "string";
    case onnx::TensorProto::COMPLEX64: return "complex64";
    case onnx::TensorProto::COMPLEX128: return "complex128";
    case 17: return "float8e4m3fn";
    case 18: return "float8e4m3fnuz";
    case 19: return "float8e5m2";
    case 20: return "float8e5m2fnuz";
    case 21: return "uint4";
    case 22: return "int4";
    case 23: return "float4e2m1";
    default: break;
  }
  const DType dtype = static_cast<DType>(elem_type);
  return DTypeSize(dtype) > 0 ? DTypeName(dtype) : absl::StrCat("ONNX type ", elem_type);
}

// The tensor a TensorProto holds, read straight from the message (no copy of it is
// serialised and parsed again). `external`: the bytes of its external data, where it has some.
absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, std::optional<std::string_view> external);

// Frees an initializer's data (its tensor now owns a copy); name, type and dims stay.
void ReleaseData(onnx::TensorProto& proto) {
  std::string().swap(*proto.mutable_raw_data());  // swap: clear() would keep the capacity
  proto.clear_raw_data();
  proto.clear_float_data();
  proto.clear_double_data();
  proto.clear_int32_data();
  proto.clear_int64_data();
  proto.clear_uint64_data();
}

bool SupportedElementType(int32_t elem_type) { return DTypeSize(static_cast<DType>(elem_type)) > 0; }

// Runs `work` in a child process and returns what it returns: libonnx 1.12 can crash on
// malformed models that pass its checker (the importer fuzzer found a LayerNormalization
// axis that makes shape inference read out of bounds), and a crash there must become an
// error for the user, not take the compiler down. `work` throws std::exception to reject
// the model; the child is a copy of the compiler (fork), so it may change `model` in
// place, which saves copying hundreds of megabytes of weights. The reply on the pipe is
// 'E' and the rejection, or 'K' and the result.
absl::StatusOr<std::string> InChildProcess(onnx::ModelProto& model,
                                           const std::function<std::string(onnx::ModelProto&)>& work, const char* who) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe() failed");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError("fork() failed");
  }
  if (pid == 0) {
    close(fds[0]);
    std::string reply;
    try {
      reply = "K" + work(model);
    } catch (const std::exception& e) {
      reply = absl::StrCat("E", *e.what() != '\0' ? e.what() : "rejected");
    }
    for (size_t done = 0; done < reply.size();) {
      ssize_t n = write(fds[1], reply.data() + done, reply.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string reply;
  std::string buffer(1 << 16, '\0');
  for (ssize_t n; (n = read(fds[0], buffer.data(), buffer.size())) > 0;)
    reply.append(buffer.data(), static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !reply.empty()) {
    if (reply[0] == 'K') return reply.substr(1);
    std::string message = reply.substr(1);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    return absl::InvalidArgumentError(absl::StrCat("rejected by the ", who, ": ", message));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", who, " crashed on this model (",
      WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status)) : absl::StrCat("exit ", WEXITSTATUS(status)),
      "); the model is malformed"));
}

// libonnx's checker and strict shape inference. Kiln's own type inference is
// authoritative afterwards, so nothing needs to come back but the verdict.
absl::Status CheckWithOnnx(onnx::ModelProto& model) {
  auto check = [](onnx::ModelProto& copy) {
    onnx::checker::check_model(copy);
    onnx::ShapeInferenceOptions options{/*check_type=*/true, /*error_mode=*/1, /*enable_data_propagation=*/false};
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(), options);
    return std::string();
  };
  return InChildProcess(model, check, "ONNX checker").status();
}

// `model` replaced by what `work` makes of it in a child process (old models are small, so
// it comes back serialised).
absl::Status RewriteInChildProcess(onnx::ModelProto& model,
                                   const std::function<onnx::ModelProto(onnx::ModelProto&)>& work, const char* who) {
  auto serialised = [&work](onnx::ModelProto& old) { return work(old).SerializeAsString(); };
  KILN_ASSIGN_OR_RETURN(std::string rewritten, InChildProcess(model, serialised, who));
  onnx::ModelProto result;
  if (!result.ParseFromString(rewritten))
    return absl::InternalError(absl::StrCat("the model from the ", who, " does not parse"));
  model = std::move(result);
  return absl::OkStatus();
}

// A model of an opset older than 9, rewritten where its old meaning is not what the version
// converter or the checker takes (legacy_opset.h) and, when older than Kiln reads, upgraded
// to `opset` by libonnx's version converter (the adapters rewrite what changed: broadcast
// attributes, BatchNormalization's is_test, ...). The converter and the rank-dependent
// legacy rewrites need shapes, so shapes are inferred first (as onnx's Python
// convert_version does).
absl::Status UpgradeWithOnnx(onnx::ModelProto& model, int model_opset, int opset) {
  if (model_opset < opset) {
    auto infer = [](onnx::ModelProto& old) {
      onnx::shape_inference::InferShapes(old);
      return old;
    };
    KILN_RETURN_IF_ERROR(RewriteInChildProcess(model, infer, "ONNX shape inference"));
  }
  onnx_import::LegacyUpgrade legacy(model_opset);
  KILN_RETURN_IF_ERROR(legacy.BeforeConverter(model));
  if (model_opset < opset) {
    auto convert = [opset](onnx::ModelProto& old) { return onnx::version_conversion::ConvertVersion(old, opset); };
    KILN_RETURN_IF_ERROR(RewriteInChildProcess(model, convert, "ONNX version converter"));
  }
  return legacy.AfterConverter(model);
}

// A node's name for errors and the IR (unnamed ones by op and position), and the label
// errors about it start with.
std::string NodeName(const onnx::NodeProto& proto, int index) {
  return proto.name().empty() ? absl::StrCat(proto.op_type(), "_", index) : proto.name();
}
std::string NodeWhere(const std::string& name, const std::string& op, int opset) {
  return absl::StrCat("node '", name, "' (", op, ", opset ", opset, ")");
}

// Problems in the model's node order (graph inputs first), whichever stage found them; a
// node the importer expanded ("gn.norm") sorts with the node it came from ("gn").
void SortByNodeOrder(const onnx::GraphProto& graph, std::vector<NodeProblem>& problems) {
  std::map<std::string, int> position;
  for (int i = 0; i < graph.node_size(); ++i) position.emplace(NodeName(graph.node(i), i), i);
  auto key = [&](const NodeProblem& problem) {
    if (problem.op.empty()) return -1;
    for (std::string name = problem.node;;) {
      if (auto it = position.find(name); it != position.end()) return it->second;
      const size_t dot = name.rfind('.');
      if (dot == std::string::npos) return graph.node_size();
      name.resize(dot);
    }
  };
  std::stable_sort(problems.begin(), problems.end(),
                   [&](const NodeProblem& a, const NodeProblem& b) { return key(a) < key(b); });
}

class Importer {
 public:
  // With `problems`, node-level errors are collected there and the import goes on (the
  // graph is then for checking only, CheckGraph's): kiln compile --check.
  Importer(const ImportOptions& options, std::vector<NodeProblem>* problems = nullptr)
      : options_(options), problems_(problems) {}

  absl::StatusOr<std::unique_ptr<Graph>> Run(std::string_view bytes);

 private:
  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat(options_.model_label, ": ", message));
  }
  absl::StatusOr<TensorType> TypeFromValueInfo(const onnx::ValueInfoProto& info);
  absl::StatusOr<Tensor> LoadTensor(const onnx::TensorProto& proto);
  absl::Status ImportNode(const onnx::NodeProto& proto, int index);
  // Each initializer's data moves into the graph: the main graph's proto gives up its copy
  // as soon as the tensor exists, so a model's weights are held twice at most one at a time.
  absl::Status ImportInitializersAndInputs(const onnx::GraphProto& graph, bool main);
  // A node as read, before it becomes IR: its name, "node 'n' (Op, opset k)" for errors,
  // attributes, inputs (nullptr: an optional one left out) and output names.
  struct NodeParts {
    std::string op, name, where;
    std::map<std::string, AttrValue> attrs;
    std::vector<Value*> inputs;
    std::vector<std::string> outputs;
  };
  absl::StatusOr<NodeParts> ReadNode(const onnx::NodeProto& proto, int index);
  absl::Status ImportParts(NodeParts& node);
  // Ops the importer rewrites into others: a Constant becomes a graph constant; Sum, Mean,
  // Max and Min of N inputs become N-1 binary ops; Dropout an Identity.
  absl::Status ImportConstant(const NodeParts& node);
  absl::Status ImportVariadic(const NodeParts& node);
  absl::Status ImportDropout(const NodeParts& node);
  // Min, Max and Mod have no f16 kernels: on f16 operands they run in f32 between Casts,
  // which is exact (the minimum, maximum and fmod of f16 values are f16 values).
  absl::Status ImportInFloat32(const NodeParts& node);
  // Opset 18-21 ops written as others (expand_ops.cc).
  absl::Status ImportExpanded(const NodeParts& node, onnx_import::Expansion expand);
  absl::StatusOr<AttrValue> ConvertAttribute(const onnx::AttributeProto& attr, const std::string& where);
  // The value a name has where the importer is. In a subgraph, a name of an enclosing
  // graph becomes a captured value: an input of this graph (and of each graph between).
  Value* Lookup(const std::string& name) { return LookupAt(scopes_.size() - 1, name); }
  Value* LookupAt(size_t level, const std::string& name);
  // A graph being imported: the main graph, or a subgraph with the outer names it captured
  // (its last inputs, in that order).
  struct Scope {
    Graph* graph = nullptr;
    std::map<std::string, Value*> values;
    std::vector<std::string> captured;
  };
  Scope& scope() { return scopes_.back(); }
  absl::Status ImportGraph(const onnx::GraphProto& graph, bool main);
  // A graph attribute: the subgraph, imported in a scope of its own, and the outer names it
  // captured.
  struct Body {
    std::string attr;
    Subgraph graph;
    std::vector<std::string> captured;
  };
  absl::StatusOr<Body> ImportBody(const onnx::AttributeProto& attr, const std::string& where);
  // Gives every body of a node the same captured inputs (the union, in order) and appends
  // the outer values to the node's inputs.
  absl::Status CaptureForNode(std::vector<Body>& bodies, NodeParts& node);
  Node* Emit(const std::string& op, const std::string& name, std::vector<Value*> inputs,
             const std::vector<std::string>& outputs);

  const ImportOptions& options_;
  std::vector<NodeProblem>* problems_;
  // Initializers and graph inputs of an element type Kiln does not compute with, by name:
  // an error at the node that reads one (it can then name node, op and type).
  std::map<std::string, std::string> unsupported_values_;
  std::unique_ptr<Graph> main_graph_;
  Graph* graph_ = nullptr;  // the graph being imported (the innermost scope's)
  std::vector<Scope> scopes_;
  int opset_ = 0;
};

absl::StatusOr<Tensor> Importer::LoadTensor(const onnx::TensorProto& proto) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& entry : proto.external_data()) {
      if (entry.key() == "location") location = entry.value();
      if (entry.key() == "offset") offset = std::stoll(entry.value());
      if (entry.key() == "length") length = std::stoll(entry.value());
    }
    if (!options_.external_data) {
      return Error(absl::StrCat("tensor '", proto.name(), "' uses external data ('", location,
                                "'), which this import does not accept"));
    }
    auto bytes = options_.external_data(location);
    if (!bytes.ok()) return Error(absl::StrCat("tensor '", proto.name(), "': ", bytes.status().message()));
    if (offset < 0 || offset > static_cast<int64_t>(bytes->size()))
      return Error(absl::StrCat("tensor '", proto.name(), "': external data offset out of range"));
    if (length < 0) length = static_cast<int64_t>(bytes->size()) - offset;
    if (offset + length > static_cast<int64_t>(bytes->size()))
      return Error(absl::StrCat("tensor '", proto.name(), "': external data shorter than declared"));
    auto t = TensorFromProto(proto, std::string_view(*bytes).substr(offset, length));
    if (!t.ok()) return Error(absl::StrCat("tensor '", proto.name(), "': ", t.status().message()));
    return t;
  }
  auto t = TensorFromProto(proto, std::nullopt);
  if (!t.ok()) return Error(absl::StrCat("tensor '", proto.name(), "': ", t.status().message()));
  return t;
}

// A tensor, a sequence of tensors, or an optional of either: the element's dtype and
// shape, with the kind (ir.h). Maps, sparse tensors and nested sequences are refused.
absl::StatusOr<TensorType> TypeFromProto(const onnx::TypeProto& proto) {
  auto unsupported = absl::UnimplementedError(
      "is a map, a sparse tensor or a sequence of non-tensors; Kiln supports tensors, sequences of tensors and "
      "optionals of those");
  if (proto.has_sequence_type()) {
    if (!proto.sequence_type().elem_type().has_tensor_type()) return unsupported;
    KILN_ASSIGN_OR_RETURN(TensorType element, TypeFromProto(proto.sequence_type().elem_type()));
    return element.WithKind(ValueKind::kSequence);
  }
  if (proto.has_optional_type()) {
    KILN_ASSIGN_OR_RETURN(TensorType inner, TypeFromProto(proto.optional_type().elem_type()));
    if (inner.is_optional()) return unsupported;
    return inner.WithKind(inner.kind == ValueKind::kSequence ? ValueKind::kOptionalSequence : ValueKind::kOptional);
  }
  if (!proto.has_tensor_type()) return unsupported;
  const auto& tt = proto.tensor_type();
  TensorType type;
  type.dtype = static_cast<DType>(tt.elem_type());
  if (tt.has_shape()) {
    type.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        type.shape.push_back(Dim::Known(d.dim_value()));
      } else {
        type.shape.push_back(Dim::Symbolic(d.has_dim_param() ? d.dim_param() : "?"));
      }
    }
  }
  return type;
}

absl::StatusOr<TensorType> Importer::TypeFromValueInfo(const onnx::ValueInfoProto& info) {
  absl::StatusOr<TensorType> parsed = TypeFromProto(info.type());
  if (!parsed.ok()) return Error(absl::StrCat("value '", info.name(), "' ", parsed.status().message()));
  if (!info.type().has_tensor_type()) return parsed;
  TensorType type = *std::move(parsed);
  auto it = options_.input_shapes.find(info.name());
  if (it != options_.input_shapes.end() && graph_ == main_graph_.get()) {
    if (type.has_shape && type.shape.size() != it->second.size()) {
      return Error(absl::StrCat("--input-shape for '", info.name(), "' has rank ", it->second.size(),
                                ", the model declares rank ", type.shape.size()));
    }
    for (size_t i = 0; type.has_shape && i < type.shape.size(); ++i) {
      if (type.shape[i].known() && type.shape[i].size != it->second[i]) {
        return Error(absl::StrCat("--input-shape for '", info.name(), "' sets dimension ", i, " to ", it->second[i],
                                  ", the model fixes it at ", type.shape[i].size));
      }
    }
    type = TensorType::Static(type.dtype, it->second);
  }
  return type;
}

absl::StatusOr<AttrValue> Importer::ConvertAttribute(const onnx::AttributeProto& attr, const std::string& where) {
  switch (attr.type()) {
    case onnx::AttributeProto::INT: return AttrValue(static_cast<int64_t>(attr.i()));
    case onnx::AttributeProto::FLOAT: return AttrValue(static_cast<double>(attr.f()));
    case onnx::AttributeProto::STRING: return AttrValue(attr.s());
    case onnx::AttributeProto::INTS: return AttrValue(std::vector<int64_t>(attr.ints().begin(), attr.ints().end()));
    case onnx::AttributeProto::FLOATS: {
      std::vector<double> v(attr.floats().begin(), attr.floats().end());
      return AttrValue(v);
    }
    case onnx::AttributeProto::STRINGS:
      return AttrValue(std::vector<std::string>(attr.strings().begin(), attr.strings().end()));
    case onnx::AttributeProto::TENSOR: {
      if (!SupportedElementType(attr.t().data_type())) {
        return Error(absl::StrCat(where, ": attribute '", attr.name(), "' is a tensor of element type ",
                                  ElementTypeName(attr.t().data_type()), ", which Kiln does not support"));
      }
      auto t = LoadTensor(attr.t());
      if (!t.ok()) return t.status();
      return AttrValue(std::make_shared<const Tensor>(std::move(*t)));
    }
    case onnx::AttributeProto::TYPE_PROTO: {  // Optional's type: kept as its IR text (ParseType reads it)
      auto type = TypeFromProto(attr.tp());
      if (!type.ok()) return Error(absl::StrCat(where, ": attribute '", attr.name(), "' ", type.status().message()));
      return AttrValue(PrintType(*type));
    }
    default:
      return Error(absl::StrCat(where, ": attribute '", attr.name(),
                                "' has a type Kiln does not support (graphs and sparse tensors)"));
  }
}

Node* Importer::Emit(const std::string& op, const std::string& name, std::vector<Value*> inputs,
                     const std::vector<std::string>& outputs) {
  Node* node = graph_->AddNode(op, name, std::move(inputs), outputs, opset_);
  for (size_t i = 0; i < outputs.size(); ++i) scope().values[outputs[i]] = node->output(i);
  return node;
}

absl::StatusOr<Importer::NodeParts> Importer::ReadNode(const onnx::NodeProto& proto, int index) {
  NodeParts node;
  node.op = proto.op_type();
  node.name = NodeName(proto, index);
  node.where = NodeWhere(node.name, proto.op_type(), opset_);
  const std::string& where = node.where;
  if (!proto.domain().empty() && proto.domain() != "ai.onnx") {
    return Error(
        absl::StrCat(where, ": domain '", proto.domain(), "' is not supported (only the default ONNX domain is)"));
  }
  std::vector<Body> bodies;
  for (const auto& attr : proto.attribute()) {
    if (!attr.ref_attr_name().empty()) return Error(absl::StrCat(where, ": attribute references are not supported"));
    if (attr.type() == onnx::AttributeProto::GRAPH) {
      KILN_ASSIGN_OR_RETURN(Body body, ImportBody(attr, where));
      node.attrs[attr.name()] = body.graph;
      bodies.push_back(std::move(body));
      continue;
    }
    auto value = ConvertAttribute(attr, where);
    if (!value.ok()) return value.status();
    node.attrs[attr.name()] = std::move(*value);
    if (node.op == "Cast" && attr.name() == "to" && !SupportedElementType(static_cast<int32_t>(attr.i()))) {
      return Error(absl::StrCat(where, ": cast to element type ", ElementTypeName(static_cast<int32_t>(attr.i())),
                                ", which Kiln does not support"));
    }
  }
  for (const std::string& in : proto.input()) {
    if (in.empty()) {
      node.inputs.push_back(nullptr);
      continue;
    }
    if (auto it = unsupported_values_.find(in); it != unsupported_values_.end())
      return Error(absl::StrCat(where, ": input ", it->second, ", which Kiln does not support"));
    Value* v = Lookup(in);
    if (v == nullptr) return Error(absl::StrCat(where, ": input '", in, "' is not defined before this node"));
    node.inputs.push_back(v);
  }
  // (A node with subgraphs keeps them: the captured values come after its own inputs.)
  while (bodies.empty() && !node.inputs.empty() && node.inputs.back() == nullptr) node.inputs.pop_back();
  if (!bodies.empty()) KILN_RETURN_IF_ERROR(CaptureForNode(bodies, node));
  // Optional outputs left unnamed are dropped from the end; interior ones get a name.
  std::vector<std::string>& outputs = node.outputs;
  outputs.assign(proto.output().begin(), proto.output().end());
  while (!outputs.empty() && outputs.back().empty()) outputs.pop_back();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].empty()) outputs[i] = graph_->UniqueName(absl::StrCat(node.name, ".unused", i));
  }
  return node;
}

Value* Importer::LookupAt(size_t level, const std::string& name) {
  Scope& here = scopes_[level];
  if (auto it = here.values.find(name); it != here.values.end()) return it->second;
  if (level == 0) return nullptr;
  Value* outer = LookupAt(level - 1, name);
  if (outer == nullptr) return nullptr;
  // Its type is the outer value's, set again by type inference from the node's input.
  Value* input = here.graph->AddValue(name, outer->type());
  here.graph->AddInput(input);
  here.values[name] = input;
  here.captured.push_back(name);
  return input;
}

absl::StatusOr<Importer::Body> Importer::ImportBody(const onnx::AttributeProto& attr, const std::string& where) {
  Body body{attr.name(), std::make_shared<Graph>(), {}};
  body.graph->set_opset(opset_);
  body.graph->set_name(attr.g().name().empty() ? attr.name() : attr.g().name());
  Graph* outer_graph = graph_;
  std::vector<NodeProblem>* outer_problems = problems_;
  scopes_.push_back(Scope{body.graph.get(), {}, {}});
  graph_ = body.graph.get();
  problems_ = nullptr;  // a body's problem is its node's: the first one, whole
  absl::Status status = ImportGraph(attr.g(), /*main=*/false);
  body.captured = std::move(scope().captured);
  scopes_.pop_back();
  graph_ = outer_graph;
  problems_ = outer_problems;
  if (!status.ok()) {
    std::string reason(status.message());
    if (absl::StartsWith(reason, options_.model_label + ": ")) reason.erase(0, options_.model_label.size() + 2);
    return absl::Status(status.code(),
                        absl::StrCat(options_.model_label, ": ", where, ": subgraph '", attr.name(), "': ", reason));
  }
  return body;
}

absl::Status Importer::CaptureForNode(std::vector<Body>& bodies, NodeParts& node) {
  std::vector<std::string> all;
  for (const Body& body : bodies) {
    for (const std::string& name : body.captured) {
      if (std::find(all.begin(), all.end(), name) == all.end()) all.push_back(name);
    }
  }
  if (all.empty()) return absl::OkStatus();
  std::vector<Value*> outer;
  for (const std::string& name : all) {
    Value* v = Lookup(name);
    if (v == nullptr) return Error(absl::StrCat(node.where, ": captured value '", name, "' is not defined"));
    outer.push_back(v);
  }
  for (Body& body : bodies) {
    Graph& graph = *body.graph;
    const size_t own = graph.inputs().size() - body.captured.size();
    std::vector<Value*> inputs(graph.inputs().begin(), graph.inputs().begin() + static_cast<std::ptrdiff_t>(own));
    for (size_t k = 0; k < all.size(); ++k) {
      auto it = std::find(body.captured.begin(), body.captured.end(), all[k]);
      if (it != body.captured.end()) {
        inputs.push_back(graph.inputs()[own + static_cast<size_t>(it - body.captured.begin())]);
      } else {  // captured by another body of the node only: an input this one does not read
        inputs.push_back(graph.AddValue(graph.UniqueName(all[k]), outer[k]->type()));
      }
    }
    graph.set_inputs(std::move(inputs));
  }
  node.inputs.insert(node.inputs.end(), outer.begin(), outer.end());
  node.attrs[kCapturedAttr] = static_cast<int64_t>(all.size());
  return absl::OkStatus();
}

absl::Status Importer::ImportConstant(const NodeParts& node) {
  const auto& [op, name, where, attrs, inputs, outputs] = node;
  std::shared_ptr<const Tensor> tensor;
  for (const auto& [key, value] : attrs) {
    if (key == "value") {
      tensor = std::get<std::shared_ptr<const Tensor>>(value);
    } else if (key == "value_float" || key == "value_int") {
      auto t = std::make_shared<Tensor>(key == "value_float" ? DType::kFloat32 : DType::kInt64, std::vector<int64_t>{});
      if (key == "value_float")
        t->data_as<float>()[0] = static_cast<float>(std::get<double>(value));
      else
        t->data_as<int64_t>()[0] = std::get<int64_t>(value);
      tensor = t;
    } else if (key == "value_floats" || key == "value_ints") {
      const bool floats = key == "value_floats";
      const size_t n =
          floats ? std::get<std::vector<double>>(value).size() : std::get<std::vector<int64_t>>(value).size();
      auto t = std::make_shared<Tensor>(floats ? DType::kFloat32 : DType::kInt64,
                                        std::vector<int64_t>{static_cast<int64_t>(n)});
      for (size_t i = 0; i < n; ++i) {
        if (floats)
          t->data_as<float>()[i] = static_cast<float>(std::get<std::vector<double>>(value)[i]);
        else
          t->data_as<int64_t>()[i] = std::get<std::vector<int64_t>>(value)[i];
      }
      tensor = t;
    } else {
      return Error(absl::StrCat(where, ": Constant attribute '", key, "' is not supported"));
    }
  }
  if (tensor == nullptr || outputs.size() != 1)
    return Error(absl::StrCat(where, ": Constant needs one value attribute and one output"));
  scope().values[outputs[0]] = graph_->AddConstant(outputs[0], tensor);
  return absl::OkStatus();
}

absl::Status Importer::ImportVariadic(const NodeParts& node) {
  const auto& [op, name, where, attrs, inputs, outputs] = node;
  if (inputs.empty() || outputs.size() != 1)
    return Error(absl::StrCat(where, ": needs at least one input and one output"));
  const std::string binary = op == "Sum" || op == "Mean" ? "Add" : op;
  Value* acc = inputs[0];
  if (inputs.size() == 1 && op != "Mean") {
    Emit("Identity", name, {acc}, outputs);
    return absl::OkStatus();
  }
  for (size_t i = 1; i < inputs.size(); ++i) {
    const bool last = i + 1 == inputs.size() && op != "Mean";
    std::string out = last ? outputs[0] : graph_->UniqueName(absl::StrCat(name, ".partial"));
    acc = Emit(binary, absl::StrCat(name, inputs.size() > 2 ? absl::StrCat(".", i) : ""), {acc, inputs[i]}, {out})
              ->output(0);
  }
  if (op == "Mean") {
    const DType dtype = inputs[0]->type().dtype;
    auto count = std::make_shared<Tensor>(dtype, std::vector<int64_t>{});
    if (dtype == DType::kFloat64)
      count->data_as<double>()[0] = static_cast<double>(inputs.size());
    else if (dtype == DType::kFloat32)
      count->data_as<float>()[0] = static_cast<float>(inputs.size());
    else
      return Error(absl::StrCat(where, ": Mean needs floating-point inputs"));
    Value* n = graph_->AddConstant(graph_->UniqueName(absl::StrCat(name, ".count")), count);
    Emit("Div", name, {acc, n}, outputs);
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportDropout(const NodeParts& node) {
  const auto& [op, name, where, attrs, inputs, outputs] = node;
  // node.inputs, not the binding: clang 14 (the fuzz build) cannot capture a structured binding.
  auto constant_is = [&node](size_t i, double value) {
    const std::vector<Value*>& in = node.inputs;
    return in.size() > i && in[i] != nullptr && in[i]->is_constant() && in[i]->constant()->GetAsDouble(0) == value;
  };
  const bool training = inputs.size() > 2 && inputs[2] != nullptr && !constant_is(2, 0);
  if (training && !constant_is(1, 0)) {  // decided at run time: the dropout kernel
    Node* dropout = Emit("Dropout", name, inputs, outputs);
    dropout->mutable_attrs() = attrs;
    return absl::OkStatus();
  }
  Emit("Identity", name, {inputs[0]}, {outputs[0]});
  if (outputs.size() > 1) {  // the mask: all true in inference mode
    Value* shape =
        Emit("Shape", name + ".mask_shape", {inputs[0]}, {graph_->UniqueName(name + ".mask_shape")})->output(0);
    Node* fill = Emit("ConstantOfShape", name + ".mask", {shape}, {outputs[1]});
    auto one = std::make_shared<Tensor>(DType::kBool, std::vector<int64_t>{1});
    one->data_as<uint8_t>()[0] = 1;
    fill->mutable_attrs()["value"] = std::shared_ptr<const Tensor>(one);
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportInFloat32(const NodeParts& node) {
  NodeParts wide = node;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] == nullptr) continue;
    const std::string cast_name = absl::StrCat(node.name, ".in", i, ".f32");
    Node* cast = Emit("Cast", cast_name, {node.inputs[i]}, {graph_->UniqueName(cast_name)});
    cast->mutable_attrs()["to"] = static_cast<int64_t>(DType::kFloat32);
    wide.inputs[i] = cast->output(0);
  }
  for (std::string& out : wide.outputs) out = graph_->UniqueName(out + ".f32");
  KILN_RETURN_IF_ERROR(ImportParts(wide));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    Node* cast = Emit("Cast", absl::StrCat(node.name, ".out", i, ".f16"), {Lookup(wide.outputs[i])}, {node.outputs[i]});
    cast->mutable_attrs()["to"] = static_cast<int64_t>(DType::kFloat16);
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportExpanded(const NodeParts& node, onnx_import::Expansion expand) {
  onnx_import::ExpandBuilder builder;
  builder.name = node.name;
  builder.opset = opset_;
  builder.emit = [&](const std::string& op, const std::string& suffix, std::vector<Value*> inputs,
                     std::map<std::string, AttrValue> attrs, const std::string& output) {
    const std::string name = suffix.empty() ? node.name : absl::StrCat(node.name, ".", suffix);
    Node* emitted = Emit(op, name, std::move(inputs), {output.empty() ? graph_->UniqueName(name) : output});
    emitted->mutable_attrs() = std::move(attrs);
    return emitted->output(0);
  };
  builder.constant = [&](std::shared_ptr<const Tensor> tensor) {
    return graph_->AddConstant(graph_->UniqueName(node.name + ".const"), std::move(tensor));
  };
  if (absl::Status s = expand(builder, node.attrs, node.inputs, node.outputs); !s.ok())
    return Error(absl::StrCat(node.where, ": ", s.message()));
  return absl::OkStatus();
}

absl::Status Importer::ImportParts(NodeParts& node) {
  const std::string& op = node.op;
  if ((op == "Min" || op == "Max" || op == "Mod") && !node.inputs.empty() && node.inputs[0] != nullptr &&
      node.inputs[0]->type().dtype == DType::kFloat16) {
    return ImportInFloat32(node);
  }
  if (op == "Constant") return ImportConstant(node);
  if (op == "Sum" || op == "Mean" || op == "Max" || op == "Min") return ImportVariadic(node);
  if (op == "Dropout") return ImportDropout(node);
  if (onnx_import::Expansion expand = onnx_import::FindExpansion(op, opset_)) return ImportExpanded(node, expand);
  if (FindOp(op) == nullptr && problems_ == nullptr) {  // when checking, CheckGraph lists it
    return absl::UnimplementedError(
        absl::StrCat(options_.model_label, ": ", node.where, ": op '", op, "' is not supported by Kiln"));
  }
  Node* emitted = Emit(op, node.name, node.inputs, node.outputs);
  emitted->mutable_attrs() = std::move(node.attrs);
  return absl::OkStatus();
}

absl::Status Importer::ImportNode(const onnx::NodeProto& proto, int index) {
  absl::StatusOr<NodeParts> node = ReadNode(proto, index);
  absl::Status status = node.ok() ? ImportParts(*node) : node.status();
  if (status.ok() || problems_ == nullptr) return status;
  // Collected: the reason less the model's and the node's labels. The node's outputs become
  // untyped values, so the nodes reading them import and CheckGraph skips them.
  const std::string name = NodeName(proto, index);
  std::string reason(status.message());
  for (const std::string& prefix : {options_.model_label + ": ", NodeWhere(name, proto.op_type(), opset_) + ": "}) {
    if (absl::StartsWith(reason, prefix)) reason.erase(0, prefix.size());
  }
  problems_->push_back({name, proto.op_type(), opset_, reason});
  for (const std::string& out : proto.output()) {
    if (!out.empty()) scope().values[out] = graph_->AddValue(graph_->UniqueName(out), TensorType{});
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportInitializersAndInputs(const onnx::GraphProto& graph, bool main) {
  for (const auto& init : graph.initializer()) {
    if (!SupportedElementType(init.data_type())) {
      unsupported_values_[init.name()] =
          absl::StrCat("'", init.name(), "' is an initializer of element type ", ElementTypeName(init.data_type()));
      continue;
    }
    auto tensor = LoadTensor(init);
    if (!tensor.ok()) return tensor.status();
    scope().values[init.name()] = graph_->AddConstant(init.name(), std::make_shared<const Tensor>(std::move(*tensor)));
    // The importer owns the main graph's proto (ImportOnnxModel holds the model mutable).
    if (main) ReleaseData(const_cast<onnx::TensorProto&>(init));
  }
  for (const auto& input : graph.input()) {
    if (scope().values.count(input.name()) || unsupported_values_.count(input.name())) continue;  // an initializer
    const int32_t elem_type = input.type().tensor_type().elem_type();
    if (input.type().has_tensor_type() && !SupportedElementType(elem_type) && (main || elem_type != 0)) {
      unsupported_values_[input.name()] =
          absl::StrCat("'", input.name(), "' is a graph input of element type ", ElementTypeName(elem_type));
      continue;
    }
    // A subgraph's inputs may leave their types out (inference takes them from the node).
    const bool untyped = !input.type().has_tensor_type() && input.type().value_case() == onnx::TypeProto::VALUE_NOT_SET;
    auto type = !main && untyped ? absl::StatusOr<TensorType>(TensorType{}) : TypeFromValueInfo(input);
    if (!type.ok()) return type.status();
    Value* v = graph_->AddValue(input.name(), *type);
    graph_->AddInput(v);
    scope().values[input.name()] = v;
  }
  for (const auto& name_shape : options_.input_shapes) {
    if (!main) break;
    if (!graph_->IsGraphInput(Lookup(name_shape.first))) {
      return Error(absl::StrCat("--input-shape names '", name_shape.first, "', which is not a graph input"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Graph>> Importer::Run(std::string_view bytes) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Error("not a valid ONNX model (the protobuf could not be parsed)");
  }
  if (options_.after_parse) options_.after_parse();
  opset_ = 0;
  for (const auto& import : model.opset_import()) {
    if (import.domain().empty() || import.domain() == "ai.onnx") opset_ = static_cast<int>(import.version());
  }
  if (model.opset_import_size() == 0) opset_ = 1;  // IR version 1 models
  if (opset_ >= kOldestUpgradable && opset_ < kLegacyRewritesBefore) {
    if (absl::Status s = UpgradeWithOnnx(model, opset_, kMinOpset); !s.ok()) {
      if (absl::StartsWith(s.message(), "node '")) return Error(std::string(s.message()));
      return Error(absl::StrCat("opset ", opset_, " could not be upgraded to ", kMinOpset, ": ", s.message()));
    }
    opset_ = std::max(opset_, kMinOpset);
  }
  if (opset_ < kMinOpset || opset_ > kMaxOpset) {
    return Error(absl::StrCat("opset ", opset_, " of the default domain is not supported (Kiln supports ", kMinOpset,
                              " to ", kMaxOpset, ")"));
  }
  for (const auto& input : model.graph().input()) {
    auto it = options_.input_shapes.find(input.name());
    if (it == options_.input_shapes.end() || !input.type().has_tensor_type()) continue;
    auto* shape = model.mutable_graph()
                      ->mutable_input(&input - &model.graph().input(0))
                      ->mutable_type()
                      ->mutable_tensor_type()
                      ->mutable_shape();
    shape->clear_dim();
    for (int64_t d : it->second) shape->add_dim()->set_dim_value(d);
  }
  if (opset_ <= kNewestOnnxCheckedOpset) {
    if (absl::Status s = CheckWithOnnx(model); !s.ok()) return Error(std::string(s.message()));
  }

  main_graph_ = std::make_unique<Graph>();
  graph_ = main_graph_.get();
  graph_->set_opset(opset_);
  graph_->set_name(model.graph().name().empty() ? "main" : model.graph().name());
  scopes_.assign(1, Scope{graph_, {}, {}});
  KILN_RETURN_IF_ERROR(ImportGraph(model.graph(), /*main=*/true));
  if (problems_ != nullptr) {
    for (NodeProblem& problem : CheckGraph(*graph_)) problems_->push_back(std::move(problem));
    SortByNodeOrder(model.graph(), *problems_);
    return std::move(main_graph_);
  }
  if (auto s = InferTypes(*graph_); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(options_.model_label, ": ", s.message()));
  }
  if (auto s = VerifyGraph(*graph_); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(options_.model_label, ": ", s.message()));
  }
  return std::move(main_graph_);
}

absl::Status Importer::ImportGraph(const onnx::GraphProto& graph, bool main) {
  KILN_RETURN_IF_ERROR(ImportInitializersAndInputs(graph, main));
  int index = 0;
  for (const auto& node : graph.node()) {
    if (auto s = ImportNode(node, index++); !s.ok()) return s;
  }
  for (const auto& output : graph.output()) {
    if (auto it = unsupported_values_.find(output.name()); it != unsupported_values_.end())
      return Error(absl::StrCat("graph output: ", it->second, ", which Kiln does not support"));
    Value* v = Lookup(output.name());
    if (v == nullptr) return Error(absl::StrCat("graph output '", output.name(), "' is never produced"));
    graph_->AddOutput(v);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(std::string_view model_bytes, const ImportOptions& options) {
  Importer importer(options);
  return importer.Run(model_bytes);
}

absl::StatusOr<std::vector<NodeProblem>> CheckOnnxModel(std::string_view model_bytes, const ImportOptions& options) {
  std::vector<NodeProblem> problems;
  Importer importer(options, &problems);
  KILN_RETURN_IF_ERROR(importer.Run(model_bytes).status());
  return problems;
}

std::function<absl::StatusOr<std::string>(const std::string&)> DirectoryExternalData(std::string directory) {
  return [directory](const std::string& location) -> absl::StatusOr<std::string> {
    if (location.empty() || location[0] == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("external data location '", location, "' must be a relative path"));
    }
    for (absl::string_view part : absl::StrSplit(location, '/')) {
      if (part == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat("external data location '", location, "' leaves the model's directory"));
      }
    }
    return ReadFile(directory + "/" + location);
  };
}

absl::StatusOr<Tensor> ParseTensorProto(std::string_view bytes, std::string* name) {
  onnx::TensorProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("not a valid ONNX TensorProto");
  }
  if (name != nullptr) *name = proto.name();
  return TensorFromProto(proto, std::nullopt);
}

namespace {

// int4 / uint4: ONNX packs two per byte, low nibble first (raw_data, or int32_data holding
// one packed byte each); Kiln holds one per byte, an int4 sign-extended (tensor.h).
absl::StatusOr<Tensor> UnpackInt4(const onnx::TensorProto& proto, std::optional<std::string_view> external,
                                  Tensor tensor) {
  const int64_t n = tensor.num_elements(), bytes = (n + 1) / 2;
  std::string packed;
  if (external || proto.has_raw_data()) {
    packed = std::string(external ? *external : std::string_view(proto.raw_data()));
  } else {
    for (int32_t v : proto.int32_data()) packed.push_back(static_cast<char>(v));
  }
  if (static_cast<int64_t>(packed.size()) != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(DTypeName(tensor.dtype()), " tensor has ", packed.size(),
                                                   " packed bytes, dims [", absl::StrJoin(tensor.dims(), ","),
                                                   "] need ", bytes));
  }
  const bool is_signed = tensor.dtype() == DType::kInt4;
  for (int64_t i = 0; i < n; ++i) {
    const int nibble = (static_cast<uint8_t>(packed[static_cast<size_t>(i / 2)]) >> (i % 2 * 4)) & 0xf;
    tensor.data_as<uint8_t>()[i] = static_cast<uint8_t>(is_signed && nibble >= 8 ? nibble - 16 : nibble);
  }
  return tensor;
}

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, std::optional<std::string_view> external) {
  const DType dtype = static_cast<DType>(proto.data_type());
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor element type ", ElementTypeName(proto.data_type()), " is not supported"));
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL && !external) {
    return absl::InvalidArgumentError("tensor uses external data");
  }
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor has negative dimension ", d));
  }
  Tensor tensor(dtype, dims);
  const int64_t n = tensor.num_elements();
  if (dtype == DType::kString) {  // always in string_data (raw_data cannot hold strings)
    if (proto.string_data_size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("string tensor has ", proto.string_data_size(), " values, dims [",
                                                     absl::StrJoin(dims, ","), "] need ", n));
    }
    for (int64_t i = 0; i < n; ++i) tensor.SetString(i, proto.string_data(static_cast<int>(i)));
    return tensor;
  }
  const bool packed = dtype == DType::kInt4 || dtype == DType::kUInt4;
  if (packed) return UnpackInt4(proto, external, std::move(tensor));
  if (external || proto.has_raw_data()) {
    const std::string_view raw = external ? *external : std::string_view(proto.raw_data());
    if (static_cast<int64_t>(raw.size()) != tensor.size_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor raw_data has ", raw.size(), " bytes, dims [",
                                                     absl::StrJoin(dims, ","), "] need ", tensor.size_bytes()));
    }
    if (!raw.empty()) std::memcpy(tensor.data(), raw.data(), raw.size());
    return tensor;
  }
  auto check = [&](int64_t have) -> absl::Status {
    if (have != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor has ", have, " values, dims [", absl::StrJoin(dims, ","), "] need ", n));
    }
    return absl::OkStatus();
  };
  switch (dtype) {
    case DType::kFloat32:
      if (auto s = check(proto.float_data_size()); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) tensor.data_as<float>()[i] = proto.float_data(i);
      break;
    case DType::kFloat64:
      if (auto s = check(proto.double_data_size()); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) tensor.data_as<double>()[i] = proto.double_data(i);
      break;
    case DType::kInt64:
      if (auto s = check(proto.int64_data_size()); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) tensor.data_as<int64_t>()[i] = proto.int64_data(i);
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      if (auto s = check(proto.uint64_data_size()); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) {
        if (dtype == DType::kUInt32)
          tensor.data_as<uint32_t>()[i] = static_cast<uint32_t>(proto.uint64_data(i));
        else
          tensor.data_as<uint64_t>()[i] = proto.uint64_data(i);
      }
      break;
    default: {  // int32_data carries int32, int16, int8, uint16, uint8, bool, f16, bf16
      if (auto s = check(proto.int32_data_size()); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = proto.int32_data(i);
        switch (DTypeSize(dtype)) {
          case 1: tensor.data_as<uint8_t>()[i] = static_cast<uint8_t>(v); break;
          case 2: tensor.data_as<uint16_t>()[i] = static_cast<uint16_t>(v); break;
          default: tensor.data_as<int32_t>()[i] = v; break;
        }
      }
    }
  }
  return tensor;
}

}  // namespace

std::string SerializeTensorProto(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.dims()) proto.add_dims(d);
  if (tensor.dtype() == DType::kString) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) proto.add_string_data(std::string(tensor.GetString(i)));
    return proto.SerializeAsString();
  }
  if (tensor.dtype() == DType::kInt4 || tensor.dtype() == DType::kUInt4) {  // two per byte, low nibble first
    std::string packed(static_cast<size_t>((tensor.num_elements() + 1) / 2), '\0');
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      packed[static_cast<size_t>(i / 2)] |= static_cast<char>((tensor.data_as<uint8_t>()[i] & 0xf) << (i % 2 * 4));
    }
    proto.set_raw_data(std::move(packed));
    return proto.SerializeAsString();
  }
  proto.set_raw_data(std::string(static_cast<const char*>(tensor.data()), tensor.size_bytes()));
  return proto.SerializeAsString();
}

}  // namespace kiln
