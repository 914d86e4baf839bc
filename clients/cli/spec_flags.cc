// The CompileSpec's flags: see spec_flags.h.
#include "clients/cli/spec_flags.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/common/file.h"
#include "kiln/common/status.h"
#include "kiln/compiler/spec.h"
#include "kiln/compiler/target.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// The spec's flags after --target, one row each in --help's order: the flag, the SpecFlags
// member it fills (a bool is a flag without a value), the spec field whose name Normalize's
// messages get the flag for (InFlagTerms; null: the message keeps the field's name), its
// help, and where submit differs: its own help, or no such flag.
using FlagMember = std::variant<std::string SpecFlags::*, std::vector<std::string> SpecFlags::*, double SpecFlags::*,
                                uint64_t SpecFlags::*, bool SpecFlags::*>;
struct SpecFlag {
  const char* flag;
  FlagMember member;
  const char* field;
  const char* help;
  const char* submit_help = nullptr;  // null: as for compile
  bool compile_only = false;
};
const SpecFlag kSpecFlags[] = {
    {"--input-shape", &SpecFlags::input_shapes, "input_shapes",
     "fix a graph input's shape, e.g. input=1x3x224x224 (repeatable)"},
    {"--pipeline", &SpecFlags::pipeline, nullptr,
     "comma-separated passes with options in braces, e.g. 'fold-constants,fuse,prune{channels=0.3}' (default: the "
     "compiler's pipeline for the precision; `kiln help` lists both, `kiln compile --list-passes` each pass and its "
     "options)"},
    {"--precision", &SpecFlags::precision, "quantization.precision",
     "fp32 (default); int8: post-training static quantization of every Conv and MatMul with a constant weight "
     "(weights s8 per output channel, activations u8 per tensor), run as int8 kernels; bf16: every Conv, Gemm and "
     "MatMul with a constant weight runs with bf16 weights and activations and f32 sums (vdpbf16ps), other ops in "
     "f32, on targets with avx512bf16 (elsewhere the build is fp32 and says so); judged like int8 by top-1 agreement "
     "and each output's error relative to its scale"},
    {"--calibration", &SpecFlags::calibration, "quantization.calibration",
     "int8: the samples activation ranges come from: one subdirectory per sample holding input_0.pb, input_1.pb, ... "
     "(ONNX TensorProtos, graph-input order), or one *.pb per sample for a one-input model; with pruning, its first "
     "sample also feeds the per-layer breakdown",
     "int8: calibration samples laid out as for `kiln compile`, uploaded as InputSet blobs"},
    {"--calibration-method", &SpecFlags::calibration_method, "quantization.method",
     "minmax (default), percentile (see --calibration-percentile) or entropy (the range whose 255-level quantization "
     "loses least, by KL divergence)"},
    {"--calibration-percentile", &SpecFlags::calibration_percentile, "quantization.percentile",
     "method percentile: the share of each activation's values its range keeps, in (50, 100] (default 99.99)"},
    {"--keep-float", &SpecFlags::keep_float, "quantization.keep_float",
     "node names to leave in f32 (comma-separated, repeatable)"},
    {"--prune-channels", &SpecFlags::prune_channels, "pruning.channels",
     "structured pruning: remove the share R (0 <= R < 1) of each Conv, Gemm and MatMul's output channels with the "
     "lowest L1 norm, and what reads them downstream; a layer whose channels reach a residual Add, a Reshape or a "
     "graph output stays whole"},
    {"--prune-weights", &SpecFlags::prune_weights, "pruning.weights",
     "weight pruning: set the share R of each weight to 0: in MatMul/Gemm weights whole 1x16 blocks (one input row, "
     "16 output columns) with the lowest L1 norm, which artifacts skip with a block-sparse kernel where at most 70% "
     "of the blocks remain (R >= 0.3; faster in proportion at high R); in Conv weights single elements. Element by "
     "element everywhere (kernels stay dense): --pipeline '...,prune{weight-unit=element},...'"},
    {"--prune-skip", &SpecFlags::prune_skip, "pruning.skip",
     "node names to leave unpruned (comma-separated, repeatable)"},
    {"--tune", &SpecFlags::tune, "tuning.enabled",
     "time each convolution's candidates (Winograd; implicit GEMM with 64, 128 or 256-position jobs) on this machine "
     "and keep the fastest (the target must run here); cached by op shape and target",
     nullptr, true},
    {"--tune-budget", &SpecFlags::tune_budget, "tuning.budget_seconds", "seconds of measuring at most (default 120)",
     nullptr, true},
    {"--atol", &SpecFlags::atol, "accuracy.atol",
     "validation: absolute tolerance (with --rtol; both left out: 1e-3 each). An element passes when |got - ref| <= "
     "atol + rtol * |ref|"},
    {"--rtol", &SpecFlags::rtol, "accuracy.rtol", "validation: relative tolerance (with --atol)"},
    {"--inputs", &SpecFlags::inputs, "accuracy.input_set",
     "validation inputs: DIR/*.pb, ONNX TensorProtos, one per model input in file-name order, sent as an InputSet blob "
     "(default: seeded random inputs)"},
    {"--seed", &SpecFlags::seed, "accuracy.seed", "seed of the random validation inputs (default 0)"},
    {"--max-top1-drop", &SpecFlags::max_top1_drop, "accuracy.max_top1_drop",
     "int8 and pruned builds: the verdict fails when more than this many percentage points of classifier rows change "
     "their top-1 class against the fp32 model (default 1)"},
    {"--skip-latency", &SpecFlags::skip_latency, "accuracy.skip_latency", "do not measure the artifact's latency"},
};

absl::Status Usage(std::string message) { return absl::InvalidArgumentError(std::move(message)); }
// A problem with a file or a directory's contents: a failed operation, never a usage error.
absl::Status Failed(const absl::Status& status) {
  return status.ok() || !absl::IsInvalidArgument(status) ? status
                                                         : absl::FailedPreconditionError(std::string(status.message()));
}

std::vector<std::string> Flatten(const std::vector<std::string>& lists) {
  std::vector<std::string> names;
  for (const std::string& list : lists) {
    for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) names.emplace_back(name);
  }
  return names;
}

}  // namespace

void AddSpecFlags(CLI::App& c, SpecFlags& f, SpecCommand which) {
  f.command = &c;
  // Not a row: its help lists the presets, and Normalize's target messages name the field
  // ("target.cpu 'x' ...", which says more than "--target").
  c.add_option("--target", f.target,
               absl::StrCat("host (default), a preset, or triple=T[,cpu=C][,features=+a,-b]. Presets: ",
                            absl::StrJoin(TargetPresets(), ", ")));
  for (const SpecFlag& row : kSpecFlags) {
    if (row.compile_only && which != SpecCommand::kCompile) continue;
    const char* help = which == SpecCommand::kSubmit && row.submit_help != nullptr ? row.submit_help : row.help;
    std::visit(
        [&](auto member) {
          if constexpr (std::is_same_v<decltype(member), bool SpecFlags::*>) {
            c.add_flag(row.flag, f.*member, help);
          } else {
            c.add_option(row.flag, f.*member, help);
          }
        },
        row.member);
  }
}

std::string InFlagTerms(absl::string_view message) {
  std::string text(message);
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  for (const SpecFlag& row : kSpecFlags) {
    if (row.field == nullptr) continue;
    const std::string field = row.field;
    for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at)) {
      const size_t end = at + field.size();
      if ((at > 0 && word_char(text[at - 1])) || (end < text.size() && word_char(text[end]) && text[end] != '.')) {
        at = end;
        continue;
      }
      text.replace(at, field.size(), row.flag);
      at += std::string(row.flag).size();
    }
  }
  return text;
}

absl::StatusOr<std::vector<std::string>> CalibrationInputSets(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat("calibration directory '", dir, "' does not exist"));
  std::vector<fs::path> subdirs, files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory()) subdirs.push_back(entry.path());
    if (entry.is_regular_file() && entry.path().extension() == ".pb") files.push_back(entry.path());
  }
  std::sort(subdirs.begin(), subdirs.end());
  std::sort(files.begin(), files.end());
  std::vector<std::vector<fs::path>> samples;
  for (const fs::path& sub : subdirs) {
    std::vector<fs::path> tensors;
    for (int i = 0; fs::exists(sub / absl::StrCat("input_", i, ".pb")); ++i)
      tensors.push_back(sub / absl::StrCat("input_", i, ".pb"));
    if (tensors.empty())
      return absl::FailedPreconditionError(absl::StrCat("calibration sample '", sub.string(), "' has no input_0.pb"));
    samples.push_back(tensors);
  }
  if (subdirs.empty()) {
    for (const fs::path& file : files) samples.push_back({file});
  }
  if (samples.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "calibration directory '", dir, "' holds no samples (subdirectories with input_0.pb, or *.pb files)"));
  }
  std::vector<std::string> blobs;
  for (const auto& tensors : samples) {
    v1::InputSet set;
    for (const fs::path& path : tensors) {
      KILN_ASSIGN_OR_RETURN(*set.add_inputs()->mutable_tensor_proto(), ReadFile(path.string()));
    }
    blobs.push_back(set.SerializeAsString());
  }
  return blobs;
}

absl::StatusOr<std::string> InputSetFromDirectory(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".pb") files.push_back(entry.path().string());
  }
  if (ec) return absl::NotFoundError(absl::StrCat("--inputs ", dir, ": ", ec.message()));
  if (files.empty())
    return absl::FailedPreconditionError(absl::StrCat("--inputs ", dir, ": no .pb files (ONNX TensorProtos) there"));
  std::sort(files.begin(), files.end());
  v1::InputSet set;
  for (const std::string& file : files) {
    KILN_ASSIGN_OR_RETURN(*set.add_inputs()->mutable_tensor_proto(), ReadFile(file));
  }
  return set.SerializeAsString();
}

namespace {

// The target, quantization, pruning and tuning sections from the flags.
absl::Status FillCompileOptions(const SpecFlags& f, SpecCommand which, SpecWithData& out) {
  v1::CompileSpec& spec = out.spec;
  auto target = ParseTarget(f.target);
  if (which == SpecCommand::kCompile) {
    // A target that cannot be resolved fails the compile (exit 1), as it always has.
    if (target.ok()) target = ResolveTarget(*target);
    if (!target.ok()) return absl::FailedPreconditionError(std::string(target.status().message()));
  } else if (f.target.find('=') == std::string::npos) {
    target = v1::Target();  // a preset's name goes to kilnd as written: kilnd resolves it
    target->set_preset(f.target);
  }
  if (!target.ok()) return target.status();
  *spec.mutable_target() = *target;
  for (const std::string& text : f.input_shapes) {
    KILN_ASSIGN_OR_RETURN(*spec.add_input_shapes(), ParseInputShape(text));
  }
  spec.set_pipeline(f.pipeline);
  auto* q = spec.mutable_quantization();
  q->set_precision(f.precision);
  q->set_method(f.calibration_method);
  if (f.Given("--calibration-percentile")) q->set_percentile(f.calibration_percentile);
  for (const std::string& name : Flatten(f.keep_float)) q->add_keep_float(name);
  // With pruning alone, `kiln compile --calibration` feeds only the per-layer breakdown.
  const bool breakdown_only = which == SpecCommand::kCompile && f.precision != "int8";
  for (const std::string& sample : out.calibration) {
    if (!breakdown_only) *q->add_calibration() = DigestOf(sample);
  }
  auto* p = spec.mutable_pruning();
  p->set_channels(f.prune_channels);
  p->set_weights(f.prune_weights);
  for (const std::string& name : Flatten(f.prune_skip)) p->add_skip(name);
  spec.mutable_tuning()->set_enabled(f.tune);
  if (f.Given("--tune-budget")) spec.mutable_tuning()->set_budget_seconds(f.tune_budget);
  return absl::OkStatus();
}

void FillAccuracy(const SpecFlags& f, SpecWithData& out) {
  auto* a = out.spec.mutable_accuracy();
  a->set_atol(f.atol);
  a->set_rtol(f.rtol);
  if (f.Given("--max-top1-drop")) a->set_max_top1_drop(f.max_top1_drop);
  if (!out.input_set.empty()) *a->mutable_input_set() = DigestOf(out.input_set);
  a->set_seed(f.seed);
  a->set_skip_latency(f.skip_latency);
}

}  // namespace

absl::StatusOr<SpecWithData> BuildSpec(const std::string& model_path, const SpecFlags& f, SpecCommand which) {
  if (f.Given("--atol") != f.Given("--rtol")) return Usage("--atol and --rtol go together");
  const bool pruning = f.prune_channels > 0 || f.prune_weights > 0;
  if (which == SpecCommand::kCompile && f.Given("--calibration") && f.precision != "int8" && !pruning)
    return Usage("--calibration goes with --precision int8 (or pruning: samples for its per-layer breakdown)");
  SpecWithData out;
  auto model = MappedFile::Open(model_path);
  if (!model.ok()) return Failed(model.status());
  out.model_file = std::make_shared<const MappedFile>(std::move(*model));
  out.model = out.model_file->bytes();
  *out.spec.mutable_model() = DigestOf(out.model);
  if (f.Given("--calibration")) {
    auto sets = CalibrationInputSets(f.calibration);
    if (!sets.ok()) return Failed(sets.status());
    out.calibration = std::move(*sets);
  }
  if (f.Given("--inputs")) {
    auto set = InputSetFromDirectory(f.inputs);
    if (!set.ok()) return Failed(set.status());
    out.input_set = std::move(*set);
  }
  KILN_RETURN_IF_ERROR(FillCompileOptions(f, which, out));
  FillAccuracy(f, out);
  v1::CompileSpec check = out.spec;
  if (which == SpecCommand::kSubmit) check.clear_target();  // kilnd resolves and checks it
  if (auto s = Normalize(check); !s.ok()) return absl::Status(s.code(), InFlagTerms(s.message()));
  return out;
}

}  // namespace kiln::cli
