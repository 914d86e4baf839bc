// The string kernels: Cast to and from strings and StringNormalizer. A string tensor's
// data is an array of `const char*` (kernel_abi.h); the texts a kernel makes come from
// exec->alloc_text and live until the session's next run.
#include "kiln/kernels/strings.h"
#include "kernel_common.h"
#include "kiln/kernels/fp16.h"
#include "number_text.h"

using namespace kiln_kernels;

namespace {

constexpr int64_t kNumberTextBytes = 32;  // the longest number text is 26 characters
const char kEmptyText[] = "";

int64_t Count(const kiln_ktensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.rank; ++d) n *= t.dims[d];
  return n;
}

char* AllocText(const kiln_kcall* call, int64_t bytes) {
  if (call->exec == nullptr || call->exec->alloc_text == nullptr) return nullptr;
  return call->exec->alloc_text(call->exec->text_arena, bytes);
}

const text::FloatFormat* FormatOf(int32_t dtype) {
  switch (dtype) {
    case kF32: return &text::kF32Format;
    case kF64: return &text::kF64Format;
    case kF16: return &text::kF16Format;
    case kBF16: return &text::kBF16Format;
    default: return nullptr;
  }
}

// Element i of a numeric tensor as text, NUL-terminated, at `out`.
int32_t WriteElement(const kiln_ktensor& x, int64_t i, char* out) {
  char* end = out;
  const text::FloatFormat* format = FormatOf(x.dtype);
  if (x.dtype == kF16 || x.dtype == kBF16) {
    const uint16_t bits = static_cast<const uint16_t*>(x.data)[i];
    end = text::WriteFloat(x.dtype == kF16 ? kiln_half_to_float(bits) : kiln_bfloat16_to_float(bits), *format, out);
  } else if (format != nullptr) {
    end = text::WriteFloat(LoadAsDouble(x.data, x.dtype, i), *format, out);
  } else if (x.dtype == kBool) {
    const char* word = static_cast<const bool*>(x.data)[i] ? "True" : "False";
    while (*word != 0) *end++ = *word++;
  } else if (x.dtype == kU64) {
    end = text::WriteUnsigned(static_cast<const uint64_t*>(x.data)[i], out);
  } else if (x.dtype == kI8 || x.dtype == kI16 || x.dtype == kI32 || x.dtype == kI64) {
    const int64_t v = LoadAsInt64(x.data, x.dtype, i);
    if (v < 0) *end++ = '-';
    end = text::WriteUnsigned(v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v), end);
  } else if (x.dtype == kU8 || x.dtype == kU16 || x.dtype == kU32) {
    end = text::WriteUnsigned(static_cast<uint64_t>(LoadAsInt64(x.data, x.dtype, i)), out);
  } else {
    return KILN_KERR_DTYPE;
  }
  *end = 0;
  return KILN_KERR_OK;
}

// Stores `v` (parsed in the output's own precision for floats) as element i of `out`;
// integers truncate toward zero, as Cast from a float does.
int32_t StoreParsed(const kiln_ktensor& out, int64_t i, double v) {
  void* data = out.data;
  const bool finite = isfinite(v);
  const double whole = finite ? trunc(v) : 0;
  switch (out.dtype) {
    case kF32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case kF64: static_cast<double*>(data)[i] = v; break;
    case kF16: static_cast<uint16_t*>(data)[i] = kiln_float_to_half(static_cast<float>(v)); break;
    case kBF16: static_cast<uint16_t*>(data)[i] = kiln_float_to_bfloat16(static_cast<float>(v)); break;
    case kBool: static_cast<bool*>(data)[i] = v != 0; break;
    case kI8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(static_cast<int64_t>(whole)); break;
    case kU8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(static_cast<int64_t>(whole)); break;
    case kI16: static_cast<int16_t*>(data)[i] = static_cast<int16_t>(static_cast<int64_t>(whole)); break;
    case kU16: static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(static_cast<int64_t>(whole)); break;
    case kI32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(static_cast<int64_t>(whole)); break;
    case kU32: static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(static_cast<int64_t>(whole)); break;
    case kI64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(whole); break;
    case kU64:
      static_cast<uint64_t*>(data)[i] = whole >= 9223372036854775808.0
                                            ? static_cast<uint64_t>(whole)
                                            : static_cast<uint64_t>(static_cast<int64_t>(whole));
      break;
    default: return KILN_KERR_DTYPE;
  }
  return KILN_KERR_OK;
}

char AsciiUpper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool SameText(const char* a, const char* b, bool case_sensitive) {
  for (; *a != 0 && *b != 0; ++a, ++b) {
    if (case_sensitive ? *a != *b : AsciiLower(*a) != AsciiLower(*b)) return false;
  }
  return *a == *b;
}

// Whether `text` is one of the NUL-terminated words of input 1.
bool IsStopword(const char* text, const kiln_ktensor& words, const kiln_string_params& p) {
  const char* word = static_cast<const char*>(words.data);
  for (int64_t k = 0; k < p.num_stopwords && word != nullptr; ++k) {
    if (SameText(text, word, p.case_sensitive != 0)) return true;
    while (*word != 0) ++word;
    ++word;
  }
  return false;
}

int64_t TextLength(const char* s) {
  int64_t n = 0;
  while (s[n] != 0) ++n;
  return n;
}

}  // namespace

// Cast from any numeric type (bool included) to strings: floats as numpy's str() writes
// them (shortest round trip in their own precision), integers in decimal, "True"/"False".
KILN_KERNEL(cast_to_string) {
  const kiln_ktensor &x = call->inputs[0], &out = call->outputs[0];
  const int64_t n = Count(out);
  if (n == 0) return KILN_KERR_OK;
  char* texts = AllocText(call, n * kNumberTextBytes);
  if (texts == nullptr) return KILN_KERR_MEMORY;
  const char** po = static_cast<const char**>(out.data);
  for (int64_t i = 0; i < n; ++i) {
    char* text = texts + i * kNumberTextBytes;
    if (int32_t rc = WriteElement(x, i, text); rc != KILN_KERR_OK) return rc;
    po[i] = text;
  }
  return KILN_KERR_OK;
}

// Cast from strings to a numeric type (ONNX's rule: text/number_text.h ParseNumber); a
// text that is no number fails the call (KILN_KERR_VALUE).
KILN_KERNEL(cast_from_string) {
  const kiln_ktensor &x = call->inputs[0], &out = call->outputs[0];
  const char* const* pi = static_cast<const char* const*>(x.data);
  const text::FloatFormat* own = FormatOf(out.dtype);
  const text::FloatFormat& format = own != nullptr ? *own : text::kF64Format;
  for (int64_t i = 0, n = Count(out); i < n; ++i) {
    double v = 0;
    if (pi[i] == nullptr || !text::ParseNumber(pi[i], format, &v)) return KILN_KERR_VALUE;
    if (int32_t rc = StoreParsed(out, i, v); rc != KILN_KERR_OK) return rc;
  }
  return KILN_KERR_OK;
}

// StringNormalizer: the inputs that are not stopwords, in order, case changed (ASCII
// letters only: other bytes, UTF-8 included, stay); one "" when none is left. Output
// count from shape_string_normalizer.
KILN_KERNEL(string_normalizer) {
  KILN_PARAMS(kiln_string_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &words = call->inputs[1], &out = call->outputs[0];
  const char* const* pi = static_cast<const char* const*>(x.data);
  const char** po = static_cast<const char**>(out.data);
  const int64_t n = Count(x), capacity = Count(out);
  int64_t bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!IsStopword(pi[i], words, p)) bytes += TextLength(pi[i]) + 1;
  }
  char* texts = nullptr;
  if (p.case_change != KILN_CASE_NONE && bytes > 0) {
    texts = AllocText(call, bytes);
    if (texts == nullptr) return KILN_KERR_MEMORY;
  }
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (IsStopword(pi[i], words, p)) continue;
    if (kept >= capacity) return KILN_KERR_SHAPE;
    if (texts == nullptr) {
      po[kept++] = pi[i];
      continue;
    }
    po[kept++] = texts;
    for (const char* s = pi[i]; *s != 0; ++s)
      *texts++ = p.case_change == KILN_CASE_UPPER ? AsciiUpper(*s) : AsciiLower(*s);
    *texts++ = 0;
  }
  if (kept == 0 && capacity == 1) po[kept++] = kEmptyText;
  return kept == capacity ? KILN_KERR_OK : KILN_KERR_SHAPE;
}

// StringNormalizer's output dims: [kept] or [1, kept] (kept at least 1), -1 without data.
KILN_KERNEL(shape_string_normalizer) {
  KILN_PARAMS(kiln_string_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &words = call->inputs[1];
  int64_t* dims = const_cast<int64_t*>(call->outputs[0].dims);
  const int32_t rank = call->outputs[0].rank;
  if (rank < 1 || rank > 2) return KILN_KERR_SHAPE;
  if (rank == 2) dims[0] = 1;
  const int64_t n = Count(x);
  if (x.data == nullptr || n < 0) {
    dims[rank - 1] = -1;
    return KILN_KERR_OK;
  }
  const char* const* pi = static_cast<const char* const*>(x.data);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += IsStopword(pi[i], words, p) ? 0 : 1;
  dims[rank - 1] = kept > 0 ? kept : 1;
  return KILN_KERR_OK;
}
