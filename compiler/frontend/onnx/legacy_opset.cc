// Legacy rewrites, each named for what it keeps, applied to an old model before libonnx's
// version converter and checker see it:
//
//   LegacyPerChannelPRelu (opset < 7):
//     PRelu(X[N,C,d...], slope[C])  =>  PRelu(X, Unsqueeze[axes=1..rank-2](slope))
//     PRelu-1 and -6 apply a slope of [C] to axis 1; PRelu-7 broadcasts it numpy-style
//     against the last axis, and the converter leaves the node as it is.
//   LegacyConstantTypes (opset < 9):
//     %c = Constant[value=int64 tensor]()  =>  initializer %c (a graph input too before IR 4)
//     Constant-1 lists only float types; exporters wrote integer shapes and repeats with it
//     all the same, and the checker refuses them.
#include "legacy_opset.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::onnx_import {
namespace {

std::string NodeLabel(const onnx::NodeProto& node, int index, int opset) {
  const std::string name = node.name().empty() ? absl::StrCat(node.op_type(), "_", index) : node.name();
  return absl::StrCat("node '", name, "' (", node.op_type(), ", opset ", opset, ")");
}

// The rank of every value whose shape the model states or shape inference found.
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

// The leading dimension of a rank-1 value when the model states it (0 when it does not).
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

absl::Status LegacyPerChannelPRelu(onnx::GraphProto& graph, int opset) {
  const std::map<std::string, int> ranks = KnownRanks(graph);
  std::vector<onnx::NodeProto> nodes;
  for (int i = 0; i < graph.node_size(); ++i) {
    onnx::NodeProto node = graph.node(i);
    if (node.op_type() != "PRelu" || node.input_size() != 2) {
      nodes.push_back(std::move(node));
      continue;
    }
    auto slope_rank = ranks.find(node.input(1));
    if (slope_rank != ranks.end() && slope_rank->second != 1) {  // a scalar is shared, any rank
      nodes.push_back(std::move(node));
      continue;
    }
    const int64_t channels = RankOneLength(graph, node.input(1));
    auto x_rank = ranks.find(node.input(0));
    if (channels == 1 || (x_rank != ranks.end() && x_rank->second <= 2)) {  // [N,C]: the last axis
      nodes.push_back(std::move(node));
      continue;
    }
    if (x_rank == ranks.end() || slope_rank == ranks.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(NodeLabel(node, i, opset),
                       ": the slope applies per channel (axis 1) before opset 7, and the rank of X or of the slope "
                       "is not known, so it cannot be rewritten for opset 7's broadcasting"));
    }
    onnx::NodeProto unsqueeze;
    const std::string per_channel = absl::StrCat(node.input(1), "_per_channel_", i);
    unsqueeze.set_op_type("Unsqueeze");
    unsqueeze.set_name(absl::StrCat(node.name().empty() ? absl::StrCat("PRelu_", i) : node.name(), "_slope"));
    unsqueeze.add_input(node.input(1));
    unsqueeze.add_output(per_channel);
    onnx::AttributeProto* axes = unsqueeze.add_attribute();
    axes->set_name("axes");
    axes->set_type(onnx::AttributeProto::INTS);
    for (int axis = 1; axis + 1 < x_rank->second; ++axis) axes->add_ints(axis);
    node.set_input(1, per_channel);
    nodes.push_back(std::move(unsqueeze));
    nodes.push_back(std::move(node));
  }
  graph.clear_node();
  for (onnx::NodeProto& node : nodes) *graph.add_node() = std::move(node);
  return absl::OkStatus();
}

bool ConstantTypeBeforeOpset9(int32_t elem_type) {
  return elem_type == onnx::TensorProto::FLOAT || elem_type == onnx::TensorProto::FLOAT16 ||
         elem_type == onnx::TensorProto::DOUBLE;
}

absl::Status LegacyConstantTypes(onnx::ModelProto& model, int /*opset*/) {
  onnx::GraphProto& graph = *model.mutable_graph();
  std::vector<onnx::NodeProto> nodes;
  for (const onnx::NodeProto& node : graph.node()) {
    const bool moves = node.op_type() == "Constant" && node.output_size() == 1 && node.attribute_size() == 1 &&
                       node.attribute(0).name() == "value" && node.attribute(0).has_t() &&
                       !ConstantTypeBeforeOpset9(node.attribute(0).t().data_type());
    if (!moves) {
      nodes.push_back(node);
      continue;
    }
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
  }
  graph.clear_node();
  for (onnx::NodeProto& node : nodes) *graph.add_node() = std::move(node);
  return absl::OkStatus();
}

struct LegacyRewrite {
  const char* name;
  int before_opset;  // applies to models of opsets below this
  absl::Status (*rewrite)(onnx::ModelProto& model, int opset);
};

const LegacyRewrite kLegacyRewrites[] = {
    {"LegacyPerChannelPRelu", 7,
     [](onnx::ModelProto& model, int opset) { return LegacyPerChannelPRelu(*model.mutable_graph(), opset); }},
    {"LegacyConstantTypes", 9, LegacyConstantTypes},
};

}  // namespace

absl::Status RewriteLegacyOps(onnx::ModelProto& model, int opset) {
  for (const LegacyRewrite& legacy : kLegacyRewrites) {
    if (opset < legacy.before_opset) {
      if (absl::Status s = legacy.rewrite(model, opset); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::onnx_import
