// fold-qdq: a Conv or MatMul whose inputs are dequantized and whose result is quantized
// (the QDQ form ONNX Runtime's quantizer and `kiln compile --precision int8` write)
// becomes the integer op, so it runs as int8 code instead of in f32 between conversions:
//   %x = DequantizeLinear(%xq, xs, xz) ; %w = DequantizeLinear(Wq, ws, wz)
//   %c = Conv(%x, %w, B) ; [%r = Relu(%c)] ; %yq = QuantizeLinear(%c or %r, ys, yz)
//     =>  %yq = QLinearConv(%xq, xs, xz, Wq, ws, wz, ys, yz, B') [{kiln.relu=1}]
//         B' = rint(B / (xs * ws)) as int32, or Bq where B = DequantizeLinear(Bq, ...)
//   %a = DequantizeLinear(%aq, as, az) ; %b = DequantizeLinear(Bq, bs, bz)
//   %m = MatMul(%a, %b) ; %yq = QuantizeLinear(%m, ys, yz)
//     =>  %yq = QLinearMatMul(%aq, as, az, Bq, bs, bz, ys, yz)
//   %x = DequantizeLinear(..) ; %w = DequantizeLinear(Wq, ..) ; %c = Conv(%x, %w, B)  (%c read
//   by anything else: an Add, a pool, a graph output)
//     =>  %c = kiln.QLinearConvToFloat(%xq, xs, xz, Wq, ws, wz, B)   (int8 sums, f32 out;
//         a Relu that alone reads %c joins it as {kiln.relu=1})
//   the same for a MatMul with a constant 2-D B whose result stays f32:
//     =>  %m = kiln.QLinearMatMulToFloat(%aq, as, az, Bq, bs, bz [, bias])  (an Add of a
//         constant [N] bias that alone reads %m joins it)
// A Relu between the op and the QuantizeLinear folds as a clamp at yz: rint is monotonic
// and maps 0 to 0, so Q(Relu(y)) = max(Q(y), yz). The weights, scales and zero points must
// be constants; activations are quantized per tensor, weights per tensor or per output
// channel. The dequantized tensors stay for any other reader (dce removes the rest).
// A bias may be a constant or the DequantizeLinear of one. Results match the QDQ graph up to
// rounding: the integer op sums exactly and rounds once.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

bool IsConstantOrAbsent(const Value* v) { return v == nullptr || v->is_constant(); }

int64_t Elements(const Value* v) { return v->constant()->num_elements(); }

// The DequantizeLinear producing `v` with a constant scale (and zero point, if any), or null.
Node* DequantizedBy(const Value* v) {
  if (v == nullptr) return nullptr;
  Node* dq = v->producer();
  if (dq == nullptr || dq->op() != "DequantizeLinear" || !IsConstantOrAbsent(dq->input(2)) ||
      !dq->input(1)->is_constant()) {
    return nullptr;
  }
  const DType t = dq->input(0)->type().dtype;
  // blocked scales (opset 21's block_size) are not the per-tensor / per-channel ones the
  // integer kernels take
  if (dq->GetInt("block_size", 0) != 0) return nullptr;
  return t == DType::kUInt8 || t == DType::kInt8 ? dq : nullptr;
}

// The only node reading `v` (which must not be a graph output), or null.
Node* SoleUser(const Graph& graph, const Value* v) {
  if (graph.IsGraphOutput(v)) return nullptr;
  const std::vector<Node*> users = graph.Users(v);
  return users.size() == 1 ? users[0] : nullptr;
}

class FoldQdq : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
    bool changed = false;
    for (Node* node : graph.nodes()) {
      if (node->op() != "Conv" && node->op() != "MatMul") continue;
      if (node->outputs().size() != 1) continue;
      bool kiln_attr = false;
      for (const auto& [key, value] : node->attrs()) kiln_attr |= key.rfind("kiln.", 0) == 0;
      if (kiln_attr || node->inputs().size() > (node->op() == "Conv" ? 3u : 2u)) continue;
      Node* x_dq = DequantizedBy(node->input(0));
      Node* w_dq = DequantizedBy(node->input(1));
      if (x_dq == nullptr || w_dq == nullptr || !w_dq->input(0)->is_constant() || Elements(x_dq->input(1)) != 1)
        continue;
      // The result, through at most one Relu (Conv only), into a QuantizeLinear.
      Node* user = SoleUser(graph, node->output(0));
      Node* relu = nullptr;
      if (user != nullptr && user->op() == "Relu" && node->op() == "Conv") {
        relu = user;
        user = SoleUser(graph, relu->output(0));
      }
      const DType result_type = user != nullptr ? user->output(0)->type().dtype : DType::kUndefined;
      const bool quantized_result = user != nullptr && user->op() == "QuantizeLinear" &&
                                    user->input(1)->is_constant() && IsConstantOrAbsent(user->input(2)) &&
                                    Elements(user->input(1)) == 1 &&
                                    (result_type == DType::kUInt8 || result_type == DType::kInt8);
      if (!WeightScaleFits(node, w_dq)) continue;
      if (!quantized_result) {
        // The result stays f32 (an Add, a pool or a graph output reads it): the op still
        // runs as int8 and writes f32.
        if (node->op() == "MatMul") {
          changed |= FoldMatMulToFloat(graph, node, x_dq, w_dq);
          continue;
        }
        Node* fused = FoldConvToFloat(graph, node, x_dq, w_dq);
        if (fused == nullptr) continue;
        // A Relu that alone reads the result joins it (max(y, 0) on the f32 output).
        Node* only = SoleUser(graph, node->output(0));
        if (only != nullptr && only->op() == "Relu") {
          fused->mutable_attrs()["kiln.relu"] = int64_t{1};
          graph.TakeOver(only->output(0), fused->output(0));
          graph.RemoveNode(only);
        } else {
          graph.TakeOver(node->output(0), fused->output(0));
        }
        graph.RemoveNode(node);
        changed = true;
        continue;
      }
      Node* fused =
          node->op() == "Conv" ? FoldConv(graph, node, x_dq, w_dq, user) : FoldMatMul(graph, node, x_dq, w_dq, user);
      if (fused == nullptr) continue;
      if (relu != nullptr) fused->mutable_attrs()["kiln.relu"] = int64_t{1};
      graph.TakeOver(user->output(0), fused->output(0));
      graph.RemoveNode(user);
      if (relu != nullptr) graph.RemoveNode(relu);
      graph.RemoveNode(node);
      changed = true;
    }
    changed |= QuantizeBeforeMaxPools(graph);
    return changed;
  }

 private:
  // %m = MaxPool(%a) ; %q = QuantizeLinear(%m, s, z)  =>  %aq = QuantizeLinear(%a, s, z) ;
  // %q = MaxPool(%aq), so the pool runs on bytes and fuse folds the QuantizeLinear into a
  // kiln.QLinearConvToFloat before it (ResNet's stem). Exact: rint(v / s) + z, saturated,
  // never decreases as v grows, so the max of the quantized values is the quantized max,
  // and padding (never the max) is the same either way. Per-tensor s and z, u8/s8 results.
  static bool QuantizeBeforeMaxPools(Graph& graph) {
    bool changed = false;
    for (Node* pool : graph.nodes()) {
      if (pool->op() != "MaxPool" || pool->outputs().size() != 1 || pool->input(0)->type().dtype != DType::kFloat32 ||
          !pool->input(0)->type().IsStatic()) {
        continue;
      }
      Node* q = SoleUser(graph, pool->output(0));
      if (q == nullptr || q->op() != "QuantizeLinear" || q->input(0) != pool->output(0) ||
          !q->input(1)->is_constant() || Elements(q->input(1)) != 1 || !IsConstantOrAbsent(q->input(2)) ||
          q->GetInt("block_size", 0) != 0) {
        continue;
      }
      const DType type = q->output(0)->type().dtype;
      if (type != DType::kUInt8 && type != DType::kInt8) continue;
      std::vector<Value*> inputs = {pool->input(0), q->input(1)};
      if (q->input(2) != nullptr) inputs.push_back(q->input(2));
      Node* moved = graph.InsertNodeBefore(pool, "QuantizeLinear", q->name(), inputs,
                                           {graph.UniqueName(pool->input(0)->name() + ".q")}, q->opset());
      moved->mutable_attrs() = q->attrs();
      TensorType bytes = pool->input(0)->type();
      bytes.dtype = type;
      moved->output(0)->set_type(bytes);
      pool->set_input(0, moved->output(0));
      pool->output(0)->set_type(q->output(0)->type());
      graph.TakeOver(q->output(0), pool->output(0));
      graph.RemoveNode(q);
      changed = true;
    }
    return changed;
  }

  // Weights quantized per tensor, or per output channel along the axis the integer op
  // reads them by: a Conv's W [OC, ...] on axis 0, a MatMul's B [K, N] on axis 1.
  static bool WeightScaleFits(const Node* node, const Node* w_dq) {
    const int64_t n = Elements(w_dq->input(1));
    if (n == 1) return true;
    const std::vector<int64_t> wd = w_dq->input(0)->type().StaticDims();
    const int64_t rank = static_cast<int64_t>(wd.size());
    int64_t axis = w_dq->GetInt("axis", 1);
    if (axis < 0) axis += rank;
    if (node->op() == "Conv") return axis == 0 && n == wd[0];
    return rank == 2 && axis == 1 && n == wd[1];
  }

  // A zero point input, or an explicit zero of `type` where the DequantizeLinear has none
  // (the integer ops take them positionally).
  static Value* ZeroPoint(Graph& graph, Node* dq, DType type, const std::string& name) {
    if (dq->input(2) != nullptr) return dq->input(2);
    auto zero = std::make_shared<Tensor>(type, std::vector<int64_t>{});
    return graph.AddConstant(graph.UniqueName(name), zero);
  }

  static Node* FoldConv(Graph& graph, Node* conv, Node* x_dq, Node* w_dq, Node* q) {
    const Value* w = w_dq->input(0);
    const int64_t out_channels = w->type().StaticDims()[0];
    // The bias as int32 at scale xs * ws[oc].
    Value* bias = nullptr;
    if (conv->input(2) != nullptr) {
      std::shared_ptr<const Tensor> b = FloatBias(conv->input(2), out_channels);
      if (b == nullptr) return nullptr;
      const float xs = static_cast<float>(x_dq->input(1)->constant()->GetAsDouble(0));
      const Tensor* ws = w_dq->input(1)->constant().get();
      auto quantized = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{out_channels});
      for (int64_t oc = 0; oc < out_channels; ++oc) {
        const float scale = xs * static_cast<float>(ws->GetAsDouble(ws->num_elements() > 1 ? oc : 0));
        const double v = scale > 0.f ? std::nearbyint(b->GetAsDouble(oc) / scale) : 0.0;
        if (!(std::fabs(v) < 2147483647.0)) return nullptr;
        quantized->data_as<int32_t>()[oc] = static_cast<int32_t>(v);
      }
      bias = graph.AddConstant(graph.UniqueName(conv->name() + ".bias_i32"), quantized);
    }
    std::vector<Value*> inputs = QuantizedOperands(graph, conv, x_dq, w_dq);
    inputs.push_back(q->input(1));
    inputs.push_back(ZeroPoint(graph, q, DType::kUInt8, conv->name() + ".y_zero_point"));
    if (bias != nullptr) inputs.push_back(bias);
    return InsertConv(graph, conv, "QLinearConv", inputs, q->output(0));
  }

  // A Conv's bias as f32 values: a constant, or the DequantizeLinear of a constant (as QDQ
  // models store an int32 bias); null otherwise.
  static std::shared_ptr<const Tensor> FloatBias(const Value* b, int64_t out_channels) {
    if (b->type().dtype != DType::kFloat32 || !b->type().IsStatic() ||
        b->type().StaticDims() != std::vector<int64_t>{out_channels}) {
      return nullptr;
    }
    if (b->is_constant()) return b->constant();
    const Node* dq = b->producer();
    if (dq == nullptr || dq->op() != "DequantizeLinear" || !dq->input(0)->is_constant() ||
        !dq->input(1)->is_constant() || !IsConstantOrAbsent(dq->input(2))) {
      return nullptr;
    }
    const Tensor* q = dq->input(0)->constant().get();
    const Tensor* s = dq->input(1)->constant().get();
    const Tensor* z = dq->input(2) != nullptr ? dq->input(2)->constant().get() : nullptr;
    auto values = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{out_channels});
    for (int64_t oc = 0; oc < out_channels; ++oc) {
      const int64_t zero = z != nullptr ? z->GetAsInt64(z->num_elements() > 1 ? oc : 0) : 0;
      values->data_as<float>()[oc] = static_cast<float>(q->GetAsInt64(oc) - zero) *
                                     static_cast<float>(s->GetAsDouble(s->num_elements() > 1 ? oc : 0));
    }
    return values;
  }

  static Node* FoldConvToFloat(Graph& graph, Node* conv, Node* x_dq, Node* w_dq) {
    const int64_t out_channels = w_dq->input(0)->type().StaticDims()[0];
    std::vector<Value*> inputs = QuantizedOperands(graph, conv, x_dq, w_dq);
    if (conv->input(2) != nullptr) {
      std::shared_ptr<const Tensor> b = FloatBias(conv->input(2), out_channels);
      if (b == nullptr) return nullptr;
      inputs.push_back(conv->input(2)->is_constant() ? conv->input(2)
                                                     : graph.AddConstant(graph.UniqueName(conv->name() + ".bias"), b));
    }
    return InsertConv(graph, conv, "kiln.QLinearConvToFloat", inputs, conv->output(0));
  }

  // The integer op's first six inputs: X (A), its scale and zero point, W (B), its scale
  // and zero point (explicit zeros, named <node>.<x>_zero_point, where the
  // DequantizeLinear has none).
  static std::vector<Value*> QuantizedOperands(Graph& graph, const Node* node, Node* x_dq, Node* w_dq,
                                               const char* x = "x", const char* w = "w") {
    return {x_dq->input(0),
            x_dq->input(1),
            ZeroPoint(graph, x_dq, x_dq->input(0)->type().dtype, absl::StrCat(node->name(), ".", x, "_zero_point")),
            w_dq->input(0),
            w_dq->input(1),
            ZeroPoint(graph, w_dq, w_dq->input(0)->type().dtype, absl::StrCat(node->name(), ".", w, "_zero_point"))};
  }

  // The integer conv `op` before `conv`, with its window attributes, typed as `like`.
  static Node* InsertConv(Graph& graph, Node* conv, const std::string& op, const std::vector<Value*>& inputs,
                          const Value* like) {
    Node* fused = graph.InsertNodeBefore(conv, op, conv->name(), inputs, {graph.UniqueName(like->name() + ".int8")},
                                         conv->opset());
    for (const char* key : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}) {
      auto it = conv->attrs().find(key);
      if (it != conv->attrs().end()) fused->mutable_attrs()[key] = it->second;
    }
    fused->output(0)->set_type(like->type());
    return fused;
  }

  static bool FoldMatMulToFloat(Graph& graph, Node* matmul, Node* a_dq, Node* b_dq) {
    if (b_dq->input(0)->type().shape.size() != 2 || !matmul->output(0)->type().IsStatic()) return false;
    const int64_t n = b_dq->input(0)->type().StaticDims()[1];
    std::vector<Value*> inputs = QuantizedOperands(graph, matmul, a_dq, b_dq, "a", "b");
    // A bias Add (a constant of N values, shaped [N] or [1, ..., N]) that alone reads the
    // result joins it when the sum keeps the result's shape.
    Node* add = SoleUser(graph, matmul->output(0));
    const Value* bias = nullptr;
    if (add != nullptr && add->op() == "Add" && add->output(0)->type() == matmul->output(0)->type()) {
      const Value* other = add->input(0) == matmul->output(0) ? add->input(1) : add->input(0);
      if (other != matmul->output(0) && other->is_constant() && other->type().dtype == DType::kFloat32 &&
          other->constant()->num_elements() == n && !other->type().shape.empty() &&
          other->type().shape.back().size == n) {
        bias = other;
      }
    }
    const Value* result = matmul->output(0);
    if (bias != nullptr) {
      auto flat = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{n});
      std::copy_n(bias->constant()->data_as<float>(), n, flat->data_as<float>());
      inputs.push_back(graph.AddConstant(graph.UniqueName(matmul->name() + ".bias"), flat));
      result = add->output(0);
    }
    Node* fused = graph.InsertNodeBefore(matmul, "kiln.QLinearMatMulToFloat", matmul->name(), inputs,
                                         {graph.UniqueName(result->name() + ".int8")}, matmul->opset());
    fused->output(0)->set_type(result->type());
    graph.TakeOver(const_cast<Value*>(result), fused->output(0));
    if (bias != nullptr) graph.RemoveNode(add);
    graph.RemoveNode(matmul);
    return true;
  }

  static Node* FoldMatMul(Graph& graph, Node* matmul, Node* a_dq, Node* b_dq, Node* q) {
    if (b_dq->input(0)->type().shape.size() != 2) return nullptr;
    std::vector<Value*> inputs = QuantizedOperands(graph, matmul, a_dq, b_dq, "a", "b");
    inputs.push_back(q->input(1));
    inputs.push_back(ZeroPoint(graph, q, DType::kUInt8, matmul->name() + ".y_zero_point"));
    Node* fused = graph.InsertNodeBefore(matmul, "QLinearMatMul", matmul->name(), inputs,
                                         {graph.UniqueName(q->output(0)->name() + ".int8")}, matmul->opset());
    fused->output(0)->set_type(q->output(0)->type());
    return fused;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFoldQdq(const PassInvocation&) { return std::make_unique<FoldQdq>(); }

}  // namespace kiln
