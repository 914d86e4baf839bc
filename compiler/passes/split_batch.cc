// split-batch: runs a batched graph one image at a time. Where every value has the batch
// on axis 0 (N images, or N x k rows with each image's k together: Swin's windows) and every
// node keeps the images apart (convolutions, pools, elementwise ops, concats and softmaxes
// over other axes, products of rows with a constant weight), the graph becomes N copies of
// itself at one image each, one after the other, between a Slice of each input and a Concat
// of each output on axis 0 (which plan-memory writes in place). Each image's intermediates
// then stay in cache, where at batch 8 they are 8 times larger and fall out of L2 or L3:
// SqueezeNet-1.1 at batch 8 ran 7-12 % slower per image than at batch 1 (bench/RESULTS.md,
// twelfth stop). Weights are read once per image, so a graph whose weights outweigh its
// activations (VGG-11) runs faster batched, and on two threads each image's kernels split
// over both cores, which measured level to 41 % slower: the pass is not in the default
// pipeline.
//   %y = Relu(Conv(%x [2, 3, 8, 8], W))
//     =>  %x#0 = Slice(%x, [0], [1], [0]) ; %x#1 = Slice(%x, [1], [2], [0])
//         %y#0 = Relu(Conv(%x#0, W)) ; %y#1 = Relu(Conv(%x#1, W))
//         %y = Concat(%y#0, %y#1) {axis=0}
// split-batch{until=NODE} splits only the graph's nodes up to NODE (in graph order, after
// fold-batchnorm) and leaves the rest batched: the activation-heavy early layers one image
// at a time, the weight-heavy later ones over the whole batch, with a Concat on axis 0 of
// each value the rest reads. The rest may mix images (a Softmax over the batch).
// A graph at batch 1 is left as it is; one with any other node among those it splits (or a
// value without the batch first, or a run-time shape) is an error naming the node, as the
// pass is asked for by name (kiln compile --pipeline).
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

int64_t NormalizedAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// The elements of a constant input of type `dtype` (empty when absent, of another type or
// not constant).
template <typename T>
std::vector<T> ConstantElements(const Value* v, DType dtype) {
  if (v == nullptr || !v->is_constant() || v->constant()->dtype() != dtype) return {};
  const Tensor& t = *v->constant();
  return std::vector<T>(t.data_as<T>(), t.data_as<T>() + t.num_elements());
}
std::vector<int64_t> ConstantInts(const Value* v) { return ConstantElements<int64_t>(v, DType::kInt64); }
std::vector<float> ConstantFloats(const Value* v) { return ConstantElements<float>(v, DType::kFloat32); }

bool Contains(const std::vector<int64_t>& axes, int64_t rank, int64_t axis) {
  for (int64_t a : axes) {
    if (NormalizedAxis(a, rank) == axis) return true;
  }
  return false;
}

bool IsElementwise(const std::string& op) {
  static const char* const kOps[] = {"Abs",   "Add",  "And",     "BitShift",    "Cast",      "Ceil",       "Clip",
                                     "Cos",   "Div",  "Dropout", "Elu",         "Equal",     "Erf",        "Exp",
                                     "Floor", "Gelu", "Greater", "HardSigmoid", "HardSwish", "Identity",   "LeakyRelu",
                                     "Less",  "Log",  "Max",     "Min",         "Mish",      "Mod",        "Mul",
                                     "Neg",   "Not",  "Or",      "Pow",         "PRelu",     "Reciprocal", "Relu",
                                     "Round", "Selu", "Sigmoid", "Sign",        "Sin",       "Softplus",   "Softsign",
                                     "Sqrt",  "Sub",  "Sum",     "Tanh",        "Where",     "Xor"};
  for (const char* name : kOps) {
    if (op == name) return true;
  }
  return false;
}

// Why `node` does not keep the images apart (empty when it does), in a graph whose
// non-constant values all have the batch on axis 0 (checked before).
std::string Blocker(const Node& node) {
  const std::string& op = node.op();
  const int64_t rank = static_cast<int64_t>(node.output(0)->type().StaticDims().size());
  auto constant_from = [&](size_t first) {
    for (size_t i = first; i < node.inputs().size(); ++i) {
      if (node.input(i) != nullptr && !node.input(i)->is_constant()) return false;
    }
    return true;
  };
  if (IsElementwise(op)) {
    // A non-constant operand of lower rank would broadcast its axis 0 onto another axis;
    // a constant one with N images of its own would give each image a different value.
    for (const Value* in : node.inputs()) {
      if (in == nullptr) continue;
      const std::vector<int64_t> dims = in->type().StaticDims();
      const int64_t r = static_cast<int64_t>(dims.size());
      if (!in->is_constant() && r != rank) return "an operand broadcasts across the batch";
      if (in->is_constant() && r == rank && r > 0 && dims[0] != 1) return "a constant operand has a batch of its own";
    }
    return "";
  }
  if (op == "Conv" || op == "ConvTranspose" || op == "BatchNormalization" || op == "InstanceNormalization" ||
      op == "LayerNormalization") {
    if (!constant_from(1)) return "its weights are not constant";
    if (op == "BatchNormalization" && node.GetInt("training_mode", 0) != 0) return "it normalizes over the batch";
    if (op == "LayerNormalization" && NormalizedAxis(node.GetInt("axis", -1), rank) == 0) return "it normalizes axis 0";
    return "";
  }
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool" || op == "GlobalAveragePool" || op == "GlobalMaxPool" ||
      op == "LRN") {
    return "";
  }
  if (op == "Gather" && node.input(0)->is_constant() && !node.input(1)->is_constant()) {
    // A lookup in a constant table by indices with the batch first (token embeddings).
    return node.GetInt("axis", 0) == 0 ? "" : "it gathers a constant along another axis";
  }
  if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax" || op == "Concat" || op == "Split" || op == "Gather" ||
      op == "Flatten") {
    const int64_t axis = NormalizedAxis(node.GetInt("axis", op == "Softmax" || op == "LogSoftmax" ? -1 : 1),
                                        static_cast<int64_t>(node.input(0)->type().StaticDims().size()));
    if (axis == 0) return "it works along axis 0";
    if ((op == "Gather" || op == "Split") && !constant_from(1)) return "its indices are not constant";
    if (op != "Concat") return "";
    for (const Value* in : node.inputs()) {  // (a constant part must be the same for every image)
      if (in != nullptr && in->is_constant() && in->type().StaticDims()[0] != 1)
        return "a constant operand has a batch of its own";
    }
    return "";
  }
  if (op == "Reshape") return constant_from(1) ? "" : "its shape is not constant";
  if (op == "Transpose") {
    const std::vector<int64_t> perm = node.GetInts("perm");
    return !perm.empty() && perm[0] == 0 ? "" : "it moves axis 0";
  }
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Slice" || op == "Pad" || op == "ReduceMean" || op == "ReduceMax" ||
      op == "ReduceMin" || op == "ReduceSum" || op == "ReduceL2") {
    if (!constant_from(1)) return "its axes are not constant";
    const int64_t in_rank = static_cast<int64_t>(node.input(0)->type().StaticDims().size());
    if (op == "Pad") {
      const std::vector<int64_t> pads = ConstantInts(node.input(1));
      return pads.size() == static_cast<size_t>(2 * in_rank) && pads[0] == 0 && pads[in_rank] == 0 ? ""
                                                                                                   : "it pads axis 0";
    }
    std::vector<int64_t> axes = node.GetInts("axes");
    const size_t axes_input = op == "Slice" ? 3 : 1;
    if (axes.empty()) axes = ConstantInts(node.input(axes_input));
    if (axes.empty()) return "it works on every axis";
    return Contains(axes, op == "Unsqueeze" ? rank : in_rank, 0) ? "it works along axis 0" : "";
  }
  if (op == "Resize") {
    // Scales of 1 on axis 0, or sizes (made per image like a Reshape's shape).
    if (!constant_from(1)) return "its scales or sizes are not constant";
    const std::vector<float> scales = ConstantFloats(node.input(2));
    if (!scales.empty()) return scales[0] == 1.f ? "" : "it resizes axis 0";
    return ConstantInts(node.input(3)).empty() ? "it has neither scales nor sizes" : "";
  }
  if (op == "MatMul") {
    // Rows of A times a constant weight, or a batched product whose operands both carry
    // the images on axis 0.
    if (node.input(0)->is_constant()) return "its A is constant";
    const Value* b = node.input(1);
    const size_t a_rank = node.input(0)->type().StaticDims().size(), b_rank = b->type().StaticDims().size();
    if (b->is_constant() ? b_rank <= 2 : a_rank >= 3 && b_rank == a_rank) return "";
    return "its B is an activation of another rank";
  }
  if (op == "Gemm") {
    if (node.GetInt("transA", 0) != 0) return "its A is transposed";
    return constant_from(1) ? "" : "its B or C is not constant";
  }
  return absl::StrCat("the pass does not know whether ", op, " keeps images apart");
}

class SplitBatch : public Pass {
 public:
  // `until`: the name of the last node run image by image (none: every node).
  explicit SplitBatch(std::vector<std::string> until) : until_(std::move(until)) {}

  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
    int64_t n = 0;
    std::string why;
    if (!BatchOfInputs(graph, &n, &why)) {
      if (why.empty()) return false;  // batch 1, or nothing batched: nothing to split
      return absl::InvalidArgumentError(absl::StrCat("split-batch: the graph cannot run image by image: ", why));
    }
    if (until_.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat("split-batch: until takes one node name, not ", until_.size()));
    }
    const std::string until = until_.empty() ? "" : until_[0];
    const std::vector<Node*> nodes = graph.nodes();
    size_t k = nodes.size();
    if (!until.empty()) {
      k = 0;
      while (k < nodes.size() && nodes[k]->name() != until) ++k;
      if (k == nodes.size()) {
        return absl::InvalidArgumentError(absl::StrCat("split-batch: until=", until, ": the graph has no such node"));
      }
      ++k;
    }
    const std::vector<Node*> prefix(nodes.begin(), nodes.begin() + k);
    if (Splittable(prefix, n, &why) < k || (k == nodes.size() && !(why = OutputsBlocker(graph, n)).empty())) {
      return absl::InvalidArgumentError(absl::StrCat("split-batch: the graph cannot run image by image",
                                                     until.empty() ? "" : " up to " + until, ": ", why));
    }
    KILN_RETURN_IF_ERROR(Split(graph, prefix, k < nodes.size() ? nodes[k] : nullptr, n));
    return true;
  }

 private:
  // Replaces `prefix` (the graph's first nodes, which keep images apart) by n copies at
  // one image each, inserted before `anchor` (appended when null), and the values it
  // hands on by a Concat of the copies' on axis 0.
  static absl::Status Split(Graph& graph, const std::vector<Node*>& prefix, Node* anchor, int64_t n) {
    auto add = [&](std::string op, std::string name, std::vector<Value*> inputs, const std::vector<std::string>& names,
                   int opset) {
      return anchor == nullptr
                 ? graph.AddNode(std::move(op), std::move(name), std::move(inputs), names, opset)
                 : graph.InsertNodeBefore(anchor, std::move(op), std::move(name), std::move(inputs), names, opset);
    };
    std::set<const Node*> in_prefix(prefix.begin(), prefix.end());
    // Reshape shapes and Resize sizes at one image (one constant per shape).
    std::map<const Value*, Value*> shapes;
    std::vector<std::map<const Value*, Value*>> image(n);
    std::vector<Value*> starts;  // [i], and [n] last: each image's Slice bounds
    for (int64_t i = 0; i <= n; ++i) starts.push_back(Ints(graph, {i}));
    Value* axis0 = starts[0];
    for (Value* x : graph.inputs()) {
      if (x->is_constant()) continue;
      bool used = false;
      for (const Node* user : graph.Users(x)) used = used || in_prefix.count(user) > 0;
      if (!used) continue;
      for (int64_t i = 0; i < n; ++i) {
        Node* slice =
            add("Slice", graph.UniqueName(absl::StrCat(x->name(), ".image", i)), {x, starts[i], starts[i + 1], axis0},
                {graph.UniqueName(absl::StrCat(x->name(), "#", i))}, 13);
        image[i][x] = slice->output(0);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      for (const Node* node : prefix) {
        std::vector<Value*> inputs;
        for (size_t k = 0; k < node->inputs().size(); ++k) {
          Value* in = node->input(k);
          if (in == nullptr || in->is_constant()) {
            const bool shape = (node->op() == "Reshape" && k == 1) || (node->op() == "Resize" && k == 3);
            inputs.push_back(shape ? ImageShape(graph, in, node->output(0)->type().StaticDims()[0], n, &shapes) : in);
          } else {
            inputs.push_back(image[i].at(in));
          }
        }
        std::vector<std::string> names;
        for (const Value* out : node->outputs()) {
          names.push_back(out == nullptr ? "" : graph.UniqueName(absl::StrCat(out->name(), "#", i)));
        }
        Node* copy = add(node->op(), absl::StrCat(node->name(), "#", i), std::move(inputs), names, node->opset());
        copy->mutable_attrs() = node->attrs();
        for (size_t k = 0; k < node->outputs().size(); ++k) {
          if (node->output(k) != nullptr) image[i][node->output(k)] = copy->output(k);
        }
      }
    }
    // The values read after the prefix (or graph outputs) come back together on axis 0.
    for (const Node* node : prefix) {
      for (Value* y : node->outputs()) {
        if (y == nullptr) continue;
        bool read_after = graph.IsGraphOutput(y);
        for (const Node* user : graph.Users(y)) read_after = read_after || in_prefix.count(user) == 0;
        if (!read_after) continue;
        std::vector<Value*> parts;
        for (int64_t i = 0; i < n; ++i) parts.push_back(image[i].at(y));
        Node* concat = add("Concat", graph.UniqueName(y->name() + ".images"), parts,
                           {graph.UniqueName(y->name() + ".images")}, 13);
        concat->mutable_attrs()["axis"] = int64_t{0};
        concat->output(0)->set_type(y->type());
        graph.TakeOver(y, concat->output(0));
      }
    }
    // Each image's values must be the batch's with 1 / n of its axis 0 (else a node mixed
    // images after all: a bug in Blocker, not a model to leave batched).
    struct Expected {
      const Value* one;
      std::vector<int64_t> dims;
      std::string batched;
    };
    std::vector<Expected> expected;
    for (const auto& per_image : image) {
      for (const auto& [batched, one] : per_image) {
        std::vector<int64_t> dims = batched->type().StaticDims();
        dims[0] /= n;
        expected.push_back({one, std::move(dims), batched->name()});
      }
    }
    for (Node* node : prefix) graph.RemoveNode(node);
    graph.Compact();
    KILN_RETURN_IF_ERROR(InferTypes(graph));
    for (const Expected& e : expected) {
      if (e.one->type().StaticDims() != e.dims) {
        return absl::InternalError(absl::StrCat("split-batch: '", e.one->name(), "' has type ",
                                                PrintType(e.one->type()), ", not one image of '", e.batched, "'"));
      }
    }
    return absl::OkStatus();
  }

  static Value* Ints(Graph& graph, const std::vector<int64_t>& values) {
    auto t = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t->data_as<int64_t>()[i] = values[i];
    return graph.AddConstant(graph.UniqueName("split_batch.ints"), t);
  }

  // A Reshape's shape at one image: its first element, the batched result's axis 0 (a
  // multiple of n), divided by n.
  static Value* ImageShape(Graph& graph, Value* shape, int64_t rows, int64_t n,
                           std::map<const Value*, Value*>* shapes) {
    std::vector<int64_t> dims = ConstantInts(shape);
    if (dims.empty() || dims[0] != rows) return shape;
    auto [it, fresh] = shapes->emplace(shape, nullptr);
    if (fresh) {
      dims[0] = rows / n;
      it->second = Ints(graph, dims);
    }
    return it->second;
  }

  static int64_t BatchOf(const Value* v) {
    if (!v->type().IsStatic()) return -1;
    const std::vector<int64_t> dims = v->type().StaticDims();
    return dims.empty() ? -1 : dims[0];
  }

  // Whether every non-constant input has static dims with the same batch n > 1 first;
  // else *why (empty: nothing batched).
  static bool BatchOfInputs(const Graph& graph, int64_t* n, std::string* why) {
    *n = 0;
    for (const Value* x : graph.inputs()) {
      if (x->is_constant()) continue;
      const int64_t b = BatchOf(x);
      if (*n == 0) *n = b;
      if (b != *n || b < 1) {
        *why = absl::StrCat("input '", x->name(), "' does not have the batch first");
        return false;
      }
    }
    return *n > 1;
  }

  // Why an output of the graph cannot be put together from its images (empty: none).
  static std::string OutputsBlocker(const Graph& graph, int64_t n) {
    for (const Value* y : graph.outputs()) {
      const int64_t b = BatchOf(y);
      if (b < n || b % n != 0 || y->producer() == nullptr) {
        return absl::StrCat("output '", y->name(), "' does not have the batch first");
      }
    }
    return "";
  }

  // How many of the leading `nodes` keep the images apart, every value they make a
  // multiple of n first; *why names the first that does not (empty: all do).
  static size_t Splittable(const std::vector<Node*>& nodes, int64_t n, std::string* why) {
    for (size_t k = 0; k < nodes.size(); ++k) {
      const Node* node = nodes[k];
      if (node->has_subgraphs()) {
        *why = absl::StrCat(NodeLabel(*node), " has a subgraph");
        return k;
      }
      for (const Value* out : node->outputs()) {
        const int64_t b = out == nullptr ? n : BatchOf(out);
        if (b < n || b % n != 0) {
          *why = absl::StrCat("'", out->name(), "' of ", NodeLabel(*node), " does not have the batch first");
          return k;
        }
      }
      if (std::string blocker = Blocker(*node); !blocker.empty()) {
        *why = absl::StrCat(NodeLabel(*node), ": ", blocker);
        return k;
      }
    }
    return nodes.size();
  }

  std::vector<std::string> until_;
};

}  // namespace

std::unique_ptr<Pass> CreateSplitBatch(const PassInvocation& options) {
  return std::make_unique<SplitBatch>(options.List("until"));
}

}  // namespace kiln
