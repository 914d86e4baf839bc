// Data-movement kernels: copies, strided views (Transpose/Slice/Expand/DepthToSpace),
// Concat, Gather/Scatter families, Tile, Pad, Trilu, and generators (Range, fill, EyeLike,
// OneHot, CumSum).
#include "kiln/kernels/movement.h"
#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"

using namespace kiln_kernels;

namespace {

// Movement kernels only need the bytes: one instantiation per element size, the element
// carried as the unsigned integer of that size.
#define KILN_BYTES_KERNEL(name, Impl, dtype_expr)       \
  KILN_TYPED_ENTRY(name, Impl, b1, uint8_t)             \
  KILN_TYPED_ENTRY(name, Impl, b2, uint16_t)            \
  KILN_TYPED_ENTRY(name, Impl, b4, uint32_t)            \
  KILN_TYPED_ENTRY(name, Impl, b8, uint64_t)            \
  KILN_KERNEL(name) {                                   \
    using Bound = WithParams<kernel::name, Impl>;       \
    KILN_DISPATCH_BYTES(call->dtype_expr, Bound, call); \
  }

#define KILN_DISPATCH_BYTES(dtype, F, ...)                 \
  switch (ElementSize(dtype)) {                            \
    case 1: return F::template Run<uint8_t>(__VA_ARGS__);  \
    case 2: return F::template Run<uint16_t>(__VA_ARGS__); \
    case 4: return F::template Run<uint32_t>(__VA_ARGS__); \
    case 8: return F::template Run<uint64_t>(__VA_ARGS__); \
    default: return KILN_KERR_DTYPE;                       \
  }

inline int64_t IndexAt(const kiln_ktensor& t, int64_t i) { return LoadAsInt64(t.data, t.dtype, i); }

struct StridedCopy {
  // Parameters: kiln_strided_copy_params (kiln/kernels/movement.h).
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_strided_copy_params& params) {
    const int32_t r = static_cast<int32_t>(params.rank);
    const int64_t* dims = params.dims;
    const int64_t* strides = params.strides;
    const T* in = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    int64_t n = 1;
    for (int32_t i = 0; i < r; ++i) n *= dims[i];
    if (n == 0) return KILN_KERR_OK;
    const int64_t inner = r > 0 ? dims[r - 1] : 1;
    const int64_t inner_stride = r > 0 ? strides[r - 1] : 0;
    if (inner_stride > 1 && inner >= 4) {
      for (int32_t q = r - 2; q >= 0; --q) {
        if (strides[q] == 1 && dims[q] >= 4) return Tiled<T>(call, params, q);
      }
    }
    // Output rows (the last dim) in parallel, each job walking from its first row's
    // offset; contiguous rows as one memcpy (Swin-T's qkv permute at batch 8, 7.2 M floats
    // in rows of 32, took 18 ms serially element by element).
    auto body = [=](int64_t begin, int64_t end) {
      int64_t offsets[1] = {params.offset};
      const int64_t* walk_strides[1] = {strides};
      IndexWalker walker(dims, r > 0 ? r - 1 : 0);
      for (int64_t d = r - 2, rest = begin; d >= 0; --d) {
        walker.index[d] = rest % dims[d];
        rest /= dims[d];
        offsets[0] += walker.index[d] * strides[d];
      }
      for (int64_t row = begin; row < end; ++row) {
        const T* src = in + offsets[0];
        T* dst = po + row * inner;
        if (inner_stride == 1) {
          memcpy(dst, src, sizeof(T) * inner);
        } else {
          for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * inner_stride];
        }
        walker.Next(offsets, walk_strides);
      }
    };
    ParallelFor(call, n / inner, inner < 4096 ? 4096 / inner : 1, body);
    return KILN_KERR_OK;
  }

  // A transposing copy: the output's last dim reads the input `strides[r-1]` apart and its
  // dim q reads it contiguously (NCHW <-> NHWC, a matrix's transpose). Copied in tiles of
  // kTile x kTile (q, last), so each tile's input lines stay in cache while the tile's
  // columns are written; tiles in parallel. Element by element, ConvNeXt's [1,96,40,40] ->
  // [1,40,40,96] read a new cache line for every element.
  template <typename T>
  static int32_t Tiled(const kiln_kcall* call, const kiln_strided_copy_params& params, int32_t q) {
    constexpr int64_t kTile = 32;
    const int32_t r = static_cast<int32_t>(params.rank);
    const int64_t* dims = params.dims;
    const int64_t* strides = params.strides;
    const T* in = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    int64_t out_strides[kMaxRank];
    out_strides[r - 1] = 1;
    for (int32_t d = r - 2; d >= 0; --d) out_strides[d] = out_strides[d + 1] * dims[d + 1];
    const int64_t tiles_q = (dims[q] + kTile - 1) / kTile, tiles_j = (dims[r - 1] + kTile - 1) / kTile;
    int64_t outer = 1;
    for (int32_t d = 0; d < r - 1; ++d) outer *= d == q ? 1 : dims[d];
    const int64_t jstride = strides[r - 1], qstride = out_strides[q];
    auto body = [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        int64_t rest = job;
        const int64_t bj = rest % tiles_j;
        rest /= tiles_j;
        const int64_t bq = rest % tiles_q;
        rest /= tiles_q;
        int64_t src = params.offset, dst = 0;
        for (int32_t d = r - 2; d >= 0; --d) {
          if (d == q) continue;
          const int64_t i = rest % dims[d];
          rest /= dims[d];
          src += i * strides[d];
          dst += i * out_strides[d];
        }
        const int64_t a0 = bq * kTile, a1 = a0 + kTile < dims[q] ? a0 + kTile : dims[q];
        const int64_t j0 = bj * kTile, j1 = j0 + kTile < dims[r - 1] ? j0 + kTile : dims[r - 1];
        int64_t a = a0;
        if constexpr (sizeof(T) == 4 && kFastKernels) {
          // Four-byte elements in 8 x 8 blocks transposed in registers: eight contiguous
          // loads along q, eight contiguous stores along the last dim (element by element,
          // ViT-S/16's [197, 48, 64] -> [48, 64, 197] at batch 8 took 2 ns per element).
          for (; a + 8 <= a1; a += 8) {
            int64_t j = j0;
            for (; j + 8 <= j1; j += 8) {
              v8f rows[8];
              for (int i = 0; i < 8; ++i) KILN_LOAD8(rows[i], in + src + a + (j + i) * jstride);
              gemm::Transpose8x8(rows);
              for (int i = 0; i < 8; ++i) KILN_STORE8(po + dst + (a + i) * qstride + j, rows[i]);
            }
            for (int64_t i = 0; i < 8; ++i) {
              for (int64_t jj = j; jj < j1; ++jj) po[dst + (a + i) * qstride + jj] = in[src + a + i + jj * jstride];
            }
          }
        }
        for (; a < a1; ++a) {
          const T* s = in + src + a;
          T* o = po + dst + a * qstride;
          for (int64_t j = j0; j < j1; ++j) o[j] = s[j * jstride];
        }
      }
    };
    ParallelFor(call, outer * tiles_q * tiles_j, 4, body);
    return KILN_KERR_OK;
  }
};

// Concat (kConcat) and Split: the whole tensor (Concat's output, Split's input) as
// [outer, sum of the parts' dims[axis] * inner] and each part k (Concat's inputs, Split's
// outputs) as [outer, its dims[axis] * inner], its columns following part k - 1's. Jobs:
// pieces of at most kPiece elements of each part's rows, copied over the pool (SqueezeNet's
// channel concats of 2 x 64 x 55 x 55 floats took 0.05 ms on one thread and 0.14 ms on one
// of two, reading what the other core had just written).
template <bool kConcat>
struct CopyParts {
  static constexpr int64_t kPiece = 16384;
  // Row o's elements j0.. j0 + n - 1 of part k (pp), `rows` rows from o on; column: part
  // k's first column in the whole.
  template <typename T>
  static void CopyRows(T* pw, int64_t whole_row, int64_t column, T* pp, int64_t row, int64_t o, int64_t j0, int64_t n,
                       int64_t rows) {
    T* in_whole = pw + o * whole_row + column + j0;
    T* in_part = pp + o * row + j0;
    T* dst = kConcat ? in_whole : in_part;
    const T* src = kConcat ? in_part : in_whole;
    const int64_t dst_row = kConcat ? whole_row : row, src_row = kConcat ? row : whole_row;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) dst[r * dst_row + j] = src[r * src_row + j];
    }
  }
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const int64_t axis = params.axis;
    const kiln_ktensor* parts = kConcat ? call->inputs : call->outputs;
    const int32_t num_parts = kConcat ? call->num_inputs : call->num_outputs;
    const kiln_ktensor& whole = kConcat ? call->outputs[0] : call->inputs[0];
    const AxisExtents e = SplitAtAxis(whole, axis);
    const int64_t outer = e.outer, inner = e.inner, whole_row = e.len * inner;
    T* pw = static_cast<T*>(whole.data);
    int64_t pieces = 0, shortest = whole_row;
    for (int32_t k = 0; k < num_parts; ++k) {
      const int64_t row = parts[k].dims[axis] * inner;
      pieces += outer * ((row + kPiece - 1) / kPiece);
      shortest = row < shortest ? row : shortest;
    }
    if (outer > 1 && shortest >= kPiece / 4) {
      // Long rows (a channel concat's images): pieces row-major, so that the threads split
      // the rows (images) as the ops before and after do, and each copies what it wrote
      // itself (SqueezeNet-1.1 at batch 8 on the VM's two cores: reading the other core's
      // writes, each Concat and the MaxPool after it ran slower on two threads than on one).
      auto by_row = [&](int64_t begin, int64_t end) {
        const int64_t per_outer = pieces / outer;
        for (int64_t piece = begin; piece < end; ++piece) {
          const int64_t o = piece / per_outer;
          int64_t rest = piece % per_outer, column = 0;
          for (int32_t k = 0; k < num_parts; ++k) {
            const int64_t row = parts[k].dims[axis] * inner, per_row = (row + kPiece - 1) / kPiece;
            if (rest < per_row) {
              const int64_t j0 = rest * kPiece, n = row - j0 < kPiece ? row - j0 : kPiece;
              CopyRows(pw, whole_row, column, static_cast<T*>(parts[k].data), row, o, j0, n, 1);
              break;
            }
            rest -= per_row;
            column += row;
          }
        }
      };
      ParallelFor(call, pieces, 1, by_row);
      return KILN_KERR_OK;
    }
    auto body = [&](int64_t begin, int64_t end) {
      int64_t first = 0, column = 0;  // pieces before part k, its first column in the whole
      for (int32_t k = 0; k < num_parts && first < end; ++k) {
        const int64_t row = parts[k].dims[axis] * inner, per_row = (row + kPiece - 1) / kPiece;
        T* pp = static_cast<T*>(parts[k].data);
        // The range's pieces of part k, [p0, p1): piece p is elements j0.. of row p / per_row.
        const int64_t p0 = begin > first ? begin - first : 0;
        const int64_t p1 = end - first < outer * per_row ? end - first : outer * per_row;
        for (int64_t piece = p0; piece < p1;) {
          const int64_t o = piece / per_row, j0 = piece % per_row * kPiece;
          // Rows of one piece each (at most kPiece elements, as in most parts) run as one loop
          // nest: a piece at a time, Split's [200000, 4] into 4 x [200000, 1] ran 2.8x slower.
          const int64_t rows = per_row == 1 ? p1 - piece : 1, n = row - j0 < kPiece ? row - j0 : kPiece;
          CopyRows(pw, whole_row, column, pp, row, o, j0, n, rows);
          piece += rows;
        }
        first += outer * per_row;
        column += row;
      }
    };
    ParallelFor(call, pieces, 1, body);
    return KILN_KERR_OK;
  }
};

// An index along a dim of `extent`, negative ones counting from the end; -1 when out of
// range. Every Gather and Scatter kernel decodes its indices so.
inline int64_t ResolveIndex(int64_t idx, int64_t extent) {
  if (idx < 0) idx += extent;
  return idx < 0 || idx >= extent ? -1 : idx;
}

// GatherElements' and ScatterElements' walk: for element i of indices (input 1), f(i,
// offset) with the offset in data (input 0, row-major) of the element it names along `axis`.
template <typename F>
int32_t ForEachElementIndex(const kiln_kcall* call, int64_t axis, F f) {
  const kiln_ktensor& data = call->inputs[0];
  const kiln_ktensor& indices = call->inputs[1];
  int64_t data_strides[kMaxRank], fixed[kMaxRank];
  ContiguousStrides(data.dims, data.rank, data_strides);
  for (int32_t d = 0; d < indices.rank; ++d) fixed[d] = d == axis ? 0 : data_strides[d];
  IndexWalker walker(indices.dims, indices.rank);
  int64_t offsets[1] = {0};
  const int64_t* strides[1] = {fixed};
  const int64_t n = Numel(indices);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = ResolveIndex(IndexAt(indices, i), data.dims[axis]);
    if (idx < 0) return KILN_KERR_INDEX;
    f(i, offsets[0] + idx * data_strides[axis]);
    walker.Next(offsets, strides);
  }
  return KILN_KERR_OK;
}

// GatherND's and ScatterND's indices: `count` tuples of `depth` entries (indices' last
// dim) over data's dims first_dim, first_dim + 1, ..., each naming a slice of `slice`
// elements (the dims after those).
struct IndexTuples {
  const kiln_ktensor& data;
  const kiln_ktensor& indices;
  int64_t first_dim, depth, count, slice = 1;
  int64_t data_strides[kMaxRank];

  KILN_ALWAYS_INLINE IndexTuples(const kiln_ktensor& d, const kiln_ktensor& i, int64_t first)
      : data(d), indices(i), first_dim(first), depth(i.dims[i.rank - 1]), count(Numel(i) / depth) {
    ContiguousStrides(d.dims, d.rank, data_strides);
    for (int32_t k = static_cast<int32_t>(first_dim + depth); k < d.rank; ++k) slice *= d.dims[k];
  }

  // The offset in data of tuple t, or -1 when an entry is out of range.
  int64_t Offset(int64_t t) const {
    int64_t offset = 0;
    for (int64_t k = 0; k < depth; ++k) {
      const int64_t idx = ResolveIndex(IndexAt(indices, t * depth + k), data.dims[first_dim + k]);
      if (idx < 0) return -1;
      offset += idx * data_strides[first_dim + k];
    }
    return offset;
  }
};

struct Gather {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const auto [outer, axis_len, inner] = SplitAtAxis(call->inputs[0], params.axis);
    const kiln_ktensor& indices = call->inputs[1];
    const int64_t num_indices = Numel(indices);
    const T* pd = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < num_indices; ++k) {
        const int64_t idx = ResolveIndex(IndexAt(indices, k), axis_len);
        if (idx < 0) return KILN_KERR_INDEX;
        const T* src = pd + (o * axis_len + idx) * inner;
        T* dst = po + (o * num_indices + k) * inner;
        for (int64_t j = 0; j < inner; ++j) dst[j] = src[j];
      }
    }
    return KILN_KERR_OK;
  }
};

struct GatherElements {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const T* pd = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    return ForEachElementIndex(call, params.axis, [&](int64_t i, int64_t offset) { po[i] = pd[offset]; });
  }
};

struct GatherND {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const int64_t batch_dims = params.batch_dims;
    const IndexTuples tuples(call->inputs[0], call->inputs[1], batch_dims);
    int64_t batch = 1;
    for (int64_t i = 0; i < batch_dims; ++i) batch *= tuples.data.dims[i];
    const int64_t batch_stride = batch_dims > 0 ? tuples.data_strides[batch_dims - 1] : 0;
    const int64_t tuples_per_batch = tuples.count / batch, slice = tuples.slice;
    const T* pd = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    for (int64_t t = 0; t < tuples.count; ++t) {
      const int64_t offset = tuples.Offset(t);
      if (offset < 0) return KILN_KERR_INDEX;
      const T* src = pd + (t / tuples_per_batch) * batch_stride + offset;
      for (int64_t j = 0; j < slice; ++j) po[t * slice + j] = src[j];
    }
    return KILN_KERR_OK;
  }
};

template <typename T>
inline T Reduce(int64_t reduction, T old, T update) {
  switch (reduction) {
    case 1: return static_cast<T>(old + update);
    case 2: return static_cast<T>(old * update);
    case 3: return old > update ? old : update;
    case 4: return old < update ? old : update;
    default: return update;
  }
}

struct ScatterElements {
  // Parameters: kiln_movement_params' axis and reduction.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const int64_t reduction = params.reduction;
    T* po = OutputData<T>(call);
    const T* pu = InputData<T>(call, 2);
    memcpy(po, call->inputs[0].data, Numel(call->inputs[0]) * sizeof(T));
    return ForEachElementIndex(
        call, params.axis, [&](int64_t i, int64_t offset) { po[offset] = Reduce<T>(reduction, po[offset], pu[i]); });
  }
};

struct ScatterND {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const int64_t reduction = params.reduction;
    const IndexTuples tuples(call->inputs[0], call->inputs[1], 0);
    const int64_t slice = tuples.slice;
    T* po = OutputData<T>(call);
    const T* pu = InputData<T>(call, 2);
    memcpy(po, tuples.data.data, Numel(tuples.data) * sizeof(T));
    for (int64_t t = 0; t < tuples.count; ++t) {
      const int64_t offset = tuples.Offset(t);
      if (offset < 0) return KILN_KERR_INDEX;
      for (int64_t j = 0; j < slice; ++j) po[offset + j] = Reduce<T>(reduction, po[offset + j], pu[t * slice + j]);
    }
    return KILN_KERR_OK;
  }
};

// Tile's and Pad's walk over output 0's multi-index (the last dim fastest): output element
// i reads element src of input 0 when source(index, in_strides, &src) is true, else takes
// `fill`.
template <typename T, typename Source>
int32_t MapOutputIndex(const kiln_kcall* call, T fill, Source source) {
  const kiln_ktensor& in = call->inputs[0];
  const kiln_ktensor& out = call->outputs[0];
  int64_t in_strides[kMaxRank];
  ContiguousStrides(in.dims, in.rank, in_strides);
  const T* pi = static_cast<const T*>(in.data);
  T* po = static_cast<T*>(out.data);
  int64_t index[kMaxRank] = {0};
  const int64_t n = Numel(out);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    po[i] = source(index, in_strides, &src) ? pi[src] : fill;
    for (int32_t d = out.rank - 1; d >= 0; --d) {
      if (++index[d] < out.dims[d]) break;
      index[d] = 0;
    }
  }
  return KILN_KERR_OK;
}

struct Tile {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const kiln_ktensor& in = call->inputs[0];
    return MapOutputIndex<T>(call, T(0), [&](const int64_t* index, const int64_t* in_strides, int64_t* src) {
      for (int32_t d = 0; d < in.rank; ++d) *src += (index[d] % in.dims[d]) * in_strides[d];
      return true;
    });
  }
};

// inputs: X, sequence_lens [batch] (int32 or int64): along the time axis, each batch
// entry's first sequence_lens[b] elements reversed, the rest copied.
struct ReverseSequence {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const kiln_ktensor& lens = call->inputs[1];
    const int64_t time = params.axis, batch = params.batch_axis;
    bool in_range = true;
    int32_t rc = MapOutputIndex<T>(call, T(0), [&](const int64_t* index, const int64_t* in_strides, int64_t* src) {
      const int64_t len = IndexAt(lens, index[batch]);
      in_range &= len >= 0 && len <= call->inputs[0].dims[time];
      for (int32_t d = 0; d < call->inputs[0].rank; ++d) {
        *src += (d == time && index[d] < len ? len - 1 - index[d] : index[d]) * in_strides[d];
      }
      return true;
    });
    return in_range ? rc : KILN_KERR_INDEX;
  }
};

struct Pad {
  // Parameters: kiln_pad_params; the constant value is input 2 when given, else 0.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_pad_params& params) {
    const int64_t mode = params.mode;
    const int64_t* begin = params.pads_begin;
    const kiln_ktensor& in = call->inputs[0];
    T value = 0;
    if (call->num_inputs > 2 && call->inputs[2].data != nullptr) value = InputData<T>(call, 2)[0];
    if (mode == KILN_PAD_CONSTANT && in.rank > 0) return ConstantRows<T>(call, begin, value);
    return MapOutputIndex<T>(call, value, [&](const int64_t* index, const int64_t* in_strides, int64_t* src) {
      for (int32_t d = 0; d < in.rank; ++d) {
        int64_t j = index[d] - begin[d];
        const int64_t len = in.dims[d];
        if (j < 0 || j >= len) {
          if (mode == KILN_PAD_CONSTANT || len == 0) return false;
          if (mode == KILN_PAD_EDGE) {
            j = j < 0 ? 0 : len - 1;
          } else if (mode == KILN_PAD_WRAP) {
            j = ((j % len) + len) % len;
          } else {  // reflect, without repeating the edge
            const int64_t period = len > 1 ? 2 * (len - 1) : 1;
            j = j % period;
            if (j < 0) j += period;
            if (j >= len) j = period - j;
          }
        }
        *src += j * in_strides[d];
      }
      return true;
    });
  }

  // Constant mode a row at a time: each output row (the last dim) is the value, then the
  // input row's overlap copied whole, then the value; a row whose other indices fall in the
  // padding is the value throughout. Pads may be negative (cropping). Rows in parallel.
  template <typename T>
  static int32_t ConstantRows(const kiln_kcall* call, const int64_t* begin, T value) {
    const kiln_ktensor& in = call->inputs[0];
    const kiln_ktensor& out = call->outputs[0];
    const int32_t rank = out.rank, last = rank - 1;
    const int64_t out_w = out.dims[last], b = begin[last];
    const int64_t lo = b > 0 ? b : 0, hi = b + in.dims[last] < out_w ? b + in.dims[last] : out_w;
    if (out_w == 0) return KILN_KERR_OK;
    int64_t in_strides[kMaxRank];
    ContiguousStrides(in.dims, in.rank, in_strides);
    const T* pi = static_cast<const T*>(in.data);
    T* po = static_cast<T*>(out.data);
    auto rows = [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        T* dst = po + r * out_w;
        int64_t src = 0, rest = r;
        bool inside = hi > lo;
        for (int32_t d = last - 1; d >= 0; --d) {
          const int64_t j = rest % out.dims[d] - begin[d];
          rest /= out.dims[d];
          inside &= j >= 0 && j < in.dims[d];
          src += j * in_strides[d];
        }
        if (!inside) {
          for (int64_t j = 0; j < out_w; ++j) dst[j] = value;
          continue;
        }
        for (int64_t j = 0; j < lo; ++j) dst[j] = value;
        memcpy(dst + lo, pi + src + (lo - b), sizeof(T) * (hi - lo));
        for (int64_t j = hi; j < out_w; ++j) dst[j] = value;
      }
    };
    ParallelFor(call, Numel(out) / out_w, 16, rows);
    return KILN_KERR_OK;
  }
};

struct Trilu {
  // Parameters: kiln_movement_params' upper and k; k is input 1 instead when the call has it.
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const bool upper = params.upper != 0;
    const int64_t k = call->num_inputs > 1 ? LoadAsInt64(call->inputs[1].data, call->inputs[1].dtype, 0) : params.k;
    const kiln_ktensor& in = call->inputs[0];
    const int64_t rows = in.dims[in.rank - 2], cols = in.dims[in.rank - 1];
    const int64_t batches = rows * cols == 0 ? 0 : Numel(in) / (rows * cols);
    const T* pi = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t at = (b * rows + i) * cols + j;
          const bool keep = upper ? j - i >= k : j - i <= k;
          po[at] = keep ? pi[at] : T(0);
        }
      }
    }
    return KILN_KERR_OK;
  }
};

struct RangeKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const T start = InputData<T>(call, 0)[0];
    const T delta = InputData<T>(call, 2)[0];
    T* po = OutputData<T>(call);
    const int64_t n = Numel(call->outputs[0]);
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    return KILN_KERR_OK;
  }
};

struct Fill {
  template <typename T>
  static int32_t Run(const kiln_kcall* call) {
    const T value = InputData<T>(call, 0)[0];
    T* po = OutputData<T>(call);
    const int64_t n = Numel(call->outputs[0]);
    for (int64_t i = 0; i < n; ++i) po[i] = value;
    return KILN_KERR_OK;
  }
};

struct EyeLike {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const int64_t k = params.k;
    const int64_t rows = call->outputs[0].dims[0], cols = call->outputs[0].dims[1];
    T* po = OutputData<T>(call);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) po[i * cols + j] = j - i == k ? T(1) : T(0);
    }
    return KILN_KERR_OK;
  }
};

struct OneHot {
  // inputs: indices, depth, values[off, on]; parameters: kiln_movement_params' axis
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const AxisExtents e = SplitAtAxis(call->outputs[0], params.axis);
    const kiln_ktensor& indices = call->inputs[0];
    const T* values = InputData<T>(call, 2);
    T* po = OutputData<T>(call);
    ForEachAxisLine(e, [&](int64_t line, int64_t first) {
      int64_t idx = static_cast<int64_t>(LoadAsDouble(indices.data, indices.dtype, line));
      if (idx < 0) idx += e.len;
      for (int64_t d = 0; d < e.len; ++d) po[first + d * e.inner] = idx == d ? values[1] : values[0];
    });
    return KILN_KERR_OK;
  }
};

struct CumSum {
  // Parameters: kiln_movement_params' axis, exclusive and reverse; the axis is input 1
  // instead when the call has it (KILN_KERR_INDEX out of range).
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_movement_params& params) {
    const bool exclusive = params.exclusive != 0, reverse = params.reverse != 0;
    const int32_t rank = call->inputs[0].rank;
    int64_t axis = params.axis;
    if (call->num_inputs > 1) {
      axis = LoadAsInt64(call->inputs[1].data, call->inputs[1].dtype, 0);
      if (axis < -rank || axis >= rank) return KILN_KERR_INDEX;
      if (axis < 0) axis += rank;
    }
    const AxisExtents e = SplitAtAxis(call->inputs[0], axis);
    const T* pi = InputData<T>(call, 0);
    T* po = OutputData<T>(call);
    ForEachAxisLine(e, [&](int64_t, int64_t first) {
      T sum = 0;
      for (int64_t s = 0; s < e.len; ++s) {
        const int64_t at = first + (reverse ? e.len - 1 - s : s) * e.inner;
        if (exclusive) {
          po[at] = sum;
          sum = static_cast<T>(sum + pi[at]);
        } else {
          sum = static_cast<T>(sum + pi[at]);
          po[at] = sum;
        }
      }
    });
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_KERNEL(copy) {
  const int64_t bytes = Numel(call->outputs[0]) * ElementSize(call->outputs[0].dtype);
  if (call->outputs[0].data != call->inputs[0].data) memmove(call->outputs[0].data, call->inputs[0].data, bytes);
  return KILN_KERR_OK;
}
KILN_BYTES_KERNEL(strided_copy, StridedCopy, outputs[0].dtype)
KILN_BYTES_KERNEL(concat, CopyParts<true>, outputs[0].dtype)
KILN_BYTES_KERNEL(split, CopyParts<false>, inputs[0].dtype)
KILN_BYTES_KERNEL(gather, Gather, outputs[0].dtype)
KILN_BYTES_KERNEL(gather_elements, GatherElements, outputs[0].dtype)
KILN_BYTES_KERNEL(gather_nd, GatherND, outputs[0].dtype)
KILN_NUMERIC_KERNEL(scatter_elements, ScatterElements, outputs[0].dtype)
KILN_NUMERIC_KERNEL(scatter_nd, ScatterND, outputs[0].dtype)
KILN_BYTES_KERNEL(tile, Tile, outputs[0].dtype)
KILN_BYTES_KERNEL(reverse_sequence, ReverseSequence, outputs[0].dtype)
KILN_NUMERIC_KERNEL(pad, Pad, outputs[0].dtype)
KILN_NUMERIC_KERNEL(trilu, Trilu, outputs[0].dtype)
KILN_NUMERIC_KERNEL(range, RangeKernel, outputs[0].dtype)
KILN_BYTES_KERNEL(fill, Fill, outputs[0].dtype)
KILN_NUMERIC_KERNEL(eye_like, EyeLike, outputs[0].dtype)
KILN_NUMERIC_KERNEL(one_hot, OneHot, outputs[0].dtype)
KILN_NUMERIC_KERNEL(cumsum, CumSum, outputs[0].dtype)
