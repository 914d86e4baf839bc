// Glue for graphs whose shapes are known only at run time (GluePlan::dynamic): one entry,
// kiln_dynamic_entry(inputs, outputs, exec), that runs each node in order: its shape
// function (kiln/kernels/shape.h) fills the outputs' dims, exec->alloc gives their
// buffers, the kernel runs, and each buffer goes back after its last reader. Static
// nodes in such a graph run the same way with constant dims.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "glue.h"
#include "glue_builder.h"
#include "kernel_abi.h"
#include "kiln/common/status.h"
#include "kiln/runtime.h"

namespace kiln::codegen {
namespace {

// Where a dynamic node's lowering probes an unknown dim: the kernels read dims from their
// tensors at run time and the shape function completes the parameters that follow from
// dims, so the probe only picks the kernel and its constant operands (packed weights).
constexpr int64_t kProbeDim = 32;
// The largest constant a shape function is given the data of (shapes, axes, scales, k).
constexpr int64_t kShapeDataElements = 4096;

// Whether a control-flow node's driver handles its values (see PlanDynamicGlue).
bool ControlTakesNonTensors(const Node& node) {
  if (node.op() == "If" || node.op() == "SequenceMap" || !TouchesNonTensor(node)) return true;
  if (node.op() != "Loop") return false;
  const Graph* body = node.GetGraph("body");
  if (body == nullptr) return false;
  const size_t carried = node.inputs().size() - std::min(node.inputs().size(), 2 + node.num_captured());
  for (size_t k = 1 + carried; k < body->outputs().size(); ++k) {
    if (!body->outputs()[k]->type().is_tensor()) return false;
  }
  for (size_t k = carried; k < node.outputs().size(); ++k) {
    if (!node.output(k)->type().is_tensor()) return false;
  }
  return true;
}

bool IsStaticNode(const Node& node) {
  for (const Value* v : node.inputs()) {
    if (v != nullptr && !v->type().IsStatic()) return false;
  }
  for (const Value* v : node.outputs()) {
    if (!v->type().IsStatic()) return false;
  }
  return true;
}

InferContext ContextOf(const Node& node) {
  InferContext ctx{node, {}, {}, {}};
  for (const Value* in : node.inputs()) {
    ctx.input_types.push_back(in ? &in->type() : nullptr);
    ctx.input_constants.push_back(in && in->is_constant() ? in->constant().get() : nullptr);
  }
  ctx.output_types.resize(node.outputs().size());
  return ctx;
}

// Lowers `node` as if its unknown dims were kProbeDim (the outputs' probe dims follow from
// the inputs' through the shape function), then restores the types. `plain`: the op's own
// lowering, without the artifact's packed, sparse or bf16 choices.
absl::StatusOr<KernelCall> LowerWithProbe(const OpSchema& schema, const Node& node, const DynamicShape& shape,
                                          bool plain = false) {
  std::vector<std::pair<Value*, TensorType>> saved;
  auto probe = [&](Value* v, const std::vector<int64_t>* dims) {
    if (v == nullptr || v->type().IsStatic()) return;
    saved.emplace_back(v, v->type());
    TensorType t = v->type();
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const int64_t given = dims != nullptr && d < dims->size() ? (*dims)[d] : -1;
      if (!t.shape[d].known()) t.shape[d] = Dim::Known(given >= 0 ? given : kProbeDim);
    }
    v->set_type(t);
  };
  for (Value* v : node.inputs()) probe(v, nullptr);
  absl::StatusOr<std::vector<std::vector<int64_t>>> dims = EvaluateShape(node, shape);
  for (size_t i = 0; i < node.outputs().size(); ++i) {
    probe(node.output(i), dims.ok() && i < dims->size() ? &(*dims)[i] : nullptr);
  }
  absl::StatusOr<KernelCall> call = plain ? schema.lower(node) : LowerForArtifact(schema, node);
  for (auto& [v, t] : saved) v->set_type(std::move(t));
  return call;
}

absl::StatusOr<KernelCall> LowerDynamicNode(GluePlan& plan, const Node& node, const OpSchema& schema) {
  if (schema.from_types) {  // Shape of a run-time shape: a kernel reads the dims
    plan.shape_calls.emplace_back();
    return schema.lower(node);
  }
  if (!schema.dynamic) {
    return absl::UnimplementedError(
        absl::StrCat(NodeLabel(node),
                     ": does not compile with shapes known only at run time yet; give static "
                     "input shapes with --input-shape"));
  }
  KILN_ASSIGN_OR_RETURN(DynamicShape shape, schema.dynamic(ContextOf(node)));
  KILN_ASSIGN_OR_RETURN(KernelCall call, LowerWithProbe(schema, node, shape));
  const bool plain = (node.op() == "Gemm" && call.kernel != "gemm") || (node.op() == "Conv" && call.kernel == "matmul");
  if (call.kernel == "sparse_matmul" || plain) {
    // These take their rows from their parameters, which the run-time shape functions do
    // not complete (shape_matmul completes a MatMul's kiln_matmul_params; shape_gemm none):
    // the dense f32 kernel here, lowered with the node's choices set aside.
    Node& relowered = const_cast<Node&>(node);
    const std::map<std::string, AttrValue> attrs = relowered.attrs();
    relowered.mutable_attrs()["kiln.algorithm"] = std::string("dense");
    relowered.mutable_attrs().erase("kiln.precision");
    absl::StatusOr<KernelCall> dense = LowerWithProbe(schema, node, shape, plain);
    relowered.mutable_attrs() = attrs;
    KILN_ASSIGN_OR_RETURN(call, std::move(dense));
  }
  // Scratch is sized for the probe; only Winograd's (a fixed number of tiles at a time,
  // whatever the size) holds for every shape.
  if (call.scratch_bytes > 0 && call.kernel != "conv_winograd" && call.kernel != "conv_winograd_bf16") {
    return absl::UnimplementedError(
        absl::StrCat(NodeLabel(node), ": its kernel's workspace depends on shapes known only at run time"));
  }
  plan.shape_calls.emplace_back(std::move(shape.shape));
  return call;
}

// Bytes of a value at the probe size (an estimate, to pair buffers of like size in a slot).
int64_t ProbeBytes(const TensorType& type) {
  int64_t n = DTypeSize(type.dtype);
  for (const Dim& d : type.shape) n *= d.known() ? d.size : kProbeDim;
  return n;
}

// The symbolic memory plan: interval colouring of the buffers' lifetimes (definition to last
// reader, by node index). A buffer takes a free slot (its occupant's last reader ran before
// this node, so a kernel never reads and writes one slot at once), preferring the smallest
// whose probe size fits, else the largest; a node's scratch lives for that node alone.
void AssignSlots(GluePlan& plan, const std::map<const Value*, size_t>& last_use,
                 const std::set<const Value*>& escaping) {
  std::vector<int64_t> free_after;  // per slot: the last node its occupant is read by
  std::vector<int64_t> probe_bytes;
  auto take = [&](int64_t index, int64_t until, int64_t bytes) {
    int32_t best = -1;
    for (int32_t s = 0; s < static_cast<int32_t>(free_after.size()); ++s) {
      if (free_after[s] >= index) continue;
      const bool fits = probe_bytes[s] >= bytes;
      const bool best_fits = best >= 0 && probe_bytes[best] >= bytes;
      if (best < 0 || (fits && (!best_fits || probe_bytes[s] < probe_bytes[best])) ||
          (!fits && !best_fits && probe_bytes[s] > probe_bytes[best])) {
        best = s;
      }
    }
    if (best < 0) {
      best = static_cast<int32_t>(free_after.size());
      free_after.push_back(-1);
      probe_bytes.push_back(0);
    }
    free_after[best] = until;
    probe_bytes[best] = std::max(probe_bytes[best], bytes);
    return best;
  };
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const Node& node = *plan.nodes[i];
    // A control-flow driver and a sequence kernel make their outputs from exec->alloc.
    if (!plan.calls[i].has_value() || plan.calls[i]->allocates_outputs) continue;
    const KernelCall& call = *plan.calls[i];
    for (size_t k = 0; k < node.outputs().size(); ++k) {
      const Value* out = node.output(k);
      if ((call.is_view && k == 0) || escaping.count(out) > 0) continue;
      plan.slots[out] = take(static_cast<int64_t>(i), static_cast<int64_t>(last_use.at(out)), ProbeBytes(out->type()));
    }
    if (call.scratch_bytes > 0) {
      plan.scratch_slots[i] = take(static_cast<int64_t>(i), static_cast<int64_t>(i), call.scratch_bytes);
    }
  }
  plan.num_slots = static_cast<int32_t>(free_after.size());
}

}  // namespace

absl::Status PlanDynamicGlue(GluePlan& plan) {
  const Graph& graph = *plan.graph;
  std::map<const Value*, size_t> last_use;  // by root
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const Node& node = *plan.nodes[i];
    const OpSchema* schema = FindOp(node.op());
    if (schema == nullptr) return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": op is not supported"));
    KernelCall call;
    if (node.has_subgraphs()) {  // a driver calls the bodies' functions
      // If takes its branch's outputs over whatever they are, Loop's carried values and
      // SequenceMap's values may be sequences or optionals too (the drivers copy them as
      // one-block values); Loop's scan outputs and Scan's values are stacked as tensors.
      if (!ControlTakesNonTensors(node)) {
        return absl::UnimplementedError(
            absl::StrCat(NodeLabel(node), ": does not compile with sequences or optionals among its values yet"));
      }
      KILN_RETURN_IF_ERROR(PlanBodies(plan, node));
      plan.shape_calls.emplace_back();
    } else if (TouchesNonTensor(node)) {
      KILN_ASSIGN_OR_RETURN(call, LowerForArtifact(*schema, node));
      if (!call.allocates_outputs) {
        return absl::UnimplementedError(
            absl::StrCat(NodeLabel(node), ": does not compile over sequences or optionals yet"));
      }
      plan.shape_calls.emplace_back();
    } else if (IsStaticNode(node)) {
      if (schema->from_types) {
        return absl::FailedPreconditionError(absl::StrCat(NodeLabel(node), ": must be folded before codegen"));
      }
      KILN_ASSIGN_OR_RETURN(call, LowerForArtifact(*schema, node));
      plan.shape_calls.emplace_back();
    } else {
      KILN_ASSIGN_OR_RETURN(call, LowerDynamicNode(plan, node, *schema));
    }
    PlaceCallWeights(plan, node, call);
    // The constants its shape function may read (a Reshape's shape, Resize's scales: always
    // small). A weight it only takes the dims of (a Conv's, for the channels) is not placed
    // again when lowering replaced it by its packed form: the function gets its dims alone.
    if (const std::optional<KernelCall>& shape = plan.shape_calls.back(); shape.has_value()) {
      for (const KernelOperand& operand : shape->inputs) {
        const Value* in = operand.node_input >= 0 ? node.input(operand.node_input) : nullptr;
        if (in != nullptr && in->is_constant() && in->constant()->num_elements() <= kShapeDataElements) {
          PlaceWeight(plan, in->constant().get());
        }
        // One the lowering made (StringNormalizer's stopwords).
        if (operand.node_input < 0 && operand.constant != nullptr) PlaceWeight(plan, operand.constant.get());
      }
    }
    for (const Value* in : node.inputs()) {
      if (in == nullptr) continue;
      auto root = plan.roots.find(in);
      if (root != plan.roots.end()) last_use[root->second] = i;
    }
    for (size_t k = 0; k < node.outputs().size(); ++k) {
      const Value* out = node.output(k);
      const Value* source = call.is_view && k == 0 ? node.input(0) : nullptr;
      auto root = source != nullptr ? plan.roots.find(source) : plan.roots.end();
      plan.roots[out] = source == nullptr ? out : root != plan.roots.end() ? root->second : source;
      last_use.emplace(plan.roots[out], i);
    }
    if (node.has_subgraphs()) {
      plan.calls.emplace_back();
    } else {
      plan.calls.emplace_back(std::move(call));
    }
    plan.fused.push_back(false);
  }
  for (const Value* out : graph.outputs()) {
    if (out->is_constant()) PlaceWeight(plan, out->constant().get());
  }
  // A buffer goes back after its last reader, unless a graph output holds it.
  std::set<const Value*> escaping;
  for (const Value* out : graph.outputs()) {
    if (auto root = plan.roots.find(out); root != plan.roots.end()) escaping.insert(root->second);
  }
  AssignSlots(plan, last_use, escaping);
  // Bodies run while their graph's buffers are live: every plan of the module gets slots of
  // its own, numbered after the outermost graph's (bodies are planned inside it, so here).
  if (plan.root == nullptr) {
    int32_t base = plan.num_slots;
    for (const std::unique_ptr<GluePlan>& body : plan.bodies) {
      body->slot_base = base;
      for (auto& [value, slot] : body->slots) slot += base;
      for (auto& [index, slot] : body->scratch_slots) slot += base;
      base += body->num_slots;
    }
  }
  // A buffer outside the slots goes back to the pool after its last reader (none today:
  // every owned buffer that does not escape has a slot; kept for buffers a kernel makes).
  plan.releases.resize(plan.nodes.size());
  for (const auto& [root, index] : last_use) {
    const bool owned = root->producer() != nullptr && !root->is_constant();
    if (owned && escaping.count(root) == 0 && plan.slots.count(root) == 0) plan.releases[index].push_back(root);
  }
  // The outermost graph's nodes in parts of kNodesPerPart, each a function of its own
  // (kiln_part_N, called by the entry in turn), spread over modules compiled in
  // parallel as the static glue's parts are: LLVM's optimisation and code generation grow
  // faster than linearly in a function's size, and one function of SSDlite's 17,705 nodes
  // at 8 images took over 11 minutes to compile. A body is one function.
  plan.num_parts =
      plan.root == nullptr ? std::max<size_t>(1, (plan.nodes.size() + kNodesPerPart - 1) / kNodesPerPart) : 1;
  plan.num_modules = std::clamp<size_t>(plan.num_parts / 4, 1, 4);
  return absl::OkStatus();
}

llvm::Value* GlueBuilder::ElementCount(llvm::Value* dims, size_t rank) {
  llvm::Value* n = builder_.getInt64(1);
  for (size_t d = 0; d < rank; ++d) {
    n = builder_.CreateMul(n, builder_.CreateLoad(i64_, builder_.CreateConstGEP1_64(i64_, dims, d)));
  }
  return n;
}

llvm::Value* GlueBuilder::EmitAlloc(llvm::Value* bytes, size_t index, const std::string& name) {
  // kiln_kexec: {pool, parallel_for, kernel_done, profile_ctx, arena, alloc, release, slot, text_arena, alloc_text}
  llvm::Value* arena = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 4));
  llvm::Value* alloc = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 5));
  auto* alloc_type = llvm::FunctionType::get(ptr_, {ptr_, i64_}, false);
  llvm::Value* size =
      builder_.CreateSelect(builder_.CreateICmpSGT(bytes, builder_.getInt64(0)), bytes, builder_.getInt64(1));
  llvm::Value* data = builder_.CreateCall(alloc_type, alloc, {arena, size}, name);
  llvm::Value* rc =
      builder_.CreateSelect(builder_.CreateIsNull(data), builder_.getInt32(KILN_KERR_MEMORY), builder_.getInt32(0));
  EmitFailureCheck(rc, index, name + ".alloc");
  return data;
}

llvm::Value* GlueBuilder::EmitSlot(llvm::Value* bytes, int32_t slot, size_t index, const std::string& name) {
  // kiln_kexec: {..., arena (4), alloc, release, slot (7)}
  llvm::Value* arena = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 4));
  llvm::Value* slot_fn = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 7));
  auto* slot_type = llvm::FunctionType::get(ptr_, {ptr_, i32_, i64_}, false);
  llvm::Value* size =
      builder_.CreateSelect(builder_.CreateICmpSGT(bytes, builder_.getInt64(0)), bytes, builder_.getInt64(1));
  llvm::Value* data =
      builder_.CreateCall(slot_type, slot_fn, {arena, builder_.getInt32(static_cast<uint32_t>(slot)), size}, name);
  llvm::Value* rc =
      builder_.CreateSelect(builder_.CreateIsNull(data), builder_.getInt32(KILN_KERR_MEMORY), builder_.getInt32(0));
  EmitFailureCheck(rc, index, name + ".slot");
  return data;
}

void GlueBuilder::EmitRelease(llvm::Value* data) {
  llvm::Value* arena = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 4));
  llvm::Value* release = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 6));
  auto* release_type = llvm::FunctionType::get(builder_.getVoidTy(), {ptr_, ptr_}, false);
  builder_.CreateCall(release_type, release, {arena, data});
}

absl::StatusOr<GlueBuilder::RtTensor> GlueBuilder::RtOfConstant(const Tensor* tensor) {
  KILN_ASSIGN_OR_RETURN(llvm::Value * data, ConstantTensor(tensor));
  return RtTensor{data, Int64Array(tensor->dims()), tensor->rank(), tensor->dtype()};
}

absl::StatusOr<GlueBuilder::RtTensor> GlueBuilder::RtOf(const Value* value) {
  if (value == nullptr)
    return RtTensor{llvm::ConstantPointerNull::get(ptr_), llvm::ConstantPointerNull::get(ptr_), 0, DType::kUndefined};
  if (value->is_constant()) return RtOfConstant(value->constant().get());
  llvm::Value* data = DataOf(value);
  if (data == nullptr) return absl::InternalError(absl::StrCat("value '", value->name(), "' has no buffer"));
  auto dims = rt_dims_.find(value);
  const TensorType& type = value->type();
  RtTensor t{data, dims != rt_dims_.end() ? dims->second : Int64Array(type.StaticDims()),
             static_cast<int64_t>(type.shape.size()), type.dtype};
  if (type.holds_sequence()) t.rank = 1, t.dtype = static_cast<DType>(KILN_DTYPE_SEQUENCE);
  if (auto rank = rt_rank_.find(value); rank != rt_rank_.end()) t.rank_value = rank->second;
  return t;
}

absl::Status GlueBuilder::EmitAllocatingNode(size_t index) {
  const Node& node = *plan_.nodes[index];
  const KernelCall& call = *plan_.calls[index];
  std::vector<RtTensor> ins, outs;
  for (const KernelOperand& operand : call.inputs) {
    KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(operand.node_input >= 0 ? node.input(operand.node_input) : nullptr));
    ins.push_back(t);
  }
  for (const Value* out : node.outputs()) {
    const TensorType& type = out->type();
    outs.push_back(RtTensor{llvm::ConstantPointerNull::get(ptr_), llvm::ConstantPointerNull::get(ptr_),
                            type.holds_sequence() ? 1 : static_cast<int64_t>(type.shape.size()),
                            type.holds_sequence() ? static_cast<DType>(KILN_DTYPE_SEQUENCE) : type.dtype});
  }
  llvm::Value* out_array = KTensors(outs, "out");
  llvm::Value* kcall =
      KCall(KTensors(ins, "in"), ins.size(), out_array, outs.size(), Params(call.params), call.params.size_bytes());
  llvm::FunctionCallee kernel = module_.getOrInsertFunction("kiln_k_" + call.kernel, kernel_type_);
  EmitFailureCheck(builder_.CreateCall(kernel, {kcall}), index, node.name());
  for (size_t k = 0; k < node.outputs().size(); ++k) {
    const Value* out = node.output(k);
    llvm::Value* slot = builder_.CreateConstGEP1_64(ktensor_, out_array, k);
    rt_data_[out] = builder_.CreateLoad(ptr_, builder_.CreateStructGEP(ktensor_, slot, 0), out->name());
    rt_dims_[out] = builder_.CreateLoad(ptr_, builder_.CreateStructGEP(ktensor_, slot, 1), out->name() + ".dims");
    if (!out->type().has_shape && !out->type().holds_sequence()) {
      rt_rank_[out] = builder_.CreateLoad(i32_, builder_.CreateStructGEP(ktensor_, slot, 2), out->name() + ".rank");
    }
  }
  for (const Value* dead : plan_.releases[index]) EmitRelease(DataOf(dead));
  return absl::OkStatus();
}

absl::Status GlueBuilder::EmitValueExport(size_t i, const Value* value) {
  KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(value));
  const KernelCall call = ValueExportCall();
  llvm::Value* slot = builder_.CreateConstGEP1_64(ktensor_, outputs_arg_, i);
  llvm::Value* kcall = KCall(KTensors({t}, "export.in"), 1, slot, 1, Params(call.params), call.params.size_bytes());
  llvm::FunctionCallee kernel = module_.getOrInsertFunction("kiln_k_" + call.kernel, kernel_type_);
  EmitFailureCheck(builder_.CreateCall(kernel, {kcall}), plan_.nodes.size(), value->name() + ".export");
  return absl::OkStatus();
}

namespace {

// A fused elementwise chain whose shapes are all known, in a graph with run-time shapes
// elsewhere (a detector's backbone before its NMS): the generated loop the static glue
// emits, not the library's op-by-op evaluation of the chain.
bool IsStaticFusedLoop(const Node& node, bool has_shape_call) {
  if (node.op() != kFusedElementwiseOp || has_shape_call) return false;
  const DType dtype = node.output(0)->type().dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) return false;
  if (!node.output(0)->type().IsStatic()) return false;
  for (const Value* in : node.inputs()) {
    if (in == nullptr || !in->type().IsStatic() || in->type().dtype != dtype) return false;
  }
  return true;
}

}  // namespace

absl::Status GlueBuilder::EmitDynamicNode(size_t index) {
  const Node& node = *plan_.nodes[index];
  if (node.has_subgraphs()) return EmitControlNode(index);
  if (plan_.calls[index]->allocates_outputs) return EmitAllocatingNode(index);
  const KernelCall& call = *plan_.calls[index];
  const std::string name = node.name();
  // The kernel's parameters: the constant, or a copy the shape function completes.
  llvm::Value* params = Params(call.params);
  const std::optional<KernelCall>& shape = plan_.shape_calls[index];
  if (shape.has_value()) {
    if (!call.params.empty()) {
      llvm::Value* copy =
          alloca_builder_->CreateAlloca(i8_, builder_.getInt64(call.params.size_bytes()), name + ".params");
      llvm::cast<llvm::AllocaInst>(copy)->setAlignment(llvm::Align(8));
      builder_.CreateMemCpy(copy, llvm::MaybeAlign(8), params, llvm::MaybeAlign(8), call.params.size_bytes());
      params = copy;
    }
    std::vector<RtTensor> ins, outs;
    for (const KernelOperand& operand : shape->inputs) {
      const Value* in = operand.node_input >= 0 ? node.input(operand.node_input) : nullptr;
      const Tensor* constant = in != nullptr && in->is_constant() ? in->constant().get() : operand.constant.get();
      if (constant != nullptr && plan_.weights_owner().weight_offsets.count(constant) == 0) {
        // A large constant (a weight) the shape function reads the dims of only.
        ins.push_back(RtTensor{llvm::ConstantPointerNull::get(ptr_), Int64Array(constant->dims()), constant->rank(),
                               constant->dtype()});
        continue;
      }
      // An omitted optional input (no node input, no constant) is a null tensor.
      KILN_ASSIGN_OR_RETURN(RtTensor t, operand.node_input >= 0       ? RtOf(in)
                                        : operand.constant != nullptr ? RtOfConstant(operand.constant.get())
                                                                      : RtOf(nullptr));
      ins.push_back(t);
    }
    for (const Value* out : node.outputs()) {
      const int64_t rank = static_cast<int64_t>(out->type().shape.size());
      llvm::Value* dims = DimsBuffer(out, rank);
      rt_dims_[out] = dims;
      outs.push_back(RtTensor{llvm::ConstantPointerNull::get(ptr_), dims, rank, out->type().dtype});
    }
    outs.push_back(RtTensor{call.params.empty() ? llvm::ConstantPointerNull::get(ptr_) : params,
                            llvm::ConstantPointerNull::get(ptr_), 0, DType::kUInt8});
    llvm::Value* kcall = KCall(KTensors(ins, "shape.in"), ins.size(), KTensors(outs, "shape.out"), outs.size(),
                               Params(shape->params), shape->params.size_bytes());
    llvm::FunctionCallee fn = module_.getOrInsertFunction("kiln_k_" + shape->kernel, kernel_type_);
    EmitFailureCheck(builder_.CreateCall(fn, {kcall}), index, name + ".shape");
  }
  // Output buffers: a view shares its input's.
  for (size_t k = 0; k < node.outputs().size(); ++k) {
    const Value* out = node.output(k);
    if (call.is_view && k == 0) {
      KILN_ASSIGN_OR_RETURN(RtTensor source, RtOf(node.input(0)));
      rt_data_[out] = source.data;
      continue;
    }
    llvm::Value* count = rt_dims_.count(out) ? ElementCount(rt_dims_[out], out->type().shape.size())
                                             : builder_.getInt64(NumElements(out->type().StaticDims()));
    llvm::Value* bytes = builder_.CreateMul(count, builder_.getInt64(DTypeSize(out->type().dtype)));
    auto slot = plan_.slots.find(out);
    rt_data_[out] = slot != plan_.slots.end() ? EmitSlot(bytes, slot->second, index, out->name())
                                              : EmitAlloc(bytes, index, out->name());
  }
  if (IsStaticFusedLoop(node, shape.has_value())) {
    KILN_RETURN_IF_ERROR(EmitFusedElementwise(node, index, /*run_time_buffers=*/true));
  } else if (!call.is_view) {
    std::vector<RtTensor> ins, outs;
    std::vector<TensorType> constant_types;
    for (const KernelOperand& operand : call.inputs) {
      if (operand.node_input >= 0) {
        KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(node.input(operand.node_input)));
        ins.push_back(t);
      } else if (operand.constant != nullptr) {
        KILN_ASSIGN_OR_RETURN(RtTensor t, RtOfConstant(operand.constant.get()));
        ins.push_back(t);
      } else {
        KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(nullptr));
        ins.push_back(t);
      }
    }
    for (const Value* out : node.outputs()) {
      KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(out));
      outs.push_back(t);
    }
    llvm::Value* scratch = nullptr;
    if (call.scratch_bytes > 0) {
      scratch =
          EmitSlot(builder_.getInt64(call.scratch_bytes), plan_.scratch_slots.at(index), index, name + ".scratch");
      outs.push_back(RtTensor{scratch, Int64Array({call.scratch_bytes}), 1, DType::kUInt8});
    }
    // The instantiation follows the first input's or output's element type.
    TensorType in0, out0;
    if (!ins.empty()) in0.dtype = ins[0].dtype;
    if (!outs.empty()) out0.dtype = outs[0].dtype;
    auto symbol = KernelSymbol(call.kernel, ins.empty() ? nullptr : &in0, outs.empty() ? nullptr : &out0);
    if (!symbol.ok()) return Annotate(symbol.status(), NodeLabel(node));
    llvm::Value* kcall =
        KCall(KTensors(ins, "in"), ins.size(), KTensors(outs, "out"), outs.size(), params, call.params.size_bytes());
    llvm::FunctionCallee kernel = module_.getOrInsertFunction(*symbol, kernel_type_);
    EmitFailureCheck(builder_.CreateCall(kernel, {kcall}), index, name);
    const std::string& injected = plan_.options->inject_kernel_bug;
    if (!injected.empty() && !outs.empty() && (call.kernel == injected || call.kernel.rfind(injected + "_", 0) == 0)) {
      EmitInjectedBug(outs[0].data, node.output(0)->type());
    }
  }
  for (const Value* dead : plan_.releases[index]) EmitRelease(DataOf(dead));
  return absl::OkStatus();
}

absl::Status GlueBuilder::EmitDynamicEntry() {
  // Every body's function first, each by a builder of its own plan (bodies call each other
  // by name).
  for (const auto& body : plan_.bodies) {
    GlueBuilder builder(*body, module_);
    KILN_RETURN_IF_ERROR(builder.EmitDynamicFunction(body->function_name).status());
  }
  KILN_ASSIGN_OR_RETURN(llvm::Function * entry, EmitDynamicFunction("kiln_dynamic_entry"));
  EmitDescriptor(nullptr, entry);
  return absl::OkStatus();
}

void GlueBuilder::LoadDynamicInputs() {
  rt_data_.clear();
  rt_dims_.clear();
  rt_rank_.clear();
  for (size_t i = 0; i < graph_.inputs().size(); ++i) {
    const Value* v = graph_.inputs()[i];
    llvm::Value* slot = builder_.CreateConstGEP1_64(ktensor_, inputs_arg_, i);
    rt_data_[v] = builder_.CreateLoad(ptr_, builder_.CreateStructGEP(ktensor_, slot, 0), v->name());
    if (!v->type().IsStatic()) {
      rt_dims_[v] = builder_.CreateLoad(ptr_, builder_.CreateStructGEP(ktensor_, slot, 1), v->name() + ".dims");
    }
    if (!v->type().is_tensor() && !v->type().has_shape && !v->type().holds_sequence()) {
      rt_rank_[v] = builder_.CreateLoad(i32_, builder_.CreateStructGEP(ktensor_, slot, 2), v->name() + ".rank");
    }
  }
}

// The frame of a multi-part entry: per node output, four words (its data pointer, its
// dims pointer, its rank, and one word of dims) and more words where its rank is higher,
// in node order: the same layout in every module.
void GlueBuilder::LayOutFrame() {
  frame_base_.clear();
  frame_ranks_.clear();
  frame_words_ = 0;
  for (size_t i = 0; i < plan_.nodes.size(); ++i) {
    const bool allocates = plan_.calls[i].has_value() && plan_.calls[i]->allocates_outputs;
    for (const Value* out : plan_.nodes[i]->outputs()) {
      if (out == nullptr) continue;
      // (EmitAllocatingNode reads such a value's rank back at run time.)
      if (allocates && !out->type().has_shape && !out->type().holds_sequence()) frame_ranks_.insert(out);
      frame_base_[out] = frame_words_;
      frame_words_ += 3 + std::max<int64_t>(1, static_cast<int64_t>(out->type().shape.size()));
    }
  }
}

llvm::Value* GlueBuilder::DimsBuffer(const Value* value, int64_t rank) {
  auto base = frame_base_.find(value);
  if (frame_ == nullptr || base == frame_base_.end()) {
    return alloca_builder_->CreateAlloca(i64_, builder_.getInt32(static_cast<uint32_t>(std::max<int64_t>(rank, 1))),
                                         value->name() + ".dims");
  }
  return alloca_builder_->CreateConstGEP1_64(i64_, frame_, base->second + 3, value->name() + ".dims");
}

void GlueBuilder::Persist(const Value* value) {
  auto base = frame_base_.find(value);
  if (frame_ == nullptr || base == frame_base_.end()) return;
  const std::map<const Value*, llvm::Value*>* parts[] = {&rt_data_, &rt_dims_, &rt_rank_};
  for (int64_t k = 0; k < 3; ++k) {
    auto it = parts[k]->find(value);
    if (it != parts[k]->end())
      builder_.CreateStore(it->second, builder_.CreateConstGEP1_64(i64_, frame_, base->second + k));
  }
}

llvm::Value* GlueBuilder::DataOf(const Value* value) {
  if (auto it = rt_data_.find(value); it != rt_data_.end()) return it->second;
  auto base = frame_base_.find(value);
  if (frame_ == nullptr || base == frame_base_.end()) return nullptr;
  // In a part, loaded before its first node (earlier parts wrote it), so that every use
  // sees it; in the entry, after the parts, where it is first used.
  llvm::IRBuilder<>& at = frame_is_argument_ ? *alloca_builder_ : builder_;
  auto load = [&](int64_t k, llvm::Type* type, const std::string& suffix) {
    return at.CreateLoad(type, at.CreateConstGEP1_64(i64_, frame_, base->second + k), value->name() + suffix);
  };
  rt_data_[value] = load(0, ptr_, "");
  // Dims and rank where the producer had them at run time (static dims are constants).
  if (!value->type().IsStatic()) rt_dims_[value] = load(1, ptr_, ".dims");
  if (frame_ranks_.count(value) > 0) rt_rank_[value] = load(2, i32_, ".rank");
  return rt_data_[value];
}

absl::Status GlueBuilder::EmitDynamicNodes(size_t begin, size_t end) {
  LoadDynamicInputs();
  for (size_t i = begin; i < end; ++i) {
    KILN_RETURN_IF_ERROR(EmitDynamicNode(i));
    // (The profile's kernels are the outermost graph's nodes; a body's run inside its node's.)
    if (plan_.root == nullptr) EmitKernelDone(static_cast<int32_t>(i));
    for (const Value* out : plan_.nodes[i]->outputs()) {
      if (out != nullptr) Persist(out);
    }
  }
  return absl::OkStatus();
}

absl::Status GlueBuilder::EmitDynamicPart(size_t part) {
  // The static parts' signature, with the frame where their workspace goes.
  llvm::Function* function = BeginFunction(absl::StrCat("kiln_part_", part), llvm::GlobalValue::ExternalLinkage);
  function->setVisibility(llvm::GlobalValue::HiddenVisibility);
  LayOutFrame();
  frame_ = workspace_arg_;
  workspace_arg_ = nullptr;
  frame_is_argument_ = true;
  KILN_RETURN_IF_ERROR(EmitDynamicNodes(plan_.PartBegin(part), plan_.PartEnd(part)));
  EndFunction();
  frame_ = nullptr;
  return absl::OkStatus();
}

absl::StatusOr<llvm::Function*> GlueBuilder::EmitDynamicFunction(const std::string& name) {
  auto* type = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_}, false);
  // A body is called from the parts, which may lie in other modules.
  const bool body = plan_.root != nullptr;
  llvm::Function* entry =
      BeginFunction(name, body ? llvm::GlobalValue::ExternalLinkage : llvm::GlobalValue::InternalLinkage, type);
  if (body) entry->setVisibility(llvm::GlobalValue::HiddenVisibility);
  if (plan_.num_parts > 1) {
    LayOutFrame();
    llvm::Value* frame =
        alloca_builder_->CreateAlloca(i64_, builder_.getInt32(static_cast<uint32_t>(frame_words_)), "frame");
    llvm::cast<llvm::AllocaInst>(frame)->setAlignment(llvm::Align(16));
    frame_ = frame;
    frame_is_argument_ = false;
    LoadDynamicInputs();
    EmitPartCalls(frame);
  } else {
    KILN_RETURN_IF_ERROR(EmitDynamicNodes(0, plan_.nodes.size()));
  }
  // Each output: the buffer that holds it, handed over, or a copy where the buffer is an
  // input's, a constant's, or another output's; its dims in a buffer of their own.
  // Sequences, optionals and tensors of a rank known at run time only are copied out by a
  // kernel (value_export); the values they came from go back once every output is out.
  std::set<const Value*> handed;
  std::vector<const Value*> exported;
  for (size_t i = 0; i < graph_.outputs().size(); ++i) {
    const Value* v = graph_.outputs()[i];
    if (!v->type().is_tensor() || !v->type().has_shape) {
      KILN_RETURN_IF_ERROR(EmitValueExport(i, v));
      auto root = plan_.roots.find(v);
      if (root != plan_.roots.end() && root->second->producer() != nullptr && !root->second->is_constant() &&
          handed.insert(root->second).second) {
        exported.push_back(root->second);
      }
      continue;
    }
    KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(v));
    llvm::Value* bytes =
        builder_.CreateMul(ElementCount(t.dims, static_cast<size_t>(t.rank)), builder_.getInt64(DTypeSize(t.dtype)));
    auto root = plan_.roots.find(v);
    const bool owned = root != plan_.roots.end() && root->second->producer() != nullptr &&
                       !root->second->is_constant() && handed.insert(root->second).second;
    llvm::Value* data = t.data;
    if (!owned) {
      data = EmitAlloc(bytes, plan_.nodes.size(), v->name() + ".copy");
      builder_.CreateMemCpy(data, llvm::MaybeAlign(1), t.data, llvm::MaybeAlign(1), bytes);
    }
    llvm::Value* dims =
        EmitAlloc(builder_.getInt64(std::max<int64_t>(t.rank, 1) * 8), plan_.nodes.size(), v->name() + ".dims");
    if (t.rank > 0) builder_.CreateMemCpy(dims, llvm::MaybeAlign(8), t.dims, llvm::MaybeAlign(8), t.rank * 8);
    llvm::Value* slot = builder_.CreateConstGEP1_64(ktensor_, outputs_arg_, i);
    builder_.CreateStore(data, builder_.CreateStructGEP(ktensor_, slot, 0));
    builder_.CreateStore(dims, builder_.CreateStructGEP(ktensor_, slot, 1));
    builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(t.rank)), builder_.CreateStructGEP(ktensor_, slot, 2));
    builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(t.dtype)),
                         builder_.CreateStructGEP(ktensor_, slot, 3));
  }
  for (const Value* v : exported) EmitRelease(DataOf(v));
  EndFunction();
  frame_ = nullptr;
  return entry;
}

}  // namespace kiln::codegen
