// Auto-tuning (kiln compile --tune): for each convolution shape with more than one way to
// run it (Winograd F(4x4, 3x3) where it applies; the implicit GEMM with jobs of 64, 128 or
// 256 output positions), compile each candidate as a one-node artifact, time it on this
// machine and keep the fastest. Results are cached by
// (compiler version, target, op shape) in a small text file, so a second compile of the
// same shapes measures nothing.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/target.h"

namespace kiln {

struct TuneOptions {
  bool enabled = false;
  double budget_seconds = 120;  // measuring stops once spent; shapes left keep the default
  std::string cache_path;       // "" = no cache file
  int iterations = 15;          // timed runs per candidate (median), after 3 warm-up runs
};

// The cache file when none is given: $KILN_TUNE_CACHE, else $XDG_CACHE_HOME/kiln/tune.tsv,
// else $HOME/.cache/kiln/tune.tsv ("" when none of them is set).
std::string DefaultTuneCachePath();

struct TuneDecision {
  std::string node;     // node name
  std::string key;      // the cache key: op shape and target
  std::string choice;   // "winograd", or "gemm64" / "gemm128" / "gemm256": the implicit GEMM
                        // with jobs that many output positions wide
  std::string timings;  // median ms per candidate, measured or cached: "winograd=1.37;gemm64=3.48"
  bool from_cache = false;
};

struct TuneResult {
  std::vector<TuneDecision> decisions;
  // Distinct shapes measured now; nodes decided by the cache file; nodes left untuned.
  // (Nodes repeating a shape measured in this compile count in none of them.)
  int measured = 0, from_cache = 0, over_budget = 0;
  int cache_entries = 0;  // entries the cache file held before
  double seconds = 0;
};

// Decides each eligible node of the optimised graph and records the choice on the node
// (attribute kiln.algorithm), which the artifact lowering follows.
absl::StatusOr<TuneResult> TuneGraph(Graph& graph, const TargetSpec& target, const TuneOptions& options);

}  // namespace kiln
