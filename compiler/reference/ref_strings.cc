// The reference for string tensors: Cast/CastLike to and from strings, StringNormalizer,
// and the data-movement ops on strings. Numbers are formatted and parsed with the C
// library (snprintf, strtod), independent of the kernels' own exact conversions.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kiln/compiler/tensor.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

using Outputs = absl::StatusOr<std::vector<Tensor>>;

// Whether `text`, read back as `dtype`, is the value `value` (already of that precision).
bool RoundTrips(const std::string& text, double value, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return std::strtof(text.c_str(), nullptr) == static_cast<float>(value);
    case DType::kFloat16: return HalfToFloat(FloatToHalf(std::strtof(text.c_str(), nullptr))) == value;
    case DType::kBFloat16: {
      Tensor t(DType::kBFloat16, {1});
      StoreDouble(t, 0, std::strtof(text.c_str(), nullptr));
      return LoadDouble(t, 0) == value;
    }
    default: return std::strtod(text.c_str(), nullptr) == value;
  }
}

// A float as numpy's str() writes it: the fewest significant digits that read back as the
// same value of its type, positional for 1e-4 <= |x| < 1e16 ("0.25", "100.0"), otherwise
// scientific with a two-digit exponent at least ("1e-05", "1.5e+20"); "nan", "inf", "-inf".
std::string FormatFloat(double value, DType dtype) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", digits - 1, value);
    if (RoundTrips(buffer, value, dtype)) break;
  }
  // buffer: [-]d[.ddd]e<sign><exponent>
  std::string text(buffer);
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  const bool negative = text[0] == '-';
  std::string mantissa_digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (text[i] != '.') mantissa_digits += text[i];
  }
  while (mantissa_digits.size() > 1 && mantissa_digits.back() == '0') mantissa_digits.pop_back();
  const std::string sign = negative ? "-" : "";
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e-4 && magnitude < 1e16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + mantissa_digits;
    } else if (static_cast<size_t>(exponent) + 1 >= mantissa_digits.size()) {
      out = mantissa_digits + std::string(static_cast<size_t>(exponent) + 1 - mantissa_digits.size(), '0') + ".0";
    } else {
      out = mantissa_digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
            mantissa_digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return sign + out;
  }
  std::string out = mantissa_digits.substr(0, 1);
  if (mantissa_digits.size() > 1) out += "." + mantissa_digits.substr(1);
  const int magnitude_exponent = exponent < 0 ? -exponent : exponent;
  return absl::StrCat(sign, out, "e", exponent < 0 ? "-" : "+", magnitude_exponent < 10 ? "0" : "", magnitude_exponent);
}

std::string FormatElement(const Tensor& x, int64_t i) {
  const DType dtype = x.dtype();
  if (IsFloatType(dtype)) return FormatFloat(LoadDouble(x, i), dtype);
  if (dtype == DType::kBool) return LoadInt(x, i) != 0 ? "True" : "False";
  if (dtype == DType::kUInt64) return std::to_string(static_cast<uint64_t>(LoadInt(x, i)));
  return std::to_string(LoadInt(x, i));
}

// ONNX's string-to-number rule: plain and scientific decimals, and "INF", "+INF", "-INF",
// "NaN" in any case; the whole string must be the number.
absl::StatusOr<double> ParseNumber(const std::string& text) {
  std::string upper = absl::AsciiStrToUpper(text);
  if (upper == "INF" || upper == "+INF") return HUGE_VAL;
  if (upper == "-INF") return -HUGE_VAL;
  if (upper == "NAN") return std::nan("");
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
  });
  char* end = nullptr;
  const double value = plain ? std::strtod(text.c_str(), &end) : 0;
  if (!plain || end != text.c_str() + text.size()) return Invalid(absl::StrCat("'", text, "' is not a number"));
  return value;
}

// x (strings) as `to`: parsed in double, then cast as a double tensor is (a float32 result
// is parsed in float, so it rounds once).
Outputs FromStrings(const Tensor& x, DType to, const RefFn& cast_numbers, const Node& node, const Inputs& in) {
  Tensor parsed(to == DType::kFloat32 ? DType::kFloat32 : DType::kFloat64, x.dims());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const std::string text(x.GetString(i));
    KILN_ASSIGN_OR_RETURN(double value, ParseNumber(text));
    if (to == DType::kFloat32 && std::isfinite(value)) value = std::strtof(text.c_str(), nullptr);
    StoreDouble(parsed, i, value);
  }
  if (to == parsed.dtype()) return std::vector<Tensor>{std::move(parsed)};
  Inputs numbers = in;
  numbers[0] = &parsed;
  return cast_numbers(node, numbers);
}

RefFn CastWithStrings(RefFn cast_numbers, bool like) {
  return [cast_numbers, like](const Node& node, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    const DType to =
        like ? (in.size() > 1 && in[1] ? in[1]->dtype() : DType::kUndefined) : static_cast<DType>(node.GetInt("to", 0));
    if (x->dtype() == DType::kString && to == DType::kString) return std::vector<Tensor>{*x};
    if (x->dtype() == DType::kString) return FromStrings(*x, to, cast_numbers, node, in);
    if (to != DType::kString) return cast_numbers(node, in);
    Tensor out(DType::kString, x->dims());
    for (int64_t i = 0; i < x->num_elements(); ++i) out.SetString(i, FormatElement(*x, i));
    return std::vector<Tensor>{std::move(out)};
  };
}

std::vector<std::string> StringsAttr(const Node& node, const std::string& key) {
  auto it = node.attrs().find(key);
  if (it == node.attrs().end()) return {};
  const auto* strings = std::get_if<std::vector<std::string>>(&it->second);
  return strings != nullptr ? *strings : std::vector<std::string>{};
}

// StringNormalizer (opset 10): drop the stopwords (compared in ASCII case-insensitively
// unless is_case_sensitive), then change case; [C] or [1, C]; all dropped gives one "".
Outputs StringNormalizer(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const std::string action = node.GetString("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER") {
    return Invalid(absl::StrCat("case_change_action '", action, "' is not NONE, LOWER or UPPER"));
  }
  const std::string locale = node.GetString("locale", "");
  if (!locale.empty() && locale != "en_US" && locale != "C" && locale != "en_US.UTF-8") {
    return Invalid(absl::StrCat("locale '", locale, "' is not supported (ASCII case rules only: en_US)"));
  }
  const bool sensitive = node.GetInt("is_case_sensitive", 0) != 0;
  const std::vector<std::string> stopwords = StringsAttr(node, "stopwords");
  const bool two_dim = x->rank() == 2;
  if (!(x->rank() == 1 || (two_dim && x->dims()[0] == 1))) return Invalid("input must be [C] or [1, C]");
  std::vector<std::string> kept;
  for (int64_t i = 0; i < x->num_elements(); ++i) {
    const std::string text(x->GetString(i));
    bool stop = false;
    for (const std::string& word : stopwords) {
      stop = stop || (sensitive ? word == text : absl::EqualsIgnoreCase(word, text));
    }
    if (stop) continue;
    if (action == "LOWER") kept.push_back(absl::AsciiStrToLower(text));
    if (action == "UPPER") kept.push_back(absl::AsciiStrToUpper(text));
    if (action == "NONE") kept.push_back(text);
  }
  if (kept.empty()) kept.push_back("");
  const int64_t count = static_cast<int64_t>(kept.size());
  Tensor out(DType::kString, two_dim ? std::vector<int64_t>{1, count} : std::vector<int64_t>{count});
  for (int64_t i = 0; i < count; ++i) out.SetString(i, kept[static_cast<size_t>(i)]);
  return std::vector<Tensor>{std::move(out)};
}

// An op that only moves elements, on strings: run on each string input's element numbers
// (numbered on across inputs), then each string output's numbers picked back as texts.
RefFn MoveStrings(RefFn move) {
  return [move](const Node& node, const Inputs& in) -> Outputs {
    const bool any =
        std::any_of(in.begin(), in.end(), [](const Tensor* t) { return t && t->dtype() == DType::kString; });
    if (!any) return move(node, in);
    std::vector<std::string> texts;
    std::vector<Tensor> numbered;
    numbered.reserve(in.size());
    Inputs args = in;
    for (size_t k = 0; k < in.size(); ++k) {
      if (in[k] == nullptr || in[k]->dtype() != DType::kString) continue;
      Tensor& numbers = numbered.emplace_back(DType::kInt64, in[k]->dims());
      for (int64_t i = 0; i < in[k]->num_elements(); ++i) {
        numbers.data_as<int64_t>()[i] = static_cast<int64_t>(texts.size());
        texts.emplace_back(in[k]->GetString(i));
      }
      args[k] = &numbers;
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> results, move(node, args));
    for (size_t k = 0; k < results.size() && k < node.outputs().size(); ++k) {
      if (node.outputs()[k]->type().dtype != DType::kString) continue;
      Tensor strings(DType::kString, results[k].dims());
      for (int64_t i = 0; i < strings.num_elements(); ++i) {
        const int64_t n = results[k].data_as<int64_t>()[i];
        if (n < 0 || n >= static_cast<int64_t>(texts.size())) return Invalid("a string element was lost");
        strings.SetString(i, texts[static_cast<size_t>(n)]);
      }
      results[k] = std::move(strings);
    }
    return results;
  };
}

// Any other op refuses strings rather than read their pointers as numbers.
RefFn NoStrings(RefFn evaluate) {
  return [evaluate](const Node& node, const Inputs& in) -> Outputs {
    for (const Tensor* t : in) {
      if (t != nullptr && t->dtype() == DType::kString) {
        return Invalid(absl::StrCat(node.op(), " on string tensors is not supported"));
      }
    }
    return evaluate(node, in);
  };
}

}  // namespace

void AddStringOps(RefTable& table) {
  for (auto& [op, evaluate] : table) evaluate = NoStrings(evaluate);
  table["Cast"] = CastWithStrings(table.at("Cast"), false);
  table["CastLike"] = CastWithStrings(table.at("CastLike"), true);
  table["StringNormalizer"] = StringNormalizer;
  // Identity copies the tensor, texts included; the others move element numbers.
  table["Identity"] = [](const Node&, const Inputs& in) -> Outputs {
    if (in.empty() || in[0] == nullptr) return Invalid("input 0 is required");
    return std::vector<Tensor>{*in[0]};
  };
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Gather", "Slice",
                         "Expand", "Tile", "Split"}) {
    if (auto it = table.find(op); it != table.end()) it->second = MoveStrings(it->second);
  }
}

}  // namespace kiln::ref
