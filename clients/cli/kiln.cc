// kiln: the command-line front end. Local subcommands: compile, run, bench, inspect.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/args.h"
#include "clients/cli/service_commands.h"
#include "kiln/common/file.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/runtime.h"

namespace {

using namespace kiln::cli;

constexpr char kUsage[] = R"(kiln: compile ONNX models to native shared objects, run them, and use a kilnd service.

Usage:
  kiln compile MODEL.onnx -o OUT.so [--target T] [--input-shape NAME=1x3x224x224]...
               [--pipeline P] [--print-after-all] [--print-after PASS] [--report R.json]
               [--tune [--tune-budget SECONDS] [--tune-cache FILE]]
               [--precision int8 --calibration DIR [--calibration-method M] [--keep-float NODE,...]]
               [--prune-channels R] [--prune-weights R] [--prune-skip NODE,...] [--calibration DIR]
  kiln quantize MODEL.onnx --emit-qdq OUT.onnx --calibration DIR [--calibration-method M]
               [--keep-float NODE,...] [--input-shape NAME=1x3x224x224]...
  kiln run OUT.so --input NAME=FILE.pb [--input ...] --output-dir DIR [--threads N]
  kiln bench OUT.so [--threads N] [--iters N] [--warmup N] [--profile]
  kiln inspect OUT.so
  kiln help

compile
  --target T         host (default), a preset, or triple=T[,cpu=C][,features=+a,+b].
                     Presets: %TARGETS%
  --input-shape S    fix a graph input's shape, e.g. input=1x3x224x224 (repeatable)
  --pipeline P       comma-separated passes (default: %PIPELINE%)
                     Passes: %PASSES%
  --print-after-all  print the IR after import and after every pass (stderr)
  --print-after P    print the IR after pass P (repeatable)
  --report R.json    write the compile report (per-pass time and node counts, memory plan)
  --tune             time each convolution's candidates (Winograd; implicit GEMM with 64, 128
                     or 256-position jobs) on this machine and keep the fastest (needs
                     --target host); cached by op shape and target, so a second compile
                     measures nothing; choices and timings go to the --report
  --tune-budget S    seconds of measuring at most (default 120); shapes left keep the default
  --tune-cache FILE  the cache (default $KILN_TUNE_CACHE, else $XDG_CACHE_HOME/kiln/tune.tsv,
                     else ~/.cache/kiln/tune.tsv)
  --precision P      fp32 (default) or int8: post-training static quantization of every Conv
                     and MatMul with a constant weight (weights s8 per output channel,
                     activations u8 per tensor), run as int8 kernels (VNNI where the target
                     has it); the pipeline becomes %INT8PIPELINE%
  --calibration DIR  int8: the samples activation ranges are taken from, one subdirectory
                     per sample holding input_0.pb, input_1.pb, ... (ONNX TensorProtos, in
                     graph-input order), or for a one-input model one *.pb file per sample;
                     with pruning, its first sample also feeds the per-layer breakdown
  --calibration-method M  minmax (default), percentile (--calibration-percentile, default
                     99.99: the share of each activation's values its range keeps), or
                     entropy (the range whose 255-level quantization loses least, by KL)
  --keep-float N,... node names to leave in f32 (repeatable); the --report lists them
  --prune-channels R structured pruning: removes the share R (0 <= R < 1) of each Conv, Gemm
                     and MatMul's output channels with the lowest L1 norm, and the weights
                     that read them downstream, so the model gets smaller and faster; a
                     layer whose channels reach a residual Add, a Reshape or a graph output
                     stays whole (the --report says which and why)
  --prune-weights R  unstructured pruning: sets the share R of each Conv/Gemm/MatMul weight
                     with the smallest magnitude to 0 (reported as sparsity; the kernels
                     stay dense, so it does not change speed)
  --prune-skip N,... node names to leave unpruned (repeatable)
                     Pruning runs after fold-batchnorm; parameters and FLOPs before and
                     after go to stderr and the --report, and with --calibration DIR the
                     layers whose outputs kept their shape, worst SNR against the unpruned
                     model on the first sample first
quantize
  writes the model with --precision int8's quantization as a QDQ ONNX model (standard
  QuantizeLinear/DequantizeLinear ops around each Conv and MatMul's input, weight and
  result, BatchNorm folded: the form ONNX Runtime fuses into integer ops); flags as for
  compile
run
  --input NAME=FILE  an ONNX TensorProto file for the graph input NAME (repeatable)
  --output-dir DIR   writes DIR/output_0.pb, output_1.pb, ... in the model's output order
  --threads N        worker threads (default 1; 0 = one per CPU)
bench
  prints one JSON line: median_ms, p90_ms, mean_ms, min_ms, iters, threads
  --threads N (default 1)  --iters N (default 50)  --warmup N (default 5)
  --profile          also runs N profiled iterations and prints, on stderr, the time per
                     kernel (each node of the compiled graph, fused ones as one), slowest first
inspect
  prints the artifact's manifest (inputs, outputs, target, compiler version, workspace) as JSON

Exit status: 0 on success, 1 on a failed operation, 2 on a usage error.
)";

std::string Usage() {
  std::string text = kUsage;
  auto replace = [&](const std::string& key, const std::string& value) {
    size_t at = text.find(key);
    if (at != std::string::npos) text.replace(at, key.size(), value);
  };
  std::vector<std::string> passes;
  for (const auto& p : kiln::RegisteredPasses()) passes.push_back(p.name);
  replace("%TARGETS%", absl::StrJoin(kiln::TargetPresets(), ", "));
  replace("%PIPELINE%", kiln::kDefaultPipeline);
  replace("%INT8PIPELINE%", kiln::kInt8Pipeline);
  replace("%PASSES%", absl::StrJoin(passes, ", "));
  return text + "\n" + kiln::cli::kServiceUsage;
}

// A pruning ratio flag: absent leaves `ratio` at 0; present must be a number in [0, 1).
bool ParseRatio(const Args& args, const char* flag, double& ratio, std::string& error) {
  if (!args.Has(flag)) return true;
  const std::string text = args.Get(flag);
  char* end = nullptr;
  ratio = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(ratio >= 0 && ratio < 1)) {
    error = std::string(flag) + " '" + text +
            "': expected a share (of each layer's channels or weights), a number in [0, 1)";
    return false;
  }
  return true;
}

int Compile(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2,
                 {{"-o", true},
                  {"--output", true},
                  {"--target", true},
                  {"--input-shape", true},
                  {"--pipeline", true},
                  {"--print-after-all", false},
                  {"--print-after", true},
                  {"--report", true},
                  {"--tune", false},
                  {"--tune-budget", true},
                  {"--tune-cache", true},
                  {"--precision", true},
                  {"--calibration", true},
                  {"--calibration-method", true},
                  {"--calibration-percentile", true},
                  {"--keep-float", true},
                  {"--prune-channels", true},
                  {"--prune-weights", true},
                  {"--prune-skip", true}},
                 args, error)) {
    return UsageError(error);
  }
  if (args.positional.size() != 1) return UsageError("compile takes one MODEL.onnx");
  std::string out = args.Get("-o", args.Get("--output"));
  if (out.empty()) return UsageError("compile needs -o OUT.so");
  const std::string model_path = args.positional[0];
  kiln::CompileOptions options;
  options.target = args.Get("--target", "host");
  options.pipeline = args.Get("--pipeline", kiln::kDefaultPipeline);
  options.model_label = model_path;
  for (const std::string& s : args.All("--input-shape")) {
    if (auto st = kiln::ParseInputShape(s, options.input_shapes); !st.ok())
      return UsageError(std::string(st.message()));
  }
  if ((args.Has("--tune-budget") || args.Has("--tune-cache")) && !args.Has("--tune")) {
    return UsageError("--tune-budget and --tune-cache go with --tune");
  }
  options.tune.enabled = args.Has("--tune");
  options.tune.cache_path = args.Get("--tune-cache", kiln::DefaultTuneCachePath());
  if (args.Has("--tune-budget")) {
    char* end = nullptr;
    const std::string text = args.Get("--tune-budget");
    options.tune.budget_seconds = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(options.tune.budget_seconds >= 0)) {
      return UsageError("--tune-budget '" + text + "': expected seconds, a number >= 0");
    }
  }
  options.precision = args.Get("--precision", "fp32");
  if (options.precision != "fp32" && options.precision != "int8") {
    return UsageError("--precision '" + options.precision + "': expected fp32 or int8");
  }
  const bool int8 = options.precision == "int8";
  const bool pruning_flags = args.Has("--prune-channels") || args.Has("--prune-weights");
  for (const char* flag : {"--calibration-method", "--calibration-percentile", "--keep-float"}) {
    if (args.Has(flag) && !int8) return UsageError(std::string(flag) + " goes with --precision int8");
  }
  if (args.Has("--calibration") && !int8 && !pruning_flags) {
    return UsageError("--calibration goes with --precision int8 (or pruning: samples for its per-layer breakdown)");
  }
  if (int8) {
    if (!args.Has("--calibration"))
      return UsageError("--precision int8 needs --calibration DIR (the samples activation ranges come from)");
    auto method = kiln::ParseCalibrationMethod(args.Get("--calibration-method", "minmax"));
    if (!method.ok()) return UsageError("--calibration-method: " + std::string(method.status().message()));
    options.quantization.method = *method;
    if (args.Has("--calibration-percentile")) {
      if (*method != kiln::CalibrationMethod::kPercentile)
        return UsageError("--calibration-percentile goes with --calibration-method percentile");
      const std::string text = args.Get("--calibration-percentile");
      char* end = nullptr;
      options.quantization.percentile = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' ||
          !(options.quantization.percentile > 50 && options.quantization.percentile <= 100)) {
        return UsageError("--calibration-percentile '" + text + "': expected a number in (50, 100]");
      }
    }
    for (const std::string& list : args.All("--keep-float")) {
      for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty()))
        options.quantization.keep_float.insert(std::string(name));
    }
    auto samples = kiln::ReadCalibrationSamples(args.Get("--calibration"));
    if (!samples.ok()) return Fail(std::string(samples.status().message()));
    options.quantization.calibration = std::move(*samples);
  }
  if (!ParseRatio(args, "--prune-channels", options.pruning.channel_ratio, error) ||
      !ParseRatio(args, "--prune-weights", options.pruning.weight_ratio, error)) {
    return UsageError(error);
  }
  for (const std::string& list : args.All("--prune-skip")) {
    for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty()))
      options.pruning.skip.insert(std::string(name));
  }
  const bool pruning = options.pruning.channel_ratio > 0 || options.pruning.weight_ratio > 0;
  if (pruning && args.Has("--calibration")) {
    if (int8) {
      options.pruning.samples = {options.quantization.calibration.front()};
    } else {
      auto samples = kiln::ReadCalibrationSamples(args.Get("--calibration"));
      if (!samples.ok()) return Fail(std::string(samples.status().message()));
      options.pruning.samples = {samples->front()};
    }
  }
  if (args.Has("--prune-skip") && !pruning)
    return UsageError("--prune-skip goes with --prune-channels or --prune-weights");
  options.print.print_after_all = args.Has("--print-after-all");
  for (const std::string& p : args.All("--print-after")) options.print.print_after.insert(p);
  if (options.print.print_after_all || !options.print.print_after.empty()) options.print.print_stream = &std::cerr;
  options.external_data = kiln::DirectoryExternalData(std::filesystem::path(model_path).parent_path().string().empty()
                                                          ? "."
                                                          : std::filesystem::path(model_path).parent_path().string());
  auto bytes = kiln::ReadFile(model_path);
  if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
  auto result = kiln::CompileModel(*bytes, options);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  if (auto s = kiln::WriteFile(out, result->shared_object); !s.ok()) return Fail(std::string(s.message()));
  if (args.Has("--report")) {
    if (auto s = kiln::WriteFile(args.Get("--report"), result->report_json); !s.ok())
      return Fail(std::string(s.message()));
  }
  std::fprintf(
      stderr, "kiln: compiled %s -> %s (%zu bytes, target %s, %zu nodes, arena %lld bytes vs %lld naive) in %.0f ms\n",
      model_path.c_str(), out.c_str(), result->shared_object.size(),
      (result->target.triple + "/" + result->target.cpu).c_str(), result->graph->num_nodes(),
      static_cast<long long>(result->memory_plan.arena_bytes), static_cast<long long>(result->memory_plan.naive_bytes),
      result->import_ms + result->passes_ms + result->codegen_ms);
  if (int8) {
    const kiln::QuantizationSummary& q = result->quantization;
    std::fprintf(stderr, "kiln: int8: %lld Conv/MatMul quantized (%s calibration, %lld samples), %zu kept in f32%s%s\n",
                 static_cast<long long>(q.quantized_nodes), q.method.c_str(),
                 static_cast<long long>(q.calibration_samples), q.kept_float.size(), q.kept_float.empty() ? "" : ": ",
                 absl::StrJoin(q.kept_float, ", ").c_str());
    std::vector<std::string> worst;
    for (size_t i = 0; i < q.layers_by_error.size() && i < 3; ++i) {
      worst.push_back(absl::StrFormat("%s (%s) %.1f dB", q.layers_by_error[i].node, q.layers_by_error[i].op,
                                      q.layers_by_error[i].snr_db));
    }
    if (!worst.empty())
      std::fprintf(stderr, "kiln: int8: lowest SNR against f32 (first sample): %s\n",
                   absl::StrJoin(worst, ", ").c_str());
  }
  if (pruning) {
    const kiln::PruningSummary& p = result->pruning;
    std::fprintf(
        stderr,
        "kiln: pruned: %lld layers lost %lld of %lld output channels; parameters %.2fM -> %.2fM (%.2fM nonzero), "
        "GFLOPs %.3f -> %.3f; weight sparsity %.1f%%; %zu layers kept whole (see --report)\n",
        static_cast<long long>(p.pruned_layers), static_cast<long long>(p.channels_removed),
        static_cast<long long>(p.channels_before), p.before.parameters / 1e6, p.after.parameters / 1e6,
        p.after.nonzero_parameters / 1e6, p.before.flops / 1e9, p.after.flops / 1e9,
        p.after.weights ? 100.0 * static_cast<double>(p.after.zero_weights) / static_cast<double>(p.after.weights)
                        : 0.0,
        p.kept_whole.size());
    std::vector<std::string> worst;
    for (size_t i = 0; i < p.layers_by_error.size() && i < 3; ++i) {
      worst.push_back(absl::StrFormat("%s (%s) %.1f dB", p.layers_by_error[i].node, p.layers_by_error[i].op,
                                      p.layers_by_error[i].snr_db));
    }
    if (!worst.empty())
      std::fprintf(stderr, "kiln: pruned: lowest SNR against unpruned (first sample): %s\n",
                   absl::StrJoin(worst, ", ").c_str());
  }
  if (options.tune.enabled) {
    const kiln::TuneResult& t = result->tuning;
    int winograd = 0;
    for (const kiln::TuneDecision& d : t.decisions) winograd += d.choice == "winograd";
    std::fprintf(stderr,
                 "kiln: tuned %zu convolutions in %.1f s (%d shapes measured, %d convolutions from the cache %s, %d "
                 "left untuned by the budget): "
                 "%d Winograd, %zu GEMM\n",
                 t.decisions.size(), t.seconds, t.measured, t.from_cache,
                 options.tune.cache_path.empty() ? "no cache" : options.tune.cache_path.c_str(), t.over_budget,
                 winograd, t.decisions.size() - winograd);
  }
  return 0;
}

// A loaded artifact with a session; closes both on scope exit.
struct Loaded {
  kiln_module* module = nullptr;
  kiln_session* session = nullptr;
  const kiln_module_desc* desc = nullptr;
  ~Loaded() {
    kiln_session_destroy(session);
    kiln_module_unload(module);
  }
};

bool Load(const std::string& path, int threads, Loaded& loaded, std::string& error) {
  if (kiln_module_load(path.c_str(), &loaded.module) != KILN_OK ||
      kiln_module_describe(loaded.module, &loaded.desc) != KILN_OK) {
    error = kiln_last_error();
    return false;
  }
  kiln_session_options options{sizeof(kiln_session_options), threads};
  if (kiln_session_create(loaded.module, &options, &loaded.session) != KILN_OK) {
    error = kiln_last_error();
    return false;
  }
  return true;
}

std::string ShapeText(const kiln_tensor_info& info) {
  std::vector<int64_t> dims(info.dims, info.dims + info.rank);
  return absl::StrCat(kiln::DTypeName(static_cast<kiln::DType>(info.dtype)), "[", absl::StrJoin(dims, ","), "]");
}

int Run(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {{"--input", true}, {"--output-dir", true}, {"--threads", true}}, args, error))
    return UsageError(error);
  if (args.positional.size() != 1) return UsageError("run takes one OUT.so");
  if (!args.Has("--output-dir")) return UsageError("run needs --output-dir DIR");
  int threads = 1;
  if (args.Has("--threads") && !ParseInt(args.Get("--threads"), "--threads", 0, &threads, error))
    return UsageError(error);
  Loaded loaded;
  if (!Load(args.positional[0], threads, loaded, error)) return Fail(error);
  const kiln_module_desc* desc = loaded.desc;
  std::map<std::string, std::string> files;
  for (const std::string& spec : args.All("--input")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos) return UsageError(absl::StrCat("--input '", spec, "': expected NAME=FILE.pb"));
    files[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  std::vector<kiln::Tensor> inputs;
  for (int32_t i = 0; i < desc->num_inputs; ++i) {
    const kiln_tensor_info& info = desc->inputs[i];
    auto it = files.find(info.name);
    if (it == files.end())
      return UsageError(absl::StrCat("missing --input ", info.name, "=FILE.pb (", ShapeText(info), ")"));
    auto bytes = kiln::ReadFile(it->second);
    if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
    auto tensor = kiln::ParseTensorProto(*bytes);
    if (!tensor.ok()) return Fail(absl::StrCat(it->second, ": ", tensor.status().message()));
    std::vector<int64_t> want(info.dims, info.dims + info.rank);
    if (static_cast<int32_t>(tensor->dtype()) != info.dtype || tensor->dims() != want) {
      return Fail(absl::StrCat(it->second, ": input '", info.name, "' is ",
                               kiln::PrintType(kiln::TensorType::Static(tensor->dtype(), tensor->dims())),
                               ", the artifact expects ", ShapeText(info)));
    }
    inputs.push_back(std::move(*tensor));
    files.erase(it);
  }
  if (!files.empty()) return UsageError(absl::StrCat("'", files.begin()->first, "' is not an input of this artifact"));
  std::vector<kiln::Tensor> outputs;
  for (int32_t i = 0; i < desc->num_outputs; ++i) {
    const kiln_tensor_info& info = desc->outputs[i];
    outputs.emplace_back(static_cast<kiln::DType>(info.dtype), std::vector<int64_t>(info.dims, info.dims + info.rank));
  }
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (auto& t : inputs) in_ptrs.push_back(t.data());
  for (auto& t : outputs) out_ptrs.push_back(t.data());
  if (kiln_session_run(loaded.session, in_ptrs.data(), out_ptrs.data()) != KILN_OK) return Fail(kiln_last_error());
  std::error_code ec;
  std::filesystem::create_directories(args.Get("--output-dir"), ec);
  if (ec) return Fail(absl::StrCat(args.Get("--output-dir"), ": ", ec.message()));
  for (int32_t i = 0; i < desc->num_outputs; ++i) {
    const std::string path = absl::StrCat(args.Get("--output-dir"), "/output_", i, ".pb");
    if (auto s = kiln::WriteFile(path, kiln::SerializeTensorProto(outputs[i], desc->outputs[i].name)); !s.ok())
      return Fail(std::string(s.message()));
  }
  return 0;
}

// kiln quantize: post-training quantization written out as a QDQ ONNX model (for other
// runtimes; Kiln compiles the float model with --precision int8 itself).
int Quantize(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2,
                 {{"--emit-qdq", true},
                  {"--calibration", true},
                  {"--calibration-method", true},
                  {"--calibration-percentile", true},
                  {"--keep-float", true},
                  {"--input-shape", true}},
                 args, error)) {
    return UsageError(error);
  }
  if (args.positional.size() != 1) return UsageError("quantize takes one MODEL.onnx");
  if (!args.Has("--emit-qdq")) return UsageError("quantize needs --emit-qdq OUT.onnx (the QDQ model it writes)");
  if (!args.Has("--calibration"))
    return UsageError("quantize needs --calibration DIR (the samples activation ranges come from)");
  const std::string model_path = args.positional[0];
  kiln::QuantizationConfig config;
  auto method = kiln::ParseCalibrationMethod(args.Get("--calibration-method", "minmax"));
  if (!method.ok()) return UsageError("--calibration-method: " + std::string(method.status().message()));
  config.method = *method;
  if (args.Has("--calibration-percentile")) {
    if (!absl::SimpleAtod(args.Get("--calibration-percentile"), &config.percentile) ||
        !(config.percentile > 50 && config.percentile <= 100)) {
      return UsageError("--calibration-percentile '" + args.Get("--calibration-percentile") +
                        "': expected a number in (50, 100]");
    }
  }
  for (const std::string& list : args.All("--keep-float")) {
    for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty()))
      config.keep_float.insert(std::string(name));
  }
  kiln::ImportOptions import_options;
  import_options.model_label = model_path;
  for (const std::string& s : args.All("--input-shape")) {
    if (auto st = kiln::ParseInputShape(s, import_options.input_shapes); !st.ok())
      return UsageError(std::string(st.message()));
  }
  const std::string dir = std::filesystem::path(model_path).parent_path().string();
  import_options.external_data = kiln::DirectoryExternalData(dir.empty() ? "." : dir);
  auto bytes = kiln::ReadFile(model_path);
  if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
  auto graph = kiln::ImportOnnxModel(*bytes, import_options);
  if (!graph.ok()) return Fail(std::string(graph.status().message()));
  auto samples = kiln::ReadCalibrationSamples(args.Get("--calibration"));
  if (!samples.ok()) return Fail(std::string(samples.status().message()));
  config.calibration = std::move(*samples);
  if (auto st = kiln::CheckCalibrationSamples(**graph, config.calibration); !st.ok())
    return Fail(std::string(st.message()));
  config.quantize_outputs = true;  // the QDQ form other runtimes fuse: results quantized too
  kiln::PassContext context;
  context.quantization = &config;
  auto stats = kiln::RunPipeline(**graph, kiln::kQuantizeOnlyPipeline, {}, context);
  if (!stats.ok()) return Fail(absl::StrCat(model_path, ": ", stats.status().message()));
  auto onnx_bytes = kiln::ExportOnnxModel(**graph, "kiln_qdq");
  if (!onnx_bytes.ok()) return Fail(absl::StrCat(model_path, ": ", onnx_bytes.status().message()));
  if (auto s = kiln::WriteFile(args.Get("--emit-qdq"), *onnx_bytes); !s.ok()) return Fail(std::string(s.message()));
  const kiln::QuantizationSummary& q = context.quantization_summary;
  std::fprintf(stderr, "kiln: wrote %s: QDQ around %lld Conv/MatMul (%s calibration, %lld samples), %zu kept in f32\n",
               args.Get("--emit-qdq").c_str(), static_cast<long long>(q.quantized_nodes), q.method.c_str(),
               static_cast<long long>(q.calibration_samples), q.kept_float.size());
  return 0;
}

int Bench(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {{"--threads", true}, {"--iters", true}, {"--warmup", true}, {"--profile", false}},
                 args, error)) {
    return UsageError(error);
  }
  if (args.positional.size() != 1) return UsageError("bench takes one OUT.so");
  int threads = 1, iters = 50, warmup = 5;
  if (args.Has("--threads") && !ParseInt(args.Get("--threads"), "--threads", 0, &threads, error))
    return UsageError(error);
  if (args.Has("--iters") && !ParseInt(args.Get("--iters"), "--iters", 1, &iters, error)) return UsageError(error);
  if (args.Has("--warmup") && !ParseInt(args.Get("--warmup"), "--warmup", 0, &warmup, error)) return UsageError(error);
  Loaded loaded;
  if (!Load(args.positional[0], threads, loaded, error)) return Fail(error);
  std::mt19937 rng(42);
  std::vector<kiln::Tensor> inputs, outputs;
  for (int32_t i = 0; i < loaded.desc->num_inputs; ++i) {
    const kiln_tensor_info& info = loaded.desc->inputs[i];
    kiln::Tensor t(static_cast<kiln::DType>(info.dtype), std::vector<int64_t>(info.dims, info.dims + info.rank));
    auto* bytes = static_cast<unsigned char*>(t.data());
    if (t.dtype() == kiln::DType::kFloat32) {
      std::normal_distribution<float> dist(0.f, 1.f);
      for (int64_t k = 0; k < t.num_elements(); ++k) t.data_as<float>()[k] = dist(rng);
    } else {
      // Integer inputs are often indices: keep them small and valid.
      std::memset(bytes, 0, t.size_bytes());
    }
    inputs.push_back(std::move(t));
  }
  for (int32_t i = 0; i < loaded.desc->num_outputs; ++i) {
    const kiln_tensor_info& info = loaded.desc->outputs[i];
    outputs.emplace_back(static_cast<kiln::DType>(info.dtype), std::vector<int64_t>(info.dims, info.dims + info.rank));
  }
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (auto& t : inputs) in_ptrs.push_back(t.data());
  for (auto& t : outputs) out_ptrs.push_back(t.data());
  for (int i = 0; i < warmup; ++i) {
    if (kiln_session_run(loaded.session, in_ptrs.data(), out_ptrs.data()) != KILN_OK) return Fail(kiln_last_error());
  }
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (kiln_session_run(loaded.session, in_ptrs.data(), out_ptrs.data()) != KILN_OK) return Fail(kiln_last_error());
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  if (args.Has("--profile")) {
    // Separate runs, so the hooks' own cost never touches the timings above.
    const int32_t kernels = loaded.desc->num_kernels;
    std::vector<double> kernel_ms(static_cast<size_t>(kernels), 0.0);
    double profiled_total = 0;
    for (int i = 0; i < iters; ++i) {
      auto start = std::chrono::steady_clock::now();
      if (kiln_session_run_profiled(loaded.session, in_ptrs.data(), out_ptrs.data(), kernel_ms.data()) != KILN_OK) {
        return Fail(kiln_last_error());
      }
      profiled_total += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    std::vector<int32_t> order(static_cast<size_t>(kernels));
    for (int32_t k = 0; k < kernels; ++k) order[static_cast<size_t>(k)] = k;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return kernel_ms[a] > kernel_ms[b]; });
    double kernel_sum = 0;
    for (double ms : kernel_ms) kernel_sum += ms;
    std::fprintf(stderr, "profile: %d kernels, %d runs, %.4f ms per run (%.4f ms in kernels)\n", kernels, iters,
                 profiled_total / iters, kernel_sum / iters);
    std::fprintf(stderr, "%5s %12s %7s %7s  %s\n", "rank", "ms/run", "%", "cum %", "kernel");
    double cumulative = 0;
    for (size_t r = 0; r < order.size(); ++r) {
      const double ms = kernel_ms[order[r]] / iters;
      if (ms <= 0 && r >= 10) break;
      cumulative += ms;
      std::fprintf(stderr, "%5zu %12.4f %6.1f%% %6.1f%%  #%d %s\n", r + 1, ms, 100.0 * ms * iters / kernel_sum,
                   100.0 * cumulative * iters / kernel_sum, order[r], loaded.desc->kernel_names[order[r]]);
    }
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double t : times) mean += t;
  mean /= static_cast<double>(times.size());
  auto percentile = [&](double p) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * (sorted.size() - 1) + 0.5))];
  };
  std::printf(
      "{\"median_ms\": %.4f, \"p90_ms\": %.4f, \"mean_ms\": %.4f, \"min_ms\": %.4f, \"iters\": %d, \"threads\": %d}\n",
      percentile(0.5), percentile(0.9), mean, sorted.front(), iters, kiln_session_num_threads(loaded.session));
  return 0;
}

int Inspect(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {}, args, error)) return UsageError(error);
  if (args.positional.size() != 1) return UsageError("inspect takes one OUT.so");
  kiln_module* module = nullptr;
  const kiln_module_desc* desc = nullptr;
  if (kiln_module_load(args.positional[0].c_str(), &module) != KILN_OK ||
      kiln_module_describe(module, &desc) != KILN_OK) {
    return Fail(kiln_last_error());
  }
  std::fputs(desc->manifest_json, stdout);
  kiln_module_unload(module);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return UsageError("missing subcommand");
  const std::string command = argv[1];
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(Usage().c_str(), stdout);
      return 0;
    }
  }
  if (command == "compile") return Compile(argc, argv);
  if (command == "run") return Run(argc, argv);
  if (command == "bench") return Bench(argc, argv);
  if (command == "quantize") return Quantize(argc, argv);
  if (command == "inspect") return Inspect(argc, argv);
  if (kiln::cli::IsServiceCommand(command)) return kiln::cli::RunServiceCommand(command, argc, argv);
  return UsageError(absl::StrCat("unknown subcommand '", command, "'"));
}
