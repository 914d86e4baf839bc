// The reference for the string ops of opsets 19 and 20: Equal on strings, StringConcat,
// StringSplit and RegexFullMatch. The regex is its own: a parse of RE2's syntax into a tree
// and a matcher that computes, for each subtree and start, the set of positions where it
// can end (memoised), so a text matches when its length is among the root's ends from 0.
// Case folding is done when matching (orbit of each text character), not when parsing.
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/tensor.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

using Outputs = absl::StatusOr<std::vector<Tensor>>;

// Both inputs strings: the broadcast output of `dtype`, filled by set(out, i, a, b).
template <typename Set>
Outputs BinaryOnStrings(const Inputs& in, DType dtype, const Set& set) {
  KILN_REF_INPUT(a, in, 0);
  KILN_REF_INPUT(b, in, 1);
  if (a->dtype() != DType::kString || b->dtype() != DType::kString) return Invalid("both inputs must be strings");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastDims({a->dims(), b->dims()}));
  Tensor out(dtype, dims);
  KILN_RETURN_IF_ERROR(ForEachBroadcast({a, b}, [&](int64_t i, const int64_t* offsets) {
                         set(out, i, a->GetString(offsets[0]), b->GetString(offsets[1]));
                       }).status());
  return std::vector<Tensor>{std::move(out)};
}

RefFn EqualWithStrings(RefFn numeric) {
  return [numeric](const Node& node, const Inputs& in) -> Outputs {
    if (in.size() < 2 || in[0] == nullptr || in[0]->dtype() != DType::kString) return numeric(node, in);
    return BinaryOnStrings(in, DType::kBool, [](Tensor& out, int64_t i, std::string_view a, std::string_view b) {
      out.data_as<bool>()[i] = a == b;
    });
  };
}

Outputs StringConcat(const Node&, const Inputs& in) {
  return BinaryOnStrings(in, DType::kString, [](Tensor& out, int64_t i, std::string_view a, std::string_view b) {
    out.SetString(i, std::string(a) + std::string(b));
  });
}

// One text's pieces, as ONNX Runtime splits: none for "", runs of ' ' for an empty
// delimiter (the rest after maxsplit splits trimmed of spaces at its end).
std::vector<std::string> Split(const std::string& text, const std::string& delimiter, int64_t maxsplit) {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  auto room = [&] { return maxsplit < 0 || static_cast<int64_t>(pieces.size()) < maxsplit; };
  if (!delimiter.empty()) {
    size_t from = 0;
    for (size_t at; room() && (at = text.find(delimiter, from)) != std::string::npos; from = at + delimiter.size()) {
      pieces.push_back(text.substr(from, at - from));
    }
    pieces.push_back(text.substr(from));
    return pieces;
  }
  size_t from = text.find_first_not_of(' ');
  while (from != std::string::npos) {
    if (!room()) {
      pieces.push_back(text.substr(from, text.find_last_not_of(' ') + 1 - from));
      break;
    }
    const size_t end = text.find(' ', from);
    pieces.push_back(text.substr(from, end == std::string::npos ? std::string::npos : end - from));
    from = end == std::string::npos ? end : text.find_first_not_of(' ', end);
  }
  return pieces;
}

Outputs StringSplit(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  if (x->dtype() != DType::kString) return Invalid("input X must be a string tensor");
  const std::string delimiter = node.GetString("delimiter", "");
  const int64_t maxsplit = node.GetInt("maxsplit", -1);
  std::vector<std::vector<std::string>> all;
  size_t width = 0;
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    all.push_back(Split(std::string(x->GetString(i)), delimiter, maxsplit));
    width = std::max(width, all.back().size());
  }
  std::vector<int64_t> dims = x->dims();
  Tensor counts(DType::kInt64, dims);
  dims.push_back(static_cast<int64_t>(width));
  Tensor pieces(DType::kString, dims);
  for (size_t i = 0; i < all.size(); ++i) {
    counts.data_as<int64_t>()[i] = static_cast<int64_t>(all[i].size());
    for (size_t k = 0; k < width; ++k) {
      pieces.SetString(static_cast<int64_t>(i * width + k), k < all[i].size() ? all[i][k] : "");
    }
  }
  return std::vector<Tensor>{std::move(pieces), std::move(counts)};
}

}  // namespace

// The regex tree and its parser and matcher live in ref_regex.cc.
absl::StatusOr<bool> RegexFullMatches(const std::string& pattern, const std::string& text);

namespace {

Outputs RegexFullMatch(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  if (x->dtype() != DType::kString) return Invalid("input X must be a string tensor");
  const std::string pattern = node.GetString("pattern", "");
  Tensor out(DType::kBool, x->dims());
  KILN_RETURN_IF_ERROR(RegexFullMatches(pattern, "").status());
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    KILN_ASSIGN_OR_RETURN(bool match, RegexFullMatches(pattern, std::string(x->GetString(i))));
    out.data_as<bool>()[i] = match;
  }
  return std::vector<Tensor>{std::move(out)};
}

}  // namespace

void AddTextOps(RefTable& table) {
  table["Equal"] = EqualWithStrings(table.at("Equal"));
  table["StringConcat"] = StringConcat;
  table["StringSplit"] = StringSplit;
  table["RegexFullMatch"] = RegexFullMatch;
}

}  // namespace kiln::ref
