// bf16: marks the products that run in bf16 (`--precision bf16` on a target with
// avx512bf16; the driver leaves the pass out elsewhere). Codegen then lowers each marked
// node to the bf16 kernels (ops/bf16_ops.cc, kernels/bf16): the weight stored as bf16,
// pre-packed, in place of its f32 copy, the activation rounded to bf16 as it is packed,
// products summed in f32. Every other node stays f32; so does the interpreter, which
// ignores the mark (the accuracy report compares the two).
//   %y = Conv(%x, W, b)      (W a constant f32 weight)
//     =>  %y = Conv(%x, W, b) {kiln.precision="bf16"}
// Marked: f32 Conv with a constant weight and at least 4 output channels per group (as the
// f32 implicit GEMM: depthwise convolutions stay f32), MatMul with a constant 2-D B, and
// Gemm with a constant B, no transA, alpha 1 and C absent or a row of N with beta 1.
// Option winograd=f32 leaves unmarked the convs that run as Winograd F(4x4, 3x3) (2-D 3x3,
// stride and dilation 1, one group, input channels a multiple of 8, output channels of 16):
// its transforms amplify bf16's rounding (a layer's error measured 3-10x a direct conv's).
// 3x3x3 convs that f32 runs as its 3-D Winograd stay f32 always: bf16 has no 3-D Winograd,
// and its direct conv does six times the multiplies.
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

bool IsStaticF32(const Value* v) { return v != nullptr && v->type().IsStatic() && v->type().dtype == DType::kFloat32; }

bool ConvTakesBf16(const Node& node) {
  const Value* w = node.input(1);
  if (!IsStaticF32(node.input(0)) || !IsStaticF32(w) || !w->is_constant()) return false;
  const std::vector<int64_t> wd = w->type().StaticDims();
  const int64_t group = node.GetInt("group", 1);
  return wd.size() >= 3 && group > 0 && wd[0] % group == 0 && wd[0] / group >= 4;
}

bool MatMulTakesBf16(const Node& node) {
  const Value* b = node.input(1);
  if (!IsStaticF32(node.input(0)) || !IsStaticF32(b) || !b->is_constant()) return false;
  return b->type().StaticDims().size() == 2 && node.input(0)->type().StaticDims().size() >= 2;
}

bool GemmTakesBf16(const Node& node) {
  const Value* b = node.input(1);
  if (!IsStaticF32(node.input(0)) || !IsStaticF32(b) || !b->is_constant()) return false;
  if (node.GetInt("transA", 0) != 0 || node.GetFloat("alpha", 1.0) != 1.0) return false;
  const Value* c = node.input(2);
  if (c == nullptr) return true;
  const std::vector<int64_t> bd = b->type().StaticDims();
  const int64_t n = node.GetInt("transB", 0) != 0 ? bd[0] : bd[1];
  if (!IsStaticF32(c) || node.GetFloat("beta", 1.0) != 1.0) return false;
  const std::vector<int64_t> cd = c->type().StaticDims();
  return (cd.size() == 1 && cd[0] == n) || (cd.size() == 2 && cd[0] == 1 && cd[1] == n);
}

// A conv the f32 lowering may run as Winograd (ops/nn_ops.cc LowerWinogradConv).
bool WinogradShaped(const Node& node) {
  const std::vector<int64_t> xd = node.input(0)->type().StaticDims(), wd = node.input(1)->type().StaticDims();
  if (xd.size() != 4 || wd[2] != 3 || wd[3] != 3 || node.GetInt("group", 1) != 1) return false;
  for (int64_t s : node.GetInts("strides", {1, 1})) {
    if (s != 1) return false;
  }
  for (int64_t d : node.GetInts("dilations", {1, 1})) {
    if (d != 1) return false;
  }
  return xd[1] % 8 == 0 && wd[0] % 16 == 0;
}

class Bf16Products : public Pass {
 public:
  explicit Bf16Products(bool winograd_f32) : winograd_f32_(winograd_f32) {}

  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    bool changed = false;
    for (Node* node : graph.nodes()) {
      if (node->GetString("kiln.precision", "") == "bf16") continue;
      const bool takes = (node->op() == "Conv" && ConvTakesBf16(*node) && !(winograd_f32_ && WinogradShaped(*node)) &&
                          !TakesWinograd3d(*node)) ||
                         (node->op() == "MatMul" && MatMulTakesBf16(*node)) ||
                         (node->op() == "Gemm" && GemmTakesBf16(*node));
      if (!takes) continue;
      node->mutable_attrs()["kiln.precision"] = std::string("bf16");
      ++context.bf16_nodes;
      changed = true;
    }
    return changed;
  }

 private:
  bool winograd_f32_;
};

}  // namespace

std::unique_ptr<Pass> CreateBf16Products(const PassInvocation& options) {
  return std::make_unique<Bf16Products>(options.Choice("winograd") == "f32");
}

}  // namespace kiln
