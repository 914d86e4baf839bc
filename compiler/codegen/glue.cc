// The glue's plan and its kernel calls, parts, entry and descriptor: see glue.h.
#include "glue.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "glue_builder.h"
#include "kernel_abi.h"
#include "kiln/common/status.h"
#include "kiln/runtime.h"
#include "llvm/IR/Constants.h"

namespace kiln::codegen {
namespace {

enum class Typing { kNumeric, kFloat, kBytes, kUntyped };
enum class Source { kInput0, kOutput0 };
struct KernelTyping {
  Typing typing;
  Source source;
};

const std::map<std::string, KernelTyping>& KernelTypings() {
  static const auto* table = new std::map<std::string, KernelTyping>{
#define NUMERIC Typing::kNumeric
#define FLOAT Typing::kFloat
#define BYTES Typing::kBytes
#define UNTYPED Typing::kUntyped
#define INPUT0 Source::kInput0
#define OUTPUT0 Source::kOutput0
#define X(name, typing, source, params) {#name, {typing, source}},
#include "kernel_list.inc"
#undef X
#undef NUMERIC
#undef FLOAT
#undef BYTES
#undef UNTYPED
#undef INPUT0
#undef OUTPUT0
  };
  return *table;
}

}  // namespace

absl::StatusOr<std::string> KernelSymbol(const std::string& kernel, const TensorType* input0,
                                         const TensorType* output0) {
  auto it = KernelTypings().find(kernel);
  if (it == KernelTypings().end()) return absl::InternalError(absl::StrCat("no kernel named '", kernel, "'"));
  if (it->second.typing == Typing::kUntyped) return absl::StrCat("kiln_k_", kernel);
  const TensorType* type = it->second.source == Source::kInput0 ? input0 : output0;
  if (type == nullptr)
    return absl::InternalError(absl::StrCat("kernel '", kernel, "' has no tensor to pick its type from"));
  if (it->second.typing == Typing::kBytes) return absl::StrCat("kiln_k_", kernel, "_b", DTypeSize(type->dtype));
  std::string suffix = DTypeName(type->dtype);
  if (it->second.typing == Typing::kFloat && type->dtype != DType::kFloat32 && type->dtype != DType::kFloat64) {
    return absl::InvalidArgumentError(absl::StrCat("kernel '", kernel, "' has no ", suffix, " version"));
  }
  return absl::StrCat("kiln_k_", kernel, "_", suffix);
}

namespace {

absl::Status CheckNode(const Node& node, const OpSchema* schema) {
  if (schema == nullptr) return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": op is not supported"));
  if (schema->from_types) {
    return absl::FailedPreconditionError(
        absl::StrCat(NodeLabel(node), ": must be folded before codegen (include fold-constants in the pipeline)"));
  }
  for (const Value* out : node.outputs()) {
    if (!out->type().IsStatic()) {
      return absl::FailedPreconditionError(absl::StrCat(NodeLabel(node), ": output '", out->name(),
                                                        "' has no static shape (", PrintType(out->type()),
                                                        "); give input shapes with --input-shape"));
    }
  }
  return absl::OkStatus();
}

// A view whose output shares the input's buffer needs no code; nor does a Concat whose
// inputs were written into their slices of its result.
// The node's call as the memory plan lowered it, or lowered now (a plan made without
// them, or for another graph).
absl::StatusOr<KernelCall> PlannedCall(const MemoryPlan& memory, const OpSchema& schema, const Node& node) {
  if (memory.calls != nullptr) {
    auto it = memory.calls->find(&node);
    if (it != memory.calls->end()) return it->second;
  }
  return LowerForArtifact(schema, node);
}

bool NeedsNoCode(const Node& node, const KernelCall& call, const MemoryPlan& memory) {
  if (call.is_view && memory.alias.count(node.output(0))) return true;
  return call.kernel == "concat" && !node.inputs().empty() &&
         std::all_of(node.inputs().begin(), node.inputs().end(), [&](const Value* in) {
           auto part = memory.parts.find(in);
           return part != memory.parts.end() && part->second.whole == node.output(0);
         });
}

}  // namespace

namespace {

void PlaceData(GluePlan& plan, const Tensor* tensor) {
  GluePlan& owner = plan.weights_owner();  // a body's constants go with its graph's
  // The weights object holds bytes; a string constant's pointers need relocations, so it
  // becomes an LLVM constant where the glue reads it (GlueBuilder::ConstantTensor).
  if (tensor->dtype() == DType::kString) {
    owner.weight_offsets.emplace(tensor, -1);
    return;
  }
  if (owner.weight_offsets.count(tensor) == 0) {
    owner.weight_offsets[tensor] = owner.weights.Add(tensor->data(), tensor->size_bytes());
  }
}

}  // namespace

void PlaceWeight(GluePlan& plan, const Tensor* tensor) {
  PlaceData(plan, tensor);
  plan.weights_owner().given_weights.insert(tensor);
}

void PlaceCallWeights(GluePlan& plan, const Node& node, const KernelCall& call) {
  std::set<int> read;
  bool made = false;
  for (const KernelOperand& operand : call.inputs) {
    const Value* in = operand.node_input >= 0 ? node.input(operand.node_input) : nullptr;
    if (in != nullptr && in->is_constant()) PlaceWeight(plan, in->constant().get());
    if (operand.node_input >= 0) read.insert(operand.node_input);
    if (operand.node_input < 0 && operand.constant != nullptr) {
      PlaceData(plan, operand.constant.get());
      plan.owned_constants.push_back(operand.constant);
      made = true;
    }
  }
  for (size_t i = 0; made && i < node.inputs().size(); ++i) {
    const Value* in = node.input(i);
    if (in != nullptr && in->is_constant() && read.count(static_cast<int>(i)) == 0)
      plan.weights_owner().given_weights.insert(in->constant().get());
  }
}

ArtifactSize WeightsSize(const GluePlan& plan) {
  ArtifactSize size;
  std::set<int64_t> placed;  // (equal bytes share one offset: DataObject::Add)
  for (const Tensor* given : plan.given_weights) {
    auto it = plan.weight_offsets.find(given);
    if (it != plan.weight_offsets.end() && it->second >= 0 && !placed.insert(it->second).second) continue;
    size.weights_given += given->size_bytes();
  }
  size.weights_added = plan.weights.payload_bytes() - size.weights_given;
  size.weights_alignment = plan.weights.size_bytes() - plan.weights.payload_bytes();
  return size;
}

absl::StatusOr<std::unique_ptr<GluePlan>> PlanGlue(const Graph& graph, const MemoryPlan& memory,
                                                   const CodegenOptions& options) {
  auto plan = std::make_unique<GluePlan>();
  plan->graph = &graph;
  plan->memory = &memory;
  plan->options = &options;
  for (const Node* node : graph.nodes()) plan->nodes.push_back(node);
  for (const Value* v : graph.values()) plan->dynamic = plan->dynamic || !v->type().IsStatic();
  // Control flow: bodies whose shapes may change per iteration, so the dynamic glue.
  for (const Node* node : plan->nodes) plan->dynamic = plan->dynamic || node->has_subgraphs();
  if (plan->dynamic) {
    KILN_RETURN_IF_ERROR(PlanDynamicGlue(*plan));
    return plan;
  }
  // Only constants the code reads are placed: a weight that lowering replaced by its
  // packed form is not.
  auto place_input = [&](const Node* node, size_t i) {
    const Value* in = node->input(i);
    if (in != nullptr && in->is_constant()) PlaceWeight(*plan, in->constant().get());
  };
  for (const Node* node : plan->nodes) {
    const OpSchema* schema = FindOp(node->op());
    KILN_RETURN_IF_ERROR(CheckNode(*node, schema));
    plan->fused.push_back(node->op() == kFusedElementwiseOp);
    if (plan->fused.back()) {
      for (size_t i = 0; i < node->inputs().size(); ++i) {
        // One-element constants become immediates in the loop.
        if (!node->input(i)->is_constant() || node->input(i)->constant()->num_elements() > 1) place_input(node, i);
      }
      plan->calls.emplace_back();
      continue;
    }
    KILN_ASSIGN_OR_RETURN(KernelCall call, PlannedCall(memory, *schema, *node));
    if (NeedsNoCode(*node, call, memory)) {
      // Its output is a view of (or holds) its inputs, which may be constants.
      for (size_t i = 0; i < node->inputs().size(); ++i) place_input(node, i);
      plan->calls.emplace_back();
      continue;
    }
    PlaceCallWeights(*plan, *node, call);
    plan->calls.emplace_back(std::move(call));
  }
  for (const Value* out : graph.outputs()) {
    if (out->is_constant()) PlaceWeight(*plan, out->constant().get());
  }
  plan->num_parts = std::max<size_t>(1, (plan->nodes.size() + kNodesPerPart - 1) / kNodesPerPart);
  // About 4 parts per module, at most 4 modules: enough to keep two to four cores busy.
  plan->num_modules = std::clamp<size_t>(plan->num_parts / 4, 1, 4);
  return plan;
}

absl::Status BuildGlueModule(const GluePlan& plan, size_t index, llvm::Module& module) {
  GlueBuilder builder(plan, module);
  return builder.Build(plan.ModuleBegin(index), plan.ModuleEnd(index), index == 0);
}

std::vector<std::string> CalledKernels(const llvm::Module& module) {
  std::vector<std::string> kernels;
  for (const llvm::Function& f : module) {
    if (f.isDeclaration() && f.getName().starts_with("kiln_k_")) kernels.push_back(f.getName().str());
  }
  return kernels;
}

GlueBuilder::GlueBuilder(const GluePlan& plan, llvm::Module& module)
    : plan_(plan),
      graph_(*plan.graph),
      memory_(*plan.memory),
      ctx_(module.getContext()),
      module_(module),
      builder_(module.getContext()) {
  ptr_ = llvm::PointerType::getUnqual(ctx_);
  i32_ = llvm::Type::getInt32Ty(ctx_);
  i64_ = llvm::Type::getInt64Ty(ctx_);
  f64_ = llvm::Type::getDoubleTy(ctx_);
  i8_ = llvm::Type::getInt8Ty(ctx_);
  // Mirrors kiln_ktensor and kiln_kcall in kernel_abi.h (pinned by the asserts below).
  static_assert(offsetof(kiln_ktensor, rank) == 16 && offsetof(kiln_ktensor, dtype) == 20 &&
                sizeof(kiln_ktensor) == 24);
  static_assert(offsetof(kiln_kcall, params) == 16 && offsetof(kiln_kcall, params_size) == 24 &&
                offsetof(kiln_kcall, exec) == 32 && offsetof(kiln_kcall, num_inputs) == 40 &&
                offsetof(kiln_kcall, num_outputs) == 44 && sizeof(kiln_kcall) == 48);
  ktensor_ = llvm::StructType::create(ctx_, {ptr_, ptr_, i32_, i32_}, "kiln_ktensor");
  kcall_ = llvm::StructType::create(ctx_, {ptr_, ptr_, ptr_, i64_, ptr_, i32_, i32_}, "kiln_kcall");
  kernel_type_ = llvm::FunctionType::get(i32_, {ptr_}, false);
  part_type_ = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_}, false);
}

llvm::GlobalVariable* GlueBuilder::ConstantBytes(const std::string& name, const void* data, int64_t size,
                                                 unsigned align) {
  llvm::Constant* init = llvm::ConstantDataArray::get(
      ctx_, llvm::ArrayRef<uint8_t>(static_cast<const uint8_t*>(data), static_cast<size_t>(size)));
  auto* gv = new llvm::GlobalVariable(module_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, name);
  gv->setAlignment(llvm::Align(align));
  gv->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  return gv;
}

llvm::Constant* GlueBuilder::Int64Array(const std::vector<int64_t>& values) {
  std::string key(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  auto it = int_arrays_.find(key);
  if (it != int_arrays_.end()) return it->second;
  if (values.empty()) return int_arrays_[key] = llvm::ConstantPointerNull::get(ptr_);
  return int_arrays_[key] = ConstantBytes("dims", values.data(), static_cast<int64_t>(values.size() * 8), 8);
}

// The parameter struct as a constant with the struct's bytes and alignment: the bytes are
// the C struct the lowering filled (kiln/kernels/*.h, 8-byte fields only, so every target
// lays it out alike), and a constant lets LLVM fold each field into the inlined kernel.
// Calls with the same parameters (the same Concat axis, the same Relu) share one constant.
llvm::Constant* GlueBuilder::Params(const KernelParams& params) {
  if (params.empty()) return llvm::ConstantPointerNull::get(ptr_);
  std::string key(static_cast<const char*>(params.data()), static_cast<size_t>(params.size_bytes()));
  auto it = params_.find(key);
  if (it != params_.end()) return it->second;
  return params_[key] = ConstantBytes("params", params.data(), params.size_bytes(), 8);
}

llvm::Constant* GlueBuilder::CString(const std::string& text) {
  return builder_.CreateGlobalStringPtr(text, "str", 0, &module_);
}

// Constant tensors live in the weights object (data_object.h), not in the IR: the address
// is kiln_weights + the tensor's offset there.
absl::StatusOr<llvm::Value*> GlueBuilder::ConstantTensor(const Tensor* tensor) {
  const GluePlan& owner = plan_.weights_owner();
  auto offset = owner.weight_offsets.find(tensor);
  if (offset == owner.weight_offsets.end()) return absl::InternalError("a constant tensor has no place in the weights");
  if (tensor->dtype() == DType::kString) {  // an array of pointers to private texts
    std::vector<llvm::Constant*> texts;
    for (int64_t i = 0; i < tensor->num_elements(); ++i) {
      llvm::Constant* text = llvm::ConstantDataArray::getString(ctx_, std::string(tensor->GetString(i)), true);
      auto* gv =
          new llvm::GlobalVariable(module_, text->getType(), true, llvm::GlobalValue::PrivateLinkage, text, "text");
      gv->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
      texts.push_back(gv);
    }
    if (texts.empty()) texts.push_back(llvm::ConstantPointerNull::get(ptr_));
    auto* type = llvm::ArrayType::get(ptr_, texts.size());
    auto* gv = new llvm::GlobalVariable(module_, type, true, llvm::GlobalValue::PrivateLinkage,
                                        llvm::ConstantArray::get(type, texts), "strings");
    gv->setAlignment(llvm::Align(8));
    return gv;
  }
  // (A body's builder shares the module, and so the symbol, with the graph's.)
  if (weights_symbol_ == nullptr) weights_symbol_ = module_.getNamedGlobal(kWeightsSymbol);
  if (weights_symbol_ == nullptr) {
    weights_symbol_ = new llvm::GlobalVariable(module_, llvm::ArrayType::get(i8_, 0), true,
                                               llvm::GlobalValue::ExternalLinkage, nullptr, kWeightsSymbol);
    weights_symbol_->setVisibility(llvm::GlobalValue::HiddenVisibility);
    weights_symbol_->setAlignment(llvm::Align(DataObject::kAlignment));
  }
  return llvm::ConstantExpr::getInBoundsGetElementPtr(i8_, weights_symbol_, builder_.getInt64(offset->second));
}

absl::StatusOr<llvm::Value*> GlueBuilder::Address(const Value* value) {
  auto it = addresses_.find(value);
  if (it != addresses_.end()) return it->second;
  llvm::Value* address = nullptr;
  for (size_t i = 0; i < graph_.outputs().size() && address == nullptr; ++i) {
    if (graph_.outputs()[i] == value && value->producer() != nullptr && !value->is_constant()) {
      address = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, outputs_arg_, i), value->name() + ".out");
    }
  }
  for (size_t i = 0; i < graph_.inputs().size() && address == nullptr; ++i) {
    if (graph_.inputs()[i] == value) {
      address = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, inputs_arg_, i), value->name() + ".in");
    }
  }
  if (address == nullptr && value->is_constant()) {
    KILN_ASSIGN_OR_RETURN(address, ConstantTensor(value->constant().get()));
  }
  if (address == nullptr) {
    if (auto part = memory_.parts.find(value); part != memory_.parts.end()) {
      KILN_ASSIGN_OR_RETURN(llvm::Value * whole, Address(part->second.whole));
      address = builder_.CreateConstGEP1_64(i8_, whole, part->second.offset_bytes, value->name());
    }
  }
  if (address == nullptr) {
    if (auto alias = memory_.alias.find(value); alias != memory_.alias.end()) {
      KILN_ASSIGN_OR_RETURN(address, Address(alias->second));
    }
  }
  if (address == nullptr) {
    auto slot = memory_.arena.find(value);
    if (slot == memory_.arena.end()) {
      return absl::InternalError(absl::StrCat("value '", value->name(), "' has no place in the memory plan"));
    }
    address = builder_.CreateConstGEP1_64(i8_, workspace_arg_, slot->second.offset, value->name());
  }
  addresses_[value] = address;
  return address;
}

llvm::Function* GlueBuilder::BeginFunction(const std::string& name, llvm::GlobalValue::LinkageTypes linkage,
                                           llvm::FunctionType* type) {
  llvm::Function* function = module_.getFunction(name);
  if (function == nullptr) function = llvm::Function::Create(type ? type : part_type_, linkage, name, module_);
  function->setLinkage(linkage);
  inputs_arg_ = function->getArg(0);
  outputs_arg_ = function->getArg(1);
  // The dynamic entry has no workspace: (inputs, outputs, exec).
  workspace_arg_ = function->arg_size() == 4 ? function->getArg(2) : nullptr;
  exec_arg_ = function->getArg(function->arg_size() - 1);
  addresses_.clear();
  llvm::BasicBlock* allocas = llvm::BasicBlock::Create(ctx_, "allocas", function);
  alloca_builder_ = std::make_unique<llvm::IRBuilder<>>(allocas);
  fail_block_ = llvm::BasicBlock::Create(ctx_, "fail", function);
  builder_.SetInsertPoint(fail_block_);
  fail_code_ = builder_.CreatePHI(i32_, 0, "code");
  builder_.CreateRet(fail_code_);
  body_block_ = llvm::BasicBlock::Create(ctx_, "body", function);
  builder_.SetInsertPoint(body_block_);
  return function;
}

void GlueBuilder::EndFunction() {
  builder_.CreateRet(builder_.getInt32(0));
  alloca_builder_->CreateBr(body_block_);
  if (fail_code_->getNumIncomingValues() == 0) {
    fail_code_->eraseFromParent();
    fail_block_->eraseFromParent();
  }
}

void GlueBuilder::EmitFailureCheck(llvm::Value* rc, size_t index, const std::string& name) {
  llvm::Function* function = builder_.GetInsertBlock()->getParent();
  llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "after." + name, function);
  llvm::BasicBlock* here = builder_.GetInsertBlock();
  llvm::Value* code = builder_.CreateOr(rc, builder_.getInt32(static_cast<uint32_t>((index + 1) << 8)));
  builder_.CreateCondBr(builder_.CreateICmpEQ(rc, builder_.getInt32(0)), next, fail_block_);
  fail_code_->addIncoming(code, here);
  builder_.SetInsertPoint(next);
}

absl::Status GlueBuilder::EmitPart(size_t part) {
  llvm::Function* function = BeginFunction(absl::StrCat("kiln_part_", part), llvm::GlobalValue::ExternalLinkage);
  function->setVisibility(llvm::GlobalValue::HiddenVisibility);
  for (size_t i = plan_.PartBegin(part); i < plan_.PartEnd(part); ++i) {
    KILN_RETURN_IF_ERROR(EmitNode(i));
    EmitKernelDone(static_cast<int32_t>(i));
  }
  EndFunction();
  return absl::OkStatus();
}

absl::Status GlueBuilder::EmitNode(size_t index) {
  const Node& node = *plan_.nodes[index];
  if (plan_.fused[index]) return EmitFusedElementwise(node, index);
  if (!plan_.calls[index].has_value()) return absl::OkStatus();  // a view or an in-place Concat
  return EmitKernelCall(node, *plan_.calls[index], index);
}

llvm::Value* GlueBuilder::KTensors(const std::vector<RtTensor>& items, const char* name) {
  if (items.empty()) return llvm::ConstantPointerNull::get(ptr_);
  llvm::Value* array =
      alloca_builder_->CreateAlloca(ktensor_, builder_.getInt32(static_cast<uint32_t>(items.size())), name);
  for (size_t i = 0; i < items.size(); ++i) {
    llvm::Value* slot = builder_.CreateConstGEP1_64(ktensor_, array, i);
    builder_.CreateStore(items[i].data, builder_.CreateStructGEP(ktensor_, slot, 0));
    builder_.CreateStore(items[i].dims, builder_.CreateStructGEP(ktensor_, slot, 1));
    builder_.CreateStore(
        items[i].rank_value != nullptr ? items[i].rank_value : builder_.getInt32(static_cast<uint32_t>(items[i].rank)),
        builder_.CreateStructGEP(ktensor_, slot, 2));
    builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(items[i].dtype)),
                         builder_.CreateStructGEP(ktensor_, slot, 3));
  }
  return array;
}

llvm::Value* GlueBuilder::KCall(llvm::Value* ins, size_t num_ins, llvm::Value* outs, size_t num_outs,
                                llvm::Value* params, int64_t params_size) {
  llvm::Value* kcall = alloca_builder_->CreateAlloca(kcall_, nullptr, "call");
  builder_.CreateStore(ins, builder_.CreateStructGEP(kcall_, kcall, 0));
  builder_.CreateStore(outs, builder_.CreateStructGEP(kcall_, kcall, 1));
  builder_.CreateStore(params, builder_.CreateStructGEP(kcall_, kcall, 2));
  builder_.CreateStore(builder_.getInt64(static_cast<uint64_t>(params_size)),
                       builder_.CreateStructGEP(kcall_, kcall, 3));
  builder_.CreateStore(exec_arg_, builder_.CreateStructGEP(kcall_, kcall, 4));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(num_ins)), builder_.CreateStructGEP(kcall_, kcall, 5));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(num_outs)), builder_.CreateStructGEP(kcall_, kcall, 6));
  return kcall;
}

llvm::Value* GlueBuilder::TensorArray(const std::vector<std::pair<llvm::Value*, const TensorType*>>& items,
                                      const char* name) {
  std::vector<RtTensor> tensors;
  for (const auto& [address, type] : items) {
    const std::vector<int64_t> dims = type ? type->StaticDims() : std::vector<int64_t>{};
    tensors.push_back(
        RtTensor{address, Int64Array(dims), static_cast<int64_t>(dims.size()), type ? type->dtype : DType::kUndefined});
  }
  return KTensors(tensors, name);
}

absl::Status GlueBuilder::EmitKernelCall(const Node& node, const KernelCall& call, size_t index) {
  std::vector<std::pair<llvm::Value*, const TensorType*>> ins, outs;
  std::vector<TensorType> constant_types;
  constant_types.reserve(call.inputs.size());
  for (const KernelOperand& operand : call.inputs) {
    if (operand.node_input >= 0) {
      const Value* v = node.input(operand.node_input);
      KILN_ASSIGN_OR_RETURN(llvm::Value * address, Address(v));
      ins.push_back({address, &v->type()});
    } else if (operand.constant != nullptr) {
      constant_types.push_back(TensorType::Static(operand.constant->dtype(), operand.constant->dims()));
      KILN_ASSIGN_OR_RETURN(llvm::Value * address, ConstantTensor(operand.constant.get()));
      ins.push_back({address, &constant_types.back()});
    } else {
      ins.push_back({llvm::ConstantPointerNull::get(ptr_), nullptr});
    }
  }
  for (const Value* out : node.outputs()) {
    KILN_ASSIGN_OR_RETURN(llvm::Value * address, Address(out));
    outs.push_back({address, &out->type()});
  }
  TensorType scratch_type;
  if (call.scratch_bytes > 0) {
    auto slot = memory_.scratch.find(&node);
    if (slot == memory_.scratch.end()) {
      return absl::InternalError(absl::StrCat(NodeLabel(node), ": the memory plan has no scratch for this node"));
    }
    scratch_type = TensorType::Static(DType::kUInt8, {call.scratch_bytes});
    outs.push_back({builder_.CreateConstGEP1_64(i8_, workspace_arg_, slot->second.offset, node.name() + ".scratch"),
                    &scratch_type});
  }
  llvm::Value* kcall = KCall(TensorArray(ins, "in"), ins.size(), TensorArray(outs, "out"), outs.size(),
                             Params(call.params), call.params.size_bytes());
  auto symbol =
      KernelSymbol(call.kernel, ins.empty() ? nullptr : ins[0].second, outs.empty() ? nullptr : outs[0].second);
  if (!symbol.ok()) return Annotate(symbol.status(), NodeLabel(node));
  llvm::FunctionCallee kernel = module_.getOrInsertFunction(*symbol, kernel_type_);
  EmitFailureCheck(builder_.CreateCall(kernel, {kcall}), index, node.name());
  const std::string& injected = plan_.options->inject_kernel_bug;
  if (!injected.empty() && (call.kernel == injected || call.kernel.rfind(injected + "_", 0) == 0)) {
    EmitInjectedBug(outs[0].first, *outs[0].second);
  }
  return absl::OkStatus();
}

// Test only (CodegenOptions::inject_kernel_bug): out[0] += 0.01 after the kernel, as if the
// kernel computed it wrong. Emitted in the glue, so the kernel library (compiled once per
// target and cached) stays as it is, and nothing is emitted unless a test asks.
void GlueBuilder::EmitInjectedBug(llvm::Value* output, const TensorType& type) {
  llvm::Type* element = type.dtype == DType::kFloat32   ? builder_.getFloatTy()
                        : type.dtype == DType::kFloat64 ? builder_.getDoubleTy()
                                                        : nullptr;
  if (element == nullptr) return;  // the injected bug is defined for float outputs only
  llvm::Value* first = builder_.CreateLoad(element, output, "injected.old");
  builder_.CreateStore(builder_.CreateFAdd(first, llvm::ConstantFP::get(element, 0.01), "injected.new"), output);
}

// When the runtime profiles (exec->kernel_done set), tell it kernel `index` is done. One
// well-predicted branch per node when not profiling.
void GlueBuilder::EmitKernelDone(int32_t index) {
  llvm::Function* function = builder_.GetInsertBlock()->getParent();
  llvm::BasicBlock* check = llvm::BasicBlock::Create(ctx_, "profile.check", function);
  llvm::BasicBlock* call = llvm::BasicBlock::Create(ctx_, "profile.call", function);
  llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "profile.next", function);
  builder_.CreateCondBr(builder_.CreateICmpNE(exec_arg_, llvm::ConstantPointerNull::get(ptr_)), check, next);
  builder_.SetInsertPoint(check);
  // kiln_kexec: {pool, parallel_for, kernel_done, profile_ctx}
  llvm::Value* done = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 2));
  builder_.CreateCondBr(builder_.CreateICmpNE(done, llvm::ConstantPointerNull::get(ptr_)), call, next);
  builder_.SetInsertPoint(call);
  llvm::Value* profile_ctx = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 3));
  auto* done_type = llvm::FunctionType::get(builder_.getVoidTy(), {ptr_, i32_}, false);
  builder_.CreateCall(done_type, done, {profile_ctx, builder_.getInt32(static_cast<uint32_t>(index))});
  builder_.CreateBr(next);
  builder_.SetInsertPoint(next);
}

void GlueBuilder::EmitPartCalls(llvm::Value* third) {
  for (size_t part = 0; part < plan_.num_parts; ++part) {
    llvm::FunctionCallee callee = module_.getOrInsertFunction(absl::StrCat("kiln_part_", part), part_type_);
    if (auto* declared = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
      declared->setVisibility(llvm::GlobalValue::HiddenVisibility);
    }
    llvm::Value* rc = builder_.CreateCall(callee, {inputs_arg_, outputs_arg_, third, exec_arg_});
    // The part's code already names the node; pass it on unchanged.
    llvm::Function* function = builder_.GetInsertBlock()->getParent();
    llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "after.part", function);
    llvm::BasicBlock* here = builder_.GetInsertBlock();
    builder_.CreateCondBr(builder_.CreateICmpEQ(rc, builder_.getInt32(0)), next, fail_block_);
    fail_code_->addIncoming(rc, here);
    builder_.SetInsertPoint(next);
  }
}

absl::Status GlueBuilder::EmitEntry() {
  llvm::Function* entry = BeginFunction("kiln_entry", llvm::GlobalValue::InternalLinkage);
  EmitPartCalls(workspace_arg_);
  // Graph outputs that no node writes in place (constants, inputs, repeats) are copied.
  for (size_t i = 0; i < graph_.outputs().size(); ++i) {
    const Value* v = graph_.outputs()[i];
    bool written = v->producer() != nullptr && !v->is_constant();
    for (size_t j = 0; j < i && written; ++j) written = graph_.outputs()[j] != v;
    if (written) continue;
    KILN_ASSIGN_OR_RETURN(llvm::Value * source, Address(v));
    llvm::Value* dest = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, outputs_arg_, i));
    const int64_t bytes = NumElements(v->type().StaticDims()) * DTypeSize(v->type().dtype);
    builder_.CreateMemCpy(dest, llvm::MaybeAlign(1), source, llvm::MaybeAlign(1), bytes);
  }
  EndFunction();
  EmitDescriptor(entry, nullptr);
  return absl::OkStatus();
}

llvm::Constant* GlueBuilder::TensorInfos(const std::vector<Value*>& values) {
  // Mirrors kiln_tensor_info: {name, dtype, rank, dims, kind, element_dtype}; a sequence's
  // slot is rank 1, its length known at run time.
  auto* info_type = llvm::StructType::get(ctx_, {ptr_, i32_, i32_, ptr_, i32_, i32_});
  static_assert(static_cast<int>(ValueKind::kOptionalSequence) == KILN_VALUE_OPTIONAL_SEQUENCE);
  std::vector<llvm::Constant*> infos;
  for (const Value* v : values) {
    const TensorType& type = v->type();
    const bool sequence = type.holds_sequence();
    std::vector<int64_t> dims = sequence ? std::vector<int64_t>{-1} : type.StaticDims();
    const int32_t dtype = sequence ? KILN_DTYPE_SEQUENCE : static_cast<int32_t>(type.dtype);
    infos.push_back(llvm::ConstantStruct::get(
        info_type,
        {CString(v->name()), builder_.getInt32(static_cast<uint32_t>(dtype)),
         builder_.getInt32(static_cast<uint32_t>(dims.size())), Int64Array(dims),
         builder_.getInt32(static_cast<uint32_t>(type.kind)), builder_.getInt32(static_cast<uint32_t>(type.dtype))}));
  }
  auto* array_type = llvm::ArrayType::get(info_type, infos.size());
  return new llvm::GlobalVariable(module_, array_type, true, llvm::GlobalValue::PrivateLinkage,
                                  llvm::ConstantArray::get(array_type, infos), "tensor_infos");
}

void GlueBuilder::EmitDescriptor(llvm::Function* entry, llvm::Function* dynamic_entry) {
  std::vector<llvm::Constant*> kernel_names;
  for (const Node* node : plan_.nodes)
    kernel_names.push_back(CString(absl::StrCat(node->name(), " (", node->op(), ")")));
  auto* names_type = llvm::ArrayType::get(ptr_, kernel_names.size());
  auto* names = new llvm::GlobalVariable(module_, names_type, true, llvm::GlobalValue::PrivateLinkage,
                                         llvm::ConstantArray::get(names_type, kernel_names), "kernel_names");
  const CodegenOptions& options = *plan_.options;
  // Mirrors kiln_module_desc in runtime.h.
  auto* desc_type =
      llvm::StructType::get(ctx_, {i32_, i32_, ptr_, ptr_, ptr_, i32_, i32_, ptr_, ptr_, i64_, ptr_, i32_, ptr_, ptr_});
  llvm::Constant* null = llvm::ConstantPointerNull::get(ptr_);
  const uint64_t desc_size = module_.getDataLayout().getTypeAllocSize(desc_type);
  llvm::Constant* desc_init = llvm::ConstantStruct::get(
      desc_type,
      {builder_.getInt32(static_cast<uint32_t>(desc_size)), builder_.getInt32(KILN_ABI_VERSION),
       CString(options.compiler_version), CString(CanonicalTarget(options.target)), CString(options.manifest_json),
       builder_.getInt32(static_cast<uint32_t>(graph_.inputs().size())),
       builder_.getInt32(static_cast<uint32_t>(graph_.outputs().size())), TensorInfos(graph_.inputs()),
       TensorInfos(graph_.outputs()), builder_.getInt64(static_cast<uint64_t>(plan_.dynamic ? 0 : memory_.arena_bytes)),
       entry ? static_cast<llvm::Constant*>(entry) : null, builder_.getInt32(static_cast<uint32_t>(plan_.nodes.size())),
       names, dynamic_entry ? static_cast<llvm::Constant*>(dynamic_entry) : null});
  auto* desc = new llvm::GlobalVariable(module_, desc_type, true, llvm::GlobalValue::PrivateLinkage, desc_init,
                                        "kiln_descriptor");
  llvm::Function* describe = llvm::Function::Create(llvm::FunctionType::get(ptr_, {}, false),
                                                    llvm::GlobalValue::ExternalLinkage, "kiln_module_v1", module_);
  builder_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", describe));
  builder_.CreateRet(desc);
}

absl::Status GlueBuilder::Build(size_t first_part, size_t last_part, bool main) {
  if (plan_.dynamic) {
    if (plan_.num_parts > 1) {
      for (size_t part = first_part; part < last_part; ++part) KILN_RETURN_IF_ERROR(EmitDynamicPart(part));
    }
    return main ? EmitDynamicEntry() : absl::OkStatus();
  }
  for (size_t part = first_part; part < last_part; ++part) KILN_RETURN_IF_ERROR(EmitPart(part));
  if (main) KILN_RETURN_IF_ERROR(EmitEntry());
  return absl::OkStatus();
}

}  // namespace kiln::codegen
