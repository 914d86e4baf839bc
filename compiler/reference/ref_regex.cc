// The reference's regular expressions for RegexFullMatch (RE2 syntax, RE2's default
// options): a recursive-descent parse into a tree, and a matcher that computes, for each
// subtree and start position, the set of positions where the subtree can end (memoised, so
// nested repeats stay polynomial). Written apart from compiler/ops/regex_program.cc and the
// kernel's NFA; it refuses what they refuse (\p, \C, (?i) on non-ASCII characters).
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

constexpr int32_t kNone = -2;  // before the text's start, after its end
constexpr int32_t kBad = -1;   // a byte that is not UTF-8

std::vector<int32_t> CodePoints(const std::string& text) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 9;
    int32_t v = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    bool ok = n != 9 && i + n < text.size() + (n == 0 ? 1 : 0);
    for (size_t k = 1; ok && k <= n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      ok = (b & 0xC0) == 0x80;
      v = (v << 6) | (b & 0x3F);
    }
    const int32_t least = n == 1 ? 0x80 : n == 2 ? 0x800 : n == 3 ? 0x10000 : 0;
    ok = ok && v >= least && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF);
    out.push_back(ok ? v : kBad);
    i += ok ? n + 1 : 1;
  }
  return out;
}

bool IsWordChar(int32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// The characters case folding makes equal to c (RE2's orbits of the ASCII letters).
std::vector<int32_t> Orbit(int32_t c) {
  int32_t lower = c >= 'A' && c <= 'Z' ? c + 32 : c == 0x212A ? 'k' : c == 0x17F ? 's' : c;
  if (lower < 'a' || lower > 'z') return {c};
  std::vector<int32_t> out = {lower, lower - 32};
  if (lower == 'k') out.push_back(0x212A);
  if (lower == 's') out.push_back(0x17F);
  return out;
}

struct Item {  // one member of a class: ranges, maybe negated (\W, [:^alpha:])
  std::vector<std::pair<int32_t, int32_t>> ranges;
  bool negated = false;
};

struct Node {
  enum Kind { kSet, kAssert, kSeq, kOr, kRepeat } kind = kSeq;
  std::vector<Item> items;  // kSet: a character in any of them
  bool negated = false, fold = false;
  char assertion = 0;  // kAssert: 'A' text start, 'z' text end, '^' '$' line, 'b' 'B'
  std::vector<std::unique_ptr<Node>> parts;
  int min = 0, max = 0;  // kRepeat, max -1: unbounded
};

bool InItem(const Item& item, int32_t c) {
  const bool in =
      std::any_of(item.ranges.begin(), item.ranges.end(), [c](const auto& r) { return c >= r.first && c <= r.second; });
  return in != item.negated;
}

// Whether text character c is in the set (under folding: some character of its orbit).
bool InSet(const Node& set, int32_t c) {
  if (c < 0) return false;
  bool in = false;
  for (const Item& item : set.items) {
    if (!set.fold) {
      in = in || InItem(item, c);
      continue;
    }
    // RE2 folds an item's positive set, then negates it: t is in the folded set when a
    // character of its orbit is in the plain one.
    Item positive = item;
    positive.negated = false;
    const std::vector<int32_t> orbit = Orbit(c);
    const bool hit = std::any_of(orbit.begin(), orbit.end(), [&](int32_t o) { return InItem(positive, o); });
    in = in || hit != item.negated;
  }
  return in != set.negated;
}

std::vector<std::pair<int32_t, int32_t>> Named(const std::string& name) {
  static const std::map<std::string, std::vector<std::pair<int32_t, int32_t>>> kNamed = {
      {"d", {{'0', '9'}}},
      {"s", {{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}},
      {"w", {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}},
      {"alnum", {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}}},
      {"alpha", {{'A', 'Z'}, {'a', 'z'}}},
      {"ascii", {{0, 127}}},
      {"blank", {{' ', ' '}, {'\t', '\t'}}},
      {"cntrl", {{0, 31}, {127, 127}}},
      {"digit", {{'0', '9'}}},
      {"graph", {{33, 126}}},
      {"lower", {{'a', 'z'}}},
      {"print", {{32, 126}}},
      {"punct", {{33, 47}, {58, 64}, {91, 96}, {123, 126}}},
      {"space", {{9, 13}, {' ', ' '}}},
      {"upper", {{'A', 'Z'}}},
      {"word", {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}},
      {"xdigit", {{'0', '9'}, {'A', 'F'}, {'a', 'f'}}},
  };
  auto it = kNamed.find(name);
  return it == kNamed.end() ? std::vector<std::pair<int32_t, int32_t>>{} : it->second;
}

class RegexParser {
 public:
  explicit RegexParser(const std::string& pattern) : p_(pattern), runes_(CodePoints(pattern)) {}

  absl::StatusOr<std::unique_ptr<Node>> Parse() {
    if (std::find(runes_.begin(), runes_.end(), kBad) != runes_.end()) return Invalid("the pattern is not UTF-8");
    bool fold = false, multiline = false, dotall = false;
    KILN_ASSIGN_OR_RETURN(auto root, Alternation(fold, multiline, dotall, 0));
    if (i_ < runes_.size()) return Invalid("unexpected )");
    return root;
  }

 private:
  int32_t At(size_t k = 0) const { return i_ + k < runes_.size() ? runes_[i_ + k] : kNone; }

  static std::unique_ptr<Node> Set(std::vector<std::pair<int32_t, int32_t>> ranges, bool negated, bool fold) {
    auto node = std::make_unique<Node>();
    node->kind = Node::kSet;
    node->items.push_back(Item{std::move(ranges), negated});
    node->fold = fold;
    return node;
  }

  absl::StatusOr<std::unique_ptr<Node>> Alternation(bool& fold, bool& multiline, bool& dotall, int depth);
  absl::StatusOr<std::unique_ptr<Node>> Atom(bool& fold, bool& multiline, bool& dotall, int depth, bool* flags_only);
  absl::StatusOr<std::unique_ptr<Node>> Group(bool& fold, bool& multiline, bool& dotall, int depth, bool* flags_only);
  absl::StatusOr<int32_t> Escape();
  absl::StatusOr<std::unique_ptr<Node>> Bracket(bool fold);
  bool Counted(int* min, int* max);

  const std::string& p_;
  std::vector<int32_t> runes_;
  size_t i_ = 0;
};

absl::Status CheckFoldable(bool fold, int32_t lo, int32_t hi) {
  if (fold && hi >= 0x80 && !(lo == hi && (lo == 0x212A || lo == 0x17F))) {
    return Invalid("case-insensitive matching of non-ASCII characters is not supported");
  }
  return absl::OkStatus();
}

// {n}, {n,}, {n,m} at i_ (no leading zeros); false, i_ unmoved, for anything else.
bool RegexParser::Counted(int* min, int* max) {
  size_t k = i_ + 1;
  auto number = [&](int* out) {
    std::string digits;
    while (k < runes_.size() && runes_[k] >= '0' && runes_[k] <= '9') digits += static_cast<char>(runes_[k++]);
    if (digits.empty() || digits.size() > 8 || (digits.size() > 1 && digits[0] == '0')) return false;
    *out = std::stoi(digits);
    return true;
  };
  if (!number(min)) return false;
  *max = *min;
  if (k < runes_.size() && runes_[k] == ',') {
    ++k;
    *max = -1;
    if (k < runes_.size() && runes_[k] != '}' && !number(max)) return false;
  }
  if (k >= runes_.size() || runes_[k] != '}') return false;
  i_ = k + 1;
  return true;
}

absl::StatusOr<std::unique_ptr<Node>> RegexParser::Alternation(bool& fold, bool& multiline, bool& dotall, int depth) {
  if (depth > 1000) return Invalid("groups nest too deep");
  auto alternatives = std::make_unique<Node>();
  alternatives->kind = Node::kOr;
  auto seq = std::make_unique<Node>();
  bool after_repeat = false;
  while (i_ < runes_.size() && At() != ')') {
    const int32_t c = At();
    int min = 0, max = -1;
    const bool star_like = c == '*' || c == '+' || c == '?';
    if (star_like || (c == '{' && Counted(&min, &max))) {
      if (star_like) {
        ++i_;
        min = c == '+' ? 1 : 0;
        max = c == '?' ? 1 : -1;
      }
      if (At() == '?') ++i_;
      if (seq->parts.empty() || after_repeat) return Invalid("bad or missing argument to a repetition operator");
      if (min > 1000 || max > 1000 || (max >= 0 && max < min)) return Invalid("bad repetition count");
      auto repeat = std::make_unique<Node>();
      repeat->kind = Node::kRepeat;
      repeat->min = min;
      repeat->max = max;
      repeat->parts.push_back(std::move(seq->parts.back()));
      seq->parts.back() = std::move(repeat);
      after_repeat = true;
      continue;
    }
    after_repeat = false;
    if (c == '|') {
      ++i_;
      alternatives->parts.push_back(std::move(seq));
      seq = std::make_unique<Node>();
      continue;
    }
    bool flags_only = false;
    KILN_ASSIGN_OR_RETURN(auto atom, Atom(fold, multiline, dotall, depth, &flags_only));
    if (!flags_only) seq->parts.push_back(std::move(atom));
  }
  alternatives->parts.push_back(std::move(seq));
  return alternatives;
}

absl::StatusOr<std::unique_ptr<Node>> RegexParser::Atom(bool& fold, bool& multiline, bool& dotall, int depth,
                                                        bool* flags_only) {
  const int32_t c = At();
  auto assertion = [&](char kind) {
    auto node = std::make_unique<Node>();
    node->kind = Node::kAssert;
    node->assertion = kind;
    return node;
  };
  if (c == '(') return Group(fold, multiline, dotall, depth, flags_only);
  if (c == '[') return Bracket(fold);
  ++i_;
  if (c == '.') return dotall ? Set({}, true, false) : Set({{'\n', '\n'}}, true, false);
  if (c == '^') return assertion(multiline ? '^' : 'A');
  if (c == '$') return assertion(multiline ? '$' : 'z');
  if (c != '\\') {
    KILN_RETURN_IF_ERROR(CheckFoldable(fold, c, c));
    return Set({{c, c}}, false, fold);
  }
  const int32_t e = At();
  if (e == 'b' || e == 'B' || e == 'A' || e == 'z') {
    ++i_;
    return assertion(static_cast<char>(e));
  }
  if (e == 'p' || e == 'P' || e == 'C')
    return Invalid(absl::StrCat("\\", std::string(1, static_cast<char>(e)), " is not supported"));
  if (e == 'd' || e == 's' || e == 'w' || e == 'D' || e == 'S' || e == 'W') {
    ++i_;
    const bool upper = e < 'a';
    return Set(Named(std::string(1, static_cast<char>(upper ? e + 32 : e))), upper, fold);
  }
  if (e == 'Q') {  // literal text up to \E
    ++i_;
    auto seq = std::make_unique<Node>();
    while (i_ < runes_.size() && !(At() == '\\' && At(1) == 'E')) {
      KILN_RETURN_IF_ERROR(CheckFoldable(fold, At(), At()));
      seq->parts.push_back(Set({{At(), At()}}, false, fold));
      ++i_;
    }
    if (i_ < runes_.size()) i_ += 2;
    return seq;
  }
  --i_;
  KILN_ASSIGN_OR_RETURN(int32_t literal, Escape());
  KILN_RETURN_IF_ERROR(CheckFoldable(fold, literal, literal));
  return Set({{literal, literal}}, false, fold);
}

absl::StatusOr<std::unique_ptr<Node>> RegexParser::Group(bool& fold, bool& multiline, bool& dotall, int depth,
                                                         bool* flags_only) {
  ++i_;  // (
  bool inner_fold = fold, inner_multiline = multiline, inner_dotall = dotall;
  if (At() == '?') {
    ++i_;
    if ((At() == 'P' && At(1) == '<') || (At() == '<' && At(1) != '=' && At(1) != '!')) {
      i_ += At() == 'P' ? 2 : 1;
      size_t length = 0;
      while (IsWordChar(At())) ++i_, ++length;
      if (length == 0 || At() != '>') return Invalid("bad capture group name");
      ++i_;
    } else {
      bool minus = false, any = false;
      for (;;) {
        const int32_t f = At();
        ++i_;
        if (f == 'i' || f == 'm' || f == 's' || f == 'U') {
          any = true;
          if (f == 'i') inner_fold = !minus;
          if (f == 'm') inner_multiline = !minus;
          if (f == 's') inner_dotall = !minus;
        } else if (f == '-' && !minus) {
          minus = true;
          any = false;
        } else if (f == ')' || f == ':') {
          if (minus && !any) return Invalid("bad flags");
          if (f == ':') break;
          fold = inner_fold, multiline = inner_multiline, dotall = inner_dotall;
          *flags_only = true;
          return std::unique_ptr<Node>();
        } else {
          return Invalid("unsupported (? syntax");
        }
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(auto inner, Alternation(inner_fold, inner_multiline, inner_dotall, depth + 1));
  if (At() != ')') return Invalid("missing )");
  ++i_;
  return inner;
}

// A backslash escape of one character at i_ (the backslash).
absl::StatusOr<int32_t> RegexParser::Escape() {
  ++i_;
  if (i_ >= runes_.size()) return Invalid("trailing backslash");
  const int32_t c = At();
  ++i_;
  auto octal = [](int32_t d) { return d >= '0' && d <= '7'; };
  auto hex = [](int32_t d) {
    return d >= '0' && d <= '9'   ? d - '0'
           : d >= 'a' && d <= 'f' ? d - 'a' + 10
           : d >= 'A' && d <= 'F' ? d - 'A' + 10
                                  : -1;
  };
  if (c == '0' || (c >= '1' && c <= '7' && octal(At()))) {
    int32_t v = c - '0';
    for (int k = 0; k < 2 && octal(At()); ++k) v = v * 8 + (At() - '0'), ++i_;
    return v;
  }
  if (c == 'x') {
    if (At() != '{') {
      if (hex(At()) < 0 || hex(At(1)) < 0) return Invalid("bad \\x escape");
      const int32_t v = hex(At()) * 16 + hex(At(1));
      i_ += 2;
      return v;
    }
    ++i_;
    int32_t v = 0;
    int digits = 0;
    for (; hex(At()) >= 0 && v <= 0x10FFFF; ++digits, ++i_) v = v * 16 + hex(At());
    if (At() != '}' || digits == 0 || v > 0x10FFFF) return Invalid("bad \\x{} escape");
    ++i_;
    return v;
  }
  const std::string controls = "n\nr\rt\ta\af\fv\v";
  for (size_t k = 0; k < controls.size(); k += 2) {
    if (c == controls[k]) return static_cast<int32_t>(controls[k + 1]);
  }
  const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c >= 0 && c < 0x80 && !alnum) return c;
  return Invalid("invalid escape");
}

absl::StatusOr<std::unique_ptr<Node>> RegexParser::Bracket(bool fold) {
  ++i_;  // [
  auto set = std::make_unique<Node>();
  set->kind = Node::kSet;
  set->fold = fold;
  if (At() == '^') set->negated = true, ++i_;
  for (bool first = true; i_ < runes_.size() && (At() != ']' || first); first = false) {
    if (At() == '[' && At(1) == ':') {
      size_t end = i_ + 2;
      while (end + 1 < runes_.size() && !(runes_[end] == ':' && runes_[end + 1] == ']')) ++end;
      if (end + 1 < runes_.size()) {
        std::string name;
        for (size_t k = i_ + 2; k < end; ++k) name += static_cast<char>(runes_[k]);
        const bool negated = !name.empty() && name[0] == '^';
        if (negated) name.erase(0, 1);
        if (name.size() < 2 || Named(name).empty()) return Invalid("bad POSIX class");
        set->items.push_back(Item{Named(name), negated});
        i_ = end + 2;
        continue;
      }
    }
    if (At() == '\\' && (At(1) == 'p' || At(1) == 'P')) return Invalid("\\p is not supported");
    const int32_t e = At(1);
    if (At() == '\\' && (e == 'd' || e == 's' || e == 'w' || e == 'D' || e == 'S' || e == 'W')) {
      const bool upper = e < 'a';
      set->items.push_back(Item{Named(std::string(1, static_cast<char>(upper ? e + 32 : e))), upper});
      i_ += 2;
      continue;
    }
    auto one = [&]() -> absl::StatusOr<int32_t> {
      if (i_ >= runes_.size()) return Invalid("missing ]");
      if (At() == '\\') return Escape();
      return runes_[i_++];
    };
    KILN_ASSIGN_OR_RETURN(int32_t lo, one());
    int32_t hi = lo;
    if (At() == '-' && i_ + 1 < runes_.size() && At(1) != ']') {
      ++i_;
      KILN_ASSIGN_OR_RETURN(hi, one());
      if (hi < lo) return Invalid("bad class range");
    }
    KILN_RETURN_IF_ERROR(CheckFoldable(fold, lo, hi));
    set->items.push_back(Item{{{lo, hi}}, false});
  }
  if (i_ >= runes_.size()) return Invalid("missing ]");
  ++i_;
  return set;
}

// Where `node` can end when started at `start` (memoised per node and start).
class Matcher {
 public:
  explicit Matcher(std::vector<int32_t> text) : text_(std::move(text)) {}

  const std::set<int>& Ends(const Node* node, int start) {
    auto key = std::make_pair(node, start);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::set<int> ends = Compute(node, start);
    return memo_.emplace(key, std::move(ends)).first->second;
  }

 private:
  int32_t At(int i) const { return i >= 0 && i < static_cast<int>(text_.size()) ? text_[i] : kNone; }

  bool Holds(char kind, int pos) const {
    const int32_t before = At(pos - 1), after = At(pos);
    switch (kind) {
      case 'A': return pos == 0;
      case 'z': return pos == static_cast<int>(text_.size());
      case '^': return pos == 0 || before == '\n';
      case '$': return pos == static_cast<int>(text_.size()) || after == '\n';
      case 'b': return IsWordChar(before) != IsWordChar(after);
      default: return IsWordChar(before) == IsWordChar(after);
    }
  }

  std::set<int> Compute(const Node* node, int start) {
    switch (node->kind) {
      case Node::kSet:
        if (start < static_cast<int>(text_.size()) && InSet(*node, text_[start])) return {start + 1};
        return {};
      case Node::kAssert: return Holds(node->assertion, start) ? std::set<int>{start} : std::set<int>{};
      case Node::kSeq: {
        std::set<int> at = {start};
        for (const auto& part : node->parts) at = Step(part.get(), at);
        return at;
      }
      case Node::kOr: {
        std::set<int> all;
        for (const auto& part : node->parts) {
          const std::set<int>& ends = Ends(part.get(), start);
          all.insert(ends.begin(), ends.end());
        }
        return all;
      }
      case Node::kRepeat: {
        std::set<int> at = {start};
        for (int k = 0; k < node->min; ++k) at = Step(node->parts[0].get(), at);
        std::set<int> all = at;
        for (int k = node->min; (node->max < 0 || k < node->max) && !at.empty(); ++k) {
          std::set<int> next;
          for (int p : Step(node->parts[0].get(), at)) {
            if (all.insert(p).second) next.insert(p);
          }
          at = std::move(next);
        }
        return all;
      }
    }
    return {};
  }

  std::set<int> Step(const Node* node, const std::set<int>& starts) {
    std::set<int> out;
    for (int s : starts) {
      const std::set<int>& ends = Ends(node, s);
      out.insert(ends.begin(), ends.end());
    }
    return out;
  }

  std::vector<int32_t> text_;
  std::map<std::pair<const Node*, int>, std::set<int>> memo_;
};

}  // namespace

absl::StatusOr<bool> RegexFullMatches(const std::string& pattern, const std::string& text) {
  RegexParser parser(pattern);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Node> root, parser.Parse());
  Matcher matcher(CodePoints(text));
  const std::vector<int32_t> runes = CodePoints(text);
  return matcher.Ends(root.get(), 0).count(static_cast<int>(runes.size())) > 0;
}

}  // namespace kiln::ref
