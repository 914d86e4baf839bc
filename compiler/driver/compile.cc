// CompileModel: import -> passes -> codegen -> link, with the manifest and compile report.
#include "kiln/compiler/compile.h"
#include "kiln/common/file.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/compiler/frontend.h"

namespace kiln {
namespace {

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string TensorInfoJson(const Value* v) {
  std::vector<std::string> dims;
  for (const Dim& d : v->type().shape) dims.push_back(std::to_string(d.size));
  return absl::StrCat("{\"name\": \"", JsonEscape(v->name()), "\", \"dtype\": \"", DTypeName(v->type().dtype),
                      "\", \"shape\": [", absl::StrJoin(dims, ", "), "]}");
}

}  // namespace

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

absl::Status ParseInputShape(const std::string& text, std::map<std::string, std::vector<int64_t>>& shapes) {
  size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input-shape '", text, "': expected NAME=DIMS, e.g. input=1x3x224x224"));
  }
  std::vector<int64_t> dims;
  std::string dims_text = text.substr(eq + 1);
  if (!dims_text.empty()) {
    for (absl::string_view part : absl::StrSplit(dims_text, absl::ByAnyChar("x,"))) {
      int64_t d;
      if (!absl::SimpleAtoi(part, &d) || d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("--input-shape '", text, "': '", part, "' is not a dimension"));
      }
      dims.push_back(d);
    }
  }
  shapes[text.substr(0, eq)] = dims;
  return absl::OkStatus();
}

absl::Status CheckCalibrationSamples(const Graph& graph, const std::vector<std::vector<Tensor>>& samples) {
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        "--precision int8 needs calibration samples (--calibration DIR): activation ranges come from them");
  }
  for (size_t s = 0; s < samples.size(); ++s) {
    if (samples[s].size() != graph.inputs().size()) {
      return absl::InvalidArgumentError(absl::StrCat("calibration sample ", s, " has ", samples[s].size(),
                                                     " tensors; the model has ", graph.inputs().size(), " inputs"));
    }
    for (size_t i = 0; i < samples[s].size(); ++i) {
      const Value* in = graph.inputs()[i];
      const Tensor& t = samples[s][i];
      if (t.dtype() != in->type().dtype || !in->type().IsStatic() || t.dims() != in->type().StaticDims()) {
        return absl::InvalidArgumentError(absl::StrCat("calibration sample ", s, ", input ", i, " ('", in->name(),
                                                       "'): ", DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","),
                                                       "] where the model takes ", PrintType(in->type())));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<Tensor>>> ReadCalibrationSamples(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(dir, error))
    return absl::NotFoundError(absl::StrCat("calibration directory '", dir, "' does not exist"));
  std::vector<fs::path> subdirs, files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) subdirs.push_back(entry.path());
    if (entry.is_regular_file() && entry.path().extension() == ".pb") files.push_back(entry.path());
  }
  std::sort(subdirs.begin(), subdirs.end());
  std::sort(files.begin(), files.end());
  std::vector<std::vector<Tensor>> samples;
  auto read = [](const fs::path& path) -> absl::StatusOr<Tensor> {
    auto bytes = ReadFile(path.string());
    if (!bytes.ok()) return bytes.status();
    auto tensor = ParseTensorProto(*bytes);
    if (!tensor.ok()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", tensor.status().message()));
    return tensor;
  };
  if (!subdirs.empty()) {
    for (const fs::path& sub : subdirs) {
      std::vector<Tensor> sample;
      for (int i = 0; fs::exists(sub / absl::StrCat("input_", i, ".pb")); ++i) {
        auto t = read(sub / absl::StrCat("input_", i, ".pb"));
        if (!t.ok()) return t.status();
        sample.push_back(std::move(*t));
      }
      if (sample.empty())
        return absl::InvalidArgumentError(absl::StrCat("calibration sample '", sub.string(), "' has no input_0.pb"));
      samples.push_back(std::move(sample));
    }
  } else {
    for (const fs::path& file : files) {
      auto t = read(file);
      if (!t.ok()) return t.status();
      samples.push_back({std::move(*t)});
    }
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration directory '", dir, "' holds no samples (subdirectories with input_0.pb, or *.pb files)"));
  }
  return samples;
}

namespace {

// The report's per-layer breakdown (quantization's and pruning's): a JSON array.
std::string LayerErrorsJson(const std::vector<QuantizationSummary::LayerError>& layers) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    out << (i ? ",\n      " : "\n      ") << "{\"node\": \"" << JsonEscape(l.node) << "\", \"op\": \"" << l.op
        << "\", \"snr_db\": " << l.snr_db << ", \"max_abs_error\": " << l.max_abs_error
        << ", \"reference_scale\": " << l.reference_scale << "}";
  }
  out << "]";
  return out.str();
}

}  // namespace

absl::StatusOr<CompileResult> CompileModel(std::string_view model_bytes, const CompileOptions& options) {
  CompileResult result;
  auto target = ResolveTarget(options.target);
  if (!target.ok()) return target.status();
  result.target = *target;

  if (options.on_phase) options.on_phase("import");
  auto start = std::chrono::steady_clock::now();
  ImportOptions import_options;
  import_options.model_label = options.model_label;
  import_options.input_shapes = options.input_shapes;
  import_options.external_data = options.external_data;
  auto graph = ImportOnnxModel(model_bytes, import_options);
  if (!graph.ok()) return graph.status();
  result.import_ms = MsSince(start);
  if (options.print.print_stream && options.print.print_after_all) {
    *options.print.print_stream << "// ----- IR after import -----\n" << PrintGraph(**graph);
  }

  std::string pipeline = options.pipeline;
  PassContext context;
  if (options.precision == "int8") {
    if (pipeline == kDefaultPipeline) pipeline = kInt8Pipeline;
    if (auto st = CheckCalibrationSamples(**graph, options.quantization.calibration); !st.ok()) return st;
    context.quantization = &options.quantization;
  } else if (options.precision != "fp32") {
    return absl::InvalidArgumentError(absl::StrCat("precision '", options.precision, "' is not one of fp32, int8"));
  }
  const bool pruning = options.pruning.channel_ratio > 0 || options.pruning.weight_ratio > 0;
  if (pruning) {
    auto with_prune = PipelineWithPrune(pipeline);
    if (!with_prune.ok()) return with_prune.status();
    pipeline = *with_prune;
    if (auto st = CheckCalibrationSamples(**graph, options.pruning.samples);
        !options.pruning.samples.empty() && !st.ok())
      return st;
    context.pruning = &options.pruning;
  }
  if (options.on_phase) options.on_phase("passes");
  start = std::chrono::steady_clock::now();
  auto stats = RunPipeline(**graph, pipeline, options.print, context);
  if (!stats.ok())
    return absl::Status(stats.status().code(), absl::StrCat(options.model_label, ": ", stats.status().message()));
  result.passes = *stats;
  result.passes_ms = MsSince(start);
  if (options.tune.enabled) {
    if (CanonicalTarget(*target) != CanonicalTarget(*ResolveTarget("host"))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tune times candidates on this machine, so it needs --target host (not '", options.target, "')"));
    }
    if (options.on_phase) options.on_phase("tune");
    auto tuning = TuneGraph(**graph, *target, options.tune);
    if (!tuning.ok())
      return absl::Status(tuning.status().code(), absl::StrCat(options.model_label, ": ", tuning.status().message()));
    result.tuning = std::move(*tuning);
    // A node tuned from Winograd to the GEMM no longer needs scratch: plan again.
    if (context.has_memory_plan) {
      auto replanned = RunPipeline(**graph, "plan-memory", {}, context);
      if (!replanned.ok()) return replanned.status();
    }
  }
  result.memory_plan = context.has_memory_plan ? context.memory_plan : NaiveMemoryPlan(**graph);

  std::ostringstream manifest;
  manifest << "{\n  \"schema\": \"kiln.manifest/v1\",\n  \"compiler_version\": \"" << CompilerVersion() << "\",\n"
           << "  \"target\": {\"name\": \"" << JsonEscape(target->name) << "\", \"triple\": \""
           << JsonEscape(target->triple) << "\", \"cpu\": \"" << JsonEscape(target->cpu) << "\", \"canonical\": \""
           << JsonEscape(CanonicalTarget(*target)) << "\"},\n"
           << "  \"pipeline\": \"" << JsonEscape(pipeline) << "\",\n  \"precision\": \""
           << JsonEscape(options.precision) << "\",\n  \"inputs\": [";
  for (size_t i = 0; i < (*graph)->inputs().size(); ++i)
    manifest << (i ? ", " : "") << TensorInfoJson((*graph)->inputs()[i]);
  manifest << "],\n  \"outputs\": [";
  for (size_t i = 0; i < (*graph)->outputs().size(); ++i)
    manifest << (i ? ", " : "") << TensorInfoJson((*graph)->outputs()[i]);
  manifest << "],\n  \"workspace_bytes\": " << result.memory_plan.arena_bytes << "\n}\n";
  result.manifest_json = manifest.str();

  if (options.on_phase) options.on_phase("codegen");
  start = std::chrono::steady_clock::now();
  CodegenOptions codegen;
  codegen.target = *target;
  codegen.manifest_json = result.manifest_json;
  codegen.compiler_version = CompilerVersion();
  auto artifact = GenerateArtifact(**graph, result.memory_plan, codegen);
  if (!artifact.ok())
    return absl::Status(artifact.status().code(), absl::StrCat(options.model_label, ": ", artifact.status().message()));
  result.codegen_ms = MsSince(start);
  result.shared_object = std::move(artifact->shared_object);

  std::ostringstream report;
  report << "{\n  \"schema\": \"kiln.compile-report/v1\",\n  \"compiler_version\": \"" << CompilerVersion() << "\",\n"
         << "  \"target\": \"" << JsonEscape(CanonicalTarget(*target)) << "\",\n"
         << "  \"timings_ms\": {\"import\": " << result.import_ms << ", \"passes\": " << result.passes_ms
         << ", \"codegen\": " << result.codegen_ms << "},\n  \"codegen_phases_ms\": {";
  for (size_t i = 0; i < artifact->phase_ms.size(); ++i) {
    report << (i ? ", " : "") << "\"" << artifact->phase_ms[i].first << "\": " << artifact->phase_ms[i].second;
  }
  report << "},\n";
  if (options.tune.enabled) {
    const TuneResult& t = result.tuning;
    report << "  \"tuning\": {\"seconds\": " << t.seconds << ", \"measured\": " << t.measured
           << ", \"from_cache\": " << t.from_cache << ", \"over_budget\": " << t.over_budget << ", \"cache\": \""
           << JsonEscape(options.tune.cache_path) << "\", \"decisions\": [";
    for (size_t i = 0; i < t.decisions.size(); ++i) {
      const TuneDecision& d = t.decisions[i];
      report << (i ? ",\n    " : "\n    ") << "{\"node\": \"" << JsonEscape(d.node) << "\", \"choice\": \"" << d.choice
             << "\", \"timings_ms\": \"" << d.timings << "\", \"from_cache\": " << (d.from_cache ? "true" : "false")
             << "}";
    }
    report << "]},\n";
  }
  result.quantization = context.quantization_summary;
  if (options.precision == "int8") {
    const QuantizationSummary& q = result.quantization;
    report << "  \"quantization\": {\"precision\": \"int8\", \"method\": \"" << q.method
           << "\", \"calibration_samples\": " << q.calibration_samples << ", \"quantized_nodes\": " << q.quantized_nodes
           << ", \"kept_float\": [";
    for (size_t i = 0; i < q.kept_float.size(); ++i)
      report << (i ? ", " : "") << "\"" << JsonEscape(q.kept_float[i]) << "\"";
    report << "],\n    \"layers_by_error\": " << LayerErrorsJson(q.layers_by_error) << "},\n";
  }
  result.pruning = context.pruning_summary;
  if (pruning) {
    const PruningSummary& p = result.pruning;
    auto cost = [](const GraphCost& c) {
      return absl::StrCat(
          "{\"parameters\": ", c.parameters, ", \"nonzero_parameters\": ", c.nonzero_parameters,
          ", \"flops\": ", absl::SixDigits(c.flops), ", \"weight_sparsity\": ",
          absl::SixDigits(c.weights ? static_cast<double>(c.zero_weights) / static_cast<double>(c.weights) : 0.0), "}");
    };
    report << "  \"pruning\": {\"channel_ratio\": " << p.channel_ratio << ", \"weight_ratio\": " << p.weight_ratio
           << ", \"before\": " << cost(p.before) << ", \"after\": " << cost(p.after)
           << ",\n    \"pruned_layers\": " << p.pruned_layers << ", \"channels_before\": " << p.channels_before
           << ", \"channels_removed\": " << p.channels_removed
           << ", \"kernels\": \"dense (zeroed weights are not skipped)\", \"kept_whole\": [";
    for (size_t i = 0; i < p.kept_whole.size(); ++i)
      report << (i ? ",\n      " : "\n      ") << "\"" << JsonEscape(p.kept_whole[i]) << "\"";
    report << "],\n    \"layers_by_error\": " << LayerErrorsJson(p.layers_by_error) << "},\n";
  }
  report << "  \"passes\": [";
  for (size_t i = 0; i < result.passes.size(); ++i) {
    const PassStats& p = result.passes[i];
    report << (i ? ",\n    " : "\n    ") << "{\"name\": \"" << p.name
           << "\", \"changed\": " << (p.changed ? "true" : "false") << ", \"time_ms\": " << p.time_ms
           << ", \"nodes_before\": " << p.nodes_before << ", \"nodes_after\": " << p.nodes_after << "}";
  }
  report << "\n  ],\n  \"memory_plan\": {\"arena_bytes\": " << result.memory_plan.arena_bytes
         << ", \"naive_bytes\": " << result.memory_plan.naive_bytes << ", \"in_place\": " << result.memory_plan.in_place
         << ", \"views\": " << result.memory_plan.views
         << ", \"concats_in_place\": " << result.memory_plan.concats_in_place << "},\n"
         << "  \"nodes\": " << (*graph)->num_nodes() << ",\n"
         << "  \"gemm_tile\": \"" << artifact->gemm_tile << "\",\n"
         << "  \"int8_dot\": \"" << artifact->int8_dot << "\",\n"
         << "  \"object_bytes\": " << artifact->object_bytes << ",\n"
         << "  \"artifact_bytes\": " << result.shared_object.size() << "\n}\n";
  result.report_json = report.str();
  result.graph = std::move(*graph);
  return result;
}

absl::StatusOr<std::string> PipelineWithPrune(const std::string& pipeline) {
  std::vector<std::string> passes = absl::StrSplit(pipeline, ',', absl::SkipEmpty());
  if (std::find(passes.begin(), passes.end(), "prune") != passes.end()) return pipeline;
  auto at = std::find(passes.begin(), passes.end(), "fold-batchnorm");
  if (at == passes.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pruning needs a pipeline with fold-batchnorm (prune runs after it) or with prune; got '", pipeline, "'"));
  }
  passes.insert(at + 1, "prune");
  return absl::StrJoin(passes, ",");
}

}  // namespace kiln
