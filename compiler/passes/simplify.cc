// simplify: algebraic simplification and strength reduction.
//   Add(x, 0), Sub(x, 0), Mul(x, 1), Div(x, 1), Pow(x, 1)   =>  x
//   Div(x, c)                                               =>  Mul(x, 1/c)   (float c)
//   Pow(x, 2)  =>  Mul(x, x)          Pow(x, 0.5)  =>  Sqrt(x)
//   Identity(x), Cast(x to its own type), a view to x's own shape     =>  x
//   Pad(x) by zero on every side                                    =>  x
//   Reshape(Reshape(x))  =>  Reshape(x)   (any chain of Reshape/Flatten/Squeeze/Unsqueeze)
//   Transpose(Transpose(x, p), q)  =>  Transpose(x, p∘q), or x when that is the identity
//   Conv(x, W) {dilations, pads} whose outer taps read only padding for every output
//     =>  Conv(x, W[:, :, kept taps]) {pads less the dropped taps' reach}
//   (DeepLabV3's atrous 3x3s of rate 12-36 over a 10x10 map are 1x1 convs: 9x the work)
// Rewrites that would rename a graph output leave the node in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

bool IsView(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze";
}

// True when `v` is a constant whose every element equals `x`.
bool IsSplat(const Value* v, double x) {
  if (v == nullptr || !v->is_constant()) return false;
  const Tensor& t = *v->constant();
  if (t.num_elements() == 0) return false;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (t.GetAsDouble(i) != x) return false;
  }
  return true;
}

// Per spatial axis of a Conv, the taps [lo, hi] that read the image for some output
// position (0 <= o*stride + t*dilation - pad_begin < in); the others read only zero padding.
struct TapRange {
  int64_t lo = 0, hi = -1;
};
TapRange ReachingTaps(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin) {
  TapRange r;
  for (int64_t t = 0; t < kernel; ++t) {
    bool reaches = false;
    for (int64_t o = 0; o < out && !reaches; ++o) {
      const int64_t i = o * stride + t * dilation - pad_begin;
      reaches = i >= 0 && i < in;
    }
    if (!reaches) continue;
    if (r.hi < r.lo) r.lo = t;
    r.hi = t;
  }
  return r;
}

// The Conv rewrite in the header: a copy of `node` with the trimmed weight (a new
// constant; W may be shared), or null when every tap reaches the image or the rewrite
// would need a negative pad.
Node* TrimConvTaps(Graph& graph, Node* node) {
  if (node->op() != "Conv" || node->GetString("auto_pad", "NOTSET") != "NOTSET") return nullptr;
  const Value* x = node->input(0);
  const Value* w = node->input(1);
  const Value* y = node->output(0);
  if (w == nullptr || !w->is_constant() || !x->type().IsStatic() || !y->type().IsStatic()) return nullptr;
  const std::vector<int64_t> xd = x->type().StaticDims(), yd = y->type().StaticDims();
  const std::vector<int64_t> wd = w->constant()->dims();
  const size_t spatial = wd.size() - 2;
  if (wd.size() < 3 || xd.size() != wd.size() || yd.size() != wd.size()) return nullptr;
  const std::vector<int64_t> ones(spatial, 1);
  const std::vector<int64_t> strides = node->GetInts("strides", ones), dilations = node->GetInts("dilations", ones);
  std::vector<int64_t> pads = node->GetInts("pads", std::vector<int64_t>(2 * spatial, 0));
  if (strides.size() != spatial || dilations.size() != spatial || pads.size() != 2 * spatial) return nullptr;
  std::vector<TapRange> keep(spatial);
  bool trims = false;
  for (size_t a = 0; a < spatial; ++a) {
    keep[a] = ReachingTaps(xd[2 + a], yd[2 + a], wd[2 + a], strides[a], dilations[a], pads[a]);
    if (keep[a].hi < keep[a].lo) return nullptr;  // all padding: left to the kernel
    const int64_t begin = pads[a] - keep[a].lo * dilations[a];
    const int64_t end = pads[spatial + a] - (wd[2 + a] - 1 - keep[a].hi) * dilations[a];
    if (begin < 0 || end < 0) return nullptr;
    trims |= keep[a].lo > 0 || keep[a].hi < wd[2 + a] - 1;
    pads[a] = begin;
    pads[spatial + a] = end;
  }
  if (!trims) return nullptr;
  std::vector<int64_t> kept_dims = {wd[0], wd[1]}, kernel_shape, kept_dilations = dilations;
  for (size_t a = 0; a < spatial; ++a) {
    kernel_shape.push_back(keep[a].hi - keep[a].lo + 1);
    if (kernel_shape[a] == 1) kept_dilations[a] = 1;  // one tap: so 1x1 convs look pointwise
  }
  kept_dims.insert(kept_dims.end(), kernel_shape.begin(), kernel_shape.end());
  const Tensor& full = *w->constant();
  auto trimmed = std::make_shared<Tensor>(full.dtype(), kept_dims);
  const int64_t element = DTypeSize(full.dtype());
  const auto* src = static_cast<const unsigned char*>(full.data());
  auto* dst = static_cast<unsigned char*>(trimmed->data());
  // Row by row (the last axis' kept taps are contiguous in W): each row's index, shifted
  // by each axis's lo, in W.
  const int64_t row = kept_dims.back();
  for (int64_t i = 0; i < trimmed->num_elements(); i += row) {
    int64_t rest = i, at = 0, stride = 1;
    for (size_t a = wd.size(); a-- > 0;) {
      const int64_t coordinate = rest % kept_dims[a] + (a >= 2 ? keep[a - 2].lo : 0);
      rest /= kept_dims[a];
      at += coordinate * stride;
      stride *= wd[a];
    }
    memcpy(dst + i * element, src + at * element, row * element);
  }
  std::vector<Value*> inputs = node->inputs();
  inputs[1] = graph.AddConstant(graph.UniqueName(w->name() + ".trimmed"), trimmed);
  Node* conv = graph.InsertNodeBefore(node, "Conv", node->name(), inputs,
                                      {graph.UniqueName(node->output(0)->name() + ".trimmed")}, node->opset());
  conv->mutable_attrs() = node->attrs();
  conv->mutable_attrs()["pads"] = pads;
  conv->mutable_attrs()["kernel_shape"] = kernel_shape;
  conv->mutable_attrs()["dilations"] = kept_dilations;
  conv->output(0)->set_type(node->output(0)->type());
  return conv;
}

class Simplify : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    // A worklist: every node once, in order, then only what a rewrite touched (the new
    // node and the readers of the rewritten value), since a rewrite can expose another:
    // two transposes merge into an identity one, which then goes.
    users_ = context.analyses.Get<UseListAnalysis>(graph);  // a copy, kept current here
    const std::vector<Node*> nodes = graph.nodes();
    std::deque<Node*> work(nodes.begin(), nodes.end());
    std::unordered_set<Node*> queued(nodes.begin(), nodes.end());
    // Bounded, in case two rewrites undo each other (as the 16 sweeps it replaces were).
    size_t budget = 16 * (nodes.size() + 1);
    bool changed = false;
    while (!work.empty() && budget-- > 0) {
      Node* node = work.front();
      work.pop_front();
      queued.erase(node);
      if (removed_.count(node)) continue;
      touched_.clear();
      if (!Visit(graph, node)) continue;
      changed = true;
      for (Node* next : touched_) {
        if (!removed_.count(next) && queued.insert(next).second) work.push_back(next);
      }
    }
    graph.Compact();
    return changed;
  }

 private:
  // Replaces uses of the node's single output by `with`; false if that would rename a
  // graph output or change the type.
  bool Forward(Graph& graph, Node* node, Value* with) {
    Value* out = node->output(0);
    if (graph.IsGraphOutput(out) || !(out->type() == with->type())) return false;
    graph.ReplaceAllUses(out, with);
    MoveReaders(out, with);
    graph.RemoveNode(node);
    removed_.insert(node);
    return true;
  }

  // The readers of `from` now read `to`: they go on the worklist.
  void MoveReaders(const Value* from, const Value* to) {
    auto it = users_.find(from);
    if (it == users_.end()) return;
    const std::vector<Node*> readers = std::move(it->second);
    users_.erase(it);
    std::vector<Node*>& list = users_[to];
    list.insert(list.end(), readers.begin(), readers.end());
    touched_.insert(touched_.end(), readers.begin(), readers.end());
  }

  Value* Constant(Graph& graph, const std::string& hint, DType dtype, double value) {
    auto t = std::make_shared<Tensor>(dtype, std::vector<int64_t>{});
    if (dtype == DType::kFloat32)
      t->data_as<float>()[0] = static_cast<float>(value);
    else
      t->data_as<double>()[0] = value;
    return graph.AddConstant(graph.UniqueName(hint), t);
  }

  bool Visit(Graph& graph, Node* node) {
    const std::string& op = node->op();
    Value* x = node->input(0);
    Value* y = node->input(1);
    if (op == "Identity") return Forward(graph, node, x);
    if (op == "Cast" && x->type().dtype == node->output(0)->type().dtype) return Forward(graph, node, x);
    if (op == "Pad" && x->type() == node->output(0)->type()) {
      // Padding by nothing (Swin pads to a multiple of its window, which 224 already is).
      const std::vector<int64_t> pads = node->opset() < 11 ? node->GetInts("pads") : std::vector<int64_t>{};
      const bool none =
          node->opset() < 11 ? std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }) : IsSplat(y, 0);
      if (none) return Forward(graph, node, x);
    }
    if ((op == "Add" || op == "Sub") && IsSplat(y, 0)) return Forward(graph, node, x);
    if (op == "Add" && IsSplat(x, 0)) return Forward(graph, node, y);
    if ((op == "Mul" || op == "Div") && IsSplat(y, 1)) return Forward(graph, node, x);
    if (op == "Mul" && IsSplat(x, 1)) return Forward(graph, node, y);
    if (op == "Pow" && IsSplat(y, 1)) return Forward(graph, node, x);
    const DType dtype = x ? x->type().dtype : DType::kUndefined;
    const bool is_float = dtype == DType::kFloat32 || dtype == DType::kFloat64;
    if (op == "Div" && is_float && y->is_constant() && y->type().dtype == dtype) {
      // x / c  =>  x * (1/c): a multiply is several times cheaper than a divide.
      auto reciprocal = std::make_shared<Tensor>(dtype, y->constant()->dims());
      for (int64_t i = 0; i < reciprocal->num_elements(); ++i) {
        const double c = y->constant()->GetAsDouble(i);
        if (dtype == DType::kFloat32)
          reciprocal->data_as<float>()[i] = 1.0f / static_cast<float>(c);
        else
          reciprocal->data_as<double>()[i] = 1.0 / c;
      }
      Node* mul = graph.InsertNodeBefore(
          node, "Mul", node->name(), {x, graph.AddConstant(graph.UniqueName(y->name() + ".reciprocal"), reciprocal)},
          {graph.UniqueName(node->output(0)->name() + ".mul")}, node->opset());
      return Replace(graph, node, mul);
    }
    if (op == "Pow" && is_float && y->type().dtype == dtype && y->type().IsStatic() &&
        NumElements(y->type().StaticDims()) == 1 && y->type().shape.size() <= x->type().shape.size()) {
      if (IsSplat(y, 2))
        return Replace(graph, node,
                       graph.InsertNodeBefore(node, "Mul", node->name(), {x, x},
                                              {graph.UniqueName(node->output(0)->name() + ".square")}, node->opset()));
      if (IsSplat(y, 0.5))
        return Replace(graph, node,
                       graph.InsertNodeBefore(node, "Sqrt", node->name(), {x},
                                              {graph.UniqueName(node->output(0)->name() + ".sqrt")}, node->opset()));
    }
    if (IsView(op) && node->output(0)->type().IsStatic()) {
      if (node->output(0)->type() == x->type()) return Forward(graph, node, x);
      Node* inner = x->producer();
      if (inner != nullptr && IsView(inner->op()) && inner->input(0) != nullptr) {
        // Collapse the chain into one Reshape of the innermost input.
        std::vector<int64_t> dims = node->output(0)->type().StaticDims();
        auto shape = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(dims.size())});
        for (size_t i = 0; i < dims.size(); ++i) shape->data_as<int64_t>()[i] = dims[i];
        Value* shape_value = graph.AddConstant(graph.UniqueName(node->name() + ".shape"), shape);
        Node* reshape =
            graph.InsertNodeBefore(node, "Reshape", node->name(), {inner->input(0), shape_value},
                                   {graph.UniqueName(node->output(0)->name() + ".flat")}, std::max(node->opset(), 14));
        return Replace(graph, node, reshape);
      }
    }
    if (op == "Transpose" && x->type().has_shape) {
      const int64_t rank = static_cast<int64_t>(x->type().shape.size());
      std::vector<int64_t> perm = node->GetInts("perm");
      if (perm.empty())
        for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
      bool identity = true;
      for (int64_t i = 0; i < rank; ++i) identity &= perm[i] == i;
      if (identity) return Forward(graph, node, x);
      Node* inner = x->producer();
      if (inner != nullptr && inner->op() == "Transpose") {
        std::vector<int64_t> inner_perm = inner->GetInts("perm");
        if (inner_perm.empty())
          for (int64_t i = rank - 1; i >= 0; --i) inner_perm.push_back(i);
        std::vector<int64_t> composed(rank);
        for (int64_t i = 0; i < rank; ++i) composed[i] = inner_perm[perm[i]];
        Node* merged = graph.InsertNodeBefore(node, "Transpose", node->name(), {inner->input(0)},
                                              {graph.UniqueName(node->output(0)->name() + ".merged")}, node->opset());
        merged->mutable_attrs()["perm"] = composed;
        return Replace(graph, node, merged);
      }
    }
    if (Node* conv = TrimConvTaps(graph, node)) return Replace(graph, node, conv);
    return false;
  }

  // Makes `replacement` (already inserted before `node`) take over node's output.
  bool Replace(Graph& graph, Node* node, Node* replacement) {
    graph.TakeOver(node->output(0), replacement->output(0));
    MoveReaders(node->output(0), replacement->output(0));
    for (const Value* in : replacement->inputs()) {
      if (in != nullptr) users_[in].push_back(replacement);
    }
    touched_.push_back(replacement);
    graph.RemoveNode(node);
    removed_.insert(node);
    return true;
  }

  UseListAnalysis::Result users_;  // kept up to date through Forward and Replace
  std::unordered_set<const Node*> removed_;
  std::vector<Node*> touched_;  // by the last rewrite
};

}  // namespace

std::unique_ptr<Pass> CreateSimplify(const PassInvocation&) { return std::make_unique<Simplify>(); }

}  // namespace kiln
