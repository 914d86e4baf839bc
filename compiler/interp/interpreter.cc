// The reference interpreter: a plain walk over the nodes, each run through its op's
// lowering and the natively compiled kernel library.
#include "kiln/compiler/interp.h"

#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "kernel_abi.h"
#include "kiln/compiler/ops.h"

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

absl::StatusOr<std::vector<Tensor>> EvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs) {
  const OpSchema* schema = FindOp(node.op());
  if (schema == nullptr) {
    return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": op is not supported"));
  }
  if (schema->from_types && node.input(0) != nullptr && node.input(0)->type().IsStatic()) {
    return schema->from_types(node);
  }
  for (const Value* out : node.outputs()) {
    if (!out->type().IsStatic()) {
      return absl::FailedPreconditionError(absl::StrCat(NodeLabel(node), ": output '", out->name(),
                                                        "' has no static shape (", PrintType(out->type()),
                                                        "); give input shapes with --input-shape"));
    }
  }
  if (!schema->lower) {  // control flow: its bodies are compiled, not interpreted
    return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": the interpreter does not run this op"));
  }
  absl::StatusOr<KernelCall> call = schema->lower(node);
  if (!call.ok()) return call.status();
  auto kernel = KernelTable().find(call->kernel);
  if (kernel == KernelTable().end()) {
    return absl::InternalError(absl::StrCat("no kernel named '", call->kernel, "'"));
  }
  std::vector<kiln_ktensor> in_views;
  for (const KernelOperand& operand : call->inputs) {
    in_views.push_back(View(operand.node_input >= 0 ? inputs[operand.node_input] : operand.constant.get()));
  }
  std::vector<Tensor> outputs;
  outputs.reserve(node.outputs().size());
  for (const Value* out : node.outputs()) outputs.emplace_back(out->type().dtype, out->type().StaticDims());
  std::vector<kiln_ktensor> out_views;
  for (const Tensor& t : outputs) out_views.push_back(View(&t));
  // A kernel's workspace, as codegen passes it: one more u8 output after the node's.
  std::optional<Tensor> scratch;
  if (call->scratch_bytes > 0) {
    scratch.emplace(DType::kUInt8, std::vector<int64_t>{call->scratch_bytes});
    out_views.push_back(View(&*scratch));
  }
  // String kernels take their texts from exec->alloc_text; the outputs copy them before
  // `texts` goes.
  std::deque<std::string> texts;
  kiln_kexec exec{};
  exec.text_arena = &texts;
  exec.alloc_text = [](void* arena, int64_t bytes) -> char* {
    return static_cast<std::deque<std::string>*>(arena)->emplace_back(static_cast<size_t>(bytes), '\0').data();
  };
  kiln_kcall kcall{};
  kcall.inputs = in_views.data();
  kcall.outputs = out_views.data();
  kcall.num_inputs = static_cast<int32_t>(in_views.size());
  kcall.num_outputs = static_cast<int32_t>(out_views.size());
  kcall.params = call->params.data();
  kcall.params_size = call->params.size_bytes();
  kcall.exec = &exec;
  int32_t rc = kernel->second(&kcall);
  if (rc != KILN_KERR_OK) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": ", KernelError(rc)));
  }
  for (Tensor& t : outputs) {
    if (t.dtype() == DType::kString) t.AdoptStrings();
  }
  return outputs;
}

absl::StatusOr<std::vector<Tensor>> RunGraph(const Graph& graph, const std::vector<Tensor>& inputs,
                                             const std::function<void(const Value*, const Tensor&)>& observe) {
  if (inputs.size() != graph.inputs().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph has ", graph.inputs().size(), " inputs, got ", inputs.size()));
  }
  std::unordered_map<const Value*, const Tensor*> env;
  std::vector<std::unique_ptr<Tensor>> owned;
  for (size_t i = 0; i < inputs.size(); ++i) {
    env[graph.inputs()[i]] = &inputs[i];
    if (observe) observe(graph.inputs()[i], inputs[i]);
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
    absl::StatusOr<std::vector<Tensor>> results = EvaluateNode(*node, args);
    if (!results.ok()) return results.status();
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

}  // namespace kiln
