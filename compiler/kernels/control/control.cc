// Control flow drivers (kiln/kernels/control.h): the loops around compiled bodies. Each
// iteration calls the body's function; buffers come from and go back to exec->alloc and
// exec->release, the previous iteration's loop-carried values once the next has read them.
#include "kiln/kernels/control.h"

#include "value_block.h"

namespace {

constexpr int64_t kMaxRank = 16;

int64_t ElementSize(int32_t dtype) {
  switch (dtype) {
    case 2:
    case 3:
    case 9: return 1;  // u8, i8, bool
    case 4:
    case 5:
    case 10:
    case 16: return 2;  // u16, i16, f16, bf16
    case 1:
    case 6:
    case 12: return 4;  // f32, i32, u32
    case 7:
    case 11:
    case 13: return 8;  // i64, f64, u64
    default: return 0;
  }
}

int64_t Elements(const kiln_ktensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.rank; ++d) n *= t.dims[d];
  return n;
}

int64_t Bytes(const kiln_ktensor& t) { return Elements(t) * ElementSize(t.dtype); }

void Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) __builtin_memcpy(dst, src, static_cast<unsigned long>(bytes));
}

// Buffers of one driver call, all from the exec's allocator.
struct Buffers {
  const kiln_kexec* exec;
  void* Alloc(int64_t bytes) const { return exec->alloc(exec->arena, bytes > 0 ? bytes : 1); }
  void Release(void* data) const {
    if (data != nullptr) exec->release(exec->arena, data);
  }
  // A body output's data and dims, both the body's.
  void ReleaseTensor(kiln_ktensor& t) const {
    Release(t.data);
    Release(const_cast<int64_t*>(t.dims));
    t.data = nullptr;
    t.dims = nullptr;
  }
};

// out's dims from `from` (the glue gave out its rank and dims storage).
// (An empty optional has no dims: out's stay.)
void SetDims(kiln_ktensor& out, const kiln_ktensor& from) {
  if (from.dims == nullptr) return;
  int64_t* dims = const_cast<int64_t*>(out.dims);
  for (int32_t d = 0; d < out.rank && d < from.rank; ++d) dims[d] = from.dims[d];
}

// `out` a fresh copy of `from` (its dims and data): one block, as value_block.h lays a
// tensor, a sequence or an optional out (an empty optional stays empty).
int32_t CopyOut(const Buffers& buffers, kiln_ktensor& out, const kiln_ktensor& from) {
  kiln_ktensor copy{nullptr, nullptr, 0, 0};
  if (const int32_t rc = kiln_kernels::CopyValue(buffers.exec, &copy, from); rc != KILN_KERR_OK) return rc;
  SetDims(out, copy);
  out.data = copy.data;
  return KILN_KERR_OK;
}

// `out` takes over a body output: its data kept, its dims copied and released.
void TakeOut(const Buffers& buffers, kiln_ktensor& out, kiln_ktensor& from) {
  SetDims(out, from);
  out.data = from.data;
  buffers.Release(const_cast<int64_t*>(from.dims));
  from.data = nullptr;
  from.dims = nullptr;
}

int32_t BodyError(int32_t rc) { return (rc & 0xff) != 0 ? (rc & 0xff) : KILN_KERR_UNSUPPORTED; }

// Arrays of tensors for one call, from the allocator (the number of inputs is the model's).
kiln_ktensor* Tensors(const Buffers& buffers, int64_t n) {
  auto* t = static_cast<kiln_ktensor*>(buffers.Alloc(n * static_cast<int64_t>(sizeof(kiln_ktensor))));
  for (int64_t i = 0; t != nullptr && i < n; ++i) t[i] = kiln_ktensor{nullptr, nullptr, 0, 0};
  return t;
}

// A growing scan output of Loop: each iteration's value appended.
struct Stacked {
  char* data = nullptr;
  int64_t used = 0, capacity = 0, count = 0;
};

int32_t Append(const Buffers& buffers, Stacked& stack, kiln_ktensor& out, kiln_ktensor& value) {
  int64_t* dims = const_cast<int64_t*>(out.dims);
  if (value.rank + 1 != out.rank) return KILN_KERR_SHAPE;
  for (int32_t d = 0; d < value.rank; ++d) {
    if (stack.count == 0) dims[d + 1] = value.dims[d];
    if (dims[d + 1] != value.dims[d]) return KILN_KERR_SHAPE;  // scan outputs of one shape
  }
  const int64_t bytes = Bytes(value);
  if (stack.used + bytes > stack.capacity) {
    int64_t capacity = stack.capacity * 2;
    if (capacity < stack.used + bytes) capacity = stack.used + bytes;
    if (capacity < 64) capacity = 64;
    char* grown = static_cast<char*>(buffers.Alloc(capacity));
    if (grown == nullptr) return KILN_KERR_MEMORY;
    Copy(grown, stack.data, stack.used);
    buffers.Release(stack.data);
    stack.data = grown;
    stack.capacity = capacity;
  }
  Copy(stack.data + stack.used, value.data, bytes);
  stack.used += bytes;
  ++stack.count;
  return KILN_KERR_OK;
}

struct LoopState {
  const kiln_control_call* call;
  Buffers buffers;
  int64_t num_carried, num_captured, num_scans;
  kiln_ktensor *body_in, *body_out;
  Stacked* stacks;
  bool owned_carried;  // body_in's carried values are the body's outputs (ours to release)
};

int32_t LoopIterations(LoopState& s) {
  const kiln_control_call* call = s.call;
  const kiln_ktensor* in = call->inputs;
  const int64_t trips = in[0].data != nullptr ? *static_cast<const int64_t*>(in[0].data) : INT64_MAX;
  uint8_t cond = in[1].data != nullptr ? *static_cast<const uint8_t*>(in[1].data) : 1;
  int64_t iteration = 0;
  s.body_in[0] = kiln_ktensor{&iteration, nullptr, 0, 7};
  s.body_in[1] = kiln_ktensor{&cond, nullptr, 0, 9};
  for (int64_t k = 0; k < s.num_carried + s.num_captured; ++k) s.body_in[2 + k] = in[2 + k];
  for (; iteration < trips && cond != 0; ++iteration) {
    const int32_t rc = call->bodies[0](s.body_in, s.body_out, call->exec);
    if (rc != 0) return BodyError(rc);
    cond = *static_cast<const uint8_t*>(s.body_out[0].data);
    s.buffers.ReleaseTensor(s.body_out[0]);
    for (int64_t k = 0; k < s.num_carried; ++k) {
      if (s.owned_carried) s.buffers.ReleaseTensor(s.body_in[2 + k]);
      s.body_in[2 + k] = s.body_out[1 + k];
      s.body_out[1 + k] = kiln_ktensor{nullptr, nullptr, 0, 0};
    }
    s.owned_carried = true;
    for (int64_t k = 0; k < s.num_scans; ++k) {
      kiln_ktensor& value = s.body_out[1 + s.num_carried + k];
      const int32_t append = Append(s.buffers, s.stacks[k], call->outputs[s.num_carried + k], value);
      s.buffers.ReleaseTensor(value);
      if (append != KILN_KERR_OK) return append;
    }
  }
  return KILN_KERR_OK;
}

}  // namespace

extern "C" int32_t kiln_k_control_if(const kiln_control_call* call) {
  const Buffers buffers{call->exec};
  const int64_t num_captured = call->params[0];
  const bool taken = *static_cast<const uint8_t*>(call->inputs[0].data) != 0;
  kiln_ktensor* outs = Tensors(buffers, call->num_outputs);
  if (outs == nullptr) return KILN_KERR_MEMORY;
  const int32_t rc = call->bodies[taken ? 0 : 1](call->inputs + call->num_inputs - num_captured, outs, call->exec);
  if (rc == 0) {
    for (int32_t k = 0; k < call->num_outputs; ++k) TakeOut(buffers, call->outputs[k], outs[k]);
  }
  buffers.Release(outs);
  return rc != 0 ? BodyError(rc) : KILN_KERR_OK;
}

extern "C" int32_t kiln_k_control_loop(const kiln_control_call* call) {
  LoopState s{call, Buffers{call->exec}, call->params[0], call->params[1], 0, nullptr, nullptr, nullptr, false};
  s.num_scans = call->num_outputs - s.num_carried;
  s.body_in = Tensors(s.buffers, 2 + s.num_carried + s.num_captured);
  s.body_out = Tensors(s.buffers, 1 + s.num_carried + s.num_scans);
  s.stacks = static_cast<Stacked*>(s.buffers.Alloc((s.num_scans + 1) * static_cast<int64_t>(sizeof(Stacked))));
  if (s.body_in == nullptr || s.body_out == nullptr || s.stacks == nullptr) return KILN_KERR_MEMORY;
  for (int64_t k = 0; k < s.num_scans; ++k) s.stacks[k] = Stacked{};
  int32_t rc = LoopIterations(s);
  for (int64_t k = 0; k < s.num_carried; ++k) {
    kiln_ktensor& value = s.body_in[2 + k];
    if (rc == KILN_KERR_OK && s.owned_carried) {
      TakeOut(s.buffers, call->outputs[k], value);
    } else if (rc == KILN_KERR_OK) {
      rc = CopyOut(s.buffers, call->outputs[k], value);
    } else if (s.owned_carried) {
      s.buffers.ReleaseTensor(value);
    }
  }
  for (int64_t k = 0; k < s.num_scans; ++k) {
    kiln_ktensor& out = call->outputs[s.num_carried + k];
    // (No iteration: the element dims stay as the glue set them, the known ones.)
    const_cast<int64_t*>(out.dims)[0] = s.stacks[k].count;
    out.data = s.stacks[k].data != nullptr ? s.stacks[k].data : s.buffers.Alloc(1);
    if (rc != KILN_KERR_OK) s.buffers.Release(out.data);
  }
  s.buffers.Release(s.body_in);
  s.buffers.Release(s.body_out);
  s.buffers.Release(s.stacks);
  return rc;
}

namespace {

// Scan: one run over the sequence (opset 8: one per batch entry, `batch` of `batches`).
struct ScanState {
  const kiln_control_call* call;
  Buffers buffers;
  int64_t num_states, num_scan_inputs, num_captured, num_scans;
  bool batched;
  const int64_t *in_axes, *in_reverse, *out_axes, *out_reverse;
  kiln_ktensor *body_in, *body_out;
  int64_t in_dims[8][kMaxRank];  // a slice's dims, per scan input (up to 8 share the array)
};

// View of input `i` at batch entry `batch` (opset 8: the batch dim dropped).
kiln_ktensor BatchView(const ScanState& s, const kiln_ktensor& t, int64_t batch) {
  if (!s.batched) return t;
  const int64_t bytes = t.rank > 0 && t.dims[0] > 0 ? Bytes(t) / t.dims[0] : 0;
  return kiln_ktensor{static_cast<char*>(t.data) + batch * bytes, t.dims + 1, t.rank - 1, t.dtype};
}

// Gathers slice `index` along `axis` of `x` into `dst`.
void GatherSlice(const kiln_ktensor& x, int64_t axis, int64_t index, char* dst) {
  int64_t outer = 1, inner = ElementSize(x.dtype);
  for (int32_t d = 0; d < x.rank; ++d) {
    if (d < axis) outer *= x.dims[d];
    if (d > axis) inner *= x.dims[d];
  }
  const int64_t n = x.dims[axis];
  for (int64_t o = 0; o < outer; ++o)
    Copy(dst + o * inner, static_cast<const char*>(x.data) + (o * n + index) * inner, inner);
}

// Writes `value` as slice `index` along `axis` of `out` (value's dims, `length` at axis).
void ScatterSlice(const kiln_ktensor& value, int64_t axis, int64_t index, int64_t length, char* out) {
  int64_t outer = 1, inner = ElementSize(value.dtype);
  for (int32_t d = 0; d < value.rank; ++d) {
    if (d < axis) outer *= value.dims[d];
    if (d >= axis) inner *= value.dims[d];
  }
  for (int64_t o = 0; o < outer; ++o)
    Copy(out + (o * length + index) * inner, static_cast<const char*>(value.data) + o * inner, inner);
}

// The output buffers, made when the first body outputs tell their dims.
int32_t MakeScanOutputs(ScanState& s, int64_t length, int64_t batches) {
  const kiln_control_call* call = s.call;
  for (int64_t k = 0; k < s.num_states + s.num_scans; ++k) {
    kiln_ktensor& out = call->outputs[k];
    const kiln_ktensor& value = s.body_out[k];
    int64_t* dims = const_cast<int64_t*>(out.dims);
    int32_t d = 0;
    if (s.batched) dims[d++] = batches;
    for (int32_t v = 0; v < value.rank; ++v) {
      if (k >= s.num_states && v == s.out_axes[k - s.num_states]) dims[d++] = length;
      dims[d++] = value.dims[v];
    }
    if (k >= s.num_states && s.out_axes[k - s.num_states] == value.rank) dims[d++] = length;
    if (d != out.rank) return KILN_KERR_SHAPE;
    out.data = s.buffers.Alloc(Bytes(out));
    if (out.data == nullptr) return KILN_KERR_MEMORY;
  }
  return KILN_KERR_OK;
}

int32_t ScanOnce(ScanState& s, int64_t batch, int64_t batches, char** slices) {
  const kiln_control_call* call = s.call;
  const kiln_ktensor* in = call->inputs + (s.batched ? 1 : 0);
  const kiln_ktensor first = BatchView(s, in[s.num_states], batch);
  const int64_t length = first.dims[s.in_axes[0]];
  bool owned = false;
  for (int64_t k = 0; k < s.num_states; ++k) s.body_in[k] = BatchView(s, in[k], batch);
  for (int64_t k = 0; k < s.num_captured; ++k)
    s.body_in[s.num_states + s.num_scan_inputs + k] = call->inputs[call->num_inputs - s.num_captured + k];
  int32_t rc = KILN_KERR_OK;
  for (int64_t t = 0; t < length && rc == KILN_KERR_OK; ++t) {
    for (int64_t k = 0; k < s.num_scan_inputs; ++k) {
      const kiln_ktensor x = BatchView(s, in[s.num_states + k], batch);
      const int64_t axis = s.in_axes[k];
      if (x.dims[axis] != length) return KILN_KERR_SHAPE;
      GatherSlice(x, axis, s.in_reverse[k] ? length - 1 - t : t, slices[k]);
      int64_t* dims = s.in_dims[k % 8];
      int32_t r = 0;
      for (int32_t d = 0; d < x.rank; ++d) {
        if (d != axis) dims[r++] = x.dims[d];
      }
      s.body_in[s.num_states + k] = kiln_ktensor{slices[k], dims, x.rank - 1, x.dtype};
    }
    rc = call->bodies[0](s.body_in, s.body_out, call->exec);
    if (rc != 0) return BodyError(rc);
    if (batch == 0 && t == 0) rc = MakeScanOutputs(s, length, batches);
    for (int64_t k = 0; k < s.num_scans && rc == KILN_KERR_OK; ++k) {
      kiln_ktensor& value = s.body_out[s.num_states + k];
      const kiln_ktensor out = BatchView(s, call->outputs[s.num_states + k], batch);
      const int64_t index = s.out_reverse[k] ? length - 1 - t : t;
      ScatterSlice(value, s.out_axes[k], index, length, static_cast<char*>(out.data));
    }
    for (int64_t k = 0; k < s.num_scans; ++k) s.buffers.ReleaseTensor(s.body_out[s.num_states + k]);
    for (int64_t k = 0; k < s.num_states; ++k) {
      if (owned) s.buffers.ReleaseTensor(s.body_in[k]);
      s.body_in[k] = s.body_out[k];
    }
    owned = true;
  }
  // The final states into the outputs (opset 8: at the batch entry).
  for (int64_t k = 0; k < s.num_states; ++k) {
    kiln_ktensor& out = call->outputs[k];
    if (rc == KILN_KERR_OK && out.data == nullptr) {  // no iteration made the outputs
      const kiln_ktensor init = in[k];
      SetDims(out, init);
      out.data = s.buffers.Alloc(Bytes(init));
      if (out.data == nullptr) return KILN_KERR_MEMORY;
    }
    if (rc == KILN_KERR_OK) {
      const kiln_ktensor dst = BatchView(s, out, batch);
      Copy(dst.data, s.body_in[k].data, Bytes(s.body_in[k]));
    }
    if (owned) s.buffers.ReleaseTensor(s.body_in[k]);
  }
  return rc;
}

}  // namespace

extern "C" int32_t kiln_k_control_scan(const kiln_control_call* call) {
  const int64_t* p = call->params;
  ScanState s{};
  s.call = call;
  s.buffers = Buffers{call->exec};
  s.num_states = p[0];
  s.num_scan_inputs = p[1];
  s.num_captured = p[2];
  s.batched = p[3] != 0;
  s.num_scans = call->num_outputs - s.num_states;
  s.in_axes = p + 4;
  s.in_reverse = s.in_axes + s.num_scan_inputs;
  s.out_axes = s.in_reverse + s.num_scan_inputs;
  s.out_reverse = s.out_axes + s.num_scans;
  if (s.num_scan_inputs > 8) return KILN_KERR_UNSUPPORTED;
  for (int32_t k = 0; k < call->num_outputs; ++k) call->outputs[k].data = nullptr;
  s.body_in = Tensors(s.buffers, s.num_states + s.num_scan_inputs + s.num_captured);
  s.body_out = Tensors(s.buffers, s.num_states + s.num_scans);
  char* slices[8] = {};
  const kiln_ktensor* in = call->inputs + (s.batched ? 1 : 0);
  const int64_t batches = s.batched ? in[s.num_states].dims[0] : 1;
  int32_t rc = s.body_in != nullptr && s.body_out != nullptr ? KILN_KERR_OK : KILN_KERR_MEMORY;
  for (int64_t k = 0; k < s.num_scan_inputs && rc == KILN_KERR_OK; ++k) {
    const kiln_ktensor x = BatchView(s, in[s.num_states + k], 0);
    const int64_t n = x.rank > 0 ? x.dims[s.in_axes[k]] : 0;
    slices[k] = static_cast<char*>(s.buffers.Alloc(n > 0 ? Bytes(x) / n : 1));
    if (slices[k] == nullptr) rc = KILN_KERR_MEMORY;
  }
  for (int64_t b = 0; b < batches && rc == KILN_KERR_OK; ++b) rc = ScanOnce(s, b, batches, slices);
  // No iteration at all: empty scan outputs, their dims the known ones the glue set (0 for
  // the scanned axis, whose length is 0, and for what only a body would have told).
  for (int64_t k = s.num_states; k < call->num_outputs && rc == KILN_KERR_OK; ++k) {
    kiln_ktensor& out = call->outputs[k];
    if (out.data != nullptr) continue;
    if (s.batched && out.rank > 1) const_cast<int64_t*>(out.dims)[1] = 0;
    if (!s.batched) const_cast<int64_t*>(out.dims)[s.out_axes[k - s.num_states]] = 0;
    out.data = s.buffers.Alloc(1);
  }
  for (int64_t k = 0; k < s.num_scan_inputs; ++k) s.buffers.Release(slices[k]);
  s.buffers.Release(s.body_in);
  s.buffers.Release(s.body_out);
  if (rc != KILN_KERR_OK) {
    for (int32_t k = 0; k < call->num_outputs; ++k) s.buffers.Release(call->outputs[k].data);
  }
  return rc;
}

namespace {

// SequenceMap: the body at each position, its own inputs' elements there (a tensor input
// whole) and the captured values; each body output gathered into an output sequence.
struct MapState {
  const kiln_control_call* call;
  Buffers buffers;
  int64_t own, length;
  kiln_ktensor *body_in, *results;  // results: per position, the body's outputs
};

int32_t MapPositions(MapState& s) {
  const kiln_control_call* call = s.call;
  for (int64_t k = s.own; k < call->num_inputs; ++k) s.body_in[k] = call->inputs[k];
  for (int64_t i = 0; i < s.length; ++i) {
    for (int64_t k = 0; k < s.own; ++k) {
      const kiln_ktensor& in = call->inputs[k];
      s.body_in[k] = kiln_kernels::IsSequence(in) ? kiln_kernels::ElementOf(in, i) : in;
    }
    const int32_t rc = call->bodies[0](s.body_in, s.results + i * call->num_outputs, call->exec);
    if (rc != 0) return BodyError(rc);
  }
  return KILN_KERR_OK;
}

}  // namespace

extern "C" int32_t kiln_k_control_sequence_map(const kiln_control_call* call) {
  MapState s{call, Buffers{call->exec}, call->num_inputs - call->params[0], 0, nullptr, nullptr};
  if (s.own < 1 || !kiln_kernels::IsSequence(call->inputs[0])) return KILN_KERR_UNSUPPORTED;
  s.length = kiln_kernels::Length(call->inputs[0]);
  for (int64_t k = 1; k < s.own; ++k) {
    const kiln_ktensor& in = call->inputs[k];
    if (kiln_kernels::IsSequence(in) && kiln_kernels::Length(in) != s.length) return KILN_KERR_SHAPE;
  }
  for (int32_t k = 0; k < call->num_outputs; ++k) call->outputs[k].data = nullptr;
  s.body_in = Tensors(s.buffers, call->num_inputs);
  s.results = Tensors(s.buffers, s.length * call->num_outputs + 1);
  int32_t rc = s.body_in != nullptr && s.results != nullptr ? MapPositions(s) : KILN_KERR_MEMORY;
  for (int32_t k = 0; k < call->num_outputs && rc == KILN_KERR_OK; ++k) {
    kiln_ktensor seq{nullptr, nullptr, 0, 0};
    rc = kiln_kernels::CopySequence(call->exec, &seq, s.length, [&](int64_t i) -> const kiln_ktensor& {
      return s.results[i * call->num_outputs + k];
    });
    if (rc != KILN_KERR_OK) break;
    kiln_ktensor& out = call->outputs[k];
    out.data = seq.data;
    if (out.rank > 0) const_cast<int64_t*>(out.dims)[0] = s.length;
  }
  for (int64_t i = 0; s.results != nullptr && i < s.length * call->num_outputs; ++i) {
    s.buffers.ReleaseTensor(s.results[i]);
  }
  s.buffers.Release(s.body_in);
  s.buffers.Release(s.results);
  if (rc != KILN_KERR_OK) {
    for (int32_t k = 0; k < call->num_outputs; ++k) {
      s.buffers.Release(call->outputs[k].data);
      call->outputs[k].data = nullptr;
    }
  }
  return rc;
}
