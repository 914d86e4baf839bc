// The pass registry (each passes.def entry to its factory) and the pipeline runner
// (timing, node counts, verification, printing between passes, analysis invalidation).
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/compiler/passes.h"

namespace kiln {

// Each pass file defines its factory; the table names them all, so no pass can be left
// out of the link or the registry.
#define KILN_PASS(CLASS, NAME, SUMMARY) std::unique_ptr<Pass> Create##CLASS(const PassInvocation& options);
#include "passes.def"

namespace {

using Factory = std::unique_ptr<Pass> (*)(const PassInvocation&);

Factory FactoryFor(absl::string_view name) {
  static const auto* factories = new std::map<absl::string_view, Factory>{
#define KILN_PASS(CLASS, NAME, SUMMARY) {NAME, &Create##CLASS},
#include "passes.def"
  };
  return factories->at(name);  // every invocation names a pass of the table
}

absl::Status CheckPrintAfter(const PipelineOptions& options) {
  for (const std::string& name : options.print_after) {
    if (FindPass(name) == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("--print-after names unknown pass '", name, "'"));
  }
  return absl::OkStatus();
}

// Runs one pass: its stats, or the error annotated with the pass's name.
absl::StatusOr<PassStats> RunPass(Graph& graph, const PassInvocation& invocation, PassContext& context) {
  std::unique_ptr<Pass> pass = CreatePass(invocation);
  PassStats stats;
  stats.name = invocation.name();
  stats.nodes_before = graph.num_nodes();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<bool> changed = pass->Run(graph, context);
  stats.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!changed.ok()) {
    return absl::Status(changed.status().code(), absl::StrCat("pass '", stats.name, "': ", changed.status().message()));
  }
  // Results computed before the change describe a graph that is gone.
  if (*changed) context.analyses.Invalidate();
  graph.Compact();
  if (absl::Status v = VerifyGraph(graph); !v.ok()) {
    return absl::InternalError(absl::StrCat("pass '", stats.name, "' left an invalid graph: ", v.message()));
  }
  stats.changed = *changed;
  stats.nodes_after = graph.num_nodes();
  return stats;
}

}  // namespace

std::unique_ptr<Pass> CreatePass(const PassInvocation& options) { return FactoryFor(options.name())(options); }

absl::StatusOr<std::vector<PassStats>> RunPipeline(Graph& graph, const Pipeline& pipeline,
                                                   const PipelineOptions& options, PassContext& context) {
  if (absl::Status s = CheckPrintAfter(options); !s.ok()) return s;
  std::vector<PassStats> stats;
  for (const PassInvocation& invocation : pipeline) {
    absl::StatusOr<PassStats> pass = RunPass(graph, invocation, context);
    if (!pass.ok()) return pass.status();
    stats.push_back(*pass);
    if (options.print_stream && (options.print_after_all || options.print_after.count(pass->name))) {
      *options.print_stream << "// ----- IR after " << pass->name << " -----\n" << PrintGraph(graph);
    }
  }
  return stats;
}

absl::StatusOr<std::vector<PassStats>> RunPipeline(Graph& graph, absl::string_view pipeline,
                                                   const PipelineOptions& options, PassContext& context) {
  absl::StatusOr<Pipeline> parsed = ParsePipeline(pipeline);
  if (!parsed.ok()) return parsed.status();
  return RunPipeline(graph, *parsed, options, context);
}

}  // namespace kiln
