// NonMaxSuppression's greedy selection, shared by its shape function (which counts the
// selected boxes) and its kernel (which writes them): per batch and class, the boxes
// scoring above score_threshold in descending score order (ties: lower index first),
// each kept unless its IoU with a box kept before exceeds iou_threshold, at most
// max_output_boxes_per_class. With the exec hooks' buffers (run-time shapes: the shape
// function and the kernel both have them) the candidates are sorted once and each is
// checked, 64 at a time in vector lanes, against the kept boxes that can reach it (in
// ymin order, within the tallest box's height): O(n log n + n * min(kept, near)). Without them (a caller with
// no hooks) the kept boxes are a bitset on the stack (kMaxNmsBoxes boxes at most: 32 KiB,
// enough for a detector's per-class candidates batched into one call, SSDlite's 90 x 300)
// and the next box in score order is found by a scan: O(boxes^2) per class.
#pragma once

#include "kernel_common.h"

namespace kiln_kernels {

constexpr int64_t kMaxNmsBoxes = int64_t{1} << 18;

// Inputs: boxes [batches, boxes, 4], scores [batches, classes, boxes], then the optional
// max_output_boxes_per_class, iou_threshold and score_threshold (data NULL: absent).
struct NmsProblem {
  const kiln_ktensor &boxes, &scores;
  bool center_point_box;
  int64_t batches = 0, classes = 0, count = 0, max_per_class = 0;
  double iou_threshold = 0, score_threshold = 0;
  bool has_score_threshold = false;

  const kiln_kexec* exec;

  NmsProblem(const kiln_kcall* call, bool center)
      : boxes(call->inputs[0]), scores(call->inputs[1]), center_point_box(center), exec(call->exec) {
    auto given = [&](int32_t i) { return i < call->num_inputs && call->inputs[i].data != nullptr; };
    if (given(2)) max_per_class = LoadAsInt64(call->inputs[2].data, call->inputs[2].dtype, 0);
    if (given(3)) iou_threshold = LoadAsDouble(call->inputs[3].data, call->inputs[3].dtype, 0);
    has_score_threshold = given(4);
    if (has_score_threshold) score_threshold = LoadAsDouble(call->inputs[4].data, call->inputs[4].dtype, 0);
  }

  int32_t Check() {
    if (boxes.rank != 3 || scores.rank != 3 || boxes.dims[2] != 4 || scores.dims[0] != boxes.dims[0] ||
        scores.dims[2] != boxes.dims[1])
      return KILN_KERR_SHAPE;
    batches = boxes.dims[0], classes = scores.dims[1], count = boxes.dims[1];
    return count > kMaxNmsBoxes ? KILN_KERR_UNSUPPORTED : KILN_KERR_OK;
  }

  // Box i of batch b as [ymin, xmin, ymax, xmax].
  void Corners(int64_t b, int64_t i, double* c) const {
    double v[4];
    for (int k = 0; k < 4; ++k) v[k] = LoadAsDouble(boxes.data, boxes.dtype, (b * count + i) * 4 + k);
    if (center_point_box) {  // [x_center, y_center, width, height]
      c[0] = v[1] - v[3] / 2, c[1] = v[0] - v[2] / 2, c[2] = v[1] + v[3] / 2, c[3] = v[0] + v[2] / 2;
    } else {  // [y1, x1, y2, x2], either corner first
      c[0] = v[0] < v[2] ? v[0] : v[2], c[2] = v[0] < v[2] ? v[2] : v[0];
      c[1] = v[1] < v[3] ? v[1] : v[3], c[3] = v[1] < v[3] ? v[3] : v[1];
    }
  }

  bool Overlaps(int64_t b, int64_t i, int64_t j) const {
    double p[4], q[4];
    Corners(b, i, p);
    Corners(b, j, q);
    const double area_p = (p[2] - p[0]) * (p[3] - p[1]), area_q = (q[2] - q[0]) * (q[3] - q[1]);
    if (area_p <= 0 || area_q <= 0) return false;
    const double h = (p[2] < q[2] ? p[2] : q[2]) - (p[0] > q[0] ? p[0] : q[0]);
    const double w = (p[3] < q[3] ? p[3] : q[3]) - (p[1] > q[1] ? p[1] : q[1]);
    if (h <= 0 || w <= 0) return false;
    const double inter = h * w;
    return inter / (area_p + area_q - inter) > iou_threshold;
  }

  // Whether box i comes before box j: higher score first, then lower index (the order the
  // boxes are considered in, so the selection is the same whichever way it is found).
  bool Before(int64_t base, int64_t i, int64_t j) const {
    const double si = LoadAsDouble(scores.data, scores.dtype, base + i);
    const double sj = LoadAsDouble(scores.data, scores.dtype, base + j);
    return si > sj || (si == sj && i < j);
  }

  // Heap sort of a[0, n) by `before` (a strict order): in place, O(n log n), no library.
  template <typename Before>
  static void HeapSort(int64_t* a, int64_t n, Before before) {
    auto sift = [&](int64_t root, int64_t end) {
      for (int64_t child = 2 * root + 1; child < end; root = child, child = 2 * root + 1) {
        if (child + 1 < end && before(a[child], a[child + 1])) ++child;
        if (!before(a[root], a[child])) return;
        const int64_t t = a[root];
        a[root] = a[child], a[child] = t;
      }
    };
    for (int64_t i = n / 2 - 1; i >= 0; --i) sift(i, n);
    for (int64_t end = n - 1; end > 0; --end) {
      const int64_t t = a[0];
      a[0] = a[end], a[end] = t;
      sift(0, end);
    }
  }

  // Whether the box with corners and area p overlaps any of boxes [begin, end) of the
  // columns (col[0] the ymins, ... col[4] the areas), only those whose flag is set when
  // kFlagged: blocks of 64 compared without a branch, so the loop runs in vector lanes.
  template <bool kFlagged>
  bool OverlapsAny(const double* p, double* const* col, const double* flags, int64_t begin, int64_t end) const {
    if (p[4] <= 0) return false;
    const double *y0 = col[0], *x0 = col[1], *y1 = col[2], *x1 = col[3], *area = col[4];
    for (int64_t start = begin; start < end; start += 64) {
      const int64_t stop = end - start < 64 ? end : start + 64;
      int hit = 0;
      for (int64_t j = start; j < stop; ++j) {
        const double h = (p[2] < y1[j] ? p[2] : y1[j]) - (p[0] > y0[j] ? p[0] : y0[j]);
        const double w = (p[3] < x1[j] ? p[3] : x1[j]) - (p[1] > x0[j] ? p[1] : x0[j]);
        const double inter = h * w;
        const bool live = !kFlagged || flags[j] != 0;
        hit |=
            static_cast<int>(live && h > 0 && w > 0 && area[j] > 0 && inter / (p[4] + area[j] - inter) > iou_threshold);
      }
      if (hit != 0) return true;
    }
    return false;
  }

  // The first of the n ascending values not below v.
  static int64_t LowerBound(const double* values, int64_t n, double v) {
    int64_t lo = 0;
    while (n > 0) {
      const int64_t half = n / 2;
      if (values[lo + half] < v) {
        lo += half + 1, n -= half + 1;
      } else {
        n = half;
      }
    }
    return lo;
  }

  // The working memory of SelectSorted, in one buffer (count boxes): per box its corners
  // and area; the kept boxes' in columns, in the order kept; every box's in columns in
  // ymin order, with a kept flag; the score order, the ymin order and each box's place in it.
  struct Workspace {
    double* corners;
    double* kept[5];
    double* by_y[5];
    double* flags;
    int64_t *order, *y_order, *place;
    static int64_t Bytes(int64_t count) {
      return count * static_cast<int64_t>(16 * sizeof(double) + 3 * sizeof(int64_t));
    }
    Workspace(void* buffer, int64_t count) {
      corners = static_cast<double*>(buffer);
      for (int k = 0; k < 5; ++k) kept[k] = corners + (5 + k) * count, by_y[k] = corners + (10 + k) * count;
      flags = corners + 15 * count;
      order = reinterpret_cast<int64_t*>(corners + 16 * count);
      y_order = order + count, place = y_order + count;
    }
  };

  // Batch b's boxes in ymin order (w.by_y, w.place); the tallest box's height, or -1 when a
  // ymin or ymax is NaN (no order to search then).
  double OrderByYmin(int64_t b, Workspace& w) const {
    double tallest = 0;
    for (int64_t i = 0; i < count; ++i) {
      double* p = w.corners + 5 * i;
      Corners(b, i, p);
      p[4] = (p[2] - p[0]) * (p[3] - p[1]);
      if (p[0] != p[0] || p[2] != p[2]) tallest = -1;
      if (tallest >= 0 && p[2] - p[0] > tallest) tallest = p[2] - p[0];
      w.y_order[i] = i;
    }
    if (tallest < 0) return -1;
    const double* corners = w.corners;
    HeapSort(w.y_order, count, [corners](int64_t i, int64_t j) {
      return corners[5 * i] < corners[5 * j] || (corners[5 * i] == corners[5 * j] && i < j);
    });
    for (int64_t k = 0; k < count; ++k) {
      const double* p = w.corners + 5 * w.y_order[k];
      for (int f = 0; f < 5; ++f) w.by_y[f][k] = p[f];
      w.place[w.y_order[k]] = k;
    }
    return tallest;
  }

  // With buffers from the exec hooks: the candidates sorted once, each checked against the
  // boxes kept so far only; of those, only the ones whose ymin lies within the tallest box's
  // height above it, when fewer (the boxes in ymin order, found by bisection: a detector's
  // classes, offset apart, never meet). false when no buffer could be had (Select then
  // falls back).
  template <typename Keep>
  bool SelectSorted(Keep keep) const {
    if (exec == nullptr || exec->alloc == nullptr || exec->release == nullptr || count == 0) return false;
    void* buffer = exec->alloc(exec->arena, Workspace::Bytes(count));
    if (buffer == nullptr) return false;
    Workspace w(buffer, count);
    for (int64_t b = 0; b < batches; ++b) {
      const double tallest = OrderByYmin(b, w);
      for (int64_t c = 0; c < classes; ++c) {
        const int64_t base = (b * classes + c) * count;
        int64_t n = 0;
        for (int64_t i = 0; i < count; ++i) {
          const double s = LoadAsDouble(scores.data, scores.dtype, base + i);
          if (!has_score_threshold || s > score_threshold) w.order[n++] = i;
          w.flags[i] = 0;
        }
        HeapSort(w.order, n, [&](int64_t i, int64_t j) { return Before(base, i, j); });
        int64_t num_kept = 0;
        for (int64_t k = 0; k < n && num_kept < max_per_class; ++k) {
          const double* p = w.corners + 5 * w.order[k];
          const int64_t lo = tallest < 0 ? 0 : LowerBound(w.by_y[0], count, p[0] - tallest);
          const int64_t hi = tallest < 0 ? count : LowerBound(w.by_y[0], count, p[2]);
          if (hi - lo < num_kept ? OverlapsAny<true>(p, w.by_y, w.flags, lo, hi)
                                 : OverlapsAny<false>(p, w.kept, nullptr, 0, num_kept))
            continue;
          for (int f = 0; f < 5; ++f) w.kept[f][num_kept] = p[f];
          if (tallest >= 0) w.flags[w.place[w.order[k]]] = 1;
          ++num_kept;
          keep(b, c, w.order[k]);
        }
      }
    }
    exec->release(exec->arena, buffer);
    return true;
  }

  // Calls keep(batch, class, box) for each kept box, in output order.
  template <typename Keep>
  void Select(Keep keep) const {
    if (SelectSorted(keep)) return;
    uint64_t kept[kMaxNmsBoxes / 64];
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t c = 0; c < classes; ++c) {
        const int64_t base = (b * classes + c) * count;
        for (int64_t w = 0; w < (count + 63) / 64; ++w) kept[w] = 0;
        double last_score = 0;
        int64_t last = -1, num_kept = 0;
        while (num_kept < max_per_class) {
          int64_t next = -1;
          double next_score = 0;
          for (int64_t i = 0; i < count; ++i) {  // the best box after `last` in score order
            const double s = LoadAsDouble(scores.data, scores.dtype, base + i);
            if (has_score_threshold && !(s > score_threshold)) continue;
            if (last >= 0 && !(s < last_score || (s == last_score && i > last))) continue;
            if (next < 0 || s > next_score) next = i, next_score = s;
          }
          if (next < 0) break;
          last = next, last_score = next_score;
          bool suppressed = false;
          for (int64_t j = 0; j < count && !suppressed; ++j) {
            suppressed = ((kept[j / 64] >> (j % 64)) & 1) != 0 && Overlaps(b, j, next);
          }
          if (suppressed) continue;
          kept[next / 64] |= uint64_t{1} << (next % 64);
          ++num_kept;
          keep(b, c, next);
        }
      }
    }
  }
};

}  // namespace kiln_kernels
