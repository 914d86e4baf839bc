// kiln-opt: runs passes on IR text, for golden tests and for people working on passes.
//   kiln-opt FILE.kir [--pipeline P] [--print-after-all] [--prune-channels R] [--prune-weights R]
// Reads the graph (see compiler/ir/parser.cc for the text form; "-" reads stdin), checks
// every declared type against type inference, runs the pipeline (default: none) and prints
// the resulting IR. When the pipeline planned memory, the plan follows as comment lines:
//   // memory: arena A bytes, naive N bytes, V views, I in place
//   // %v: @offset size      or     // %v: shares %owner
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "kiln/common/file.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace {

int Usage(const char* problem) {
  std::fprintf(stderr,
               "kiln-opt: %s\nusage: kiln-opt FILE.kir [--pipeline P] [--print-after-all] [--prune-channels R] "
               "[--prune-weights R]\n"
               "  (the prune pass's ratios; its summary follows the IR as comment lines)\n"
               "passes: ",
               problem);
  for (const auto& pass : kiln::RegisteredPasses()) std::fprintf(stderr, "%s ", pass.name.c_str());
  std::fprintf(stderr, "\n");
  return 2;
}

int Fail(const std::string& path, const std::string& what) {
  std::fprintf(stderr, "kiln-opt: %s: %s\n", path.c_str(), what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, pipeline;
  kiln::PipelineOptions print;
  kiln::PruningConfig pruning;
  bool has_pruning = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--prune-channels" || a == "--prune-weights") && i + 1 < argc) {
      char* end = nullptr;
      const double ratio = std::strtod(argv[++i], &end);
      if (*end != '\0') return Usage((a + " takes a number").c_str());
      (a == "--prune-channels" ? pruning.channel_ratio : pruning.weight_ratio) = ratio;
      has_pruning = true;
    } else if (a == "--pipeline" && i + 1 < argc) {
      pipeline = argv[++i];
    } else if (a.rfind("--pipeline=", 0) == 0) {
      pipeline = a.substr(strlen("--pipeline="));
    } else if (a == "--print-after-all") {
      print.print_after_all = true;
    } else if (a == "-h" || a == "--help") {
      Usage("runs passes on IR text");
      return 0;
    } else if (a != "-" && a.rfind("-", 0) == 0) {
      return Usage(("unknown flag " + a).c_str());
    } else if (path.empty()) {
      path = a;
    } else {
      return Usage(("unexpected argument " + a).c_str());
    }
  }
  if (path.empty()) return Usage("no input file");
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    auto bytes = kiln::ReadFile(path);
    if (!bytes.ok()) return Fail(path, std::string(bytes.status().message()));
    text = *bytes;
  }
  auto graph = kiln::ParseGraph(text);
  if (!graph.ok()) return Fail(path, std::string(graph.status().message()));

  // The declared types must be the ones inference gives, or a golden test would start
  // from a graph the importer could never produce.
  std::map<const kiln::Value*, kiln::TensorType> declared;
  for (const kiln::Node* node : (*graph)->nodes()) {
    for (const kiln::Value* v : node->outputs()) declared[v] = v->type();
  }
  if (auto s = kiln::InferTypes(**graph); !s.ok()) return Fail(path, std::string(s.message()));
  for (const auto& [value, type] : declared) {
    if (!(value->type() == type)) {
      return Fail(path, "%" + value->name() + " is declared " + kiln::PrintType(type) + " but its type is " +
                            kiln::PrintType(value->type()));
    }
  }

  kiln::PassContext context;
  if (has_pruning) context.pruning = &pruning;
  print.print_stream = &std::cout;
  if (!pipeline.empty()) {
    auto stats = kiln::RunPipeline(**graph, pipeline, print, context);
    if (!stats.ok()) return Fail(path, std::string(stats.status().message()));
  }
  std::cout << kiln::PrintGraph(**graph);
  if (has_pruning) {
    const kiln::PruningSummary& p = context.pruning_summary;
    std::cout << "// pruning: " << p.pruned_layers << " layers, " << p.channels_removed << " of " << p.channels_before
              << " channels removed; parameters " << p.before.parameters << " -> " << p.after.parameters << " ("
              << p.after.nonzero_parameters << " nonzero); flops " << p.before.flops << " -> " << p.after.flops << "\n";
    for (const std::string& kept : p.kept_whole) std::cout << "// kept whole: " << kept << "\n";
  }
  if (context.has_memory_plan) {
    const kiln::MemoryPlan& plan = context.memory_plan;
    std::cout << "// memory: arena " << plan.arena_bytes << " bytes, naive " << plan.naive_bytes << " bytes, "
              << plan.views << " views, " << plan.in_place << " in place, " << plan.concats_in_place
              << " concats in place\n";
    for (const kiln::Node* node : (*graph)->nodes()) {
      for (const kiln::Value* v : node->outputs()) {
        auto slot = plan.arena.find(v);
        auto alias = plan.alias.find(v);
        auto part = plan.parts.find(v);
        if (part != plan.parts.end()) {
          std::cout << "// %" << v->name() << ": in %" << part->second.whole->name() << " at +"
                    << part->second.offset_bytes << "\n";
        } else if (slot != plan.arena.end()) {
          std::cout << "// %" << v->name() << ": @" << slot->second.offset << " " << slot->second.size_bytes << "\n";
        } else if (alias != plan.alias.end()) {
          std::cout << "// %" << v->name() << ": shares %" << alias->second->name() << "\n";
        } else {
          std::cout << "// %" << v->name() << ": graph output\n";
        }
      }
    }
  }
  return 0;
}
