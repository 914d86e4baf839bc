// RegexFullMatch's pattern: parsed by RE2's rules (RE2's default options, as ONNX Runtime
// uses them: Perl classes and flags, `.` without \n, ^ and $ at the text's ends unless
// (?m)) into a small tree, then compiled to the Thompson NFA program of
// kiln/kernels/strings.h. What Kiln does not take is refused with its byte offset: Unicode
// classes (\p, \P), \C, and (?i) on non-ASCII characters (their case folding needs Unicode
// tables; ASCII folds as RE2 does, K and S with the Kelvin sign and the long s).
#include "regex_program.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/kernels/strings.h"

namespace kiln::ops {
namespace {

using Ranges = std::vector<std::pair<int32_t, int32_t>>;
constexpr int32_t kMaxRune = 0x10FFFF;
constexpr int kMaxRepeat = 1000;  // RE2's limit on a count and on nested counts' product
constexpr int kMaxDepth = 1000;   // nested groups
constexpr int32_t kKelvin = 0x212A, kLongS = 0x17F;

struct Regex {
  enum Kind { kEmpty, kChar, kClass, kAssert, kConcat, kAlternate, kRepeat } kind = kEmpty;
  int32_t value = 0;  // kChar: the code point; kAssert: a kiln_regex_assertion
  Ranges ranges;      // kClass: sorted, disjoint
  std::vector<Regex> children;
  int min = 0, max = 0;  // kRepeat: max -1 for no bound
};

struct Flags {
  bool fold = false, multiline = false, dot_newline = false;
};

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges Negate(const Ranges& r) {
  Ranges out;
  int32_t next = 0;
  for (const auto& [lo, hi] : Normalize(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxRune) out.emplace_back(next, kMaxRune);
  return out;
}

bool Contains(const Ranges& r, int32_t c) {
  return std::any_of(r.begin(), r.end(), [c](const auto& range) { return c >= range.first && c <= range.second; });
}

// `r` with each ASCII letter's other case (and k, s with U+212A, U+017F) added.
Ranges Fold(Ranges r) {
  Ranges added;
  for (const auto& [lo, hi] : r) {
    for (int32_t c = std::max(lo, int32_t{'A'}); c <= std::min(hi, int32_t{'Z'}); ++c)
      added.emplace_back(c + 32, c + 32);
    for (int32_t c = std::max(lo, int32_t{'a'}); c <= std::min(hi, int32_t{'z'}); ++c)
      added.emplace_back(c - 32, c - 32);
  }
  r.insert(r.end(), added.begin(), added.end());
  if (Contains(r, 'k') || Contains(r, kKelvin)) r.insert(r.end(), {{'k', 'k'}, {'K', 'K'}, {kKelvin, kKelvin}});
  if (Contains(r, 's') || Contains(r, kLongS)) r.insert(r.end(), {{'s', 's'}, {'S', 'S'}, {kLongS, kLongS}});
  return Normalize(std::move(r));
}

// A Perl (\d \s \w) or POSIX ([:alpha:]) class by name, its ASCII ranges; empty if unknown.
Ranges NamedClass(std::string_view name) {
  static const std::pair<const char*, Ranges> kClasses[] = {
      {"d", {{'0', '9'}}},
      {"s", {{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}},
      {"w", {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}},
      {"alnum", {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}}},
      {"alpha", {{'A', 'Z'}, {'a', 'z'}}},
      {"ascii", {{0, 0x7F}}},
      {"blank", {{'\t', '\t'}, {' ', ' '}}},
      {"cntrl", {{0, 0x1F}, {0x7F, 0x7F}}},
      {"digit", {{'0', '9'}}},
      {"graph", {{'!', '~'}}},
      {"lower", {{'a', 'z'}}},
      {"print", {{' ', '~'}}},
      {"punct", {{'!', '/'}, {':', '@'}, {'[', '`'}, {'{', '~'}}},
      {"space", {{'\t', '\r'}, {' ', ' '}}},
      {"upper", {{'A', 'Z'}}},
      {"word", {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}},
      {"xdigit", {{'0', '9'}, {'A', 'F'}, {'a', 'f'}}},
  };
  for (const auto& [known, ranges] : kClasses) {
    if (name == known) return ranges;
  }
  return {};
}

// A named class under `flags`, negated (\D, [:^alpha:]) as RE2 does: fold, then negate.
Ranges NamedRanges(std::string_view name, bool negated, const Flags& flags) {
  Ranges r = NamedClass(name);
  if (flags.fold) r = Fold(r);
  return negated ? Negate(r) : Normalize(r);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsWordByte(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  absl::StatusOr<Regex> Parse() {
    Flags flags;
    KILN_ASSIGN_OR_RETURN(Regex re, ParseAlternation(flags, 0));
    if (pos_ < p_.size()) return Error(pos_, "unexpected )");
    return re;
  }

 private:
  absl::Status Error(size_t at, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("at byte ", at, ": ", what));
  }
  std::string Text(size_t begin, size_t end) const { return std::string(p_.substr(begin, end - begin)); }
  char Peek(size_t k = 0) const { return pos_ + k < p_.size() ? p_[pos_ + k] : '\0'; }
  bool More(size_t k = 0) const { return pos_ + k < p_.size(); }

  // The UTF-8 code point at pos_, consumed.
  absl::StatusOr<int32_t> NextRune() {
    const auto* s = reinterpret_cast<const unsigned char*>(p_.data());
    const size_t at = pos_;
    const unsigned char c = s[pos_];
    int need = 0;
    int32_t value = c, least = 0;
    if (c >= 0x80) {
      if (c >= 0xC2 && c <= 0xDF) need = 1, value = c & 0x1F, least = 0x80;
      if (c >= 0xE0 && c <= 0xEF) need = 2, value = c & 0x0F, least = 0x800;
      if (c >= 0xF0 && c <= 0xF4) need = 3, value = c & 0x07, least = 0x10000;
      if (need == 0) return Error(at, "invalid UTF-8");
      for (int i = 1; i <= need; ++i) {
        if (at + i >= p_.size() || (s[at + i] & 0xC0) != 0x80) return Error(at, "invalid UTF-8");
        value = (value << 6) | (s[at + i] & 0x3F);
      }
      if (value < least || value > kMaxRune || (value >= 0xD800 && value <= 0xDFFF)) {
        return Error(at, "invalid UTF-8");
      }
    }
    pos_ = at + need + 1;
    return value;
  }

  absl::StatusOr<Regex> Literal(int32_t c, const Flags& flags, size_t at) const {
    Regex re;
    const bool ascii_letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!flags.fold || (c < 0x80 && !ascii_letter)) {
      re.kind = Regex::kChar;
      re.value = c;
      return re;
    }
    if (c >= 0x80 && c != kKelvin && c != kLongS) {
      return Error(at, "case-insensitive matching of a non-ASCII character is not supported");
    }
    re.kind = Regex::kClass;
    re.ranges = Fold({{c, c}});
    return re;
  }

  static Regex Assert(int32_t kind) {
    Regex re;
    re.kind = Regex::kAssert;
    re.value = kind;
    return re;
  }
  static Regex Class(Ranges ranges) {
    Regex re;
    re.kind = Regex::kClass;
    re.ranges = std::move(ranges);
    return re;
  }

  absl::StatusOr<Regex> ParseAlternation(Flags& flags, int depth);
  absl::Status ParseAtom(Flags& flags, int depth, std::vector<Regex>& items, bool* repeat);
  absl::Status ParseRepeat(std::vector<Regex>& items, bool last_repeat, bool* parsed);
  absl::Status ParseGroup(Flags& flags, int depth, std::vector<Regex>& items);
  absl::StatusOr<Regex> ParseClass(const Flags& flags);
  absl::Status ParseClassItem(const Flags& flags, Ranges& ranges, size_t class_start);
  absl::StatusOr<int32_t> ParseEscape();
  absl::Status ParseBackslash(const Flags& flags, std::vector<Regex>& items);
  absl::Status CheckRepeatProduct(const Regex& re, int budget, size_t at) const;

  std::string_view p_;
  size_t pos_ = 0;
  std::vector<std::string> names_;
};

absl::StatusOr<Regex> Parser::ParseAlternation(Flags& flags, int depth) {
  if (depth > kMaxDepth) return Error(pos_, absl::StrCat("groups nest deeper than ", kMaxDepth));
  Regex alternation;
  alternation.kind = Regex::kAlternate;
  std::vector<Regex> items;
  bool last_repeat = false;
  auto close_branch = [&] {
    Regex branch;
    branch.kind = Regex::kConcat;
    branch.children = std::move(items);
    items.clear();
    alternation.children.push_back(std::move(branch));
  };
  while (More() && Peek() != ')') {
    if (Peek() == '|') {
      ++pos_;
      close_branch();
      last_repeat = false;
      continue;
    }
    bool parsed_repeat = false;
    KILN_RETURN_IF_ERROR(ParseRepeat(items, last_repeat, &parsed_repeat));
    if (!parsed_repeat) KILN_RETURN_IF_ERROR(ParseAtom(flags, depth, items, &parsed_repeat));
    last_repeat = parsed_repeat;
  }
  close_branch();
  return alternation;
}

// A repetition operator at pos_ (*, +, ?, {n}, {n,}, {n,m}, each maybe lazy) applied to the
// last item; *parsed false when there is none here ('{' that starts no count is a literal).
absl::Status Parser::ParseRepeat(std::vector<Regex>& items, bool last_repeat, bool* parsed) {
  const size_t at = pos_;
  int min = 0, max = -1;
  const char c = Peek();
  if (c == '*' || c == '+' || c == '?') {
    min = c == '+' ? 1 : 0;
    max = c == '?' ? 1 : -1;
    ++pos_;
  } else if (c == '{') {
    size_t q = pos_ + 1;
    auto integer = [&](int* out) {
      const size_t begin = q;
      while (q < p_.size() && p_[q] >= '0' && p_[q] <= '9' && q - begin < 9) ++q;
      if (q == begin || (q - begin > 1 && p_[begin] == '0') || (q < p_.size() && p_[q] >= '0' && p_[q] <= '9')) {
        return false;
      }
      *out = std::stoi(std::string(p_.substr(begin, q - begin)));
      return true;
    };
    if (!integer(&min)) return absl::OkStatus();
    max = min;
    if (q < p_.size() && p_[q] == ',') {
      ++q;
      max = -1;
      if (q < p_.size() && p_[q] != '}' && !integer(&max)) return absl::OkStatus();
    }
    if (q >= p_.size() || p_[q] != '}') return absl::OkStatus();
    pos_ = q + 1;
    if (min > kMaxRepeat || max > kMaxRepeat || (max >= 0 && max < min)) {
      return Error(
          at, absl::StrCat("bad repetition operator ", Text(at, pos_), " (counts go up to 1000, the least first)"));
    }
  } else {
    return absl::OkStatus();
  }
  if (Peek() == '?') ++pos_;  // lazy: the same texts match whole
  *parsed = true;
  if (items.empty()) return Error(at, absl::StrCat("missing argument to repetition operator ", Text(at, pos_)));
  if (last_repeat)
    return Error(at, absl::StrCat("bad repetition operator: repeats cannot stack (", Text(at, pos_), ")"));
  Regex repeat;
  repeat.kind = Regex::kRepeat;
  repeat.min = min;
  repeat.max = max;
  repeat.children.push_back(std::move(items.back()));
  KILN_RETURN_IF_ERROR(CheckRepeatProduct(repeat, kMaxRepeat, at));
  items.back() = std::move(repeat);
  return absl::OkStatus();
}

// RE2 refuses nested counts whose product passes 1000 (a{100}){100}.
absl::Status Parser::CheckRepeatProduct(const Regex& re, int budget, size_t at) const {
  if (re.kind == Regex::kRepeat) {
    const int m = re.max >= 0 ? re.max : re.min;
    if (m > 0) budget /= m;
    if (budget == 0) return Error(at, "bad repetition operator: nested counts multiply past 1000");
  }
  for (const Regex& child : re.children) KILN_RETURN_IF_ERROR(CheckRepeatProduct(child, budget, at));
  return absl::OkStatus();
}

absl::Status Parser::ParseAtom(Flags& flags, int depth, std::vector<Regex>& items, bool* repeat) {
  *repeat = false;
  const size_t at = pos_;
  switch (Peek()) {
    case '(': return ParseGroup(flags, depth, items);
    case '[': {
      KILN_ASSIGN_OR_RETURN(Regex re, ParseClass(flags));
      items.push_back(std::move(re));
      return absl::OkStatus();
    }
    case '.':
      ++pos_;
      items.push_back(Class(flags.dot_newline ? Ranges{{0, kMaxRune}} : Ranges{{0, '\n' - 1}, {'\n' + 1, kMaxRune}}));
      return absl::OkStatus();
    case '^':
      ++pos_;
      items.push_back(Assert(flags.multiline ? KILN_REGEX_BEGIN_LINE : KILN_REGEX_BEGIN_TEXT));
      return absl::OkStatus();
    case '$':
      ++pos_;
      items.push_back(Assert(flags.multiline ? KILN_REGEX_END_LINE : KILN_REGEX_END_TEXT));
      return absl::OkStatus();
    case '\\': return ParseBackslash(flags, items);
    default: {
      KILN_ASSIGN_OR_RETURN(int32_t c, NextRune());
      KILN_ASSIGN_OR_RETURN(Regex re, Literal(c, flags, at));
      items.push_back(std::move(re));
      return absl::OkStatus();
    }
  }
}

// (...), (?:...), (?P<name>...), (?<name>...), (?flags) and (?flags:...).
absl::Status Parser::ParseGroup(Flags& flags, int depth, std::vector<Regex>& items) {
  const size_t open = pos_++;
  Flags inner = flags;
  if (Peek() == '?') {
    ++pos_;
    const bool python_name = Peek() == 'P' && Peek(1) == '<';
    if (python_name || (Peek() == '<' && Peek(1) != '=' && Peek(1) != '!')) {
      pos_ += python_name ? 2 : 1;
      const size_t end = p_.find('>', pos_);
      const std::string name(p_.substr(pos_, end == std::string_view::npos ? 0 : end - pos_));
      if (end == std::string_view::npos || name.empty() || !std::all_of(name.begin(), name.end(), IsWordByte)) {
        return Error(open, "invalid named capture group");
      }
      if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
        return Error(open, absl::StrCat("duplicate capture group name '", name, "'"));
      }
      names_.push_back(name);
      pos_ = end + 1;
    } else {
      bool negated = false, saw_flag = false, done = false, opens = false;
      while (!done) {
        const char c = Peek();
        ++pos_;
        switch (c) {
          case 'i': inner.fold = !negated, saw_flag = true; break;
          case 'm': inner.multiline = !negated, saw_flag = true; break;
          case 's': inner.dot_newline = !negated, saw_flag = true; break;
          case 'U': saw_flag = true; break;  // ungreedy: the same texts match whole
          case '-':
            if (negated) return Error(open, "invalid or unsupported Perl syntax (a second - in flags)");
            negated = true, saw_flag = false;
            break;
          case ':': done = opens = true; break;
          case ')': done = true; break;
          default:
            return Error(open, absl::StrCat("invalid or unsupported Perl syntax ", Text(open, pos_),
                                            " (lookarounds, backreferences and atomic groups are not RE2)"));
        }
        if (!done && !More()) return Error(open, "missing ) for the flags opened here");
      }
      if (negated && !saw_flag) return Error(open, "invalid or unsupported Perl syntax (- with no flag after it)");
      if (!opens) {  // (?flags): for the rest of the enclosing group
        flags = inner;
        return absl::OkStatus();
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(Regex group, ParseAlternation(inner, depth + 1));
  if (Peek() != ')') return Error(open, "missing ) for the group opened here");
  ++pos_;
  items.push_back(std::move(group));
  return absl::OkStatus();
}

// A backslash outside a class: assertions, Perl classes, \Q...\E, or an escaped character.
absl::Status Parser::ParseBackslash(const Flags& flags, std::vector<Regex>& items) {
  const size_t at = pos_;
  const char c = Peek(1);
  static const std::pair<char, int32_t> kAsserts[] = {{'b', KILN_REGEX_WORD_BOUNDARY},
                                                      {'B', KILN_REGEX_NOT_WORD_BOUNDARY},
                                                      {'A', KILN_REGEX_BEGIN_TEXT},
                                                      {'z', KILN_REGEX_END_TEXT}};
  for (const auto& [letter, kind] : kAsserts) {
    if (c == letter) {
      pos_ += 2;
      items.push_back(Assert(kind));
      return absl::OkStatus();
    }
  }
  if (c == 'p' || c == 'P')
    return Error(at, absl::StrCat("Unicode classes (\\", std::string(1, c), ") are not supported"));
  if (c == 'C') return Error(at, "\\C (any byte) is not supported");
  if (c == 'Q') {
    pos_ += 2;
    while (More() && !(Peek() == '\\' && Peek(1) == 'E')) {
      const size_t rune_at = pos_;
      KILN_ASSIGN_OR_RETURN(int32_t rune, NextRune());
      KILN_ASSIGN_OR_RETURN(Regex re, Literal(rune, flags, rune_at));
      items.push_back(std::move(re));
    }
    if (More()) pos_ += 2;
    return absl::OkStatus();
  }
  const char lower = static_cast<char>(c | 0x20);
  if (lower == 'd' || lower == 's' || lower == 'w') {
    pos_ += 2;
    items.push_back(Class(NamedRanges(std::string(1, lower), c != lower, flags)));
    return absl::OkStatus();
  }
  KILN_ASSIGN_OR_RETURN(int32_t rune, ParseEscape());
  KILN_ASSIGN_OR_RETURN(Regex re, Literal(rune, flags, at));
  items.push_back(std::move(re));
  return absl::OkStatus();
}

// An escaped character at pos_ (the backslash): octal, \x, C escapes, or punctuation.
absl::StatusOr<int32_t> Parser::ParseEscape() {
  const size_t at = pos_;
  if (!More(1)) return Error(at, "trailing \\");
  ++pos_;
  KILN_ASSIGN_OR_RETURN(int32_t c, NextRune());
  auto bad = [&] { return Error(at, absl::StrCat("invalid escape sequence ", Text(at, pos_))); };
  if (c >= '1' && c <= '7' && !(Peek() >= '0' && Peek() <= '7')) return bad();  // a backreference
  if (c >= '0' && c <= '7') {
    int32_t code = c - '0';
    for (int i = 0; i < 2 && Peek() >= '0' && Peek() <= '7'; ++i) code = code * 8 + (p_[pos_++] - '0');
    return code;
  }
  if (c == 'x') {
    int32_t code = 0;
    if (Peek() == '{') {
      ++pos_;
      int digits = 0;
      for (; HexValue(Peek()) >= 0; ++digits) {
        code = code * 16 + HexValue(p_[pos_++]);
        if (code > kMaxRune) return bad();
      }
      if (Peek() != '}' || digits == 0) return bad();
      ++pos_;
      return code;
    }
    if (HexValue(Peek()) < 0 || HexValue(Peek(1)) < 0) return bad();
    code = HexValue(Peek()) * 16 + HexValue(Peek(1));
    pos_ += 2;
    return code;
  }
  static const std::pair<char, int32_t> kCEscapes[] = {{'n', '\n'}, {'r', '\r'}, {'t', '\t'},
                                                       {'a', '\a'}, {'f', '\f'}, {'v', '\v'}};
  for (const auto& [letter, code] : kCEscapes) {
    if (c == letter) return code;
  }
  const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c < 0x80 && !alnum) return c;
  return bad();
}

// [...] and [^...]: characters, ranges, escapes, Perl and POSIX classes.
absl::StatusOr<Regex> Parser::ParseClass(const Flags& flags) {
  const size_t start = pos_++;
  const bool negated = Peek() == '^';
  if (negated) ++pos_;
  Ranges ranges;
  bool first = true;
  while (More() && (Peek() != ']' || first)) {
    first = false;
    KILN_RETURN_IF_ERROR(ParseClassItem(flags, ranges, start));
  }
  if (!More()) return Error(start, "missing ] for the class opened here");
  ++pos_;
  return Class(negated ? Negate(ranges) : Normalize(ranges));
}

absl::Status Parser::ParseClassItem(const Flags& flags, Ranges& ranges, size_t class_start) {
  const size_t at = pos_;
  if (Peek() == '[' && Peek(1) == ':') {
    const size_t end = p_.find(":]", pos_ + 2);
    if (end != std::string_view::npos) {
      std::string_view name = p_.substr(pos_ + 2, end - pos_ - 2);
      const bool negated = !name.empty() && name[0] == '^';
      if (negated) name.remove_prefix(1);
      if (name.size() <= 1 || NamedClass(name).empty()) {
        return Error(at, absl::StrCat("invalid character class ", Text(at, end + 2)));
      }
      pos_ = end + 2;
      const Ranges named = NamedRanges(name, negated, flags);
      ranges.insert(ranges.end(), named.begin(), named.end());
      return absl::OkStatus();
    }
  }
  if (Peek() == '\\') {
    const char c = Peek(1);
    if (c == 'p' || c == 'P') {
      return Error(at, absl::StrCat("Unicode classes (\\", std::string(1, c), ") are not supported"));
    }
    const char lower = static_cast<char>(c | 0x20);
    if (lower == 'd' || lower == 's' || lower == 'w') {
      pos_ += 2;
      const Ranges named = NamedRanges(std::string(1, lower), c != lower, flags);
      ranges.insert(ranges.end(), named.begin(), named.end());
      return absl::OkStatus();
    }
  }
  auto character = [&]() -> absl::StatusOr<int32_t> {
    if (!More()) return Error(class_start, "missing ] for the class opened here");
    return Peek() == '\\' ? ParseEscape() : NextRune();
  };
  KILN_ASSIGN_OR_RETURN(int32_t lo, character());
  int32_t hi = lo;
  if (Peek() == '-' && More(1) && Peek(1) != ']') {
    ++pos_;
    KILN_ASSIGN_OR_RETURN(hi, character());
    if (hi < lo) return Error(at, absl::StrCat("invalid character class range ", Text(at, pos_)));
  }
  if (flags.fold) {
    for (int32_t c : {lo, hi}) {
      if (c >= 0x80 && !(lo == hi && (c == kKelvin || c == kLongS))) {
        return Error(at, "case-insensitive matching of a non-ASCII character is not supported");
      }
    }
    const Ranges folded = Fold({{lo, hi}});
    ranges.insert(ranges.end(), folded.begin(), folded.end());
  } else {
    ranges.emplace_back(lo, hi);
  }
  return absl::OkStatus();
}

// The tree as kernel instructions (op, a, b) and class ranges.
class Compiler {
 public:
  absl::Status Emit(const Regex& re) {
    if (instructions_.size() / 3 > KILN_REGEX_MAX_INSTRUCTIONS) return TooLong();
    switch (re.kind) {
      case Regex::kEmpty: return absl::OkStatus();
      case Regex::kChar: Add(KILN_REGEX_CHAR, re.value, 0); return absl::OkStatus();
      case Regex::kAssert: Add(KILN_REGEX_ASSERT, re.value, 0); return absl::OkStatus();
      case Regex::kClass: {
        Add(KILN_REGEX_CLASS, static_cast<int32_t>(ranges_.size() / 2), static_cast<int32_t>(re.ranges.size()));
        class_pcs_.push_back(Size() - 1);
        for (const auto& [lo, hi] : re.ranges) ranges_.insert(ranges_.end(), {lo, hi});
        return absl::OkStatus();
      }
      case Regex::kConcat:
        for (const Regex& child : re.children) KILN_RETURN_IF_ERROR(Emit(child));
        return absl::OkStatus();
      case Regex::kAlternate: return EmitAlternation(re);
      case Regex::kRepeat: return EmitRepeat(re);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<int32_t>> Finish() {
    Add(KILN_REGEX_MATCH, 0, 0);
    if (Size() > KILN_REGEX_MAX_INSTRUCTIONS) return TooLong();
    const int32_t count = Size();
    for (int32_t pc : class_pcs_) instructions_[3 * pc + 1] = 1 + 3 * count + 2 * instructions_[3 * pc + 1];
    std::vector<int32_t> program{count};
    program.insert(program.end(), instructions_.begin(), instructions_.end());
    program.insert(program.end(), ranges_.begin(), ranges_.end());
    return program;
  }

 private:
  int32_t Size() const { return static_cast<int32_t>(instructions_.size() / 3); }
  void Add(int32_t op, int32_t a, int32_t b) { instructions_.insert(instructions_.end(), {op, a, b}); }
  void Patch(int32_t pc, int slot, int32_t target) { instructions_[3 * pc + slot] = target; }
  absl::Status TooLong() const {
    return absl::InvalidArgumentError(absl::StrCat("needs more than ", KILN_REGEX_MAX_INSTRUCTIONS,
                                                   " NFA states, the most Kiln's matcher takes (smaller counts help)"));
  }

  absl::Status EmitAlternation(const Regex& re) {
    std::vector<int32_t> jumps;
    for (size_t i = 0; i < re.children.size(); ++i) {
      if (i + 1 == re.children.size()) {
        KILN_RETURN_IF_ERROR(Emit(re.children[i]));
        break;
      }
      const int32_t split = Size();
      Add(KILN_REGEX_SPLIT, split + 1, 0);
      KILN_RETURN_IF_ERROR(Emit(re.children[i]));
      jumps.push_back(Size());
      Add(KILN_REGEX_JUMP, 0, 0);
      Patch(split, 2, Size());
    }
    for (int32_t jump : jumps) Patch(jump, 1, Size());
    return absl::OkStatus();
  }

  absl::Status EmitRepeat(const Regex& re) {
    const Regex& body = re.children[0];
    for (int i = 0; i < re.min; ++i) KILN_RETURN_IF_ERROR(Emit(body));
    if (re.max < 0) {  // loop: split(body, out); body; jump split
      const int32_t split = Size();
      Add(KILN_REGEX_SPLIT, split + 1, 0);
      KILN_RETURN_IF_ERROR(Emit(body));
      Add(KILN_REGEX_JUMP, split, 0);
      Patch(split, 2, Size());
      return absl::OkStatus();
    }
    std::vector<int32_t> splits;  // each optional copy may be skipped to the end
    for (int i = re.min; i < re.max; ++i) {
      splits.push_back(Size());
      Add(KILN_REGEX_SPLIT, Size() + 1, 0);
      KILN_RETURN_IF_ERROR(Emit(body));
    }
    for (int32_t split : splits) Patch(split, 2, Size());
    return absl::OkStatus();
  }

  std::vector<int32_t> instructions_, ranges_, class_pcs_;
};

}  // namespace

absl::StatusOr<std::vector<int32_t>> CompileRegex(std::string_view pattern) {
  Parser parser(pattern);
  KILN_ASSIGN_OR_RETURN(Regex re, parser.Parse());
  Compiler compiler;
  KILN_RETURN_IF_ERROR(compiler.Emit(re));
  return compiler.Finish();
}

}  // namespace kiln::ops
