// The op table and type inference over a graph.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "op_helpers.h"

namespace kiln {
namespace ops {
std::map<std::string, OpSchema>& Table() {
  static auto* table = new std::map<std::string, OpSchema>();
  return *table;
}

void Registry::Add(OpSchema schema) {
  std::string name = schema.name;
  Table()[name] = std::move(schema);
}

OpSchema Schema(const char* name, int min_inputs, int max_inputs, uint32_t constant_inputs) {
  OpSchema schema;
  schema.name = name;
  schema.min_inputs = min_inputs;
  schema.max_inputs = max_inputs;
  schema.constant_inputs = constant_inputs;
  return schema;
}

absl::StatusOr<int64_t> NamedAttr(const Node& node, const char* attr, const char* fallback, const NamedCode* names,
                                  size_t count) {
  const std::string name = node.GetString(attr, fallback);
  std::vector<std::string> known;
  for (size_t i = 0; i < count; ++i) {
    if (name == names[i].name) return names[i].code;
    known.push_back(names[i].name);
  }
  return NodeError(node, absl::StrCat(attr, " '", name, "' is not one of ", absl::StrJoin(known, ", ")));
}

absl::StatusOr<int64_t> NormalizeAxis(const Node& node, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    return NodeError(node, absl::StrCat(what, " ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

absl::StatusOr<std::vector<Dim>> BroadcastShapes(const Node& node, const std::vector<Dim>& a,
                                                 const std::vector<Dim>& b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<Dim> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim* da = i + a.size() >= rank ? &a[i + a.size() - rank] : nullptr;
    const Dim* db = i + b.size() >= rank ? &b[i + b.size() - rank] : nullptr;
    if (da == nullptr) {
      out[i] = *db;
      continue;
    }
    if (db == nullptr) {
      out[i] = *da;
      continue;
    }
    if (*da == *db) {
      out[i] = *da;
      continue;
    }
    if (da->known() && da->size == 1) {
      out[i] = *db;
      continue;
    }
    if (db->known() && db->size == 1) {
      out[i] = *da;
      continue;
    }
    if (!da->known() || !db->known()) {  // symbolic vs. other: assume the known one wins
      out[i] = da->known() ? *da : *db;
      continue;
    }
    auto text = [](const std::vector<Dim>& s) {
      std::vector<std::string> parts;
      for (const Dim& d : s) parts.push_back(d.known() ? std::to_string(d.size) : d.symbol.empty() ? "?" : d.symbol);
      return "[" + absl::StrJoin(parts, ",") + "]";
    };
    return NodeError(node,
                     absl::StrCat("shapes ", text(a), " and ", text(b), " cannot be broadcast (dimension ", i, ")"));
  }
  return out;
}

std::vector<int64_t> ToInts(const Tensor& tensor) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < tensor.num_elements(); ++i) values.push_back(tensor.GetAsInt64(i));
  return values;
}

std::vector<KernelOperand> PassInputs(const Node& node, size_t n) {
  std::vector<KernelOperand> operands;
  for (size_t i = 0; i < n; ++i) {
    KernelOperand operand;
    if (i < node.inputs().size() && node.input(i) != nullptr) operand.node_input = static_cast<int>(i);
    operands.push_back(operand);
  }
  return operands;
}

std::vector<KernelOperand> PassAllInputs(const Node& node) { return PassInputs(node, node.inputs().size()); }

std::vector<int64_t> StaticDims(const Value* value) { return value->type().StaticDims(); }

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

absl::StatusOr<const Tensor*> RequireConstant(const InferContext& ctx, size_t i, const char* what) {
  const Tensor* t = ctx.constant(i);
  if (t == nullptr) {
    return NodeError(ctx.node, absl::StrCat("input ", i, " (", what,
                                            ") must be a compile-time constant; Kiln compiles "
                                            "static shapes only"));
  }
  return t;
}

absl::StatusOr<std::vector<int64_t>> ConstantInts(const InferContext& ctx, size_t i, const char* what) {
  auto t = RequireConstant(ctx, i, what);
  if (!t.ok()) return t.status();
  return ToInts(**t);
}

std::vector<const Tensor*> ConstantsOf(const Node& node) {
  std::vector<const Tensor*> constants;
  for (const Value* in : node.inputs()) constants.push_back(in && in->is_constant() ? in->constant().get() : nullptr);
  return constants;
}

absl::Status RequireStatic(const InferContext& ctx, size_t i) {
  if (!ctx.type(i).IsStatic()) {
    return NodeError(ctx.node, absl::StrCat("input ", i, " needs a static shape, has ", PrintType(ctx.type(i)),
                                            "; give input shapes with --input-shape"));
  }
  return absl::OkStatus();
}

absl::Status RequireFloat(const InferContext& ctx) {
  DType d = ctx.type(0).dtype;
  if (d != DType::kFloat32 && d != DType::kFloat64) {
    return NodeError(ctx.node, absl::StrCat("element type ", DTypeName(d), " is not supported (f32 and f64 are)"));
  }
  return absl::OkStatus();
}

absl::Status RequireStaticInputs(const InferContext& ctx, std::initializer_list<size_t> inputs) {
  for (size_t i : inputs) {
    if (auto status = RequireStatic(ctx, i); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status SameAsInput0(InferContext& ctx) {
  ctx.output_types[0] = ctx.type(0);
  return absl::OkStatus();
}

absl::Status SameFloatTypeAsInput0(InferContext& ctx) {
  if (auto status = RequireFloat(ctx); !status.ok()) return status;
  return SameAsInput0(ctx);
}

TensorType WithShape(DType dtype, std::vector<Dim> shape) {
  TensorType type;
  type.dtype = dtype;
  type.shape = std::move(shape);
  type.has_shape = true;
  return type;
}

std::vector<Dim> KnownDims(const std::vector<int64_t>& dims) {
  std::vector<Dim> out;
  for (int64_t d : dims) out.push_back(Dim::Known(d));
  return out;
}

absl::StatusOr<std::vector<int64_t>> IntsFromAttrOrInput(const InferContext& ctx, const char* attr, size_t input,
                                                         bool* present) {
  if (ctx.node.has_attr(attr)) {
    *present = true;
    return ctx.node.GetInts(attr);
  }
  if (ctx.has_input(input)) {
    auto ints = ConstantInts(ctx, input, attr);
    if (!ints.ok()) return ints.status();
    *present = true;
    return ints;
  }
  *present = false;
  return std::vector<int64_t>{};
}

}  // namespace ops

namespace {

void EnsureRegistered() {
  static bool done = [] {
    ops::Registry registry;
    ops::RegisterElementwiseOps(registry);
    ops::RegisterShapeOps(registry);
    ops::RegisterReduceOps(registry);
    ops::RegisterNnOps(registry);
    ops::RegisterLayoutOps(registry);
    ops::RegisterQuantOps(registry);
    ops::RegisterRnnOps(registry);
    ops::RegisterResizeOps(registry);
    ops::RegisterLossOps(registry);
    ops::RegisterSamplingOps(registry);
    ops::RegisterLinalgOps(registry);
    ops::RegisterOpset18Ops(registry);
    ops::RegisterSelectOps(registry);
    ops::RegisterRandomOps(registry);
    ops::RegisterSignalOps(registry);
    ops::RegisterSpatialOps(registry);
    ops::RegisterControlOps(registry);
    ops::RegisterSequenceOps(registry);
    ops::RegisterStringOps(registry);
    ops::RegisterTextOps(registry);
    ops::RegisterLowBitOps(registry);
    ops::AttachDynamicShapes(ops::Table());
    return true;
  }();
  (void)done;
}

// Evaluates `value` at compile time if everything it depends on is known: constants,
// and ops that need only static input types (Shape, Size). Returns null if it cannot.
std::shared_ptr<const Tensor> TryEvaluate(Value* value, std::unordered_map<Value*, std::shared_ptr<const Tensor>>& memo,
                                          int depth) {
  if (value == nullptr) return nullptr;
  if (value->is_constant()) return value->constant();
  auto it = memo.find(value);
  if (it != memo.end()) return it->second;
  Node* node = value->producer();
  if (node == nullptr || depth > 64) return nullptr;
  const OpSchema* schema = FindOp(node->op());
  if (schema == nullptr || schema->random) return nullptr;
  if (std::optional<Tensor> dims = KnownDimsPicked(*node); dims.has_value()) {
    return memo[value] = std::make_shared<const Tensor>(std::move(*dims));
  }
  // Shape of a shape known only at run time is not known now.
  if (schema->from_types && (node->input(0) == nullptr || !node->input(0)->type().IsStatic())) return nullptr;
  std::vector<std::shared_ptr<const Tensor>> holders;
  std::vector<const Tensor*> args;
  if (!schema->from_types) {
    for (Value* in : node->inputs()) {
      if (in == nullptr) {
        args.push_back(nullptr);
        continue;
      }
      auto t = TryEvaluate(in, memo, depth + 1);
      if (t == nullptr) return nullptr;
      holders.push_back(t);
      args.push_back(t.get());
    }
  }
  auto results = EvaluateNode(*node, args);
  if (!results.ok()) return nullptr;
  for (size_t i = 0; i < results->size(); ++i) {
    memo[node->outputs()[i]] = std::make_shared<const Tensor>(std::move((*results)[i]));
  }
  return memo[value];
}

}  // namespace

std::optional<Tensor> KnownDimsPicked(const Node& node) {
  if (node.op() != "Gather" || node.inputs().size() != 2 || node.GetInt("axis", 0) != 0) return std::nullopt;
  const Node* shape = node.input(0) != nullptr ? node.input(0)->producer() : nullptr;
  const Value* indices = node.input(1);
  if (shape == nullptr || shape->op() != "Shape" || indices == nullptr || !indices->is_constant()) return std::nullopt;
  const TensorType& x = shape->input(0)->type();
  if (!x.has_shape) return std::nullopt;
  const auto rank = static_cast<int64_t>(x.shape.size());
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(shape->GetInt("start", 0)), end = clamp(shape->GetInt("end", rank));
  const Tensor& picks = *indices->constant();
  Tensor dims(DType::kInt64, picks.dims());
  for (int64_t i = 0; i < picks.num_elements(); ++i) {
    int64_t k = picks.GetAsInt64(i);
    if (k < 0) k += end - start;
    if (k < 0 || start + k >= end || !x.shape[static_cast<size_t>(start + k)].known()) return std::nullopt;
    dims.data_as<int64_t>()[i] = x.shape[static_cast<size_t>(start + k)].size;
  }
  return dims;
}

const OpSchema* FindOp(std::string_view name) {
  EnsureRegistered();
  auto it = ops::Table().find(std::string(name));
  return it == ops::Table().end() ? nullptr : &it->second;
}

absl::StatusOr<KernelCall> LowerForArtifact(const OpSchema& schema, const Node& node) {
  if (schema.lower_fast) {
    absl::StatusOr<std::optional<KernelCall>> fast = schema.lower_fast(node);
    if (!fast.ok()) return fast.status();
    if (fast->has_value()) return std::move(**fast);
  }
  if (!schema.lower) return absl::InternalError(absl::StrCat(NodeLabel(node), ": op has no kernel lowering"));
  return schema.lower(node);
}

std::vector<std::string> SupportedOps() {
  EnsureRegistered();
  std::vector<std::string> names;
  for (const auto& [name, schema] : ops::Table()) names.push_back(name);
  return names;
}

std::string NodeLabel(const Node& node) {
  return absl::StrCat("node '", node.name(), "' (", node.op(), ", opset ", node.opset(), ")");
}

bool TouchesNonTensor(const Node& node) {
  for (const Value* v : node.inputs()) {
    if (v != nullptr && !v->type().is_tensor()) return true;
  }
  for (const Value* v : node.outputs()) {
    if (!v->type().is_tensor()) return true;
  }
  return false;
}

bool IsDynamicNode(const Node& node, const OpSchema& schema) {
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const Value* in = node.input(i);
    if (in == nullptr) continue;
    if (!in->type().IsStatic()) return true;
    if ((schema.constant_inputs & (1u << i)) != 0 && !in->is_constant()) return true;
  }
  return false;
}

namespace {

// The output types of a node whose shapes follow at run time: element type and rank from
// its rule, the dims its shape function gives on what is known now (-1: unknown).
absl::Status InferAtRunTime(const OpSchema& schema, InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DynamicShape shape, schema.dynamic(ctx));
  SymbolIds symbols;
  KILN_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> dims, EvaluateShape(ctx.node, shape, &symbols));
  std::map<int64_t, std::string> names;
  for (const auto& [name, id] : symbols) names[id] = name;
  for (size_t i = 0; i < ctx.output_types.size() && i < shape.outputs.size(); ++i) {
    TensorType type = shape.outputs[i];
    for (size_t d = 0; d < type.shape.size() && i < dims.size(); ++d) {
      const int64_t dim = dims[i][d];
      if (dim >= 0) type.shape[d] = Dim::Known(dim);
      if (auto name = names.find(dim); name != names.end()) type.shape[d] = Dim::Symbolic(name->second);
    }
    ctx.output_types[i] = std::move(type);
  }
  return absl::OkStatus();
}

// One node's type inference: the arity check, shape-deciding inputs folded to constants,
// then the op's infer; output types are set only when it succeeds.
// Ops whose kernels move f16 and bf16 elements as bytes (or only look at shapes): they run
// on narrow floats as they are. Every other op computes in f32 (legalize-float16).
constexpr const char* kNarrowFloatNativeOps[] = {
    "Cast",           "CastLike", "Concat",   "Constant", "DepthToSpace",    "Expand",    "Flatten", "Gather",
    "GatherElements", "GatherND", "Identity", "Reshape",  "ReverseSequence", "Shape",     "Size",    "Slice",
    "SpaceToDepth",   "Split",    "Squeeze",  "Tile",     "Transpose",       "Unsqueeze",
};

// Type inference of a node that computes in f32 on narrow floats: the rule sees f32 where
// the inputs are narrow (narrow constants widened: Clip's bounds, Range's limits), and its
// f32 outputs become narrow.
absl::Status InferInFloat32(const OpSchema& schema, InferContext& ctx, DType narrow) {
  std::vector<TensorType> widened(ctx.input_types.size());
  std::vector<Tensor> widened_constants(ctx.input_types.size());
  for (size_t i = 0; i < ctx.input_types.size(); ++i) {
    if (ctx.input_types[i] == nullptr || !IsNarrowFloat(ctx.input_types[i]->dtype)) continue;
    widened[i] = *ctx.input_types[i];
    widened[i].dtype = DType::kFloat32;
    ctx.input_types[i] = &widened[i];
    if (const Tensor* constant = ctx.input_constants[i]) {
      widened_constants[i] = Tensor(DType::kFloat32, constant->dims());
      for (int64_t k = 0; k < constant->num_elements(); ++k)
        widened_constants[i].data_as<float>()[k] = static_cast<float>(constant->GetAsDouble(k));
      ctx.input_constants[i] = &widened_constants[i];
    }
  }
  KILN_RETURN_IF_ERROR(schema.infer(ctx));
  for (TensorType& out : ctx.output_types) {
    if (out.dtype == DType::kFloat32) out.dtype = narrow;
  }
  return absl::OkStatus();
}

absl::Status InferNode(Graph& graph, Node* node, const OpSchema& schema,
                       std::unordered_map<Value*, std::shared_ptr<const Tensor>>& memo) {
  const int n = static_cast<int>(node->inputs().size());
  if (n < schema.min_inputs || n > schema.max_inputs) {
    return ops::NodeError(*node,
                          absl::StrCat("has ", n, " inputs; expected ", schema.min_inputs, " to ", schema.max_inputs));
  }
  // The first min_inputs are required (libonnx's checker says so up to opset 17; from 18
  // on only this stands between an omitted one and the op's inference).
  for (int i = 0; i < schema.min_inputs; ++i) {
    if (node->input(i) == nullptr) return ops::NodeError(*node, absl::StrCat("input ", i, " is required but left out"));
  }
  // Shape-deciding inputs computed from other values become constants now, and so do
  // decided ones that follow from what is known.
  for (int i = 0; i < n; ++i) {
    Value* in = node->input(i);
    if (((schema.constant_inputs | schema.decided_inputs) & (1u << i)) == 0 || in == nullptr || in->is_constant())
      continue;
    auto value = TryEvaluate(in, memo, 0);
    if (value == nullptr) continue;
    Value* folded = graph.AddConstant(graph.UniqueName(in->name() + ".const"), value);
    node->set_input(i, folded);
  }
  InferContext ctx{*node, {}, {}, {}};
  for (Value* in : node->inputs()) {
    ctx.input_types.push_back(in ? &in->type() : nullptr);
    ctx.input_constants.push_back(in && in->is_constant() ? in->constant().get() : nullptr);
    if (in != nullptr && in->type().dtype == DType::kUndefined) {
      return ops::NodeError(*node, absl::StrCat("input '", in->name(), "' has no type"));
    }
  }
  ctx.output_types.resize(node->outputs().size());
  KILN_RETURN_IF_ERROR(ops::RefuseLowBitInputs(*node));
  const DType narrow = NarrowFloatComputedInFloat32(*node);
  // A sequence or an optional among the inputs: the op's own inference (Identity's
  // run-time rule is for tensors).
  const bool tensors_only = std::all_of(node->inputs().begin(), node->inputs().end(),
                                        [](const Value* v) { return v == nullptr || v->type().is_tensor(); });
  if (narrow != DType::kUndefined && !IsDynamicNode(*node, schema)) {
    KILN_RETURN_IF_ERROR(InferInFloat32(schema, ctx, narrow));
  } else if (schema.dynamic && tensors_only && IsDynamicNode(*node, schema)) {
    KILN_RETURN_IF_ERROR(InferAtRunTime(schema, ctx));
  } else if (absl::Status s = schema.infer(ctx); !s.ok()) {
    if (!schema.dynamic && IsDynamicNode(*node, schema)) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (", node->op(),
                                                 " does not compile with shapes known only at run time yet)"));
    }
    return s;
  }
  for (size_t i = 0; i < node->outputs().size(); ++i) node->outputs()[i]->set_type(ctx.output_types[i]);
  return absl::OkStatus();
}

absl::Status UnsupportedOp(const Node& node) {
  return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": op '", node.op(), "' is not supported by Kiln"));
}

// A node's problem from its error: the message less the node's label.
NodeProblem ProblemOf(const Node& node, const absl::Status& status) {
  std::string reason(status.message());
  const std::string label = NodeLabel(node) + ": ";
  if (absl::StartsWith(reason, label)) reason.erase(0, label.size());
  return NodeProblem{node.name(), node.op(), node.opset(), reason};
}

// CheckGraph's verdict on one node whose inputs are all typed and static.
absl::Status CheckNode(Graph& graph, Node* node, std::unordered_map<Value*, std::shared_ptr<const Tensor>>& memo) {
  const OpSchema* schema = FindOp(node->op());
  if (schema == nullptr) return UnsupportedOp(*node);
  KILN_RETURN_IF_ERROR(InferNode(graph, node, *schema, memo));
  // Control flow: its inference checked the bodies; codegen compiles them.
  if (node->has_subgraphs()) return absl::OkStatus();
  // Shapes known only at run time: the rule's shape function computes them, and codegen
  // lowers the node against probe dims.
  if (IsDynamicNode(*node, *schema)) return absl::OkStatus();
  for (const Value* out : node->outputs()) {
    if (!out->type().IsStatic() && out->type().is_tensor()) {  // a sequence's size is its own
      return ops::NodeError(*node,
                            absl::StrCat("output '", out->name(), "' has the dynamic shape ", PrintType(out->type()),
                                         " (it depends on input data); Kiln compiles static shapes only"));
    }
  }
  // ops that passes rewrite away, and narrow-float ones that legalize-float16 will widen
  if (!schema->lower || NarrowFloatComputedInFloat32(*node) != DType::kUndefined) return absl::OkStatus();
  return schema->lower(*node).status();
}

}  // namespace

std::string FormatProblem(const NodeProblem& problem) {
  if (problem.op.empty()) return absl::StrCat("graph input '", problem.node, "': ", problem.reason);
  return absl::StrCat("node '", problem.node, "' (", problem.op, ", opset ", problem.opset, "): ", problem.reason);
}

std::string FormatProblems(const std::vector<NodeProblem>& problems) {
  if (problems.size() == 1) return FormatProblem(problems[0]);
  std::string text = absl::StrCat(problems.size(), " constructs cannot be compiled:");
  const size_t listed = std::min(problems.size(), kMaxListedProblems);
  for (size_t i = 0; i < listed; ++i) absl::StrAppend(&text, "\n  ", FormatProblem(problems[i]));
  if (listed < problems.size()) {
    absl::StrAppend(&text, "\n  ... and ", problems.size() - listed, " more (kiln compile --check lists them all)");
  }
  return text;
}

std::vector<NodeProblem> CheckGraph(Graph& graph) {
  std::vector<NodeProblem> problems;
  std::unordered_map<Value*, std::shared_ptr<const Tensor>> memo;
  for (Node* node : graph.nodes()) {
    // Downstream of a problem (an untyped input): the cause is listed.
    const bool typed = std::all_of(node->inputs().begin(), node->inputs().end(),
                                   [](const Value* v) { return v == nullptr || v->type().dtype != DType::kUndefined; });
    if (!typed) {
      if (FindOp(node->op()) == nullptr) problems.push_back(ProblemOf(*node, UnsupportedOp(*node)));
      continue;
    }
    if (absl::Status status = CheckNode(graph, node, memo); !status.ok()) {
      problems.push_back(ProblemOf(*node, status));
      for (Value* out : node->outputs()) out->set_type(TensorType{});
    }
  }
  return problems;
}
namespace ops {

absl::Status InferByDynamicRule(InferContext& ctx) {
  const OpSchema* schema = FindOp(ctx.node.op());
  if (schema == nullptr || !schema->dynamic) {
    return absl::InternalError(absl::StrCat(NodeLabel(ctx.node), ": has no run-time shape rule"));
  }
  return InferAtRunTime(*schema, ctx);
}

}  // namespace ops

bool IsNarrowFloat(DType dtype) { return dtype == DType::kFloat16 || dtype == DType::kBFloat16; }

DType NarrowFloatComputedInFloat32(const Node& node) {
  for (const char* op : kNarrowFloatNativeOps) {
    if (node.op() == op) return DType::kUndefined;
  }
  for (const Value* in : node.inputs()) {
    if (in != nullptr && IsNarrowFloat(in->type().dtype)) return in->type().dtype;
  }
  return DType::kUndefined;
}

absl::Status InferTypes(Graph& graph) {
  std::unordered_map<Value*, std::shared_ptr<const Tensor>> memo;
  for (Node* node : graph.nodes()) {
    const OpSchema* schema = FindOp(node->op());
    if (schema == nullptr) return UnsupportedOp(*node);
    KILN_RETURN_IF_ERROR(InferNode(graph, node, *schema, memo));
  }
  graph.Compact();
  return absl::OkStatus();
}

}  // namespace kiln
