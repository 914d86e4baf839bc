// Sequence and optional kernels (SequenceConstruct/Insert/Erase/At/Length, SplitToSequence,
// ConcatFromSequence, Optional*, Identity on those). Each makes its outputs itself from
// exec->alloc, as kiln/kernels/sequence.h lays them out: a result owns copies of all it
// holds, so releasing its data pointer releases it whole and no value shares a buffer.
#include "kiln/kernels/sequence.h"

#include "kernel_common.h"
#include "value_block.h"

using namespace kiln_kernels;

namespace {

kiln_ktensor* Out(const kiln_kcall* call, int32_t index) { return const_cast<kiln_ktensor*>(&call->outputs[index]); }

// The one way a kernel here sets an output: the glue reads data, dims, rank and dtype back.
KILN_ALWAYS_INLINE void SetOutput(const kiln_kcall* call, int32_t index, void* data, const int64_t* dims, int32_t rank,
                                  int32_t dtype) {
  SetValue(Out(call, index), data, dims, rank, dtype);
}

void* Alloc(const kiln_kcall* call, int64_t bytes) { return ValueAlloc(call->exec, bytes); }

// A scalar position input (int32 or int64).
int64_t ReadIndex(const kiln_ktensor& t) {
  return t.dtype == kI32 ? *static_cast<const int32_t*>(t.data) : *static_cast<const int64_t*>(t.data);
}

// Output `index` built as value_block.h lays values out.
template <typename Describe, typename Fill>
int32_t BuildSequence(const kiln_kcall* call, int32_t index, int64_t n, Describe describe, Fill fill) {
  return kiln_kernels::BuildSequence(call->exec, Out(call, index), n, describe, fill);
}

template <typename Source>
int32_t CopySequence(const kiln_kcall* call, int32_t index, int64_t count, Source source) {
  return kiln_kernels::CopySequence(call->exec, Out(call, index), count, source);
}

char* BuildTensor(const kiln_kcall* call, int32_t index, int32_t rank, const int64_t* dims, int32_t dtype) {
  return kiln_kernels::BuildTensor(call->exec, Out(call, index), rank, dims, dtype);
}

int32_t CopyTensor(const kiln_kcall* call, int32_t index, const kiln_ktensor& t) {
  return kiln_kernels::CopyTensor(call->exec, Out(call, index), t);
}

int32_t CopyValue(const kiln_kcall* call, int32_t index, const kiln_ktensor& v) {
  return kiln_kernels::CopyValue(call->exec, Out(call, index), v);
}

}  // namespace

KILN_KERNEL(sequence_empty) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  return CopySequence(call, 0, 0, [&](int64_t) -> const kiln_ktensor& { return call->inputs[0]; });
}

KILN_KERNEL(sequence_construct) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  return CopySequence(call, 0, call->num_inputs, [&](int64_t i) -> const kiln_ktensor& { return call->inputs[i]; });
}

// SequenceInsert(seq, tensor, position = length): position in [-length, length].
KILN_KERNEL(sequence_insert) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  const kiln_ktensor& seq = call->inputs[0];
  const int64_t n = Length(seq);
  int64_t at = call->num_inputs > 2 && call->inputs[2].data != nullptr ? ReadIndex(call->inputs[2]) : n;
  if (at < -n || at > n) return KILN_KERR_INDEX;
  if (at < 0) at += n;
  return CopySequence(call, 0, n + 1, [&](int64_t i) -> const kiln_ktensor& {
    return i == at ? call->inputs[1] : ElementOf(seq, i < at ? i : i - 1);
  });
}

// SequenceErase(seq, position = -1): position in [-length, length - 1].
KILN_KERNEL(sequence_erase) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  const kiln_ktensor& seq = call->inputs[0];
  const int64_t n = Length(seq);
  int64_t at = call->num_inputs > 1 && call->inputs[1].data != nullptr ? ReadIndex(call->inputs[1]) : -1;
  if (at < -n || at >= n) return KILN_KERR_INDEX;
  if (at < 0) at += n;
  return CopySequence(call, 0, n - 1,
                      [&](int64_t i) -> const kiln_ktensor& { return ElementOf(seq, i < at ? i : i + 1); });
}

KILN_KERNEL(sequence_at) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  const kiln_ktensor& seq = call->inputs[0];
  const int64_t n = Length(seq);
  int64_t at = ReadIndex(call->inputs[1]);
  if (at < -n || at >= n) return KILN_KERR_INDEX;
  return CopyTensor(call, 0, ElementOf(seq, at < 0 ? at + n : at));
}

KILN_KERNEL(sequence_length) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  char* data = BuildTensor(call, 0, 0, nullptr, kI64);
  if (data == nullptr) return KILN_KERR_MEMORY;
  *reinterpret_cast<int64_t*>(data) = Length(call->inputs[0]);
  return KILN_KERR_OK;
}

// SplitToSequence(input, split?): without split, pieces of 1 along the axis (dropped unless
// keepdims); a scalar split gives pieces of that size (the last one shorter); a 1-D split
// gives each piece's length, which must add up to the axis.
KILN_KERNEL(split_to_sequence) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  const kiln_ktensor& x = call->inputs[0];
  if (x.rank < 1 || x.rank > KILN_MAX_RANK) return KILN_KERR_SHAPE;
  int64_t axis = params.axis < 0 ? params.axis + x.rank : params.axis;
  if (axis < 0 || axis >= x.rank) return KILN_KERR_SHAPE;
  const kiln_ktensor* split = call->num_inputs > 1 && call->inputs[1].data != nullptr ? &call->inputs[1] : nullptr;
  const int64_t extent = x.dims[axis];
  int64_t pieces = extent, chunk = 1;
  if (split != nullptr && split->rank == 0) {
    chunk = ReadIndex(*split);
    if (chunk <= 0) return KILN_KERR_SHAPE;
    pieces = (extent + chunk - 1) / chunk;
  } else if (split != nullptr) {
    pieces = split->dims[0];
    int64_t total = 0;
    for (int64_t i = 0; i < pieces; ++i) {
      const int64_t len = split->dtype == kI32 ? static_cast<const int32_t*>(split->data)[i]
                                               : static_cast<const int64_t*>(split->data)[i];
      if (len < 0) return KILN_KERR_SHAPE;
      total += len;
    }
    if (total != extent) return KILN_KERR_SHAPE;
  }
  auto piece = [&](int64_t i, int64_t* start) {
    if (split == nullptr || split->rank == 0) {
      *start = i * chunk;
      return chunk < extent - *start ? chunk : extent - *start;
    }
    *start = 0;
    for (int64_t k = 0; k < i; ++k)
      *start += split->dtype == kI32 ? static_cast<const int32_t*>(split->data)[k]
                                     : static_cast<const int64_t*>(split->data)[k];
    return split->dtype == kI32 ? static_cast<int64_t>(static_cast<const int32_t*>(split->data)[i])
                                : static_cast<const int64_t*>(split->data)[i];
  };
  const bool drop_axis = split == nullptr && params.keepdims == 0;
  int64_t outer = 1, inner = ElementSize(x.dtype);
  for (int64_t d = 0; d < axis; ++d) outer *= x.dims[d];
  for (int64_t d = axis + 1; d < x.rank; ++d) inner *= x.dims[d];
  auto describe = [&](int64_t i, ElementShape& s) -> int32_t {
    int64_t start = 0;
    const int64_t len = piece(i, &start);
    s.dtype = x.dtype;
    s.rank = 0;
    for (int64_t d = 0; d < x.rank; ++d) {
      if (d == axis && drop_axis) continue;
      s.dims[s.rank++] = d == axis ? len : x.dims[d];
    }
    return KILN_KERR_OK;
  };
  auto fill = [&](int64_t i, char* bytes) {
    int64_t start = 0;
    const int64_t len = piece(i, &start);
    const char* src = static_cast<const char*>(x.data);
    for (int64_t o = 0; o < outer; ++o) {
      memcpy(bytes + o * len * inner, src + (o * extent + start) * inner, static_cast<size_t>(len * inner));
    }
  };
  return BuildSequence(call, 0, pieces, describe, fill);
}

// ConcatFromSequence: the elements joined along `axis`, or stacked along a new one
// (new_axis: axis in [-rank - 1, rank]); every other dim must agree.
KILN_KERNEL(concat_from_sequence) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  const kiln_ktensor& seq = call->inputs[0];
  const int64_t n = Length(seq);
  if (n == 0) return KILN_KERR_SHAPE;
  const kiln_ktensor& first = ElementOf(seq, 0);
  const int32_t rank = first.rank, out_rank = rank + (params.new_axis != 0 ? 1 : 0);
  if (out_rank < 1 || out_rank > KILN_MAX_RANK) return KILN_KERR_SHAPE;
  int64_t axis = params.axis < 0 ? params.axis + out_rank : params.axis;
  if (axis < 0 || axis >= out_rank) return KILN_KERR_SHAPE;
  // Each element as [outer, len, inner]: len is 1 on a new axis.
  int64_t outer = 1, inner = ElementSize(first.dtype), total = 0;
  for (int64_t d = 0; d < axis; ++d) outer *= first.dims[d];
  for (int64_t d = params.new_axis != 0 ? axis : axis + 1; d < rank; ++d) inner *= first.dims[d];
  for (int64_t i = 0; i < n; ++i) {
    const kiln_ktensor& e = ElementOf(seq, i);
    if (e.rank != rank || e.dtype != first.dtype) return KILN_KERR_SHAPE;
    for (int32_t d = 0; d < rank; ++d) {
      if (e.dims[d] != first.dims[d] && (params.new_axis != 0 || d != axis)) return KILN_KERR_SHAPE;
    }
    total += params.new_axis != 0 ? 1 : e.dims[axis];
  }
  int64_t dims[KILN_MAX_RANK];
  for (int32_t d = 0, k = 0; d < out_rank; ++d) {
    if (d == axis) {
      dims[d] = total;
      if (params.new_axis == 0) ++k;
    } else {
      dims[d] = first.dims[k++];
    }
  }
  char* out = BuildTensor(call, 0, out_rank, dims, first.dtype);
  if (out == nullptr) return KILN_KERR_MEMORY;
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    const kiln_ktensor& e = ElementOf(seq, i);
    const int64_t len = params.new_axis != 0 ? 1 : e.dims[axis];
    for (int64_t o = 0; o < outer; ++o) {
      memcpy(out + (o * total + offset) * inner, static_cast<const char*>(e.data) + o * len * inner,
             static_cast<size_t>(len * inner));
    }
    offset += len;
  }
  return KILN_KERR_OK;
}

// Optional() with a type only: the empty optional.
KILN_KERNEL(optional_none) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  SetOutput(call, 0, nullptr, nullptr, call->outputs[0].rank, call->outputs[0].dtype);
  return KILN_KERR_OK;
}

KILN_KERNEL(optional_has_element) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  const bool present = call->num_inputs > 0 && call->inputs[0].data != nullptr;
  char* data = BuildTensor(call, 0, 0, nullptr, kBool);
  if (data == nullptr) return KILN_KERR_MEMORY;
  *data = present ? 1 : 0;
  return KILN_KERR_OK;
}

// Identity, Optional(x) and OptionalGetElement: a copy (of an empty optional, an error
// where require_value says so).
KILN_KERNEL(value_copy) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  const kiln_ktensor& v = call->inputs[0];
  if (v.data == nullptr && params.require_value != 0) return KILN_KERR_INDEX;
  return CopyValue(call, 0, v);
}

// A graph output of the run-time-shape entry: a copy whose dims are a buffer of their own,
// as the runtime releases a shaped output's data and dims apart.
KILN_KERNEL(value_export) {
  KILN_PARAMS(kiln_sequence_params, params, call);
  (void)params;
  const kiln_ktensor& v = call->inputs[0];
  if (int32_t rc = CopyValue(call, 0, v); rc != KILN_KERR_OK || v.data == nullptr) return rc;
  int64_t* dims = static_cast<int64_t*>(Alloc(call, 8 * (v.rank > 0 ? v.rank : 1)));
  if (dims == nullptr) return KILN_KERR_MEMORY;
  for (int32_t d = 0; d < v.rank; ++d) dims[d] = v.dims[d];
  SetOutput(call, 0, call->outputs[0].data, dims, v.rank, v.dtype);
  return KILN_KERR_OK;
}
