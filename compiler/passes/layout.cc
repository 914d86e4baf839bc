// layout: runs of pointwise and depthwise convolutions (MobileNet's inverted residual
// blocks) switch to the channel-blocked layout NCHW16c (ops/layout_ops.cc), where the
// sixteen channels of a pixel are one vector: a depthwise tap is one vector load and
// multiply-add instead of a strided walk over a plane, and a pointwise conv is register-
// blocked over pixels and output channels with no packing. Layout changes sit on the
// graph's edges only: where a blocked run begins (kiln.ToBlocked) and where a tensor of it
// is read by anything else (kiln.FromBlocked); between two blocked convs there is none.
//   %a = Conv(%x, W1) ; %b = Conv(%a, W2) {group=C} ; %y = Relu(...)
//     =>  %xb = kiln.ToBlocked(%x) ; %ab = kiln.BlockedConv(%xb, W1)
//         %bb = kiln.BlockedConv(%ab, W2) {group=C} ; %b = kiln.FromBlocked(%bb) {channels=C}
// Run members: 2-D f32 Convs with a constant weight (and bias), explicit pads and dilation
// 1 that are pointwise (1x1, stride 1, no padding, group 1; a fused residual and input
// scale allowed, the scale applied by kiln.BlockedScale first), depthwise (group =
// channels), or dense stems (group 1, at most 64 weights per output channel: 3x3 over RGB)
// which read NCHW and write blocked, so a run that starts at the image needs no layout
// change there; and GlobalAveragePools (kiln.BlockedMean), so squeeze-and-excitation
// (EfficientNet) stays blocked too. Members connected by the tensors between them form
// runs; a run is converted when it holds a depthwise conv and at least four convs per
// layout change it needs (a lone depthwise conv would pay two changes). With option
// dense-runs=on (what kiln compile makes of the default, auto, on AVX-512 targets, whose
// 32 registers hold the blocked pointwise tiles; auto alone means off), a run with no
// depthwise conv is converted too when its convs do at least kDenseRunMacs multiply-adds
// per element of the tensors it changes: ResNet's and ResNeXt's bottlenecks, whose 1x1
// convs run about a tenth faster blocked than as an implicit GEMM that packs its B, with a
// change on each side of their 3x3 convs. Runs after fuse, so epilogues, residuals and
// input scales are in.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

constexpr int64_t kBlock = 16;

int64_t Blocks(int64_t channels) { return (channels + kBlock - 1) / kBlock; }

bool IsF32(const Value* v) { return v != nullptr && v->type().IsStatic() && v->type().dtype == DType::kFloat32; }

// dense-runs: the multiply-adds per changed element a run without depthwise convs needs.
// Measured on Zen 4 at one thread (blocked / NCHW) with every run of the model converted:
// ResNet-50 0.96 (its runs 32-870 MACs per element, most above 100), ResNet-50 at batch 8
// 0.96, ResNeXt-50 0.96 (43-1180), ResNeXt-50 at batch 8 0.94, RegNetY-400MF 0.95 (30-400),
// GoogLeNet 0.97 (15-260); but SqueezeNet-1.1 1.02 and at batch 8 1.04, whose fire
// modules (14-59: 16 to 64 squeezed channels, three changes for two convs) lose more to
// the changes than their small convs gain. With this bound they stay NCHW and only its
// classifier conv (990) goes blocked: 0.94.
constexpr double kDenseRunMacs = 64;

// Input rows of one output row a dense stem may read (blocked.cc's buffer).
constexpr int64_t kDenseRowFloats = 8192;

// Run members: 0 pointwise conv, 1 depthwise conv, 2 dense stem conv, 3 global average
// pool; -1 not eligible.
enum Kind { kNone = -1, kPointwise = 0, kDepthwise = 1, kDense = 2, kMean = 3 };

int EligibleKind(const Node* node) {
  if (node->op() == "GlobalAveragePool") {
    return IsF32(node->input(0)) && node->input(0)->type().shape.size() == 4 ? kMean : kNone;
  }
  if (node->op() != "Conv" || node->outputs().size() != 1 || node->inputs().size() < 2) return kNone;
  const Value* x = node->input(0);
  const Value* w = node->input(1);
  const Value* y = node->output(0);
  if (!IsF32(x) || !IsF32(y) || w == nullptr || !w->is_constant() || w->type().dtype != DType::kFloat32) return kNone;
  const Value* b = node->input(2);
  if (b != nullptr && !b->is_constant()) return kNone;
  // A fused input scale (fuse: squeeze-and-excitation's Mul; 1x1 convs only) must be [N or 1, C, 1, 1].
  const bool scaled = node->input(3) != nullptr;
  if (scaled != (node->GetInt("kiln.input_scale", 0) == 1)) return kNone;
  if (scaled && (!IsF32(node->input(3)) || node->input(3)->type().shape.size() != 4)) return kNone;
  const bool residual = node->input(4) != nullptr;
  if (residual && !IsF32(node->input(4))) return kNone;
  const std::vector<int64_t> xd = x->type().StaticDims(), wd = w->type().StaticDims();
  if (xd.size() != 4 || wd.size() != 4) return kNone;
  if (node->GetString("auto_pad", "NOTSET") != "NOTSET") return kNone;
  if (node->GetInts("dilations", {1, 1}) != std::vector<int64_t>{1, 1}) return kNone;
  const std::vector<int64_t> strides = node->GetInts("strides", {1, 1});
  const std::vector<int64_t> pads = node->GetInts("pads", {0, 0, 0, 0});
  const int64_t group = node->GetInt("group", 1);
  if (group == 1 && wd[2] == 1 && wd[3] == 1 && strides == std::vector<int64_t>{1, 1} &&
      pads == std::vector<int64_t>{0, 0, 0, 0}) {
    return kPointwise;
  }
  if (scaled) return kNone;
  if (!residual && group == xd[1] && wd[0] == group && wd[1] == 1) return kDepthwise;
  const int64_t ow = y->type().StaticDims()[3];
  if (!residual && group == 1 && wd[1] * wd[2] * wd[3] <= 64 &&
      wd[1] * wd[2] * ((ow - 1) * strides[1] + wd[3]) <= kDenseRowFloats) {
    return kDense;
  }
  return kNone;
}

// Elements of a static value.
double Elements(const Value* v) { return static_cast<double>(NumElements(v->type().StaticDims())); }

class Layout : public Pass {
 public:
  explicit Layout(bool dense_runs) : dense_runs_(dense_runs) {}

  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    const std::vector<Node*> nodes = graph.nodes();
    const std::map<const Node*, int> convert = ChooseRuns(graph, nodes, context.analyses, dense_runs_);
    if (convert.empty()) return false;
    Convert(graph, nodes, convert);
    return true;
  }

 private:
  // The members of the runs worth converting (node -> kind). Only reads the graph, so the
  // cached use lists answer who reads what.
  static std::map<const Node*, int> ChooseRuns(const Graph& graph, const std::vector<Node*>& nodes,
                                               AnalysisManager& analyses, bool dense_runs) {
    std::map<const Node*, int> kind;
    std::map<const Node*, size_t> index;
    for (Node* node : nodes) {
      const int k = EligibleKind(node);
      if (k != kNone) {
        kind[node] = k;
        index[node] = index.size();
      }
    }
    if (kind.empty()) return {};
    const UseListAnalysis::Result& uses = analyses.Get<UseListAnalysis>(graph);
    // Runs: members joined through the tensors one reads of another in the blocked layout.
    std::vector<size_t> parent(index.size());
    std::iota(parent.begin(), parent.end(), 0);
    auto find = [&](size_t i) {
      while (parent[i] != i) i = parent[i] = parent[parent[i]];
      return i;
    };
    for (const auto& [node, i] : index) {
      for (const Value* v : BlockedInputs(node, kind[node])) {
        auto p = index.find(v->producer());
        if (p != index.end()) parent[find(i)] = find(p->second);
      }
    }
    // Per run: convs, depthwise convs, layout changes (tensors entering it, tensors of it
    // read by anything else), the convs' multiply-adds and the changed tensors' elements.
    struct RunStats {
      int convs = 0, depthwise = 0, changes = 0;
      double macs = 0, changed = 0;
    };
    std::map<size_t, RunStats> runs;
    std::map<size_t, std::set<const Value*>> entering;
    for (const auto& [node, i] : index) {
      RunStats& s = runs[find(i)];
      if (kind[node] != kMean) ++s.convs;
      if (kind[node] == kDepthwise) ++s.depthwise;
      if (kind[node] != kMean) {  // output elements x weights per output channel
        s.macs += Elements(node->output(0)) * Elements(node->input(1)) / node->input(1)->type().StaticDims()[0];
      }
      for (const Value* v : BlockedInputs(node, kind[node])) {
        if (index.count(v->producer()) == 0) entering[find(i)].insert(v);
      }
      if (ReadOutside(graph, node->output(0), Readers(uses, node->output(0)), kind)) {
        ++s.changes;
        s.changed += Elements(node->output(0));
      }
    }
    for (auto& [run, values] : entering) {
      runs[run].changes += static_cast<int>(values.size());
      for (const Value* v : values) runs[run].changed += Elements(v);
    }
    std::map<const Node*, int> convert;  // node -> kind
    for (const auto& [node, i] : index) {
      const RunStats& s = runs[find(i)];
      const bool mobile = s.depthwise > 0 && s.convs >= 4 * s.changes;
      const bool dense = dense_runs && s.depthwise == 0 && s.convs > 0 && s.macs >= kDenseRunMacs * s.changed;
      if (mobile || dense) convert[node] = kind[node];
    }
    return convert;
  }

  // Rewrites the chosen members in graph order, with layout changes where runs begin and
  // where their tensors are read outside.
  static void Convert(Graph& graph, const std::vector<Node*>& nodes, const std::map<const Node*, int>& convert) {
    std::map<const Value*, Value*> blocked;  // NCHW value -> its blocked form
    auto to_blocked = [&](Value* v, Node* before) -> Value* {
      auto it = blocked.find(v);
      if (it != blocked.end()) return it->second;
      Node* reorder = graph.InsertNodeBefore(before, "kiln.ToBlocked", graph.UniqueName(v->name() + ".to_blocked"), {v},
                                             {graph.UniqueName(v->name() + ".blocked")}, before->opset());
      const std::vector<int64_t> d = v->type().StaticDims();
      reorder->output(0)->set_type(TensorType::Static(DType::kFloat32, {d[0], Blocks(d[1]), d[2], d[3], kBlock}));
      blocked[v] = reorder->output(0);
      return reorder->output(0);
    };
    for (Node* node : nodes) {
      auto it = convert.find(node);
      if (it == convert.end()) continue;
      const int k = it->second;
      Value* y = node->output(0);
      const std::vector<int64_t> yd = y->type().StaticDims();
      Node* b = nullptr;
      if (k == kMean) {
        b = graph.InsertNodeBefore(node, "kiln.BlockedMean", node->name(), {to_blocked(node->input(0), node)},
                                   {graph.UniqueName(y->name() + ".blocked")}, node->opset());
      } else {
        Value* x = k == kDense ? node->input(0) : to_blocked(node->input(0), node);
        if (node->input(3) != nullptr) {  // the input scale, applied first
          Node* scale = graph.InsertNodeBefore(node, "kiln.BlockedScale", graph.UniqueName(node->name() + ".scale"),
                                               {x, to_blocked(node->input(3), node)},
                                               {graph.UniqueName(x->name() + ".scaled")}, node->opset());
          scale->output(0)->set_type(x->type());
          x = scale->output(0);
        }
        std::vector<Value*> inputs = {x, node->input(1), node->input(2)};
        if (node->input(4) != nullptr) inputs.push_back(to_blocked(node->input(4), node));
        b = graph.InsertNodeBefore(node, "kiln.BlockedConv", node->name(), inputs,
                                   {graph.UniqueName(y->name() + ".blocked")}, node->opset());
        for (const auto& [key, value] : node->attrs()) {
          if (key == "group" || key == "strides" || key == "pads" || key == "kernel_shape" ||
              key.rfind("kiln.activation", 0) == 0) {
            b->mutable_attrs()[key] = value;
          }
        }
      }
      b->output(0)->set_type(TensorType::Static(DType::kFloat32, {yd[0], Blocks(yd[1]), yd[2], yd[3], kBlock}));
      // (The graph has changed by now: its readers come from the graph, not the analysis.)
      if (ReadOutside(graph, y, graph.Users(y), convert)) {
        Node* back = graph.InsertNodeBefore(node, "kiln.FromBlocked", graph.UniqueName(y->name() + ".from_blocked"),
                                            {b->output(0)}, {graph.UniqueName(y->name() + ".nchw")}, node->opset());
        back->mutable_attrs()["channels"] = yd[1];
        graph.TakeOver(y, back->output(0));
        y = back->output(0);
      }
      blocked[y] = b->output(0);
      graph.RemoveNode(node);
    }
  }

  // The tensors a member reads in the blocked layout: X (not a dense stem's), and a conv's
  // input scale and residual.
  static std::vector<const Value*> BlockedInputs(const Node* node, int kind) {
    std::vector<const Value*> v;
    if (kind != kDense) v.push_back(node->input(0));
    if (kind == kMean) return v;
    for (size_t i : {3, 4}) {
      if (node->input(i) != nullptr) v.push_back(node->input(i));
    }
    return v;
  }

  static const std::vector<Node*>& Readers(const UseListAnalysis::Result& uses, const Value* v) {
    static const std::vector<Node*> kNone;
    auto it = uses.find(v);
    return it == uses.end() ? kNone : it->second;
  }

  // Whether `v` is a graph output or read other than in the blocked layout by a node of
  // `inside` (a map from node to kind).
  static bool ReadOutside(const Graph& graph, const Value* v, const std::vector<Node*>& readers,
                          const std::map<const Node*, int>& inside) {
    if (graph.IsGraphOutput(v)) return true;
    for (const Node* user : readers) {
      auto it = inside.find(user);
      if (it == inside.end()) return true;
      const std::vector<const Value*> blocked = BlockedInputs(user, it->second);
      for (const Value* input : user->inputs()) {
        if (input == v && std::find(blocked.begin(), blocked.end(), v) == blocked.end()) return true;
      }
    }
    return false;
  }

  bool dense_runs_;
};

}  // namespace

std::unique_ptr<Pass> CreateLayout(const PassInvocation& options) {
  return std::make_unique<Layout>(options.Choice("dense-runs") == "on");
}

}  // namespace kiln
