// Sequence and optional values as one owning block (kiln/kernels/sequence.h): what the
// sequence kernels build their results with, and what the control-flow drivers copy and
// gather loop-carried values and SequenceMap's outputs with. A sequence is one block (its
// element array, its length, the elements' dims, their data); a tensor is one block (its
// data, then its dims); releasing the data pointer releases the whole value.
#ifndef KILN_KERNELS_VALUE_BLOCK_H_
#define KILN_KERNELS_VALUE_BLOCK_H_

#include "kernel_common.h"

namespace kiln_kernels {

constexpr int64_t kValueAlign = 64;

KILN_ALWAYS_INLINE int64_t ValueRoundUp(int64_t n) { return (n + kValueAlign - 1) / kValueAlign * kValueAlign; }

inline void* ValueAlloc(const kiln_kexec* exec, int64_t bytes) {
  if (exec == nullptr || exec->alloc == nullptr) return nullptr;
  return exec->alloc(exec->arena, bytes > 0 ? bytes : 1);
}

KILN_ALWAYS_INLINE void SetValue(kiln_ktensor* out, void* data, const int64_t* dims, int32_t rank, int32_t dtype) {
  out->data = data;
  out->dims = dims;
  out->rank = rank;
  out->dtype = dtype;
}

inline int64_t ValueBytes(const kiln_ktensor& t) { return Numel(t) * ElementSize(t.dtype); }
inline bool IsSequence(const kiln_ktensor& t) { return t.dtype == KILN_DTYPE_SEQUENCE_CODE; }
inline int64_t Length(const kiln_ktensor& seq) { return seq.dims[0]; }
inline const kiln_ktensor& ElementOf(const kiln_ktensor& seq, int64_t i) {
  return static_cast<const kiln_ktensor*>(seq.data)[i];
}

// One element of a sequence being built: its shape, and how to fill its bytes.
struct ElementShape {
  int32_t rank;
  int32_t dtype;
  int64_t dims[KILN_MAX_RANK];
};

// Makes *out a sequence of `n` elements: describe(i, shape) gives element i's shape,
// fill(i, bytes) writes its data. One block: elements, length, dims, data.
template <typename Describe, typename Fill>
int32_t BuildSequence(const kiln_kexec* exec, kiln_ktensor* out, int64_t n, Describe describe, Fill fill) {
  int64_t dims_words = 0, data_bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    ElementShape s;
    if (int32_t rc = describe(i, s); rc != KILN_KERR_OK) return rc;
    int64_t count = 1;
    for (int32_t d = 0; d < s.rank; ++d) count *= s.dims[d];
    dims_words += s.rank;
    data_bytes += ValueRoundUp(count * ElementSize(s.dtype));
  }
  const int64_t header = ValueRoundUp(n * static_cast<int64_t>(sizeof(kiln_ktensor)) + 8 * (1 + dims_words));
  char* block = static_cast<char*>(ValueAlloc(exec, header + data_bytes));
  if (block == nullptr) return KILN_KERR_MEMORY;
  kiln_ktensor* elements = reinterpret_cast<kiln_ktensor*>(block);
  int64_t* length = reinterpret_cast<int64_t*>(block + n * static_cast<int64_t>(sizeof(kiln_ktensor)));
  *length = n;
  int64_t* dims = length + 1;
  char* data = block + header;
  for (int64_t i = 0; i < n; ++i) {
    ElementShape s;
    describe(i, s);
    int64_t count = 1;
    for (int32_t d = 0; d < s.rank; ++d) count *= dims[d] = s.dims[d];
    elements[i] = kiln_ktensor{data, dims, s.rank, s.dtype};
    fill(i, data);
    dims += s.rank;
    data += ValueRoundUp(count * ElementSize(s.dtype));
  }
  SetValue(out, block, length, 1, KILN_DTYPE_SEQUENCE_CODE);
  return KILN_KERR_OK;
}

// *out a sequence of copies of `count` tensors, source(i) giving the i-th.
template <typename Source>
int32_t CopySequence(const kiln_kexec* exec, kiln_ktensor* out, int64_t count, Source source) {
  auto describe = [&](int64_t i, ElementShape& s) -> int32_t {
    const kiln_ktensor& t = source(i);
    if (t.rank > KILN_MAX_RANK) return KILN_KERR_UNSUPPORTED;
    s.rank = t.rank;
    s.dtype = t.dtype;
    for (int32_t d = 0; d < t.rank; ++d) s.dims[d] = t.dims[d];
    return KILN_KERR_OK;
  };
  auto fill = [&](int64_t i, char* bytes) {
    const kiln_ktensor& t = source(i);
    if (ValueBytes(t) > 0) memcpy(bytes, t.data, static_cast<size_t>(ValueBytes(t)));
  };
  return BuildSequence(exec, out, count, describe, fill);
}

// Makes *out a tensor: one block, data then dims. Returns its data (null: memory).
inline char* BuildTensor(const kiln_kexec* exec, kiln_ktensor* out, int32_t rank, const int64_t* dims, int32_t dtype) {
  int64_t count = 1;
  for (int32_t d = 0; d < rank; ++d) count *= dims[d];
  const int64_t data_bytes = ValueRoundUp(count * ElementSize(dtype));
  char* block = static_cast<char*>(ValueAlloc(exec, data_bytes + 8 * (rank > 0 ? rank : 1)));
  if (block == nullptr) return nullptr;
  int64_t* out_dims = reinterpret_cast<int64_t*>(block + data_bytes);
  for (int32_t d = 0; d < rank; ++d) out_dims[d] = dims[d];
  SetValue(out, block, out_dims, rank, dtype);
  return block;
}

inline int32_t CopyTensor(const kiln_kexec* exec, kiln_ktensor* out, const kiln_ktensor& t) {
  char* data = BuildTensor(exec, out, t.rank, t.dims, t.dtype);
  if (data == nullptr) return KILN_KERR_MEMORY;
  if (ValueBytes(t) > 0) memcpy(data, t.data, static_cast<size_t>(ValueBytes(t)));
  return KILN_KERR_OK;
}

// *out a copy of any value; an empty optional stays empty (data and dims null).
inline int32_t CopyValue(const kiln_kexec* exec, kiln_ktensor* out, const kiln_ktensor& v) {
  if (v.data == nullptr) {
    SetValue(out, nullptr, nullptr, v.rank, v.dtype);
    return KILN_KERR_OK;
  }
  if (IsSequence(v)) {
    return CopySequence(exec, out, Length(v), [&](int64_t i) -> const kiln_ktensor& { return ElementOf(v, i); });
  }
  return CopyTensor(exec, out, v);
}

}  // namespace kiln_kernels

#endif  // KILN_KERNELS_VALUE_BLOCK_H_
