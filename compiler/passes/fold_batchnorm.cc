// fold-batchnorm: folds inference-mode BatchNormalization into the Conv or Gemm before it,
// or turns a lone one into a multiply-add with precomputed constants.
//   %c = Conv(%x, W, b) ; %y = BatchNormalization(%c, s, t, m, v)
//     =>  %y = Conv(%x, W', b')   W'[o] = W[o]·k[o],  b'[o] = (b[o] - m[o])·k[o] + t[o],
//                                  k = s / sqrt(v + eps)
//   %g = Gemm(%a, B, C) ; %y = BatchNormalization(%g, ...)   (channels = Gemm's columns)
//     =>  %y = Gemm(%a, B', C')   column n of B scaled by k[n], C' = beta·C·k + t - m·k
//   %y = BatchNormalization(%x, s, t, m, v)  =>  %y = Add(Mul(%x, k), t - m·k)  (k, t-m·k
//                                  shaped [C, 1, ...] to broadcast over the spatial axes)
#include <cmath>

#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

bool AllConstant(const Node* node, size_t from) {
  for (size_t i = from; i < node->inputs().size(); ++i) {
    if (node->input(i) == nullptr || !node->input(i)->is_constant()) return false;
  }
  return true;
}

class FoldBatchNorm : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
    bool changed = false;
    for (Node* bn : graph.nodes()) {
      if (bn->op() != "BatchNormalization" || bn->outputs().size() != 1 || !AllConstant(bn, 1)) continue;
      if (bn->GetInt("training_mode", 0) != 0) continue;  // normalizes with the batch's statistics
      const Value* x = bn->input(0);
      if (x->type().dtype != DType::kFloat32 || !x->type().IsStatic() || x->type().shape.size() < 2) continue;
      const int64_t channels = x->type().shape[1].size;
      const double eps = bn->GetFloat("epsilon", 1e-5);
      std::vector<double> k(channels), shift(channels);
      for (int64_t c = 0; c < channels; ++c) {
        const double scale = bn->input(1)->constant()->GetAsDouble(c);
        const double bias = bn->input(2)->constant()->GetAsDouble(c);
        const double mean = bn->input(3)->constant()->GetAsDouble(c);
        const double var = bn->input(4)->constant()->GetAsDouble(c);
        k[c] = scale / std::sqrt(var + eps);
        shift[c] = bias - mean * k[c];
      }
      Node* conv = x->producer();
      if (conv != nullptr && conv->op() == "Conv" && graph.Users(x).size() == 1 && !graph.IsGraphOutput(x) &&
          conv->input(1)->is_constant() &&
          (conv->inputs().size() < 3 || conv->input(2) == nullptr || conv->input(2)->is_constant()) &&
          !conv->has_attr("kiln.activation")) {
        FoldIntoConv(graph, conv, bn, k, shift);
      } else if (conv != nullptr && conv->op() == "Gemm" && x->type().shape.size() == 2 && graph.Users(x).size() == 1 &&
                 !graph.IsGraphOutput(x) && conv->input(1)->is_constant() &&
                 conv->input(1)->type().dtype == DType::kFloat32 &&
                 (conv->inputs().size() < 3 || conv->input(2) == nullptr || conv->input(2)->is_constant()) &&
                 !conv->has_attr("kiln.activation")) {
        FoldIntoGemm(graph, conv, bn, k, shift);
      } else {
        ToMultiplyAdd(graph, bn, k, shift);
      }
      changed = true;
    }
    return changed;
  }

 private:
  void FoldIntoConv(Graph& graph, Node* conv, Node* bn, const std::vector<double>& k,
                    const std::vector<double>& shift) {
    const Tensor& w = *conv->input(1)->constant();
    const int64_t out_channels = w.dims()[0];
    const int64_t per_channel = w.num_elements() / out_channels;
    auto new_w = std::make_shared<Tensor>(DType::kFloat32, w.dims());
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t i = 0; i < per_channel; ++i) {
        new_w->data_as<float>()[o * per_channel + i] =
            static_cast<float>(w.data_as<float>()[o * per_channel + i] * k[o]);
      }
    }
    auto new_b = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{out_channels});
    const Value* old_b = conv->inputs().size() > 2 ? conv->input(2) : nullptr;
    for (int64_t o = 0; o < out_channels; ++o) {
      const double b = old_b ? old_b->constant()->GetAsDouble(o) : 0.0;
      new_b->data_as<float>()[o] = static_cast<float>(b * k[o] + shift[o]);
    }
    Value* w_value = graph.AddConstant(graph.UniqueName(conv->input(1)->name() + ".bn"), new_w);
    Value* b_value = graph.AddConstant(graph.UniqueName(conv->name() + ".bias.bn"), new_b);
    Node* fused = graph.InsertNodeBefore(bn, "Conv", conv->name(), {conv->input(0), w_value, b_value},
                                         {graph.UniqueName(bn->output(0)->name() + ".conv")}, conv->opset());
    fused->mutable_attrs() = conv->attrs();
    TakeOver(graph, bn, fused);
    graph.RemoveNode(conv);
  }

  void FoldIntoGemm(Graph& graph, Node* gemm, Node* bn, const std::vector<double>& k,
                    const std::vector<double>& shift) {
    const Tensor& b = *gemm->input(1)->constant();
    const bool trans_b = gemm->GetInt("transB", 0) != 0;
    const int64_t rows = b.dims()[0], cols = b.dims()[1];
    auto new_b = std::make_shared<Tensor>(DType::kFloat32, b.dims());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t n = trans_b ? r : c;  // output column this weight feeds
        new_b->data_as<float>()[r * cols + c] = static_cast<float>(b.data_as<float>()[r * cols + c] * k[n]);
      }
    }
    // C' = beta·C·k + shift, as [M, N] when C was a full matrix, else as [N].
    const std::vector<int64_t> out_dims = gemm->output(0)->type().StaticDims();
    const Value* old_c = gemm->inputs().size() > 2 ? gemm->input(2) : nullptr;
    const bool full =
        old_c != nullptr && NumElements(old_c->type().StaticDims()) == out_dims[0] * out_dims[1] && out_dims[0] > 1;
    const int64_t m = full ? out_dims[0] : 1, n_cols = out_dims[1];
    auto new_c = std::make_shared<Tensor>(DType::kFloat32, full ? out_dims : std::vector<int64_t>{n_cols});
    const double beta = gemm->GetFloat("beta", 1.0);
    int64_t c_strides[2] = {0, 0};
    if (old_c != nullptr) {
      const std::vector<int64_t> c_dims = old_c->type().StaticDims();
      // Broadcast strides of C against [M, N] (C is a scalar, [N], [1, N], [M, 1] or [M, N]).
      const int64_t c_rows = c_dims.size() == 2 ? c_dims[0] : 1;
      const int64_t c_cols = c_dims.empty() ? 1 : c_dims.back();
      c_strides[0] = c_rows == 1 ? 0 : c_cols;
      c_strides[1] = c_cols == 1 ? 0 : 1;
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n_cols; ++j) {
        const double c = old_c ? old_c->constant()->GetAsDouble(i * c_strides[0] + j * c_strides[1]) : 0.0;
        new_c->data_as<float>()[i * n_cols + j] = static_cast<float>(beta * c * k[j] + shift[j]);
      }
    }
    // With an [M, 1] C and M > 1 the result differs per row: keep it full-size.
    if (old_c != nullptr && !full && c_strides[0] != 0) {
      ToMultiplyAdd(graph, bn, k, shift);
      return;
    }
    Value* b_value = graph.AddConstant(graph.UniqueName(gemm->input(1)->name() + ".bn"), new_b);
    Value* c_value = graph.AddConstant(graph.UniqueName(gemm->name() + ".bias.bn"), new_c);
    Node* fused = graph.InsertNodeBefore(bn, "Gemm", gemm->name(), {gemm->input(0), b_value, c_value},
                                         {graph.UniqueName(bn->output(0)->name() + ".gemm")}, gemm->opset());
    fused->mutable_attrs() = gemm->attrs();
    fused->mutable_attrs()["beta"] = 1.0;
    TakeOver(graph, bn, fused);
    graph.RemoveNode(gemm);
  }

  void ToMultiplyAdd(Graph& graph, Node* bn, const std::vector<double>& k, const std::vector<double>& shift) {
    const int64_t rank = static_cast<int64_t>(bn->input(0)->type().shape.size());
    std::vector<int64_t> dims = {static_cast<int64_t>(k.size())};
    for (int64_t i = 2; i < rank; ++i) dims.push_back(1);
    auto scale = std::make_shared<Tensor>(DType::kFloat32, dims);
    auto offset = std::make_shared<Tensor>(DType::kFloat32, dims);
    for (size_t c = 0; c < k.size(); ++c) {
      scale->data_as<float>()[c] = static_cast<float>(k[c]);
      offset->data_as<float>()[c] = static_cast<float>(shift[c]);
    }
    Value* scale_value = graph.AddConstant(graph.UniqueName(bn->name() + ".scale"), scale);
    Value* offset_value = graph.AddConstant(graph.UniqueName(bn->name() + ".offset"), offset);
    Node* mul = graph.InsertNodeBefore(bn, "Mul", bn->name() + ".mul", {bn->input(0), scale_value},
                                       {graph.UniqueName(bn->output(0)->name() + ".scaled")}, bn->opset());
    mul->output(0)->set_type(bn->input(0)->type());
    Node* add = graph.InsertNodeBefore(bn, "Add", bn->name(), {mul->output(0), offset_value},
                                       {graph.UniqueName(bn->output(0)->name() + ".shifted")}, bn->opset());
    TakeOver(graph, bn, add);
  }

  // `replacement` takes over the name, type and uses of `node`'s output.
  void TakeOver(Graph& graph, Node* node, Node* replacement) {
    graph.TakeOver(node->output(0), replacement->output(0));
    graph.RemoveNode(node);
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFoldBatchNorm(const PassInvocation&) { return std::make_unique<FoldBatchNorm>(); }

}  // namespace kiln
