// plan-memory: places every intermediate in one workspace arena by liveness, reusing the
// space of values that are dead; views (Reshape and friends) share their input's buffer
// and elementwise results may overwrite an input that dies at that node. A Concat whose
// slices are contiguous (every dimension before the axis is 1) has its inputs written
// straight into their slices, and copies nothing.
//   %a = Conv(%x) ; %b = Relu(%a) ; %c = Conv(%b)
//     => a@[0, 4096)  b@a (in place)  c@[4096, 8192)
//   %p = Conv(%s) ; %q = Conv(%s) ; %c = Concat(%p, %q) axis 1, N = 1
//     => c@[0, 8192)  p@c+0  q@c+4096
// The graph is unchanged; the plan is the MemoryPlanAnalysis the PassContext caches.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

constexpr int64_t kAlignment = 64;

int64_t Align(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

int64_t ValueBytes(const Value* v) { return NumElements(v->type().StaticDims()) * DTypeSize(v->type().dtype); }

bool IsElementwiseKernel(const std::string& kernel) {
  return kernel == "unary" || kernel == "binary" || kernel == "clip" || kernel == "cast";
}

// Values the plan places in the arena: node outputs that are not graph outputs.
bool NeedsArena(const Graph& graph, const Value* v) {
  return v->producer() != nullptr && !v->is_constant() && !graph.IsGraphOutput(v);
}

// First-fit over a list of free blocks, coalescing neighbours on release.
class Arena {
 public:
  int64_t Allocate(int64_t size) {
    size = Align(std::max<int64_t>(size, 1));
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= size) {
        const int64_t offset = it->first;
        const int64_t rest = it->second - size;
        free_.erase(it);
        if (rest > 0) free_[offset + size] = rest;
        return offset;
      }
    }
    // Grow, absorbing a free block at the end.
    int64_t offset = top_;
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == top_) {
        offset = last->first;
        free_.erase(last);
      }
    }
    top_ = offset + size;
    return offset;
  }
  void Release(int64_t offset, int64_t size) {
    size = Align(std::max<int64_t>(size, 1));
    auto [it, inserted] = free_.emplace(offset, size);
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  int64_t top() const { return top_; }

 private:
  std::map<int64_t, int64_t> free_;  // offset -> size
  int64_t top_ = 0;
};

// One planning run over a graph: the steps of MemoryPlanAnalysis::Compute.
class MemoryPlanner {
 public:
  MemoryPlanner(const Graph& graph, const Liveness& liveness, std::shared_ptr<const KernelCalls> calls)
      : graph_(graph), liveness_(liveness), nodes_(graph.nodes()) {
    for (const Node* node : nodes_) calls_.push_back(&calls->at(node));
    plan_.calls = std::move(calls);
  }

  MemoryPlan Plan() {
    PlanViews();
    PlanConcats();
    ComputeLastUse();
    for (size_t i = 0; i < nodes_.size(); ++i) PlaceNode(i);
    plan_.arena_bytes = arena_.top();
    return std::move(plan_);
  }

 private:
  const Value* Root(const Value* v) const {
    for (auto it = owner_.find(v); it != owner_.end(); it = owner_.find(v)) v = it->second;
    return v;
  }

  // Views first: their outputs belong to the input's buffer.
  void PlanViews() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Node* node = nodes_[i];
      if (!calls_[i]->ok() || !(*calls_[i])->is_view) continue;
      const Value* in = node->input(0);
      const Value* out = node->output(0);
      if (NeedsArena(graph_, Root(in)) && NeedsArena(graph_, out)) {
        owner_[out] = in;
        plan_.alias[out] = in;
        ++plan_.views;
      }
    }
  }

  // Concats in place. Each input must be a fresh buffer (a node's own result, not a view,
  // graph input, constant or graph output) that nothing but this Concat reads, once.
  void PlanConcats() {
    std::unordered_map<const Value*, int> readers;
    for (const Node* node : nodes_) {
      for (const Value* in : node->inputs()) {
        if (in != nullptr) ++readers[in];
      }
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Node* node = nodes_[i];
      if (!calls_[i]->ok() || (*calls_[i])->kernel != "concat" || node->inputs().size() < 2) continue;
      const Value* whole = node->output(0);
      if (!NeedsArena(graph_, whole) || owner_.count(whole)) continue;
      const std::vector<int64_t> dims = whole->type().StaticDims();
      int64_t axis = node->GetInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(dims.size());
      int64_t outer = 1;
      for (int64_t k = 0; k < axis; ++k) outer *= dims[k];
      if (outer != 1) continue;  // slices interleave: the kernel must copy
      bool eligible = true;
      for (const Value* in : node->inputs()) {
        eligible = eligible && in != nullptr && NeedsArena(graph_, in) && owner_.count(in) == 0 && readers[in] == 1 &&
                   in->type().dtype == whole->type().dtype;
      }
      if (!eligible) continue;
      int64_t offset = 0;
      for (const Value* in : node->inputs()) {
        owner_[in] = whole;
        plan_.parts[in] = MemoryPlan::Part{whole, offset};
        offset += ValueBytes(in);
      }
      ++plan_.concats_in_place;
    }
  }

  // When each buffer dies: the last read of any value that lives in it (through views,
  // Concat slices and, as they are decided, in-place results), or its own definition
  // when nothing reads it. Each buffer is listed under the node it dies at.
  void ComputeLastUse() {
    for (const auto& [value, position] : liveness_.defined) last_use_[value] = position;
    for (const auto& [value, position] : liveness_.last_read) {
      size_t& last = last_use_[Root(value)];
      last = std::max(last, position);
    }
    dies_at_.assign(nodes_.size(), {});
    for (const auto& [value, position] : last_use_) {
      if (position < nodes_.size()) dies_at_[position].push_back(value);
    }
  }

  // `value`'s buffer now also holds `joined` (an in-place result) and lives as long as it.
  void ExtendLife(const Value* value, const Value* joined) {
    size_t& last = last_use_[value];
    const size_t joined_last = last_use_[joined];
    if (last == kReleased || joined_last <= last) return;
    last = joined_last;
    dies_at_[last].push_back(value);
  }

  // In place: an elementwise result may take the buffer of an input that dies at node i.
  const Value* InPlaceInput(size_t i) {
    const Node* node = nodes_[i];
    if (!calls_[i]->ok() || !IsElementwiseKernel((*calls_[i])->kernel) || node->outputs().size() != 1 ||
        !NeedsArena(graph_, node->output(0)) || owner_.count(node->output(0)) != 0) {
      return nullptr;
    }
    for (const Value* in : node->inputs()) {
      if (in == nullptr) continue;
      const Value* r = Root(in);
      if (plan_.arena.count(r) && last_use_[r] == i && ValueBytes(in) == ValueBytes(node->output(0)) &&
          in->type().StaticDims() == node->output(0)->type().StaticDims()) {
        return r;
      }
    }
    return nullptr;
  }

  void PlaceNode(size_t i) {
    const Node* node = nodes_[i];
    for (const Value* out : node->outputs()) {
      if (NeedsArena(graph_, out)) plan_.naive_bytes += Align(ValueBytes(out));
    }
    const Value* reuse = InPlaceInput(i);
    for (const Value* out : node->outputs()) PlaceOutput(out, reuse);
    // Scratch lives while the node runs, beside its inputs and outputs.
    if (calls_[i]->ok() && (*calls_[i])->scratch_bytes > 0) {
      const int64_t bytes = (*calls_[i])->scratch_bytes;
      plan_.scratch[node] = MemoryPlan::Slot{arena_.Allocate(bytes), bytes};
      plan_.naive_bytes += Align(bytes);
      arena_.Release(plan_.scratch[node].offset, bytes);
    }
    // Release the buffers that die at this node (a buffer whose life was extended is
    // listed again under its new last node).
    for (const Value* value : dies_at_[i]) {
      auto slot = plan_.arena.find(value);
      size_t& last = last_use_[value];
      if (slot == plan_.arena.end() || last != i) continue;
      arena_.Release(slot->second.offset, slot->second.size_bytes);
      last = kReleased;
    }
  }

  void PlaceOutput(const Value* out, const Value* reuse) {
    if (!NeedsArena(graph_, out)) return;
    if (plan_.parts.count(out)) {
      // A Concat's slice: its whole buffer comes to life with the first slice written.
      const Value* whole = Root(out);
      if (plan_.arena.count(whole) == 0)
        plan_.arena[whole] = MemoryPlan::Slot{arena_.Allocate(ValueBytes(whole)), ValueBytes(whole)};
      return;
    }
    if (owner_.count(out) || plan_.arena.count(out)) return;
    if (reuse != nullptr) {
      owner_[out] = reuse;
      plan_.alias[out] = reuse;
      ++plan_.in_place;
      ExtendLife(reuse, out);
      return;
    }
    plan_.arena[out] = MemoryPlan::Slot{arena_.Allocate(ValueBytes(out)), ValueBytes(out)};
  }

  static constexpr size_t kReleased = SIZE_MAX;

  const Graph& graph_;
  const Liveness& liveness_;
  std::vector<Node*> nodes_;
  std::vector<const absl::StatusOr<KernelCall>*> calls_;  // per node, from plan_.calls
  MemoryPlan plan_;
  // Owner of each buffer: views and in-place results point at the value whose buffer they
  // use, possibly through a chain (a Reshape of an in-place Add of a MatMul result).
  std::unordered_map<const Value*, const Value*> owner_;
  std::unordered_map<const Value*, size_t> last_use_;  // per buffer (its root value); kReleased once freed
  std::vector<std::vector<const Value*>> dies_at_;     // per node: buffers whose last use it may be
  Arena arena_;
};

// The pass only computes the plan into the analysis cache, where codegen's caller finds it.
class PlanMemory : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    context.analyses.Get<MemoryPlanAnalysis>(graph);
    return false;
  }
};

}  // namespace

KernelCalls KernelCallAnalysis::Compute(const Graph& graph, AnalysisManager&) {
  KernelCalls calls;
  for (const Node* node : graph.nodes()) {
    const OpSchema* schema = FindOp(node->op());
    calls.emplace(node, schema != nullptr ? LowerForArtifact(*schema, *node)
                                          : absl::InternalError(absl::StrCat(NodeLabel(*node), ": no such op")));
  }
  return calls;
}

namespace {

// A graph with a shape known only at run time gets its buffers at run time (the dynamic
// glue, codegen/dynamic_glue.cc), as does one with control flow: nothing to plan here.
bool HasRunTimeShapes(const Graph& graph) {
  for (const Value* v : graph.values()) {
    if (!v->type().IsStatic()) return true;
  }
  for (const Node* node : graph.nodes()) {
    if (node->has_subgraphs()) return true;
  }
  return false;
}

}  // namespace

MemoryPlan MemoryPlanAnalysis::Compute(const Graph& graph, AnalysisManager& analyses) {
  if (HasRunTimeShapes(graph)) return MemoryPlan{};
  return MemoryPlanner(graph, analyses.Get<LivenessAnalysis>(graph), analyses.GetShared<KernelCallAnalysis>(graph))
      .Plan();
}

MemoryPlan NaiveMemoryPlan(const Graph& graph) {
  MemoryPlan plan;
  if (HasRunTimeShapes(graph)) return plan;
  AnalysisManager analyses;
  plan.calls = analyses.GetShared<KernelCallAnalysis>(graph);
  int64_t offset = 0;
  for (const Node* node : graph.nodes()) {
    const absl::StatusOr<KernelCall>& call = plan.calls->at(node);
    if (call.ok() && call->scratch_bytes > 0) {
      plan.scratch[node] = MemoryPlan::Slot{offset, call->scratch_bytes};
      offset += Align(call->scratch_bytes);
    }
    for (const Value* out : node->outputs()) {
      if (!NeedsArena(graph, out)) continue;
      plan.arena[out] = MemoryPlan::Slot{offset, ValueBytes(out)};
      offset += Align(ValueBytes(out));
    }
  }
  plan.arena_bytes = plan.naive_bytes = offset;
  return plan;
}

MemoryPlan PlannedOrNaiveMemory(const Graph& graph, const PassContext& context) {
  const MemoryPlan* planned = context.analyses.GetIfCached<MemoryPlanAnalysis>();
  return planned != nullptr ? *planned : NaiveMemoryPlan(graph);
}

std::unique_ptr<Pass> CreatePlanMemory(const PassInvocation&) { return std::make_unique<PlanMemory>(); }

}  // namespace kiln
