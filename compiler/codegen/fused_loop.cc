// kiln.Elementwise (a fused chain of elementwise ops) becomes a loop nest generated here,
// not a kernel call:
//   kiln_loop_body_N(out, in0, ..., begin, end)   noalias pointers; rows [begin, end) of the
//       collapsed iteration space, each an inner loop over the last dim that evaluates the
//       fused ops on scalars (arithmetic inline; other ops through the kernel library's
//       kiln_s_unary/kiln_s_binary, inlined with constant codes), which LLVM vectorizes
//   kiln_loop_N(ctx, begin, end)                  unpacks the pointers: the parallel_for body
// and the part function runs kiln_loop_N through the thread pool's parallel_for. Loops
// that agree in program, shapes and constants share one kiln_loop_body/kiln_loop pair (BERT's
// twelve GELUs compile once).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glue_builder.h"
#include "kernel_ops.h"
#include "kiln/common/status.h"
#include "kiln/compiler/ops.h"

namespace kiln::codegen {
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

// Everything the generated functions depend on; equal specs share the functions.
struct FusedLoopSpec {
  bool f32 = true;
  std::vector<int64_t> program;  // [binary, code, a, b] per op (ops.h, kFusedElementwiseOp)
  std::vector<double> params;    // [alpha, beta] per op
  size_t num_inputs = 0;
  std::vector<std::optional<double>> immediates;  // one-element constant inputs, folded in
  bool in_place = false;                          // the output shares an input's buffer
  LoopSpace space;

  int64_t rows() const {
    int64_t n = 1;
    for (size_t d = 0; d + 1 < space.dims.size(); ++d) n *= space.dims[d];
    return n;
  }
  std::string Key() const {
    std::string key = absl::StrCat(f32 ? "f32" : "f64", "|", absl::StrJoin(program, ","), "|", in_place, "|",
                                   absl::StrJoin(space.dims, "x"));
    for (const auto& strides : space.strides) absl::StrAppend(&key, "|", absl::StrJoin(strides, ","));
    std::string bits(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(double));
    for (const auto& immediate : immediates) {
      double value = immediate.value_or(0);
      absl::StrAppend(&key, immediate.has_value() ? "|i" : "|-");
      bits.append(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    return key + "|" + bits;
  }
};

// kiln_body: rows [begin, end), each an inner loop evaluating the program.
class BodyEmitter {
 public:
  BodyEmitter(llvm::Module& module, const FusedLoopSpec& spec) : module_(module), spec_(spec), b_(module.getContext()) {
    elem_ = spec.f32 ? b_.getFloatTy() : b_.getDoubleTy();
  }

  llvm::Function* Emit(const std::string& name) {
    llvm::LLVMContext& ctx = module_.getContext();
    const size_t operands = spec_.num_inputs + 1;
    std::vector<llvm::Type*> types(operands, b_.getPtrTy());
    types.push_back(b_.getInt64Ty());
    types.push_back(b_.getInt64Ty());
    body_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), types, false),
                                   llvm::GlobalValue::InternalLinkage, name, module_);
    for (size_t k = 0; k < operands; ++k) {
      if (!spec_.in_place) body_->addParamAttr(static_cast<unsigned>(k), llvm::Attribute::NoAlias);
      if (k > 0) body_->addParamAttr(static_cast<unsigned>(k), llvm::Attribute::ReadOnly);
    }
    llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx, "entry", body_);
    llvm::BasicBlock* row_head = llvm::BasicBlock::Create(ctx, "row", body_);
    llvm::BasicBlock* col_head = llvm::BasicBlock::Create(ctx, "col", body_);
    llvm::BasicBlock* row_latch = llvm::BasicBlock::Create(ctx, "row.next", body_);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "exit", body_);
    llvm::Value* begin = body_->getArg(static_cast<unsigned>(operands));
    llvm::Value* end = body_->getArg(static_cast<unsigned>(operands + 1));
    b_.SetInsertPoint(entry);
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), row_head, exit);

    b_.SetInsertPoint(row_head);
    llvm::PHINode* row = b_.CreatePHI(b_.getInt64Ty(), 2, "r");
    row->addIncoming(begin, entry);
    RowBases(row, operands);
    b_.CreateBr(col_head);

    b_.SetInsertPoint(col_head);
    col_ = b_.CreatePHI(b_.getInt64Ty(), 2, "j");
    col_->addIncoming(b_.getInt64(0), row_head);
    b_.CreateStore(EvaluateProgram(), Element(0));
    llvm::Value* next_col = b_.CreateAdd(col_, b_.getInt64(1), "j.next", true, true);
    col_->addIncoming(next_col, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(next_col, b_.getInt64(spec_.space.dims.back())), col_head, row_latch);

    b_.SetInsertPoint(row_latch);
    llvm::Value* next_row = b_.CreateAdd(row, b_.getInt64(1), "r.next", true, true);
    row->addIncoming(next_row, row_latch);
    b_.CreateCondBr(b_.CreateICmpSLT(next_row, end), row_head, exit);
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    return body_;
  }

 private:
  // Base offset of each operand for this row: the row decomposed over the outer dims.
  void RowBases(llvm::Value* row, size_t operands) {
    const LoopSpace& space = spec_.space;
    base_.assign(operands, b_.getInt64(0));
    llvm::Value* rest = row;
    for (size_t d = space.dims.size() - 1; d-- > 0;) {
      llvm::Value* idx = d == 0 ? rest : b_.CreateURem(rest, b_.getInt64(space.dims[d]));
      if (d > 0) rest = b_.CreateUDiv(rest, b_.getInt64(space.dims[d]));
      for (size_t k = 0; k < operands; ++k) {
        if (space.strides[k][d] != 0) {
          base_[k] = b_.CreateAdd(base_[k], b_.CreateMul(idx, b_.getInt64(space.strides[k][d])));
        }
      }
    }
  }

  llvm::Value* Element(size_t k) {
    const int64_t step = spec_.space.strides[k].back();
    llvm::Value* offset =
        step == 0 ? base_[k] : b_.CreateAdd(base_[k], step == 1 ? col_ : b_.CreateMul(col_, b_.getInt64(step)));
    return b_.CreateInBoundsGEP(elem_, body_->getArg(static_cast<unsigned>(k)), offset);
  }

  llvm::Value* EvaluateProgram() {
    const char* suffix = spec_.f32 ? "f32" : "f64";
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* f64 = b_.getDoubleTy();
    llvm::FunctionCallee unary_fn =
        module_.getOrInsertFunction(absl::StrCat("kiln_s_unary_", suffix), elem_, i32, elem_, f64, f64);
    llvm::FunctionCallee binary_fn =
        module_.getOrInsertFunction(absl::StrCat("kiln_s_binary_", suffix), elem_, i32, elem_, elem_);
    std::vector<llvm::Value*> values;
    for (size_t i = 0; i < spec_.num_inputs; ++i) {
      values.push_back(spec_.immediates[i].has_value()
                           ? static_cast<llvm::Value*>(llvm::ConstantFP::get(elem_, *spec_.immediates[i]))
                           : b_.CreateLoad(elem_, Element(i + 1)));
    }
    for (size_t op = 0; op < spec_.program.size() / 4; ++op) {
      const int64_t* ins = &spec_.program[op * 4];
      llvm::Value* a = values.at(static_cast<size_t>(ins[2]));
      llvm::Value* code = b_.getInt32(static_cast<uint32_t>(ins[1]));
      if (ins[0] == 0) {
        values.push_back(b_.CreateCall(unary_fn, {code, a, llvm::ConstantFP::get(f64, spec_.params[op * 2]),
                                                  llvm::ConstantFP::get(f64, spec_.params[op * 2 + 1])}));
        continue;
      }
      llvm::Value* c = values.at(static_cast<size_t>(ins[3]));
      switch (ins[1]) {
        case KILN_BINARY_ADD: values.push_back(b_.CreateFAdd(a, c)); break;
        case KILN_BINARY_SUB: values.push_back(b_.CreateFSub(a, c)); break;
        case KILN_BINARY_MUL: values.push_back(b_.CreateFMul(a, c)); break;
        case KILN_BINARY_DIV: values.push_back(b_.CreateFDiv(a, c)); break;
        default: values.push_back(b_.CreateCall(binary_fn, {code, a, c}));
      }
    }
    return values.back();
  }

  llvm::Module& module_;
  const FusedLoopSpec& spec_;
  llvm::IRBuilder<> b_;
  llvm::Type* elem_;
  llvm::Function* body_ = nullptr;
  llvm::PHINode* col_ = nullptr;
  std::vector<llvm::Value*> base_;
};

// kiln_loop(ctx, begin, end): ctx is the array of operand pointers; calls the body.
llvm::Function* EmitLoop(llvm::Module& module, llvm::Function* body, size_t operands, const std::string& name) {
  llvm::IRBuilder<> b(module.getContext());
  auto* range_type = llvm::FunctionType::get(b.getVoidTy(), {b.getPtrTy(), b.getInt64Ty(), b.getInt64Ty()}, false);
  auto* loop = llvm::Function::Create(range_type, llvm::GlobalValue::InternalLinkage, name, module);
  b.SetInsertPoint(llvm::BasicBlock::Create(module.getContext(), "entry", loop));
  std::vector<llvm::Value*> args;
  for (size_t k = 0; k < operands; ++k) {
    args.push_back(b.CreateLoad(b.getPtrTy(), b.CreateConstGEP1_64(b.getPtrTy(), loop->getArg(0), k)));
  }
  args.push_back(loop->getArg(1));
  args.push_back(loop->getArg(2));
  b.CreateCall(body, args);
  b.CreateRetVoid();
  return loop;
}

}  // namespace

absl::Status GlueBuilder::EmitFusedElementwise(const Node& node, size_t index, bool run_time_buffers) {
  // Static glue: arena addresses. Run-time-shape glue: the buffers it took for this call
  // (never one of the inputs': a slot frees only after its last reader).
  auto address = [&](const Value* value) -> absl::StatusOr<llvm::Value*> {
    if (!run_time_buffers) return Address(value);
    KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(value));
    return t.data;
  };
  const Value* out = node.output(0);
  const DType dtype = out->type().dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": fused loops handle f32 and f64 only"));
  }
  FusedLoopSpec spec;
  spec.f32 = dtype == DType::kFloat32;
  KILN_ASSIGN_OR_RETURN(spec.program, FusedProgram(node));
  spec.params = node.GetFloats("params");
  spec.num_inputs = node.inputs().size();
  if (spec.program.empty() || spec.params.size() != spec.program.size() / 2) {
    return absl::InternalError(absl::StrCat(NodeLabel(node), ": malformed program"));
  }
  // Operands: the output, then inputs. One-element constants become immediates.
  std::vector<std::vector<int64_t>> operand_dims = {out->type().StaticDims()};
  KILN_ASSIGN_OR_RETURN(llvm::Value * out_address, address(out));
  std::vector<llvm::Value*> addresses = {out_address};
  for (const Value* in : node.inputs()) {
    operand_dims.push_back(in->type().StaticDims());
    if (in->is_constant() && in->constant()->num_elements() == 1) {
      // Folded into the loop body: no buffer, a null pointer holds its parameter slot.
      spec.immediates.push_back(in->constant()->GetAsDouble(0));
      addresses.push_back(llvm::ConstantPointerNull::get(ptr_));
      continue;
    }
    spec.immediates.push_back(std::nullopt);
    KILN_ASSIGN_OR_RETURN(llvm::Value * in_address, address(in));
    addresses.push_back(in_address);
  }
  for (size_t i = 1; i < addresses.size(); ++i) spec.in_place |= addresses[i] == addresses[0];
  spec.space = CollapseLoops(operand_dims[0], operand_dims);
  SplitLongRows(spec.space);

  const std::string key = spec.Key();
  llvm::Function*& loop = fused_loops_[key];
  if (loop == nullptr) {
    llvm::Function* body = BodyEmitter(module_, spec).Emit(absl::StrCat("kiln_loop_body_", index));
    loop = EmitLoop(module_, body, addresses.size(), absl::StrCat("kiln_loop_", index));
  }

  // In the part function: fill the pointer array, then parallel_for over the rows when the
  // runtime gave a pool, else one call over all of them.
  llvm::Value* ctx =
      alloca_builder_->CreateAlloca(ptr_, builder_.getInt32(static_cast<uint32_t>(addresses.size())), "operands");
  for (size_t k = 0; k < addresses.size(); ++k) {
    builder_.CreateStore(addresses[k], builder_.CreateConstGEP1_64(ptr_, ctx, k));
  }
  llvm::Function* function = builder_.GetInsertBlock()->getParent();
  llvm::BasicBlock* serial = llvm::BasicBlock::Create(ctx_, "serial." + node.name(), function);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "after." + node.name(), function);
  const int64_t rows = spec.rows();
  const int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(spec.space.dims.back(), 1));
  if (rows > min_rows) {
    llvm::BasicBlock* check_fn = llvm::BasicBlock::Create(ctx_, "pool." + node.name(), function);
    llvm::BasicBlock* pooled = llvm::BasicBlock::Create(ctx_, "pooled." + node.name(), function);
    builder_.CreateCondBr(builder_.CreateICmpNE(exec_arg_, llvm::ConstantPointerNull::get(ptr_)), check_fn, serial);
    builder_.SetInsertPoint(check_fn);
    // kiln_kexec: {pool, parallel_for}
    llvm::Value* parallel_for = builder_.CreateLoad(ptr_, builder_.CreateConstGEP1_64(ptr_, exec_arg_, 1));
    builder_.CreateCondBr(builder_.CreateICmpNE(parallel_for, llvm::ConstantPointerNull::get(ptr_)), pooled, serial);
    builder_.SetInsertPoint(pooled);
    llvm::Value* pool = builder_.CreateLoad(ptr_, exec_arg_);
    auto* pf_type = llvm::FunctionType::get(builder_.getVoidTy(), {ptr_, i64_, i64_, ptr_, ptr_}, false);
    builder_.CreateCall(pf_type, parallel_for, {pool, builder_.getInt64(rows), builder_.getInt64(min_rows), loop, ctx});
    builder_.CreateBr(done);
  } else {
    builder_.CreateBr(serial);
  }
  builder_.SetInsertPoint(serial);
  builder_.CreateCall(loop, {ctx, builder_.getInt64(0), builder_.getInt64(rows)});
  builder_.CreateBr(done);
  builder_.SetInsertPoint(done);
  return absl::OkStatus();
}

}  // namespace kiln::codegen
