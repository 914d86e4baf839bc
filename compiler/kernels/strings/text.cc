// The string kernels of opsets 19 and 20: Equal on strings and StringConcat (numpy
// broadcasting, texts compared and joined byte for byte) and StringSplit with its shape
// function. StringSplit follows ONNX Runtime where the spec leaves room: an empty text has
// no pieces, an empty delimiter splits on runs of spaces (' ' only), and the rest after
// `maxsplit` splits loses its trailing spaces.
#include "kernel_common.h"
#include "kiln/kernels/strings.h"

using namespace kiln_kernels;

namespace {

const char kEmptyText[] = "";

int64_t Count(const kiln_ktensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.rank; ++d) n *= t.dims[d];
  return n;
}

int64_t TextLength(const char* s) {
  int64_t n = 0;
  while (s[n] != 0) ++n;
  return n;
}

char* AllocText(const kiln_kcall* call, int64_t bytes) {
  if (call->exec == nullptr || call->exec->alloc_text == nullptr) return nullptr;
  return call->exec->alloc_text(call->exec->text_arena, bytes > 0 ? bytes : 1);
}

// Calls body(a, b, out_index) for every output element of a binary op whose inputs 0 and 1
// broadcast (numpy rules) to output 0.
template <typename Body>
int32_t ForEachBroadcast(const kiln_kcall* call, const Body& body) {
  const kiln_ktensor &a = call->inputs[0], &b = call->inputs[1], &out = call->outputs[0];
  if (out.rank > kMaxRank || a.rank > out.rank || b.rank > out.rank) return KILN_KERR_SHAPE;
  const int64_t n = Count(out);
  if (n == 0) return KILN_KERR_OK;
  int64_t a_strides[kMaxRank], b_strides[kMaxRank];
  BroadcastStrides(a, out.dims, out.rank, a_strides);
  BroadcastStrides(b, out.dims, out.rank, b_strides);
  const char* const* pa = static_cast<const char* const*>(a.data);
  const char* const* pb = static_cast<const char* const*>(b.data);
  IndexWalker walker(out.dims, out.rank);
  int64_t offsets[2] = {0, 0};
  const int64_t* const strides[2] = {a_strides, b_strides};
  for (int64_t i = 0; i < n; ++i) {
    body(pa[offsets[0]], pb[offsets[1]], i);
    walker.Next(offsets, strides);
  }
  return KILN_KERR_OK;
}

bool SameText(const char* a, const char* b) {
  for (; *a != 0 && *a == *b; ++a, ++b) {
  }
  return *a == *b;
}

// The first `delimiter` in text[from, n), or -1.
int64_t Find(const char* text, int64_t n, int64_t from, const char* delimiter, int64_t length) {
  for (int64_t i = from; i + length <= n; ++i) {
    int64_t k = 0;
    while (k < length && text[i + k] == delimiter[k]) ++k;
    if (k == length) return i;
  }
  return -1;
}

// Calls emit(begin, length) for each piece of `text` in order; returns their count.
template <typename Emit>
int64_t SplitPieces(const char* text, const char* delimiter, int64_t delimiter_length, int64_t maxsplit,
                    const Emit& emit) {
  const int64_t n = TextLength(text);
  if (n == 0) return 0;
  int64_t count = 0, pos = 0;
  if (delimiter_length > 0) {
    for (;; ++count) {
      const int64_t next = count == maxsplit ? -1 : Find(text, n, pos, delimiter, delimiter_length);
      if (next < 0) {
        emit(text + pos, n - pos);
        return count + 1;
      }
      emit(text + pos, next - pos);
      pos = next + delimiter_length;
    }
  }
  while (pos < n && text[pos] == ' ') ++pos;
  for (; pos < n; ++count) {
    if (count == maxsplit) {  // the rest, without its trailing spaces
      int64_t end = n;
      while (text[end - 1] == ' ') --end;
      emit(text + pos, end - pos);
      return count + 1;
    }
    int64_t end = pos;
    while (end < n && text[end] != ' ') ++end;
    emit(text + pos, end - pos);
    pos = end;
    while (pos < n && text[pos] == ' ') ++pos;
  }
  return count;
}

struct Splitter {
  const char* delimiter;
  int64_t delimiter_length, maxsplit;
  int64_t Pieces(const char* text) const {
    return SplitPieces(text, delimiter, delimiter_length, maxsplit, [](const char*, int64_t) {});
  }
};

Splitter SplitterOf(const kiln_kcall* call, const kiln_string_split_params& p) {
  const char* delimiter = call->num_inputs > 1 ? static_cast<const char*>(call->inputs[1].data) : nullptr;
  if (delimiter == nullptr) delimiter = kEmptyText;
  return Splitter{delimiter, TextLength(delimiter), p.maxsplit};
}

}  // namespace

// Equal on strings: true where the texts are the same bytes.
KILN_KERNEL(string_equal) {
  bool* po = static_cast<bool*>(call->outputs[0].data);
  return ForEachBroadcast(call, [&](const char* a, const char* b, int64_t i) { po[i] = SameText(a, b); });
}

// StringConcat: X's text followed by Y's, per broadcast element.
KILN_KERNEL(string_concat) {
  int64_t bytes = 0;
  if (int32_t rc = ForEachBroadcast(
          call, [&](const char* a, const char* b, int64_t) { bytes += TextLength(a) + TextLength(b) + 1; });
      rc != KILN_KERR_OK || bytes == 0) {
    return rc;
  }
  char* texts = AllocText(call, bytes);
  if (texts == nullptr) return KILN_KERR_MEMORY;
  const char** po = static_cast<const char**>(call->outputs[0].data);
  return ForEachBroadcast(call, [&](const char* a, const char* b, int64_t i) {
    po[i] = texts;
    for (; *a != 0; ++a) *texts++ = *a;
    for (; *b != 0; ++b) *texts++ = *b;
    *texts++ = 0;
  });
}

// StringSplit: Y [X dims..., K] holds each element's pieces, padded with ""; Z [X dims] their
// counts. K (output 0's last dim) comes from shape_string_split.
KILN_KERNEL(string_split) {
  KILN_PARAMS(kiln_string_split_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &y = call->outputs[0];
  const Splitter splitter = SplitterOf(call, p);
  const char* const* pi = static_cast<const char* const*>(x.data);
  const int64_t n = Count(x), width = y.rank == x.rank + 1 ? y.dims[x.rank] : -1;
  if (width < 0 || (call->num_outputs > 1 && call->outputs[1].rank != x.rank)) return KILN_KERR_SHAPE;
  int64_t bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pieces = splitter.Pieces(pi[i]);
    if (pieces > width) return KILN_KERR_SHAPE;
    bytes += TextLength(pi[i]) + pieces;
  }
  char* texts = bytes > 0 ? AllocText(call, bytes) : nullptr;
  if (bytes > 0 && texts == nullptr) return KILN_KERR_MEMORY;
  const char** py = static_cast<const char**>(y.data);
  int64_t* counts = call->num_outputs > 1 ? static_cast<int64_t*>(call->outputs[1].data) : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const char** row = py + i * width;
    int64_t k = 0;
    const int64_t pieces = SplitPieces(pi[i], splitter.delimiter, splitter.delimiter_length, splitter.maxsplit,
                                       [&](const char* begin, int64_t length) {
                                         row[k++] = texts;
                                         for (int64_t c = 0; c < length; ++c) *texts++ = begin[c];
                                         *texts++ = 0;
                                       });
    if (counts != nullptr) counts[i] = pieces;
    for (; k < width; ++k) row[k] = kEmptyText;
  }
  return KILN_KERR_OK;
}

// StringSplit's output dims: Y [X dims..., most pieces of any element (0 for none)], Z [X
// dims]; the last dim -1 while X has no data.
KILN_KERNEL(shape_string_split) {
  KILN_PARAMS(kiln_string_split_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  if (call->num_outputs < 1 || call->outputs[0].rank != x.rank + 1) return KILN_KERR_SHAPE;
  int64_t* y = const_cast<int64_t*>(call->outputs[0].dims);
  for (int32_t d = 0; d < x.rank; ++d) y[d] = x.dims[d];
  if (call->num_outputs > 1 && call->outputs[1].rank == x.rank) {
    int64_t* z = const_cast<int64_t*>(call->outputs[1].dims);
    for (int32_t d = 0; d < x.rank; ++d) z[d] = x.dims[d];
  }
  int64_t n = 1;
  for (int32_t d = 0; d < x.rank; ++d) n = x.dims[d] < 0 || n < 0 ? -1 : n * x.dims[d];
  if (n < 0 || (x.data == nullptr && n > 0)) {
    y[x.rank] = -1;
    return KILN_KERR_OK;
  }
  const Splitter splitter = SplitterOf(call, p);
  const char* const* pi = static_cast<const char* const*>(x.data);
  int64_t width = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pieces = splitter.Pieces(pi[i]);
    width = pieces > width ? pieces : width;
  }
  y[x.rank] = width;
  return KILN_KERR_OK;
}
