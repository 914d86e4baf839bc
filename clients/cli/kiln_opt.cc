// kiln-opt: runs passes on IR text, for golden tests and for people working on passes.
//   kiln-opt FILE.kir [--pipeline P] [--print-after-all] [--print-after NAME]...
//            [--synthetic-calibration N [--calibration-seed S]] | kiln-opt --list-passes | --list-ops
// Reads the graph (see compiler/ir/parser.cc for the text form; "-" reads stdin), checks
// every declared type against type inference, runs the pipeline (default: none) and prints
// the resulting IR. What the passes report follows as comment lines: the memory plan
//   // memory: arena A bytes, naive N bytes, V views, I in place
//   // %v: @offset size      or     // %v: shares %owner
// and the prune and quantize summaries.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/strings/str_format.h"
#include "kiln/common/cli.h"
#include "kiln/common/file.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace {

struct Flags {
  std::string path, pipeline;
  bool print_after_all = false;
  std::vector<std::string> print_after;
  int synthetic_calibration = 0;
  uint64_t calibration_seed = 1;
};

int Fail(const std::string& path, const std::string& what) {
  std::fprintf(stderr, "kiln-opt: %s: %s\n", path.c_str(), what.c_str());
  return 1;
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path != "-") return kiln::ReadFile(path);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// The declared types must be the ones inference gives, or a golden test would start from
// a graph the importer could never produce.
absl::Status CheckDeclaredTypes(kiln::Graph& graph) {
  std::map<const kiln::Value*, kiln::TensorType> declared;
  for (const kiln::Node* node : graph.nodes()) {
    for (const kiln::Value* v : node->outputs()) declared[v] = v->type();
  }
  if (absl::Status s = kiln::InferTypes(graph); !s.ok()) return s;
  for (const auto& [value, type] : declared) {
    if (!(value->type() == type)) {
      return absl::InvalidArgumentError("%" + value->name() + " is declared " + kiln::PrintType(type) +
                                        " but its type is " + kiln::PrintType(value->type()));
    }
  }
  return absl::OkStatus();
}

// Calibration the golden tests can pin: `count` samples of every f32 input, uniform in
// [-1, 1) from a 64-bit LCG (the same numbers on every machine, unlike <random>'s
// distributions).
absl::StatusOr<std::vector<std::vector<kiln::Tensor>>> SyntheticSamples(const kiln::Graph& graph, int count,
                                                                        uint64_t seed) {
  std::vector<std::vector<kiln::Tensor>> samples(count);
  uint64_t state = seed;
  for (std::vector<kiln::Tensor>& sample : samples) {
    for (const kiln::Value* input : graph.inputs()) {
      if (input->type().dtype != kiln::DType::kFloat32 || !input->type().IsStatic())
        return absl::InvalidArgumentError("--synthetic-calibration needs f32 inputs of static shape; '" +
                                          input->name() + "' is " + kiln::PrintType(input->type()));
      kiln::Tensor tensor(kiln::DType::kFloat32, input->type().StaticDims());
      float* data = tensor.data_as<float>();
      for (int64_t i = 0; i < tensor.num_elements(); ++i) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        data[i] = static_cast<float>(static_cast<double>(state >> 40) / static_cast<double>(1ULL << 24) * 2.0 - 1.0);
      }
      sample.push_back(std::move(tensor));
    }
  }
  return samples;
}

void PrintPruning(const kiln::PruningSummary& p) {
  std::cout << "// pruning: " << p.pruned_layers << " layers, " << p.channels_removed << " of " << p.channels_before
            << " channels removed; parameters " << p.before.parameters << " -> " << p.after.parameters << " ("
            << p.after.nonzero_parameters << " nonzero); flops " << p.before.flops << " -> " << p.after.flops << "\n";
  for (const std::string& kept : p.kept_whole) std::cout << "// kept whole: " << kept << "\n";
  if (p.weight_ratio > 0 && p.blockable_layers > 0) {
    std::cout << "// sparse: " << p.sparse_layers << " of " << p.blockable_layers
              << " MatMul/Gemm weights run block-sparse (1x16 blocks " << absl::StrFormat("%.1f", 100 * p.block_density)
              << "% nonzero)\n";
  }
}

void PrintQuantization(const kiln::QuantizationSummary& q) {
  std::cout << "// quantization: " << q.quantized_nodes << " nodes, " << q.method << " calibration on "
            << q.calibration_samples << " samples\n";
  for (const std::string& kept : q.kept_float) std::cout << "// kept float: " << kept << "\n";
}

void PrintMemoryPlan(const kiln::Graph& graph, const kiln::MemoryPlan& plan) {
  std::cout << "// memory: arena " << plan.arena_bytes << " bytes, naive " << plan.naive_bytes << " bytes, "
            << plan.views << " views, " << plan.in_place << " in place, " << plan.concats_in_place
            << " concats in place\n";
  for (const kiln::Node* node : graph.nodes()) {
    for (const kiln::Value* v : node->outputs()) {
      auto slot = plan.arena.find(v);
      auto alias = plan.alias.find(v);
      auto part = plan.parts.find(v);
      std::cout << "// %" << v->name() << ": ";
      if (part != plan.parts.end()) {
        std::cout << "in %" << part->second.whole->name() << " at +" << part->second.offset_bytes << "\n";
      } else if (slot != plan.arena.end()) {
        std::cout << "@" << slot->second.offset << " " << slot->second.size_bytes << "\n";
      } else if (alias != plan.alias.end()) {
        std::cout << "shares %" << alias->second->name() << "\n";
      } else {
        std::cout << "graph output\n";
      }
    }
  }
}

int Run(const Flags& flags) {
  auto text = ReadInput(flags.path);
  if (!text.ok()) return Fail(flags.path, std::string(text.status().message()));
  auto graph = kiln::ParseGraph(*text);
  if (!graph.ok()) return Fail(flags.path, std::string(graph.status().message()));
  if (absl::Status s = CheckDeclaredTypes(**graph); !s.ok()) return Fail(flags.path, std::string(s.message()));
  auto pipeline = kiln::ParsePipeline(flags.pipeline);
  if (!pipeline.ok()) return Fail(flags.path, std::string(pipeline.status().message()));

  kiln::PassContext context;
  if (flags.synthetic_calibration > 0) {
    auto samples = SyntheticSamples(**graph, flags.synthetic_calibration, flags.calibration_seed);
    if (!samples.ok()) return Fail(flags.path, std::string(samples.status().message()));
    context.calibration_samples = std::move(*samples);
  }
  kiln::PipelineOptions print;
  print.print_after_all = flags.print_after_all;
  print.print_after.insert(flags.print_after.begin(), flags.print_after.end());
  print.print_stream = &std::cout;
  auto stats = kiln::RunPipeline(**graph, *pipeline, print, context);
  if (!stats.ok()) return Fail(flags.path, std::string(stats.status().message()));

  std::cout << kiln::PrintGraph(**graph);
  if (kiln::FindInvocation(*pipeline, "prune")) PrintPruning(context.pruning_summary);
  if (kiln::FindInvocation(*pipeline, "quantize")) PrintQuantization(context.quantization_summary);
  if (const auto* plan = context.analyses.GetIfCached<kiln::MemoryPlanAnalysis>()) PrintMemoryPlan(**graph, *plan);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app("kiln-opt: run graph passes on IR text (.kir) and print the result", "kiln-opt");
  app.add_option("file", flags.path, "FILE.kir, the input graph ('-' reads stdin)");
  app.add_option("--pipeline", flags.pipeline,
                 "passes to run, e.g. 'fold-constants,fuse,prune{channels=0.3},quantize{method=entropy}' "
                 "(default: none)");
  app.add_flag("--print-after-all", flags.print_after_all, "print the IR after every pass");
  app.add_option("--print-after", flags.print_after, "print the IR after pass NAME (repeatable)");
  app.add_option("--synthetic-calibration", flags.synthetic_calibration,
                 "give quantize N seeded pseudo-random calibration samples (deterministic, for golden tests)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--calibration-seed", flags.calibration_seed, "the seed of --synthetic-calibration (default 1)");
  // Runs while parsing, so it needs no FILE; CLI::Success ends the parse with status 0.
  app.add_flag_callback(
      "--list-passes",
      [] {
        std::fputs(kiln::DescribePasses().c_str(), stdout);
        throw CLI::Success();
      },
      "print each pass, its summary and its options, and exit");
  app.add_flag_callback(
      "--list-ops",
      [] {
        for (const std::string& op : kiln::SupportedOps()) std::printf("%s\n", op.c_str());
        throw CLI::Success();
      },
      "print every op the compiler takes (ONNX default domain and Kiln's own kiln.*), one per line, and exit");
  if (auto exit = kiln::ParseCommandLine(app, argc, argv)) return *exit;
  if (flags.path.empty()) {
    return kiln::ReportUsageError("kiln-opt", "no input file");
  }
  return Run(flags);
}
