// If, Loop and Scan: ops whose work is a subgraph (closed: the values a body reads from
// outside are the node's last inputs, kCapturedAttr in ir.h). Type inference gives each
// body's inputs their types from the node and runs Kiln's inference over the body; the
// node's output types follow from the bodies' outputs. These ops have no kernel lowering:
// codegen compiles each body to a function of its own (codegen/control_glue.cc).
//   If:   outputs are the branches' outputs merged (a dim that differs becomes unknown)
//   Loop: loop-carried outputs as carried (merged until stable), scan outputs [?, ...]
//   Scan: state outputs as the states, scan outputs the body's with the sequence dim added
#include "op_helpers.h"

namespace kiln::ops {
namespace {

// How many times a loop's carried types are widened before inference gives up: each round
// turns at least one dim unknown, so a stable type comes well before this.
constexpr int kMaxWidenings = 16;

// An unknown dim, as the IR parser reads "?".
Dim Unknown() { return Dim{}; }

// The type both `a` and `b` fit: the same element type and rank, dims that agree kept.
absl::StatusOr<TensorType> MergeTypes(const Node& node, const TensorType& a, const TensorType& b, const char* what,
                                      size_t index) {
  if (a.dtype != b.dtype) {
    return NodeError(node, absl::StrCat(what, " ", index, " is ", DTypeName(a.dtype), " in one place and ",
                                        DTypeName(b.dtype), " in another"));
  }
  // A value that is present in one place and optional in another is optional.
  const auto plain = [](ValueKind k) { return k == ValueKind::kOptionalSequence ? ValueKind::kSequence : k; };
  if (a.kind != b.kind && a.is_optional() != b.is_optional() && plain(a.kind) == plain(b.kind)) {
    const TensorType& optional = a.is_optional() ? a : b;
    const TensorType& present = a.is_optional() ? b : a;
    return MergeTypes(node, optional, present.WithKind(optional.kind), what, index);
  }
  if (a.kind != b.kind) {
    return NodeError(node, absl::StrCat(what, " ", index, " is a ", ValueKindName(a.kind), " in one place and a ",
                                        ValueKindName(b.kind), " in another"));
  }
  // A sequence's (or an optional's) element may change rank from one element to the next.
  if (!a.is_tensor() && (!a.has_shape || !b.has_shape || a.shape.size() != b.shape.size())) {
    TensorType merged = a;
    merged.has_shape = false;
    merged.shape.clear();
    return merged;
  }
  if (!a.has_shape || !b.has_shape || a.shape.size() != b.shape.size()) {
    return NodeError(node, absl::StrCat(what, " ", index, " has ranks that differ (", PrintType(a), " and ",
                                        PrintType(b), "); Kiln needs one rank"));
  }
  TensorType merged = a;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (!(a.shape[d] == b.shape[d])) merged.shape[d] = Unknown();
  }
  return merged;
}

// Gives `body`'s inputs these types and infers the rest of it.
absl::Status InferBody(const Node& node, const std::string& key, Graph& body, const std::vector<TensorType>& types) {
  if (body.inputs().size() != types.size()) {
    return NodeError(
        node, absl::StrCat("subgraph '", key, "' has ", body.inputs().size(), " inputs; expected ", types.size()));
  }
  for (size_t i = 0; i < types.size(); ++i) body.inputs()[i]->set_type(types[i]);
  if (absl::Status s = InferTypes(body); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(NodeLabel(node), ": subgraph '", key, "': ", s.message()));
  }
  for (const Value* out : body.outputs()) {
    if (out->type().dtype == DType::kUndefined || (!out->type().has_shape && out->type().is_tensor())) {
      return NodeError(node, absl::StrCat("subgraph '", key, "' output '", out->name(), "' has no type"));
    }
  }
  return absl::OkStatus();
}

// The types of the node's captured inputs (its last num_captured()).
std::vector<TensorType> CapturedTypes(const InferContext& ctx) {
  std::vector<TensorType> types;
  const size_t n = ctx.input_types.size();
  for (size_t i = n - std::min(n, ctx.node.num_captured()); i < n; ++i) types.push_back(ctx.type(i));
  return types;
}

absl::StatusOr<Graph*> RequireGraph(const Node& node, const char* key) {
  Graph* graph = node.GetGraph(key);
  if (graph == nullptr) return NodeError(node, absl::StrCat("needs the graph attribute '", key, "'"));
  return graph;
}

absl::Status RequireScalar(const InferContext& ctx, size_t i, DType dtype, const char* what) {
  if (!ctx.has_input(i)) return absl::OkStatus();
  const TensorType& type = ctx.type(i);
  bool one = type.has_shape;
  for (const Dim& d : type.shape) one = one && d.known() && d.size == 1;
  if (type.dtype != dtype || !one) {
    return NodeError(ctx.node, absl::StrCat(what, " must be one ", DTypeName(dtype), ", is ", PrintType(type)));
  }
  return absl::OkStatus();
}

absl::Status InferIf(InferContext& ctx) {
  const Node& node = ctx.node;
  KILN_RETURN_IF_ERROR(RequireScalar(ctx, 0, DType::kBool, "the condition"));
  KILN_ASSIGN_OR_RETURN(Graph * then_branch, RequireGraph(node, "then_branch"));
  KILN_ASSIGN_OR_RETURN(Graph * else_branch, RequireGraph(node, "else_branch"));
  const std::vector<TensorType> captured = CapturedTypes(ctx);
  KILN_RETURN_IF_ERROR(InferBody(node, "then_branch", *then_branch, captured));
  KILN_RETURN_IF_ERROR(InferBody(node, "else_branch", *else_branch, captured));
  const size_t n = ctx.output_types.size();
  if (then_branch->outputs().size() != n || else_branch->outputs().size() != n) {
    return NodeError(node, absl::StrCat("has ", n, " outputs, its branches ", then_branch->outputs().size(), " and ",
                                        else_branch->outputs().size()));
  }
  // A condition known now (computed from known dims, say: torch's squeeze of a dim that
  // may be 1) takes one branch, so the other's types need not fit: fold-constants inlines
  // the taken one.
  if (const Tensor* cond = ctx.input_constants[0]; cond != nullptr && cond->num_elements() == 1) {
    const Graph& taken = cond->GetAsInt64(0) != 0 ? *then_branch : *else_branch;
    for (size_t i = 0; i < n; ++i) ctx.output_types[i] = taken.outputs()[i]->type();
    return absl::OkStatus();
  }
  for (size_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(ctx.output_types[i], MergeTypes(node, then_branch->outputs()[i]->type(),
                                                          else_branch->outputs()[i]->type(), "output", i));
  }
  return absl::OkStatus();
}

// Infers `body` with its state inputs (from `first`, one per state) widened until the
// states it returns (from output `first_out`) fit them; the widened types.
absl::StatusOr<std::vector<TensorType>> InferCarried(const Node& node, const std::string& key, Graph& body,
                                                     std::vector<TensorType> types, size_t first, size_t num_states,
                                                     size_t first_out) {
  for (int round = 0; round < kMaxWidenings; ++round) {
    KILN_RETURN_IF_ERROR(InferBody(node, key, body, types));
    bool stable = true;
    for (size_t k = 0; k < num_states; ++k) {
      const TensorType& in = types[first + k];
      KILN_ASSIGN_OR_RETURN(TensorType merged,
                            MergeTypes(node, in, body.outputs()[first_out + k]->type(), "loop-carried value", k));
      stable = stable && merged == in;
      types[first + k] = std::move(merged);
    }
    if (stable) return types;
  }
  return NodeError(node, "the loop-carried types do not settle");
}

absl::Status InferLoop(InferContext& ctx) {
  const Node& node = ctx.node;
  KILN_ASSIGN_OR_RETURN(Graph * body, RequireGraph(node, "body"));
  const size_t captured = node.num_captured();
  if (ctx.input_types.size() < 2 + captured) return NodeError(node, "needs the trip count and condition inputs");
  KILN_RETURN_IF_ERROR(RequireScalar(ctx, 0, DType::kInt64, "the trip count"));
  KILN_RETURN_IF_ERROR(RequireScalar(ctx, 1, DType::kBool, "the condition"));
  const size_t num_carried = ctx.input_types.size() - 2 - captured;
  if (body->outputs().size() < 1 + num_carried || ctx.output_types.size() + 1 != body->outputs().size()) {
    return NodeError(node, absl::StrCat("body has ", body->outputs().size(), " outputs; expected the condition, ",
                                        num_carried, " loop-carried values and one per scan output"));
  }
  std::vector<TensorType> types = {TensorType::Static(DType::kInt64, {}), TensorType::Static(DType::kBool, {})};
  for (size_t k = 0; k < num_carried; ++k) types.push_back(ctx.type(2 + k));
  for (TensorType& t : CapturedTypes(ctx)) types.push_back(std::move(t));
  KILN_ASSIGN_OR_RETURN(types, InferCarried(node, "body", *body, std::move(types), 2, num_carried, 1));
  const TensorType& cond = body->outputs()[0]->type();
  if (cond.dtype != DType::kBool || !cond.IsStatic() || NumElements(cond.StaticDims()) != 1) {
    return NodeError(node, absl::StrCat("the body's condition output must be one bool, is ", PrintType(cond)));
  }
  // ONNX types Loop's outputs as the body's: a carried optional sequence the body returns
  // as a sequence is a sequence out of the loop (a run of no iteration hands the input over
  // as is: an empty one reads as the empty sequence, its length the glue's 0).
  for (size_t k = 0; k < num_carried; ++k) {
    ctx.output_types[k] = types[2 + k];
    const ValueKind last = body->outputs()[1 + k]->type().kind;
    const ValueKind kind = ctx.output_types[k].kind;
    if (kind == ValueKind::kOptionalSequence && last == ValueKind::kSequence) {
      ctx.output_types[k] = ctx.output_types[k].WithKind(last);
    }
  }
  for (size_t k = num_carried; k < ctx.output_types.size(); ++k) {
    TensorType scan = body->outputs()[1 + k]->type();
    scan.shape.insert(scan.shape.begin(), Unknown());
    ctx.output_types[k] = std::move(scan);
  }
  return absl::OkStatus();
}

// Scan's layout, by opset: 8 has a batch dim before everything and an optional
// sequence_lens input first; 9 on has per-input axes and directions.
struct ScanLayout {
  size_t first_state = 0, num_states = 0, num_scan_inputs = 0;
  int64_t batch = 0;  // dims before the scanned one: 1 at opset 8
};

absl::StatusOr<ScanLayout> ScanLayoutOf(const InferContext& ctx) {
  const Node& node = ctx.node;
  ScanLayout layout;
  layout.batch = node.opset() < 9 ? 1 : 0;
  layout.first_state = node.opset() < 9 ? 1 : 0;
  if (node.opset() < 9 && ctx.has_input(0)) return NodeError(node, "sequence_lens is not supported");
  const int64_t m = node.GetInt("num_scan_inputs", 0);
  const size_t own = ctx.input_types.size() - std::min(ctx.input_types.size(), node.num_captured());
  if (m < 1 || static_cast<size_t>(m) + layout.first_state > own) {
    return NodeError(node, absl::StrCat("num_scan_inputs ", m, " does not fit its ", own, " inputs"));
  }
  layout.num_scan_inputs = static_cast<size_t>(m);
  layout.num_states = own - layout.first_state - layout.num_scan_inputs;
  return layout;
}

// A scan input's or output's axis (opset 9 on; opset 8 scans dim 1 after the batch).
absl::StatusOr<int64_t> ScanAxis(const Node& node, const char* attr, size_t index, int64_t rank) {
  if (node.opset() < 9) return 1;
  const std::vector<int64_t> axes = node.GetInts(attr);
  return NormalizeAxis(node, index < axes.size() ? axes[index] : 0, rank, attr);
}

absl::Status InferScan(InferContext& ctx) {
  const Node& node = ctx.node;
  KILN_ASSIGN_OR_RETURN(Graph * body, RequireGraph(node, "body"));
  KILN_ASSIGN_OR_RETURN(ScanLayout layout, ScanLayoutOf(ctx));
  std::vector<TensorType> types;
  for (size_t k = 0; k < layout.num_states; ++k) {
    TensorType t = ctx.type(layout.first_state + k);
    if (!t.has_shape || static_cast<int64_t>(t.shape.size()) < layout.batch)
      return NodeError(node, "a state has no batch dim");
    t.shape.erase(t.shape.begin(), t.shape.begin() + layout.batch);
    types.push_back(std::move(t));
  }
  Dim length = Unknown();
  for (size_t k = 0; k < layout.num_scan_inputs; ++k) {
    TensorType t = ctx.type(layout.first_state + layout.num_states + k);
    const int64_t rank = static_cast<int64_t>(t.shape.size());
    if (!t.has_shape || rank < 1 + layout.batch)
      return NodeError(node, absl::StrCat("scan input ", k, " has no scan dim"));
    KILN_ASSIGN_OR_RETURN(int64_t axis, ScanAxis(node, "scan_input_axes", k, rank));
    if (k == 0) length = t.shape[static_cast<size_t>(axis)];
    t.shape.erase(t.shape.begin() + axis);
    if (layout.batch > 0) t.shape.erase(t.shape.begin());
    types.push_back(std::move(t));
  }
  for (TensorType& t : CapturedTypes(ctx)) types.push_back(std::move(t));
  const size_t num_outputs = ctx.output_types.size();
  if (body->outputs().size() != num_outputs || num_outputs < layout.num_states) {
    return NodeError(node, absl::StrCat("body has ", body->outputs().size(), " outputs, the node ", num_outputs));
  }
  KILN_ASSIGN_OR_RETURN(types, InferCarried(node, "body", *body, std::move(types), 0, layout.num_states, 0));
  const std::vector<Dim> batch(ctx.has_input(layout.first_state + layout.num_states) && layout.batch > 0
                                   ? std::vector<Dim>{ctx.type(layout.first_state + layout.num_states).shape[0]}
                                   : std::vector<Dim>{});
  for (size_t k = 0; k < num_outputs; ++k) {
    TensorType t = k < layout.num_states ? types[k] : body->outputs()[k]->type();
    if (k >= layout.num_states) {
      const int64_t rank = static_cast<int64_t>(t.shape.size()) + 1;
      KILN_ASSIGN_OR_RETURN(int64_t axis, ScanAxis(node, "scan_output_axes", k - layout.num_states, rank));
      t.shape.insert(t.shape.begin() + (layout.batch > 0 ? 0 : axis), length);
    }
    t.shape.insert(t.shape.begin(), batch.begin(), batch.end());
    ctx.output_types[k] = std::move(t);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterControlOps(Registry& registry) {
  // Inputs: If (cond, captured...), Loop (M, cond, carried..., captured...), Scan
  // ([sequence_lens,] states..., scan inputs..., captured...); M, cond and sequence_lens
  // may be left out.
  constexpr int kMany = 1 << 16;
  OpSchema if_op = Schema("If", 1, kMany);
  if_op.infer = InferIf;
  if_op.decided_inputs = 1u << 0;
  registry.Add(std::move(if_op));
  OpSchema loop = Schema("Loop", 0, kMany);
  loop.infer = InferLoop;
  registry.Add(std::move(loop));
  OpSchema scan = Schema("Scan", 0, kMany);
  scan.infer = InferScan;
  registry.Add(std::move(scan));
}

}  // namespace kiln::ops
