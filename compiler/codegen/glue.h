// The model's glue: everything codegen generates per model (the kernel library is compiled
// once per target). Planned once (each node's kernel call, where every constant lies in
// the weights object), then built as one or more LLVM modules that can be compiled in
// parallel: the nodes are cut into parts (functions of kNodesPerPart nodes), the parts
// into modules; module 0 also holds kiln_entry, which runs the parts in order, and the
// descriptor. Private to compiler/codegen.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data_object.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/ops.h"
#include "llvm/IR/Module.h"

namespace kiln::codegen {

// The symbol at the start of the weights object; constants are addressed from it.
inline constexpr char kWeightsSymbol[] = "kiln_weights";
// Nodes per generated function: small functions keep LLVM's per-function work linear.
inline constexpr size_t kNodesPerPart = 64;

struct GluePlan {
  const Graph* graph = nullptr;
  const MemoryPlan* memory = nullptr;
  const CodegenOptions* options = nullptr;
  std::vector<const Node*> nodes;
  // Per node: its kernel call, or nothing (a fused loop, or a view / in-place Concat that
  // needs no code; `fused` tells which).
  std::vector<std::optional<KernelCall>> calls;
  std::vector<bool> fused;
  DataObject weights;
  std::map<const Tensor*, int64_t> weight_offsets;
  std::vector<std::shared_ptr<const Tensor>> owned_constants;  // made by lowering
  // The graph's constants the weights come from, read as they are or through a made copy.
  std::set<const Tensor*> given_weights;
  size_t num_parts = 0;
  // Decided by the graph alone (never by this machine's cores), so that the same model
  // gives the same artifact on every machine.
  size_t num_modules = 1;

  // Some shape is known only at run time: one function, kiln_dynamic_entry, runs every
  // node with its dims and buffers made at run time (dynamic_glue.cc).
  bool dynamic = false;
  // Dynamic: per node, the shape function that computes its outputs' dims (none where
  // they are static), and per node the buffers whose last reader it is.
  std::vector<std::optional<KernelCall>> shape_calls;
  std::vector<std::vector<const Value*>> releases;
  // Dynamic: the value whose buffer each value uses (itself, or a view's source).
  std::map<const Value*, const Value*> roots;
  // Dynamic: the memory plan, made at compile time and sized at run time. Buffers whose
  // lifetimes do not overlap share a slot (a session buffer that grows to the largest size
  // it is asked for, so steady-state runs allocate nothing); per root buffer and per node's
  // scratch, its slot. A graph output's buffer is not in a slot (the caller keeps it).
  std::map<const Value*, int32_t> slots;
  std::map<size_t, int32_t> scratch_slots;
  int32_t num_slots = 0;
  int32_t slot_base = 0;  // this plan's first slot (a body's follow the outermost graph's)

  // Control flow (If, Loop, Scan): each body is a graph of its own, planned like a dynamic
  // graph and compiled to its own function, `function_name`(inputs, outputs, exec) with the
  // dynamic entry's signature, in the same module; the node calls a driver of the kernel
  // library (kiln/kernels/control.h) with those functions. `bodies` holds every body's plan
  // at any depth (in the outermost plan), `body_plans` each control node's, in its
  // subgraphs() order. A body's plan places its constants in its `root`'s weights.
  std::vector<std::unique_ptr<GluePlan>> bodies;
  std::map<const Node*, std::vector<const GluePlan*>> body_plans;
  GluePlan* root = nullptr;
  std::string function_name;
  GluePlan& weights_owner() { return root != nullptr ? *root : *this; }
  const GluePlan& weights_owner() const { return root != nullptr ? *root : *this; }

  size_t PartBegin(size_t part) const { return part * kNodesPerPart; }
  size_t PartEnd(size_t part) const { return std::min(nodes.size(), (part + 1) * kNodesPerPart); }
  size_t ModuleBegin(size_t module) const { return module * num_parts / num_modules; }
  size_t ModuleEnd(size_t module) const { return (module + 1) * num_parts / num_modules; }
};

// Lowers every node and lays out the weights; errors name the node.
absl::StatusOr<std::unique_ptr<GluePlan>> PlanGlue(const Graph& graph, const MemoryPlan& memory,
                                                   const CodegenOptions& options);

// The symbol of the kernel instantiation for a call: kiln_k_<name>_<suffix>, the type
// picked from its first input or output as kernel_list.inc says.
absl::StatusOr<std::string> KernelSymbol(const std::string& kernel, const TensorType* input0,
                                         const TensorType* output0);
// Gives one of the graph's constants its place in the weights object (once).
void PlaceWeight(GluePlan& plan, const Tensor* tensor);
// Places the constants a node's kernel call reads: the graph's own, and those lowering made
// (packed, transformed), whose sources (the node's constants the call no longer reads)
// count as the weights they were given as.
void PlaceCallWeights(GluePlan& plan, const Node& node, const KernelCall& call);
// The weights' share of the artifact's size (given, added by lowering, alignment).
ArtifactSize WeightsSize(const GluePlan& plan);

// PlanGlue's form for a graph with run-time shapes (dynamic_glue.cc).
absl::Status PlanDynamicGlue(GluePlan& plan);
// Plans each subgraph of a control-flow node (control_glue.cc).
absl::Status PlanBodies(GluePlan& plan, const Node& node);

// Builds module `index` of the plan into `module` (empty, with its triple and data layout set).
absl::Status BuildGlueModule(const GluePlan& plan, size_t index, llvm::Module& module);

// The kernels a built module calls (kiln_k_* declarations).
std::vector<std::string> CalledKernels(const llvm::Module& module);

}  // namespace kiln::codegen
