// legalize-float16: an op on f16 or bf16 values without a native kernel for them (every op
// but the byte-moving ones, NarrowFloatComputedInFloat32) computes in f32 between Casts:
//   %y: f16 = Op(%a: f16, %i: i64)
//   =>  %a.f32 = Cast[to=f32](%a) ; %y.f32 = Op(%a.f32, %i) ; %y = Cast[to=f16](%y.f32)
// Values between ops stay in the narrow type; each Cast back rounds to nearest even, so an
// elementwise op's result is the correctly rounded one. Where an elementwise op is on
// either side of such a value, its two Casts are one rounding op that fuse takes into the
// elementwise loop (the same numbers, no pass over memory):
//   %r = Cast[to=f16](%v: f32) ; %w = Cast[to=f32](%r)  =>  %w = kiln.RoundToFloat16(%v)
// The compiler runs it before every pipeline, since codegen lowers such ops in f32 only.
#include "absl/strings/str_cat.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

Node* InsertCast(Graph& graph, Node* anchor, Value* in, DType to, const std::string& name) {
  Node* cast =
      graph.InsertNodeBefore(anchor, "Cast", graph.UniqueName(name), {in}, {graph.UniqueName(name)}, anchor->opset());
  cast->mutable_attrs()["to"] = static_cast<int64_t>(to);
  TensorType type = in->type();
  type.dtype = to;
  cast->output(0)->set_type(type);
  return cast;
}

// `node` as the same op on f32 inputs, its narrow outputs Cast back; `node` is removed.
void ComputeInFloat32(Graph& graph, Node* node) {
  std::vector<Value*> inputs = node->inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr || !IsNarrowFloat(inputs[i]->type().dtype)) continue;
    inputs[i] =
        InsertCast(graph, node, inputs[i], DType::kFloat32, absl::StrCat(node->name(), ".in", i, ".f32"))->output(0);
  }
  std::vector<std::string> output_names;
  for (size_t i = 0; i < node->outputs().size(); ++i)
    output_names.push_back(graph.UniqueName(absl::StrCat(node->output(i)->name(), ".f32")));
  Node* wide = graph.InsertNodeBefore(node, node->op(), node->name(), inputs, output_names, node->opset());
  wide->mutable_attrs() = node->attrs();
  for (size_t i = 0; i < node->outputs().size(); ++i) {
    Value* narrow = node->output(i);
    TensorType type = narrow->type();
    if (!IsNarrowFloat(type.dtype)) {
      wide->output(i)->set_type(type);
      graph.TakeOver(narrow, wide->output(i));
      continue;
    }
    type.dtype = DType::kFloat32;
    wide->output(i)->set_type(type);
    Node* back = InsertCast(graph, node, wide->output(i), narrow->type().dtype, absl::StrCat(narrow->name(), ".back"));
    graph.TakeOver(narrow, back->output(0));
  }
  graph.RemoveNode(node);
}

bool IsCastTo(const Node* node, DType to) {
  return node != nullptr && node->op() == "Cast" && node->GetInt("to", 0) == static_cast<int64_t>(to);
}

bool AllScalarUsers(const Graph& graph, const Value* value) {
  if (graph.IsGraphOutput(value)) return false;
  for (const Node* user : graph.Users(value)) {
    if (!AsScalarOp(*user)) return false;
  }
  return true;
}

// `widen` = Cast[to=f32](Cast[to=narrow](%v: f32)) as one rounding op where %v comes from
// an elementwise op or goes only to elementwise ops; whether it rewrote.
bool RoundInPlaceOfCasts(Graph& graph, Node* widen) {
  if (!IsCastTo(widen, DType::kFloat32)) return false;
  Value* narrow = widen->input(0);
  Node* narrowing = narrow->producer();
  if (!IsNarrowFloat(narrow->type().dtype) || !IsCastTo(narrowing, narrow->type().dtype)) return false;
  Value* value = narrowing->input(0);
  if (value->type().dtype != DType::kFloat32) return false;
  const bool elementwise_before = value->producer() != nullptr && AsScalarOp(*value->producer());
  if (!elementwise_before && !AllScalarUsers(graph, widen->output(0))) return false;
  const char* op = narrow->type().dtype == DType::kFloat16 ? kRoundToFloat16Op : kRoundToBFloat16Op;
  Node* round =
      graph.InsertNodeBefore(widen, op, widen->name(), {value}, {graph.UniqueName(widen->name())}, widen->opset());
  round->output(0)->set_type(widen->output(0)->type());
  const bool narrow_dies = graph.Users(narrow).size() == 1 && !graph.IsGraphOutput(narrow);
  graph.TakeOver(widen->output(0), round->output(0));
  graph.RemoveNode(widen);
  if (narrow_dies) graph.RemoveNode(narrowing);
  return true;
}

class LegalizeFloat16 : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext&) override {
    bool changed = false;
    for (Node* node : graph.nodes()) {
      if (NarrowFloatComputedInFloat32(*node) == DType::kUndefined) continue;
      ComputeInFloat32(graph, node);
      changed = true;
    }
    if (!changed) return false;
    graph.Compact();
    for (Node* node : graph.nodes()) RoundInPlaceOfCasts(graph, node);
    graph.Compact();
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateLegalizeFloat16(const PassInvocation&) { return std::make_unique<LegalizeFloat16>(); }

}  // namespace kiln
