// LLVM code generation: one glue module per model. Each node becomes a call into the
// target's compiled kernel library (kernel_library.h) or, for fused elementwise chains, a
// generated loop; weights go to their own object (data_object.h); intermediates live at
// fixed offsets in the workspace arena from the memory plan; kiln_module_v1() describes it all.
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "data_object.h"
#include "kernel_bitcode.h"
#include "kernel_ops.h"
#include "kiln/common/file.h"
#include "kiln/common/status.h"
#include "kiln/common/time.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/kernel_library.h"
#include "kiln/compiler/ops.h"
#include "kiln/runtime.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm_target.h"

namespace kiln {
namespace {

// The symbol at the start of the weights object; constants are addressed from it.
constexpr char kWeightsSymbol[] = "kiln_weights";

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
#define X(name, typing, source) {#name, {typing, source}},
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

// The symbol of the kernel instantiation for this call: kiln_k_<name>_<suffix>.
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

class ModuleBuilder {
 public:
  ModuleBuilder(llvm::LLVMContext& ctx, llvm::Module& module, const Graph& graph, const MemoryPlan& plan)
      : ctx_(ctx), module_(module), graph_(graph), plan_(plan), builder_(ctx) {
    ptr_ = llvm::PointerType::getUnqual(ctx);
    i32_ = llvm::Type::getInt32Ty(ctx);
    i64_ = llvm::Type::getInt64Ty(ctx);
    f64_ = llvm::Type::getDoubleTy(ctx);
    i8_ = llvm::Type::getInt8Ty(ctx);
    // Mirrors kiln_ktensor and kiln_kcall in kernel_abi.h.
    ktensor_ = llvm::StructType::create(ctx, {ptr_, ptr_, i32_, i32_}, "kiln_ktensor");
    kcall_ = llvm::StructType::create(ctx, {ptr_, ptr_, ptr_, ptr_, ptr_, i32_, i32_, i32_, i32_}, "kiln_kcall");
    kernel_type_ = llvm::FunctionType::get(i32_, {ptr_}, false);
  }

  absl::Status Build(const CodegenOptions& options);
  // The kernels the module calls (kiln_k_* declarations).
  std::vector<std::string> CalledKernels() const;
  const codegen::DataObject& data() const { return data_; }

 private:
  llvm::GlobalVariable* ConstantBytes(const std::string& name, const void* data, int64_t size, unsigned align) {
    llvm::Constant* init = llvm::ConstantDataArray::get(
        ctx_, llvm::ArrayRef<uint8_t>(static_cast<const uint8_t*>(data), static_cast<size_t>(size)));
    auto* gv = new llvm::GlobalVariable(module_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, name);
    gv->setAlignment(llvm::Align(align));
    gv->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    return gv;
  }
  llvm::Constant* Int64Array(const std::vector<int64_t>& values) {
    std::string key(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
    auto it = int_arrays_.find(key);
    if (it != int_arrays_.end()) return it->second;
    if (values.empty()) return int_arrays_[key] = llvm::ConstantPointerNull::get(ptr_);
    return int_arrays_[key] = ConstantBytes("ints", values.data(), static_cast<int64_t>(values.size() * 8), 8);
  }
  llvm::Constant* DoubleArray(const std::vector<double>& values) {
    if (values.empty()) return llvm::ConstantPointerNull::get(ptr_);
    return ConstantBytes("floats", values.data(), static_cast<int64_t>(values.size() * 8), 8);
  }
  llvm::Constant* CString(const std::string& text) { return builder_.CreateGlobalStringPtr(text, "str", 0, &module_); }
  // Constant tensors live in the weights object (data_object.h), not in the IR: the
  // address is kiln_weights + the tensor's offset there.
  llvm::Value* ConstantTensor(const Tensor* tensor) {
    auto it = weights_.find(tensor);
    if (it != weights_.end()) return it->second;
    if (weights_symbol_ == nullptr) {
      weights_symbol_ = new llvm::GlobalVariable(module_, llvm::ArrayType::get(i8_, 0), true,
                                                 llvm::GlobalValue::ExternalLinkage, nullptr, kWeightsSymbol);
      weights_symbol_->setVisibility(llvm::GlobalValue::HiddenVisibility);
      weights_symbol_->setAlignment(llvm::Align(codegen::DataObject::kAlignment));
    }
    const int64_t offset = data_.Add(tensor->data(), tensor->size_bytes());
    return weights_[tensor] =
               llvm::ConstantExpr::getInBoundsGetElementPtr(i8_, weights_symbol_, builder_.getInt64(offset));
  }
  // The address of a value's buffer inside the entry function.
  absl::StatusOr<llvm::Value*> Address(const Value* value);
  absl::Status EmitNode(const Node& node, size_t index, llvm::Function* entry);
  void EmitKernelDone(int32_t index, llvm::Function* entry);
  absl::Status EmitFusedElementwise(const Node& node, size_t index);
  llvm::Constant* TensorInfos(const std::vector<Value*>& values);

  llvm::LLVMContext& ctx_;
  llvm::Module& module_;
  const Graph& graph_;
  const MemoryPlan& plan_;
  llvm::IRBuilder<> builder_;
  llvm::PointerType* ptr_;
  llvm::Type *i32_, *i64_, *f64_, *i8_;
  llvm::StructType *ktensor_, *kcall_;
  llvm::FunctionType* kernel_type_;
  std::map<std::string, llvm::Constant*> int_arrays_;
  std::map<const Tensor*, llvm::Value*> weights_;
  codegen::DataObject data_;
  llvm::GlobalVariable* weights_symbol_ = nullptr;
  std::map<const Value*, llvm::Value*> addresses_;
  std::vector<std::shared_ptr<const Tensor>> owned_constants_;
  llvm::Value* inputs_arg_ = nullptr;
  llvm::Value* outputs_arg_ = nullptr;
  llvm::Value* workspace_arg_ = nullptr;
  llvm::Value* exec_arg_ = nullptr;
  llvm::BasicBlock* fail_block_ = nullptr;
  llvm::PHINode* fail_code_ = nullptr;
  llvm::IRBuilder<>* entry_builder_ = nullptr;
};

absl::StatusOr<llvm::Value*> ModuleBuilder::Address(const Value* value) {
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
  if (address == nullptr && value->is_constant()) address = ConstantTensor(value->constant().get());
  if (address == nullptr) {
    auto part = plan_.parts.find(value);
    if (part != plan_.parts.end()) {
      auto whole = Address(part->second.whole);
      if (!whole.ok()) return whole.status();
      address = builder_.CreateConstGEP1_64(i8_, *whole, part->second.offset_bytes, value->name());
    }
  }
  if (address == nullptr) {
    auto alias = plan_.alias.find(value);
    if (alias != plan_.alias.end()) {
      auto owner = Address(alias->second);
      if (!owner.ok()) return owner.status();
      address = *owner;
    }
  }
  if (address == nullptr) {
    auto slot = plan_.arena.find(value);
    if (slot == plan_.arena.end()) {
      return absl::InternalError(absl::StrCat("value '", value->name(), "' has no place in the memory plan"));
    }
    address = builder_.CreateConstGEP1_64(i8_, workspace_arg_, slot->second.offset, value->name());
  }
  addresses_[value] = address;
  return address;
}

absl::Status ModuleBuilder::EmitNode(const Node& node, size_t index, llvm::Function* entry) {
  const OpSchema* schema = FindOp(node.op());
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
  if (node.op() == kFusedElementwiseOp) return EmitFusedElementwise(node, index);
  absl::StatusOr<KernelCall> call = LowerForArtifact(*schema, node);
  if (!call.ok()) return call.status();
  // A view whose output shares the input's buffer needs no code at all.
  if (call->is_view && plan_.alias.count(node.output(0))) return absl::OkStatus();
  // Nor does a Concat whose inputs were written into their slices of its result.
  if (call->kernel == "concat" && !node.inputs().empty() &&
      std::all_of(node.inputs().begin(), node.inputs().end(), [&](const Value* in) {
        auto part = plan_.parts.find(in);
        return part != plan_.parts.end() && part->second.whole == node.output(0);
      })) {
    return absl::OkStatus();
  }

  auto tensor_array = [&](const std::vector<std::pair<llvm::Value*, const TensorType*>>& items,
                          const char* name) -> llvm::Value* {
    if (items.empty()) return llvm::ConstantPointerNull::get(ptr_);
    llvm::Value* array =
        entry_builder_->CreateAlloca(ktensor_, builder_.getInt32(static_cast<uint32_t>(items.size())), name);
    for (size_t i = 0; i < items.size(); ++i) {
      llvm::Value* slot = builder_.CreateConstGEP1_64(ktensor_, array, i);
      const TensorType* type = items[i].second;
      std::vector<int64_t> dims = type ? type->StaticDims() : std::vector<int64_t>{};
      builder_.CreateStore(items[i].first, builder_.CreateStructGEP(ktensor_, slot, 0));
      builder_.CreateStore(Int64Array(dims), builder_.CreateStructGEP(ktensor_, slot, 1));
      builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(dims.size())),
                           builder_.CreateStructGEP(ktensor_, slot, 2));
      builder_.CreateStore(builder_.getInt32(type ? static_cast<uint32_t>(type->dtype) : 0),
                           builder_.CreateStructGEP(ktensor_, slot, 3));
    }
    return array;
  };
  std::vector<std::pair<llvm::Value*, const TensorType*>> ins, outs;
  std::vector<TensorType> constant_types;
  constant_types.reserve(call->inputs.size());
  for (const KernelOperand& operand : call->inputs) {
    if (operand.node_input >= 0) {
      const Value* v = node.input(operand.node_input);
      auto address = Address(v);
      if (!address.ok()) return address.status();
      ins.push_back({*address, &v->type()});
    } else if (operand.constant != nullptr) {
      constant_types.push_back(TensorType::Static(operand.constant->dtype(), operand.constant->dims()));
      ins.push_back({ConstantTensor(operand.constant.get()), &constant_types.back()});
      // The call's constants must outlive codegen of this module.
      owned_constants_.push_back(operand.constant);
    } else {
      ins.push_back({llvm::ConstantPointerNull::get(ptr_), nullptr});
    }
  }
  for (const Value* out : node.outputs()) {
    auto address = Address(out);
    if (!address.ok()) return address.status();
    outs.push_back({*address, &out->type()});
  }
  TensorType scratch_type;
  if (call->scratch_bytes > 0) {
    auto slot = plan_.scratch.find(&node);
    if (slot == plan_.scratch.end()) {
      return absl::InternalError(absl::StrCat(NodeLabel(node), ": the memory plan has no scratch for this node"));
    }
    scratch_type = TensorType::Static(DType::kUInt8, {call->scratch_bytes});
    outs.push_back({builder_.CreateConstGEP1_64(i8_, workspace_arg_, slot->second.offset, node.name() + ".scratch"),
                    &scratch_type});
  }
  llvm::Value* in_array = tensor_array(ins, "in");
  llvm::Value* out_array = tensor_array(outs, "out");
  llvm::Value* kcall = entry_builder_->CreateAlloca(kcall_, nullptr, "call");
  builder_.CreateStore(in_array, builder_.CreateStructGEP(kcall_, kcall, 0));
  builder_.CreateStore(out_array, builder_.CreateStructGEP(kcall_, kcall, 1));
  builder_.CreateStore(Int64Array(call->ints), builder_.CreateStructGEP(kcall_, kcall, 2));
  builder_.CreateStore(DoubleArray(call->floats), builder_.CreateStructGEP(kcall_, kcall, 3));
  builder_.CreateStore(exec_arg_, builder_.CreateStructGEP(kcall_, kcall, 4));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(ins.size())),
                       builder_.CreateStructGEP(kcall_, kcall, 5));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(outs.size())),
                       builder_.CreateStructGEP(kcall_, kcall, 6));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(call->ints.size())),
                       builder_.CreateStructGEP(kcall_, kcall, 7));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(call->floats.size())),
                       builder_.CreateStructGEP(kcall_, kcall, 8));
  auto symbol =
      KernelSymbol(call->kernel, ins.empty() ? nullptr : ins[0].second, outs.empty() ? nullptr : outs[0].second);
  if (!symbol.ok())
    return absl::Status(symbol.status().code(), absl::StrCat(NodeLabel(node), ": ", symbol.status().message()));
  llvm::FunctionCallee kernel = module_.getOrInsertFunction(*symbol, kernel_type_);
  llvm::Value* rc = builder_.CreateCall(kernel, {kcall});
  // Failure: return (node index + 1) << 8 | code.
  llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "after." + node.name(), entry);
  llvm::BasicBlock* here = builder_.GetInsertBlock();
  llvm::Value* code = builder_.CreateOr(rc, builder_.getInt32(static_cast<uint32_t>((index + 1) << 8)));
  builder_.CreateCondBr(builder_.CreateICmpEQ(rc, builder_.getInt32(0)), next, fail_block_);
  fail_code_->addIncoming(code, here);
  builder_.SetInsertPoint(next);
  return absl::OkStatus();
}

namespace {

// The iteration space of a fused elementwise loop: the output's dims with every operand's
// element strides (0 where it broadcasts), size-1 dims dropped and neighbours merged where
// every operand is contiguous across them. Operand 0 is the output.
struct LoopSpace {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]
};

LoopSpace CollapseLoops(const std::vector<int64_t>& out_dims, const std::vector<std::vector<int64_t>>& operand_dims) {
  const size_t rank = out_dims.size();
  LoopSpace space;
  std::vector<std::vector<int64_t>> strides(operand_dims.size(), std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < operand_dims.size(); ++k) {
    const std::vector<int64_t>& dims = operand_dims[k];
    int64_t stride = 1;
    for (size_t i = 0; i < dims.size(); ++i) {  // right-aligned against the output
      const size_t d = rank - 1 - i;
      const int64_t extent = dims[dims.size() - 1 - i];
      strides[k][d] = extent == 1 ? 0 : stride;
      stride *= extent;
    }
  }
  for (size_t d = 0; d < rank; ++d) {
    if (out_dims[d] == 1) continue;
    bool merge = !space.dims.empty();
    for (size_t k = 0; k < strides.size() && merge; ++k) merge = space.strides[k].back() == strides[k][d] * out_dims[d];
    if (merge) {
      space.dims.back() *= out_dims[d];
      for (size_t k = 0; k < strides.size(); ++k) space.strides[k].back() = strides[k][d];
    } else {
      space.dims.push_back(out_dims[d]);
      space.strides.resize(strides.size());
      for (size_t k = 0; k < strides.size(); ++k) space.strides[k].push_back(strides[k][d]);
    }
  }
  if (space.dims.empty()) {  // a scalar, or all ones
    space.dims.push_back(1);
    space.strides.assign(strides.size(), std::vector<int64_t>{0});
  }
  return space;
}

// Rows are what the thread pool splits: a fused loop whose operands all collapse into one
// long dimension (a residual Add + Relu over [1,256,56,56]: 1 row of 802816) would run on
// one thread. Such a last dimension is split into rows of a divisor between 2048 and 8192
// elements (a multiple of 64 where one exists), each operand's stride s becoming (s * b, s).
void SplitLongRows(LoopSpace& space) {
  constexpr int64_t kMinChunk = 2048, kMaxChunk = 8192;
  const int64_t inner = space.dims.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < space.dims.size(); ++d) rows *= space.dims[d];
  if (rows >= 16 || inner < 4 * kMaxChunk) return;
  int64_t chunk = 0;
  for (int64_t b = kMaxChunk; b >= kMinChunk && chunk == 0; b -= 64) {
    if (inner % b == 0) chunk = b;
  }
  for (int64_t b = kMaxChunk; b >= kMinChunk && chunk == 0; --b) {
    if (inner % b == 0) chunk = b;
  }
  if (chunk == 0) return;
  space.dims.back() = inner / chunk;
  space.dims.push_back(chunk);
  for (std::vector<int64_t>& strides : space.strides) {
    const int64_t s = strides.back();
    strides.back() = s * chunk;
    strides.push_back(s);
  }
}

}  // namespace

// kiln.Elementwise becomes a loop nest generated here, not a kernel call:
//   kiln_body_N(out, in0, in1, ..., begin, end)   noalias pointers; rows [begin, end) of the
//       collapsed iteration space, each an inner loop over the last dim that evaluates the
//       fused ops on scalars (arithmetic inline; other ops through the kernel library's
//       kiln_s_unary/kiln_s_binary, inlined with constant codes), which LLVM vectorizes
//   kiln_loop_N(ctx, begin, end)                  unpacks the pointers: the parallel_for body
// and the entry function runs kiln_loop_N through the thread pool's parallel_for.
absl::Status ModuleBuilder::EmitFusedElementwise(const Node& node, size_t index) {
  const Value* out = node.output(0);
  const DType dtype = out->type().dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": fused loops handle f32 and f64 only"));
  }
  const std::vector<int64_t> program = node.GetInts("program");
  const std::vector<double> params = node.GetFloats("params");
  const size_t num_ops = program.size() / 4, num_inputs = node.inputs().size();
  if (num_ops == 0 || params.size() != 2 * num_ops)
    return absl::InternalError(absl::StrCat(NodeLabel(node), ": malformed program"));
  llvm::Type* elem = dtype == DType::kFloat32 ? builder_.getFloatTy() : builder_.getDoubleTy();
  const char* suffix = dtype == DType::kFloat32 ? "f32" : "f64";

  // Operands: the output, then inputs. One-element constants become immediates.
  std::vector<std::vector<int64_t>> operand_dims = {out->type().StaticDims()};
  std::vector<llvm::Value*> addresses;
  std::vector<llvm::Constant*> immediates(num_inputs, nullptr);
  auto out_address = Address(out);
  if (!out_address.ok()) return out_address.status();
  addresses.push_back(*out_address);
  for (size_t i = 0; i < num_inputs; ++i) {
    const Value* in = node.input(i);
    operand_dims.push_back(in->type().StaticDims());
    if (in->is_constant() && in->constant()->num_elements() == 1) {
      // Folded into the loop body: no buffer, a null pointer holds its parameter slot.
      immediates[i] = llvm::ConstantFP::get(elem, in->constant()->GetAsDouble(0));
      addresses.push_back(llvm::ConstantPointerNull::get(ptr_));
      continue;
    }
    auto address = Address(in);
    if (!address.ok()) return address.status();
    addresses.push_back(*address);
  }
  // The output may share an input's buffer (in place): then no noalias on the pointers.
  bool in_place = false;
  for (size_t i = 1; i < addresses.size(); ++i) in_place |= addresses[i] == addresses[0];
  LoopSpace space = CollapseLoops(operand_dims[0], operand_dims);
  SplitLongRows(space);
  const size_t depth = space.dims.size();
  const int64_t inner = space.dims.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < depth; ++d) rows *= space.dims[d];

  // kiln_body_N
  std::vector<llvm::Type*> params_types(addresses.size(), ptr_);
  params_types.push_back(i64_);
  params_types.push_back(i64_);
  auto* body_type = llvm::FunctionType::get(builder_.getVoidTy(), params_types, false);
  auto* body =
      llvm::Function::Create(body_type, llvm::GlobalValue::InternalLinkage, absl::StrCat("kiln_body_", index), module_);
  for (size_t k = 0; k < addresses.size(); ++k) {
    if (!in_place) body->addParamAttr(static_cast<unsigned>(k), llvm::Attribute::NoAlias);
    if (k > 0) body->addParamAttr(static_cast<unsigned>(k), llvm::Attribute::ReadOnly);
  }
  llvm::IRBuilder<> b(ctx_);
  llvm::BasicBlock* entry_block = llvm::BasicBlock::Create(ctx_, "entry", body);
  llvm::BasicBlock* row_head = llvm::BasicBlock::Create(ctx_, "row", body);
  llvm::BasicBlock* col_head = llvm::BasicBlock::Create(ctx_, "col", body);
  llvm::BasicBlock* row_latch = llvm::BasicBlock::Create(ctx_, "row.next", body);
  llvm::BasicBlock* exit_block = llvm::BasicBlock::Create(ctx_, "exit", body);
  llvm::Value* begin = body->getArg(static_cast<unsigned>(addresses.size()));
  llvm::Value* end = body->getArg(static_cast<unsigned>(addresses.size() + 1));
  b.SetInsertPoint(entry_block);
  b.CreateCondBr(b.CreateICmpSLT(begin, end), row_head, exit_block);

  b.SetInsertPoint(row_head);
  llvm::PHINode* row = b.CreatePHI(i64_, 2, "r");
  row->addIncoming(begin, entry_block);
  // Base offset of each operand for this row: decompose the row over the outer dims.
  std::vector<llvm::Value*> base(addresses.size(), b.getInt64(0));
  llvm::Value* rest = row;
  for (size_t d = depth - 1; d-- > 0;) {
    llvm::Value* idx = d == 0 ? rest : b.CreateURem(rest, b.getInt64(space.dims[d]));
    if (d > 0) rest = b.CreateUDiv(rest, b.getInt64(space.dims[d]));
    for (size_t k = 0; k < addresses.size(); ++k) {
      if (space.strides[k][d] != 0) base[k] = b.CreateAdd(base[k], b.CreateMul(idx, b.getInt64(space.strides[k][d])));
    }
  }
  b.CreateBr(col_head);

  b.SetInsertPoint(col_head);
  llvm::PHINode* col = b.CreatePHI(i64_, 2, "j");
  col->addIncoming(b.getInt64(0), row_head);
  auto element = [&](size_t k) {
    const int64_t step = space.strides[k].back();
    llvm::Value* offset =
        step == 0 ? base[k] : b.CreateAdd(base[k], step == 1 ? col : b.CreateMul(col, b.getInt64(step)));
    return b.CreateInBoundsGEP(elem, body->getArg(static_cast<unsigned>(k)), offset);
  };
  std::vector<llvm::Value*> values;
  for (size_t i = 0; i < num_inputs; ++i) {
    values.push_back(immediates[i] != nullptr ? static_cast<llvm::Value*>(immediates[i])
                                              : b.CreateLoad(elem, element(i + 1)));
  }
  llvm::FunctionCallee unary_fn =
      module_.getOrInsertFunction(absl::StrCat("kiln_s_unary_", suffix), elem, i32_, elem, f64_, f64_);
  llvm::FunctionCallee binary_fn =
      module_.getOrInsertFunction(absl::StrCat("kiln_s_binary_", suffix), elem, i32_, elem, elem);
  for (size_t op = 0; op < num_ops; ++op) {
    const int64_t* ins = &program[op * 4];
    llvm::Value* a = values.at(static_cast<size_t>(ins[2]));
    llvm::Value* result = nullptr;
    if (ins[0] != 0) {
      llvm::Value* c = values.at(static_cast<size_t>(ins[3]));
      switch (ins[1]) {
        case KILN_BINARY_ADD: result = b.CreateFAdd(a, c); break;
        case KILN_BINARY_SUB: result = b.CreateFSub(a, c); break;
        case KILN_BINARY_MUL: result = b.CreateFMul(a, c); break;
        case KILN_BINARY_DIV: result = b.CreateFDiv(a, c); break;
        default: result = b.CreateCall(binary_fn, {b.getInt32(static_cast<uint32_t>(ins[1])), a, c});
      }
    } else {
      result = b.CreateCall(unary_fn,
                            {b.getInt32(static_cast<uint32_t>(ins[1])), a, llvm::ConstantFP::get(f64_, params[op * 2]),
                             llvm::ConstantFP::get(f64_, params[op * 2 + 1])});
    }
    values.push_back(result);
  }
  b.CreateStore(values.back(), element(0));
  llvm::Value* next_col = b.CreateAdd(col, b.getInt64(1), "j.next", true, true);
  col->addIncoming(next_col, b.GetInsertBlock());
  b.CreateCondBr(b.CreateICmpSLT(next_col, b.getInt64(inner)), col_head, row_latch);

  b.SetInsertPoint(row_latch);
  llvm::Value* next_row = b.CreateAdd(row, b.getInt64(1), "r.next", true, true);
  row->addIncoming(next_row, row_latch);
  b.CreateCondBr(b.CreateICmpSLT(next_row, end), row_head, exit_block);
  b.SetInsertPoint(exit_block);
  b.CreateRetVoid();

  // kiln_loop_N(ctx, begin, end): ctx is the array of operand pointers.
  auto* range_type = llvm::FunctionType::get(builder_.getVoidTy(), {ptr_, i64_, i64_}, false);
  auto* loop = llvm::Function::Create(range_type, llvm::GlobalValue::InternalLinkage, absl::StrCat("kiln_loop_", index),
                                      module_);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", loop));
  std::vector<llvm::Value*> args;
  for (size_t k = 0; k < addresses.size(); ++k) {
    args.push_back(b.CreateLoad(ptr_, b.CreateConstGEP1_64(ptr_, loop->getArg(0), k)));
  }
  args.push_back(loop->getArg(1));
  args.push_back(loop->getArg(2));
  b.CreateCall(body, args);
  b.CreateRetVoid();

  // In the entry function: fill the pointer array, then parallel_for over the rows when the
  // runtime gave a pool, else one call over all of them.
  llvm::Value* ctx =
      entry_builder_->CreateAlloca(ptr_, builder_.getInt32(static_cast<uint32_t>(addresses.size())), "operands");
  for (size_t k = 0; k < addresses.size(); ++k)
    builder_.CreateStore(addresses[k], builder_.CreateConstGEP1_64(ptr_, ctx, k));
  llvm::Function* entry = builder_.GetInsertBlock()->getParent();
  llvm::BasicBlock* pooled = llvm::BasicBlock::Create(ctx_, "pooled." + node.name(), entry);
  llvm::BasicBlock* serial = llvm::BasicBlock::Create(ctx_, "serial." + node.name(), entry);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "after." + node.name(), entry);
  const int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1));
  llvm::Value* parallel_for = nullptr;
  if (rows > min_rows) {
    llvm::Value* has_exec = builder_.CreateICmpNE(exec_arg_, llvm::ConstantPointerNull::get(ptr_));
    llvm::BasicBlock* check_fn = llvm::BasicBlock::Create(ctx_, "pool." + node.name(), entry);
    builder_.CreateCondBr(has_exec, check_fn, serial);
    builder_.SetInsertPoint(check_fn);
    // kiln_kexec: {pool, parallel_for}
    parallel_for = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 1));
    builder_.CreateCondBr(builder_.CreateICmpNE(parallel_for, llvm::ConstantPointerNull::get(ptr_)), pooled, serial);
    builder_.SetInsertPoint(pooled);
    llvm::Value* pool = builder_.CreateLoad(ptr_, exec_arg_);
    auto* pf_type = llvm::FunctionType::get(builder_.getVoidTy(), {ptr_, i64_, i64_, ptr_, ptr_}, false);
    builder_.CreateCall(pf_type, parallel_for, {pool, builder_.getInt64(rows), builder_.getInt64(min_rows), loop, ctx});
    builder_.CreateBr(done);
  } else {
    builder_.CreateBr(serial);
    pooled->eraseFromParent();
  }
  builder_.SetInsertPoint(serial);
  builder_.CreateCall(loop, {ctx, builder_.getInt64(0), builder_.getInt64(rows)});
  builder_.CreateBr(done);
  builder_.SetInsertPoint(done);
  return absl::OkStatus();
}

// When the runtime profiles (exec->kernel_done set), tell it kernel `index` is done. One
// well-predicted branch per node when not profiling.
void ModuleBuilder::EmitKernelDone(int32_t index, llvm::Function* entry) {
  llvm::BasicBlock* check = llvm::BasicBlock::Create(ctx_, "profile.check", entry);
  llvm::BasicBlock* call = llvm::BasicBlock::Create(ctx_, "profile.call", entry);
  llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "profile.next", entry);
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

llvm::Constant* ModuleBuilder::TensorInfos(const std::vector<Value*>& values) {
  // Mirrors kiln_tensor_info: {name, dtype, rank, dims}.
  auto* info_type = llvm::StructType::get(ctx_, {ptr_, i32_, i32_, ptr_});
  std::vector<llvm::Constant*> infos;
  for (const Value* v : values) {
    std::vector<int64_t> dims = v->type().StaticDims();
    infos.push_back(llvm::ConstantStruct::get(
        info_type, {CString(v->name()), builder_.getInt32(static_cast<uint32_t>(v->type().dtype)),
                    builder_.getInt32(static_cast<uint32_t>(dims.size())), Int64Array(dims)}));
  }
  auto* array_type = llvm::ArrayType::get(info_type, infos.size());
  auto* gv = new llvm::GlobalVariable(module_, array_type, true, llvm::GlobalValue::PrivateLinkage,
                                      llvm::ConstantArray::get(array_type, infos), "tensor_infos");
  return gv;
}

absl::Status ModuleBuilder::Build(const CodegenOptions& options) {
  for (const Value* v : graph_.inputs()) {
    if (!v->type().IsStatic()) {
      return absl::FailedPreconditionError(
          absl::StrCat("graph input '", v->name(), "' has shape ", PrintType(v->type()),
                       "; give a static shape with --input-shape ", v->name(), "=..."));
    }
  }
  auto* entry_type = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_}, false);
  llvm::Function* entry = llvm::Function::Create(entry_type, llvm::GlobalValue::InternalLinkage, "kiln_entry", module_);
  inputs_arg_ = entry->getArg(0);
  outputs_arg_ = entry->getArg(1);
  workspace_arg_ = entry->getArg(2);
  exec_arg_ = entry->getArg(3);
  llvm::BasicBlock* allocas = llvm::BasicBlock::Create(ctx_, "allocas", entry);
  llvm::BasicBlock* body = llvm::BasicBlock::Create(ctx_, "body", entry);
  fail_block_ = llvm::BasicBlock::Create(ctx_, "fail", entry);
  llvm::IRBuilder<> alloca_builder(allocas);
  entry_builder_ = &alloca_builder;
  builder_.SetInsertPoint(fail_block_);
  fail_code_ = builder_.CreatePHI(i32_, 0, "code");
  builder_.CreateRet(fail_code_);
  builder_.SetInsertPoint(body);

  std::vector<Node*> nodes = graph_.nodes();
  std::vector<llvm::Constant*> kernel_names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (absl::Status s = EmitNode(*nodes[i], i, entry); !s.ok()) return s;
    EmitKernelDone(static_cast<int32_t>(i), entry);
    kernel_names.push_back(CString(absl::StrCat(nodes[i]->name(), " (", nodes[i]->op(), ")")));
  }
  // Graph outputs that no node writes in place (constants, inputs, repeats) are copied.
  for (size_t i = 0; i < graph_.outputs().size(); ++i) {
    const Value* v = graph_.outputs()[i];
    bool written = v->producer() != nullptr && !v->is_constant();
    for (size_t j = 0; j < i && written; ++j) written = graph_.outputs()[j] != v;
    if (written) continue;
    auto source = Address(v);
    if (!source.ok()) return source.status();
    llvm::Value* dest = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, outputs_arg_, i));
    const int64_t bytes = NumElements(v->type().StaticDims()) * DTypeSize(v->type().dtype);
    builder_.CreateMemCpy(dest, llvm::MaybeAlign(1), *source, llvm::MaybeAlign(1), bytes);
  }
  builder_.CreateRet(builder_.getInt32(0));
  alloca_builder.CreateBr(body);
  if (fail_code_->getNumIncomingValues() == 0) {
    fail_code_->eraseFromParent();
    fail_block_->eraseFromParent();
  }

  auto* names_type = llvm::ArrayType::get(ptr_, kernel_names.size());
  auto* names = new llvm::GlobalVariable(module_, names_type, true, llvm::GlobalValue::PrivateLinkage,
                                         llvm::ConstantArray::get(names_type, kernel_names), "kernel_names");

  // Descriptor: mirrors kiln_module_desc in runtime.h.
  auto* desc_type =
      llvm::StructType::get(ctx_, {i32_, i32_, ptr_, ptr_, ptr_, i32_, i32_, ptr_, ptr_, i64_, ptr_, i32_, ptr_});
  const uint64_t desc_size = module_.getDataLayout().getTypeAllocSize(desc_type);
  llvm::Constant* desc_init = llvm::ConstantStruct::get(
      desc_type, {builder_.getInt32(static_cast<uint32_t>(desc_size)), builder_.getInt32(KILN_ABI_VERSION),
                  CString(options.compiler_version), CString(CanonicalTarget(options.target)),
                  CString(options.manifest_json), builder_.getInt32(static_cast<uint32_t>(graph_.inputs().size())),
                  builder_.getInt32(static_cast<uint32_t>(graph_.outputs().size())), TensorInfos(graph_.inputs()),
                  TensorInfos(graph_.outputs()), builder_.getInt64(static_cast<uint64_t>(plan_.arena_bytes)), entry,
                  builder_.getInt32(static_cast<uint32_t>(nodes.size())), names});
  auto* desc = new llvm::GlobalVariable(module_, desc_type, true, llvm::GlobalValue::PrivateLinkage, desc_init,
                                        "kiln_descriptor");
  llvm::Function* describe = llvm::Function::Create(llvm::FunctionType::get(ptr_, {}, false),
                                                    llvm::GlobalValue::ExternalLinkage, "kiln_module_v1", module_);
  builder_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", describe));
  builder_.CreateRet(desc);
  return absl::OkStatus();
}

std::vector<std::string> ModuleBuilder::CalledKernels() const {
  std::vector<std::string> kernels;
  for (const llvm::Function& f : module_) {
    if (f.isDeclaration() && f.getName().starts_with("kiln_k_")) kernels.push_back(f.getName().str());
  }
  return kernels;
}

// The fused loops call the kernel library's scalar ops (kiln_s_unary_f32, ...): those come
// into the glue as bitcode and are inlined with their constant op codes, so the loops
// vectorize; everything else the glue calls stays in the compiled library.
absl::Status LinkScalarOps(llvm::Module& module) {
  std::set<size_t> needed;
  for (const llvm::Function& f : module) {
    if (!f.isDeclaration() || !f.getName().starts_with("kiln_s_")) continue;
    auto it = codegen::BitcodeSymbols().find(f.getName().str());
    if (it == codegen::BitcodeSymbols().end()) {
      return absl::InternalError(absl::StrCat("no kernel bitcode defines ", f.getName().str()));
    }
    needed.insert(it->second);
  }
  for (size_t index : needed) {
    const codegen::EmbeddedBitcode& blob = codegen::KernelBitcode()[index];
    auto lazy = llvm::getLazyBitcodeModule(llvm::MemoryBufferRef(blob.bytes, blob.stem), module.getContext());
    if (!lazy) return absl::InternalError("the embedded kernel bitcode does not parse: " + toString(lazy.takeError()));
    (*lazy)->setTargetTriple(module.getTargetTriple());
    (*lazy)->setDataLayout(module.getDataLayout());
    if (llvm::Linker::linkModules(module, std::move(*lazy), llvm::Linker::LinkOnlyNeeded)) {
      return absl::InternalError(absl::StrCat("linking the scalar ops of ", blob.stem, " into the module failed"));
    }
  }
  return absl::OkStatus();
}

// Every function gets the target's CPU and features (bitcode from the library was compiled
// for a generic CPU, whose attributes would cap the vector width); everything but the
// descriptor is internal; what came from the library is inlined where it is called.
void RetargetGlue(llvm::Module& module, const TargetSpec& target) {
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    f.removeFnAttr("tune-cpu");
    f.addFnAttr("target-cpu", target.cpu);
    if (!target.features.empty()) f.addFnAttr("target-features", target.features);
    if (f.getName() != "kiln_module_v1") f.setLinkage(llvm::GlobalValue::InternalLinkage);
    const llvm::StringRef name = f.getName();
    const bool generated = name == "kiln_entry" || name == "kiln_module_v1" || name.starts_with("kiln_loop_") ||
                           name.starts_with("kiln_body_");
    if (!generated && !f.hasFnAttribute(llvm::Attribute::NoInline)) {
      f.removeFnAttr(llvm::Attribute::OptimizeNone);
      f.addFnAttr(llvm::Attribute::AlwaysInline);
    }
  }
  for (llvm::GlobalVariable& g : module.globals()) {
    if (!g.isDeclaration()) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
}

void OptimizeGlue(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder passes(&machine, tuning);
  passes.registerModuleAnalyses(mam);
  passes.registerCGSCCAnalyses(cgam);
  passes.registerFunctionAnalyses(fam);
  passes.registerLoopAnalyses(lam);
  passes.crossRegisterProxies(lam, fam, cgam, mam);
  passes.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, mam);
}

absl::StatusOr<std::string> EmitObject(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream stream(object);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, stream, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return absl::InternalError("the target cannot emit object files");
  }
  codegen.run(module);
  return std::string(object.data(), object.size());
}

// Times codegen's phases for the compile report.
class PhaseClock {
 public:
  void End(const char* name) {
    phases_.emplace_back(name, clock_.ElapsedMs());
    clock_.Restart();
  }
  std::vector<std::pair<std::string, double>> Take() { return std::move(phases_); }

 private:
  Stopwatch clock_;
  std::vector<std::pair<std::string, double>> phases_;
};

// What the called kernels ask of the target, for the compile report.
void DescribeKernels(const KernelObjects& kernels, const codegen::TargetTraits& traits, ArtifactBytes& result) {
  if (kernels.uses & KernelObjects::kUsesVectorTile) result.gemm_tile = traits.gemm_tile;
  if (kernels.uses & KernelObjects::kUsesInt8Dot) result.int8_dot = traits.int8_dot_name;
}

// Developer aid: KILN_DUMP_LLVM_IR=FILE writes the optimised glue module as text.
void MaybeDumpModule(const llvm::Module& module) {
  const char* dump = std::getenv("KILN_DUMP_LLVM_IR");
  if (dump == nullptr || *dump == '\0') return;
  std::error_code error;
  llvm::raw_fd_ostream file(dump, error);
  if (!error) module.print(file, nullptr);
}

}  // namespace

absl::StatusOr<ArtifactBytes> GenerateArtifact(const Graph& graph, const MemoryPlan& plan,
                                               const CodegenOptions& options) {
  PhaseClock clock;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine,
                        codegen::MakeTargetMachine(options.target, /*sections=*/false));
  llvm::LLVMContext ctx;
  auto module = std::make_unique<llvm::Module>(graph.name(), ctx);
  module->setTargetTriple(options.target.triple);
  module->setDataLayout(machine->createDataLayout());
  ModuleBuilder builder(ctx, *module, graph, plan);
  KILN_RETURN_IF_ERROR(builder.Build(options));
  KILN_RETURN_IF_ERROR(LinkScalarOps(*module));
  RetargetGlue(*module, options.target);
  std::string verify_errors;
  llvm::raw_string_ostream verify_stream(verify_errors);
  if (llvm::verifyModule(*module, &verify_stream)) {
    return absl::InternalError("generated LLVM IR is invalid: " + verify_errors);
  }
  clock.End("emit-ir");
  // The kernels' objects: found, or compiled now for this target and cached.
  KILN_ASSIGN_OR_RETURN(KernelObjects kernels, GetKernelObjects(options.target, builder.CalledKernels()));
  ArtifactBytes result;
  DescribeKernels(kernels, codegen::TraitsOf(*machine), result);
  clock.End("kernel-library");

  KILN_ASSIGN_OR_RETURN(TempDirectory dir, TempDirectory::Create("kiln-link"));
  const std::string glue_path = dir.path() + "/glue.o", weights_path = dir.path() + "/weights.o";
  // The weights object is written while LLVM works on the glue.
  absl::Status weights_written;
  std::thread weights_writer(
      [&] { weights_written = builder.data().Write(weights_path, options.target.triple, kWeightsSymbol); });
  OptimizeGlue(*module, *machine);
  MaybeDumpModule(*module);
  clock.End("llvm-optimize");
  absl::StatusOr<std::string> glue = EmitObject(*module, *machine);
  weights_writer.join();
  KILN_RETURN_IF_ERROR(glue);
  KILN_RETURN_IF_ERROR(weights_written);
  KILN_RETURN_IF_ERROR(WriteFile(glue_path, *glue));
  clock.End("llvm-object");

  std::vector<std::string> objects = {glue_path, weights_path};
  objects.insert(objects.end(), kernels.objects.begin(), kernels.objects.end());
  KILN_ASSIGN_OR_RETURN(result.shared_object, LinkSharedObject(objects, options.target, dir.path() + "/model.so"));
  clock.End("link");
  result.object_bytes = static_cast<int64_t>(glue->size()) + builder.data().size_bytes();
  result.workspace_bytes = plan.arena_bytes;
  result.phase_ms = clock.Take();
  return result;
}

}  // namespace kiln
