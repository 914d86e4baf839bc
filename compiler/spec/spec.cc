// Normalize and ActionKey for the CompileSpec: see spec.h. The rules are the service's
// (once NormalizeRequest in server/src/service.cc) and the CLI's, in one place.
#include "kiln/compiler/spec.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "kiln/common/sha256.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/target.h"

namespace kiln {
namespace {

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// -0.0 and 0.0 compare equal but serialize differently; keys must not tell them apart.
double Canonical(double value) { return value + 0.0; }

absl::Status CheckDigest(const v1::Digest& digest, const std::string& field) {
  const std::string& sha = digest.sha256();
  if (sha.size() != 64 || !IsLowercaseHex(sha))
    return Invalid(absl::StrCat(field, ": sha256 '", sha, "' is not 64 lowercase hex characters"));
  if (digest.size_bytes() < 0)
    return Invalid(absl::StrCat(field, ": size_bytes ", digest.size_bytes(), " is negative"));
  return absl::OkStatus();
}

// Sorted, without repeats: the order of a name list means nothing.
void SortUnique(google::protobuf::RepeatedPtrField<std::string>* names) {
  std::set<std::string> sorted(names->begin(), names->end());
  names->Clear();
  for (const std::string& name : sorted) *names->Add() = name;
}

absl::Status NormalizeInputShapes(v1::CompileSpec& spec) {
  auto* shapes = spec.mutable_input_shapes();
  for (const v1::InputShape& shape : *shapes) {
    if (shape.name().empty()) return Invalid("input_shapes: an entry has no input name");
    if (shape.dims().empty()) return Invalid(absl::StrCat("input_shapes '", shape.name(), "' has no dims"));
    for (int32_t d : shape.dims()) {
      if (d <= 0) return Invalid(absl::StrCat("input_shapes '", shape.name(), "' has dim ", d, "; dims must be >= 1"));
    }
  }
  std::sort(shapes->begin(), shapes->end(),
            [](const v1::InputShape& a, const v1::InputShape& b) { return a.name() < b.name(); });
  for (int i = 1; i < shapes->size(); ++i) {
    if (shapes->Get(i).name() == shapes->Get(i - 1).name())
      return Invalid(absl::StrCat("input_shapes gives '", shapes->Get(i).name(), "' twice"));
  }
  return absl::OkStatus();
}

absl::Status NormalizeQuantization(v1::CompileSpec::Quantization& q) {
  if (q.precision().empty()) q.set_precision("fp32");
  if (q.precision() != "fp32" && q.precision() != "int8" && q.precision() != "bf16")
    return Invalid(absl::StrCat("quantization.precision '", q.precision(), "' is not one of fp32, int8, bf16"));
  if (q.precision() == "fp32" || q.precision() == "bf16") {
    for (const auto& [set, field] : {std::pair<bool, const char*>{q.calibration_size() > 0, "calibration"},
                                     {!q.method().empty(), "method"},
                                     {q.percentile() != 0, "percentile"},
                                     {q.keep_float_size() > 0, "keep_float"}}) {
      if (set) return Invalid(absl::StrCat("quantization.", field, " goes with quantization.precision int8"));
    }
    return absl::OkStatus();
  }
  if (q.calibration_size() == 0)
    return Invalid(
        "quantization.precision int8 needs quantization.calibration: the samples activation ranges come from");
  for (int i = 0; i < q.calibration_size(); ++i) {
    if (auto s = CheckDigest(q.calibration(i), absl::StrCat("quantization.calibration[", i, "]")); !s.ok()) return s;
  }
  if (q.method().empty()) q.set_method("minmax");
  if (q.method() != "minmax" && q.method() != "percentile" && q.method() != "entropy")
    return Invalid(absl::StrCat("quantization.method '", q.method(), "' is not one of minmax, percentile, entropy"));
  if (q.method() != "percentile" && q.percentile() != 0)
    return Invalid("quantization.percentile goes with quantization.method percentile");
  if (q.method() == "percentile") {
    if (q.percentile() == 0) q.set_percentile(kDefaultPercentile);
    if (!(q.percentile() > 50 && q.percentile() <= 100))
      return Invalid(absl::StrCat("quantization.percentile ", q.percentile(), " is not a number in (50, 100]"));
  }
  SortUnique(q.mutable_keep_float());
  return absl::OkStatus();
}

absl::Status NormalizePruning(v1::CompileSpec::Pruning& p) {
  for (const auto& [field, ratio] :
       {std::pair<const char*, double>{"channels", p.channels()}, {"weights", p.weights()}}) {
    if (!(ratio >= 0 && ratio < 1))
      return Invalid(absl::StrCat("pruning.", field, " ", ratio, " is not a share in [0, 1)"));
  }
  p.set_channels(Canonical(p.channels()));
  p.set_weights(Canonical(p.weights()));
  if (p.channels() == 0 && p.weights() == 0 && p.skip_size() > 0)
    return Invalid("pruning.skip goes with pruning.channels or pruning.weights");
  SortUnique(p.mutable_skip());
  return absl::OkStatus();
}

absl::Status NormalizeTuning(v1::CompileSpec::Tuning& t) {
  if (!t.enabled()) {
    if (t.has_budget_seconds()) return Invalid("tuning.budget_seconds goes with tuning.enabled");
    return absl::OkStatus();
  }
  if (!t.has_budget_seconds()) t.set_budget_seconds(kDefaultTuneBudgetSeconds);
  if (!(t.budget_seconds() >= 0) || !std::isfinite(t.budget_seconds()))
    return Invalid(absl::StrCat("tuning.budget_seconds ", t.budget_seconds(), " is not a number of seconds >= 0"));
  t.set_budget_seconds(Canonical(t.budget_seconds()));
  return absl::OkStatus();
}

absl::Status NormalizeAccuracy(v1::CompileSpec::Accuracy& a, bool lossy) {
  if (!std::isfinite(a.atol()) || a.atol() < 0 || !std::isfinite(a.rtol()) || a.rtol() < 0)
    return Invalid("accuracy.atol and accuracy.rtol must be finite and >= 0");
  if (a.atol() == 0 && a.rtol() == 0) {
    a.set_atol(kDefaultAtol);
    a.set_rtol(kDefaultRtol);
  }
  a.set_atol(Canonical(a.atol()));
  a.set_rtol(Canonical(a.rtol()));
  if (!lossy && a.has_max_top1_drop()) {
    return Invalid(
        "accuracy.max_top1_drop goes with quantization.precision int8 or bf16 or pruning (fp32 builds are judged by "
        "accuracy.atol and accuracy.rtol)");
  }
  if (lossy) {
    if (!a.has_max_top1_drop()) a.set_max_top1_drop(kDefaultMaxTop1Drop);
    if (!(a.max_top1_drop() >= 0 && a.max_top1_drop() <= 100))
      return Invalid(
          absl::StrCat("accuracy.max_top1_drop ", a.max_top1_drop(), " is not within [0, 100] percentage points"));
    a.set_max_top1_drop(Canonical(a.max_top1_drop()));
  }
  if (a.has_input_set()) {
    // An empty digest is as good as none (some clients always set the field).
    if (a.input_set().sha256().empty() && a.input_set().size_bytes() == 0) {
      a.clear_input_set();
    } else if (auto s = CheckDigest(a.input_set(), "accuracy.input_set"); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Pipelines that mean the same ("cse, dce" and "cse,dce", "prune{channels=0.30}" and
// "prune{channels=0.3}") must give the same action key. Pruning and quantization are the
// spec's to switch on: the report and the accuracy check read those fields, so a
// pipeline's prune or quantize options apply only where the spec enables them.
absl::Status NormalizePipeline(v1::CompileSpec& spec) {
  auto pipeline = ParsePipeline(spec.pipeline());
  if (!pipeline.ok()) return Invalid(absl::StrCat("pipeline: ", pipeline.status().message()));
  const bool pruned = spec.pruning().channels() > 0 || spec.pruning().weights() > 0;
  const bool int8 = spec.quantization().precision() == "int8";
  for (const PassInvocation& pass : *pipeline) {
    if (pass.name() == "bf16" && spec.quantization().precision() != "bf16")
      return Invalid("pipeline: bf16 goes with quantization.precision bf16");
    if (pass.options().empty()) continue;
    if (pass.name() == "prune" && !pruned) {
      return Invalid(absl::StrCat("pipeline: ", pass.Print(),
                                  " without pruning.channels or pruning.weights (--prune-channels, --prune-weights), "
                                  "which the report and the accuracy check read"));
    }
    if (pass.name() == "quantize" && !int8)
      return Invalid(absl::StrCat("pipeline: ", pass.Print(), " goes with quantization.precision int8"));
  }
  spec.set_pipeline(PrintPipeline(*pipeline));
  return absl::OkStatus();
}

}  // namespace

bool IsLossy(const v1::CompileSpec& spec) {
  return spec.quantization().precision() == "int8" || spec.quantization().precision() == "bf16" ||
         spec.pruning().channels() > 0 || spec.pruning().weights() > 0;
}

bool TargetHasFeature(const v1::Target& target, absl::string_view feature) {
  return std::find(target.features().begin(), target.features().end(), feature) != target.features().end();
}

std::string Bf16Unavailable(const v1::Target& target) {
  const std::string name = target.preset().empty() ? target.cpu() : target.preset();
  if (target.triple().rfind("x86_64", 0) != 0)
    return absl::StrCat("target ", name, " (", target.triple(), ") is not x86-64 with avx512bf16");
  if (TargetHasFeature(target, "+avx512bf16")) return "";
  return absl::StrCat("target ", name, " has no avx512bf16");
}

absl::Status Normalize(v1::CompileSpec& spec) {
  spec.DiscardUnknownFields();
  if (!spec.has_model()) return Invalid("model: the model's digest is required (upload the model first)");
  if (auto s = CheckDigest(spec.model(), "model"); !s.ok()) return s;
  auto target = ResolveTarget(spec.target());
  if (!target.ok()) return target.status();
  *spec.mutable_target() = *target;
  if (auto s = NormalizeInputShapes(spec); !s.ok()) return s;
  if (auto s = NormalizePipeline(spec); !s.ok()) return s;
  if (auto s = NormalizeQuantization(*spec.mutable_quantization()); !s.ok()) return s;
  if (auto s = NormalizePruning(*spec.mutable_pruning()); !s.ok()) return s;
  if (auto s = NormalizeTuning(*spec.mutable_tuning()); !s.ok()) return s;
  return NormalizeAccuracy(*spec.mutable_accuracy(), IsLossy(spec));
}

std::string ActionKey(const v1::CompileSpec& spec, std::string_view build_id) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    spec.SerializeToCodedStream(&coded);
  }
  Sha256 hash;
  hash.Update("kiln.action.v2\n");
  hash.Update(build_id);
  hash.Update("\n");
  hash.Update(bytes);
  return hash.FinishHex();
}

v1::Digest DigestOf(std::string_view bytes) {
  v1::Digest digest;
  digest.set_sha256(Sha256Hex(bytes));
  digest.set_size_bytes(static_cast<int64_t>(bytes.size()));
  return digest;
}

absl::StatusOr<v1::InputShape> ParseInputShape(absl::string_view text) {
  const size_t eq = text.rfind('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return Invalid(absl::StrCat("input shape '", text, "': expected NAME=DIMS, e.g. input=1x3x224x224"));
  }
  v1::InputShape shape;
  shape.set_name(std::string(text.substr(0, eq)));
  for (absl::string_view part : absl::StrSplit(text.substr(eq + 1), absl::ByAnyChar("x,"))) {
    int32_t d = 0;
    if (!absl::SimpleAtoi(part, &d) || d <= 0)
      return Invalid(absl::StrCat("input shape '", text, "': '", part, "' is not a dimension (an integer >= 1)"));
    shape.add_dims(d);
  }
  return shape;
}

}  // namespace kiln
