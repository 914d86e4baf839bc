// prune: structured channel pruning and unstructured magnitude pruning of f32 weights.
//   %y = Conv(%x, W[M,C,kh,kw], b[M])          (also Gemm's and MatMul's output columns)
//     =>  %y = Conv(%x, W[kept], b[kept])       the share `channel_ratio` of the M output
//                                               channels with the lowest L1 norm removed
//   and every node downstream follows, sweeping the graph in order:
//     Relu, Clip, pools, ... (one input)      pass the channels through
//     Pad (none on the channel axis)          passes them through
//     Add/Mul/... with a constant [M,1,1]     slice the constant (a [1,1,1] one stays)
//     Add/Mul/... of two pruned operands      pass through when both lost the same channels
//     BatchNormalization                      slice its four vectors
//     depthwise Conv (group = channels)       slice its filters and bias, group = kept
//     Concat on the channel axis              the removed channels move by the input's offset
//     Flatten at axis 1                       channel c is features [c*s, (c+1)*s), s = H*W
//     Conv (group 1), Gemm, MatMul            slice the weight's input axis; the sweep ends
// A layer loses channels only if every path from it ends at such a weight: a residual Add
// with an unpruned operand, a Reshape or a graph output keeps it whole, and the summary
// says why. Kept counts are rounded up to a multiple of 8 where the layer had one, so
// vector kernels stay full.
//   --prune-weights R: in each Conv/Gemm/MatMul constant weight the R share with the
//   smallest magnitude becomes 0. In a MatMul/Gemm weight [K, N] (N a multiple of 16) the
//   unit is a 1x16 block (row k, columns n..n+15) ranked by L1 norm, so that the
//   block-sparse kernel can skip it (compiler/ops/sparse_lowering.cc); with
//   weight-unit=element, and in Conv weights, single elements by magnitude.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/sparse.h"

namespace kiln {
namespace {

// Channels lost along one axis of a value: removed[i] for each index of that axis.
struct Removal {
  int axis = 1;
  std::vector<bool> removed;
  bool operator==(const Removal& other) const { return axis == other.axis && removed == other.removed; }
};

// One constant operand to slice: keep the indices of `axis` not in `removed`.
struct Slice {
  Node* node;
  size_t input;
  int axis;
  std::vector<bool> removed;
};

struct Plan {
  std::vector<Slice> slices;
  std::vector<std::pair<Node*, int64_t>> groups;  // depthwise Conv -> its new group count
};

const std::set<std::string>& ChannelwiseUnaryOps() {
  static const std::set<std::string> ops = {"Relu",          "LeakyRelu",   "Clip",         "Sigmoid",
                                            "Tanh",          "HardSigmoid", "HardSwish",    "Elu",
                                            "Selu",          "Softplus",    "Softsign",     "Identity",
                                            "Neg",           "Abs",         "Exp",          "Erf",
                                            "Sqrt",          "Gelu",        "Mish",         "ThresholdedRelu",
                                            "Celu",          "MaxPool",     "AveragePool",  "GlobalAveragePool",
                                            "GlobalMaxPool", "LpPool",      "GlobalLpPool", "Dropout"};
  return ops;
}

const std::set<std::string>& BinaryOps() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "PRelu", "Max", "Min", "Pow"};
  return ops;
}

bool HasKilnAttrs(const Node* node) {
  for (const auto& [key, value] : node->attrs()) {
    if (key.rfind("kiln.", 0) == 0) return true;
  }
  return false;
}

bool IsF32Constant(const Value* value) {
  return value != nullptr && value->is_constant() && value->type().dtype == DType::kFloat32;
}

std::string Describe(const Node* node) { return absl::StrCat(node->op(), " '", node->name(), "'"); }

int64_t ChannelCount(const Value* value, int axis) {
  const auto& shape = value->type().shape;
  return axis < static_cast<int>(shape.size()) ? shape[axis].size : -1;
}

// Follows a removal of channels on one root's output through the graph (nodes after the
// root, in order): each reader either carries the removal to its output, takes it into a
// weight it slices, or cannot follow (then `why` says which node and the root stays whole).
class RemovalSweep {
 public:
  RemovalSweep(const Graph& graph, Plan& plan, std::string& why) : graph_(graph), plan_(plan), why_(why) {}

  bool Run(const std::vector<Node*>& nodes, size_t root_index, const Removal& root_removal) {
    pruned_ = {{nodes[root_index]->output(0), root_removal}};
    for (size_t n = root_index + 1; n < nodes.size(); ++n) {
      Node* node = nodes[n];
      std::vector<size_t> hit;
      for (size_t i = 0; i < node->inputs().size(); ++i) {
        if (node->input(i) != nullptr && pruned_.count(node->input(i))) hit.push_back(i);
      }
      if (hit.empty()) continue;
      if (!Step(node, hit)) return false;
      for (Value* out : node->outputs()) {
        if (pruned_.count(out) && graph_.IsGraphOutput(out))
          return Fail(absl::StrCat("reaches the graph output '", out->name(), "'"));
      }
    }
    if (graph_.IsGraphOutput(nodes[root_index]->output(0))) return Fail("is a graph output");
    return true;
  }

 private:
  bool Fail(std::string why) {
    why_ = std::move(why);
    return false;
  }
  bool FailAt(const Node* node, absl::string_view detail = "") {
    return Fail(absl::StrCat("read by ", Describe(node), detail));
  }
  bool PassThrough(const Node* node, Removal removal) {
    pruned_[node->output(0)] = std::move(removal);
    return true;
  }

  // `node` reads pruned values at inputs `hit`.
  bool Step(Node* node, const std::vector<size_t>& hit) {
    const Removal& in = pruned_.at(node->input(hit[0]));
    const std::string& op = node->op();
    if (HasKilnAttrs(node)) return FailAt(node);
    if (ChannelwiseUnaryOps().count(op)) return Unary(node, hit, in);
    if (BinaryOps().count(op)) return Binary(node, hit, in);
    if (op == "Pad") return Pad(node, hit, in);
    if (op == "BatchNormalization") return BatchNorm(node, hit, in);
    if (op == "Conv") return Conv(node, hit, in);
    if (op == "Concat") return Concat(node);
    if (op == "Flatten") return Flatten(node, in);
    if (op == "Gemm") return Gemm(node, hit, in);
    if (op == "MatMul") return MatMul(node, hit, in);
    return FailAt(node);
  }

  bool Unary(Node* node, const std::vector<size_t>& hit, const Removal& in) {
    if (hit != std::vector<size_t>{0}) return FailAt(node);
    const bool pool = node->op().find("Pool") != std::string::npos;
    if (pool && in.axis != 1) return FailAt(node, absl::StrCat(" on axis ", in.axis));
    // Dropout's mask and MaxPool's indices would need slicing too: only when unread.
    for (size_t o = 1; o < node->outputs().size(); ++o) {
      if (!graph_.Users(node->output(o)).empty() || graph_.IsGraphOutput(node->output(o))) return FailAt(node);
    }
    return PassThrough(node, in);
  }

  bool Binary(Node* node, const std::vector<size_t>& hit, const Removal& in) {
    const size_t rank = node->input(hit[0])->type().shape.size();
    if (hit.size() == 2) {
      if (!(pruned_.at(node->input(1)) == in) || node->input(1)->type().shape.size() != rank)
        return FailAt(node, " with operands that lost different channels");
      return PassThrough(node, in);
    }
    const Value* other = node->input(1 - hit[0]);
    if (!IsF32Constant(other)) return FailAt(node, " with an operand that keeps every channel");
    const int other_rank = static_cast<int>(other->type().shape.size());
    if (other_rank > static_cast<int>(rank)) return FailAt(node);
    const int axis = in.axis - (static_cast<int>(rank) - other_rank);
    if (axis >= 0) {
      const int64_t size = other->type().shape[axis].size;
      if (size == static_cast<int64_t>(in.removed.size())) {
        plan_.slices.push_back({node, 1 - hit[0], axis, in.removed});
      } else if (size != 1) {
        return FailAt(node);
      }
    }
    return PassThrough(node, in);
  }

  // Padding that leaves the channel axis alone passes it through.
  bool Pad(Node* node, const std::vector<size_t>& hit, const Removal& in) {
    const Value* pads = node->input(1);
    const int64_t rank = static_cast<int64_t>(node->input(0)->type().shape.size());
    if (hit != std::vector<size_t>{0} || pads == nullptr || !pads->is_constant() || node->input(3) != nullptr ||
        pads->constant()->num_elements() != 2 * rank || pads->constant()->GetAsInt64(in.axis) != 0 ||
        pads->constant()->GetAsInt64(in.axis + rank) != 0) {
      return FailAt(node);
    }
    return PassThrough(node, in);
  }

  bool BatchNorm(Node* node, const std::vector<size_t>& hit, const Removal& in) {
    if (hit != std::vector<size_t>{0} || in.axis != 1 || node->outputs().size() != 1) return FailAt(node);
    for (size_t i = 1; i < 5; ++i) {
      if (!IsF32Constant(node->input(i))) return FailAt(node);
      plan_.slices.push_back({node, i, 0, in.removed});
    }
    return PassThrough(node, in);
  }

  bool Conv(Node* node, const std::vector<size_t>& hit, const Removal& in) {
    if (hit != std::vector<size_t>{0} || in.axis != 1 || !IsF32Constant(node->input(1))) return FailAt(node);
    const int64_t channels = static_cast<int64_t>(in.removed.size());
    const int64_t group = node->GetInt("group", 1);
    const std::vector<int64_t> w_dims = node->input(1)->type().StaticDims();
    if (group == 1) {
      plan_.slices.push_back({node, 1, 1, in.removed});
      return true;
    }
    if (group != channels || w_dims[0] != channels) return FailAt(node, " (a grouped convolution)");
    // Depthwise: each filter reads one channel and makes one.
    plan_.slices.push_back({node, 1, 0, in.removed});
    if (node->input(2) != nullptr) {
      if (!IsF32Constant(node->input(2))) return FailAt(node);
      plan_.slices.push_back({node, 2, 0, in.removed});
    }
    const int64_t kept = std::count(in.removed.begin(), in.removed.end(), false);
    plan_.groups.push_back({node, kept});
    return PassThrough(node, in);
  }

  bool Concat(Node* node) {
    const int rank = static_cast<int>(node->output(0)->type().shape.size());
    int axis = static_cast<int>(node->GetInt("axis", 0));
    if (axis < 0) axis += rank;
    Removal out{axis, {}};
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      auto at = pruned_.find(node->input(i));
      if (at != pruned_.end()) {
        if (at->second.axis != axis) return FailAt(node, " on another axis");
        out.removed.insert(out.removed.end(), at->second.removed.begin(), at->second.removed.end());
      } else {
        const int64_t size = ChannelCount(node->input(i), axis);
        if (size < 0) return FailAt(node);
        out.removed.insert(out.removed.end(), size, false);
      }
    }
    return PassThrough(node, std::move(out));
  }

  bool Flatten(Node* node, const Removal& in) {
    const Value* x = node->input(0);
    if (node->GetInt("axis", 1) != 1 || in.axis != 1 || !x->type().IsStatic()) return FailAt(node);
    const std::vector<int64_t> dims = x->type().StaticDims();
    int64_t spatial = 1;
    for (size_t d = 2; d < dims.size(); ++d) spatial *= dims[d];
    Removal out{1, {}};
    for (bool r : in.removed) out.removed.insert(out.removed.end(), spatial, r);
    return PassThrough(node, std::move(out));
  }

  bool Gemm(Node* node, const std::vector<size_t>& hit, const Removal& in) {
    if (hit != std::vector<size_t>{0} || in.axis != 1 || node->GetInt("transA", 0) != 0 ||
        !IsF32Constant(node->input(1))) {
      return FailAt(node);
    }
    plan_.slices.push_back({node, 1, node->GetInt("transB", 0) != 0 ? 1 : 0, in.removed});
    return true;
  }

  bool MatMul(Node* node, const std::vector<size_t>& hit, const Removal& in) {
    const int rank = static_cast<int>(node->input(0)->type().shape.size());
    if (hit != std::vector<size_t>{0} || in.axis != rank - 1 || !IsF32Constant(node->input(1)) ||
        node->input(1)->type().shape.size() != 2) {
      return FailAt(node);
    }
    plan_.slices.push_back({node, 1, 0, in.removed});
    return true;
  }

  const Graph& graph_;
  Plan& plan_;
  std::string& why_;
  std::map<const Value*, Removal> pruned_;
};

std::shared_ptr<Tensor> SliceAxis(const Tensor& t, int axis, const std::vector<bool>& removed) {
  std::vector<int64_t> dims = t.dims();
  const int64_t outer = NumElements(std::vector<int64_t>(dims.begin(), dims.begin() + axis));
  const int64_t inner = NumElements(std::vector<int64_t>(dims.begin() + axis + 1, dims.end()));
  const int64_t size = dims[axis];
  dims[axis] = std::count(removed.begin(), removed.end(), false);
  auto out = std::make_shared<Tensor>(t.dtype(), dims);
  const int64_t element = DTypeSize(t.dtype());
  const auto* src = static_cast<const unsigned char*>(t.data());
  auto* dst = static_cast<unsigned char*>(out->data());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < size; ++i) {
      if (removed[i]) continue;
      std::copy_n(src + (o * size + i) * inner * element, inner * element, dst);
      dst += inner * element;
    }
  }
  return out;
}

void Apply(Graph& graph, const Plan& plan) {
  for (const Slice& s : plan.slices) {
    const Value* old = s.node->input(s.input);
    Value* sliced =
        graph.AddConstant(graph.UniqueName(old->name() + ".pruned"), SliceAxis(*old->constant(), s.axis, s.removed));
    s.node->set_input(s.input, sliced);
  }
  for (const auto& [node, group] : plan.groups) node->mutable_attrs()["group"] = group;
}

// The root's output channels and, per channel, the L1 norm of the weights that make it.
// Empty when the node cannot be a root.
std::vector<double> OutputChannelNorms(const Node* node, int& axis) {
  const Value* w = node->input(1);
  if (node->outputs().size() != 1 || !IsF32Constant(w) || node->input(0) == nullptr || node->input(0)->is_constant() ||
      HasKilnAttrs(node))
    return {};
  const Value* bias = node->input(2);
  if (bias != nullptr && !IsF32Constant(bias)) return {};
  const std::vector<int64_t> dims = w->type().StaticDims();
  const float* data = w->constant()->data_as<float>();
  std::vector<double> norms;
  if (node->op() == "Conv") {
    if (node->GetInt("group", 1) != 1 || dims.size() < 3) return {};
    axis = 1;
    const int64_t per = w->constant()->num_elements() / dims[0];
    norms.assign(dims[0], 0.0);
    for (int64_t m = 0; m < dims[0]; ++m) {
      for (int64_t i = 0; i < per; ++i) norms[m] += std::fabs(data[m * per + i]);
    }
  } else if (node->op() == "Gemm" || (node->op() == "MatMul" && node->inputs().size() == 2)) {
    if (dims.size() != 2 || node->output(0)->type().shape.empty()) return {};
    const bool by_rows = node->op() == "Gemm" && node->GetInt("transB", 0) != 0;  // B is [N, K]
    axis = static_cast<int>(node->output(0)->type().shape.size()) - 1;
    const int64_t n = by_rows ? dims[0] : dims[1];
    norms.assign(n, 0.0);
    for (int64_t r = 0; r < dims[0]; ++r) {
      for (int64_t c = 0; c < dims[1]; ++c) norms[by_rows ? r : c] += std::fabs(data[r * dims[1] + c]);
    }
  }
  return norms;
}

// Gemm's bias C follows its columns when it has them ([N], [1, N] or [M, N]).
void SliceRootBias(const Node* node, const std::vector<bool>& removed, Plan& plan) {
  const Value* bias = node->input(2);
  if (bias == nullptr) return;
  const auto& shape = bias->type().shape;
  const int64_t channels = static_cast<int64_t>(removed.size());
  if (node->op() == "Conv") {
    plan.slices.push_back({const_cast<Node*>(node), 2, 0, removed});
  } else if (!shape.empty() && shape.back().size == channels) {
    plan.slices.push_back({const_cast<Node*>(node), 2, static_cast<int>(shape.size()) - 1, removed});
  }
}

int64_t KeptChannels(int64_t channels, double ratio) {
  int64_t kept = channels - static_cast<int64_t>(std::floor(static_cast<double>(channels) * ratio));
  if (channels % 8 == 0 && channels >= 16) kept = (kept + 7) / 8 * 8;
  return std::clamp<int64_t>(kept, 1, channels);
}

double KnownProduct(const TensorType& type, size_t from, size_t to) {
  double product = 1;
  for (size_t d = from; d < to && d < type.shape.size(); ++d)
    product *= type.shape[d].known() ? static_cast<double>(type.shape[d].size) : 1.0;
  return product;
}

bool IsWeightOp(const Node* node) {
  return (node->op() == "Conv" || node->op() == "Gemm" || node->op() == "MatMul") && IsF32Constant(node->input(1)) &&
         node->input(1)->constant()->num_elements() > 1;
}

class Prune : public Pass {
 public:
  explicit Prune(PruningConfig config) : config_(std::move(config)) {}

  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    const PruningConfig* config = &config_;
    if (config->channel_ratio == 0 && config->weight_ratio == 0) {
      return absl::InvalidArgumentError(
          "prune needs a ratio: prune{channels=R} and/or prune{weights=R} (kiln compile --prune-channels, "
          "--prune-weights)");
    }
    if (!(config->channel_ratio >= 0 && config->channel_ratio < 1) ||
        !(config->weight_ratio >= 0 && config->weight_ratio < 1)) {
      return absl::InvalidArgumentError("pruning ratios must lie in [0, 1)");
    }
    PruningSummary& summary = context.pruning_summary;
    summary = PruningSummary{};
    summary.channel_ratio = config->channel_ratio;
    summary.weight_ratio = config->weight_ratio;
    summary.before = MeasureGraphCost(graph);
    // The unpruned layers' outputs on the first sample, by value name, for the breakdown.
    std::map<std::string, Tensor> reference;
    const std::vector<std::vector<Tensor>>& samples = context.pruning_samples;
    if (!samples.empty()) {
      auto outputs = LayerOutputs(graph, samples[0]);
      if (!outputs.ok()) return outputs.status();
      reference = std::move(*outputs);
    }
    bool changed = false;
    if (config->channel_ratio > 0) {
      auto pruned = PruneChannels(graph, *config, summary);
      if (!pruned.ok()) return pruned.status();
      changed |= *pruned;
    }
    if (config->weight_ratio > 0) changed |= PruneWeights(graph, *config, summary);
    summary.after = MeasureGraphCost(graph);
    if (!reference.empty()) {
      auto outputs = LayerOutputs(graph, samples[0]);
      if (!outputs.ok()) return outputs.status();
      for (const auto& [value, got] : *outputs) {
        auto want = reference.find(value);
        if (want == reference.end() || want->second.dims() != got.dims()) continue;  // lost channels: not comparable
        QuantizationSummary::LayerError e{"", "", 0, 0, 0};
        for (const Node* node : graph.nodes()) {
          if (node->outputs().size() == 1 && node->output(0)->name() == value) e.node = node->name(), e.op = node->op();
        }
        double signal = 0, noise = 0;
        for (int64_t i = 0; i < got.num_elements(); ++i) {
          const double r = want->second.data_as<float>()[i], d = got.data_as<float>()[i] - r;
          signal += r * r;
          noise += d * d;
          e.max_abs_error = std::max(e.max_abs_error, std::fabs(d));
          e.reference_scale = std::max(e.reference_scale, std::fabs(r));
        }
        e.snr_db = noise == 0 ? 200.0 : signal == 0 ? -200.0 : std::min(200.0, 10 * std::log10(signal / noise));
        summary.layers_by_error.push_back(e);
      }
      std::sort(summary.layers_by_error.begin(), summary.layers_by_error.end(), [](const auto& a, const auto& b) {
        return a.snr_db != b.snr_db ? a.snr_db < b.snr_db : a.node < b.node;
      });
      if (summary.layers_by_error.size() > 10) summary.layers_by_error.resize(10);
    }
    return changed;
  }

 private:
  PruningConfig config_;  // from the pass options; samples from the context

  // The f32 outputs of every Conv, Gemm and MatMul on `sample`, by value name (pruning
  // keeps the values; node names need not be unique).
  static absl::StatusOr<std::map<std::string, Tensor>> LayerOutputs(const Graph& graph,
                                                                    const std::vector<Tensor>& sample) {
    std::map<const Value*, std::string> wanted;
    for (const Node* node : graph.nodes()) {
      if ((node->op() == "Conv" || node->op() == "Gemm" || node->op() == "MatMul") && node->outputs().size() == 1) {
        wanted[node->output(0)] = node->output(0)->name();
      }
    }
    std::map<std::string, Tensor> outputs;
    auto run = RunGraph(graph, sample, [&](const Value* v, const Tensor& t) {
      auto it = wanted.find(v);
      if (it != wanted.end() && t.dtype() == DType::kFloat32) outputs[it->second] = t;
    });
    if (!run.ok())
      return absl::Status(run.status().code(), absl::StrCat("prune: per-layer error: ", run.status().message()));
    return outputs;
  }

  absl::StatusOr<bool> PruneChannels(Graph& graph, const PruningConfig& config, PruningSummary& summary) {
    bool changed = false;
    // Roots are taken in order; each edit re-infers types so the next sweep sees the
    // shapes it left (a Concat's offsets, a Conv's remaining inputs). Pruning replaces
    // constants only, so the nodes (and their order) stay.
    std::vector<Node*> roots;
    for (Node* node : graph.nodes()) {
      int axis = 0;
      if (!OutputChannelNorms(node, axis).empty()) roots.push_back(node);
    }
    for (Node* root : roots) {
      const std::vector<Node*> nodes = graph.nodes();
      const size_t index = std::find(nodes.begin(), nodes.end(), root) - nodes.begin();
      if (index == nodes.size()) continue;
      const std::string& name = root->name();
      if (config.skip.count(name)) {
        summary.kept_whole.push_back(absl::StrCat(name, " (--prune-skip)"));
        continue;
      }
      int axis = 1;
      const std::vector<double> norms = OutputChannelNorms(root, axis);
      const int64_t channels = static_cast<int64_t>(norms.size());
      const int64_t kept = KeptChannels(channels, config.channel_ratio);
      if (kept == channels) {
        summary.kept_whole.push_back(absl::StrCat(name, " (", channels, " channels: none to remove at this ratio)"));
        continue;
      }
      std::vector<int64_t> order(channels);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return norms[a] < norms[b]; });
      Removal removal{axis, std::vector<bool>(channels, false)};
      for (int64_t i = 0; i < channels - kept; ++i) removal.removed[order[i]] = true;
      Plan plan;
      std::string why;
      if (!RemovalSweep(graph, plan, why).Run(nodes, index, removal)) {
        summary.kept_whole.push_back(absl::StrCat(name, " (", why, ")"));
        continue;
      }
      const bool by_rows = root->op() == "Gemm" && root->GetInt("transB", 0) != 0;
      plan.slices.push_back({root, 1, root->op() == "Conv" || by_rows ? 0 : 1, removal.removed});
      SliceRootBias(root, removal.removed, plan);
      Apply(graph, plan);
      graph.Compact();
      if (auto st = InferTypes(graph); !st.ok()) {
        return absl::InternalError(absl::StrCat("prune: types after pruning ", Describe(root), ": ", st.message()));
      }
      ++summary.pruned_layers;
      summary.channels_removed += channels - kept;
      changed = true;
    }
    for (const Node* node : graph.nodes()) {
      int axis = 0;
      summary.channels_after += static_cast<int64_t>(OutputChannelNorms(node, axis).size());
    }
    summary.channels_before = summary.channels_after + summary.channels_removed;
    return changed;
  }

  // The `ratio` share of w's elements with the smallest magnitude set to 0; false if none.
  static bool ZeroElements(Tensor& w, double ratio) {
    const int64_t count = w.num_elements();
    const int64_t zeros = static_cast<int64_t>(std::floor(static_cast<double>(count) * ratio));
    if (zeros == 0) return false;
    float* data = w.data_as<float>();
    std::vector<int64_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + (zeros - 1), order.end(), [&](int64_t a, int64_t b) {
      const float fa = std::fabs(data[a]), fb = std::fabs(data[b]);
      return fa < fb || (fa == fb && a < b);
    });
    for (int64_t i = 0; i < zeros; ++i) data[order[i]] = 0.0f;
    return true;
  }

  // The `ratio` share of the 1x16 blocks of `node`'s weight w (its [K, N], read through
  // Gemm's transB) with the smallest L1 norm set to 0; false if none.
  static bool ZeroBlocks(const Node& node, Tensor& w, double ratio) {
    const std::vector<int64_t>& dims = w.dims();
    const bool transposed = node.op() == "Gemm" && node.GetInt("transB", 0) != 0;
    const int64_t K = transposed ? dims[1] : dims[0], N = transposed ? dims[0] : dims[1];
    const int64_t width = kSparseBlockCols, panels = N / width, count = K * panels;
    const int64_t zeros = static_cast<int64_t>(std::floor(static_cast<double>(count) * ratio));
    if (zeros == 0) return false;
    float* data = w.data_as<float>();
    // Element j of block b = k * panels + p: B(k, p * width + j).
    auto at = [&](int64_t b, int64_t j) -> float& {
      const int64_t k = b / panels, n = b % panels * width + j;
      return transposed ? data[n * K + k] : data[k * N + n];
    };
    std::vector<double> norms(count, 0.0);
    for (int64_t b = 0; b < count; ++b) {
      for (int64_t j = 0; j < width; ++j) norms[b] += std::fabs(at(b, j));
    }
    std::vector<int64_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + (zeros - 1), order.end(),
                     [&](int64_t a, int64_t b) { return norms[a] < norms[b] || (norms[a] == norms[b] && a < b); });
    for (int64_t i = 0; i < zeros; ++i) {
      for (int64_t j = 0; j < width; ++j) at(order[i], j) = 0.0f;
    }
    return true;
  }

  // Which MatMul/Gemm weights the block-sparse kernel will run (summary.sparse_layers).
  static void CountSparseLayers(const Graph& graph, PruningSummary& summary) {
    int64_t blocks = 0, nonzero = 0;
    for (const Node* node : graph.nodes()) {
      const std::optional<BlockCount> count = CountWeightBlocks(*node);
      if (!count) continue;
      ++summary.blockable_layers;
      summary.sparse_layers += RunsSparse(*node);
      blocks += count->blocks;
      nonzero += count->nonzero;
    }
    summary.block_density = blocks > 0 ? static_cast<double>(nonzero) / static_cast<double>(blocks) : 1.0;
  }

  bool PruneWeights(Graph& graph, const PruningConfig& config, PruningSummary& summary) {
    bool changed = false;
    // A weight several layers share (an exporter merges equal initializers: the layers of
    // a freshly built TransformerEncoder are copies) is pruned once and stays shared.
    std::map<const Value*, Value*> pruned;
    for (Node* node : graph.nodes()) {
      if (!IsWeightOp(node) || HasKilnAttrs(node) || config.skip.count(node->name())) continue;
      if (auto done = pruned.find(node->input(1)); done != pruned.end()) {
        node->set_input(1, done->second);
        continue;
      }
      const Value* original = node->input(1);
      auto out = std::make_shared<Tensor>(*node->input(1)->constant());
      const bool blocks = config.weight_blocks && CountWeightBlocks(*node).has_value();
      if (!(blocks ? ZeroBlocks(*node, *out, config.weight_ratio) : ZeroElements(*out, config.weight_ratio))) continue;
      node->set_input(1, graph.AddConstant(graph.UniqueName(node->input(1)->name() + ".sparse"), out));
      pruned[original] = node->input(1);
      changed = true;
    }
    if (changed) graph.Compact();
    CountSparseLayers(graph, summary);
    return changed;
  }
};

}  // namespace

GraphCost MeasureGraphCost(const Graph& graph) {
  GraphCost cost;
  std::set<const Value*> counted;
  for (const Node* node : graph.nodes()) {
    for (const Value* input : node->inputs()) {
      if (!IsF32Constant(input) || !counted.insert(input).second) continue;
      const Tensor& t = *input->constant();
      cost.parameters += t.num_elements();
      const float* data = t.data_as<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) cost.nonzero_parameters += data[i] != 0.0f;
      if (IsWeightOp(node) && input == node->input(1)) {
        cost.weights += t.num_elements();
        for (int64_t i = 0; i < t.num_elements(); ++i) cost.zero_weights += data[i] == 0.0f;
      }
    }
    if (node->outputs().empty() || node->input(0) == nullptr || node->input(1) == nullptr) continue;
    const TensorType& out = node->output(0)->type();
    const TensorType& w = node->input(1)->type();
    if (node->op() == "Conv" && w.shape.size() >= 3) {
      // 2 flops per multiply-add: outputs x (input channels per group x kernel window).
      cost.flops += 2.0 * KnownProduct(out, 0, out.shape.size()) * KnownProduct(w, 1, w.shape.size());
    } else if (node->op() == "Gemm" && w.shape.size() == 2) {
      const TensorType& a = node->input(0)->type();
      const double k = a.shape.size() == 2
                           ? KnownProduct(a, node->GetInt("transA", 0) ? 0 : 1, node->GetInt("transA", 0) ? 1 : 2)
                           : 1;
      cost.flops += 2.0 * KnownProduct(out, 0, out.shape.size()) * k;
    } else if (node->op() == "MatMul") {
      const TensorType& a = node->input(0)->type();
      if (!a.shape.empty())
        cost.flops +=
            2.0 * KnownProduct(out, 0, out.shape.size()) * KnownProduct(a, a.shape.size() - 1, a.shape.size());
    }
  }
  return cost;
}

PruningConfig PruningConfigFrom(const PassInvocation& options) {
  PruningConfig config;
  config.channel_ratio = options.Number("channels");
  config.weight_ratio = options.Number("weights");
  config.weight_blocks = options.Choice("weight-unit") != "element";
  for (std::string& name : options.List("skip")) config.skip.insert(std::move(name));
  return config;
}

absl::Status SetPruningOptions(const PruningConfig& config, PassInvocation& options) {
  if (absl::Status s = options.SetNumber("channels", config.channel_ratio); !s.ok()) return s;
  if (absl::Status s = options.SetNumber("weights", config.weight_ratio); !s.ok()) return s;
  if (absl::Status s = options.Set("weight-unit", config.weight_blocks ? "block" : "element"); !s.ok()) return s;
  return options.SetList("skip", {config.skip.begin(), config.skip.end()});
}

std::unique_ptr<Pass> CreatePrune(const PassInvocation& options) {
  return std::make_unique<Prune>(PruningConfigFrom(options));
}

}  // namespace kiln
