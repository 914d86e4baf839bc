// Resampling: ONNX Resize (opsets 10-18) and Upsample, in every coordinate mode, nearest,
// linear and cubic, with antialiasing. As the specification's reference does, an output
// element is a sum over input elements weighted by the product of one 1-D filter per axis;
// scales, sizes and roi are read from the inputs and every extent from the dims at run time.
#include "kiln/kernels/resize.h"
#include "kernel_common.h"

using namespace kiln_kernels;

namespace {

// Taps of one axis' filter (the lowering refuses a downscale whose antialiased filter
// would span more).
constexpr int32_t kMaxTaps = KILN_RESIZE_MAX_TAPS;

struct AxisTaps {
  int32_t count;
  int64_t offset[kMaxTaps];  // element offsets into the input (index * stride)
  double weight[kMaxTaps];
};

// One axis of the resampling, read from the call once.
struct AxisSetup {
  int64_t in, out, stride;
  double scale, roi_start, roi_end;
  double filter_scale;  // the filter's argument scale: the scale when antialiasing a downscale, else 1
  int64_t first_tap;    // the filter's taps are i0 + first_tap .. i0 + 1 - first_tap
};

struct Setup {
  int32_t rank;
  AxisSetup axis[kMaxRank];
};

KILN_ALWAYS_INLINE bool Given(const kiln_kcall* call, int32_t i) {
  return call->num_inputs > i && call->inputs[i].data != nullptr && Numel(call->inputs[i]) > 0;
}

// Scales per axis from the scales input, else from sizes (keep_aspect_ratio_policy), else
// from the output's dims; roi from the roi input (default [0, 1]).
KILN_ALWAYS_INLINE int32_t ReadScales(const kiln_kcall* call, const kiln_resize_params& p, Setup* s) {
  const kiln_ktensor& in = call->inputs[0];
  const int64_t n = p.num_axes > 0 ? p.num_axes : in.rank;
  int64_t axes[kMaxRank];
  for (int64_t i = 0; i < n; ++i) {
    axes[i] = p.num_axes > 0 ? p.axes[i] : i;
    if (axes[i] < 0 || axes[i] >= in.rank) return KILN_KERR_INDEX;
  }
  if (Given(call, 2) && Numel(call->inputs[2]) != n) return KILN_KERR_INDEX;
  if (!Given(call, 2) && Given(call, 3) && Numel(call->inputs[3]) != n) return KILN_KERR_INDEX;
  if (Given(call, 1) && Numel(call->inputs[1]) != 2 * n) return KILN_KERR_INDEX;
  double aspect = p.keep_aspect_ratio == KILN_ASPECT_NOT_LARGER ? 1e300 : 0;
  for (int64_t i = 0; i < n; ++i) {
    AxisSetup& a = s->axis[axes[i]];
    if (Given(call, 2)) {
      a.scale = LoadAsDouble(call->inputs[2].data, call->inputs[2].dtype, i);
    } else if (Given(call, 3)) {
      a.scale =
          static_cast<double>(LoadAsInt64(call->inputs[3].data, call->inputs[3].dtype, i)) / static_cast<double>(a.in);
      aspect = p.keep_aspect_ratio == KILN_ASPECT_NOT_LARGER ? fmin(aspect, a.scale) : fmax(aspect, a.scale);
    }
    if (Given(call, 1)) {
      a.roi_start = LoadAsDouble(call->inputs[1].data, call->inputs[1].dtype, i);
      a.roi_end = LoadAsDouble(call->inputs[1].data, call->inputs[1].dtype, n + i);
    }
  }
  if (!Given(call, 2) && Given(call, 3) && p.keep_aspect_ratio != KILN_ASPECT_STRETCH) {
    for (int64_t i = 0; i < n; ++i) s->axis[axes[i]].scale = aspect;
  }
  return KILN_KERR_OK;
}

KILN_ALWAYS_INLINE int32_t ReadSetup(const kiln_kcall* call, const kiln_resize_params& p, Setup* s) {
  const kiln_ktensor& in = call->inputs[0];
  const kiln_ktensor& out = call->outputs[0];
  if (in.rank > kMaxRank || out.rank != in.rank || p.num_axes > in.rank) return KILN_KERR_UNSUPPORTED;
  s->rank = in.rank;
  int64_t stride = 1;
  for (int32_t d = in.rank - 1; d >= 0; --d) {
    AxisSetup& a = s->axis[d];
    a.in = in.dims[d];
    a.out = out.dims[d];
    a.stride = stride;
    stride *= in.dims[d];
    a.scale = a.in > 0 ? static_cast<double>(a.out) / static_cast<double>(a.in) : 1.0;
    a.roi_start = 0;
    a.roi_end = 1;
  }
  if (int32_t status = ReadScales(call, p, s); status != KILN_KERR_OK) return status;
  const double radius = p.mode == KILN_RESIZE_CUBIC ? 2 : 1;
  for (int32_t d = 0; d < in.rank; ++d) {
    AxisSetup& a = s->axis[d];
    if (!(a.scale > 0) || (a.out > 0 && a.in == 0)) return KILN_KERR_INDEX;
    a.filter_scale = p.antialias != 0 && a.scale < 1 ? a.scale : 1.0;
    a.first_tap = static_cast<int64_t>(floor(-radius / a.filter_scale)) + 1;
    if (p.mode != KILN_RESIZE_NEAREST && 2 - 2 * a.first_tap > kMaxTaps) return KILN_KERR_UNSUPPORTED;
  }
  return KILN_KERR_OK;
}

// The input coordinate that output coordinate x maps to (coordinate_transformation_mode).
// As in the specification's reference, align_corners, pytorch_half_pixel and
// tf_crop_and_resize take the resized length as scale * in (the output extent when the
// scale came from sizes).
inline double SourceCoordinate(int64_t coordinates, const AxisSetup& a, int64_t x) {
  const double in = static_cast<double>(a.in), xd = static_cast<double>(x);
  const double resized = a.scale * in;
  switch (coordinates) {
    case KILN_RESIZE_HALF_PIXEL_SYMMETRIC: {
      const double adjustment = static_cast<double>(a.out) / resized;
      return in / 2 * (1 - adjustment) + (xd + 0.5) / a.scale - 0.5;
    }
    case KILN_RESIZE_PYTORCH_HALF_PIXEL: return resized != 1 ? (xd + 0.5) / a.scale - 0.5 : -0.5;
    case KILN_RESIZE_ALIGN_CORNERS: return resized != 1 ? xd * (in - 1) / (resized - 1) : 0.0;
    case KILN_RESIZE_ASYMMETRIC: return xd / a.scale;
    case KILN_RESIZE_TF_HALF_PIXEL_FOR_NN: return (xd + 0.5) / a.scale;
    case KILN_RESIZE_TF_CROP_AND_RESIZE:
      return resized != 1 ? a.roi_start * (in - 1) + xd * (a.roi_end - a.roi_start) * (in - 1) / (resized - 1)
                          : 0.5 * (a.roi_start + a.roi_end) * (in - 1);
    default: return (xd + 0.5) / a.scale - 0.5;  // half_pixel
  }
}

inline int64_t NearestIndex(int64_t nearest, double scale, double x) {
  const double below = floor(x), fraction = x - below;
  if (fraction == 0) return static_cast<int64_t>(below);
  bool up = true;
  switch (nearest) {
    case KILN_NEAREST_ROUND_PREFER_FLOOR: up = fraction > 0.5; break;
    case KILN_NEAREST_ROUND_PREFER_CEIL: up = fraction >= 0.5; break;
    case KILN_NEAREST_FLOOR: up = false; break;
    case KILN_NEAREST_SIMPLE: up = scale < 1; break;
    default: break;  // ceil
  }
  return static_cast<int64_t>(below) + (up ? 1 : 0);
}

// The linear (triangle) or cubic (Keys, coefficient a) filter at distance d.
inline double Filter(int64_t mode, double a, double d) {
  const double x = fabs(d);
  if (mode == KILN_RESIZE_LINEAR) return x < 1 ? 1 - x : 0.0;
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

inline int64_t Clamp(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

// The taps of axis `a` for output coordinate x; false where tf_crop_and_resize maps x
// outside the input (the output is then extrapolation_value).
inline bool TapsAt(const kiln_resize_params& p, const AxisSetup& a, int64_t x, AxisTaps* taps) {
  const double source = SourceCoordinate(p.coordinates, a, x);
  if (p.coordinates == KILN_RESIZE_TF_CROP_AND_RESIZE && (source < 0 || source > static_cast<double>(a.in - 1))) {
    return false;
  }
  if (p.mode == KILN_RESIZE_NEAREST) {
    taps->count = 1;
    taps->offset[0] = Clamp(NearestIndex(p.nearest, a.scale, source), a.in) * a.stride;
    taps->weight[0] = 1.0;
    return true;
  }
  // ratio in (0, 1]: at an integer coordinate the specification takes the pixel on its left
  // as i0, with ratio 1.
  int64_t i0 = static_cast<int64_t>(floor(source));
  double ratio = source - floor(source);
  if (ratio == 0) {
    ratio = 1;
    --i0;
  }
  double sum = 0;
  int32_t count = 0;
  for (int64_t j = a.first_tap; j <= 1 - a.first_tap; ++j) {
    const int64_t index = i0 + j;
    double w = Filter(p.mode, p.cubic_coeff_a, (static_cast<double>(j) - ratio) * a.filter_scale);
    if (p.exclude_outside != 0 && (index < 0 || index >= a.in)) w = 0;
    sum += w;
    if (w == 0) continue;
    taps->offset[count] = Clamp(index, a.in) * a.stride;
    taps->weight[count++] = w;
  }
  taps->count = count;
  for (int32_t t = 0; t < count; ++t) taps->weight[t] /= sum;
  return true;
}

// Sum over every combination of one tap per axis of the product of their weights times the
// input element at the sum of their offsets.
template <typename T>
inline double WeightedSum(const T* in, const AxisTaps* taps, int32_t rank) {
  int32_t tap[kMaxRank] = {0};
  for (int32_t d = 0; d < rank; ++d) {
    if (taps[d].count == 0) return 0.0;
  }
  double total = 0;
  for (;;) {
    double w = 1;
    int64_t offset = 0;
    for (int32_t d = 0; d < rank; ++d) {
      w *= taps[d].weight[tap[d]];
      offset += taps[d].offset[tap[d]];
    }
    total += w * static_cast<double>(in[offset]);
    int32_t d = rank - 1;
    while (d >= 0 && ++tap[d] == taps[d].count) tap[d--] = 0;
    if (d < 0) return total;
  }
}

// A double as T: integers truncated toward zero, as the specification's reference (a cast
// of its float result) and ONNX Runtime have it, and saturated (a cubic filter overshoots).
template <typename T>
inline T FromDouble(double v) {
  if constexpr (kIsFloat<T>) {
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    constexpr double kBits = 8.0 * sizeof(T);
    const double low = std::is_signed_v<T> ? -ldexp(1.0, static_cast<int>(kBits) - 1) : 0.0;
    const double high = std::is_signed_v<T> ? ldexp(1.0, static_cast<int>(kBits) - 1) - 1 : ldexp(1.0, kBits) - 1;
    v = trunc(v);
    return static_cast<T>(v < low ? low : v > high ? high : v);
  }
}

// The outer axes' taps of one output row (all axes but the last) multiplied out: every
// combination of one tap per axis, its offset the sum and its weight the product.
constexpr int32_t kMaxCombinations = 1024;
struct RowTaps {
  int32_t count;
  int64_t offset[kMaxCombinations];
  double weight[kMaxCombinations];
};

enum RowKind { kRowInside, kRowOutside, kRowTooWide };

// Fills `row` for output row `index`; kRowOutside where tf_crop_and_resize maps it outside
// the input, kRowTooWide past kMaxCombinations (the caller then sums element by element).
inline RowKind RowTapsAt(const kiln_resize_params& p, const Setup& s, const int64_t* out_dims, int64_t index,
                         AxisTaps* axis_taps, RowTaps* row) {
  row->count = 1;
  row->offset[0] = 0;
  row->weight[0] = 1;
  for (int32_t d = s.rank - 2; d >= 0; --d) {
    if (!TapsAt(p, s.axis[d], index % out_dims[d], axis_taps)) return kRowOutside;
    index /= out_dims[d];
    const int32_t n = row->count;
    if (n * axis_taps->count > kMaxCombinations) return kRowTooWide;
    // In place, last combination first: entry t * n + c reads entry c, written last (t = 0).
    for (int32_t t = axis_taps->count - 1; t >= 0; --t) {
      for (int32_t c = n - 1; c >= 0; --c) {
        row->offset[t * n + c] = row->offset[c] + axis_taps->offset[t];
        row->weight[t * n + c] = row->weight[c] * axis_taps->weight[t];
      }
    }
    row->count = n * axis_taps->count;
  }
  return kRowInside;
}

// The last axis' taps for a block of output columns [begin, end), shared by every row.
constexpr int32_t kBlockColumns = 512;
constexpr int32_t kBlockTaps = 2048;
struct ColumnBlock {
  int64_t begin, end;
  int32_t first[kBlockColumns];  // the column's first tap; -1 outside the input (extrapolate)
  int32_t count[kBlockColumns];
  int64_t offset[kBlockTaps];
  double weight[kBlockTaps];
};

inline void FillColumns(const kiln_resize_params& p, const AxisSetup& a, int64_t begin, int64_t width,
                        AxisTaps* axis_taps, ColumnBlock* block) {
  block->begin = begin;
  int32_t used = 0;
  int64_t x = begin;
  for (; x < width && x - begin < kBlockColumns; ++x) {
    const int64_t j = x - begin;
    if (!TapsAt(p, a, x, axis_taps)) {
      block->first[j] = -1;
      block->count[j] = 0;
      continue;
    }
    if (used + axis_taps->count > kBlockTaps) break;  // a column has at most kMaxTaps < kBlockTaps
    block->first[j] = used;
    block->count[j] = axis_taps->count;
    for (int32_t t = 0; t < axis_taps->count; ++t) {
      block->offset[used + t] = axis_taps->offset[t];
      block->weight[used + t] = axis_taps->weight[t];
    }
    used += axis_taps->count;
  }
  block->end = x;
}

// One output row's columns of `block`: the row's combinations times each column's taps.
template <typename T>
inline void ResampleRow(const T* in, const RowTaps& row, bool inside, const ColumnBlock& block, T extrapolation,
                        T* line) {
  for (int64_t x = block.begin; x < block.end; ++x) {
    const int64_t j = x - block.begin;
    if (!inside || block.first[j] < 0) {
      line[x] = extrapolation;
      continue;
    }
    const int64_t* offset = block.offset + block.first[j];
    const double* weight = block.weight + block.first[j];
    double sum = 0;
    for (int32_t c = 0; c < row.count; ++c) {
      const T* base = in + row.offset[c];
      double column = 0;
      for (int32_t t = 0; t < block.count[j]; ++t) column += weight[t] * static_cast<double>(base[offset[t]]);
      sum += row.weight[c] * column;
    }
    line[x] = FromDouble<T>(sum);
  }
}

// The f32 fast path for a block whose columns each have one or two taps (linear, nearest)
// and whose rows combine at most two input rows (bilinear over the last two axes; the outer
// axes unscaled): each input row is interpolated along the last axis once, in f32, into a
// cache of two, and an output row is the weighted sum of its (at most two) cached rows.
// DeepLabV3's and LR-ASPP's final 16x bilinear upsample reuses each interpolated row for
// about 16 output rows; element by element in double it took a fifth of the model's time.
struct TwoTapColumns {
  bool usable = false;
  int64_t offset[2][kBlockColumns];
  float weight[2][kBlockColumns];
};

inline void FillTwoTapColumns(const ColumnBlock& block, TwoTapColumns* two) {
  two->usable = false;
  for (int64_t x = block.begin; x < block.end; ++x) {
    const int64_t j = x - block.begin;
    if (block.first[j] < 0 || block.count[j] < 1 || block.count[j] > 2) return;
    const int32_t f = block.first[j], last = block.count[j] - 1;
    two->offset[0][j] = block.offset[f];
    two->weight[0][j] = static_cast<float>(block.weight[f]);
    two->offset[1][j] = block.offset[f + last];
    two->weight[1][j] = last > 0 ? static_cast<float>(block.weight[f + last]) : 0.f;
  }
  two->usable = true;
}

struct InterpolatedRows {
  int64_t key[2] = {-1, -1};  // the input offset each cached row was interpolated from
  int32_t next = 0;           // the slot to replace
  float row[2][kBlockColumns];

  const float* Get(const float* in, int64_t at, const TwoTapColumns& two, int64_t count) {
    for (int s = 0; s < 2; ++s) {
      if (key[s] == at) return row[s];
    }
    const int s = next;
    next ^= 1;
    key[s] = at;
    const float* base = in + at;
    for (int64_t j = 0; j < count; ++j) {
      // A one-tap column's second weight is 0: that term is left out, not 0 * x (NaN for inf).
      const float second = two.weight[1][j] != 0.f ? two.weight[1][j] * base[two.offset[1][j]] : 0.f;
      row[s][j] = two.weight[0][j] * base[two.offset[0][j]] + second;
    }
    return row[s];
  }
};

inline void ResampleRowTwoTap(const float* in, const RowTaps& row, const ColumnBlock& block, const TwoTapColumns& two,
                              InterpolatedRows* cache, float* line) {
  const int64_t count = block.end - block.begin;
  float* out = line + block.begin;
  const float* a = cache->Get(in, row.offset[0], two, count);
  const float wa = static_cast<float>(row.weight[0]);
  if (row.count == 1) {
    for (int64_t j = 0; j < count; ++j) out[j] = wa * a[j];
    return;
  }
  const float* b = cache->Get(in, row.offset[1], two, count);
  const float wb = static_cast<float>(row.weight[1]);
  for (int64_t j = 0; j < count; ++j) out[j] = wa * a[j] + wb * b[j];
}

struct Resize {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_resize_params& params) {
    Setup setup;
    if (int32_t status = ReadSetup(call, params, &setup); status != KILN_KERR_OK) return status;
    const kiln_ktensor& out = call->outputs[0];
    const int64_t total = Numel(out);
    if (total == 0) return KILN_KERR_OK;
    const T* pi = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    if (setup.rank == 0) {
      po[0] = pi[0];
      return KILN_KERR_OK;
    }
    const int32_t last = setup.rank - 1;
    const int64_t width = out.dims[last];
    const T extrapolation = FromDouble<T>(params.extrapolation_value);
    // The two-tap row cache (below) holds where only the last two axes resample: every outer
    // axis the same size in and out (so the identity, but for crop-and-resize's roi).
    bool two_axes = params.coordinates != KILN_RESIZE_TF_CROP_AND_RESIZE;
    for (int32_t d = 0; d + 2 < setup.rank; ++d) two_axes &= call->inputs[0].dims[d] == out.dims[d];
    // One task per range of output rows; in it, the last axis' taps once per block of
    // columns and the outer axes' once per row and block.
    auto rows = [=](int64_t begin, int64_t end) {
      ColumnBlock columns;
      RowTaps row;
      AxisTaps taps[kMaxRank];
      [[maybe_unused]] TwoTapColumns two;
      [[maybe_unused]] InterpolatedRows cache;
      for (int64_t x0 = 0; x0 < width; x0 = columns.end) {
        FillColumns(params, setup.axis[last], x0, width, &taps[last], &columns);
        if constexpr (std::is_same_v<T, float>) {
          FillTwoTapColumns(columns, &two);
          cache.key[0] = cache.key[1] = -1;
        }
        for (int64_t r = begin; r < end; ++r) {
          T* line = po + r * width;
          const RowKind kind = RowTapsAt(params, setup, out.dims, r, &taps[0], &row);
          if constexpr (std::is_same_v<T, float>) {
            if (two_axes && kind == kRowInside && two.usable && row.count <= 2) {
              ResampleRowTwoTap(pi, row, columns, two, &cache, line);
              continue;
            }
          }
          if (kind != kRowTooWide) {
            ResampleRow(pi, row, kind == kRowInside, columns, extrapolation, line);
            continue;
          }
          int64_t rest = r;  // element by element: every axis' taps, summed over all combinations
          for (int32_t d = last - 1; d >= 0; --d) {
            TapsAt(params, setup.axis[d], rest % out.dims[d], &taps[d]);
            rest /= out.dims[d];
          }
          for (int64_t x = columns.begin; x < columns.end; ++x) {
            const bool inside = TapsAt(params, setup.axis[last], x, &taps[last]);
            line[x] = inside ? FromDouble<T>(WeightedSum(pi, taps, setup.rank)) : extrapolation;
          }
        }
      }
    };
    ParallelFor(call, total / width, 1, rows);
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_NUMERIC_KERNEL(resize, Resize, outputs[0].dtype)
