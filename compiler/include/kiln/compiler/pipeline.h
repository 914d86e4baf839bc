// Pass pipelines as text, MLIR style:
//   fold-constants,fuse,prune{channels=0.3 skip=conv1,conv2},quantize{method=entropy}
// Options go in braces after the pass, separated by spaces or commas; a list's names by
// commas; a name with spaces, commas, braces, '=' or quotes in double quotes.
// The passes and their options come from one table (compiler/passes/passes.def). This
// library knows only names and option values, not the passes' code, and needs neither
// LLVM nor the IR, so the CompileSpec's Normalize (linked by kilnd) can canonicalise a
// pipeline with it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

enum class PassOptionType {
  kNumber,  // a double
  kBool,    // true or false
  kChoice,  // one of the option's choices
  kList,    // names separated by commas; a set: printed sorted, without repeats
};

struct PassOptionInfo {
  const char* name;
  PassOptionType type;
  const char* default_value;
  const char* values;  // kChoice: the choices, "a|b|c"; kNumber: an interval, "[0, 1)"; else ""
  const char* help;
};

struct PassInfo {
  const char* name;
  const char* summary;
  std::vector<PassOptionInfo> options;
};

// Every pass in passes.def, in table order.
const std::vector<PassInfo>& RegisteredPasses();
const PassInfo* FindPass(absl::string_view name);

// One pass of a pipeline with the options it was given. Values are kept in canonical text
// (a number printed shortest, a list sorted); options left at their default are absent.
class PassInvocation {
 public:
  explicit PassInvocation(const PassInfo& info) : info_(&info) {}

  const PassInfo& info() const { return *info_; }
  std::string name() const { return info_->name; }
  const std::map<std::string, std::string>& options() const { return options_; }

  // Checks the value (pipeline syntax: a list is "a,b", a name with odd characters is
  // quoted) against the option's type and stores it canonically.
  absl::Status Set(absl::string_view option, absl::string_view value);
  // Typed setters for callers that hold the value itself, e.g. a node name from a spec.
  absl::Status SetNumber(absl::string_view option, double value);
  absl::Status SetList(absl::string_view option, const std::vector<std::string>& names);

  // The option's value (its default when not set). The name must be one of the pass's
  // options of that type: a wrong one is a bug in the caller, not the user's error.
  double Number(absl::string_view option) const;
  bool Bool(absl::string_view option) const;
  std::string Choice(absl::string_view option) const;
  std::vector<std::string> List(absl::string_view option) const;

  // "name" or "name{opt=value opt2=a,b}", options in table order.
  std::string Print() const;

 private:
  std::string Raw(absl::string_view option, PassOptionType type) const;

  const PassInfo* info_;
  std::map<std::string, std::string> options_;
};

using Pipeline = std::vector<PassInvocation>;

// Parses pipeline text. Errors name the pass or option, the bad value and the character
// position, e.g. "pipeline 'cse,fuze' at character 5: unknown pass 'fuze'; passes: ...".
absl::StatusOr<Pipeline> ParsePipeline(absl::string_view text);
// Canonical text: equal for pipelines that mean the same.
std::string PrintPipeline(const Pipeline& pipeline);
absl::StatusOr<std::string> CanonicalPipeline(absl::string_view text);

// The first invocation of `pass` in the pipeline, or nullptr.
PassInvocation* FindInvocation(Pipeline& pipeline, absl::string_view pass);

// --list-passes: a header line, then "  name  summary" for each pass with a line
// "      option=default  (type) help" for each of its options.
std::string DescribePasses();

constexpr const char kDefaultPipeline[] =
    "fold-qdq,fold-constants,simplify,cse,dce,fold-batchnorm,fuse,dce,layout,plan-memory";
// --precision int8: quantize (calibrated QDQ) after BatchNorm folding, then fold-qdq turns
// the QDQ pairs into integer ops.
// --precision bf16 (targets with avx512bf16): the default, then bf16 marks the products
// that run in bf16 (after layout, whose blocked convolutions stay f32).
constexpr const char kBf16Pipeline[] =
    "fold-qdq,fold-constants,simplify,cse,dce,fold-batchnorm,fuse,dce,layout,bf16,plan-memory";
constexpr const char kInt8Pipeline[] =
    "fold-constants,simplify,cse,dce,fold-batchnorm,quantize,fold-qdq,fold-constants,dce,fuse,dce,layout,plan-memory";

}  // namespace kiln
