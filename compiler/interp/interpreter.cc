// The reference interpreter: a plain walk over the nodes, each run through its op's
// lowering and the natively compiled kernel library. A node whose shapes are known only at
// run time is lowered as a copy of itself typed by the tensors it is given (its shape
// inputs made constants, its data-dependent output dims from its run-time shape function);
// sequence and optional kernels make their outputs from a host exec's allocator; control
// flow runs its bodies by the same walk (control.cc).
#include "kiln/compiler/interp.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "interp_internal.h"
#include "kernel_abi.h"
#include "kiln/common/status.h"
#include "kiln/compiler/ops.h"
#include "kiln/kernels/sequence.h"

#define X(name, typing, source, params) extern "C" int32_t kiln_k_##name(const kiln_kcall* call);
#include "kernel_list.inc"
#undef X

namespace kiln {
namespace {

const std::map<std::string, kiln_kernel_fn>& KernelTable() {
  static const auto* table = new std::map<std::string, kiln_kernel_fn>{
#define X(name, typing, source, params) {#name, &kiln_k_##name},
#include "kernel_list.inc"
#undef X
  };
  return *table;
}

kiln_ktensor View(const Tensor* t) {
  if (t == nullptr) return kiln_ktensor{nullptr, nullptr, 0, 0};
  return kiln_ktensor{const_cast<void*>(t->data()), t->dims().data(), static_cast<int32_t>(t->rank()),
                      static_cast<int32_t>(t->dtype())};
}

std::string KernelError(int32_t code) {
  switch (code) {
    case KILN_KERR_DTYPE: return "element type not supported by the kernel";
    case KILN_KERR_INDEX: return "an index is out of range";
    case KILN_KERR_UNSUPPORTED: return "parameter combination not supported by the kernel";
    case KILN_KERR_PARAMS: return "internal error: the lowering passed another parameter struct than the kernel reads";
    case KILN_KERR_SHAPE: return "the input shapes do not agree";
    case KILN_KERR_VALUE: return "an input value cannot be converted (a string that is no number)";
    default: return absl::StrCat("kernel error ", code);
  }
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int64_t>>> EvaluateShape(const Node& node, const DynamicShape& shape,
                                                                SymbolIds* symbols) {
  SymbolIds local;
  if (symbols == nullptr) symbols = &local;
  // A named symbol's id: -2, -3, ...; an anonymous unknown ("?") is -1.
  auto id_of = [&](const Dim& d) -> int64_t {
    if (d.known()) return d.size;
    if (d.symbol.empty()) return -1;
    auto it = symbols->find(d.symbol);
    if (it != symbols->end()) return it->second;
    const int64_t id = -2 - static_cast<int64_t>(symbols->size());
    (*symbols)[d.symbol] = id;
    return id;
  };
  auto kernel = KernelTable().find(shape.shape.kernel);
  if (kernel == KernelTable().end()) {
    return absl::InternalError(absl::StrCat("no shape function named '", shape.shape.kernel, "'"));
  }
  // Inputs: known dims, -1 for the unknown; data only where the input is a constant.
  std::vector<std::vector<int64_t>> in_dims;
  in_dims.reserve(shape.shape.inputs.size());
  std::vector<kiln_ktensor> ins;
  for (const KernelOperand& operand : shape.shape.inputs) {
    const Value* v = operand.node_input >= 0 ? node.input(operand.node_input) : nullptr;
    if (v == nullptr) {
      ins.push_back(View(operand.constant.get()));
      continue;
    }
    in_dims.emplace_back();
    for (const Dim& d : v->type().shape) in_dims.back().push_back(id_of(d));
    const void* data = v->is_constant() ? v->constant()->data() : nullptr;
    ins.push_back(kiln_ktensor{const_cast<void*>(data), in_dims.back().data(),
                               static_cast<int32_t>(in_dims.back().size()), static_cast<int32_t>(v->type().dtype)});
  }
  std::vector<std::vector<int64_t>> out_dims;
  std::vector<kiln_ktensor> outs;
  for (const TensorType& type : shape.outputs) out_dims.emplace_back(type.shape.size(), -1);
  for (size_t i = 0; i < out_dims.size(); ++i) {
    outs.push_back(kiln_ktensor{nullptr, out_dims[i].data(), static_cast<int32_t>(out_dims[i].size()),
                                static_cast<int32_t>(shape.outputs[i].dtype)});
  }
  outs.push_back(kiln_ktensor{nullptr, nullptr, 0, 0});  // no kernel parameters to complete
  kiln_kcall kcall{};
  kcall.inputs = ins.data();
  kcall.outputs = outs.data();
  kcall.num_inputs = static_cast<int32_t>(ins.size());
  kcall.num_outputs = static_cast<int32_t>(outs.size());
  kcall.params = shape.shape.params.data();
  kcall.params_size = shape.shape.params.size_bytes();
  if (int32_t rc = kernel->second(&kcall); rc != KILN_KERR_OK) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": ", KernelError(rc)));
  }
  return out_dims;
}

namespace interp {
namespace {

// The buffers kernels take from exec->alloc (the sequence and optional kernels make their
// outputs so): 64-byte aligned, and whatever is still held freed with the arena.
class HostArena {
 public:
  HostArena() = default;
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  ~HostArena() {
    for (void* p : live_) std::free(p);
  }
  static void* Alloc(void* arena, int64_t bytes) {
    const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, size);
    if (p != nullptr) static_cast<HostArena*>(arena)->live_.insert(p);
    return p;
  }
  static void Release(void* arena, void* data) {
    if (static_cast<HostArena*>(arena)->live_.erase(data) > 0) std::free(data);
  }

 private:
  std::set<void*> live_;
};

// What a kernel call gets as its exec: string texts (copied out by the outputs before it
// goes) and run-time buffers. Not movable: the exec points at its members.
struct HostExec {
  std::deque<std::string> texts;
  HostArena arena;
  kiln_kexec exec{};
  HostExec() {
    exec.text_arena = &texts;
    exec.alloc_text = [](void* texts, int64_t bytes) -> char* {
      return static_cast<std::deque<std::string>*>(texts)->emplace_back(static_cast<size_t>(bytes), '\0').data();
    };
    exec.arena = &arena;
    exec.alloc = &HostArena::Alloc;
    exec.release = &HostArena::Release;
  }
  HostExec(const HostExec&) = delete;
  HostExec& operator=(const HostExec&) = delete;
};

// Sequences as kernels see them (kiln/kernels/sequence.h): element arrays and lengths kept
// here while the call runs.
struct ValueViews {
  std::deque<std::vector<kiln_ktensor>> elements;
  std::deque<int64_t> lengths;
};

kiln_ktensor ValueView(const Tensor* t, ValueViews& store) {
  if (t == nullptr || t->is_tensor()) return View(t);
  if (t->kind() == ValueKind::kSequence) {
    std::vector<kiln_ktensor>& elements = store.elements.emplace_back();
    elements.reserve(t->elements().size() + 1);  // an empty sequence's data is not null
    for (const Tensor& e : t->elements()) elements.push_back(View(&e));
    const int64_t& length = store.lengths.emplace_back(static_cast<int64_t>(elements.size()));
    return kiln_ktensor{elements.data(), &length, 1, KILN_DTYPE_SEQUENCE_CODE};
  }
  if (!t->elements().empty()) return ValueView(&t->elements()[0], store);
  const bool sequence = t->kind() == ValueKind::kOptionalSequence;
  return kiln_ktensor{nullptr, nullptr, 0,
                      sequence ? KILN_DTYPE_SEQUENCE_CODE : static_cast<int32_t>(t->element_dtype())};
}

Tensor CopyTensor(const kiln_ktensor& t) {
  Tensor copy(static_cast<DType>(t.dtype), std::vector<int64_t>(t.dims, t.dims + t.rank));
  if (copy.size_bytes() > 0) std::memcpy(copy.data(), t.data, static_cast<size_t>(copy.size_bytes()));
  if (copy.dtype() == DType::kString) copy.AdoptStrings();
  return copy;
}

// A kernel-made value of `type`'s kind copied into a host value.
Tensor FromKernelValue(const kiln_ktensor& t, const TensorType& type) {
  switch (type.kind) {
    case ValueKind::kTensor: return CopyTensor(t);
    case ValueKind::kSequence: {
      std::vector<Tensor> elements;
      const auto* items = static_cast<const kiln_ktensor*>(t.data);
      for (int64_t i = 0; items != nullptr && t.dims != nullptr && i < t.dims[0]; ++i) {
        elements.push_back(CopyTensor(items[i]));
      }
      return Tensor::Sequence(type.dtype, std::move(elements));
    }
    case ValueKind::kOptional:
    case ValueKind::kOptionalSequence: {
      if (t.data == nullptr) return Tensor::Optional(type.kind, type.dtype, nullptr);
      const Tensor value =
          FromKernelValue(t, type.WithKind(type.holds_sequence() ? ValueKind::kSequence : ValueKind::kTensor));
      return Tensor::Optional(type.kind, type.dtype, &value);
    }
  }
  return Tensor();
}

absl::Status CallKernel(const Node& node, const std::string& name, std::vector<kiln_ktensor>& ins,
                        std::vector<kiln_ktensor>& outs, const KernelParams& params, const kiln_kexec* exec) {
  auto kernel = KernelTable().find(name);
  if (kernel == KernelTable().end()) return absl::InternalError(absl::StrCat("no kernel named '", name, "'"));
  kiln_kcall kcall{};
  kcall.inputs = ins.data();
  kcall.outputs = outs.data();
  kcall.num_inputs = static_cast<int32_t>(ins.size());
  kcall.num_outputs = static_cast<int32_t>(outs.size());
  kcall.params = params.data();
  kcall.params_size = params.size_bytes();
  kcall.exec = exec;
  if (int32_t rc = kernel->second(&kcall); rc != KILN_KERR_OK) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": ", KernelError(rc)));
  }
  return absl::OkStatus();
}

// A node over sequences or optionals: its kernel makes its outputs (KernelCall::
// allocates_outputs), which are copied out before its buffers go.
absl::StatusOr<std::vector<Tensor>> RunValueNode(const Node& node, const OpSchema& schema,
                                                 const std::vector<const Tensor*>& inputs) {
  if (!schema.lower) {
    return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": the interpreter does not run this op"));
  }
  KILN_ASSIGN_OR_RETURN(KernelCall call, schema.lower(node));
  if (!call.allocates_outputs) {
    return absl::UnimplementedError(
        absl::StrCat(NodeLabel(node), ": the interpreter does not run this op over sequences or optionals"));
  }
  ValueViews views;
  std::vector<kiln_ktensor> ins, outs;
  for (const KernelOperand& operand : call.inputs) {
    ins.push_back(ValueView(operand.node_input >= 0 ? inputs[operand.node_input] : operand.constant.get(), views));
  }
  for (const Value* out : node.outputs()) {
    const TensorType& type = out->type();
    outs.push_back(kiln_ktensor{nullptr, nullptr, type.holds_sequence() ? 1 : static_cast<int32_t>(type.shape.size()),
                                type.holds_sequence() ? KILN_DTYPE_SEQUENCE_CODE : static_cast<int32_t>(type.dtype)});
  }
  HostExec host;
  KILN_RETURN_IF_ERROR(CallKernel(node, call.kernel, ins, outs, call.params, &host.exec));
  std::vector<Tensor> outputs;
  for (size_t k = 0; k < outs.size(); ++k) outputs.push_back(FromKernelValue(outs[k], node.output(k)->type()));
  return outputs;
}

// A node whose types are static: its lowering and kernel, outputs allocated from its types.
absl::StatusOr<std::vector<Tensor>> RunStaticNode(const Node& node, const OpSchema& schema,
                                                  const std::vector<const Tensor*>& inputs) {
  if (schema.from_types) return schema.from_types(node);
  if (!schema.lower) {
    return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": the interpreter does not run this op"));
  }
  KILN_ASSIGN_OR_RETURN(KernelCall call, schema.lower(node));
  std::vector<kiln_ktensor> in_views;
  for (const KernelOperand& operand : call.inputs) {
    in_views.push_back(View(operand.node_input >= 0 ? inputs[operand.node_input] : operand.constant.get()));
  }
  std::vector<Tensor> outputs;
  outputs.reserve(node.outputs().size());
  for (const Value* out : node.outputs()) outputs.emplace_back(out->type().dtype, out->type().StaticDims());
  std::vector<kiln_ktensor> out_views;
  for (const Tensor& t : outputs) out_views.push_back(View(&t));
  // A kernel's workspace, as codegen passes it: one more u8 output after the node's.
  std::optional<Tensor> scratch;
  if (call.scratch_bytes > 0) {
    scratch.emplace(DType::kUInt8, std::vector<int64_t>{call.scratch_bytes});
    out_views.push_back(View(&*scratch));
  }
  HostExec host;  // string kernels' texts: the outputs copy them before it goes
  KILN_RETURN_IF_ERROR(CallKernel(node, call.kernel, in_views, out_views, call.params, &host.exec));
  for (Tensor& t : outputs) {
    if (t.dtype() == DType::kString) t.AdoptStrings();
  }
  return outputs;
}

bool HasStaticTypes(const Node& node) {
  for (const Value* v : node.inputs()) {
    if (v != nullptr && !v->type().IsStatic()) return false;
  }
  for (const Value* v : node.outputs()) {
    if (!v->type().IsStatic()) return false;
  }
  return true;
}

// Runs a shape function (DynamicShape::shape) on the tensors the node is given: their dims
// and data. Returns each output's dims.
absl::StatusOr<std::vector<std::vector<int64_t>>> RunShapeFunction(const Node& node, const DynamicShape& shape,
                                                                   const std::vector<const Tensor*>& inputs) {
  std::vector<kiln_ktensor> ins, outs;
  for (const KernelOperand& operand : shape.shape.inputs) {
    ins.push_back(View(operand.node_input >= 0 ? inputs[operand.node_input] : operand.constant.get()));
  }
  std::vector<std::vector<int64_t>> dims;
  for (const TensorType& type : shape.outputs) dims.emplace_back(type.shape.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    outs.push_back(kiln_ktensor{nullptr, dims[i].data(), static_cast<int32_t>(dims[i].size()),
                                static_cast<int32_t>(shape.outputs[i].dtype)});
  }
  outs.push_back(kiln_ktensor{nullptr, nullptr, 0, 0});  // no kernel parameters to complete
  KILN_RETURN_IF_ERROR(CallKernel(node, shape.shape.kernel, ins, outs, shape.shape.params, nullptr));
  for (const std::vector<int64_t>& d : dims) {
    for (int64_t size : d) {
      if (size < 0) return absl::InternalError(absl::StrCat(NodeLabel(node), ": its shape function left a dim open"));
    }
  }
  return dims;
}

// A copy of `node` alone in a graph, typed by the tensors it is given now: static input
// types, its shape-deciding inputs (OpSchema::constant_inputs) constants holding their
// values, and its output types inferred from those, or, where they follow from input
// data (NonZero's count), from its run-time shape function.
struct ConcreteNode {
  std::unique_ptr<Graph> graph;
  Node* node = nullptr;
};

absl::StatusOr<ConcreteNode> Concretize(const Node& node, const OpSchema& schema,
                                        const std::vector<const Tensor*>& inputs) {
  if (!schema.infer) {
    return absl::UnimplementedError(
        absl::StrCat(NodeLabel(node), ": the op has no type inference to size its outputs"));
  }
  ConcreteNode concrete{std::make_unique<Graph>(), nullptr};
  Graph& graph = *concrete.graph;
  std::map<const Value*, Value*> copies;
  std::vector<Value*> ins;
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const Value* v = node.input(i);
    if (v == nullptr || inputs[i] == nullptr) {
      ins.push_back(nullptr);
      continue;
    }
    const bool shape_input = i < 32 && (schema.constant_inputs & (1u << i)) != 0;
    Value*& copy = copies[v];
    if (copy == nullptr && v->is_constant()) copy = graph.AddConstant(v->name(), v->constant());
    if (copy == nullptr && shape_input) copy = graph.AddConstant(v->name(), std::make_shared<const Tensor>(*inputs[i]));
    if (copy == nullptr) copy = graph.AddValue(v->name(), TensorType::Static(inputs[i]->dtype(), inputs[i]->dims()));
    ins.push_back(copy);
  }
  std::vector<std::string> names;
  for (const Value* out : node.outputs()) names.push_back(out->name());
  concrete.node = graph.AddNode(node.op(), node.name(), ins, names, node.opset());
  concrete.node->mutable_attrs() = node.attrs();
  InferContext ctx{*concrete.node, {}, {}, {}};
  for (const Value* in : ins) {
    ctx.input_types.push_back(in != nullptr ? &in->type() : nullptr);
    ctx.input_constants.push_back(in != nullptr && in->is_constant() ? in->constant().get() : nullptr);
  }
  ctx.output_types.resize(node.outputs().size());
  KILN_RETURN_IF_ERROR(schema.infer(ctx));
  const bool all_static =
      std::all_of(ctx.output_types.begin(), ctx.output_types.end(), [](const TensorType& t) { return t.IsStatic(); });
  if (!all_static && schema.dynamic) {
    KILN_ASSIGN_OR_RETURN(DynamicShape shape, schema.dynamic(ctx));
    KILN_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> dims, RunShapeFunction(*concrete.node, shape, inputs));
    for (size_t k = 0; k < ctx.output_types.size() && k < dims.size(); ++k) {
      ctx.output_types[k] = TensorType::Static(shape.outputs[k].dtype, dims[k]);
    }
  }
  for (size_t k = 0; k < ctx.output_types.size(); ++k) {
    if (!ctx.output_types[k].IsStatic()) {
      return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": output '", node.output(k)->name(),
                                                   "' depends on input data (", PrintType(ctx.output_types[k]),
                                                   ") and the op has no run-time shape rule"));
    }
    concrete.node->output(k)->set_type(ctx.output_types[k]);
  }
  return concrete;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> EvaluateNodeObserved(const Node& node, const std::vector<const Tensor*>& given,
                                                         const Observer& observe) {
  const OpSchema* schema = FindOp(node.op());
  if (schema == nullptr) {
    return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": op is not supported"));
  }
  // (Callers folding Shape or Size pass no values: those need types only.)
  std::vector<const Tensor*> inputs = given;
  inputs.resize(std::max(inputs.size(), node.inputs().size()), nullptr);
  if (node.has_subgraphs()) return RunControlNode(node, inputs, observe);
  if (TouchesNonTensor(node)) return RunValueNode(node, *schema, inputs);
  if (schema->from_types && node.input(0) != nullptr && node.input(0)->type().IsStatic()) {
    return schema->from_types(node);
  }
  if (HasStaticTypes(node)) return RunStaticNode(node, *schema, inputs);
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    if (node.input(i) != nullptr && (inputs[i] == nullptr || !inputs[i]->is_tensor())) {
      return absl::InvalidArgumentError(
          absl::StrCat(NodeLabel(node), ": input '", node.input(i)->name(), "' holds no tensor"));
    }
  }
  KILN_ASSIGN_OR_RETURN(ConcreteNode concrete, Concretize(node, *schema, inputs));
  return RunStaticNode(*concrete.node, *schema, inputs);
}

absl::StatusOr<std::vector<Tensor>> RunGraphOn(const Graph& graph, const std::vector<const Tensor*>& inputs,
                                               const Observer& observe) {
  if (inputs.size() != graph.inputs().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph has ", graph.inputs().size(), " inputs, got ", inputs.size()));
  }
  std::unordered_map<const Value*, const Tensor*> env;
  std::vector<std::unique_ptr<Tensor>> owned;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("graph input '", graph.inputs()[i]->name(), "' has no value"));
    }
    env[graph.inputs()[i]] = inputs[i];
    if (observe) observe(graph.inputs()[i], *inputs[i]);
  }
  auto lookup = [&](const Value* v) -> const Tensor* {
    if (v == nullptr) return nullptr;
    if (v->is_constant()) return v->constant().get();
    auto it = env.find(v);
    return it == env.end() ? nullptr : it->second;
  };
  for (const Node* node : graph.nodes()) {
    std::vector<const Tensor*> args;
    for (const Value* in : node->inputs()) {
      const Tensor* t = lookup(in);
      if (in != nullptr && t == nullptr) {
        return absl::InternalError(absl::StrCat(NodeLabel(*node), ": input '", in->name(), "' has no value"));
      }
      args.push_back(t);
    }
    absl::StatusOr<std::vector<Tensor>> results = EvaluateNodeObserved(*node, args, observe);
    if (!results.ok()) return results.status();
    if (results->size() != node->outputs().size()) {
      return absl::InternalError(
          absl::StrCat(NodeLabel(*node), ": ", results->size(), " values for ", node->outputs().size(), " outputs"));
    }
    for (size_t i = 0; i < results->size(); ++i) {
      owned.push_back(std::make_unique<Tensor>(std::move((*results)[i])));
      env[node->outputs()[i]] = owned.back().get();
      if (observe) observe(node->outputs()[i], *owned.back());
    }
  }
  std::vector<Tensor> outputs;
  for (const Value* out : graph.outputs()) {
    const Tensor* t = lookup(out);
    if (t == nullptr) return absl::InternalError(absl::StrCat("graph output '", out->name(), "' has no value"));
    outputs.push_back(*t);
  }
  return outputs;
}

}  // namespace interp

absl::StatusOr<std::vector<Tensor>> EvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs) {
  return interp::EvaluateNodeObserved(node, inputs, nullptr);
}

absl::StatusOr<std::vector<Tensor>> RunGraph(const Graph& graph, const std::vector<Tensor>& inputs,
                                             const std::function<void(const Value*, const Tensor&)>& observe) {
  std::vector<const Tensor*> borrowed;
  borrowed.reserve(inputs.size());
  for (const Tensor& t : inputs) borrowed.push_back(&t);
  return interp::RunGraphOn(graph, borrowed, observe);
}

}  // namespace kiln
