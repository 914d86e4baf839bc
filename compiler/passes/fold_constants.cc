// fold-constants: evaluates nodes whose inputs are all constants with the reference
// interpreter, and ops decided by static types alone (Shape, Size).
//   %s = Shape(%x : f32[1,3,4])        =>  %s = constant i64[3] [1, 3, 4]
//   %y = Add(const [1], const [2])     =>  %y = constant [3]
//   %y = If(const [1], %a) {then_branch=graph t(%a'), ...}  =>  t's nodes on %a, %y their result
//   %d = Gather(Shape(%x : f32[?,1]), 1)  =>  %d = constant i64[] [1]   (the dims picked are known)
// and folds inside the bodies of If, Loop and Scan. Random ops (OpSchema::random:
// RandomUniform, Bernoulli, ...) stay: each run draws anew.
#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

// Folding must not blow up the artifact: a result may grow past its inputs only while
// it stays small (Expand or ConstantOfShape of a big shape stay as code).
constexpr int64_t kSmallResultBytes = 64 * 1024;

// An If whose condition is a constant becomes the taken branch's nodes, placed before it
// and reading the If's captured inputs (the branch's inputs, in order).
void InlineTakenBranch(Graph& graph, Node* node) {
  const bool taken = node->input(0)->constant()->GetAsInt64(0) != 0;
  const Graph& branch = *node->GetGraph(taken ? "then_branch" : "else_branch");
  std::map<const Value*, Value*> mapped;
  for (size_t i = 0; i < branch.inputs().size(); ++i) mapped[branch.inputs()[i]] = node->input(1 + i);
  auto map = [&](const Value* v) -> Value* {
    if (v == nullptr) return nullptr;
    if (auto it = mapped.find(v); it != mapped.end()) return it->second;
    Value* constant = graph.AddConstant(graph.UniqueName(v->name()), v->constant());  // a branch constant
    return mapped[v] = constant;
  };
  for (const Node* inner : branch.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* in : inner->inputs()) inputs.push_back(map(in));
    std::vector<std::string> names;
    for (const Value* out : inner->outputs()) names.push_back(graph.UniqueName(out->name()));
    Node* copy = graph.InsertNodeBefore(node, inner->op(), absl::StrCat(node->name(), ".", inner->name()), inputs,
                                        names, inner->opset());
    copy->mutable_attrs() = inner->attrs();  // nested bodies are closed: shared as they are
    for (size_t k = 0; k < inner->outputs().size(); ++k) {
      copy->output(k)->set_type(inner->output(k)->type());
      mapped[inner->output(k)] = copy->output(k);
    }
  }
  for (size_t k = 0; k < node->outputs().size(); ++k) {
    Value* result = map(branch.outputs()[k]);
    if (result->producer() == nullptr || result->producer() == node) {  // an input or a constant
      Node* identity = graph.InsertNodeBefore(node, "Identity", absl::StrCat(node->name(), ".out", k), {result},
                                              {graph.UniqueName(node->output(k)->name())}, node->opset());
      identity->output(0)->set_type(result->type());
      result = identity->output(0);
    }
    graph.TakeOver(node->output(k), result);
  }
  graph.RemoveNode(node);
}

class FoldConstants : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    bool changed = false;
    for (Node* node : graph.nodes()) {
      const OpSchema* schema = FindOp(node->op());
      if (schema == nullptr || schema->random) continue;
      if (node->op() == "If" && node->input(0) != nullptr && node->input(0)->is_constant() &&
          node->GetGraph("then_branch") != nullptr && node->GetGraph("else_branch") != nullptr) {
        InlineTakenBranch(graph, node);
        changed = true;
        continue;
      }
      if (node->has_subgraphs()) {  // folded inside: a body's Shape of a static value, say
        for (const auto& [key, body] : node->subgraphs()) {
          KILN_ASSIGN_OR_RETURN(bool folded, Run(*body, context));
          if (folded) body->Compact();
          changed |= folded;
        }
        continue;
      }
      if (std::optional<Tensor> dims = KnownDimsPicked(*node); dims.has_value()) {
        graph.SetConstant(node->output(0), std::make_shared<const Tensor>(std::move(*dims)));
        graph.RemoveNode(node);
        changed = true;
        continue;
      }
      std::vector<const Tensor*> args;
      int64_t input_bytes = 0;
      bool foldable = true;
      if (schema->from_types) {
        foldable = node->input(0) != nullptr && node->input(0)->type().IsStatic();
      } else {
        for (const Value* in : node->inputs()) {
          if (in == nullptr) {
            args.push_back(nullptr);
            continue;
          }
          if (!in->is_constant()) {
            foldable = false;
            break;
          }
          args.push_back(in->constant().get());
          input_bytes += in->constant()->size_bytes();
        }
      }
      if (!foldable) continue;
      int64_t output_bytes = 0;
      for (const Value* out : node->outputs()) {
        if (!out->type().IsStatic())
          foldable = false;
        else
          output_bytes += NumElements(out->type().StaticDims()) * DTypeSize(out->type().dtype);
      }
      if (!foldable || (output_bytes > kSmallResultBytes && output_bytes > input_bytes)) continue;
      absl::StatusOr<std::vector<Tensor>> results = EvaluateNode(*node, args);
      if (!results.ok()) return results.status();
      for (size_t i = 0; i < results->size(); ++i) {
        graph.SetConstant(node->output(i), std::make_shared<const Tensor>(std::move((*results)[i])));
      }
      graph.RemoveNode(node);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFoldConstants(const PassInvocation&) { return std::make_unique<FoldConstants>(); }

}  // namespace kiln
