// Pass registry and the pipeline runner (timing, node counts, printing between passes).
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/compiler/passes.h"

namespace kiln {

// Static registration from a static library needs each pass object linked in; these
// references force that.
void kiln_link_pass_DeadCodeElimination();
void kiln_link_pass_CommonSubexpressionElimination();
void kiln_link_pass_FoldConstants();
void kiln_link_pass_Simplify();
void kiln_link_pass_FoldBatchNorm();
void kiln_link_pass_FoldQdq();
void kiln_link_pass_Quantize();
void kiln_link_pass_Prune();
void kiln_link_pass_Fuse();
void kiln_link_pass_Layout();
void kiln_link_pass_PlanMemory();

namespace {

std::map<std::string, PassInfo>& PassTable() {
  static auto* table = new std::map<std::string, PassInfo>();
  return *table;
}

void LinkAllPasses() {
  kiln_link_pass_DeadCodeElimination();
  kiln_link_pass_CommonSubexpressionElimination();
  kiln_link_pass_FoldConstants();
  kiln_link_pass_Simplify();
  kiln_link_pass_FoldBatchNorm();
  kiln_link_pass_FoldQdq();
  kiln_link_pass_Quantize();
  kiln_link_pass_Prune();
  kiln_link_pass_Fuse();
  kiln_link_pass_Layout();
  kiln_link_pass_PlanMemory();
}

}  // namespace

bool RegisterPass(PassInfo info) {
  std::string name = info.name;
  PassTable()[name] = std::move(info);
  return true;
}

std::vector<PassInfo> RegisteredPasses() {
  LinkAllPasses();
  std::vector<PassInfo> passes;
  for (const auto& [name, info] : PassTable()) passes.push_back(info);
  return passes;
}

absl::StatusOr<std::vector<PassStats>> RunPipeline(Graph& graph, const std::string& pipeline,
                                                   const PipelineOptions& options, PassContext& context) {
  LinkAllPasses();
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(pipeline, ',', absl::SkipWhitespace())) {
    std::string name(absl::StripAsciiWhitespace(part));
    if (PassTable().count(name) == 0) {
      std::vector<std::string> known;
      for (const auto& [k, v] : PassTable()) known.push_back(k);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown pass '", name, "' in pipeline '", pipeline, "'; passes: ", absl::StrJoin(known, ", ")));
    }
    names.push_back(name);
  }
  for (const std::string& name : options.print_after) {
    if (PassTable().count(name) == 0)
      return absl::InvalidArgumentError(absl::StrCat("--print-after names unknown pass '", name, "'"));
  }
  std::vector<PassStats> stats;
  for (const std::string& name : names) {
    std::unique_ptr<Pass> pass = PassTable()[name].create();
    PassStats s;
    s.name = name;
    s.nodes_before = graph.num_nodes();
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<bool> changed = pass->Run(graph, context);
    s.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!changed.ok()) {
      return absl::Status(changed.status().code(), absl::StrCat("pass '", name, "': ", changed.status().message()));
    }
    graph.Compact();
    if (absl::Status v = VerifyGraph(graph); !v.ok()) {
      return absl::InternalError(absl::StrCat("pass '", name, "' left an invalid graph: ", v.message()));
    }
    s.changed = *changed;
    s.nodes_after = graph.num_nodes();
    stats.push_back(s);
    if (options.print_stream && (options.print_after_all || options.print_after.count(name))) {
      *options.print_stream << "// ----- IR after " << name << " -----\n" << PrintGraph(graph);
    }
  }
  return stats;
}

}  // namespace kiln
