// NonMaxSuppression's greedy selection, shared by its shape function (which counts the
// selected boxes) and its kernel (which writes them): per batch and class, the boxes
// scoring above score_threshold in descending score order (ties: lower index first),
// each kept unless its IoU with a box kept before exceeds iou_threshold, at most
// max_output_boxes_per_class. With the exec hooks' buffers (run-time shapes: the shape
// function and the kernel both have them) the candidates are sorted once and each is
// checked against the kept boxes only: O(n log n + n * kept). Without them (a caller with
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

  // Calls keep(batch, class, box) for each kept box, in output order.
  // Whether box i comes before box j: higher score first, then lower index (the order the
  // boxes are considered in, so the selection is the same whichever way it is found).
  bool Before(int64_t base, int64_t i, int64_t j) const {
    const double si = LoadAsDouble(scores.data, scores.dtype, base + i);
    const double sj = LoadAsDouble(scores.data, scores.dtype, base + j);
    return si > sj || (si == sj && i < j);
  }

  // Heap sort of order[0, n) into consideration order: in place, O(n log n).
  void SortByScore(int64_t base, int64_t* order, int64_t n) const {
    auto sift = [&](int64_t root, int64_t end) {
      for (int64_t child = 2 * root + 1; child < end; root = child, child = 2 * root + 1) {
        if (child + 1 < end && Before(base, order[child], order[child + 1])) ++child;
        if (!Before(base, order[root], order[child])) return;
        const int64_t t = order[root];
        order[root] = order[child], order[child] = t;
      }
    };
    for (int64_t i = n / 2 - 1; i >= 0; --i) sift(i, n);
    for (int64_t end = n - 1; end > 0; --end) {
      const int64_t t = order[0];
      order[0] = order[end], order[end] = t;
      sift(0, end);
    }
  }

  // With buffers from the exec hooks: the candidates sorted once, each checked against the
  // boxes kept so far only. false when no buffer could be had (Select then falls back).
  template <typename Keep>
  bool SelectSorted(Keep keep) const {
    if (exec == nullptr || exec->alloc == nullptr || exec->release == nullptr || count == 0) return false;
    // Per box of the batch: its corners and area (5 doubles), then the order and kept lists.
    void* buffer = exec->alloc(exec->arena, count * static_cast<int64_t>(5 * sizeof(double) + 2 * sizeof(int64_t)));
    if (buffer == nullptr) return false;
    auto* corners = static_cast<double*>(buffer);
    auto* order = reinterpret_cast<int64_t*>(corners + 5 * count);
    int64_t* kept = order + count;
    auto overlaps = [&](int64_t i, int64_t j) {
      const double *p = corners + 5 * i, *q = corners + 5 * j;
      if (p[4] <= 0 || q[4] <= 0) return false;
      const double h = (p[2] < q[2] ? p[2] : q[2]) - (p[0] > q[0] ? p[0] : q[0]);
      const double w = (p[3] < q[3] ? p[3] : q[3]) - (p[1] > q[1] ? p[1] : q[1]);
      if (h <= 0 || w <= 0) return false;
      const double inter = h * w;
      return inter / (p[4] + q[4] - inter) > iou_threshold;
    };
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t i = 0; i < count; ++i) {
        double* p = corners + 5 * i;
        Corners(b, i, p);
        p[4] = (p[2] - p[0]) * (p[3] - p[1]);
      }
      for (int64_t c = 0; c < classes; ++c) {
        const int64_t base = (b * classes + c) * count;
        int64_t n = 0;
        for (int64_t i = 0; i < count; ++i) {
          const double s = LoadAsDouble(scores.data, scores.dtype, base + i);
          if (!has_score_threshold || s > score_threshold) order[n++] = i;
        }
        SortByScore(base, order, n);
        int64_t num_kept = 0;
        for (int64_t k = 0; k < n && num_kept < max_per_class; ++k) {
          bool suppressed = false;
          for (int64_t j = 0; j < num_kept && !suppressed; ++j) suppressed = overlaps(kept[j], order[k]);
          if (suppressed) continue;
          kept[num_kept++] = order[k];
          keep(b, c, order[k]);
        }
      }
    }
    exec->release(exec->arena, buffer);
    return true;
  }

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
