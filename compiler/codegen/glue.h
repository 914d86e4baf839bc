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
  size_t num_parts = 0;
  // Decided by the graph alone (never by this machine's cores), so that the same model
  // gives the same artifact on every machine.
  size_t num_modules = 1;

  size_t PartBegin(size_t part) const { return part * kNodesPerPart; }
  size_t PartEnd(size_t part) const { return std::min(nodes.size(), (part + 1) * kNodesPerPart); }
  size_t ModuleBegin(size_t module) const { return module * num_parts / num_modules; }
  size_t ModuleEnd(size_t module) const { return (module + 1) * num_parts / num_modules; }
};

// Lowers every node and lays out the weights; errors name the node.
absl::StatusOr<std::unique_ptr<GluePlan>> PlanGlue(const Graph& graph, const MemoryPlan& memory,
                                                   const CodegenOptions& options);

// Builds module `index` of the plan into `module` (empty, with its triple and data layout set).
absl::Status BuildGlueModule(const GluePlan& plan, size_t index, llvm::Module& module);

// The kernels a built module calls (kiln_k_* declarations).
std::vector<std::string> CalledKernels(const llvm::Module& module);

}  // namespace kiln::codegen
