// The compiler's front door: ONNX bytes in, artifact + manifest + compile report out.
// Used by the `kiln` CLI and by the service's workers.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/tune.h"
#include "kiln/compiler/version.h"

namespace kiln {

struct CompileOptions {
  std::string target = "host";
  std::map<std::string, std::vector<int64_t>> input_shapes;
  std::string pipeline = kDefaultPipeline;
  std::string model_label = "model";
  std::function<absl::StatusOr<std::string>(const std::string&)> external_data;
  PipelineOptions print;  // --print-after-all / --print-after
  // Progress callback: phase name ("import", "passes", "tune", "codegen") as each starts.
  std::function<void(const std::string& phase)> on_phase;
  TuneOptions tune;  // --tune: time algorithm candidates on this machine (target host only)
  // "fp32" (default) or "int8": post-training quantization calibrated on
  // quantization.calibration (kInt8Pipeline when `pipeline` is the default).
  std::string precision = "fp32";
  QuantizationConfig quantization;
  // --prune-channels / --prune-weights: the prune pass runs after fold-batchnorm (inserted
  // there when the pipeline lacks it).
  PruningConfig pruning;
};

struct CompileResult {
  std::string shared_object;
  std::string manifest_json;
  std::string report_json;  // compile statistics (passes, memory plan, sizes, timings)
  TargetSpec target;
  std::vector<PassStats> passes;
  MemoryPlan memory_plan;
  std::unique_ptr<Graph> graph;  // the optimised graph
  double import_ms = 0, passes_ms = 0, codegen_ms = 0;
  TuneResult tuning;
  QuantizationSummary quantization;  // precision int8
  PruningSummary pruning;            // when pruning was asked for
};

absl::StatusOr<CompileResult> CompileModel(std::string_view model_bytes, const CompileOptions& options);

// Calibration samples from a directory: one subdirectory per sample (sorted by name) with
// input_<i>.pb for each graph input i, as ONNX test data sets are laid out; or, for a model
// with one input, one TensorProto file (*.pb) per sample.
absl::StatusOr<std::vector<std::vector<Tensor>>> ReadCalibrationSamples(const std::string& dir);

// Calibration samples must hold one tensor per graph input, of its type and shape; the
// error names the sample, the input and both types.
absl::Status CheckCalibrationSamples(const Graph& graph, const std::vector<std::vector<Tensor>>& samples);

// The passes `kiln quantize` runs before writing its QDQ model: kInt8Pipeline up to quantize.
constexpr const char kQuantizeOnlyPipeline[] = "fold-constants,simplify,cse,dce,fold-batchnorm,quantize,dce";

// The pipeline with "prune" after "fold-batchnorm" (unchanged when it has prune already).
absl::StatusOr<std::string> PipelineWithPrune(const std::string& pipeline);

// Parses "name=1x3x224x224" into the input_shapes map.
absl::Status ParseInputShape(const std::string& text, std::map<std::string, std::vector<int64_t>>& shapes);

std::string JsonEscape(const std::string& text);

}  // namespace kiln
