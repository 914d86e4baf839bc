// Shape functions (kiln/kernels/shape.h): each node's output dims from its input dims and,
// for Reshape, Range and ConstantOfShape, from input data. At compile time an unknown dim
// is negative (-1, or -2, -3, ... for a named symbol such as the batch, so that a dim
// passed through unchanged keeps its name) and unknown data is NULL; every rule then
// answers a negative dim where its result depends on one, so type inference and the
// artifact share these rules.
#include "kiln/kernels/shape.h"
#include "axis_slices.h"
#include "kernel_common.h"
#include "kiln/kernels/movement.h"
#include "kiln/kernels/reduce.h"
#include "kiln/kernels/resize.h"
#include "non_max_suppression.h"

namespace {

using Dims = int64_t*;

Dims OutDims(const kiln_kcall* call, int32_t i) { return const_cast<int64_t*>(call->outputs[i].dims); }

// The kernel's parameter struct to complete (the last output's data), or NULL.
void* KernelParams(const kiln_kcall* call) { return call->outputs[call->num_outputs - 1].data; }

int64_t ReadInt(const kiln_ktensor& t, int64_t i) {
  switch (t.dtype) {
    case kiln_kernels::kI32: return static_cast<const int32_t*>(t.data)[i];
    case kiln_kernels::kI64: return static_cast<const int64_t*>(t.data)[i];
    case kiln_kernels::kF32: return static_cast<int64_t>(static_cast<const float*>(t.data)[i]);
    case kiln_kernels::kF64: return static_cast<int64_t>(static_cast<const double*>(t.data)[i]);
    default: return 0;
  }
}

double ReadDouble(const kiln_ktensor& t) {
  switch (t.dtype) {
    case kiln_kernels::kF32: return static_cast<const float*>(t.data)[0];
    case kiln_kernels::kF64: return static_cast<const double*>(t.data)[0];
    case kiln_kernels::kI16: return static_cast<const int16_t*>(t.data)[0];
    case kiln_kernels::kI32: return static_cast<const int32_t*>(t.data)[0];
    case kiln_kernels::kI64: return static_cast<double>(static_cast<const int64_t*>(t.data)[0]);
    default: return 0;
  }
}

int64_t Elements(const kiln_ktensor& t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t.rank; ++i) {
    if (t.dims[i] < 0) return -1;
    n *= t.dims[i];
  }
  return n;
}

// Whether optional input i is given: the 1-D inputs (axes, steps, split, pads) have rank 1.
bool Present(const kiln_kcall* call, int32_t i) { return i < call->num_inputs && call->inputs[i].rank > 0; }

// Whether input i's data is needed and not known (compile time, a computed input).
bool DataUnknown(const kiln_kcall* call, int32_t i) {
  return Present(call, i) && call->inputs[i].data == nullptr && Elements(call->inputs[i]) != 0;
}

// Every output dim unknown: a compile-time answer while deciding data is not known.
int32_t AllUnknown(const kiln_kcall* call) {
  for (int32_t o = 0; o + 1 < call->num_outputs; ++o) {
    for (int32_t i = 0; i < call->outputs[o].rank; ++i) OutDims(call, o)[i] = -1;
  }
  return KILN_KERR_OK;
}

// The axes of unsqueeze, squeeze and reduce: `ints` (normalised, sorted by the rule), or
// with KILN_SHAPE_FROM_INPUT input 1's data, normalised against `rank` and sorted here.
// *count is -1 while that data is unknown; a repeated or out-of-range axis is an error.
int32_t ReadAxes(const kiln_kcall* call, const kiln_shape_params& p, int64_t rank, int64_t* axes, int64_t* count) {
  if (!(p.flags & KILN_SHAPE_FROM_INPUT)) {
    *count = p.num_ints;
    for (int64_t i = 0; i < p.num_ints; ++i) axes[i] = p.ints[i];
    return KILN_KERR_OK;
  }
  *count = Present(call, 1) ? Elements(call->inputs[1]) : 0;
  if (DataUnknown(call, 1) || *count < 0) {
    *count = -1;
    return KILN_KERR_OK;
  }
  if (*count > KILN_MAX_RANK) return KILN_KERR_SHAPE;
  for (int64_t i = 0; i < *count; ++i) {
    int64_t a = ReadInt(call->inputs[1], i);
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) return KILN_KERR_SHAPE;
    int64_t j = i;  // insertion sort: at most KILN_MAX_RANK axes
    for (; j > 0 && axes[j - 1] > a; --j) axes[j] = axes[j - 1];
    if (j > 0 && axes[j - 1] == a) return KILN_KERR_SHAPE;
    axes[j] = a;
  }
  return KILN_KERR_OK;
}

// Row-major strides of `t`'s dims (an unknown dim counted as 1: compile time only).
void StridesOf(const kiln_ktensor& t, int64_t* strides) {
  int64_t step = 1;
  for (int32_t i = t.rank; i-- > 0;) {
    strides[i] = step;
    step *= t.dims[i] < 0 ? 1 : t.dims[i];
  }
}

// Completes a strided copy's parameters (when the caller passed them): output dims `dims`
// reading the input at `offset` plus index times `strides`.
void CompleteStridedCopy(const kiln_kcall* call, int32_t rank, const int64_t* dims, const int64_t* strides,
                         int64_t offset) {
  auto* params = static_cast<kiln_strided_copy_params*>(KernelParams(call));
  if (params == nullptr) return;
  params->rank = rank;
  params->offset = offset;
  for (int32_t i = 0; i < rank; ++i) {
    params->dims[i] = dims[i];
    params->strides[i] = strides[i];
  }
}

// Numpy broadcasting of one more operand into `out` (rank `rank`, right-aligned).
int32_t BroadcastInto(Dims out, int32_t rank, const kiln_ktensor& t) {
  for (int32_t i = 0; i < t.rank; ++i) {
    int64_t& o = out[rank - t.rank + i];
    const int64_t d = t.dims[i];
    if (d == 1 || d == o) continue;
    if (o == 1) {
      o = d;
    } else if (o < 0 && d < 0) {
      o = -1;  // two different unknowns (compile time only): unknown
    } else if (o < 0) {
      o = d;  // the known side wins (were the unknown 1, the result would be d too)
    } else if (d >= 0) {
      return KILN_KERR_SHAPE;
    }
  }
  return KILN_KERR_OK;
}

}  // namespace

// Output 0 has input 0's dims (unary ops, Softmax, Cast, normalisations).
KILN_KERNEL(shape_same) {
  const kiln_ktensor& x = call->inputs[0];
  for (int32_t i = 0; i < x.rank; ++i) OutDims(call, 0)[i] = x.dims[i];
  return KILN_KERR_OK;
}

// Output 0 is the numpy broadcast of every present input (binary ops, Where, Sum, Max...).
KILN_KERNEL(shape_broadcast) {
  const int32_t rank = call->outputs[0].rank;
  Dims out = OutDims(call, 0);
  for (int32_t i = 0; i < rank; ++i) out[i] = 1;
  for (int32_t i = 0; i < call->num_inputs; ++i) {
    if (call->inputs[i].dims == nullptr && call->inputs[i].rank > 0) continue;
    if (int32_t rc = BroadcastInto(out, rank, call->inputs[i]); rc != KILN_KERR_OK) return rc;
  }
  return KILN_KERR_OK;
}

// numpy.matmul: A [.., M, K] x B [.., K, N]; completes kiln_matmul_params.shape.
KILN_KERNEL(shape_matmul) {
  const kiln_ktensor &a = call->inputs[0], &b = call->inputs[1];
  int64_t ad[KILN_MAX_RANK + 1], bd[KILN_MAX_RANK + 1];
  int32_t ar = a.rank, br = b.rank;
  if (ar < 1 || br < 1 || ar > KILN_MAX_RANK || br > KILN_MAX_RANK) return KILN_KERR_SHAPE;
  for (int32_t i = 0; i < ar; ++i) ad[i + (ar == 1)] = a.dims[i];
  for (int32_t i = 0; i < br; ++i) bd[i] = b.dims[i];
  if (ar == 1) ad[0] = 1, ar = 2;
  if (br == 1) bd[1] = 1, br = 2;
  const int64_t K = ad[ar - 1], KB = bd[br - 2];
  if (K >= 0 && KB >= 0 && K != KB) return KILN_KERR_SHAPE;
  const int32_t batch_rank = (ar > br ? ar : br) - 2;
  Dims out = OutDims(call, 0);
  const int32_t out_rank = call->outputs[0].rank;
  // The batch dims, broadcast, then M and N unless an operand was a vector.
  int64_t batch[KILN_MAX_RANK];
  for (int32_t i = 0; i < batch_rank; ++i) batch[i] = 1;
  kiln_ktensor ab{nullptr, ad, ar - 2, 0}, bb{nullptr, bd, br - 2, 0};
  if (BroadcastInto(batch, batch_rank, ab) != KILN_KERR_OK || BroadcastInto(batch, batch_rank, bb) != KILN_KERR_OK)
    return KILN_KERR_SHAPE;
  int32_t o = 0;
  for (int32_t i = 0; i < batch_rank && o < out_rank; ++i) out[o++] = batch[i];
  if (a.rank > 1 && o < out_rank) out[o++] = ad[ar - 2];
  if (b.rank > 1 && o < out_rank) out[o++] = bd[br - 1];
  auto* params = static_cast<kiln_matmul_params*>(KernelParams(call));
  if (params == nullptr) return KILN_KERR_OK;
  kiln_matmul_shape& s = params->shape;
  s.M = ad[ar - 2];
  s.K = K;
  s.N = bd[br - 1];
  if (br == 2 && ar > 2) {
    // A 2-D B applies to every row of A alike: one [(..)*M, K] product (as MatMulShape).
    for (int32_t i = 0; i + 2 < ar; ++i) s.M *= ad[i];
    s.batch_rank = 0;
    return KILN_KERR_OK;
  }
  s.batch_rank = batch_rank;
  for (int32_t i = 0; i < batch_rank; ++i) s.batch_dims[i] = batch[i];
  // Element strides of each operand's batch dims, right-aligned; 0 along a broadcast dim.
  auto strides = [&](const int64_t* d, int32_t rank, int64_t* st, int64_t matrix) {
    const int32_t own = rank - 2;
    for (int32_t i = 0; i < batch_rank; ++i) st[i] = 0;
    int64_t step = matrix;
    for (int32_t i = own; i-- > 0;) {
      st[batch_rank - own + i] = d[i] == 1 ? 0 : step;
      step *= d[i];
    }
  };
  strides(ad, ar, s.a_batch_strides, s.M * s.K);
  strides(bd, br, s.b_batch_strides, s.K * s.N);
  return KILN_KERR_OK;
}

// Gemm: [M, N] from A and B and the transposition flags.
KILN_KERNEL(shape_gemm) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor &a = call->inputs[0], &b = call->inputs[1];
  if (a.rank != 2 || b.rank != 2) return KILN_KERR_SHAPE;
  const bool ta = (p.flags & KILN_SHAPE_TRANS_A) != 0, tb = (p.flags & KILN_SHAPE_TRANS_B) != 0;
  const int64_t K = ta ? a.dims[0] : a.dims[1], KB = tb ? b.dims[1] : b.dims[0];
  if (K >= 0 && KB >= 0 && K != KB) return KILN_KERR_SHAPE;
  OutDims(call, 0)[0] = ta ? a.dims[1] : a.dims[0];
  OutDims(call, 0)[1] = tb ? b.dims[0] : b.dims[1];
  return KILN_KERR_OK;
}

// Conv and pooling: [N, channels, out...] where each spatial extent follows from the
// window (ints: kernel, strides, pads_begin, pads_end, dilations, num_ints each) and
// auto_pad / ceil_mode; SAME pads are completed in the kernel's window.
KILN_KERNEL(shape_window) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  const int64_t r = p.num_ints;
  if (x.rank != r + 2) return KILN_KERR_SHAPE;
  const int64_t *kernel = p.ints, *strides = p.ints + r, *pb = p.ints + 2 * r, *pe = p.ints + 3 * r,
                *dilations = p.ints + 4 * r;
  Dims out = OutDims(call, 0);
  out[0] = x.dims[0];
  out[1] = (p.flags & KILN_SHAPE_CHANNELS_FROM_WEIGHT) ? call->inputs[1].dims[0] : x.dims[1];
  void* params = KernelParams(call);
  auto* window = params ? reinterpret_cast<kiln_window*>(static_cast<char*>(params) + p.window_offset) : nullptr;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t in = x.dims[2 + i], extent = (kernel[i] - 1) * dilations[i] + 1;
    if (in < 0) {
      out[2 + i] = -1;
      continue;
    }
    int64_t begin = pb[i], end = pe[i], o;
    if (p.flags & (KILN_SHAPE_SAME_UPPER | KILN_SHAPE_SAME_LOWER)) {
      o = (in + strides[i] - 1) / strides[i];
      int64_t total = (o - 1) * strides[i] + extent - in;
      if (total < 0) total = 0;
      begin = (p.flags & KILN_SHAPE_SAME_UPPER) ? total / 2 : total - total / 2;
      end = total - begin;
    } else {
      if (p.flags & KILN_SHAPE_VALID) begin = end = 0;
      const int64_t span = in + begin + end - extent;
      if (span < 0) return KILN_KERR_SHAPE;
      o = ((p.flags & KILN_SHAPE_CEIL_MODE) ? (span + strides[i] - 1) / strides[i] : span / strides[i]) + 1;
      if ((p.flags & KILN_SHAPE_CEIL_MODE) && (o - 1) * strides[i] >= in + begin) --o;
    }
    out[2 + i] = o;
    if (window != nullptr) window->pads_begin[i] = begin, window->pads_end[i] = end;
  }
  return KILN_KERR_OK;
}

// GlobalAveragePool / GlobalMaxPool: [N, C, 1, ...].
KILN_KERNEL(shape_global_pool) {
  const kiln_ktensor& x = call->inputs[0];
  for (int32_t i = 0; i < x.rank; ++i) OutDims(call, 0)[i] = i < 2 ? x.dims[i] : 1;
  return KILN_KERR_OK;
}

// Flatten at `axis`: [prod(dims[:axis]), prod(dims[axis:])].
KILN_KERNEL(shape_flatten) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  int64_t outer = 1, inner = 1;
  for (int32_t i = 0; i < x.rank; ++i) {
    int64_t& side = i < p.axis ? outer : inner;
    side = side < 0 || x.dims[i] < 0 ? -1 : side * x.dims[i];
  }
  OutDims(call, 0)[0] = outer;
  OutDims(call, 0)[1] = inner;
  return KILN_KERR_OK;
}

// Reshape: input 1's data, 0 copying the input's dim (unless allowzero) and one -1
// inferred from the element count.
KILN_KERNEL(shape_reshape) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &shape = call->inputs[1];
  const int32_t rank = call->outputs[0].rank;
  Dims out = OutDims(call, 0);
  if (shape.data == nullptr) {
    for (int32_t i = 0; i < rank; ++i) out[i] = -1;
    return KILN_KERR_OK;
  }
  int64_t known = 1, infer_at = -1;
  for (int32_t i = 0; i < rank; ++i) {
    int64_t d = ReadInt(shape, i);
    if (d == 0 && !(p.flags & KILN_SHAPE_ALLOW_ZERO)) {  // a copy of x's dim, maybe unknown yet (-1)
      if (i >= x.rank) return KILN_KERR_SHAPE;
      out[i] = x.dims[i];
      known = known < 0 || x.dims[i] < 0 ? -1 : known * x.dims[i];
      continue;
    }
    if (d == -1) {
      if (infer_at >= 0) return KILN_KERR_SHAPE;
      infer_at = i;
    } else if (d < -1) {
      return KILN_KERR_SHAPE;
    }
    out[i] = d;
    if (d != -1) known = known < 0 || d < 0 ? -1 : known * d;
  }
  const int64_t total = Elements(x);
  if (infer_at >= 0) {
    out[infer_at] = total < 0 || known < 0 ? -1 : (known == 0 ? 0 : total / known);
    if (total >= 0 && known > 0 && total % known != 0) return KILN_KERR_SHAPE;
  } else if (total >= 0 && known >= 0 && total != known) {
    return KILN_KERR_SHAPE;
  }
  return KILN_KERR_OK;
}

// Transpose by `ints` (perm); completes the strided copy's dims and strides.
KILN_KERNEL(shape_transpose) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  if (p.num_ints != x.rank) return KILN_KERR_SHAPE;
  int64_t in_strides[KILN_MAX_RANK], strides[KILN_MAX_RANK];
  StridesOf(x, in_strides);
  for (int32_t i = 0; i < x.rank; ++i) {
    OutDims(call, 0)[i] = x.dims[p.ints[i]];
    strides[i] = in_strides[p.ints[i]];
  }
  CompleteStridedCopy(call, x.rank, OutDims(call, 0), strides, 0);
  return KILN_KERR_OK;
}

// Concat along `axis`: the other dims must agree; the axis sums.
KILN_KERNEL(shape_concat) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const int32_t rank = call->outputs[0].rank;
  Dims out = OutDims(call, 0);
  for (int32_t d = 0; d < rank; ++d) out[d] = d == p.axis ? 0 : -1;
  for (int32_t i = 0; i < call->num_inputs; ++i) {
    const kiln_ktensor& t = call->inputs[i];
    if (t.rank != rank) return KILN_KERR_SHAPE;
    for (int32_t d = 0; d < rank; ++d) {
      if (d == p.axis) {
        out[d] = out[d] < 0 || t.dims[d] < 0 ? -1 : out[d] + t.dims[d];
      } else if (out[d] < 0) {
        out[d] = t.dims[d];
      } else if (t.dims[d] >= 0 && t.dims[d] != out[d]) {
        return KILN_KERR_SHAPE;
      }
    }
  }
  return KILN_KERR_OK;
}

// Gather along `axis`: data dims with that axis replaced by the indices' dims.
KILN_KERNEL(shape_gather) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor &data = call->inputs[0], &indices = call->inputs[1];
  Dims out = OutDims(call, 0);
  int32_t o = 0;
  for (int32_t i = 0; i < p.axis; ++i) out[o++] = data.dims[i];
  for (int32_t i = 0; i < indices.rank; ++i) out[o++] = indices.dims[i];
  for (int32_t i = static_cast<int32_t>(p.axis) + 1; i < data.rank; ++i) out[o++] = data.dims[i];
  return KILN_KERR_OK;
}

// GatherND (ONNX spec): indices' dims but the last, then data's dims after the batch dims
// (p.axis) and the indexed ones (indices' last dim, the tuple depth, known when compiled).
KILN_KERNEL(shape_gather_nd) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor &data = call->inputs[0], &indices = call->inputs[1];
  if (indices.rank < 1 || p.axis < 0 || p.axis >= indices.rank) return KILN_KERR_SHAPE;
  const int64_t depth = indices.dims[indices.rank - 1];
  if (depth < 1 || p.axis + depth > data.rank) return KILN_KERR_SHAPE;
  for (int32_t i = 0; i < p.axis; ++i) {
    if (data.dims[i] >= 0 && indices.dims[i] >= 0 && data.dims[i] != indices.dims[i]) return KILN_KERR_SHAPE;
  }
  Dims out = OutDims(call, 0);
  int32_t o = 0;
  for (int32_t i = 0; i + 1 < indices.rank; ++i) out[o++] = indices.dims[i];
  for (int32_t i = static_cast<int32_t>(p.axis + depth); i < data.rank; ++i) out[o++] = data.dims[i];
  return o == call->outputs[0].rank ? KILN_KERR_OK : KILN_KERR_SHAPE;
}

// RoiAlign: [rois, X's channels, output_height, output_width] (ints[0], ints[1]) for X
// [N, C, H, W], rois [R, 4] and batch_indices [R].
KILN_KERNEL(shape_roi_align) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &rois = call->inputs[1], &batch = call->inputs[2];
  if (x.rank != 4 || rois.rank != 2 || batch.rank != 1 || p.num_ints != 2) return KILN_KERR_SHAPE;
  if ((rois.dims[1] >= 0 && rois.dims[1] != 4) ||
      (rois.dims[0] >= 0 && batch.dims[0] >= 0 && rois.dims[0] != batch.dims[0])) {
    return KILN_KERR_SHAPE;
  }
  Dims out = OutDims(call, 0);
  out[0] = rois.dims[0] >= 0 ? rois.dims[0] : batch.dims[0];
  out[1] = x.dims[1];
  out[2] = p.ints[0];
  out[3] = p.ints[1];
  return KILN_KERR_OK;
}

// Unsqueeze: a 1 at each output position of the axes, the input's dims elsewhere.
KILN_KERNEL(shape_unsqueeze) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  const int32_t rank = call->outputs[0].rank;
  Dims out = OutDims(call, 0);
  int64_t axes[KILN_MAX_RANK], count;
  if (int32_t rc = ReadAxes(call, p, rank, axes, &count); rc != KILN_KERR_OK) return rc;
  if (count < 0) return AllUnknown(call);
  if (count + x.rank != rank) return KILN_KERR_SHAPE;
  int32_t next = 0, k = 0;
  for (int32_t i = 0; i < rank; ++i) {
    if (k < count && axes[k] == i) {
      out[i] = 1, ++k;
    } else {
      out[i] = x.dims[next++];
    }
  }
  return KILN_KERR_OK;
}

// Squeeze: the input's dims without the axes, which must be 1.
KILN_KERNEL(shape_squeeze) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  Dims out = OutDims(call, 0);
  int64_t axes[KILN_MAX_RANK], count;
  if (int32_t rc = ReadAxes(call, p, x.rank, axes, &count); rc != KILN_KERR_OK) return rc;
  if (count < 0) return AllUnknown(call);
  if (x.rank - count != call->outputs[0].rank) return KILN_KERR_SHAPE;
  int32_t o = 0, k = 0;
  for (int32_t i = 0; i < x.rank; ++i) {
    if (k < count && axes[k] == i) {
      if (x.dims[i] > 1) return KILN_KERR_SHAPE;
      ++k;
    } else {
      out[o++] = x.dims[i];
    }
  }
  return KILN_KERR_OK;
}

// Reduce*, ArgMax, ArgMin: the reduced axes become 1 (keepdims) or go; no axes reduce all
// of them, or none with noop_with_empty_axes. Completes kiln_reduce_params.axes_mask.
KILN_KERNEL(shape_reduce) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  Dims out = OutDims(call, 0);
  int64_t axes[KILN_MAX_RANK], count;
  if (int32_t rc = ReadAxes(call, p, x.rank, axes, &count); rc != KILN_KERR_OK) return rc;
  if (count < 0) return AllUnknown(call);
  int64_t mask = 0;
  for (int64_t i = 0; i < count; ++i) mask |= int64_t{1} << axes[i];
  if (count == 0 && !(p.flags & KILN_SHAPE_NOOP_EMPTY_AXES)) mask = (int64_t{1} << x.rank) - 1;
  const bool keep = (p.flags & KILN_SHAPE_KEEPDIMS) != 0;
  int32_t o = 0;
  for (int32_t i = 0; i < x.rank; ++i) {
    const bool reduced = (mask >> i) & 1;
    if (reduced && !keep) continue;
    if (o >= call->outputs[0].rank) return KILN_KERR_SHAPE;
    out[o++] = reduced ? 1 : x.dims[i];
  }
  if (o != call->outputs[0].rank) return KILN_KERR_SHAPE;
  if (auto* params = static_cast<kiln_reduce_params*>(KernelParams(call))) params->axes_mask = mask;
  return KILN_KERR_OK;
}

// Slice (opset 10+): inputs data, starts, ends, axes, steps, clamped as ONNX says;
// completes the strided copy (offset, dims, strides).
KILN_KERNEL(shape_slice) {
  const kiln_ktensor &x = call->inputs[0], &starts = call->inputs[1], &ends = call->inputs[2];
  Dims out = OutDims(call, 0);
  int64_t first[KILN_MAX_RANK], steps[KILN_MAX_RANK], in_strides[KILN_MAX_RANK], strides[KILN_MAX_RANK];
  for (int32_t i = 0; i < x.rank; ++i) out[i] = x.dims[i], first[i] = 0, steps[i] = 1;
  for (int32_t i = 1; i < 5; ++i) {
    if (DataUnknown(call, i)) return AllUnknown(call);
  }
  const int64_t n = Elements(starts);
  const bool has_axes = Present(call, 3), has_steps = Present(call, 4);
  if (n != Elements(ends) || (has_axes && Elements(call->inputs[3]) != n) ||
      (has_steps && Elements(call->inputs[4]) != n))
    return KILN_KERR_SHAPE;
  for (int64_t i = 0; i < n; ++i) {
    int64_t axis = has_axes ? ReadInt(call->inputs[3], i) : i;
    if (axis < 0) axis += x.rank;
    const int64_t step = has_steps ? ReadInt(call->inputs[4], i) : 1;
    if (axis < 0 || axis >= x.rank || step == 0) return KILN_KERR_SHAPE;
    const int64_t dim = x.dims[axis];
    if (dim < 0) {
      out[axis] = -1;
      continue;
    }
    int64_t start = ReadInt(starts, i), end = ReadInt(ends, i);
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    const int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? dim : dim - 1;
    start = start < 0 ? 0 : start > hi ? hi : start;
    end = end < lo ? lo : end > hi ? hi : end;
    const int64_t len = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
    out[axis] = len > 0 ? len : 0;
    first[axis] = start;
    steps[axis] = step;
  }
  StridesOf(x, in_strides);
  int64_t offset = 0;
  for (int32_t i = 0; i < x.rank; ++i) {
    offset += first[i] * in_strides[i];
    strides[i] = steps[i] * in_strides[i];
  }
  CompleteStridedCopy(call, x.rank, out, strides, offset);
  return KILN_KERR_OK;
}

// Expand: the broadcast of the input and input 1's data (a shape); completes the strided
// copy, stride 0 along each broadcast dim.
KILN_KERNEL(shape_expand) {
  const kiln_ktensor &x = call->inputs[0], &shape = call->inputs[1];
  const int32_t rank = call->outputs[0].rank;
  Dims out = OutDims(call, 0);
  if (DataUnknown(call, 1)) return AllUnknown(call);
  const int64_t n = Elements(shape);
  if (n > rank || x.rank > rank) return KILN_KERR_SHAPE;
  for (int32_t i = 0; i < rank; ++i) out[i] = i < rank - n ? 1 : ReadInt(shape, i - (rank - n));
  if (int32_t rc = BroadcastInto(out, rank, x); rc != KILN_KERR_OK) return rc;
  int64_t in_strides[KILN_MAX_RANK], strides[KILN_MAX_RANK];
  StridesOf(x, in_strides);
  for (int32_t i = 0; i < rank; ++i) {
    const int32_t j = i - (rank - x.rank);
    strides[i] = j < 0 || x.dims[j] == 1 ? 0 : in_strides[j];
  }
  CompleteStridedCopy(call, rank, out, strides, 0);
  return KILN_KERR_OK;
}

// Tile: each dim times input 1's repeat.
KILN_KERNEL(shape_tile) {
  const kiln_ktensor &x = call->inputs[0], &repeats = call->inputs[1];
  if (DataUnknown(call, 1)) return AllUnknown(call);
  if (Elements(repeats) != x.rank) return KILN_KERR_SHAPE;
  for (int32_t i = 0; i < x.rank; ++i) {
    const int64_t r = ReadInt(repeats, i);
    if (r < 0) return KILN_KERR_SHAPE;
    OutDims(call, 0)[i] = x.dims[i] < 0 ? -1 : x.dims[i] * r;
  }
  return KILN_KERR_OK;
}

// Pad: each dim plus its begin and end pads (`ints`, or input 1's data over the axes of
// input 3 when given); completes kiln_pad_params.pads_begin.
KILN_KERNEL(shape_pad) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  int64_t pads[2 * KILN_MAX_RANK];
  for (int32_t i = 0; i < 2 * x.rank; ++i) pads[i] = p.ints[i];
  if (p.flags & KILN_SHAPE_FROM_INPUT) {
    if (DataUnknown(call, 1) || DataUnknown(call, 3)) return AllUnknown(call);
    const bool has_axes = Present(call, 3);
    const int64_t n = has_axes ? Elements(call->inputs[3]) : x.rank;
    if (Elements(call->inputs[1]) != 2 * n || n > x.rank) return KILN_KERR_SHAPE;
    for (int32_t i = 0; i < 2 * x.rank; ++i) pads[i] = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t axis = has_axes ? ReadInt(call->inputs[3], i) : i;
      if (axis < 0) axis += x.rank;
      if (axis < 0 || axis >= x.rank) return KILN_KERR_SHAPE;
      pads[axis] = ReadInt(call->inputs[1], i);
      pads[x.rank + axis] = ReadInt(call->inputs[1], n + i);
    }
  }
  if (p.flags & KILN_SHAPE_CENTER_CROP_PAD) {  // crop starts (in - out) / 2 in, pad puts (out - in) / 2 first
    for (int32_t i = 0; i < x.rank; ++i) {
      const int64_t in = x.dims[i], out = p.ints[i];
      if (out >= 0 && in < 0) return AllUnknown(call);
      pads[i] = out < 0 ? 0 : out >= in ? (out - in) / 2 : -((in - out) / 2);
      pads[x.rank + i] = out < 0 ? 0 : out - in - pads[i];
    }
  }
  auto* params = static_cast<kiln_pad_params*>(KernelParams(call));
  for (int32_t i = 0; i < x.rank; ++i) {
    const int64_t d = x.dims[i] < 0 ? -1 : x.dims[i] + pads[i] + pads[x.rank + i];
    if (x.dims[i] >= 0 && d < 0) return KILN_KERR_SHAPE;
    OutDims(call, 0)[i] = d;
    if (params != nullptr) params->pads_begin[i] = pads[i];
  }
  return KILN_KERR_OK;
}

// OneHot: the indices' dims with input 1's data (depth) inserted at `axis`.
KILN_KERNEL(shape_one_hot) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor &indices = call->inputs[0], &depth = call->inputs[1];
  Dims out = OutDims(call, 0);
  int32_t k = 0;
  for (int32_t i = 0; i < call->outputs[0].rank; ++i) {
    if (i == p.axis) {
      out[i] = depth.data == nullptr ? -1 : static_cast<int64_t>(ReadDouble(depth));
      if (depth.data != nullptr && out[i] < 0) return KILN_KERR_SHAPE;
    } else {
      out[i] = indices.dims[k++];
    }
  }
  return KILN_KERR_OK;
}

// Split along `axis` into the outputs: sizes from `ints`, from input 1's data
// (KILN_SHAPE_FROM_INPUT), or equal parts (KILN_SHAPE_CEIL_MODE: opset 18's num_outputs,
// parts of ceil(extent / parts) and a smaller last one).
KILN_KERNEL(shape_split) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  const int32_t parts = call->num_outputs - 1;
  const int64_t extent = x.dims[p.axis];
  const bool from_input = (p.flags & KILN_SHAPE_FROM_INPUT) && Present(call, 1);
  const bool unknown = from_input ? DataUnknown(call, 1) : p.num_ints == 0 && extent < 0;
  const bool ceil_parts = (p.flags & KILN_SHAPE_CEIL_MODE) != 0;
  if (from_input && !unknown && Elements(call->inputs[1]) != parts) return KILN_KERR_SHAPE;
  if (!from_input && p.num_ints == 0 && extent >= 0 && extent % parts != 0 && !ceil_parts) return KILN_KERR_SHAPE;
  const int64_t part = ceil_parts ? (extent + parts - 1) / parts : extent / parts;
  int64_t total = 0;
  for (int32_t k = 0; k < parts; ++k) {
    Dims out = OutDims(call, k);
    for (int32_t i = 0; i < x.rank; ++i) out[i] = x.dims[i];
    const int64_t equal = part * (k + 1) <= extent ? part : (extent - part * k > 0 ? extent - part * k : 0);
    out[p.axis] = unknown ? -1 : from_input ? ReadInt(call->inputs[1], k) : p.num_ints > 0 ? p.ints[k] : equal;
    if (out[p.axis] < -1 || (!unknown && out[p.axis] < 0)) return KILN_KERR_SHAPE;
    total += out[p.axis];
  }
  if (!unknown && extent >= 0 && total != extent) return KILN_KERR_SHAPE;
  return KILN_KERR_OK;
}

// Range: [max(ceil((limit - start) / delta), 0)] from the three scalars' data.
KILN_KERNEL(shape_range) {
  const kiln_ktensor &start = call->inputs[0], &limit = call->inputs[1], &delta = call->inputs[2];
  if (start.data == nullptr || limit.data == nullptr || delta.data == nullptr) {
    OutDims(call, 0)[0] = -1;
    return KILN_KERR_OK;
  }
  const double d = ReadDouble(delta);
  if (d == 0) return KILN_KERR_SHAPE;
  const double n = ceil((ReadDouble(limit) - ReadDouble(start)) / d);
  OutDims(call, 0)[0] = n > 0 ? static_cast<int64_t>(n) : 0;
  return KILN_KERR_OK;
}

// ConstantOfShape: the dims are input 0's data.
KILN_KERNEL(shape_from_data) {
  const kiln_ktensor& shape = call->inputs[0];
  for (int32_t i = 0; i < call->outputs[0].rank; ++i) {
    const int64_t d = shape.data == nullptr ? -1 : ReadInt(shape, i);
    if (shape.data != nullptr && d < 0) return KILN_KERR_SHAPE;
    OutDims(call, 0)[i] = d;
  }
  return KILN_KERR_OK;
}

// Shape's kernel: input 0's dims [ints[0], ints[1]) as i64 data.
KILN_KERNEL(shape_of) {
  KILN_PARAMS(kiln_shape_params, p, call);
  int64_t* out = static_cast<int64_t*>(call->outputs[0].data);
  for (int64_t i = p.ints[0]; i < p.ints[1]; ++i) out[i - p.ints[0]] = call->inputs[0].dims[i];
  return KILN_KERR_OK;
}

// Size's kernel: input 0's element count as an i64 scalar.
KILN_KERNEL(size_of) {
  *static_cast<int64_t*>(call->outputs[0].data) = Elements(call->inputs[0]);
  return KILN_KERR_OK;
}

// NonZero: [rank, count of nonzero elements], counted from the input's data.
KILN_KERNEL(shape_nonzero) {
  const kiln_ktensor& x = call->inputs[0];
  const int64_t n = Elements(x);
  int64_t count = x.data == nullptr && n != 0 ? -1 : 0;
  for (int64_t i = 0; i < n && count >= 0; ++i) count += kiln_kernels::LoadAsDouble(x.data, x.dtype, i) != 0;
  OutDims(call, 0)[0] = x.rank;
  OutDims(call, 0)[1] = count;
  return KILN_KERR_OK;
}

// Compress: the input's dims with `axis` (or the flattened input, without
// KILN_SHAPE_HAS_AXIS) cut to the count of true conditions among its first entries.
KILN_KERNEL(shape_compress) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &condition = call->inputs[1];
  const bool has_axis = (p.flags & KILN_SHAPE_HAS_AXIS) != 0;
  Dims out = OutDims(call, 0);
  for (int32_t i = 0; i < call->outputs[0].rank; ++i) out[i] = has_axis ? x.dims[i] : -1;
  const int64_t extent = has_axis ? x.dims[p.axis] : Elements(x), n = Elements(condition);
  if (extent < 0 || n < 0 || (condition.data == nullptr && n != 0)) {
    out[has_axis ? p.axis : 0] = -1;
    return KILN_KERR_OK;
  }
  if (n > extent) return KILN_KERR_SHAPE;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += kiln_kernels::LoadAsDouble(condition.data, condition.dtype, i) != 0;
  out[has_axis ? p.axis : 0] = count;
  return KILN_KERR_OK;
}

// The window functions: [size], size being input 0's data.
KILN_KERNEL(shape_length) {
  const kiln_ktensor& size = call->inputs[0];
  OutDims(call, 0)[0] = size.data == nullptr ? -1 : ReadInt(size, 0);
  return OutDims(call, 0)[0] < -1 || (size.data != nullptr && OutDims(call, 0)[0] < 0) ? KILN_KERR_SHAPE : KILN_KERR_OK;
}

// Unique: Y is the input's dims with `axis` (or the flattened input, without
// KILN_SHAPE_HAS_AXIS) cut to the count of distinct slices; indices and counts have that
// length, inverse_indices the axis's.
KILN_KERNEL(shape_unique) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  const bool has_axis = (p.flags & KILN_SHAPE_HAS_AXIS) != 0;
  const int64_t total = Elements(x), extent = has_axis ? x.dims[p.axis] : total;
  const int64_t distinct = total < 0 || (x.data == nullptr && total != 0)
                               ? -1
                               : kiln_kernels::AxisSlices(x, has_axis ? p.axis : -1).CountDistinct();
  Dims y = OutDims(call, 0);
  for (int32_t i = 0; i < call->outputs[0].rank; ++i) y[i] = has_axis ? x.dims[i] : -1;
  y[has_axis ? p.axis : 0] = distinct;
  for (int32_t k = 1; k + 1 < call->num_outputs; ++k) OutDims(call, k)[0] = k == 2 ? extent : distinct;
  return KILN_KERR_OK;
}

// NonMaxSuppression: [selected boxes, 3], counted by running the selection; -1 while an
// input given to the node (`ints`: 1 each) has no data yet.
KILN_KERNEL(shape_non_max_suppression) {
  KILN_PARAMS(kiln_shape_params, p, call);
  OutDims(call, 0)[1] = 3;
  for (int32_t i = 0; i < call->num_inputs && i < p.num_ints; ++i) {
    if (p.ints[i] && call->inputs[i].data == nullptr && (i >= 2 || Elements(call->inputs[i]) != 0)) {
      OutDims(call, 0)[0] = -1;
      return KILN_KERR_OK;
    }
  }
  kiln_kernels::NmsProblem nms(call, (p.flags & KILN_SHAPE_CENTER_POINT_BOX) != 0);
  if (int32_t rc = nms.Check(); rc != KILN_KERR_OK) return rc;
  int64_t selected = 0;
  nms.Select([&](int64_t, int64_t, int64_t) { ++selected; });
  OutDims(call, 0)[0] = selected;
  return KILN_KERR_OK;
}

// TopK: the input's dims with `axis` cut to k, input 1's data (or `ints[0]` before opset
// 10), which may not exceed it; values and indices alike.
KILN_KERNEL(shape_top_k) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  const bool known = p.num_ints > 0 || !DataUnknown(call, 1);
  const int64_t k = p.num_ints > 0 ? p.ints[0] : known && Present(call, 1) ? ReadInt(call->inputs[1], 0) : -1;
  if (known && (k < 0 || (x.dims[p.axis] >= 0 && k > x.dims[p.axis]))) return KILN_KERR_SHAPE;
  for (int32_t o = 0; o + 1 < call->num_outputs; ++o) {
    for (int32_t i = 0; i < x.rank; ++i) OutDims(call, o)[i] = i == p.axis ? k : x.dims[i];
  }
  return KILN_KERR_OK;
}

// Resize and Upsample: each resized axis (`ints`) is floor(in * scale) from the scales
// input; else from sizes, the size itself, or under keep_aspect_ratio_policy
// round(in * scale) with the one scale that keeps every axis not larger (not smaller).
KILN_KERNEL(shape_resize) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  const int64_t scales_at = p.ints[KILN_MAX_RANK], sizes_at = p.ints[KILN_MAX_RANK + 1];
  const int64_t policy = p.ints[KILN_MAX_RANK + 2];
  auto given = [&](int64_t i) {
    return i >= 0 && Present(call, static_cast<int32_t>(i)) && Elements(call->inputs[i]) != 0;
  };
  const bool by_scales = given(scales_at);
  const int64_t from = by_scales ? scales_at : sizes_at;
  if (!by_scales && !given(sizes_at)) return KILN_KERR_SHAPE;
  const kiln_ktensor& values = call->inputs[from];
  if (Elements(values) != p.num_ints) return KILN_KERR_SHAPE;
  Dims out = OutDims(call, 0);
  for (int32_t i = 0; i < x.rank; ++i) out[i] = x.dims[i];
  double scale = policy == KILN_ASPECT_NOT_LARGER ? HUGE_VAL : 0.0;  // sizes under a policy
  for (int64_t i = 0; i < p.num_ints && values.data != nullptr; ++i) {
    const int64_t in = x.dims[p.ints[i]];
    const double v = kiln_kernels::LoadAsDouble(values.data, values.dtype, i);
    if (in < 0) continue;
    const double ratio = v / static_cast<double>(in);
    scale = policy == KILN_ASPECT_NOT_LARGER ? (ratio < scale ? ratio : scale) : (ratio > scale ? ratio : scale);
  }
  for (int64_t i = 0; i < p.num_ints; ++i) {
    const int64_t axis = p.ints[i], in = x.dims[axis];
    if (values.data == nullptr || in < 0) {
      out[axis] = -1;
    } else if (by_scales) {
      const double v = static_cast<float>(kiln_kernels::LoadAsDouble(values.data, values.dtype, i));
      if (!(v > 0)) return KILN_KERR_SHAPE;
      out[axis] = static_cast<int64_t>(floor(static_cast<double>(in) * v));
    } else {
      out[axis] = policy == KILN_ASPECT_STRETCH ? ReadInt(values, i)
                                                : static_cast<int64_t>(floor(static_cast<double>(in) * scale + 0.5));
    }
  }
  return KILN_KERR_OK;
}
