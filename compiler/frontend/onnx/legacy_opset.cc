// Legacy rewrites of models older than opset 9, each named for the meaning it keeps. A node
// that libonnx's version converter would get wrong or has no adapter for is parked: it
// becomes Identity stand-ins (one per output, reading its first input) that the converter
// carries through, and after the converter the stand-ins are replaced by its opset-7 form:
//
//   LegacyBroadcastAxis (opset < 7):
//     Add[broadcast=1, axis=a](A[rank r], B[rank k])  =>  Add(A, Unsqueeze[axes=k..r-a-1](B))
//     (Sub, Mul, Div, Pow and the logical and comparison ops alike; the converter asserts
//     on axis broadcasts that are not suffixes)
//   LegacyPerChannelPRelu (opset < 7):
//     PRelu(X[N,C,d...], slope[C])  =>  PRelu(X, Unsqueeze[axes=1..r-2](slope))
//     (a slope of [C] applies to axis 1 before opset 7, to the last axis after)
//   LegacyBatchNormPerActivation (opset < 9):
//     BatchNormalization[spatial=0](X, s, b, m, v)  =>  (X - m) * (s / Sqrt(v + eps)) + b
//     (statistics of shape [C, D...], one per activation; Kiln's BatchNormalization is
//     per channel)
//   LegacyCastTypeName (opset < 6):   Cast[to="FLOAT"]  =>  Cast[to=1]
//   LegacyReshapeShapeAttribute (opset < 5):  Reshape[shape=s](x)  =>  Reshape(x, Constant s)
//     (the converter's adapter writes the constant without its dims)
//   LegacyPadPaddings (opset < 2):    Pad[paddings=p]   =>  Pad[pads=p]
//   LegacySplitInput (opset < 2):     Split(x, constant s)  =>  Split[split=s](x)
//   LegacyLpPoolFloatP (opset < 2):   LpPool[p=2.0]     =>  LpPool[p=2] (GlobalLpPool alike)
//   LegacyRecurrentOutputSequence (opset < 7): GRU/LSTM/RNN less output_sequence (Y is an
//     optional output from opset 7)
//   LegacyConstantTypes (opset < 9, after the converter):
//     %c = Constant[value=int64 tensor]()  =>  initializer %c (a graph input too before IR 4)
//     (Constant-1 lists only float types; exporters wrote integer shapes and repeats with
//     it all the same, and the checker refuses them)
#include "legacy_opset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::onnx_import {
namespace {

using Nodes = std::vector<onnx::NodeProto>;

// What a rewrite sees of the model beside the node.
struct LegacyContext {
  const onnx::GraphProto& graph;
  int opset;
  std::map<std::string, int> ranks;  // of values whose shape the model states or inference found
  std::string where;                 // "node 'n' (Op, opset k)"
};

std::map<std::string, int> KnownRanks(const onnx::GraphProto& graph) {
  std::map<std::string, int> ranks;
  for (const auto& init : graph.initializer()) ranks[init.name()] = init.dims_size();
  for (const auto* infos : {&graph.input(), &graph.value_info(), &graph.output()}) {
    for (const auto& info : *infos) {
      if (info.type().has_tensor_type() && info.type().tensor_type().has_shape())
        ranks.emplace(info.name(), info.type().tensor_type().shape().dim_size());
    }
  }
  return ranks;
}

std::optional<int> RankOf(const LegacyContext& context, const std::string& name) {
  auto it = context.ranks.find(name);
  return it == context.ranks.end() ? std::nullopt : std::optional<int>(it->second);
}

// The length of a rank-1 value when the model states it (0 when it does not).
int64_t RankOneLength(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& init : graph.initializer()) {
    if (init.name() == name) return init.dims_size() == 1 ? init.dims(0) : 0;
  }
  for (const auto* infos : {&graph.input(), &graph.value_info()}) {
    for (const auto& info : *infos) {
      if (info.name() != name || !info.type().tensor_type().has_shape()) continue;
      const auto& shape = info.type().tensor_type().shape();
      return shape.dim_size() == 1 && shape.dim(0).has_dim_value() ? shape.dim(0).dim_value() : 0;
    }
  }
  return 0;
}

// The value of a constant (an initializer or a Constant node's output), or null.
const onnx::TensorProto* ConstantValue(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& init : graph.initializer()) {
    if (init.name() == name) return &init;
  }
  for (const auto& node : graph.node()) {
    if (node.op_type() == "Constant" && node.output_size() == 1 && node.output(0) == name) {
      for (const auto& attr : node.attribute()) {
        if (attr.name() == "value" && attr.has_t()) return &attr.t();
      }
    }
  }
  return nullptr;
}

const onnx::AttributeProto* FindAttr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name) return &attr;
  }
  return nullptr;
}

void RemoveAttrs(onnx::NodeProto& node, std::initializer_list<const char*> names) {
  auto* attrs = node.mutable_attribute();
  attrs->erase(std::remove_if(attrs->begin(), attrs->end(),
                              [&](const onnx::AttributeProto& attr) {
                                return std::find(names.begin(), names.end(), attr.name()) != names.end();
                              }),
               attrs->end());
}

onnx::AttributeProto* AddAttr(onnx::NodeProto& node, const std::string& name,
                              onnx::AttributeProto::AttributeType type) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(type);
  return attr;
}

onnx::NodeProto MakeNode(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                         std::string output) {
  onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name(name);
  for (std::string& input : inputs) node.add_input(std::move(input));
  node.add_output(std::move(output));
  return node;
}

std::string BaseName(const onnx::NodeProto& node, int index) {
  return node.name().empty() ? absl::StrCat(node.op_type(), "_", index) : node.name();
}

// `input` of `node` as an Unsqueeze of it (a new node in `out`).
void UnsqueezeInput(onnx::NodeProto& node, int input, std::vector<int64_t> axes, const std::string& suffix,
                    Nodes& out) {
  const std::string name = absl::StrCat(node.name(), "_", suffix);
  onnx::NodeProto unsqueeze = MakeNode("Unsqueeze", name, {node.input(input)}, name);
  auto* attr = AddAttr(unsqueeze, "axes", onnx::AttributeProto::INTS);
  for (int64_t axis : axes) attr->add_ints(axis);
  node.set_input(input, name);
  out.push_back(std::move(unsqueeze));
}

absl::Status LegacyBroadcastAxis(onnx::NodeProto node, const LegacyContext& context, Nodes& out) {
  const onnx::AttributeProto* broadcast = FindAttr(node, "broadcast");
  const onnx::AttributeProto* axis_attr = FindAttr(node, "axis");
  if (broadcast == nullptr || broadcast->i() == 0 || axis_attr == nullptr) return absl::OkStatus();
  int64_t axis = axis_attr->i();
  std::optional<int> rank_a = RankOf(context, node.input(0)), rank_b = RankOf(context, node.input(1));
  if (!rank_a || !rank_b) {
    return absl::InvalidArgumentError(
        absl::StrCat(context.where, ": a broadcast along axis ", axis,
                     " needs the ranks of both inputs, and shape inference did not find them; state the input shapes"));
  }
  if (axis < 0) axis += *rank_a;
  if (axis < 0 || axis + *rank_b > *rank_a) {
    return absl::InvalidArgumentError(absl::StrCat(context.where, ": axis ", axis_attr->i(),
                                                   " places an input of rank ", *rank_b, " outside one of rank ",
                                                   *rank_a));
  }
  RemoveAttrs(node, {"broadcast", "axis", "consumed_inputs"});
  std::vector<int64_t> axes;
  for (int64_t a = *rank_b; a < *rank_a - axis; ++a) axes.push_back(a);
  if (!axes.empty()) UnsqueezeInput(node, 1, axes, "broadcast_axis", out);
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status LegacyPerChannelPRelu(onnx::NodeProto node, const LegacyContext& context, Nodes& out) {
  RemoveAttrs(node, {"consumed_inputs"});
  std::optional<int> x_rank = RankOf(context, node.input(0)), slope_rank = RankOf(context, node.input(1));
  const int64_t channels = RankOneLength(context.graph, node.input(1));
  const bool per_channel = (!slope_rank || *slope_rank == 1) && channels != 1 && (!x_rank || *x_rank > 2);
  if (per_channel && (!x_rank || !slope_rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context.where,
                     ": the slope applies per channel (axis 1) before opset 7, and the rank of X or of the slope "
                     "is not known, so it cannot be rewritten for opset 7's broadcasting; state the input shapes"));
  }
  if (!per_channel) return absl::OkStatus();
  std::vector<int64_t> axes;
  for (int64_t a = 1; a + 1 < *x_rank; ++a) axes.push_back(a);
  UnsqueezeInput(node, 1, axes, "slope_per_channel", out);
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status LegacyBatchNormPerActivation(onnx::NodeProto node, const LegacyContext& context, Nodes& out) {
  const onnx::AttributeProto* spatial = FindAttr(node, "spatial");
  if (spatial == nullptr || spatial->i() != 0) return absl::OkStatus();
  for (int i = 1; i < node.output_size(); ++i) {
    if (!node.output(i).empty())
      return absl::InvalidArgumentError(absl::StrCat(context.where,
                                                     ": spatial=0 (statistics per activation) is imported for "
                                                     "inference only, and output ",
                                                     i, " (training statistics) is used"));
  }
  const onnx::AttributeProto* epsilon = FindAttr(node, "epsilon");
  const std::string& base = node.name();
  onnx::NodeProto eps = MakeNode("Constant", base + "_epsilon", {}, base + "_epsilon");
  onnx::TensorProto* value = AddAttr(eps, "value", onnx::AttributeProto::TENSOR)->mutable_t();
  value->set_data_type(onnx::TensorProto::FLOAT);
  value->add_float_data(epsilon != nullptr ? epsilon->f() : 1e-5f);
  out.push_back(std::move(eps));
  out.push_back(MakeNode("Add", base + "_var_eps", {node.input(4), base + "_epsilon"}, base + "_var_eps"));
  out.push_back(MakeNode("Sqrt", base + "_stddev", {base + "_var_eps"}, base + "_stddev"));
  out.push_back(MakeNode("Div", base + "_factor", {node.input(1), base + "_stddev"}, base + "_factor"));
  out.push_back(MakeNode("Sub", base + "_centred", {node.input(0), node.input(3)}, base + "_centred"));
  out.push_back(MakeNode("Mul", base + "_scaled", {base + "_centred", base + "_factor"}, base + "_scaled"));
  out.push_back(MakeNode("Add", base, {base + "_scaled", node.input(2)}, node.output(0)));
  return absl::OkStatus();
}

absl::Status LegacyCastTypeName(onnx::NodeProto node, const LegacyContext& context, Nodes& out) {
  const onnx::AttributeProto* to = FindAttr(node, "to");
  if (to == nullptr || to->type() != onnx::AttributeProto::STRING) return absl::OkStatus();
  {
    std::string type_name = to->s();
    std::transform(type_name.begin(), type_name.end(), type_name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    onnx::TensorProto::DataType type;
    if (!onnx::TensorProto::DataType_Parse(type_name, &type)) {
      return absl::InvalidArgumentError(absl::StrCat(context.where, ": 'to' names no ONNX type: \"", to->s(), "\""));
    }
    RemoveAttrs(node, {"to"});
    AddAttr(node, "to", onnx::AttributeProto::INT)->set_i(type);
  }
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status LegacyPadPaddings(onnx::NodeProto node, const LegacyContext& /*context*/, Nodes& out) {
  for (auto& attr : *node.mutable_attribute()) {
    if (attr.name() == "paddings") attr.set_name("pads");
  }
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status LegacyReshapeShapeAttribute(onnx::NodeProto node, const LegacyContext& /*context*/, Nodes& out) {
  const onnx::AttributeProto* shape = FindAttr(node, "shape");
  if (shape == nullptr) return absl::OkStatus();
  const std::string name = node.name() + "_shape";
  onnx::NodeProto constant = MakeNode("Constant", name, {}, name);
  onnx::TensorProto* value = AddAttr(constant, "value", onnx::AttributeProto::TENSOR)->mutable_t();
  value->set_data_type(onnx::TensorProto::INT64);
  value->add_dims(shape->ints_size());
  for (int64_t d : shape->ints()) value->add_int64_data(d);
  RemoveAttrs(node, {"shape", "consumed_inputs"});
  node.mutable_input()->DeleteSubrange(1, node.input_size() - 1);
  node.add_input(name);
  out.push_back(std::move(constant));
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status LegacySplitInput(onnx::NodeProto node, const LegacyContext& context, Nodes& out) {
  if (node.input_size() > 1 && !node.input(1).empty()) {
    const onnx::TensorProto* split = ConstantValue(context.graph, node.input(1));
    if (split == nullptr || split->data_type() != onnx::TensorProto::INT64) {
      return absl::InvalidArgumentError(absl::StrCat(
          context.where, ": the split input must be a constant int64 tensor (from opset 2 it is an attribute)"));
    }
    RemoveAttrs(node, {"split"});
    auto* attr = AddAttr(node, "split", onnx::AttributeProto::INTS);
    for (int64_t length : split->int64_data()) attr->add_ints(length);
    for (size_t at = 0; at + sizeof(int64_t) <= split->raw_data().size(); at += sizeof(int64_t)) {
      int64_t length = 0;  // raw data is little-endian, as the host
      std::memcpy(&length, split->raw_data().data() + at, sizeof(length));
      attr->add_ints(length);
    }
    node.mutable_input()->DeleteSubrange(1, node.input_size() - 1);
  }
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status LegacyLpPoolFloatP(onnx::NodeProto node, const LegacyContext& context, Nodes& out) {
  const onnx::AttributeProto* p = FindAttr(node, "p");
  if (p == nullptr || p->type() != onnx::AttributeProto::FLOAT) return absl::OkStatus();
  {
    const float value = p->f();
    if (value != std::round(value) || value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(context.where, ": p = ", value, " is not a whole number, which LpPool takes from opset 2"));
    }
    RemoveAttrs(node, {"p"});
    AddAttr(node, "p", onnx::AttributeProto::INT)->set_i(static_cast<int64_t>(value));
  }
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status LegacyRecurrentOutputSequence(onnx::NodeProto node, const LegacyContext& /*context*/, Nodes& out) {
  RemoveAttrs(node, {"output_sequence"});
  out.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status RefuseTileOfAxis(onnx::NodeProto /*node*/, const LegacyContext& context, Nodes& /*out*/) {
  return absl::UnimplementedError(absl::StrCat(
      context.where, ": Tile before opset 6 (tiles and axis inputs) is not supported; re-export at opset 6 or later"));
}

struct LegacyRewrite {
  const char* op;
  int before_opset;  // applies to models of opsets below this
  absl::Status (*rewrite)(onnx::NodeProto node, const LegacyContext& context, Nodes& out);
};

const LegacyRewrite kLegacyRewrites[] = {
    {"Add", 7, LegacyBroadcastAxis},
    {"And", 7, LegacyBroadcastAxis},
    {"BatchNormalization", 9, LegacyBatchNormPerActivation},
    {"Cast", 6, LegacyCastTypeName},
    {"Div", 7, LegacyBroadcastAxis},
    {"Equal", 7, LegacyBroadcastAxis},
    {"GRU", 7, LegacyRecurrentOutputSequence},
    {"GlobalLpPool", 2, LegacyLpPoolFloatP},
    {"Greater", 7, LegacyBroadcastAxis},
    {"LSTM", 7, LegacyRecurrentOutputSequence},
    {"Less", 7, LegacyBroadcastAxis},
    {"LpPool", 2, LegacyLpPoolFloatP},
    {"Mul", 7, LegacyBroadcastAxis},
    {"Or", 7, LegacyBroadcastAxis},
    {"PRelu", 7, LegacyPerChannelPRelu},
    {"Pad", 2, LegacyPadPaddings},
    {"Pow", 7, LegacyBroadcastAxis},
    {"RNN", 7, LegacyRecurrentOutputSequence},
    {"Reshape", 5, LegacyReshapeShapeAttribute},
    {"Split", 2, LegacySplitInput},
    {"Sub", 7, LegacyBroadcastAxis},
    {"Tile", 6, RefuseTileOfAxis},
    {"Xor", 7, LegacyBroadcastAxis},
};

const LegacyRewrite* FindLegacyRewrite(const std::string& op, int opset) {
  for (const LegacyRewrite& rewrite : kLegacyRewrites) {
    if (op == rewrite.op && opset < rewrite.before_opset) return &rewrite;
  }
  return nullptr;
}

constexpr char kStandInPrefix[] = "kiln.legacy.parked.";

bool ConstantTypeBeforeOpset9(int32_t elem_type) {
  return elem_type == onnx::TensorProto::FLOAT || elem_type == onnx::TensorProto::FLOAT16 ||
         elem_type == onnx::TensorProto::DOUBLE;
}

// LegacyConstantTypes: a Constant of a type Constant-1 does not list becomes an initializer.
bool ConstantToInitializer(onnx::ModelProto& model, const onnx::NodeProto& node) {
  const bool moves = node.op_type() == "Constant" && node.output_size() == 1 && node.attribute_size() == 1 &&
                     node.attribute(0).name() == "value" && node.attribute(0).has_t() &&
                     !ConstantTypeBeforeOpset9(node.attribute(0).t().data_type());
  if (!moves) return false;
  onnx::GraphProto& graph = *model.mutable_graph();
  onnx::TensorProto* init = graph.add_initializer();
  *init = node.attribute(0).t();
  init->set_name(node.output(0));
  if (model.ir_version() < 4) {  // before IR 4 every initializer is also a graph input
    onnx::ValueInfoProto* input = graph.add_input();
    input->set_name(node.output(0));
    auto* tensor_type = input->mutable_type()->mutable_tensor_type();
    tensor_type->set_elem_type(init->data_type());
    auto* shape = tensor_type->mutable_shape();
    for (int64_t d : init->dims()) shape->add_dim()->set_dim_value(d);
  }
  return true;
}

}  // namespace

absl::Status LegacyUpgrade::BeforeConverter(onnx::ModelProto& model) {
  onnx::GraphProto& graph = *model.mutable_graph();
  LegacyContext context{graph, opset_, KnownRanks(graph), ""};
  Nodes nodes;
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    const LegacyRewrite* legacy = FindLegacyRewrite(node.op_type(), opset_);
    if (legacy == nullptr || node.input_size() == 0) {
      nodes.push_back(node);
      continue;
    }
    onnx::NodeProto named = node;
    named.set_name(BaseName(node, i));
    context.where = absl::StrCat("node '", named.name(), "' (", node.op_type(), ", opset ", opset_, ")");
    Nodes opset7_form;
    if (absl::Status s = legacy->rewrite(named, context, opset7_form); !s.ok()) return s;
    if (opset7_form.empty()) {  // the converter carries this one
      nodes.push_back(node);
      continue;
    }
    const std::string stand_in = absl::StrCat(kStandInPrefix, parked_.size());
    for (int j = 0; j < node.output_size(); ++j) {
      if (node.output(j).empty()) continue;
      nodes.push_back(MakeNode("Identity", absl::StrCat(stand_in, ".", j), {node.input(0)}, node.output(j)));
    }
    parked_[stand_in] = std::move(opset7_form);
  }
  graph.clear_node();
  for (onnx::NodeProto& node : nodes) *graph.add_node() = std::move(node);
  return absl::OkStatus();
}

absl::Status LegacyUpgrade::AfterConverter(onnx::ModelProto& model) {
  onnx::GraphProto& graph = *model.mutable_graph();
  Nodes nodes;
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.name().rfind(kStandInPrefix, 0) == 0) {
      auto it = parked_.find(node.name().substr(0, node.name().rfind('.')));
      if (it == parked_.end()) continue;  // one parked node's later outputs
      for (onnx::NodeProto& part : it->second) {
        if (!ConstantToInitializer(model, part)) nodes.push_back(std::move(part));
      }
      parked_.erase(it);
      continue;
    }
    if (!ConstantToInitializer(model, node)) nodes.push_back(node);
  }
  if (!parked_.empty())
    return absl::InternalError("the version converter dropped a stand-in of a node Kiln rewrote for opset 7");
  graph.clear_node();
  for (onnx::NodeProto& node : nodes) *graph.add_node() = std::move(node);
  return absl::OkStatus();
}

}  // namespace kiln::onnx_import
