// fuse: three fusions.
// 1. Epilogues: bias adds and activations fold into the Conv/Gemm/MatMul that feeds them,
//    so they run while the result is still in cache.
//      %m = MatMul(%x, W) ; %y = Add(%m, b)     =>  %y = MatMul(%x, W, b)        (b: [N])
//      %c = Conv(...)     ; %y = Relu(%c)       =>  %y = Conv(...) {kiln.activation="relu"}
//    also Gemm, and the activations LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Elu,
//    Gelu, Clip with constant bounds, and SiLU written as x * Sigmoid(x):
//      %c = Conv(...) ; %s = Sigmoid(%c) ; %y = Mul(%c, %s)  =>  %y = Conv(...) {kiln.activation="silu"}
//    A per-channel scale of a 1x1 Conv's input (squeeze-and-excitation) folds into the Conv,
//    which scales each input channel as it packs it, so the scaled tensor is never written:
//      %m = Mul(%x, %s) ; %y = Conv(%m, W, B)  =>  %y = Conv(%x, W, B, %s) {kiln.input_scale=1}
//    (%s: [N or 1, C, 1, 1]; a zero B is added when the Conv has none.) And a residual
//    added to a Conv's result (ResNet's skip connection) is added in its epilogue:
//      %c = Conv(...) ; %y = Add(%c, %r)     =>  %y = Conv(..., %r) {kiln.residual=1}
//    and so is one added to a MatMul's result (a transformer's skip connection):
//      %m = MatMul(%x, W, b) ; %y = Add(%m, %r)  =>  %y = MatMul(%x, W, b, %r) {kiln.residual=1}
//    and one added to fold-qdq's int8 Conv with an f32 result, with the Relu after it:
//      %c = kiln.QLinearConvToFloat(x, xs, xz, w, ws, wz, b) ; %y = Relu(Add(%c, %r))
//        =>  %y = kiln.QLinearConvToFloat(x, xs, xz, w, ws, wz, b, %r) {kiln.relu=1}
//    and a QuantizeLinear that alone reads such a Conv's result quantizes it in the epilogue:
//      %c = kiln.QLinearConvToFloat(...) ; %q = QuantizeLinear(%c, ys, yz)
//        =>  %q = kiln.QLinearConvToFloat(..., ys, yz)    (Y u8/s8, ys and yz scalars)
//    and a Clip with constant bounds after it (ReLU6) joins it as a Relu does:
//      %c = kiln.QLinearConvToFloat(...) ; %y = Clip(%c, 0, 6)  =>  %y = kiln.QLinearConvToFloat(...) {kiln.clip_min=0,
//      kiln.clip_max=6}
//    and a residual that is a DequantizeLinear's result is read as its bytes:
//      %r = DequantizeLinear(%r8, rs, rz) ; ... Add(%c, %r)  =>  kiln.QLinearConvToFloat(..., %r8, _, _, rs, rz)
//    and Transposes into an attention product's operands and result (FoldTransposes).
// 2. LayerNorm as exported before opset 17 (PyTorch's nn.LayerNorm, BERT's every block):
//      %m = ReduceMean(%x, axes=[-1]) ; %d = Sub(%x, %m) ; %p = Pow(%d, 2) or Mul(%d, %d)
//      %v = ReduceMean(%p, axes=[-1]) ; %s = Sqrt(Add(%v, eps)) ; %n = Div(%d, %s)
//      [%g = Mul(%n, gamma) ; %y = Add(%g, beta)]      (gamma, beta: constants [C])
//        =>  %y = LayerNormalization(%x, gamma or ones, [beta]) {axis=-1, epsilon=eps}
//    one kernel reading each row once instead of six nodes and four passes over memory.
//    GELU written out (torch's exports, BERT's and GPT-2's): the erf form
//      0.5 * x * (1 + erf(x / sqrt 2)) and the tanh approximation
//      0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), in any operand order and
//      as simplify leaves them (a division by a constant multiplied, x^3 as products),
//        =>  %y = Gelu(%x)  or  kiln.GeluTanh(%x)
//    recognised by value: a Mul's expression in one tensor x through single-reader
//    Add/Sub/Mul/Div/Pow/Erf/Tanh nodes and scalar constants is evaluated at probe points
//    and compared with both functions. It then folds into its producer's epilogue above.
// 3. Elementwise chains: connected float elementwise ops whose intermediates have the
//    result's shape and no other reader become one kiln.Elementwise node, which codegen
//    turns into a single generated loop (no intermediate buffers, one pass over memory).
//      %a = Div(%x, 1.41) ; %b = Erf(%a) ; %c = Add(%b, 1) ; %y = Mul(%x, %c)
//        =>  %y = kiln.Elementwise(%x, 1.41, 1) {ops=["Div","Erf","Add","Mul"], ...}
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/sparse.h"

namespace kiln {
namespace {

// The activations an epilogue can apply, named in the IR by `kiln.activation` (the ops'
// lowering maps the name to the kernel's code, so this pass knows no kernel header).
struct Activation {
  const char* op;
  const char* name;
  const char* alpha_attr;
  double alpha_default;
  const char* beta_attr;
  double beta_default;
};

constexpr Activation kActivations[] = {
    {"Relu", "relu", nullptr, 0, nullptr, 0},
    {"LeakyRelu", "leaky_relu", "alpha", 0.01, nullptr, 0},
    {"Sigmoid", "sigmoid", nullptr, 0, nullptr, 0},
    {"Tanh", "tanh", nullptr, 0, nullptr, 0},
    {"HardSigmoid", "hard_sigmoid", "alpha", 0.2, "beta", 0.5},
    {"HardSwish", "hard_swish", nullptr, 0, nullptr, 0},
    {"Elu", "elu", "alpha", 1.0, nullptr, 0},
    {"Gelu", "gelu", nullptr, 0, nullptr, 0},
    {"kiln.GeluTanh", "gelu_tanh", nullptr, 0, nullptr, 0},
};

bool IsProducer(const Node* node) {
  return node != nullptr && (node->op() == "Conv" || node->op() == "Gemm" || node->op() == "MatMul") &&
         node->outputs().size() == 1 && !node->has_attr("kiln.activation");
}

class Fuse : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
    bool changed = false;
    // First, so the Gelu nodes fold into their producers below.
    for (Node* node : graph.nodes()) changed |= FuseGelu(graph, node);
    graph.Compact();
    std::map<const Node*, size_t> position;
    for (Node* node : graph.nodes()) position.emplace(node, position.size());
    for (Node* node : graph.nodes()) {
      Value* x = node->input(0);
      if (x == nullptr) continue;
      if (node->op() == "Add" &&
          (FuseResidual(graph, node, position) || FuseQuantizedResidual(graph, node, position))) {
        changed = true;
        continue;
      }
      if (((node->op() == "Relu" || node->op() == "Clip") && FuseQuantizedRelu(graph, node)) ||
          (node->op() == "QuantizeLinear" && FuseQuantizedOutput(graph, node))) {
        changed = true;
        continue;
      }
      // Add is commutative: the bias may come first.
      if (node->op() == "Add" && !IsProducer(x->producer()) && node->input(1) != nullptr) x = node->input(1);
      Node* producer = x->producer();
      if (!IsProducer(producer) || graph.IsGraphOutput(x)) continue;
      // SiLU and HardSwish read the result twice (Sigmoid or HardSigmoid, and Mul);
      // everything else must be its only reader.
      const bool gate = node->op() == "Sigmoid" || node->op() == "HardSigmoid";
      if (graph.Users(x).size() != 1 && !(gate && graph.Users(x).size() == 2)) continue;
      if (x->type().dtype != DType::kFloat32 && x->type().dtype != DType::kFloat64) continue;
      if (node->op() == "Add" && producer->op() == "MatMul" && producer->inputs().size() == 2) {
        changed |= FuseBias(graph, producer, node);
        continue;
      }
      if (gate && graph.Users(x).size() == 2) {
        changed |= FuseSilu(graph, producer, node);
        continue;  // not SiLU or HardSwish: the producer's result has another reader
      }
      const char* activation = nullptr;
      double alpha = 0, beta = 0;
      for (const Activation& a : kActivations) {
        if (node->op() != a.op) continue;
        activation = a.name;
        alpha = a.alpha_attr ? node->GetFloat(a.alpha_attr, a.alpha_default) : 0;
        beta = a.beta_attr ? node->GetFloat(a.beta_attr, a.beta_default) : 0;
      }
      if (node->op() == "Clip") {
        if (!ClipBounds(node, &alpha, &beta)) continue;
        activation = "clip";
      }
      if (activation == nullptr) continue;
      producer->mutable_attrs()["kiln.activation"] = std::string(activation);
      producer->mutable_attrs()["kiln.activation_alpha"] = alpha;
      producer->mutable_attrs()["kiln.activation_beta"] = beta;
      Absorb(graph, producer, node);
      changed = true;
    }
    graph.Compact();
    // After residuals, so a Conv may take both (EfficientNet's projections).
    for (Node* node : graph.nodes()) changed |= FuseInputScale(graph, node);
    graph.Compact();
    // (A ReduceMean removed by an earlier match has no live users, so it matches nothing.)
    for (Node* node : graph.nodes()) changed |= FuseLayerNorm(graph, node);
    graph.Compact();
    // Only where codegen emits the static glue: the run-time-shape glue completes a MatMul's
    // parameters from its operands as they lie (shape_matmul), without the folded transposes.
    if (StaticGlue(graph)) {
      for (Node* node : graph.nodes()) changed |= FoldTransposes(graph, node);
      graph.Compact();
    }
    changed |= FuseChains(graph);
    return changed;
  }

 private:
  static bool ClipBounds(const Node* clip, double* lo, double* hi) {
    if (clip->opset() < 11) {
      *lo = clip->GetFloat("min", -3.4028234663852886e38);
      *hi = clip->GetFloat("max", 3.4028234663852886e38);
      return true;
    }
    *lo = -3.4028234663852886e38;
    *hi = 3.4028234663852886e38;
    for (size_t i = 1; i < 3; ++i) {
      const Value* bound = clip->input(i);
      if (bound == nullptr) continue;
      if (!bound->is_constant()) return false;
      (i == 1 ? *lo : *hi) = bound->constant()->GetAsDouble(0);
    }
    return true;
  }

  // %s = Sigmoid(%c) ; %y = Mul(%c, %s), where %c and %s have no other readers; and
  // HardSwish written as %c * HardSigmoid(%c) {alpha=1/6, beta=0.5} (torchvision's
  // MobileNetV3 as exported, whose stem's HardSwish then ran as a pass of its own).
  static bool FuseSilu(Graph& graph, Node* producer, Node* sigmoid) {
    const bool hard = sigmoid->op() == "HardSigmoid";
    if (hard && (std::abs(sigmoid->GetFloat("alpha", 0.2) - 1.0 / 6) > 1e-6 ||
                 std::abs(sigmoid->GetFloat("beta", 0.5) - 0.5) > 1e-6)) {
      return false;
    }
    Value* c = producer->output(0);
    Value* s = sigmoid->output(0);
    const std::vector<Node*> users = graph.Users(s);
    if (users.size() != 1 || graph.IsGraphOutput(s) || graph.Users(c).size() != 2) return false;
    Node* mul = users[0];
    if (mul->op() != "Mul" || mul->inputs().size() != 2) return false;
    if (!((mul->input(0) == c && mul->input(1) == s) || (mul->input(0) == s && mul->input(1) == c))) return false;
    producer->mutable_attrs()["kiln.activation"] = std::string(hard ? "hard_swish" : "silu");
    producer->mutable_attrs()["kiln.activation_alpha"] = 0.0;
    producer->mutable_attrs()["kiln.activation_beta"] = 0.0;
    graph.RemoveNode(sigmoid);
    Absorb(graph, producer, mul);
    return true;
  }

  // %c = Conv(...) ; %y = Add(%c, %r) (either order) => %y = Conv(..., %r) {kiln.residual=1}
  // where %r has %y's shape, %c is read by the Add alone and the Conv has no activation yet
  // (one that follows the Add then fuses as usual: Relu(Conv + %r)). The Conv runs where it
  // stands, so %r must be computed before it: in ResNet's downsampling blocks the Add's
  // second Conv (the shortcut's) takes the main path's result as its residual.
  static bool FuseResidual(Graph& graph, Node* add, const std::map<const Node*, size_t>& position) {
    if (add->inputs().size() != 2) return false;
    const TensorType& type = add->output(0)->type();
    if (!type.has_shape || (type.dtype != DType::kFloat32 && type.dtype != DType::kFloat64)) return false;
    for (int side = 0; side < 2; ++side) {
      Value* c = add->input(side);
      Value* r = add->input(1 - side);
      if (c == nullptr || r == nullptr || c == r) continue;
      Node* conv = c->producer();
      if (conv != nullptr && conv->op() == "MatMul") {
        if (FuseMatMulResidual(graph, conv, add, r, position)) return true;
        continue;
      }
      if (conv == nullptr || conv->op() != "Conv" || !IsProducer(conv) || SoleUser(graph, c) != add) continue;
      if (conv->inputs().size() > 4 || conv->has_attr("kiln.residual")) continue;
      if (!SameShape(c->type(), type) || !SameShape(r->type(), type) || r->type().dtype != type.dtype) continue;
      // Depthwise Convs (fewer than 4 output channels per group) have kernels of their own
      // without a residual epilogue; the Add stays a fused elementwise loop there.
      const Value* w = conv->input(1);
      const int64_t group = conv->GetInt("group", 1);
      if (!w->type().IsStatic() || group <= 0 || w->type().StaticDims()[0] / group < 4) continue;
      if (Node* p = r->producer(); p != nullptr) {
        auto at_r = position.find(p), at_conv = position.find(conv);
        if (at_r == position.end() || at_conv == position.end() || at_r->second >= at_conv->second) continue;
      }
      std::vector<Value*> inputs = conv->inputs();
      inputs.resize(4, nullptr);  // B and the input scale, or omitted
      inputs.push_back(r);
      conv->set_inputs(inputs);
      conv->mutable_attrs()["kiln.residual"] = int64_t{1};
      Absorb(graph, conv, add);
      return true;
    }
    return false;
  }

  // %m = MatMul(%x, W[, b]) ; %y = Add(%m, %r) (either order) => %y = MatMul(%x, W, b or
  // omitted, %r) {kiln.residual=1}: a transformer's skip connection, added to each block of
  // rows as it is done (after the bias, before an activation that fuses later). On the
  // conditions FuseResidual states, over static f32 shapes, and not for a weight pruned
  // enough to run block-sparse (that kernel takes no residual).
  static bool FuseMatMulResidual(Graph& graph, Node* matmul, Node* add, Value* r,
                                 const std::map<const Node*, size_t>& position) {
    Value* c = matmul->output(0);
    const TensorType& type = add->output(0)->type();
    if (!IsProducer(matmul) || SoleUser(graph, c) != add || matmul->inputs().size() > 3) return false;
    if (type.dtype != DType::kFloat32 || !type.IsStatic() || !(c->type() == type) || !(r->type() == type)) return false;
    if (matmul->input(0)->type().dtype != DType::kFloat32 || RunsSparse(*matmul)) return false;
    if (Node* p = r->producer(); p != nullptr) {
      auto at_r = position.find(p), at_matmul = position.find(matmul);
      if (at_r == position.end() || at_matmul == position.end() || at_r->second >= at_matmul->second) return false;
    }
    std::vector<Value*> inputs = matmul->inputs();
    inputs.resize(3, nullptr);  // the bias, or omitted
    inputs.push_back(r);
    matmul->set_inputs(inputs);
    matmul->mutable_attrs()["kiln.residual"] = int64_t{1};
    Absorb(graph, matmul, add);
    return true;
  }

  // The Transposes around an attention product: a Transpose read only by a MatMul of two
  // computed f32 operands (not a weight: B is not a constant), keeping A's last axis last,
  // or B's last or second-to-last axis last, goes into the MatMul as kiln.a_perm or
  // kiln.b_perm (its kernel reads the operand in place through strides); a Transpose that
  // alone reads such a MatMul's result, keeping its last axis, as kiln.c_perm (the kernel
  // writes the transposed result). Operands and result of one static rank, 3 or more, with
  // equal batch dims; no bias, residual or activation.
  //   %q = Transpose(%x, [1,0,2]) ; %s = MatMul(%q, %kt)  =>  %s = MatMul(%x, %kt) {kiln.a_perm=[1,0,2]}
  // (ViT's and BERT's q, k and v each went through a copy into heads-major order, and the
  // attention output through one back: four passes over [tokens, width] per layer.)
  // Whether codegen lowers the graph with static shapes: every value static, no control
  // flow (the glue's `dynamic` rule).
  static bool StaticGlue(const Graph& graph) {
    for (const Value* v : graph.values()) {
      if (!v->type().IsStatic()) return false;
    }
    for (const Node* node : graph.nodes()) {
      if (node->has_subgraphs()) return false;
    }
    return true;
  }

  static bool FoldTransposes(Graph& graph, Node* matmul) {
    if (matmul->op() != "MatMul" || matmul->inputs().size() != 2 || matmul->has_attr("kiln.activation")) return false;
    const Value* y = matmul->output(0);
    const size_t rank = y->type().shape.size();
    if (rank < 3 || !y->type().IsStatic() || y->type().dtype != DType::kFloat32) return false;
    for (int i = 0; i < 2; ++i) {
      const Value* v = matmul->input(i);
      if (v == nullptr || v->is_constant() || !v->type().IsStatic() || v->type().shape.size() != rank) return false;
    }
    const std::vector<int64_t> a = matmul->input(0)->type().StaticDims(), b = matmul->input(1)->type().StaticDims();
    if (!std::equal(a.begin(), a.end() - 2, b.begin())) return false;  // no broadcast batch dims
    auto perm_of = [rank](const Node* transpose) {
      std::vector<int64_t> perm = transpose->GetInts("perm");
      if (perm.empty())
        for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      return perm;
    };
    const int64_t last = static_cast<int64_t>(rank) - 1;
    bool changed = false;
    for (int i = 0; i < 2; ++i) {
      const char* attr = i == 0 ? "kiln.a_perm" : "kiln.b_perm";
      Node* t = matmul->input(i)->producer();
      if (t == nullptr || t->op() != "Transpose" || SoleUser(graph, t->output(0)) != matmul || matmul->has_attr(attr) ||
          matmul->input(0) == matmul->input(1))  // (one Transpose read as both operands stays)
        continue;
      const std::vector<int64_t> perm = perm_of(t);
      if (perm.size() != rank || !(perm[last] == last || (i == 1 && perm[last - 1] == last))) continue;
      matmul->mutable_attrs()[attr] = perm;
      matmul->set_input(i, t->input(0));
      graph.RemoveNode(t);
      changed = true;
    }
    Node* t = SoleUser(graph, y);
    if (t != nullptr && t->op() == "Transpose" && !matmul->has_attr("kiln.c_perm")) {
      const std::vector<int64_t> perm = perm_of(t);
      if (perm.size() == rank && perm[last] == last) {
        matmul->mutable_attrs()["kiln.c_perm"] = perm;
        Absorb(graph, matmul, t);
        changed = true;
      }
    }
    return changed;
  }

  // %c = kiln.QLinearConvToFloat(...) ; %y = Add(%c, %r) (either order) => the Conv with %r
  // as its input 7, on the conditions FuseResidual states (static shapes: the kernel's
  // residual is read at Y's offsets). Its relu, if any, would come before the Add: none.
  static bool FuseQuantizedResidual(Graph& graph, Node* add, const std::map<const Node*, size_t>& position) {
    if (add->inputs().size() != 2) return false;
    const TensorType& type = add->output(0)->type();
    if (!type.IsStatic() || type.dtype != DType::kFloat32) return false;
    for (int side = 0; side < 2; ++side) {
      Value* c = add->input(side);
      Value* r = add->input(1 - side);
      if (c == nullptr || r == nullptr || c == r) continue;
      Node* conv = c->producer();
      if (conv == nullptr || conv->op() != "kiln.QLinearConvToFloat" || SoleUser(graph, c) != add) continue;
      if (conv->inputs().size() > 7 || conv->has_attr("kiln.relu")) continue;
      if (!r->type().IsStatic() || r->type().dtype != DType::kFloat32) continue;
      if (c->type().StaticDims() != type.StaticDims() || r->type().StaticDims() != type.StaticDims()) continue;
      if (Node* p = r->producer(); p != nullptr) {
        auto at_r = position.find(p), at_conv = position.find(conv);
        if (at_r == position.end() || at_conv == position.end() || at_r->second >= at_conv->second) continue;
      }
      std::vector<Value*> inputs = conv->inputs();
      inputs.resize(7, nullptr);  // B, or omitted
      inputs.push_back(r);
      // A residual that is the DequantizeLinear of bytes (the previous block's quantized
      // output) is read as those bytes, dequantized in the epilogue: inputs 10 and 11.
      if (const Node* dq = r->producer(); dq != nullptr && dq->op() == "DequantizeLinear" && dq->inputs().size() == 3 &&
                                          ScalarQuantization(dq->input(1), dq->input(2)) &&
                                          dq->input(0)->type().dtype == dq->input(2)->type().dtype) {
        inputs[7] = dq->input(0);
        inputs.resize(12, nullptr);  // Y's scale and zero point: none yet
        inputs[10] = dq->input(1);
        inputs[11] = dq->input(2);
      }
      conv->set_inputs(inputs);
      Absorb(graph, conv, add);
      return true;
    }
    return false;
  }

  // %y = Relu(%c) or Clip(%c, lo, hi) (constant bounds), %c a kiln.QLinearConvToFloat's f32
  // result that it alone reads (fold-qdq fused the Relus that followed it directly; this is
  // the one after a fused residual) => kiln.relu, or kiln.clip_min and kiln.clip_max (applied
  // after any relu; MobileNet's ReLU6 before a depthwise Conv kept in f32).
  static bool FuseQuantizedRelu(Graph& graph, Node* activation) {
    Value* c = activation->input(0);
    Node* conv = c->producer();
    if (conv == nullptr || conv->op() != "kiln.QLinearConvToFloat" || c->type().dtype != DType::kFloat32) return false;
    if (SoleUser(graph, c) != activation || conv->has_attr("kiln.clip_max")) return false;
    if (activation->op() == "Relu") {
      if (conv->has_attr("kiln.relu")) return false;
      conv->mutable_attrs()["kiln.relu"] = int64_t{1};
    } else {
      double lo = 0, hi = 0;
      if (!ClipBounds(activation, &lo, &hi)) return false;
      conv->mutable_attrs()["kiln.clip_min"] = lo;
      conv->mutable_attrs()["kiln.clip_max"] = hi;
    }
    Absorb(graph, conv, activation);
    return true;
  }

  // Whether a QuantizeLinear's or DequantizeLinear's scale and zero point are constant
  // scalars, the zero point u8 or s8.
  static bool ScalarQuantization(const Value* scale, const Value* zero) {
    if (scale == nullptr || zero == nullptr || !scale->is_constant() || !zero->is_constant()) return false;
    if (scale->constant()->num_elements() != 1 || scale->type().dtype != DType::kFloat32) return false;
    if (zero->constant()->num_elements() != 1 || scale->type().shape.size() > 1 || zero->type().shape.size() > 1) {
      return false;
    }
    return zero->type().dtype == DType::kUInt8 || zero->type().dtype == DType::kInt8;
  }

  // %q = QuantizeLinear(%c, ys, yz), %c a kiln.QLinearConvToFloat's result that it alone
  // reads, ys and yz constant scalars (u8 or s8): the Conv takes them as inputs 8 and 9 and
  // writes %q, so its f32 result never reaches memory.
  static bool FuseQuantizedOutput(Graph& graph, Node* quantize) {
    Value* c = quantize->input(0);
    Node* conv = c->producer();
    if (conv == nullptr || conv->op() != "kiln.QLinearConvToFloat" || conv->input(8) != nullptr) return false;
    if (SoleUser(graph, c) != quantize || quantize->inputs().size() != 3) return false;
    if (!ScalarQuantization(quantize->input(1), quantize->input(2))) return false;
    if (quantize->output(0)->type().dtype != quantize->input(2)->type().dtype) return false;
    std::vector<Value*> inputs = conv->inputs();
    inputs.resize(std::max<size_t>(inputs.size(), 10), nullptr);  // B and the residual, or omitted
    inputs[8] = quantize->input(1);
    inputs[9] = quantize->input(2);
    conv->set_inputs(inputs);
    Absorb(graph, conv, quantize);
    return true;
  }

  // %m = Mul(%x, %s) ; %y = Conv(%m, W[, B]) with %s [N or 1, C, 1, 1], W 1x1, group 1, and
  // %m read by the Conv alone.
  static bool FuseInputScale(Graph& graph, Node* conv) {
    if (conv->op() != "Conv" || conv->inputs().size() < 2 || conv->has_attr("kiln.input_scale")) return false;
    // Inputs 3 and 4, if any, as FuseResidual leaves them: no scale yet, a residual.
    if (conv->inputs().size() > 3 && (conv->inputs().size() != 5 || conv->input(3) != nullptr)) return false;
    Value* m = conv->input(0);
    Node* mul = m->producer();
    if (mul == nullptr || mul->op() != "Mul" || mul->inputs().size() != 2 || SoleUser(graph, m) != conv) return false;
    const TensorType& type = m->type();
    if (!type.IsStatic() || type.dtype != DType::kFloat32 || type.shape.size() != 4 || conv->GetInt("group", 1) != 1)
      return false;
    const Value* w = conv->input(1);
    if (!w->type().IsStatic()) return false;
    const std::vector<int64_t> wd = w->type().StaticDims(), dims = type.StaticDims();
    if (wd.size() != 4 || wd[2] != 1 || wd[3] != 1) return false;
    for (int64_t v : conv->GetInts("pads", {})) {
      if (v != 0) return false;
    }
    if (conv->GetString("auto_pad", "NOTSET") != "NOTSET" && conv->GetString("auto_pad", "NOTSET") != "VALID")
      return false;
    // Which operand is the tensor (the Mul's own shape) and which the per-channel scale.
    for (int side = 0; side < 2; ++side) {
      Value* x = mul->input(side);
      Value* scale = mul->input(1 - side);
      if (x == nullptr || scale == nullptr || !x->type().IsStatic() || x->type().StaticDims() != dims ||
          x->type().dtype != type.dtype)
        continue;
      if (!scale->type().IsStatic() || scale->type().dtype != type.dtype) continue;
      const std::vector<int64_t> sd = scale->type().StaticDims();
      if (sd.size() != 4 || (sd[0] != 1 && sd[0] != dims[0]) || sd[1] != dims[1] || sd[2] != 1 || sd[3] != 1) continue;
      std::vector<Value*> inputs = {x, conv->input(1)};
      if (conv->inputs().size() >= 3 && conv->input(2) != nullptr) {
        inputs.push_back(conv->input(2));
      } else {
        auto zero = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{wd[0]});  // zero-initialised
        inputs.push_back(graph.AddConstant(graph.UniqueName(conv->name() + "_zero_bias"), zero));
      }
      inputs.push_back(scale);
      if (conv->inputs().size() == 5) inputs.push_back(conv->input(4));
      conv->set_inputs(inputs);
      conv->mutable_attrs()["kiln.input_scale"] = int64_t{1};
      graph.RemoveNode(mul);
      return true;
    }
    return false;
  }

  // Whether two shapes are provably one: the same rank and each dim the same size or the
  // same named symbol (a run-time batch); an anonymous unknown proves nothing.
  static bool SameShape(const TensorType& a, const TensorType& b) {
    if (!a.has_shape || !b.has_shape || a.shape.size() != b.shape.size()) return false;
    for (size_t i = 0; i < a.shape.size(); ++i) {
      const Dim &x = a.shape[i], &y = b.shape[i];
      if (x.known() ? !(y.known() && x.size == y.size) : (y.known() || x.symbol != y.symbol || x.symbol.empty()))
        return false;
    }
    return true;
  }

  // The one node reading `value` (not a graph output), or null.
  static Node* SoleUser(const Graph& graph, const Value* value) {
    const std::vector<Node*> users = graph.Users(value);
    return users.size() == 1 && !graph.IsGraphOutput(value) ? users[0] : nullptr;
  }
  // Rows of C: an f32 tensor of known rank whose last dim is C (the others may be known
  // only at run time: the pattern's structure, not the types, makes them the input's).
  static bool RowsOf(const TensorType& type, int64_t c, size_t rank) {
    return type.has_shape && type.dtype == DType::kFloat32 && type.shape.size() == rank && rank > 0 &&
           type.shape.back().known() && type.shape.back().size == c;
  }
  // A ReduceMean over the last axis only, keeping it, of an f32 tensor whose last dim is known.
  static bool IsLastAxisMean(const Node* node) {
    if (node == nullptr || node->op() != "ReduceMean" || node->inputs().size() != 1 || node->GetInt("keepdims", 1) != 1)
      return false;
    const TensorType& type = node->input(0)->type();
    if (!type.has_shape || type.shape.empty() || !RowsOf(type, type.shape.back().size, type.shape.size())) return false;
    const std::vector<int64_t> axes = node->GetInts("axes");
    const int64_t rank = static_cast<int64_t>(type.shape.size());
    return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
  }
  // A constant f32 with one element: its value.
  static std::optional<double> ScalarConstant(const Value* value) {
    if (value == nullptr || !value->is_constant() || value->type().dtype != DType::kFloat32) return std::nullopt;
    if (NumElements(value->type().StaticDims()) != 1) return std::nullopt;
    return value->constant()->GetAsDouble(0);
  }
  // A constant f32 of C elements that broadcasts along the last axis only ([C], [1, C], ...).
  static bool IsRowVector(const Value* value, int64_t c) {
    if (value == nullptr || !value->is_constant() || value->type().dtype != DType::kFloat32) return false;
    const std::vector<int64_t> dims = value->type().StaticDims();
    return !dims.empty() && dims.back() == c && NumElements(dims) == c;
  }

  // The one node reading `value` when it is `op` with a row vector of C values (LayerNorm's
  // gamma or beta) as its other operand and a result of `shape`; the row vector goes to *row.
  static Node* AffineUser(const Graph& graph, const Value* value, const char* op, int64_t c, const TensorType& shape,
                          Value** row) {
    Node* user = SoleUser(graph, value);
    if (user == nullptr || user->op() != op || user->inputs().size() != 2) return nullptr;
    Value* other = user->input(0) == value ? user->input(1) : user->input(0);
    if (!IsRowVector(other, c) || !RowsOf(user->output(0)->type(), c, shape.shape.size())) return nullptr;
    *row = other;
    return user;
  }

  // Item 2 of the header, matched from its first ReduceMean.
  static bool FuseLayerNorm(Graph& graph, Node* mean) {
    if (!IsLastAxisMean(mean)) return false;
    Value* x = mean->input(0);
    const TensorType& shape = x->type();
    const int64_t c = shape.shape.back().size;
    Node* sub = SoleUser(graph, mean->output(0));
    if (sub == nullptr || sub->op() != "Sub" || sub->input(0) != x || sub->input(1) != mean->output(0)) return false;
    Value* d = sub->output(0);
    if (!RowsOf(d->type(), c, shape.shape.size()) || graph.IsGraphOutput(d)) return false;
    // %d feeds the square and the division, nothing else.
    Node* square = nullptr;
    Node* div = nullptr;
    for (Node* user : graph.Users(d)) {
      const bool is_square = (user->op() == "Mul" && user->input(0) == d && user->input(1) == d) ||
                             (user->op() == "Pow" && user->input(0) == d && ScalarConstant(user->input(1)) == 2.0);
      if (is_square && square == nullptr) {
        square = user;
      } else if (user->op() == "Div" && user->input(0) == d && div == nullptr) {
        div = user;
      } else {
        return false;
      }
    }
    if (square == nullptr || div == nullptr) return false;
    Node* var = SoleUser(graph, square->output(0));
    if (!IsLastAxisMean(var)) return false;
    Node* add_eps = SoleUser(graph, var->output(0));
    if (add_eps == nullptr || add_eps->op() != "Add" || add_eps->inputs().size() != 2) return false;
    const int eps_side = add_eps->input(0) == var->output(0) ? 1 : 0;
    const std::optional<double> eps = ScalarConstant(add_eps->input(eps_side));
    if (add_eps->input(1 - eps_side) != var->output(0) || !eps.has_value() || *eps < 0) return false;
    Node* sqrt = SoleUser(graph, add_eps->output(0));
    if (sqrt == nullptr || sqrt->op() != "Sqrt" || SoleUser(graph, sqrt->output(0)) != div ||
        div->input(1) != sqrt->output(0))
      return false;
    // Optional affine tail: * gamma, + beta (constants over the last axis).
    std::vector<Node*> fused = {mean, sub, square, var, add_eps, sqrt, div};
    Value* gamma = nullptr;
    Value* beta = nullptr;
    if (Node* mul = AffineUser(graph, div->output(0), "Mul", c, shape, &gamma)) {
      fused.push_back(mul);
      if (Node* add = AffineUser(graph, mul->output(0), "Add", c, shape, &beta)) fused.push_back(add);
    }
    Node* last = fused.back();
    if (gamma == nullptr) {
      auto ones = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{c});
      for (int64_t i = 0; i < c; ++i) ones->data_as<float>()[i] = 1.f;
      gamma = graph.AddConstant(graph.UniqueName(mean->name() + "_ones"), ones);
    }
    std::vector<Value*> inputs = {x, gamma};
    if (beta != nullptr) inputs.push_back(beta);
    Node* norm = graph.InsertNodeBefore(last, "LayerNormalization", div->name(), inputs, {last->output(0)->name()}, 17);
    norm->mutable_attrs()["axis"] = int64_t{-1};
    norm->mutable_attrs()["epsilon"] = *eps;
    norm->output(0)->set_type(last->output(0)->type());
    graph.TakeOver(last->output(0), norm->output(0));
    for (Node* dead : fused) graph.RemoveNode(dead);
    return true;
  }

  // The expression `value` computes from one tensor (*x) and scalar constants, through
  // nodes of `kGeluOps` whose results have no other reader; the nodes go to *nodes.
  // False when it reads a second tensor or is deeper than GELU's expressions get.
  static bool CollectExpression(const Graph& graph, const Value* value, const TensorType& type, int depth,
                                const Value** x, std::vector<const Node*>* nodes) {
    if (ScalarConstant(value).has_value()) return true;
    const Node* p = value->producer();
    static const std::set<std::string> kGeluOps = {"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh"};
    if (p != nullptr && depth > 0 && kGeluOps.count(p->op()) && SoleUser(graph, value) != nullptr &&
        value->type() == type) {
      if (std::find(nodes->begin(), nodes->end(), p) == nodes->end()) nodes->push_back(p);
      for (const Value* in : p->inputs()) {
        if (in == nullptr || !CollectExpression(graph, in, type, depth - 1, x, nodes)) return false;
      }
      return true;
    }
    if (*x == nullptr) *x = value;
    return *x == value;
  }
  // That expression's value at x = probe (the scalar constants as stored).
  static double Evaluate(const Value* value, const Value* x, double probe) {
    if (value == x) return probe;
    if (!value->producer()) return value->constant()->GetAsDouble(0);
    const Node* p = value->producer();
    const double a = Evaluate(p->input(0), x, probe);
    if (p->op() == "Erf") return std::erf(a);
    if (p->op() == "Tanh") return std::tanh(a);
    const double b = Evaluate(p->input(1), x, probe);
    if (p->op() == "Add") return a + b;
    if (p->op() == "Sub") return a - b;
    if (p->op() == "Mul") return a * b;
    if (p->op() == "Div") return a / b;
    return std::pow(a, b);
  }
  // Item 1's GELU, matched at its last Mul.
  static bool FuseGelu(Graph& graph, Node* mul) {
    if (mul->op() != "Mul" || mul->inputs().size() != 2 || mul->output(0)->type().dtype != DType::kFloat32)
      return false;
    const Value* x = nullptr;
    std::vector<const Node*> nodes;
    for (const Value* in : mul->inputs()) {
      if (!CollectExpression(graph, in, mul->output(0)->type(), 12, &x, &nodes)) return false;
    }
    bool transcendental = false;
    for (const Node* n : nodes) transcendental |= n->op() == "Erf" || n->op() == "Tanh";
    if (x == nullptr || !transcendental || !(x->type() == mul->output(0)->type())) return false;
    bool erf_form = true, tanh_form = true;
    for (double t : {-4.0, -2.5, -1.3, -0.6, -0.1, 0.0, 0.2, 0.7, 1.5, 3.2}) {
      const double got = Evaluate(mul->input(0), x, t) * Evaluate(mul->input(1), x, t);
      const double exact = 0.5 * t * (1 + std::erf(t / std::sqrt(2.0)));
      const double approx = 0.5 * t * (1 + std::tanh(std::sqrt(2 / M_PI) * (t + 0.044715 * t * t * t)));
      erf_form &= std::fabs(got - exact) <= 1e-6 * (1 + std::fabs(exact));
      tanh_form &= std::fabs(got - approx) <= 1e-6 * (1 + std::fabs(approx));
    }
    if (!erf_form && !tanh_form) return false;
    Node* gelu = graph.InsertNodeBefore(mul, erf_form ? "Gelu" : "kiln.GeluTanh", mul->name(), {const_cast<Value*>(x)},
                                        {mul->output(0)->name()}, mul->opset());
    gelu->output(0)->set_type(mul->output(0)->type());
    graph.TakeOver(mul->output(0), gelu->output(0));
    graph.RemoveNode(mul);
    for (const Node* dead : nodes) graph.RemoveNode(const_cast<Node*>(dead));
    return true;
  }

  bool FuseBias(Graph& graph, Node* matmul, Node* add) {
    Value* bias = add->input(1) == matmul->output(0) ? add->input(0) : add->input(1);
    const TensorType& out = matmul->output(0)->type();
    // The result's rows may be a run-time size; the bias length is its last dim.
    if (bias == nullptr || !bias->is_constant() || out.shape.empty() || !out.shape.back().known()) return false;
    const std::vector<int64_t> b = bias->type().StaticDims();
    const int64_t n = out.shape.back().size;
    // Only a bias that broadcasts along rows: [N], [1, N], [1, 1, N], ...
    if (b.empty() || b.back() != n || NumElements(b) != n || b.size() > out.shape.size()) return false;
    if (bias->type().dtype != out.dtype) return false;
    std::vector<Value*> inputs = matmul->inputs();
    inputs.push_back(bias);
    matmul->set_inputs(inputs);
    Absorb(graph, matmul, add);
    return true;
  }

  // Grows a group backwards from each not-yet-fused elementwise node (latest first) and
  // replaces groups of two or more by one kiln.Elementwise node at the last one's place.
  static bool FuseChains(Graph& graph) {
    const std::vector<Node*> nodes = graph.nodes();
    std::map<const Node*, size_t> position;
    for (size_t i = 0; i < nodes.size(); ++i) position[nodes[i]] = i;
    std::set<const Node*> taken;
    bool changed = false;
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* root = *it;
      // Shapes known only at run time fuse too: a chain of broadcasting elementwise ops
      // computes, at each element of the result, what the fused loop computes from its
      // operands broadcast to the result (elementwise ops commute with broadcasting), so
      // members are taken when their types match the result's (same rank, same known dims).
      if (taken.count(root) || !AsScalarOp(*root) || !root->output(0)->type().has_shape) continue;
      const TensorType& type = root->output(0)->type();
      std::vector<Node*> group = {root};
      auto in_group = [&](const Node* n) { return std::find(group.begin(), group.end(), n) != group.end(); };
      for (size_t m = 0; m < group.size(); ++m) {
        for (Value* in : group[m]->inputs()) {
          Node* p = in->producer();
          if (p == nullptr || in->is_constant() || taken.count(p) || in_group(p)) continue;
          if (group.size() >= kFusedMaxOps || !AsScalarOp(*p) || graph.IsGraphOutput(in) || !(in->type() == type))
            continue;
          bool private_value = true;
          for (const Node* user : graph.Users(in)) private_value &= in_group(user);
          if (private_value) group.push_back(p);
        }
      }
      if (group.size() < 2) continue;
      std::sort(group.begin(), group.end(), [&](const Node* a, const Node* b) { return position[a] < position[b]; });
      // External operands in first-use order; each op reads inputs or earlier results.
      std::vector<Value*> externals;
      std::map<const Value*, int64_t> operand;
      std::vector<int64_t> operands;  // two per op (the second unused by a unary op)
      std::vector<double> params;
      std::vector<std::string> ops;
      for (const Node* member : group) {
        for (Value* in : member->inputs()) {
          if (operand.count(in) || (in->producer() != nullptr && in_group(in->producer()))) continue;
          operand[in] = static_cast<int64_t>(externals.size());
          externals.push_back(in);
        }
      }
      if (externals.size() > kFusedMaxInputs) continue;
      for (size_t i = 0; i < group.size(); ++i) {
        const ScalarOp op = *AsScalarOp(*group[i]);
        const int64_t a = operand.at(group[i]->input(0));
        const int64_t b = op.binary ? operand.at(group[i]->input(1)) : 0;
        operands.insert(operands.end(), {a, b});
        params.insert(params.end(), {op.alpha, op.beta});
        ops.push_back(group[i]->op());
        operand[group[i]->output(0)] = static_cast<int64_t>(externals.size() + i);
      }
      Node* fused = graph.InsertNodeBefore(root, kFusedElementwiseOp, root->name(), externals,
                                           {root->output(0)->name()}, root->opset());
      fused->mutable_attrs()["ops"] = ops;
      fused->mutable_attrs()["operands"] = operands;
      fused->mutable_attrs()["params"] = params;
      fused->output(0)->set_type(type);
      graph.TakeOver(root->output(0), fused->output(0));
      for (Node* member : group) {
        graph.RemoveNode(member);
        taken.insert(member);
      }
      changed = true;
    }
    graph.Compact();
    return changed;
  }

  // `producer` now computes what `consumer` returned: it takes the consumer's output name.
  static void Absorb(Graph& graph, Node* producer, Node* consumer) {
    graph.TakeOver(consumer->output(0), producer->output(0));
    graph.RemoveNode(consumer);
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuse(const PassInvocation&) { return std::make_unique<Fuse>(); }

}  // namespace kiln
