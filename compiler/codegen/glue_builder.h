// GlueBuilder: the LLVM IR of one glue module (glue.h). One node becomes a kernel call
// (glue.cc) or a generated loop (fused_loop.cc); nodes are emitted inside part functions
// kiln_part_N(inputs, outputs, workspace, exec) that return 0 or the failing node's code.
// Private to compiler/codegen.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "glue.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"

namespace kiln::codegen {

class GlueBuilder {
 public:
  GlueBuilder(const GluePlan& plan, llvm::Module& module);

  // Parts [first_part, last_part), and for the main module the entry and the descriptor.
  absl::Status Build(size_t first_part, size_t last_part, bool main);

 private:
  // One function over nodes [PartBegin(part), PartEnd(part)).
  absl::Status EmitPart(size_t part);
  // kiln_entry: each part in order; then graph outputs no node wrote are copied.
  absl::Status EmitEntry();
  // Calls kiln_part_0 .. kiln_part_{num_parts-1}(inputs, outputs, third, exec) in turn,
  // passing a failing part's code on (`third`: the static workspace, or the dynamic frame).
  void EmitPartCalls(llvm::Value* third);
  void EmitDescriptor(llvm::Function* entry, llvm::Function* dynamic_entry);
  // Graphs with run-time shapes (dynamic_glue.cc): kiln_dynamic_entry(inputs, outputs,
  // exec), every node in order with its dims and buffers made at run time.
  absl::Status EmitDynamicEntry();
  // The plan's graph as one function `name`(inputs, outputs, exec): the entry, or a body.
  // With several parts (the outermost graph past kNodesPerPart nodes), it calls each
  // part's function in turn, with each value's data, dims and rank in a frame on its stack.
  absl::StatusOr<llvm::Function*> EmitDynamicFunction(const std::string& name);
  // kiln_part_N(inputs, outputs, frame, exec) -> 0 or the failing node's code:
  // nodes [PartBegin(part), PartEnd(part)).
  absl::Status EmitDynamicPart(size_t part);
  // Nodes [begin, end) in the current function, after the graph inputs' loads; each
  // output kept in the frame when there is one.
  absl::Status EmitDynamicNodes(size_t begin, size_t end);
  // Where each node output's words lie in the frame (the same in every module).
  void LayOutFrame();
  // The graph inputs' data, dims and rank as the current function reads them.
  void LoadDynamicInputs();
  // With a frame: the value's data, dims and rank stored in it for later parts.
  void Persist(const Value* value);
  // An i64 array of `rank` elements for a value's dims: on the stack, or in the frame.
  llvm::Value* DimsBuffer(const Value* value, int64_t rank);
  // The value's data pointer in the current function (loaded from the frame when an
  // earlier part made it); null when it has none.
  llvm::Value* DataOf(const Value* value);
  absl::Status EmitDynamicNode(size_t index);
  // A node whose kernel makes its outputs (KernelCall::allocates_outputs): sequences,
  // optionals and what is read out of them; their data, dims and rank are read back.
  absl::Status EmitAllocatingNode(size_t index);
  // Graph output i when it is a sequence, an optional or a tensor of unknown rank: the
  // value_export kernel writes a copy into the output slot.
  absl::Status EmitValueExport(size_t i, const Value* value);
  // If, Loop or Scan: the node's driver called with its bodies' functions (control_glue.cc).
  absl::Status EmitControlNode(size_t index);
  // A buffer of `bytes` (an i64 value) from exec->alloc; a failure returns from the entry
  // with the node's code.
  llvm::Value* EmitAlloc(llvm::Value* bytes, size_t index, const std::string& name);
  void EmitRelease(llvm::Value* data);
  // Slot `slot` of the session's planned buffers, grown to `bytes` if smaller (exec->slot).
  llvm::Value* EmitSlot(llvm::Value* bytes, int32_t slot, size_t index, const std::string& name);
  llvm::Value* ElementCount(llvm::Value* dims, size_t rank);
  // A kiln_ktensor as the glue builds it: dims constant (static) or computed (dynamic entry).
  struct RtTensor {
    llvm::Value* data;
    llvm::Value* dims;  // an i64 array
    int64_t rank;
    DType dtype;
    // The rank as an i32 known only at run time (a tensor a sequence kernel made, whose
    // type has no rank): stands for `rank` when set.
    llvm::Value* rank_value = nullptr;
  };
  absl::StatusOr<RtTensor> RtOf(const Value* value);
  absl::StatusOr<RtTensor> RtOfConstant(const Tensor* tensor);
  llvm::Value* KTensors(const std::vector<RtTensor>& items, const char* name);
  // kcall {inputs, outputs, params, params_size, exec, #inputs, #outputs} on the stack.
  llvm::Value* KCall(llvm::Value* ins, size_t num_ins, llvm::Value* outs, size_t num_outs, llvm::Value* params,
                     int64_t params_size);
  absl::Status EmitNode(size_t index);
  absl::Status EmitKernelCall(const Node& node, const KernelCall& call, size_t index);
  void EmitInjectedBug(llvm::Value* output, const TensorType& type);
  // kiln.Elementwise as a generated loop (fused_loop.cc) over static shapes; its buffers
  // are arena addresses, or with `run_time_buffers` those the run-time-shape glue took.
  absl::Status EmitFusedElementwise(const Node& node, size_t index, bool run_time_buffers = false);
  // Branches to the part's fail block with (index + 1) << 8 | rc when rc != 0.
  void EmitFailureCheck(llvm::Value* rc, size_t index, const std::string& name);
  void EmitKernelDone(int32_t index);

  // Starts a function with the glue's signature: (inputs, outputs, workspace, exec) -> i32.
  llvm::Function* BeginFunction(const std::string& name, llvm::GlobalValue::LinkageTypes linkage,
                                llvm::FunctionType* type = nullptr);
  // Returns 0 from the current block and closes the function.
  void EndFunction();
  // The address of a value's buffer in the current function.
  absl::StatusOr<llvm::Value*> Address(const Value* value);
  absl::StatusOr<llvm::Value*> ConstantTensor(const Tensor* tensor);
  llvm::GlobalVariable* ConstantBytes(const std::string& name, const void* data, int64_t size, unsigned align);
  llvm::Constant* Int64Array(const std::vector<int64_t>& values);
  llvm::Constant* Params(const KernelParams& params);
  llvm::Constant* CString(const std::string& text);
  llvm::Constant* TensorInfos(const std::vector<Value*>& values);
  llvm::Value* TensorArray(const std::vector<std::pair<llvm::Value*, const TensorType*>>& items, const char* name);

  const GluePlan& plan_;
  const Graph& graph_;
  const MemoryPlan& memory_;
  llvm::LLVMContext& ctx_;
  llvm::Module& module_;
  llvm::IRBuilder<> builder_;
  llvm::PointerType* ptr_;
  llvm::Type *i32_, *i64_, *f64_, *i8_;
  llvm::StructType *ktensor_, *kcall_;
  llvm::FunctionType* kernel_type_;
  llvm::FunctionType* part_type_;
  llvm::GlobalVariable* weights_symbol_ = nullptr;
  std::map<std::string, llvm::Constant*> int_arrays_;
  std::map<std::string, llvm::Constant*> params_;  // kernel parameter structs by their bytes
  // Fused loops with the same program, shapes and constants share one function.
  std::map<std::string, llvm::Function*> fused_loops_;
  // Per function being emitted:
  std::map<const Value*, llvm::Value*> addresses_;
  llvm::Value* inputs_arg_ = nullptr;
  llvm::Value* outputs_arg_ = nullptr;
  llvm::Value* workspace_arg_ = nullptr;
  llvm::Value* exec_arg_ = nullptr;
  llvm::BasicBlock* body_block_ = nullptr;
  llvm::BasicBlock* fail_block_ = nullptr;
  llvm::PHINode* fail_code_ = nullptr;
  std::unique_ptr<llvm::IRBuilder<>> alloca_builder_;
  // Dynamic entry: each value's data and dims (an i64 array) as the function has them.
  std::map<const Value*, llvm::Value*> rt_data_, rt_dims_;
  std::map<const Value*, llvm::Value*> rt_rank_;  // values whose rank is known at run time only
  // Multi-part dynamic entry: the frame (an i64 array) in the current function, its size,
  // and where each value's words begin in it.
  llvm::Value* frame_ = nullptr;
  bool frame_is_argument_ = false;  // a part's (else the entry's own, read after the parts)
  int64_t frame_words_ = 0;
  std::map<const Value*, int64_t> frame_base_;
  std::set<const Value*> frame_ranks_;  // values whose rank is known at run time only
};

}  // namespace kiln::codegen
