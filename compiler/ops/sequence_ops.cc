// Sequence and optional ops: SequenceEmpty/Construct/Insert/Erase/At/Length,
// SplitToSequence, ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement,
// SequenceMap (typed only) and Identity over sequences and optionals. Their values exist only at run time, so every
// one runs in the run-time-shape glue as a kernel of kernels/sequence/ that makes its own
// outputs (kiln/kernels/sequence.h); type inference tracks the element's dtype and what
// is known of its shape.
#include "kiln/kernels/movement.h"
#include "kiln/kernels/sequence.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

absl::Status RequireKind(const InferContext& ctx, size_t i, bool want_sequence) {
  if (!ctx.has_input(i)) return NodeError(ctx.node, absl::StrCat("input ", i, " is required"));
  const TensorType& t = ctx.type(i);
  if (want_sequence ? t.kind != ValueKind::kSequence : !t.is_tensor()) {
    return NodeError(ctx.node, absl::StrCat("input ", i, " is a ", ValueKindName(t.kind), ", expected a ",
                                            want_sequence ? "sequence" : "tensor"));
  }
  return absl::OkStatus();
}

// What two element types have in common: the dtype (which must agree), and the dims where
// both ranks and sizes agree (an unknown dim elsewhere, an unknown rank where ranks differ).
absl::StatusOr<TensorType> Merge(const Node& node, const TensorType& a, const TensorType& b) {
  if (a.dtype != b.dtype) {
    return NodeError(node, absl::StrCat("elements of types ", DTypeName(a.dtype), " and ", DTypeName(b.dtype),
                                        " cannot share a sequence"));
  }
  TensorType t = a.Element();
  if (!a.has_shape || !b.has_shape || a.shape.size() != b.shape.size()) {
    t.has_shape = false;
    t.shape.clear();
    return t;
  }
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (!(a.shape[d] == b.shape[d])) t.shape[d] = Dim{};
  }
  return t;
}

KernelCall SequenceCall(const char* kernel, const Node& node, const kiln_sequence_params& params) {
  KernelCall call{kernel, PassAllInputs(node)};
  call.params.Set(params);
  call.allocates_outputs = true;
  return call;
}

// A lowering to `kernel` over all the node's inputs with these parameters.
std::function<absl::StatusOr<KernelCall>(const Node&)> Lower(const char* kernel, kiln_sequence_params params = {}) {
  return
      [kernel, params](const Node& node) -> absl::StatusOr<KernelCall> { return SequenceCall(kernel, node, params); };
}

void RegisterSequenceBuilders(Registry& registry) {
  OpSchema empty = Schema("SequenceEmpty", 0, 0);
  empty.infer = [](InferContext& ctx) -> absl::Status {
    TensorType t;
    t.dtype = static_cast<DType>(ctx.node.GetInt("dtype", static_cast<int64_t>(DType::kFloat32)));
    if (DTypeSize(t.dtype) == 0) return NodeError(ctx.node, "dtype is not a supported element type");
    ctx.output_types[0] = t.WithKind(ValueKind::kSequence);
    return absl::OkStatus();
  };
  empty.lower = Lower(kernel::sequence_empty::kName);
  registry.Add(std::move(empty));

  OpSchema construct = Schema("SequenceConstruct", 1, 1 << 20);
  construct.infer = [](InferContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, false));
    TensorType t = ctx.type(0);
    for (size_t i = 1; i < ctx.input_types.size(); ++i) {
      KILN_RETURN_IF_ERROR(RequireKind(ctx, i, false));
      KILN_ASSIGN_OR_RETURN(t, Merge(ctx.node, t, ctx.type(i)));
    }
    ctx.output_types[0] = t.WithKind(ValueKind::kSequence);
    return absl::OkStatus();
  };
  construct.lower = Lower(kernel::sequence_construct::kName);
  registry.Add(std::move(construct));

  OpSchema insert = Schema("SequenceInsert", 2, 3);
  insert.infer = [](InferContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, true));
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 1, false));
    // An empty sequence's element shape says nothing: the inserted tensor's stands alone.
    const TensorType& seq = ctx.type(0);
    TensorType t = ctx.type(1);
    const Node* producer = ctx.node.input(0)->producer();
    if (producer == nullptr || producer->op() != "SequenceEmpty") {
      KILN_ASSIGN_OR_RETURN(t, Merge(ctx.node, seq, ctx.type(1)));
    } else if (seq.dtype != t.dtype) {
      return NodeError(ctx.node, "the tensor's element type is not the sequence's");
    } else {
      t.has_shape = false;
      t.shape.clear();
    }
    ctx.output_types[0] = t.WithKind(ValueKind::kSequence);
    return absl::OkStatus();
  };
  insert.lower = Lower(kernel::sequence_insert::kName);
  registry.Add(std::move(insert));

  OpSchema erase = Schema("SequenceErase", 1, 2);
  erase.infer = [](InferContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, true));
    return SameAsInput0(ctx);
  };
  erase.lower = Lower(kernel::sequence_erase::kName);
  registry.Add(std::move(erase));
}

void RegisterSequenceReaders(Registry& registry) {
  OpSchema at = Schema("SequenceAt", 2, 2);
  at.infer = [](InferContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, true));
    ctx.output_types[0] = ctx.type(0).Element();
    return absl::OkStatus();
  };
  at.lower = Lower(kernel::sequence_at::kName);
  registry.Add(std::move(at));

  OpSchema length = Schema("SequenceLength", 1, 1);
  length.infer = [](InferContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, true));
    ctx.output_types[0] = TensorType::Static(DType::kInt64, {});
    return absl::OkStatus();
  };
  length.lower = Lower(kernel::sequence_length::kName);
  registry.Add(std::move(length));
}

void RegisterSplitConcat(Registry& registry) {
  OpSchema split = Schema("SplitToSequence", 1, 2);
  split.infer = [](InferContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, false));
    TensorType t = ctx.type(0);
    if (t.has_shape) {
      const int64_t rank = static_cast<int64_t>(t.shape.size());
      KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), rank));
      if (ctx.has_input(1)) {
        t.shape[axis] = Dim{};  // the pieces may differ in length
      } else if (ctx.node.GetInt("keepdims", 1) != 0) {
        t.shape[axis] = Dim::Known(1);
      } else {
        t.shape.erase(t.shape.begin() + axis);
      }
    }
    ctx.output_types[0] = t.WithKind(ValueKind::kSequence);
    return absl::OkStatus();
  };
  split.lower = [](const Node& node) -> absl::StatusOr<KernelCall> {
    kiln_sequence_params params{};
    params.axis = node.GetInt("axis", 0);
    params.keepdims = node.GetInt("keepdims", 1);
    return SequenceCall(kernel::split_to_sequence::kName, node, params);
  };
  registry.Add(std::move(split));

  OpSchema concat = Schema("ConcatFromSequence", 1, 1);
  concat.infer = [](InferContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, true));
    TensorType t = ctx.type(0).Element();
    if (t.has_shape) {
      const bool new_axis = ctx.node.GetInt("new_axis", 0) != 0;
      const int64_t rank = static_cast<int64_t>(t.shape.size()) + (new_axis ? 1 : 0);
      KILN_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), rank));
      if (new_axis) {
        t.shape.insert(t.shape.begin() + axis, Dim{});
      } else {
        t.shape[axis] = Dim{};
      }
    }
    ctx.output_types[0] = t;
    return absl::OkStatus();
  };
  concat.lower = [](const Node& node) -> absl::StatusOr<KernelCall> {
    kiln_sequence_params params{};
    params.axis = node.GetInt("axis", 0);
    params.new_axis = node.GetInt("new_axis", 0);
    return SequenceCall(kernel::concat_from_sequence::kName, node, params);
  };
  registry.Add(std::move(concat));
}

void RegisterOptionals(Registry& registry) {
  OpSchema optional = Schema("Optional", 0, 1);
  optional.infer = [](InferContext& ctx) -> absl::Status {
    if (ctx.has_input(0)) {
      const TensorType& t = ctx.type(0);
      if (t.is_optional()) return NodeError(ctx.node, "the input is an optional already");
      ctx.output_types[0] = t.WithKind(t.is_tensor() ? ValueKind::kOptional : ValueKind::kOptionalSequence);
      return absl::OkStatus();
    }
    if (!ctx.node.has_attr("type")) return NodeError(ctx.node, "without an input, the 'type' attribute is required");
    absl::StatusOr<TensorType> type = ParseType(ctx.node.GetString("type", ""));
    if (!type.ok()) return NodeError(ctx.node, std::string(type.status().message()));
    if (type->is_optional()) return NodeError(ctx.node, "'type' is an optional");
    ctx.output_types[0] = type->WithKind(type->is_tensor() ? ValueKind::kOptional : ValueKind::kOptionalSequence);
    return absl::OkStatus();
  };
  optional.lower = [](const Node& node) -> absl::StatusOr<KernelCall> {
    if (node.input(0) == nullptr) return SequenceCall(kernel::optional_none::kName, node, {});
    return SequenceCall(kernel::value_copy::kName, node, {});
  };
  registry.Add(std::move(optional));

  OpSchema has = Schema("OptionalHasElement", 0, 1);
  has.infer = [](InferContext& ctx) -> absl::Status {
    ctx.output_types[0] = TensorType::Static(DType::kBool, {});
    return absl::OkStatus();
  };
  // From opset 18 the input may be a plain tensor (always present) or omitted (never): a
  // constant then, filled into the static bool output.
  has.lower = [](const Node& node) -> absl::StatusOr<KernelCall> {
    const Value* x = node.inputs().empty() ? nullptr : node.input(0);
    if (x != nullptr && !x->type().is_tensor()) return SequenceCall(kernel::optional_has_element::kName, node, {});
    auto present = std::make_shared<Tensor>(DType::kBool, std::vector<int64_t>{});
    present->data_as<bool>()[0] = x != nullptr;
    return Call<kernel::fill>({KernelOperand{-1, present}});
  };
  registry.Add(std::move(has));

  OpSchema get = Schema("OptionalGetElement", 1, 1);
  get.infer = [](InferContext& ctx) -> absl::Status {
    const TensorType& t = ctx.type(0);
    ctx.output_types[0] = t.WithKind(t.holds_sequence() ? ValueKind::kSequence : ValueKind::kTensor);
    return absl::OkStatus();
  };
  kiln_sequence_params require{};
  require.require_value = 1;
  // From opset 18 a plain tensor input is its own element: a copy, as Identity.
  get.lower = [require](const Node& node) -> absl::StatusOr<KernelCall> {
    if (node.input(0)->type().is_tensor()) return Call<kernel::copy>({KernelOperand{0, nullptr}});
    return SequenceCall(kernel::value_copy::kName, node, require);
  };
  registry.Add(std::move(get));
}

// SequenceMap(sequence, additional...): its body over each position's elements (a tensor
// input whole), one sequence per body output. Compiles to a driver call (kiln_k_control_sequence_map).
absl::Status InferSequenceMap(InferContext& ctx) {
  Graph* body = ctx.node.GetGraph("body");
  if (body == nullptr) return NodeError(ctx.node, "needs the graph attribute 'body'");
  const size_t own = ctx.input_types.size() - std::min(ctx.input_types.size(), ctx.node.num_captured());
  KILN_RETURN_IF_ERROR(RequireKind(ctx, 0, true));
  if (body->inputs().size() != ctx.input_types.size()) {
    return NodeError(ctx.node,
                     absl::StrCat("body has ", body->inputs().size(), " inputs; expected ", ctx.input_types.size()));
  }
  for (size_t i = 0; i < ctx.input_types.size(); ++i) {
    const TensorType& t = ctx.type(i);
    if (i < own && t.kind != ValueKind::kSequence && !t.is_tensor()) {
      return NodeError(ctx.node, absl::StrCat("input ", i, " is a ", ValueKindName(t.kind)));
    }
    body->inputs()[i]->set_type(i < own ? t.Element() : t);
  }
  if (absl::Status s = InferTypes(*body); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(NodeLabel(ctx.node), ": subgraph 'body': ", s.message()));
  }
  if (body->outputs().size() != ctx.output_types.size()) {
    return NodeError(ctx.node,
                     absl::StrCat("body has ", body->outputs().size(), " outputs, the node ", ctx.output_types.size()));
  }
  for (size_t k = 0; k < ctx.output_types.size(); ++k) {
    const TensorType& t = body->outputs()[k]->type();
    if (!t.is_tensor()) return NodeError(ctx.node, absl::StrCat("body output ", k, " is not a tensor"));
    ctx.output_types[k] = t.WithKind(ValueKind::kSequence);
  }
  return absl::OkStatus();
}

// Identity keeps its tensor lowering; on a sequence or an optional it copies the value.
void ExtendIdentity() {
  OpSchema& identity = Table().at("Identity");
  auto tensor_lower = identity.lower;
  identity.lower = [tensor_lower](const Node& node) -> absl::StatusOr<KernelCall> {
    if (node.input(0) != nullptr && !node.input(0)->type().is_tensor()) {
      return SequenceCall(kernel::value_copy::kName, node, {});
    }
    return tensor_lower(node);
  };
}

}  // namespace

void RegisterSequenceOps(Registry& registry) {
  RegisterSequenceBuilders(registry);
  RegisterSequenceReaders(registry);
  RegisterSplitConcat(registry);
  RegisterOptionals(registry);
  OpSchema map = Schema("SequenceMap", 1, 1 << 16);
  map.infer = InferSequenceMap;
  registry.Add(std::move(map));
  ExtendIdentity();
}

}  // namespace kiln::ops

namespace kiln {

KernelCall ValueExportCall() {
  KernelCall call{ops::kernel::value_export::kName, {KernelOperand{0, nullptr}}};
  call.params.Set(kiln_sequence_params{});
  call.allocates_outputs = true;
  return call;
}

}  // namespace kiln
