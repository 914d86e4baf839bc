// TopK: the k largest (or smallest) elements along an axis and their indices, ties taking
// the lower index first. Each line keeps its best k in a heap held in the Indices output
// (worst at the root), then heap-sorts them best first: no memory beyond the outputs.
#include "kernel_common.h"
#include "kiln/kernels/reduce.h"

using namespace kiln_kernels;

namespace {

// One line of TopK: the input's elements at in[j * stride], the outputs' at [j * stride].
template <typename T>
struct TopKLine {
  const T* in;
  int64_t* indices;
  int64_t stride;
  bool largest;

  // Whether element a goes before element b.
  bool Before(int64_t a, int64_t b) const {
    const T va = in[a * stride], vb = in[b * stride];
    if (va != vb) return largest ? va > vb : va < vb;
    return a < b;
  }
  int64_t& At(int64_t j) const { return indices[j * stride]; }
  void Swap(int64_t i, int64_t j) const {
    const int64_t t = At(i);
    At(i) = At(j);
    At(j) = t;
  }
  // Restores the heap (every parent goes after its children) below `root` among `size`.
  void SiftDown(int64_t root, int64_t size) const {
    for (;;) {
      int64_t worst = root;
      for (int64_t child = 2 * root + 1; child <= 2 * root + 2 && child < size; ++child) {
        if (Before(At(worst), At(child))) worst = child;
      }
      if (worst == root) return;
      Swap(root, worst);
      root = worst;
    }
  }
  void SiftUp(int64_t node) const {
    while (node > 0 && Before(At((node - 1) / 2), At(node))) {
      Swap(node, (node - 1) / 2);
      node = (node - 1) / 2;
    }
  }
  void Select(int64_t len, int64_t k) const {
    for (int64_t i = 0; i < len; ++i) {
      const int64_t kept = i < k ? i : k;
      if (kept < k) {
        At(kept) = i;
        SiftUp(kept);
      } else if (k > 0 && Before(i, At(0))) {
        At(0) = i;
        SiftDown(0, k);
      }
    }
    for (int64_t size = k; size > 1; --size) {  // heap sort: the worst left goes last
      Swap(0, size - 1);
      SiftDown(0, size - 1);
    }
  }
};

struct TopK {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_topk_params& params) {
    if (call->num_outputs < 2 || params.axis >= call->inputs[0].rank) return KILN_KERR_UNSUPPORTED;
    const AxisExtents in = SplitAtAxis(call->inputs[0], params.axis);
    const int64_t k = call->outputs[0].dims[params.axis];
    if (call->num_inputs > 1 && call->inputs[1].data != nullptr &&
        LoadAsInt64(call->inputs[1].data, call->inputs[1].dtype, 0) != k) {
      return KILN_KERR_INDEX;
    }
    if (k > in.len) return KILN_KERR_INDEX;
    const T* pi = InputData<T>(call, 0);
    T* values = OutputData<T>(call, 0);
    int64_t* indices = OutputData<int64_t>(call, 1);
    const bool largest = params.largest != 0;
    auto lines = [=](int64_t begin, int64_t end) {
      for (int64_t line = begin; line < end; ++line) {
        const int64_t o = line / in.inner, j = line % in.inner;
        const int64_t out_first = o * k * in.inner + j;
        const TopKLine<T> top{pi + o * in.len * in.inner + j, indices + out_first, in.inner, largest};
        top.Select(in.len, k);
        for (int64_t s = 0; s < k; ++s) values[out_first + s * in.inner] = top.in[top.At(s) * in.inner];
      }
    };
    ParallelFor(call, in.outer * in.inner, 1, lines);
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_NUMERIC_KERNEL(topk, TopK, inputs[0].dtype)
