// plan-memory: places every intermediate in one workspace arena by liveness, reusing the
// space of values that are dead; views (Reshape and friends) share their input's buffer
// and elementwise results may overwrite an input that dies at that node. A Concat whose
// slices are contiguous (every dimension before the axis is 1) has its inputs written
// straight into their slices, and copies nothing.
//   %a = Conv(%x) ; %b = Relu(%a) ; %c = Conv(%b)
//     => a@[0, 4096)  b@a (in place)  c@[4096, 8192)
//   %p = Conv(%s) ; %q = Conv(%s) ; %c = Concat(%p, %q) axis 1, N = 1
//     => c@[0, 8192)  p@c+0  q@c+4096
// The graph is unchanged; the plan goes to codegen through the PassContext.
#include <algorithm>
#include <map>
#include <unordered_map>

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

class PlanMemory : public Pass {
 public:
  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    MemoryPlan plan;
    std::vector<Node*> nodes = graph.nodes();
    // Owner of each buffer: views and in-place results point at the value whose buffer they
    // use, possibly through a chain (a Reshape of an in-place Add of a MatMul result).
    std::unordered_map<const Value*, const Value*> owner;
    std::unordered_map<const Value*, size_t> last_use;
    auto root = [&](const Value* v) {
      for (auto it = owner.find(v); it != owner.end(); it = owner.find(v)) v = it->second;
      return v;
    };
    std::vector<absl::StatusOr<KernelCall>> calls;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const OpSchema* schema = FindOp(nodes[i]->op());
      calls.push_back(schema ? LowerForArtifact(*schema, *nodes[i]) : absl::InternalError("no schema"));
    }
    // Views first: their outputs belong to the input's buffer.
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node* node = nodes[i];
      if (!calls[i].ok() || !calls[i]->is_view) continue;
      const Value* in = node->input(0);
      const Value* out = node->output(0);
      if (NeedsArena(graph, root(in)) && NeedsArena(graph, out)) {
        owner[out] = in;
        plan.alias[out] = in;
        ++plan.views;
      }
    }
    // Concats in place. Each input must be a fresh buffer (a node's own result, not a view,
    // graph input, constant or graph output) that nothing but this Concat reads, once.
    std::unordered_map<const Value*, int> readers;
    for (const Node* node : nodes) {
      for (const Value* in : node->inputs()) {
        if (in != nullptr) ++readers[in];
      }
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node* node = nodes[i];
      if (!calls[i].ok() || calls[i]->kernel != "concat" || node->inputs().size() < 2) continue;
      const Value* whole = node->output(0);
      if (!NeedsArena(graph, whole) || owner.count(whole)) continue;
      const std::vector<int64_t> dims = whole->type().StaticDims();
      int64_t axis = node->GetInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(dims.size());
      int64_t outer = 1;
      for (int64_t k = 0; k < axis; ++k) outer *= dims[k];
      if (outer != 1) continue;  // slices interleave: the kernel must copy
      bool eligible = true;
      for (const Value* in : node->inputs()) {
        eligible = eligible && in != nullptr && NeedsArena(graph, in) && owner.count(in) == 0 && readers[in] == 1 &&
                   in->type().dtype == whole->type().dtype;
      }
      if (!eligible) continue;
      int64_t offset = 0;
      for (const Value* in : node->inputs()) {
        owner[in] = whole;
        plan.parts[in] = MemoryPlan::Part{whole, offset};
        offset += ValueBytes(in);
      }
      ++plan.concats_in_place;
    }
    // Last reader of each buffer, through every alias of it; recomputed when an in-place
    // result joins a buffer (which then lives as long as the result and its views).
    auto compute_last_use = [&]() {
      std::unordered_map<const Value*, size_t> fresh;
      for (size_t i = 0; i < nodes.size(); ++i) {
        for (const Value* in : nodes[i]->inputs()) {
          if (in != nullptr) fresh[root(in)] = i;  // nodes are in order: the last write wins
        }
        for (const Value* out : nodes[i]->outputs()) fresh.emplace(out, i);  // never read: dies at birth
      }
      for (const auto& [value, index] : last_use) {
        if (index == SIZE_MAX) fresh[value] = SIZE_MAX;  // already released
      }
      last_use = std::move(fresh);
    };
    compute_last_use();
    Arena arena;
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node* node = nodes[i];
      for (const Value* out : node->outputs()) {
        if (NeedsArena(graph, out)) plan.naive_bytes += Align(ValueBytes(out));
      }
      // In place: an elementwise result may take the buffer of an input that dies here.
      const Value* reuse = nullptr;
      if (calls[i].ok() && IsElementwiseKernel(calls[i]->kernel) && node->outputs().size() == 1 &&
          NeedsArena(graph, node->output(0)) && owner.count(node->output(0)) == 0) {
        for (const Value* in : node->inputs()) {
          if (in == nullptr) continue;
          const Value* r = root(in);
          if (plan.arena.count(r) && last_use[r] == i && ValueBytes(in) == ValueBytes(node->output(0)) &&
              in->type().StaticDims() == node->output(0)->type().StaticDims()) {
            reuse = r;
            break;
          }
        }
      }
      for (const Value* out : node->outputs()) {
        if (!NeedsArena(graph, out)) continue;
        if (plan.parts.count(out)) {
          // A Concat's slice: its whole buffer comes to life with the first slice written.
          const Value* whole = root(out);
          if (plan.arena.count(whole) == 0)
            plan.arena[whole] = MemoryPlan::Slot{arena.Allocate(ValueBytes(whole)), ValueBytes(whole)};
          continue;
        }
        if (owner.count(out) || plan.arena.count(out)) continue;
        if (reuse != nullptr) {
          owner[out] = reuse;
          plan.alias[out] = reuse;
          ++plan.in_place;
          compute_last_use();  // the reused buffer now lives as long as the result
          continue;
        }
        plan.arena[out] = MemoryPlan::Slot{arena.Allocate(ValueBytes(out)), ValueBytes(out)};
      }
      // Scratch lives while the node runs, beside its inputs and outputs.
      if (calls[i].ok() && calls[i]->scratch_bytes > 0) {
        const int64_t bytes = calls[i]->scratch_bytes;
        plan.scratch[node] = MemoryPlan::Slot{arena.Allocate(bytes), bytes};
        plan.naive_bytes += Align(bytes);
        arena.Release(plan.scratch[node].offset, bytes);
      }
      // Release buffers whose last reader is this node.
      for (const auto& [value, slot] : plan.arena) {
        auto it = last_use.find(value);
        if (it != last_use.end() && it->second == i) {
          arena.Release(slot.offset, slot.size_bytes);
          it->second = SIZE_MAX;  // released
        }
      }
    }
    plan.arena_bytes = arena.top();
    context.memory_plan = std::move(plan);
    context.has_memory_plan = true;
    return false;
  }
};

}  // namespace

MemoryPlan NaiveMemoryPlan(const Graph& graph) {
  MemoryPlan plan;
  int64_t offset = 0;
  for (const Node* node : graph.nodes()) {
    if (const OpSchema* schema = FindOp(node->op())) {
      absl::StatusOr<KernelCall> call = LowerForArtifact(*schema, *node);
      if (call.ok() && call->scratch_bytes > 0) {
        plan.scratch[node] = MemoryPlan::Slot{offset, call->scratch_bytes};
        offset += Align(call->scratch_bytes);
      }
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

KILN_REGISTER_PASS(PlanMemory, "plan-memory",
                   "place intermediates in one arena by liveness, with views and in-place reuse")

}  // namespace kiln
