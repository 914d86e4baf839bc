// fuse: folds bias adds and activations into the Conv/Gemm/MatMul that feeds them, so the
// epilogue runs while the result is still in cache.
//   %m = MatMul(%x, W) ; %y = Add(%m, b)        =>  %y = MatMul(%x, W, b)        (b: [N])
//   %c = Conv(...)     ; %y = Relu(%c)          =>  %y = Conv(...) {kiln.activation=Relu}
//   also Gemm, and the activations LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Elu,
//   Gelu, and Clip with constant bounds.
#include "kernel_ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

struct Activation {
  const char* op;
  int code;
  const char* alpha_attr;
  double alpha_default;
  const char* beta_attr;
  double beta_default;
};

constexpr Activation kActivations[] = {
    {"Relu", KILN_UNARY_RELU, nullptr, 0, nullptr, 0},
    {"LeakyRelu", KILN_UNARY_LEAKY_RELU, "alpha", 0.01, nullptr, 0},
    {"Sigmoid", KILN_UNARY_SIGMOID, nullptr, 0, nullptr, 0},
    {"Tanh", KILN_UNARY_TANH, nullptr, 0, nullptr, 0},
    {"HardSigmoid", KILN_UNARY_HARD_SIGMOID, "alpha", 0.2, "beta", 0.5},
    {"HardSwish", KILN_UNARY_HARD_SWISH, nullptr, 0, nullptr, 0},
    {"Elu", KILN_UNARY_ELU, "alpha", 1.0, nullptr, 0},
    {"Gelu", KILN_UNARY_GELU, nullptr, 0, nullptr, 0},
};

bool IsProducer(const Node* node) {
  return node != nullptr && (node->op() == "Conv" || node->op() == "Gemm" || node->op() == "MatMul") &&
         node->outputs().size() == 1 && !node->has_attr("kiln.activation");
}

class Fuse : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
    bool changed = false;
    for (Node* node : graph.nodes()) {
      Value* x = node->input(0);
      if (x == nullptr) continue;
      Node* producer = x->producer();
      if (!IsProducer(producer) || graph.Users(x).size() != 1 || graph.IsGraphOutput(x)) continue;
      if (x->type().dtype != DType::kFloat32 && x->type().dtype != DType::kFloat64) continue;
      if (node->op() == "Add" && producer->op() == "MatMul" && producer->inputs().size() == 2) {
        changed |= FuseBias(graph, producer, node);
        continue;
      }
      int code = -1;
      double alpha = 0, beta = 0;
      for (const Activation& a : kActivations) {
        if (node->op() != a.op) continue;
        code = a.code;
        alpha = a.alpha_attr ? node->GetFloat(a.alpha_attr, a.alpha_default) : 0;
        beta = a.beta_attr ? node->GetFloat(a.beta_attr, a.beta_default) : 0;
      }
      if (node->op() == "Clip") {
        if (!ClipBounds(node, &alpha, &beta)) continue;
        code = KILN_UNARY_CLIP;
      }
      if (code < 0) continue;
      producer->mutable_attrs()["kiln.activation"] = static_cast<int64_t>(code);
      producer->mutable_attrs()["kiln.activation_alpha"] = alpha;
      producer->mutable_attrs()["kiln.activation_beta"] = beta;
      Absorb(graph, producer, node);
      changed = true;
    }
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

  bool FuseBias(Graph& graph, Node* matmul, Node* add) {
    Value* bias = add->input(1) == matmul->output(0) ? add->input(0) : add->input(1);
    const TensorType& out = matmul->output(0)->type();
    if (bias == nullptr || !bias->is_constant() || !out.IsStatic() || out.shape.empty()) return false;
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

  // `producer` now computes what `consumer` returned: it takes the consumer's output name.
  static void Absorb(Graph& graph, Node* producer, Node* consumer) {
    graph.TakeOver(consumer->output(0), producer->output(0));
    graph.RemoveNode(consumer);
  }
};

}  // namespace

KILN_REGISTER_PASS(Fuse, "fuse", "fuse bias adds and activations into Conv/Gemm/MatMul epilogues")

}  // namespace kiln
