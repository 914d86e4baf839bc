// Pipeline text: the pass table (passes.def), the parser and the canonical printer. Built
// into kiln_pipeline, which needs only abseil: kilnd canonicalises specs with it.
#include "kiln/compiler/pipeline.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kiln {
namespace {

using Type = PassOptionType;

std::vector<PassInfo> BuildTable() {
  std::vector<PassInfo> table;
#define KILN_PASS(CLASS, NAME, SUMMARY) table.push_back(PassInfo{NAME, SUMMARY, {}});
#define KILN_PASS_OPTION(CLASS, NAME, TYPE, DEFAULT, VALUES, HELP) \
  table.back().options.push_back(PassOptionInfo{NAME, Type::TYPE, DEFAULT, VALUES, HELP});
#include "passes.def"
  return table;
}

const PassOptionInfo* FindOption(const PassInfo& pass, absl::string_view name) {
  for (const PassOptionInfo& option : pass.options) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

// Names with characters the grammar uses are written in double quotes, \" and \\ escaped.
bool NeedsQuotes(absl::string_view name) {
  if (name.empty()) return true;
  for (char c : name) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::string_view(",{}=\"\\").find(c) != absl::string_view::npos)
      return true;
  }
  return false;
}

std::string Quote(absl::string_view name) {
  if (!NeedsQuotes(name)) return std::string(name);
  std::string out = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Splits "a,\"b,c\",d" at the commas outside quotes and unquotes each part.
absl::StatusOr<std::vector<std::string>> SplitList(absl::string_view text) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  std::string current;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted && c == '\\' && i + 1 < text.size()) {
      current += text[++i];
    } else if (c == '"') {
      quoted = !quoted;
      was_quoted = true;
    } else if (!quoted && c == ',') {
      if (current.empty() && !was_quoted) return absl::InvalidArgumentError("an empty name in the list");
      parts.push_back(std::move(current));
      current.clear();
      was_quoted = false;
    } else {
      current += c;
    }
  }
  if (quoted) return absl::InvalidArgumentError("a quote is not closed");
  if (current.empty() && !was_quoted) return absl::InvalidArgumentError("an empty name in the list");
  parts.push_back(std::move(current));
  return parts;
}

// Whether `value` lies in `interval`, written "[lo, hi)", "(lo, hi]" and so on; "" holds
// every number. The table's intervals are checked by the pipeline tests.
bool InInterval(double value, absl::string_view interval) {
  if (interval.empty()) return true;
  const std::vector<absl::string_view> ends = absl::StrSplit(interval.substr(1, interval.size() - 2), ',');
  double lo = 0, hi = 0;
  if (ends.size() != 2 || !absl::SimpleAtod(ends[0], &lo) || !absl::SimpleAtod(ends[1], &hi)) return false;
  const bool above = interval.front() == '[' ? value >= lo : value > lo;
  const bool below = interval.back() == ']' ? value <= hi : value < hi;
  return above && below;
}

// The shortest text that reads back as the same double, so 0.30 and 0.3 print alike.
std::string FormatNumber(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

absl::StatusOr<std::string> CanonicalValue(const PassOptionInfo& option, absl::string_view text) {
  switch (option.type) {
    case Type::kNumber: {
      double value = 0;
      if (!absl::SimpleAtod(text, &value) || !std::isfinite(value))
        return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a number"));
      if (!InInterval(value, option.values))
        return absl::InvalidArgumentError(absl::StrCat(text, " is not in ", option.values));
      return FormatNumber(value == 0 ? 0.0 : value);  // -0 is 0
    }
    case Type::kBool:
      if (text == "true" || text == "false") return std::string(text);
      return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not true or false"));
    case Type::kChoice:
      for (absl::string_view choice : absl::StrSplit(option.values, '|')) {
        if (choice == text) return std::string(text);
      }
      return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not one of ", option.values));
    case Type::kList: {
      auto parts = SplitList(text);
      if (!parts.ok()) return absl::InvalidArgumentError(absl::StrCat("'", text, "': ", parts.status().message()));
      std::set<std::string> names(parts->begin(), parts->end());
      std::vector<std::string> quoted;
      for (const std::string& name : names) quoted.push_back(Quote(name));
      return absl::StrJoin(quoted, ",");
    }
  }
  return absl::InternalError("unknown option type");
}

std::string TypeName(const PassOptionInfo& option) {
  switch (option.type) {
    case Type::kNumber: return *option.values ? absl::StrCat("number in ", option.values) : "number";
    case Type::kBool: return "true|false";
    case Type::kChoice: return option.values;
    case Type::kList: return "names, comma-separated";
  }
  return "";
}

std::string OptionNames(const PassInfo& pass) {
  if (pass.options.empty()) return "it takes none";
  std::vector<std::string> names;
  for (const PassOptionInfo& option : pass.options) names.push_back(option.name);
  return absl::StrCat("options: ", absl::StrJoin(names, ", "));
}

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

// Recursive descent over the grammar
//   pipeline := [pass (',' pass)*]     pass := NAME ['{' option* '}']
//   option   := NAME '=' VALUE         options are separated by spaces or commas
// A list value's commas belong to the value unless an option name and '=' follow.
class PipelineParser {
 public:
  explicit PipelineParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Pipeline> Parse() {
    Pipeline pipeline;
    SkipSpace();
    while (pos_ < text_.size()) {
      auto pass = ParsePass();
      if (!pass.ok()) return pass.status();
      pipeline.push_back(std::move(*pass));
      SkipSpace();
      if (pos_ == text_.size()) break;
      if (text_[pos_] != ',')
        return Error(pos_, absl::StrCat("expected ',' between passes, found '", text_.substr(pos_, 1), "'"));
      ++pos_;
      SkipSpace();
      if (pos_ == text_.size()) return Error(pos_, "expected a pass name after ','");
    }
    return pipeline;
  }

 private:
  absl::Status Error(size_t at, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("pipeline '", text_, "' at character ", at + 1, ": ", message));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  absl::string_view ReadName() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  absl::StatusOr<PassInvocation> ParsePass() {
    const size_t start = pos_;
    const absl::string_view name = ReadName();
    if (name.empty()) return Error(start, absl::StrCat("expected a pass name, found '", text_.substr(start, 1), "'"));
    const PassInfo* info = FindPass(name);
    if (info == nullptr) {
      std::vector<std::string> known;
      for (const PassInfo& pass : RegisteredPasses()) known.push_back(pass.name);
      return Error(start, absl::StrCat("unknown pass '", name, "'; passes: ", absl::StrJoin(known, ", ")));
    }
    PassInvocation pass(*info);
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '{') {
      ++pos_;
      if (absl::Status s = ParseOptions(pass); !s.ok()) return s;
    }
    return pass;
  }

  absl::Status ParseOptions(PassInvocation& pass) {
    const size_t open = pos_ - 1;
    while (true) {
      while (pos_ < text_.size() &&
             (text_[pos_] == ',' || absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))))
        ++pos_;
      if (pos_ == text_.size())
        return Error(open, absl::StrCat("the options of '", pass.name(), "' are not closed by '}'"));
      if (text_[pos_] == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      if (absl::Status s = ParseOption(pass); !s.ok()) return s;
    }
  }

  absl::Status ParseOption(PassInvocation& pass) {
    const size_t start = pos_;
    const absl::string_view name = ReadName();
    if (name.empty())
      return Error(start, absl::StrCat("expected an option name, found '", text_.substr(start, 1), "'"));
    const PassOptionInfo* option = FindOption(pass.info(), name);
    if (option == nullptr) {
      return Error(start,
                   absl::StrCat("pass '", pass.name(), "' has no option '", name, "'; ", OptionNames(pass.info())));
    }
    if (pos_ == text_.size() || text_[pos_] != '=')
      return Error(pos_, absl::StrCat("expected '=' after option '", name, "' of pass '", pass.name(), "'"));
    ++pos_;
    const size_t value_start = pos_;
    const absl::string_view value = ReadValue(pass.info(), option->type == Type::kList);
    if (absl::Status s = pass.Set(name, value); !s.ok()) return Error(value_start, s.message());
    return absl::OkStatus();
  }

  // Up to a space, '}' or (outside a list, or before "option=") a comma; quotes protect all.
  absl::string_view ReadValue(const PassInfo& pass, bool list) {
    const size_t start = pos_;
    bool quoted = false;
    for (; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (quoted) {
        if (c == '\\') ++pos_;
        if (c == '"') quoted = false;
        continue;
      }
      if (c == '"') quoted = true;
      if (c == '}' || absl::ascii_isspace(static_cast<unsigned char>(c))) break;
      if (c == ',' && (!list || StartsOption(pass, pos_ + 1))) break;
    }
    return text_.substr(start, pos_ - start);
  }

  bool StartsOption(const PassInfo& pass, size_t at) const {
    size_t end = at;
    while (end < text_.size() && IsNameChar(text_[end])) ++end;
    return end < text_.size() && text_[end] == '=' && FindOption(pass, text_.substr(at, end - at)) != nullptr;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const std::vector<PassInfo>& RegisteredPasses() {
  static const auto* table = new std::vector<PassInfo>(BuildTable());
  return *table;
}

const PassInfo* FindPass(absl::string_view name) {
  for (const PassInfo& pass : RegisteredPasses()) {
    if (pass.name == name) return &pass;
  }
  return nullptr;
}

absl::Status PassInvocation::Set(absl::string_view option, absl::string_view value) {
  const PassOptionInfo* info = FindOption(*info_, option);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("pass '", name(), "' has no option '", option, "'; ", OptionNames(*info_)));
  }
  auto canonical = CanonicalValue(*info, value);
  if (!canonical.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("option '", option, "' of pass '", name(), "': ", canonical.status().message()));
  }
  // Options at their default are left out, so "prune{skip=}" prints as "prune".
  const std::string default_value = *CanonicalValue(*info, info->default_value);
  if (*canonical == default_value) {
    options_.erase(std::string(option));
  } else {
    options_[std::string(option)] = std::move(*canonical);
  }
  return absl::OkStatus();
}

absl::Status PassInvocation::SetNumber(absl::string_view option, double value) {
  return Set(option, FormatNumber(value));
}

absl::Status PassInvocation::SetList(absl::string_view option, const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& name : names) quoted.push_back(Quote(name));
  return Set(option, absl::StrJoin(quoted, ","));
}

std::string PassInvocation::Raw(absl::string_view option, PassOptionType type) const {
  const PassOptionInfo* info = FindOption(*info_, option);
  if (info == nullptr || info->type != type) {
    std::fprintf(stderr, "kiln: pass '%s' has no option '%.*s' of that type\n", info_->name,
                 static_cast<int>(option.size()), option.data());
    std::abort();
  }
  auto it = options_.find(std::string(option));
  // Defaults are canonical in the table (checked by the pipeline test).
  return it != options_.end() ? it->second : std::string(info->default_value);
}

double PassInvocation::Number(absl::string_view option) const {
  double value = 0;
  (void)absl::SimpleAtod(Raw(option, Type::kNumber), &value);
  return value;
}

bool PassInvocation::Bool(absl::string_view option) const { return Raw(option, Type::kBool) == "true"; }

std::string PassInvocation::Choice(absl::string_view option) const { return Raw(option, Type::kChoice); }

std::vector<std::string> PassInvocation::List(absl::string_view option) const {
  auto parts = SplitList(Raw(option, Type::kList));
  return parts.ok() ? *parts : std::vector<std::string>{};
}

std::string PassInvocation::Print() const {
  std::vector<std::string> set;
  for (const PassOptionInfo& option : info_->options) {
    auto it = options_.find(option.name);
    if (it != options_.end()) set.push_back(absl::StrCat(option.name, "=", it->second));
  }
  if (set.empty()) return info_->name;
  return absl::StrCat(info_->name, "{", absl::StrJoin(set, " "), "}");
}

absl::StatusOr<Pipeline> ParsePipeline(absl::string_view text) { return PipelineParser(text).Parse(); }

std::string PrintPipeline(const Pipeline& pipeline) {
  std::vector<std::string> passes;
  for (const PassInvocation& pass : pipeline) passes.push_back(pass.Print());
  return absl::StrJoin(passes, ",");
}

absl::StatusOr<std::string> CanonicalPipeline(absl::string_view text) {
  auto pipeline = ParsePipeline(text);
  if (!pipeline.ok()) return pipeline.status();
  return PrintPipeline(*pipeline);
}

PassInvocation* FindInvocation(Pipeline& pipeline, absl::string_view pass) {
  for (PassInvocation& invocation : pipeline) {
    if (invocation.info().name == pass) return &invocation;
  }
  return nullptr;
}

std::string DescribePasses() {
  std::string out = "Passes and their options (--pipeline 'a,b{option=value}'):\n";
  for (const PassInfo& pass : RegisteredPasses()) {
    const size_t width = absl::string_view(pass.name).size();
    absl::StrAppend(&out, "  ", pass.name, std::string(width < 16 ? 16 - width : 1, ' '), pass.summary, "\n");
    for (const PassOptionInfo& option : pass.options) {
      absl::StrAppend(&out, "      ", option.name, "=", option.default_value, "  (", TypeName(option), ") ",
                      option.help, "\n");
    }
  }
  return out;
}

}  // namespace kiln
