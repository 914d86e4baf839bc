// simplify: algebraic simplification and strength reduction.
//   Add(x, 0), Sub(x, 0), Mul(x, 1), Div(x, 1), Pow(x, 1)   =>  x
//   Div(x, c)                                               =>  Mul(x, 1/c)   (float c)
//   Pow(x, 2)  =>  Mul(x, x)          Pow(x, 0.5)  =>  Sqrt(x)
//   Identity(x), Cast(x to its own type), a view to x's own shape     =>  x
//   Pad(x) by zero on every side                                    =>  x
//   Reshape(Reshape(x))  =>  Reshape(x)   (any chain of Reshape/Flatten/Squeeze/Unsqueeze)
//   Transpose(Transpose(x, p), q)  =>  Transpose(x, p∘q), or x when that is the identity
//   Transpose(x) that moves only axes of extent 1                  =>  Reshape(x)
//   Conv(x, W) {dilations, pads} whose outer taps read only padding for every output
//     =>  Conv(x, W[:, :, kept taps]) {pads less the dropped taps' reach}
//   (DeepLabV3's atrous 3x3s of rate 12-36 over a 10x10 map are 1x1 convs: 9x the work)
//   Slice(MatMul(x, W) [+ b], [s, e) of the last axis), for every reader of the product
//     =>  MatMul(x, W[:, s:e]) [+ b[s:e]]     (W, b constants; each slice its own product)
//   (torch's MultiheadAttention projects q, k and v as one product and slices it: ViT-S/16
//   at batch 8 copied 3 x 2.4 MB per layer out of it)
//   Mul(v, c), c a constant scalar, v = views and transposes of MatMul(x, W) [+ b], each
//   read only by the next      =>  the same chain from MatMul(x, W * c) [+ b * c]
//   (MultiheadAttention's q / sqrt(head width), a pass over q, goes into the weight)
// Rewrites that would rename a graph output leave the node in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <optional>
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

// The columns [begin, end) of the last axis that `slice` keeps, when it is a Slice of
// that axis alone (step 1) by constants over a static shape; nullopt otherwise.
std::optional<std::pair<int64_t, int64_t>> LastAxisSlice(const Node* slice) {
  const Value* data = slice->input(0);
  if (slice->op() != "Slice" || slice->opset() < 10 || data == nullptr || !data->type().IsStatic()) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(data->type().shape.size());
  const int64_t width = data->type().StaticDims().back();
  auto scalar = [](const Value* v, int64_t* out) {
    if (v == nullptr || !v->is_constant() || v->constant()->num_elements() != 1) return false;
    *out = v->constant()->GetAsInt64(0);  // (INT64_MAX, "to the end", stays exact)
    return true;
  };
  int64_t begin = 0, end = 0, axis = 0, step = 1;  // axes default to [0, len(starts))
  if (!scalar(slice->input(1), &begin) || !scalar(slice->input(2), &end)) return std::nullopt;
  if (slice->input(3) != nullptr && !scalar(slice->input(3), &axis)) return std::nullopt;
  if (slice->input(4) != nullptr && !scalar(slice->input(4), &step)) return std::nullopt;
  if (rank == 0 || (axis != -1 && axis != rank - 1) || step != 1) return std::nullopt;
  auto clamp = [width](int64_t i) {
    if (i < 0) i += width;
    return i < 0 ? 0 : (i > width ? width : i);
  };
  begin = clamp(begin);
  end = clamp(end);
  if (end <= begin) return std::nullopt;
  return std::make_pair(begin, end);
}

// The columns [begin, end) of a row-major [rows, cols] f32 constant (or of a [cols] one).
std::shared_ptr<Tensor> Columns(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t cols = t.dims().back(), rows = t.num_elements() / cols;
  std::vector<int64_t> dims = t.dims();
  dims.back() = end - begin;
  auto out = std::make_shared<Tensor>(DType::kFloat32, dims);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out->data_as<float>() + r * (end - begin), t.data_as<float>() + r * cols + begin,
                sizeof(float) * (end - begin));
  }
  return out;
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
      if (Node* view = TransposeAsView(graph, node, perm)) return Replace(graph, node, view);
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
    if (op == "MatMul") return SplitSlicedProduct(graph, node);
    if (op == "Mul") return ScaleIntoProduct(graph, node);
    return false;
  }

  // The Mul rewrite in the header. The weight and bias are replaced by scaled copies (each
  // read by this product alone), and the Mul goes.
  bool ScaleIntoProduct(Graph& graph, Node* mul) {
    const bool first = mul->input(0) != nullptr && mul->input(0)->is_constant();  // Mul(c, v)
    Value* v = mul->input(first ? 1 : 0);
    const Value* c = mul->input(first ? 0 : 1);
    if (v == nullptr || c == nullptr || !c->is_constant() || c->type().dtype != DType::kFloat32 ||
        c->constant()->num_elements() != 1 || v->type().dtype != DType::kFloat32 ||
        !(mul->output(0)->type() == v->type()) || graph.IsGraphOutput(mul->output(0))) {
      return false;  // (Forward below must not fail once the weights are scaled)
    }
    const float scale = static_cast<float>(c->constant()->GetAsDouble(0));
    // Walk up through single-reader views and transposes to the product (or its bias Add).
    Value* at = v;
    Node* producer = at->producer();
    while (producer != nullptr && (IsView(producer->op()) || producer->op() == "Transpose") &&
           graph.Users(at).size() == 1 && !graph.IsGraphOutput(at)) {
      at = producer->input(0);
      producer = at->producer();
    }
    if (producer == nullptr || graph.Users(at).size() != 1 || graph.IsGraphOutput(at)) return false;
    Node* add = nullptr;
    int bias_index = -1;
    if (producer->op() == "Add") {
      add = producer;
      for (int i = 0; i < 2; ++i) {
        const Value* in = add->input(i);
        if (in != nullptr && in->is_constant() && in->type().dtype == DType::kFloat32) bias_index = i;
      }
      if (bias_index < 0) return false;
      at = add->input(1 - bias_index);
      producer = at->producer();
      if (producer == nullptr || graph.Users(at).size() != 1 || graph.IsGraphOutput(at)) return false;
    }
    const Value* w = producer->input(1);
    if (producer->op() != "MatMul" || producer->inputs().size() != 2 || w == nullptr || !w->is_constant() ||
        w->type().dtype != DType::kFloat32) {
      return false;
    }
    auto scaled = [&](const Value* t) {
      auto out = std::make_shared<Tensor>(*t->constant());
      for (int64_t i = 0; i < out->num_elements(); ++i) out->data_as<float>()[i] *= scale;
      return graph.AddConstant(graph.UniqueName(t->name() + ".scaled"), out);
    };
    producer->set_input(1, scaled(w));
    if (add != nullptr) add->set_input(bias_index, scaled(add->input(bias_index)));
    return Forward(graph, mul, v);
  }

  // The Slice rewrite in the header. Each slice at least kMinColumns wide and together no
  // wider than the product, so no slice computes more than it did.
  bool SplitSlicedProduct(Graph& graph, Node* matmul) {
    constexpr int64_t kMinColumns = 16;
    const Value* w = matmul->input(1);
    Value* x = matmul->input(0);
    Value* product = matmul->output(0);
    if (matmul->inputs().size() != 2 || w == nullptr || !w->is_constant() || w->type().dtype != DType::kFloat32 ||
        w->constant()->rank() != 2 || x->type().dtype != DType::kFloat32 || !product->type().IsStatic() ||
        graph.IsGraphOutput(product)) {
      return false;
    }
    const int64_t columns = w->constant()->dims()[1];
    Value* result = product;
    Node* bias_add = nullptr;
    const Tensor* bias = nullptr;
    std::vector<Node*> readers = graph.Users(product);
    if (readers.size() == 1 && readers[0]->op() == "Add") {
      // A bias [N] or [1, .., N] added after the product.
      Node* add = readers[0];
      const Value* b = add->input(0) == product ? add->input(1) : add->input(0);
      const bool row = b != nullptr && b->is_constant() && b->type().dtype == DType::kFloat32 &&
                       b->constant()->num_elements() == columns && b->constant()->rank() >= 1 &&
                       b->constant()->dims().back() == columns && add->output(0)->type() == product->type();
      if (row && !graph.IsGraphOutput(add->output(0))) {
        bias_add = add;
        bias = b->constant().get();
        result = add->output(0);
        readers = graph.Users(result);
      }
    }
    if (readers.empty()) return false;
    int64_t total = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const Node* reader : readers) {
      const std::optional<std::pair<int64_t, int64_t>> r =
          reader->input(0) == result ? LastAxisSlice(reader) : std::nullopt;
      if (!r || r->second - r->first < kMinColumns) return false;
      ranges.push_back(*r);
      total += r->second - r->first;
    }
    if (total > columns) return false;
    for (size_t i = 0; i < readers.size(); ++i) {
      Node* slice = readers[i];
      const auto [begin, end] = ranges[i];
      const std::string suffix = absl::StrCat(".cols", begin, "_", end);
      Value* part = graph.AddConstant(graph.UniqueName(w->name() + suffix), Columns(*w->constant(), begin, end));
      Node* mm = graph.InsertNodeBefore(slice, "MatMul", matmul->name() + suffix, {x, part},
                                        {graph.UniqueName(product->name() + suffix)}, matmul->opset());
      mm->output(0)->set_type(slice->output(0)->type());
      Node* last = mm;
      if (bias_add != nullptr) {
        Value* b = graph.AddConstant(graph.UniqueName(bias_add->name() + ".bias" + suffix), Columns(*bias, begin, end));
        last = graph.InsertNodeBefore(slice, "Add", bias_add->name() + suffix, {mm->output(0), b},
                                      {graph.UniqueName(result->name() + suffix)}, bias_add->opset());
        last->output(0)->set_type(slice->output(0)->type());
        users_[x].push_back(mm);  // (Replace records the reads of `last`)
      }
      Replace(graph, slice, last);
    }
    // The full product (and its bias) now has no reader: DCE drops them.
    return true;
  }

  // A Transpose that moves only axes of extent 1 keeps every element where it was: a
  // Reshape (a view; torch's MultiheadAttention at batch 1 swaps [1, L, E] and [L, 1, E]).
  Node* TransposeAsView(Graph& graph, Node* node, const std::vector<int64_t>& perm) {
    const Value* x = node->input(0);
    if (!x->type().IsStatic() || !node->output(0)->type().IsStatic()) return nullptr;
    const std::vector<int64_t> dims = x->type().StaticDims();
    int64_t previous = -1;
    for (int64_t axis : perm) {
      if (axis < 0 || axis >= static_cast<int64_t>(dims.size())) return nullptr;
      if (dims[axis] == 1) continue;
      if (axis < previous) return nullptr;
      previous = axis;
    }
    const std::vector<int64_t> out = node->output(0)->type().StaticDims();
    auto shape = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(out.size())});
    for (size_t i = 0; i < out.size(); ++i) shape->data_as<int64_t>()[i] = out[i];
    Value* shape_value = graph.AddConstant(graph.UniqueName(node->name() + ".shape"), shape);
    Node* reshape = graph.InsertNodeBefore(node, "Reshape", node->name(), {node->input(0), shape_value},
                                           {graph.UniqueName(node->output(0)->name() + ".view")}, 14);
    reshape->output(0)->set_type(node->output(0)->type());
    return reshape;
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
