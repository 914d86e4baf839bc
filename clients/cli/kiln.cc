// kiln: the command-line front end (CLI11). Local subcommands here: compile, quantize,
// run, bench, inspect, help; the service's (submit, job, jobs, watch, cancel, fetch) are in
// service_commands.cc. `kiln compile` and `kiln submit` share the CompileSpec's flags.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "clients/cli/spec_flags.h"
#include "kiln/common/cli.h"
#include "kiln/common/file.h"
#include "kiln/common/json.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"

namespace kiln::cli {
namespace {

constexpr char kSynopsis[] = R"(Usage:
  kiln compile MODEL.onnx --check [--input-shape NAME=1x3x224x224]... [--json]
  kiln compile MODEL.onnx -o OUT.so [--target T] [--input-shape NAME=1x3x224x224]... [--pipeline P]
               [--print-after-all] [--print-after PASS] [--report R.json] [--tune [--tune-budget S] [--tune-cache F]]
               [--precision int8 --calibration DIR [--calibration-method M] [--keep-float NODE,...] | --precision bf16]
               [--prune-channels R] [--prune-weights R] [--prune-skip NODE,...] [validation flags as for submit]
  kiln quantize MODEL.onnx --emit-qdq OUT.onnx --calibration DIR [--calibration-method M]
  kiln run OUT.so --input NAME=FILE.pb [--input ...] --output-dir DIR [--threads N]
  kiln bench OUT.so [--threads N] [--iters N] [--warmup N] [--profile]
  kiln inspect OUT.so
  kiln kernels [--target T]... [--presets] [--dir DIR] [--list]
  kiln submit MODEL.onnx --server ADDR [compile's spec flags] [--inputs DIR] [--atol A --rtol R] [--wait]
              [--output DIR] [--fail-on-accuracy] [--label KEY=VALUE]...
  kiln job ID | kiln jobs [--state S] [--label K=V] | kiln watch ID | kiln cancel ID     (--server ADDR)
  kiln fetch SHA256/SIZE -o FILE --server ADDR
  kiln help [SUBCOMMAND]
`kiln SUBCOMMAND --help` describes each flag. Exit status: 0 on success, 1 on a failed operation, 2 on a
usage error (3: `submit --fail-on-accuracy` and the verdict fails).)";

// Targets, pipelines and passes: what `kiln help` adds to the subcommand list.
std::string Reference() {
  std::vector<std::string> passes;
  for (const auto& p : RegisteredPasses()) passes.push_back(p.name);
  return absl::StrCat("\nTargets: ", absl::StrJoin(TargetPresets(), ", "),
                      ", or triple=T[,cpu=C][,features=+a,-b]\nDefault pipeline: ", kDefaultPipeline,
                      "\nint8 pipeline: ", kInt8Pipeline, "\nbf16 pipeline: ", kBf16Pipeline,
                      "\nPasses: ", absl::StrJoin(passes, ", "),
                      "\n(`kiln compile --list-passes` describes each pass and its options, as in "
                      "--pipeline 'fold-constants,prune{channels=0.3}'.)\n");
}

struct CompileFlags {
  std::string model, out, report, tune_cache;
  bool print_after_all = false, check = false, json = false;
  std::vector<std::string> print_after;
  SpecFlags spec;
};

void PrintQuantization(const QuantizationSummary& q) {
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
    std::fprintf(stderr, "kiln: int8: lowest SNR against f32 (first sample): %s\n", absl::StrJoin(worst, ", ").c_str());
}

void PrintPruning(const PruningSummary& p) {
  std::fprintf(
      stderr,
      "kiln: pruned: %lld layers lost %lld of %lld output channels; parameters %.2fM -> %.2fM (%.2fM "
      "nonzero), GFLOPs %.3f -> %.3f; weight sparsity %.1f%%; %zu layers kept whole (see --report)\n",
      static_cast<long long>(p.pruned_layers), static_cast<long long>(p.channels_removed),
      static_cast<long long>(p.channels_before), p.before.parameters / 1e6, p.after.parameters / 1e6,
      p.after.nonzero_parameters / 1e6, p.before.flops / 1e9, p.after.flops / 1e9,
      p.after.weights ? 100.0 * static_cast<double>(p.after.zero_weights) / static_cast<double>(p.after.weights) : 0.0,
      p.kept_whole.size());
  std::vector<std::string> worst;
  for (size_t i = 0; i < p.layers_by_error.size() && i < 3; ++i) {
    worst.push_back(absl::StrFormat("%s (%s) %.1f dB", p.layers_by_error[i].node, p.layers_by_error[i].op,
                                    p.layers_by_error[i].snr_db));
  }
  if (p.weight_ratio > 0 && p.blockable_layers > 0) {
    std::fprintf(
        stderr, "kiln: pruned: %lld of %lld MatMul/Gemm weights run block-sparse (1x16 blocks %.1f%% nonzero)\n",
        static_cast<long long>(p.sparse_layers), static_cast<long long>(p.blockable_layers), 100.0 * p.block_density);
  }
  if (!worst.empty()) {
    std::fprintf(stderr, "kiln: pruned: lowest SNR against unpruned (first sample): %s\n",
                 absl::StrJoin(worst, ", ").c_str());
  }
}

void PrintTuning(const TuneResult& t, const std::string& cache) {
  int winograd = 0;
  for (const TuneDecision& d : t.decisions) winograd += d.choice == "winograd";
  std::fprintf(stderr,
               "kiln: tuned %zu convolutions in %.1f s (%d shapes measured, %d convolutions from the cache %s, %d "
               "left untuned by the budget): %d Winograd, %zu GEMM\n",
               t.decisions.size(), t.seconds, t.measured, t.from_cache, cache.empty() ? "no cache" : cache.c_str(),
               t.over_budget, winograd, t.decisions.size() - winograd);
}

// One line: what the artifact's bytes are (the report's artifact_size) beside the ONNX
// file's, in MB.
void PrintArtifactSize(const v1::CompileReport& report, int64_t model_bytes) {
  auto mb = [](double bytes) { return bytes / 1e6; };
  const v1::CompileReport::ArtifactSize& size = report.artifact_size();
  std::fprintf(stderr,
               "kiln: artifact %.1f MB (ONNX file %.1f MB): weights %.1f MB as given %+.1f MB by packing/transforms + "
               "%.1f MB alignment, code %.1f MB, tables %.2f MB, ELF %.2f MB\n",
               mb(report.artifact_bytes()), mb(static_cast<double>(model_bytes)), mb(size.weights_given()),
               mb(size.weights_added()), mb(size.weights_alignment()), mb(size.code()), mb(size.tables()),
               mb(size.elf_overhead()));
}

void PrintCompileSummary(const CompileFlags& flags, const CompileResult& result, int64_t model_bytes,
                         const std::string& tune_cache) {
  std::fprintf(
      stderr, "kiln: compiled %s -> %s (%zu bytes, target %s, %zu nodes, arena %lld bytes vs %lld naive) in %.0f ms\n",
      flags.model.c_str(), flags.out.c_str(), static_cast<size_t>(result.artifact_bytes),
      (result.target.triple + "/" + result.target.cpu).c_str(), static_cast<size_t>(result.report.nodes()),
      static_cast<long long>(result.memory_plan.arena_bytes), static_cast<long long>(result.memory_plan.naive_bytes),
      result.import_ms + result.passes_ms + result.codegen_ms);
  PrintArtifactSize(result.report, model_bytes);
  const v1::CompileSpec& spec = result.manifest.spec();
  if (spec.quantization().precision() == "int8") PrintQuantization(result.quantization);
  if (spec.quantization().precision() == "bf16") {
    const v1::CompileReport::Bf16& bf16 = result.report.bf16();
    if (bf16.ran() == "bf16") {
      std::fprintf(stderr, "kiln: bf16: %d Conv/Gemm/MatMul run with bf16 weights and activations, f32 sums\n",
                   bf16.bf16_nodes());
    } else {
      std::fprintf(stderr, "kiln: bf16: compiled as fp32: %s\n", bf16.reason().c_str());
    }
  }
  if (spec.pruning().channels() > 0 || spec.pruning().weights() > 0) PrintPruning(result.pruning);
  if (spec.tuning().enabled()) PrintTuning(result.tuning, tune_cache);
  std::fprintf(stderr, "kiln: action key %s\n", result.action_key.c_str());
}

// kiln compile --check: every construct of the model Kiln cannot compile, one a line (or
// a kiln.check-report as JSON), found in one walk; exit 0 when there is none, 1 otherwise.
int Check(const CompileFlags& flags) {
  auto built = BuildSpec(flags.model, flags.spec, SpecCommand::kCompile);
  if (!built.ok()) {
    return absl::IsInvalidArgument(built.status()) ? UsageError("compile", std::string(built.status().message()))
                                                   : Fail(std::string(built.status().message()));
  }
  ImportOptions options;
  options.model_label = flags.model;
  for (const v1::InputShape& shape : built->spec.input_shapes())
    options.input_shapes[shape.name()] = std::vector<int64_t>(shape.dims().begin(), shape.dims().end());
  const std::string dir = std::filesystem::path(flags.model).parent_path().string();
  options.external_data = DirectoryExternalData(dir.empty() ? "." : dir);
  auto problems = CheckOnnxModel(built->model, options);
  if (!problems.ok()) return Fail(std::string(problems.status().message()));
  if (flags.json) {
    v1::CheckReport report;
    report.set_schema("kiln.check-report");
    report.set_schema_version(1);
    report.set_model(flags.model);
    for (const NodeProblem& p : *problems) {
      auto* problem = report.add_problems();
      problem->set_node(p.node);
      problem->set_op(p.op);
      problem->set_opset(p.opset);
      problem->set_reason(p.reason);
    }
    auto json = ToJson(report);
    if (!json.ok()) return Fail(std::string(json.status().message()));
    std::fputs(json->c_str(), stdout);
  } else {
    for (const NodeProblem& p : *problems) std::printf("%s: %s\n", flags.model.c_str(), FormatProblem(p).c_str());
    std::printf("%s: %zu %s\n", flags.model.c_str(), problems->size(),
                problems->size() == 1 ? "construct cannot be compiled" : "constructs cannot be compiled");
  }
  return problems->empty() ? 0 : 1;
}

int Compile(const CompileFlags& flags) {
  if (flags.check) return Check(flags);
  if (flags.json) return UsageError("compile", "--json goes with --check");
  if (flags.out.empty()) return UsageError("compile", "compile needs -o OUT.so");
  if (flags.spec.Given("--tune-cache") && !flags.spec.tune)
    return UsageError("compile", "--tune-cache goes with --tune");
  auto built = BuildSpec(flags.model, flags.spec, SpecCommand::kCompile);
  if (!built.ok()) {
    return absl::IsInvalidArgument(built.status()) ? UsageError("compile", std::string(built.status().message()))
                                                   : Fail(std::string(built.status().message()));
  }
  CompileInputs inputs;
  inputs.model_bytes = built->model;
  inputs.model_file = built->model_file.get();
  inputs.model_label = flags.model;
  const std::string dir = std::filesystem::path(flags.model).parent_path().string();
  inputs.external_data = DirectoryExternalData(dir.empty() ? "." : dir);
  inputs.calibration = built->calibration;
  inputs.print.print_after_all = flags.print_after_all;
  inputs.print.print_after.insert(flags.print_after.begin(), flags.print_after.end());
  if (flags.print_after_all || !flags.print_after.empty()) inputs.print.print_stream = &std::cerr;
  inputs.tune_cache_path = flags.spec.Given("--tune-cache") ? flags.tune_cache : DefaultTuneCachePath();
  inputs.output_path = flags.out;
  auto result = CompileModel(built->spec, inputs);
  if (!result.ok()) return Fail(InFlagTerms(result.status().message()));
  if (!flags.report.empty()) {
    auto json = ToJson(result->report);
    if (!json.ok()) return Fail(std::string(json.status().message()));
    if (auto s = WriteFile(flags.report, *json); !s.ok()) return Fail(std::string(s.message()));
  }
  PrintCompileSummary(flags, *result, static_cast<int64_t>(inputs.model_bytes.size()), inputs.tune_cache_path);
  return 0;
}

void AddCompile(CLI::App& app, std::vector<Command>& commands) {
  auto flags = std::make_shared<CompileFlags>();
  CLI::App* c = AddModelSubcommand(app, "compile", flags->model);
  c->add_option("-o,--output", flags->out, "OUT.so, the artifact");
  c->add_flag("--check", flags->check,
              "compile nothing: list every node Kiln cannot compile (unsupported op, attribute, element type, input "
              "that must be constant, dynamic shape), one a line as MODEL: node 'N' (Op, opset K): why, then their "
              "count; exit 0 when there is none, 1 otherwise. Give --input-shape as for a compile");
  c->add_flag("--json", flags->json, "with --check: print a kiln.check-report (JSON) instead");
  c->add_flag("--print-after-all", flags->print_after_all, "print the IR after import and after every pass (stderr)");
  // Runs while parsing, so it needs no MODEL; CLI::Success ends the parse with status 0.
  c->add_flag_callback(
      "--list-passes",
      [] {
        std::fputs(DescribePasses().c_str(), stdout);
        throw CLI::Success();
      },
      "print each pass, its summary and its options, and exit");
  c->add_option("--print-after", flags->print_after, "print the IR after pass P (repeatable)");
  c->add_option("--report", flags->report,
                "write the compile report (JSON, schema kiln.compile-report v2): per-pass time and node counts, "
                "memory plan, tuning, quantization and pruning, sizes, action key");
  c->add_option("--tune-cache", flags->tune_cache,
                "tuning's cache (default $KILN_TUNE_CACHE, else $XDG_CACHE_HOME/kiln/tune.tsv, else "
                "~/.cache/kiln/tune.tsv)");
  AddSpecFlags(*c, flags->spec, SpecCommand::kCompile);
  commands.push_back({c, [flags] { return Compile(*flags); }});
}

struct QuantizeFlags {
  std::string model, emit_qdq, calibration, method = "minmax";
  double percentile = 0;
  std::vector<std::string> keep_float, input_shapes;
  CLI::App* command = nullptr;
};

// kiln quantize: post-training quantization written out as a QDQ ONNX model (for other
// runtimes; Kiln compiles the float model with --precision int8 itself).
int Quantize(const QuantizeFlags& flags) {
  if (flags.emit_qdq.empty())
    return UsageError("quantize", "quantize needs --emit-qdq OUT.onnx (the QDQ model it writes)");
  if (flags.calibration.empty())
    return UsageError("quantize", "quantize needs --calibration DIR (the samples activation ranges come from)");
  QuantizationConfig config;
  auto method = ParseCalibrationMethod(flags.method);
  if (!method.ok()) return UsageError("quantize", "--calibration-method: " + std::string(method.status().message()));
  config.method = *method;
  if (flags.command->count("--calibration-percentile") > 0) {
    if (!(flags.percentile > 50 && flags.percentile <= 100))
      return UsageError("quantize",
                        absl::StrCat("--calibration-percentile ", flags.percentile, " is not in (50, 100]"));
    config.percentile = flags.percentile;
  }
  for (const std::string& list : flags.keep_float) {
    for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) config.keep_float.emplace(name);
  }
  ImportOptions import_options;
  import_options.model_label = flags.model;
  for (const std::string& s : flags.input_shapes) {
    auto shape = ParseInputShape(s);
    if (!shape.ok()) return UsageError("quantize", std::string(shape.status().message()));
    import_options.input_shapes[shape->name()] = std::vector<int64_t>(shape->dims().begin(), shape->dims().end());
  }
  const std::string dir = std::filesystem::path(flags.model).parent_path().string();
  import_options.external_data = DirectoryExternalData(dir.empty() ? "." : dir);
  auto bytes = ReadFile(flags.model);
  if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
  auto graph = ImportOnnxModel(*bytes, import_options);
  if (!graph.ok()) return Fail(std::string(graph.status().message()));
  auto sets = CalibrationInputSets(flags.calibration);
  if (!sets.ok()) return Fail(std::string(sets.status().message()));
  PassContext context;  // the samples are data for the quantize pass, not options
  for (size_t k = 0; k < sets->size(); ++k) {
    auto sample = InputSetTensors(**graph, (*sets)[k]);
    if (!sample.ok()) return Fail(absl::StrCat("calibration sample ", k, ": ", sample.status().message()));
    context.calibration_samples.push_back(std::move(*sample));
  }
  if (auto st = CheckCalibrationSamples(**graph, context.calibration_samples); !st.ok())
    return Fail(std::string(st.message()));
  config.quantize_outputs = true;  // the QDQ form other runtimes fuse: results quantized too
  Pipeline pipeline = *ParsePipeline(kQuantizeOnlyPipeline);
  if (auto st = SetQuantizationOptions(config, *FindInvocation(pipeline, "quantize")); !st.ok())
    return UsageError("quantize", std::string(st.message()));
  auto stats = RunPipeline(**graph, pipeline, {}, context);
  if (!stats.ok()) return Fail(absl::StrCat(flags.model, ": ", stats.status().message()));
  auto onnx_bytes = ExportOnnxModel(**graph, "kiln_qdq");
  if (!onnx_bytes.ok()) return Fail(absl::StrCat(flags.model, ": ", onnx_bytes.status().message()));
  if (auto s = WriteFile(flags.emit_qdq, *onnx_bytes); !s.ok()) return Fail(std::string(s.message()));
  const QuantizationSummary& q = context.quantization_summary;
  std::fprintf(stderr, "kiln: wrote %s: QDQ around %lld Conv/MatMul (%s calibration, %lld samples), %zu kept in f32\n",
               flags.emit_qdq.c_str(), static_cast<long long>(q.quantized_nodes), q.method.c_str(),
               static_cast<long long>(q.calibration_samples), q.kept_float.size());
  return 0;
}

void AddQuantize(CLI::App& app, std::vector<Command>& commands) {
  auto flags = std::make_shared<QuantizeFlags>();
  CLI::App* c = AddModelSubcommand(app, "quantize", flags->model);
  flags->command = c;
  c->add_option("--emit-qdq", flags->emit_qdq, "OUT.onnx, the QDQ model written");
  c->add_option("--calibration", flags->calibration, "the calibration samples, laid out as for `kiln compile`");
  c->add_option("--calibration-method", flags->method, "minmax (default), percentile or entropy");
  c->add_option("--calibration-percentile", flags->percentile, "method percentile: the share kept (default 99.99)");
  c->add_option("--keep-float", flags->keep_float, "node names to leave in f32 (comma-separated, repeatable)");
  c->add_option("--input-shape", flags->input_shapes, "fix a graph input's shape, e.g. input=1x3x224x224");
  commands.push_back({c, [flags] { return Quantize(*flags); }});
}

// compile, quantize and submit: a one-line description and the footer of --help each.
// Compile's and submit's footers say how the two relate, so they stand together here.
struct ModelCommandHelp {
  const char* name;
  const char* description;
  const char* footer;
};
constexpr ModelCommandHelp kModelCommands[] = {
    {"compile", "Compile an ONNX model to a native shared object",
     "The flags become one CompileSpec, as `kiln submit`'s do, so the same model and flags give the same action "
     "key and artifact locally and on a kilnd server; the key is printed and written into the --report. The "
     "validation flags (--atol, --rtol, --inputs, --seed, --max-top1-drop, --skip-latency) are part of the spec "
     "for that reason; `kiln compile` itself does not validate. Models of ONNX opsets 7 to 21 are read (1 to 6 "
     "upgraded). A model Kiln cannot compile fails with every unsupported construct listed (node, op, opset and "
     "why), not only the first; `--check` lists them without compiling."},
    {"quantize", "Write --precision int8's quantization as a QDQ ONNX model",
     "QuantizeLinear/DequantizeLinear around each Conv and MatMul's input, weight and result, BatchNorm folded: the "
     "form ONNX Runtime fuses into integer ops. Kiln compiles such a model as it is."},
    {"submit", "Compile and validate a model on a kilnd server",
     "Uploads what FindMissing reports missing (the model, the --inputs and --calibration InputSet blobs) and "
     "submits one CompileSpec made from the same flags as `kiln compile` (a \"host\" target means kilnd's "
     "machine). Without --wait it prints the job id alone on its last line; with --wait (or --output) it shows a "
     "live progress line, prints the accuracy report and the artifact digest. int8 and pruned builds are judged by "
     "top-1 agreement with the fp32 model (--max-top1-drop). Exit status: 0 succeeded; 1 the job failed or was "
     "cancelled; 3 --fail-on-accuracy and the verdict fails."},
};

}  // namespace

CLI::App* AddModelSubcommand(CLI::App& app, const char* name, std::string& model) {
  const ModelCommandHelp* help =
      std::find_if(std::begin(kModelCommands), std::end(kModelCommands),
                   [&](const ModelCommandHelp& row) { return std::strcmp(row.name, name) == 0; });
  if (help == std::end(kModelCommands)) {  // a broken build, seen by every kiln run: all are added at start
    std::fprintf(stderr, "kiln: subcommand %s has no row in kModelCommands\n", name);
    std::abort();
  }
  CLI::App* c = app.add_subcommand(name, help->description);
  c->footer(help->footer);
  c->add_option("model", model, "MODEL.onnx")->required();
  return c;
}

int UsageError(const std::string& command, const std::string& message) {
  return ReportUsageError(command.empty() ? "kiln" : "kiln " + command, message);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "kiln: error: %s\n", message.c_str());
  return 1;
}

void AddLocalCommands(CLI::App& app, std::vector<Command>& commands) {
  AddCompile(app, commands);
  AddQuantize(app, commands);
  AddArtifactCommands(app, commands);
  AddKernelCommands(app, commands);
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app("kiln: compile ONNX models to native shared objects, run them, and use a kilnd service.", "kiln");
  app.require_subcommand(1);
  std::vector<Command> commands;
  AddLocalCommands(app, commands);
  AddServiceCommands(app, commands);
  std::string topic;
  CLI::App* help = app.add_subcommand("help",
                                      "Describe every subcommand, the targets, pipelines and passes; "
                                      "`kiln help SUBCOMMAND` describes one");
  help->add_option("subcommand", topic, "a subcommand");
  app.footer(kSynopsis);  // after the subcommands, which would inherit it
  if (argc > 1 && argv[1][0] != '-' && std::string(argv[1]) != "help" &&
      std::none_of(commands.begin(), commands.end(), [&](const Command& c) { return c.app->get_name() == argv[1]; })) {
    return UsageError("", absl::StrCat("unknown subcommand '", argv[1], "'"));
  }
  if (auto exit = kiln::ParseCommandLine(app, argc, argv)) return *exit;
  if (help->parsed()) {
    if (topic.empty()) {
      // (app.help() would describe `help` itself, the subcommand given.)
      std::fputs((app.get_formatter()->make_help(&app, "kiln", CLI::AppFormatMode::Normal) + Reference()).c_str(),
                 stdout);
      return 0;
    }
    for (const Command& command : commands) {
      if (command.app->get_name() == topic) {
        std::fputs(command.app->help().c_str(), stdout);
        return 0;
      }
    }
    return UsageError("help", "no subcommand '" + topic + "'");
  }
  for (const Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return UsageError("", "missing subcommand");
}
