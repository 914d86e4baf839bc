// TuneGraph: times each candidate algorithm of a node as a one-node artifact on this
// machine and keeps the faster; see kiln/compiler/tune.h.
#include "kiln/compiler/tune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/common/file.h"
#include "kiln/common/status.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/version.h"
#include "kiln/runtime.h"

namespace kiln {
namespace {

constexpr char kAlgorithmAttr[] = "kiln.algorithm";

struct CacheEntry {
  std::string choice;
  std::string timings;  // "winograd=1.37;gemm64=3.48;..." (median ms per candidate)
};

// The cache file: one line per key, "key<TAB>choice<TAB>timings".
std::map<std::string, CacheEntry> ReadCache(const std::string& path) {
  std::map<std::string, CacheEntry> cache;
  absl::StatusOr<std::string> text = ReadFile(path);  // none yet, or unreadable: an empty cache
  if (!text.ok()) return cache;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() != 3 || f[1].empty()) continue;  // skips damaged lines
    cache[f[0]] = CacheEntry{f[1], f[2]};
  }
  return cache;
}

absl::Status WriteCache(const std::string& path, const std::map<std::string, CacheEntry>& cache) {
  const std::string directory = std::filesystem::path(path).parent_path().string();
  if (!directory.empty()) KILN_RETURN_IF_ERROR(MakeDirectories(directory));
  std::string text;
  for (const auto& [key, e] : cache) absl::StrAppend(&text, key, "\t", e.choice, "\t", e.timings, "\n");
  return Annotate(WriteFileAtomic(path, text), "the tuning cache");
}

std::string ShapeKey(const Node& node, const TargetSpec& target) {
  std::vector<std::string> parts = {CompilerVersion(), CanonicalTarget(target), node.op()};
  for (const Value* in : node.inputs()) {
    if (in != nullptr) parts.push_back(absl::StrJoin(in->type().StaticDims(), "x"));
  }
  for (const char* attr : {"pads", "strides", "dilations"}) parts.push_back(absl::StrJoin(node.GetInts(attr, {}), ","));
  parts.push_back(std::to_string(node.GetInt("group", 1)));
  return absl::StrJoin(parts, "|");
}

// Median milliseconds of the node alone (same weights, random input) compiled with
// `algorithm`, one thread.
absl::StatusOr<double> TimeCandidate(const Node& node, const std::string& algorithm, const TargetSpec& target,
                                     int iterations) {
  Graph g;
  std::vector<Value*> inputs, computed;
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const Value* in = node.input(i);
    if (in == nullptr) {
      inputs.push_back(nullptr);
    } else if (in->is_constant()) {
      inputs.push_back(g.AddConstant(in->name(), in->constant()));
    } else {
      Value* x = g.AddValue(absl::StrCat("x", i), in->type());
      g.AddInput(x);
      inputs.push_back(x);
      computed.push_back(x);
    }
  }
  if (computed.empty()) return absl::UnimplementedError("tuning needs a computed input");
  Node* copy = g.AddNode(node.op(), node.name(), inputs, {"y"}, node.opset());
  for (const auto& [name, value] : node.attrs()) copy->mutable_attrs()[name] = value;
  copy->mutable_attrs()[kAlgorithmAttr] = algorithm;
  copy->output(0)->set_type(node.output(0)->type());
  g.AddOutput(copy->output(0));
  AnalysisManager analyses;
  const MemoryPlan& plan = analyses.Get<MemoryPlanAnalysis>(g);
  CodegenOptions options;
  options.target = target;
  options.manifest_json = "{}";
  options.compiler_version = CompilerVersion();
  auto artifact = GenerateArtifact(g, plan, options);
  if (!artifact.ok()) return artifact.status();
  char path[] = "/tmp/kiln-tune-XXXXXX.so";
  const int fd = mkstemps(path, 3);
  if (fd < 0) return absl::UnavailableError("cannot create a temporary file for tuning");
  const std::string& so = artifact->shared_object;
  const bool written = write(fd, so.data(), so.size()) == static_cast<ssize_t>(so.size());
  close(fd);
  kiln_module* module = nullptr;
  if (!written || kiln_module_load(path, &module) != KILN_OK) {
    unlink(path);
    return absl::InternalError(absl::StrCat("tuning: cannot load the candidate: ", kiln_last_error()));
  }
  unlink(path);
  kiln_session* session = nullptr;
  kiln_session_options session_options{sizeof(kiln_session_options), 1};
  if (kiln_session_create(module, &session_options, &session) != KILN_OK) {
    kiln_module_unload(module);
    return absl::InternalError(absl::StrCat("tuning: ", kiln_last_error()));
  }
  // Random inputs (a fused Conv also reads its input scale).
  std::vector<Tensor> in;
  std::vector<const void*> ins;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Value* x : computed) {
    in.emplace_back(x->type().dtype, x->type().StaticDims());
    if (in.back().dtype() == DType::kFloat32) {
      for (int64_t i = 0; i < in.back().num_elements(); ++i) in.back().data_as<float>()[i] = dist(rng);
    }
  }
  for (const Tensor& t : in) ins.push_back(t.data());
  Tensor out(copy->output(0)->type().dtype, copy->output(0)->type().StaticDims());
  void* outs[] = {out.data()};
  std::vector<double> times;
  bool ok = true;
  for (int i = 0; i < iterations + 3 && ok; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ok = kiln_session_run(session, ins.data(), outs) == KILN_OK;
    if (i >= 3)
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  kiln_session_destroy(session);
  kiln_module_unload(module);
  if (!ok || times.empty()) return absl::InternalError("tuning: the candidate failed to run");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

std::string DefaultTuneCachePath() {
  if (const char* env = std::getenv("KILN_TUNE_CACHE"); env != nullptr && *env != '\0') return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return absl::StrCat(xdg, "/kiln/tune.tsv");
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return absl::StrCat(home, "/.cache/kiln/tune.tsv");
  return "";
}

absl::StatusOr<TuneResult> TuneGraph(Graph& graph, const TargetSpec& target, const TuneOptions& options) {
  TuneResult result;
  if (!options.enabled) return result;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::map<std::string, CacheEntry> cache;
  if (!options.cache_path.empty()) cache = ReadCache(options.cache_path);
  const size_t cached_before = cache.size();
  std::map<std::string, bool> measured_here;  // keys measured in this compile
  bool cache_changed = false;
  for (Node* node : graph.nodes()) {
    if (node->op() != "Conv") continue;
    const OpSchema* schema = FindOp(node->op());
    node->mutable_attrs().erase(kAlgorithmAttr);
    // Candidates: Winograd where it applies, and the implicit GEMM with jobs 64, 128 or
    // 256 output positions wide (only widths the output can fill).
    auto call = LowerForArtifact(*schema, *node);
    if (!call.ok()) continue;
    std::vector<std::string> candidates;
    if (call->kernel == "conv_winograd") candidates.push_back("winograd");
    if (call->kernel == "conv_winograd" ||
        (call->kernel == "conv" && call->inputs.size() > 1 && call->inputs[1].node_input == -1)) {
      const std::vector<int64_t> y = node->output(0)->type().StaticDims();
      int64_t positions = 1;
      for (size_t i = 2; i < y.size(); ++i) positions *= y[i];
      for (int64_t width : {64, 128, 256}) {
        if (width == 64 || positions > width / 2) candidates.push_back(absl::StrCat("gemm", width));
      }
    }
    if (candidates.size() < 2) continue;
    TuneDecision d;
    d.node = node->name();
    d.key = ShapeKey(*node, target);
    auto hit = cache.find(d.key);
    if (hit != cache.end()) {
      d.from_cache = measured_here.count(d.key) == 0;  // else: a shape repeated in this model
      d.choice = hit->second.choice;
      d.timings = hit->second.timings;
      if (d.from_cache) ++result.from_cache;
    } else if (elapsed() >= options.budget_seconds) {
      ++result.over_budget;
      continue;  // keeps the default lowering
    } else {
      double best = 0;
      std::vector<std::string> timings;
      for (const std::string& candidate : candidates) {
        auto ms = TimeCandidate(*node, candidate, target, options.iterations);
        if (!ms.ok()) return ms.status();
        timings.push_back(absl::StrCat(candidate, "=", absl::SixDigits(*ms)));
        if (d.choice.empty() || *ms < best) {
          d.choice = candidate;
          best = *ms;
        }
      }
      d.timings = absl::StrJoin(timings, ";");
      cache[d.key] = CacheEntry{d.choice, d.timings};
      measured_here[d.key] = true;
      cache_changed = true;
      ++result.measured;
    }
    node->mutable_attrs()[kAlgorithmAttr] = d.choice;
    result.decisions.push_back(d);
  }
  if (cache_changed && !options.cache_path.empty()) {
    if (absl::Status s = WriteCache(options.cache_path, cache); !s.ok()) return s;
  }
  result.seconds = elapsed();
  result.cache_entries = static_cast<int>(cached_before);
  return result;
}

}  // namespace kiln
