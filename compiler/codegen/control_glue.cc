// Control flow in the dynamic glue: each If/Loop/Scan/SequenceMap body is planned as a graph of its own
// and compiled to a native function kiln_body_N(inputs, outputs, exec) in the same module
// (the dynamic entry's code, dims and buffers made at run time, since a body's input
// shapes may change per iteration). The node itself becomes one call of its driver in the
// kernel library (kiln_k_control_if/loop/scan/sequence_map, kiln/kernels/control.h) with the node's
// inputs, its outputs' dims storage and the bodies' function pointers.
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "glue.h"
#include "glue_builder.h"
#include "kiln/common/status.h"
#include "kiln/kernels/control.h"
#include "kiln/runtime.h"

namespace kiln::codegen {

absl::Status PlanBodies(GluePlan& plan, const Node& node) {
  GluePlan& root = plan.weights_owner();
  for (const Value* in : node.inputs()) {  // the driver reads constant inputs from the weights
    if (in != nullptr && in->is_constant()) PlaceWeight(plan, in->constant().get());
  }
  std::vector<const GluePlan*>& plans = plan.body_plans[&node];
  for (const auto& [key, graph] : node.subgraphs()) {
    root.bodies.push_back(std::make_unique<GluePlan>());
    GluePlan& body = *root.bodies.back();
    body.graph = graph;
    body.memory = plan.memory;
    body.options = plan.options;
    body.root = &root;
    body.dynamic = true;
    body.function_name = absl::StrCat("kiln_body_", root.bodies.size() - 1);
    for (const Node* n : graph->nodes()) body.nodes.push_back(n);
    if (absl::Status s = PlanDynamicGlue(body); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(NodeLabel(node), ": subgraph '", key, "': ", s.message()));
    }
    plans.push_back(&body);
  }
  const size_t expected = node.op() == "If" ? 2 : 1;
  if (plans.size() != expected) {
    return absl::UnimplementedError(
        absl::StrCat(NodeLabel(node), ": has ", plans.size(), " subgraphs, expected ", expected));
  }
  return absl::OkStatus();
}

namespace {

// The driver's integer parameters (kiln/kernels/control.h), from the node's attributes and
// input count.
absl::StatusOr<std::vector<int64_t>> ControlParams(const Node& node) {
  const int64_t captured = static_cast<int64_t>(node.num_captured());
  const int64_t num_inputs = static_cast<int64_t>(node.inputs().size());
  const int64_t num_outputs = static_cast<int64_t>(node.outputs().size());
  if (node.op() == "If" || node.op() == "SequenceMap") return std::vector<int64_t>{captured};
  if (node.op() == "Loop") return std::vector<int64_t>{num_inputs - 2 - captured, captured};
  if (node.op() != "Scan") return absl::UnimplementedError(absl::StrCat(NodeLabel(node), ": no control-flow driver"));
  const bool batched = node.opset() < 9;
  const int64_t num_scan_inputs = node.GetInt("num_scan_inputs", 0);
  const int64_t num_states = num_inputs - captured - num_scan_inputs - (batched ? 1 : 0);
  const int64_t num_scans = num_outputs - num_states;
  if (num_states < 0 || num_scans < 0 || num_scan_inputs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": inputs and outputs do not fit"));
  }
  std::vector<int64_t> params = {num_states, num_scan_inputs, captured, batched ? 1 : 0};
  auto per_item = [&](const char* attr, int64_t n) {
    std::vector<int64_t> values = node.GetInts(attr);
    values.resize(static_cast<size_t>(n), 0);
    return values;
  };
  std::vector<int64_t> in_axes = per_item("scan_input_axes", num_scan_inputs);
  std::vector<int64_t> out_axes = per_item("scan_output_axes", num_scans);
  std::vector<int64_t> in_reverse = per_item(batched ? "directions" : "scan_input_directions", num_scan_inputs);
  std::vector<int64_t> out_reverse = per_item("scan_output_directions", num_scans);
  // Axes within a slice's view: opset 8 scans the dim after the batch (0 in the batch
  // entry's view) and stacks there.
  for (int64_t k = 0; k < num_scan_inputs; ++k) {
    const int64_t rank = static_cast<int64_t>(node.input(params[0] + k + (batched ? 1 : 0))->type().shape.size());
    in_axes[k] = batched ? 0 : in_axes[k] < 0 ? in_axes[k] + rank : in_axes[k];
  }
  for (int64_t k = 0; k < num_scans; ++k) {
    const int64_t rank = static_cast<int64_t>(node.output(num_states + k)->type().shape.size());
    out_axes[k] = batched ? 0 : out_axes[k] < 0 ? out_axes[k] + rank : out_axes[k];
    if (batched) out_reverse[k] = 0;
  }
  for (const std::vector<int64_t>* list : {&in_axes, &in_reverse, &out_axes, &out_reverse}) {
    params.insert(params.end(), list->begin(), list->end());
  }
  return params;
}

}  // namespace

absl::Status GlueBuilder::EmitControlNode(size_t index) {
  const Node& node = *plan_.nodes[index];
  static_assert(offsetof(kiln_control_call, bodies) == 24 && offsetof(kiln_control_call, params) == 40 &&
                offsetof(kiln_control_call, num_inputs) == 48 && sizeof(kiln_control_call) == 56);
  auto* call_type = llvm::StructType::get(ctx_, {ptr_, ptr_, ptr_, ptr_, ptr_, ptr_, i32_, i32_});
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> params, ControlParams(node));
  std::vector<RtTensor> ins, outs;
  for (const Value* in : node.inputs()) {
    KILN_ASSIGN_OR_RETURN(RtTensor t, RtOf(in));
    ins.push_back(t);
  }
  // The outputs' dims live in this function's frame, the known ones set (what an empty
  // Loop or Scan output keeps; 0 where unknown); the driver fills them and the data.
  // A sequence's dims are its length alone (rank 1).
  for (const Value* out : node.outputs()) {
    const bool sequence = out->type().holds_sequence();
    const int64_t rank = sequence ? 1 : static_cast<int64_t>(out->type().shape.size());
    llvm::Value* dims = DimsBuffer(out, rank);
    for (int64_t d = 0; d < rank; ++d) {
      const Dim& dim = sequence ? Dim{} : out->type().shape[static_cast<size_t>(d)];
      builder_.CreateStore(builder_.getInt64(dim.known() ? dim.size : 0), builder_.CreateConstGEP1_64(i64_, dims, d));
    }
    rt_dims_[out] = dims;
    outs.push_back(RtTensor{llvm::ConstantPointerNull::get(ptr_), dims, rank,
                            sequence ? static_cast<DType>(KILN_DTYPE_SEQUENCE) : out->type().dtype});
  }
  llvm::Value* in_array = KTensors(ins, "control.in");
  llvm::Value* out_array = KTensors(outs, "control.out");
  llvm::Value* call = alloca_builder_->CreateAlloca(call_type, nullptr, node.name() + ".control");
  auto* body_type = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_}, false);
  const std::vector<const GluePlan*>& bodies = plan_.body_plans.at(&node);
  // If's bodies in then, else order (subgraphs() lists attributes by name: else first).
  std::vector<const GluePlan*> ordered = bodies;
  if (node.op() == "If" && ordered.size() == 2 && ordered[0]->graph == node.GetGraph("else_branch")) {
    std::swap(ordered[0], ordered[1]);
  }
  builder_.CreateStore(in_array, builder_.CreateStructGEP(call_type, call, 0));
  builder_.CreateStore(out_array, builder_.CreateStructGEP(call_type, call, 1));
  builder_.CreateStore(exec_arg_, builder_.CreateStructGEP(call_type, call, 2));
  for (size_t b = 0; b < 2; ++b) {
    llvm::Value* fn = llvm::ConstantPointerNull::get(ptr_);
    if (b < ordered.size()) fn = module_.getOrInsertFunction(ordered[b]->function_name, body_type).getCallee();
    builder_.CreateStore(fn, builder_.CreateStructGEP(call_type, call, 3 + b));
  }
  builder_.CreateStore(Int64Array(params), builder_.CreateStructGEP(call_type, call, 5));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(ins.size())),
                       builder_.CreateStructGEP(call_type, call, 6));
  builder_.CreateStore(builder_.getInt32(static_cast<uint32_t>(outs.size())),
                       builder_.CreateStructGEP(call_type, call, 7));
  std::string driver = "kiln_k_control_if";
  if (node.op() == "Loop") driver = "kiln_k_control_loop";
  if (node.op() == "Scan") driver = "kiln_k_control_scan";
  if (node.op() == "SequenceMap") driver = "kiln_k_control_sequence_map";
  llvm::FunctionCallee fn = module_.getOrInsertFunction(driver, kernel_type_);
  EmitFailureCheck(builder_.CreateCall(fn, {call}), index, node.name());
  for (size_t k = 0; k < node.outputs().size(); ++k) {
    llvm::Value* slot = builder_.CreateConstGEP1_64(ktensor_, out_array, k);
    rt_data_[node.output(k)] =
        builder_.CreateLoad(ptr_, builder_.CreateStructGEP(ktensor_, slot, 0), node.output(k)->name());
  }
  for (const Value* dead : plan_.releases[index]) EmitRelease(DataOf(dead));
  return absl::OkStatus();
}

}  // namespace kiln::codegen
