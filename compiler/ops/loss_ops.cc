// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, each one kernel
// (kernels/loss/loss.cc) over X [N, C, d...], a target [N, d...] and optional class weights.
#include "kiln/kernels/loss.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

constexpr NamedCode kReductions[] = {
    {"none", KILN_LOSS_NONE},
    {"sum", KILN_LOSS_SUM},
    {"mean", KILN_LOSS_MEAN},
};

absl::StatusOr<int64_t> Reduction(const Node& node) { return NamedAttr(node, "reduction", "mean", kReductions); }

// Both losses: X [N, C, d...] of a float type, target [N, d...] of int32 or int64, weight
// [C] of X's type; the loss is [N, d...] for reduction none, a scalar otherwise, and a
// second output (SoftmaxCrossEntropyLoss's log_prob) has X's type.
absl::Status InferLoss(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (auto st = RequireStaticInputs(ctx, {0, 1}); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(0).StaticDims(), target = ctx.type(1).StaticDims();
  std::vector<int64_t> expected = x;
  if (x.size() >= 2) expected.erase(expected.begin() + 1);
  if (x.size() < 2 || target != expected) {
    return NodeError(ctx.node, absl::StrCat("target [", absl::StrJoin(target, ","), "] must be X's dims [",
                                            absl::StrJoin(x, ","), "] without the class axis (1)"));
  }
  const DType t = ctx.type(1).dtype;
  if (t != DType::kInt32 && t != DType::kInt64) return NodeError(ctx.node, "target must be int32 or int64");
  if (ctx.has_input(2)) {
    if (auto st = RequireStatic(ctx, 2); !st.ok()) return st;
    if (ctx.type(2).StaticDims() != std::vector<int64_t>{x[1]} || ctx.type(2).dtype != ctx.type(0).dtype) {
      return NodeError(ctx.node, absl::StrCat("weight must be [", x[1], "] of X's type"));
    }
  }
  KILN_ASSIGN_OR_RETURN(const int64_t reduction, Reduction(ctx.node));
  ctx.output_types[0] =
      TensorType::Static(ctx.type(0).dtype, reduction == KILN_LOSS_NONE ? target : std::vector<int64_t>{});
  for (size_t i = 1; i < ctx.output_types.size(); ++i) ctx.output_types[i] = ctx.type(0);
  return absl::OkStatus();
}

absl::StatusOr<kiln_loss_params> LossParams(const Node& node) {
  kiln_loss_params params{};
  KILN_ASSIGN_OR_RETURN(params.reduction, Reduction(node));
  params.has_ignore_index = node.has_attr("ignore_index") ? 1 : 0;
  params.ignore_index = node.GetInt("ignore_index", 0);
  return params;
}

template <typename K>
absl::StatusOr<KernelCall> LowerLoss(const Node& node) {
  KILN_ASSIGN_OR_RETURN(const kiln_loss_params params, LossParams(node));
  return CallWithParams<K>(PassAllInputs(node), params);
}

}  // namespace

void RegisterLossOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"NegativeLogLikelihoodLoss", 2, 3, 0, InferLoss, LowerLoss<kernel::nll_loss>},
      {"SoftmaxCrossEntropyLoss", 2, 3, 0, InferLoss, LowerLoss<kernel::softmax_cross_entropy>},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
