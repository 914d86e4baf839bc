// The string ops of opsets 19 and 20, kernels (run natively through the interpreter)
// against the reference: RegexFullMatch's NFA against the reference's own matcher on random
// patterns of the RE2 syntax Kiln takes and random texts (ASCII, non-ASCII, the Kelvin sign,
// newlines), its compile-time checks (what the pattern compiler refuses, and at which byte);
// StringSplit, StringConcat and Equal on random texts.
#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

Tensor Strings(const std::vector<std::string>& texts) {
  Tensor t(DType::kString, {static_cast<int64_t>(texts.size())});
  for (size_t i = 0; i < texts.size(); ++i) t.SetString(static_cast<int64_t>(i), texts[i]);
  return t;
}

// RegexFullMatch over `texts`: the kernel's answers and the reference's, or the error that
// type inference (the pattern's compile-time check) gives.
absl::Status Match(const std::string& pattern, const std::vector<std::string>& texts, std::vector<bool>* kernel,
                   std::vector<bool>* reference) {
  const Tensor input = Strings(texts);
  Graph graph;
  Value* in = graph.AddConstant("in", std::make_shared<const Tensor>(input));
  Node* node = graph.AddNode("RegexFullMatch", "match", {in}, {"out"}, 20);
  node->mutable_attrs()["pattern"] = pattern;
  graph.AddOutput(node->output(0));
  if (absl::Status s = InferTypes(graph); !s.ok()) return s;
  for (auto [run, answers] : {std::make_pair(true, kernel), std::make_pair(false, reference)}) {
    auto out = run ? EvaluateNode(*node, {&input}) : ReferenceEvaluateNode(*node, {&input});
    if (!out.ok()) return out.status();
    answers->clear();
    for (int64_t i = 0; i < (*out)[0].num_elements(); ++i) answers->push_back((*out)[0].data_as<bool>()[i]);
  }
  return absl::OkStatus();
}

// Random patterns from a small grammar of the syntax Kiln takes (no non-ASCII literal under
// (?i), no stacked repeats).
class PatternMaker {
 public:
  explicit PatternMaker(uint32_t seed) : rng_(seed) {}

  std::string Make() {
    static const char* kFlags[] = {"", "", "", "(?s)", "(?m)", "(?i)", "(?U)"};
    const std::string flags = kFlags[Pick(7)];
    fold_ = flags == "(?i)";
    return flags + Alternation(0);
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  std::string Alternation(int depth) {
    std::string out = Concat(depth);
    if (Pick(4) == 0) out += "|" + Concat(depth);
    return out;
  }
  std::string Concat(int depth) {
    std::string out;
    for (int i = 0, n = Pick(4); i < n; ++i) out += Piece(depth);
    return out;
  }
  std::string Piece(int depth) {
    static const char* kRepeats[] = {"*", "+", "?", "{2}", "{1,}", "{0,2}", "{1,3}", "*?", "+?", "??", "{2,3}?"};
    std::string atom = Atom(depth);
    if (Pick(3) == 0) atom += kRepeats[Pick(11)];  // assertions too: (^)* and \\b+ are RE2
    return atom;
  }
  std::string Atom(int depth) {
    static const char* kAtoms[] = {"a",     "b",      "A",     "K",           " ",   "\\n", ".",   "[ab]", "[^a]",
                                   "[a-z]", "[^\\s]", "\\w",   "\\W",         "\\d", "\\s", "\\S", "^",    "$",
                                   "\\b",   "\\B",    "\\x41", "[[:upper:]]", "\\.", "_",   "1"};
    const int choice = Pick(depth < 3 ? 30 : 25);
    if (choice < 25) return kAtoms[choice];
    if (choice == 25 && !fold_) return "\xc3\xa9";  // é
    if (choice == 26 && !fold_) return "[\xc3\xa9-\xc3\xbf]";
    const bool saved = fold_;
    std::string open = "(";
    if (choice == 27) open = "(?:";
    if (choice == 28) open = "(?i:", fold_ = true;
    std::string group = open + Alternation(depth + 1) + ")";
    fold_ = saved;
    return group;
  }

  std::mt19937 rng_;
  bool fold_ = false;
};

std::vector<std::string> RandomTexts(std::mt19937& rng, int count) {
  static const char* kPieces[] = {
      "a", "b", "A", "B", "K", "k", " ", "\n", "1", "_", ".", "\xc3\xa9", "\xe2\x84\xaa", "\xc5\xbf", "s"};
  std::vector<std::string> texts;
  for (int t = 0; t < count; ++t) {
    std::string text;
    for (int i = 0, n = std::uniform_int_distribution<int>(0, 5)(rng); i < n; ++i) {
      text += kPieces[std::uniform_int_distribution<int>(0, 14)(rng)];
    }
    texts.push_back(text);
  }
  return texts;
}

TEST(RegexTest, KernelAgreesWithReferenceOnRandomPatterns) {
  PatternMaker maker(20261126);
  std::mt19937 rng(7);
  int matches = 0, total = 0;
  for (int p = 0; p < 2000; ++p) {
    const std::string pattern = maker.Make();
    const std::vector<std::string> texts = RandomTexts(rng, 24);
    std::vector<bool> kernel, reference;
    absl::Status s = Match(pattern, texts, &kernel, &reference);
    ASSERT_TRUE(s.ok()) << pattern << ": " << s;
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(kernel[i], reference[i]) << "pattern '" << pattern << "', text '" << texts[i] << "'";
      matches += kernel[i];
      ++total;
    }
  }
  // Enough of both answers that the comparison means something.
  EXPECT_GT(matches, total / 50);
  EXPECT_LT(matches, total - total / 50);
}

TEST(RegexTest, FixedCases) {
  struct Case {
    const char* pattern;
    const char* text;
    bool match;
  };
  const Case cases[] = {
      {"a$b?", "a", true},
      {"a$b?", "ab", false},
      {"b?^a", "ba", false},
      {"(?m)a$\nb", "a\nb", true},
      {"\\Ba", "a", false},
      {"x\\B.", "xy", true},
      {"(?i)k", "\xe2\x84\xaa", true},
      {"(?i)[^k]", "\xe2\x84\xaa", false},
      {"(?i)\\W", "\xc5\xbf", false},
      {"\\W", "\xc5\xbf", true},
      {".", "\xff", false},
      {"(a|ab)(c|bcd)(d*)", "abcd", true},
      {"(a*)*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
      {"[]a]+", "]a]", true},
      {"[a-]+", "-a", true},
      {"\\Qa.b\\E", "a.b", true},
      {"\\Qa.b\\E", "axb", false},
      {"a{,2}", "a{,2}", true},
      {"\\0101",
       "\x08"
       "1",
       true},
  };
  for (const Case& c : cases) {
    std::vector<bool> kernel, reference;
    absl::Status s = Match(c.pattern, {c.text}, &kernel, &reference);
    ASSERT_TRUE(s.ok()) << c.pattern << ": " << s;
    EXPECT_EQ(kernel[0], c.match) << "kernel, pattern '" << c.pattern << "', text '" << c.text << "'";
    EXPECT_EQ(reference[0], c.match) << "reference, pattern '" << c.pattern << "', text '" << c.text << "'";
  }
}

TEST(RegexTest, RefusedPatternsNameTheByte) {
  const std::pair<const char*, const char*> refused[] = {
      {"(ab", "at byte 0: missing )"},
      {"a|b)", "at byte 3: unexpected )"},
      {"[a", "at byte 0: missing ]"},
      {"+", "at byte 0: missing argument to repetition operator"},
      {"a{2}{3}", "at byte 4: bad repetition operator"},
      {"(a{100}){100}", "nested counts multiply past 1000"},
      {"x{3,2}", "at byte 1: bad repetition operator"},
      {"\\8", "at byte 0: invalid escape sequence"},
      {"a\\", "at byte 1: trailing \\"},
      {"(?<n>a)(?P<n>b)", "at byte 7: duplicate capture group name"},
      {"(?i-)", "at byte 0: invalid or unsupported Perl syntax"},
      {"(?P=n)", "at byte 0: invalid or unsupported Perl syntax"},
      {"[[:bogus:]]", "at byte 1: invalid character class"},
      {"\\C", "at byte 0: \\C (any byte) is not supported"},
      {"[\\p{Greek}]", "at byte 1: Unicode classes"},
      {"(?i)[\xc3\xa9]", "at byte 5: case-insensitive matching of a non-ASCII character"},
      {"\xff", "at byte 0: invalid UTF-8"},
      {"(ab){1,1000}", "NFA states"},
  };
  for (const auto& [pattern, words] : refused) {
    std::vector<bool> kernel, reference;
    absl::Status s = Match(pattern, {"a"}, &kernel, &reference);
    EXPECT_FALSE(s.ok()) << pattern;
    EXPECT_NE(std::string(s.message()).find("node 'match' (RegexFullMatch, opset 20): pattern"), std::string::npos)
        << s;
    EXPECT_NE(std::string(s.message()).find(words), std::string::npos) << pattern << ": " << s;
  }
}

// One node over constant inputs, typed; every output from the kernels and from the reference.
absl::Status RunBoth(const std::string& op, const std::vector<Tensor>& inputs,
                     const std::map<std::string, AttrValue>& attrs, int outputs, std::vector<Tensor>* kernel,
                     std::vector<Tensor>* reference) {
  Graph graph;
  std::vector<Value*> values;
  std::vector<const Tensor*> pointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    values.push_back(graph.AddConstant("in" + std::to_string(i), std::make_shared<const Tensor>(inputs[i])));
    pointers.push_back(&inputs[i]);
  }
  std::vector<std::string> names;
  for (int i = 0; i < outputs; ++i) names.push_back("out" + std::to_string(i));
  Node* node = graph.AddNode(op, "node", values, names, 20);
  node->mutable_attrs() = attrs;
  for (int i = 0; i < outputs; ++i) graph.AddOutput(node->output(i));
  if (absl::Status s = InferTypes(graph); !s.ok()) return s;
  auto k = EvaluateNode(*node, pointers);
  if (!k.ok()) return k.status();
  auto r = ReferenceEvaluateNode(*node, pointers);
  if (!r.ok()) return r.status();
  *kernel = std::move(*k);
  *reference = std::move(*r);
  return absl::OkStatus();
}

void ExpectSameTensors(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].dtype(), b[k].dtype()) << what;
    ASSERT_EQ(a[k].dims(), b[k].dims()) << what << " output " << k;
    for (int64_t i = 0; i < a[k].num_elements(); ++i) {
      if (a[k].dtype() == DType::kString) {
        EXPECT_EQ(a[k].GetString(i), b[k].GetString(i)) << what << " output " << k << " element " << i;
      } else {
        EXPECT_EQ(a[k].GetAsInt64(i), b[k].GetAsInt64(i)) << what << " output " << k << " element " << i;
      }
    }
  }
}

TEST(TextOpsTest, SplitConcatEqualAgreeWithReference) {
  static const char* kPieces[] = {"a", "b", " ", "  ", ",", ",,", "\xc3\xa9", "\t", "ab", ""};
  static const char* kDelimiters[] = {"", ",", " ", ",,", "ab", "\xc3\xa9"};
  std::mt19937 rng(11);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  for (int round = 0; round < 300; ++round) {
    std::vector<std::string> texts;
    for (int t = 0, n = pick(6); t < n; ++t) {
      std::string text;
      for (int i = 0, m = pick(7); i < m; ++i) text += kPieces[pick(10)];
      texts.push_back(text);
    }
    const Tensor x = Strings(texts);
    std::map<std::string, AttrValue> attrs;
    if (pick(4) != 0) attrs["delimiter"] = std::string(kDelimiters[pick(6)]);
    if (pick(2) != 0) attrs["maxsplit"] = static_cast<int64_t>(pick(4) - 1);
    std::vector<Tensor> kernel, reference;
    absl::Status s = RunBoth("StringSplit", {x}, attrs, 2, &kernel, &reference);
    ASSERT_TRUE(s.ok()) << s;
    ExpectSameTensors(kernel, reference, "StringSplit round " + std::to_string(round));
    // The pieces against the texts, broadcast: [n, width] with [n, 1].
    Tensor column(DType::kString, {x.dims()[0], 1});
    for (int64_t i = 0; i < x.num_elements(); ++i) column.SetString(i, x.GetString(i));
    ASSERT_TRUE(RunBoth("StringConcat", {kernel[0], column}, {}, 1, &kernel, &reference).ok());
    ExpectSameTensors(kernel, reference, "StringConcat round " + std::to_string(round));
    ASSERT_TRUE(RunBoth("Equal", {kernel[0], column}, {}, 1, &kernel, &reference).ok());
    ExpectSameTensors(kernel, reference, "Equal round " + std::to_string(round));
  }
}

}  // namespace
}  // namespace kiln
