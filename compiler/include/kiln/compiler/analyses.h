// Analyses of a graph that passes and the driver read: computed on demand, cached, and
// dropped when a pass reports that it changed the graph (the pass manager calls
// Invalidate). A pass that only reads the graph keeps them; one that rewrites it must
// report the change, or later passes would read stale results.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/ops.h"

namespace kiln {

// Each node's kernel call in an artifact (LowerForArtifact), or why it has none.
using KernelCalls = std::unordered_map<const Node*, absl::StatusOr<KernelCall>>;

// Where each non-constant value lives at run time.
struct MemoryPlan {
  struct Slot {
    int64_t offset = 0;  // in the workspace arena
    int64_t size_bytes = 0;
  };
  std::map<const Value*, Slot> arena;          // intermediates
  std::map<const Value*, const Value*> alias;  // views and in-place results: value -> owner
  // Concat inputs written straight into their slice of the Concat's result, which then
  // copies nothing: value -> (the Concat's result, byte offset in it).
  struct Part {
    const Value* whole = nullptr;
    int64_t offset_bytes = 0;
  };
  std::map<const Value*, Part> parts;
  std::map<const Node*, Slot> scratch;  // kernel workspace (KernelCall::scratch_bytes)
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;       // sum of all intermediates, no reuse
  int64_t in_place = 0;          // results written over a dying input
  int64_t views = 0;             // results that share their input's buffer
  int64_t concats_in_place = 0;  // Concats whose inputs were written in place (no copy)
  // The kernel calls the plan was made with (their scratch and views): codegen reuses
  // them rather than lowering each node again (lowering may transform weights).
  std::shared_ptr<const KernelCalls> calls;
};

// Plans buffers without reuse: every intermediate gets its own slot. Codegen uses it when
// the pipeline has no plan-memory pass.
MemoryPlan NaiveMemoryPlan(const Graph& graph);

class AnalysisManager;

// Each analysis is a struct with a Result type and
// `static Result Compute(const Graph&, AnalysisManager&)`; the manager gives it the
// analyses it builds on (the memory plan reads liveness).

// The nodes that read each value, in graph order, each once: Graph::Users for every value
// in one walk.
struct UseListAnalysis {
  using Result = std::unordered_map<const Value*, std::vector<Node*>>;
  static Result Compute(const Graph& graph, AnalysisManager& analyses);
};

// Where each value is born and last read, as positions in graph order (graph.nodes()).
struct Liveness {
  // Node outputs: their producer's position (graph inputs and constants are absent).
  std::unordered_map<const Value*, size_t> defined;
  // Values some node reads: the last reader's position (a value no node reads is absent;
  // a graph output lives to the end whatever it says here).
  std::unordered_map<const Value*, size_t> last_read;
};
struct LivenessAnalysis {
  using Result = Liveness;
  static Result Compute(const Graph& graph, AnalysisManager& analyses);
};

// Each node lowered for an artifact once: the memory plan and codegen both need the calls.
struct KernelCallAnalysis {
  using Result = KernelCalls;
  static Result Compute(const Graph& graph, AnalysisManager& analyses);
};

// The arena plan of plan-memory (compiler/passes/plan_memory.cc).
struct MemoryPlanAnalysis {
  using Result = MemoryPlan;
  static Result Compute(const Graph& graph, AnalysisManager& analyses);
};

class AnalysisManager {
 public:
  // The analysis of `graph`, computed now unless cached since the last change.
  template <class Analysis>
  const typename Analysis::Result& Get(const Graph& graph) {
    return *GetShared<Analysis>(graph);
  }
  // The same, shared: a result that must outlive the cache (the memory plan keeps the
  // kernel calls for codegen).
  template <class Analysis>
  std::shared_ptr<const typename Analysis::Result> GetShared(const Graph& graph) {
    using Result = typename Analysis::Result;
    // A std::map slot stays put while Compute asks for (and inserts) the analyses it uses.
    std::shared_ptr<void>& slot = cache_[Key<Analysis>()];
    if (!slot) slot = std::make_shared<Result>(Analysis::Compute(graph, *this));
    return std::shared_ptr<const Result>(slot, static_cast<const Result*>(slot.get()));
  }
  // The cached result, or nullptr when it was not computed since the last change.
  template <class Analysis>
  const typename Analysis::Result* GetIfCached() const {
    auto it = cache_.find(Key<Analysis>());
    return it == cache_.end() ? nullptr : static_cast<const typename Analysis::Result*>(it->second.get());
  }
  // The graph changed: every result is stale.
  void Invalidate() { cache_.clear(); }

 private:
  // One address per analysis type names its cache slot.
  template <class Analysis>
  static const void* Key() {
    static const char key = 0;
    return &key;
  }

  std::map<const void*, std::shared_ptr<void>> cache_;
};

}  // namespace kiln
