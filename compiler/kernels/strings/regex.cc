// RegexFullMatch: runs the program compiler/ops/regex_program.cc made of the pattern (a
// Thompson NFA, kiln/kernels/strings.h) over each text's code points, all threads in step,
// so time is linear in the text and the program. No captures: a full match needs none, and
// greedy and lazy repeats accept the same texts. Bytes that are not UTF-8 match nothing.
#include "kernel_common.h"
#include "kiln/kernels/strings.h"

using namespace kiln_kernels;

namespace {

constexpr int32_t kNoCodePoint = -2;   // before the start, after the end
constexpr int32_t kBadCodePoint = -1;  // a byte that starts no UTF-8 sequence here

// The code point at `s` (not at the terminating NUL) and its length in bytes.
int32_t Decode(const unsigned char* s, int32_t* length) {
  const unsigned char c = s[0];
  *length = 1;
  if (c < 0x80) return c;
  int32_t need = 0, value = 0, least = 0;
  if (c >= 0xC2 && c <= 0xDF) need = 1, value = c & 0x1F, least = 0x80;
  if (c >= 0xE0 && c <= 0xEF) need = 2, value = c & 0x0F, least = 0x800;
  if (c >= 0xF0 && c <= 0xF4) need = 3, value = c & 0x07, least = 0x10000;
  if (need == 0) return kBadCodePoint;
  for (int32_t i = 1; i <= need; ++i) {
    if ((s[i] & 0xC0) != 0x80) return kBadCodePoint;
    value = (value << 6) | (s[i] & 0x3F);
  }
  if (value < least || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return kBadCodePoint;
  *length = need + 1;
  return value;
}

bool IsWord(int32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

class Machine {
 public:
  explicit Machine(const int32_t* program) : program_(program), size_(program[0]) {}

  bool FullMatch(const char* text) {
    const unsigned char* s = reinterpret_cast<const unsigned char*>(text);
    int32_t length = 0;
    int32_t previous = kNoCodePoint, current = *s != 0 ? Decode(s, &length) : kNoCodePoint;
    int16_t* now = lists_[0];
    int16_t* next = lists_[1];
    int32_t count = 0;
    NextGeneration();  // marks of the last text's last step do not hold here
    Add(now, &count, 0, previous, current);
    while (current != kNoCodePoint && count > 0) {
      s += length;
      const int32_t following = *s != 0 ? Decode(s, &length) : kNoCodePoint;
      int32_t next_count = 0;
      NextGeneration();
      for (int32_t t = 0; t < count; ++t) {
        if (Accepts(now[t], current)) Add(next, &next_count, now[t] + 1, current, following);
      }
      int16_t* swap = now;
      now = next;
      next = swap;
      count = next_count;
      previous = current;
      current = following;
    }
    for (int32_t t = 0; t < count; ++t) {
      if (Op(now[t]) == KILN_REGEX_MATCH) return true;
    }
    return false;
  }

 private:
  // A new step: the marks of earlier ones no longer count (cleared when the counter wraps).
  void NextGeneration() {
    if (++generation_ != 0) return;
    for (uint32_t& mark : seen_) mark = 0;
    generation_ = 1;
  }
  int32_t Op(int32_t pc) const { return program_[1 + 3 * pc]; }
  int32_t A(int32_t pc) const { return program_[1 + 3 * pc + 1]; }
  int32_t B(int32_t pc) const { return program_[1 + 3 * pc + 2]; }

  bool Accepts(int32_t pc, int32_t c) const {
    if (c < 0) return false;
    if (Op(pc) == KILN_REGEX_CHAR) return A(pc) == c;
    if (Op(pc) != KILN_REGEX_CLASS) return false;
    const int32_t* ranges = program_ + A(pc);
    for (int32_t r = 0; r < B(pc); ++r) {
      if (c >= ranges[2 * r] && c <= ranges[2 * r + 1]) return true;
    }
    return false;
  }

  // Whether assertion `kind` holds between code points `before` and `after`.
  static bool Holds(int32_t kind, int32_t before, int32_t after) {
    switch (kind) {
      case KILN_REGEX_BEGIN_TEXT: return before == kNoCodePoint;
      case KILN_REGEX_END_TEXT: return after == kNoCodePoint;
      case KILN_REGEX_BEGIN_LINE: return before == kNoCodePoint || before == '\n';
      case KILN_REGEX_END_LINE: return after == kNoCodePoint || after == '\n';
      case KILN_REGEX_WORD_BOUNDARY: return IsWord(before) != IsWord(after);
      case KILN_REGEX_NOT_WORD_BOUNDARY: return IsWord(before) == IsWord(after);
      default: return false;
    }
  }

  // Adds the threads pc leads to without consuming (jumps, splits, assertions that hold
  // between `before` and `after`) to `list`, each once per step.
  void Add(int16_t* list, int32_t* count, int32_t start, int32_t before, int32_t after) {
    int32_t depth = 0;
    stack_[depth++] = static_cast<int16_t>(start);
    while (depth > 0) {
      const int32_t pc = stack_[--depth];
      if (pc < 0 || pc >= size_ || seen_[pc] == generation_) continue;
      seen_[pc] = generation_;
      switch (Op(pc)) {
        case KILN_REGEX_JUMP: stack_[depth++] = static_cast<int16_t>(A(pc)); break;
        case KILN_REGEX_SPLIT:
          stack_[depth++] = static_cast<int16_t>(B(pc));
          stack_[depth++] = static_cast<int16_t>(A(pc));
          break;
        case KILN_REGEX_ASSERT:
          if (Holds(A(pc), before, after)) stack_[depth++] = static_cast<int16_t>(pc + 1);
          break;
        default: list[(*count)++] = static_cast<int16_t>(pc);
      }
    }
  }

  const int32_t* program_;
  int32_t size_;
  uint32_t generation_ = 1;
  // A pc is expanded once per step and pushes at most two (a split's targets), so 2 * size + 1
  // bounds the stack; a pc enters a list at most once per step. About 24 KiB in all: pcs fit
  // 16 bits.
  int16_t stack_[2 * KILN_REGEX_MAX_INSTRUCTIONS + 1];
  int16_t lists_[2][KILN_REGEX_MAX_INSTRUCTIONS];
  uint32_t seen_[KILN_REGEX_MAX_INSTRUCTIONS] = {};
};

}  // namespace

// RegexFullMatch: output[i] = whether input 0's text i matches the program (input 1) whole.
KILN_KERNEL(regex_full_match) {
  const kiln_ktensor &x = call->inputs[0], &program = call->inputs[1], &out = call->outputs[0];
  const int32_t* code = static_cast<const int32_t*>(program.data);
  if (code == nullptr || code[0] <= 0 || code[0] > KILN_REGEX_MAX_INSTRUCTIONS) return KILN_KERR_UNSUPPORTED;
  int64_t n = 1;
  for (int32_t d = 0; d < out.rank; ++d) n *= out.dims[d];
  const char* const* texts = static_cast<const char* const*>(x.data);
  bool* po = static_cast<bool*>(out.data);
  Machine machine(code);
  for (int64_t i = 0; i < n; ++i) po[i] = machine.FullMatch(texts[i]);
  return KILN_KERR_OK;
}
