// fold-constants: evaluates nodes whose inputs are all constants with the reference
// interpreter, and ops decided by static types alone (Shape, Size).
//   %s = Shape(%x : f32[1,3,4])        =>  %s = constant i64[3] [1, 3, 4]
//   %y = Add(const [1], const [2])     =>  %y = constant [3]
#include "kiln/common/status.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

// Folding must not blow up the artifact: a result may grow past its inputs only while
// it stays small (Expand or ConstantOfShape of a big shape stay as code).
constexpr int64_t kSmallResultBytes = 64 * 1024;

class FoldConstants : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    bool changed = false;
    for (Node* node : graph.nodes()) {
      const OpSchema* schema = FindOp(node->op());
      if (schema == nullptr) continue;
      if (node->has_subgraphs()) {  // folded inside: a body's Shape of a static value, say
        for (const auto& [key, body] : node->subgraphs()) {
          KILN_ASSIGN_OR_RETURN(bool folded, Run(*body, context));
          if (folded) body->Compact();
          changed |= folded;
        }
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
