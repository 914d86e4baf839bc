// The compiler's front door: a CompileSpec (proto/kiln/v1/spec.proto) and the data it
// names in, artifact + Manifest + CompileReport out. Used by the `kiln` CLI and by the
// service's workers alike, so the same spec gives the same artifact, byte for byte.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/codegen.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/spec.h"
#include "kiln/compiler/tune.h"
#include "kiln/compiler/version.h"
#include "kiln/v1/report.pb.h"
#include "kiln/v1/spec.pb.h"

namespace kiln {

// What a compile needs besides its spec: the bytes the spec's digests name, and settings
// of the caller's that never change what is produced.
struct CompileInputs {
  std::string_view model_bytes;  // the bytes spec.model names
  // Where model_bytes are this file's mapping: its pages are given back once the model is
  // parsed (a large model's bytes are otherwise resident through the rest of the compile).
  const MappedFile* model_file = nullptr;
  std::string model_label = "model";  // in error messages: a path, or "model 1a2b3c..."
  std::function<absl::StatusOr<std::string>(const std::string&)> external_data;
  // InputSet blobs, decoded against the imported graph (InputSetTensors). With precision
  // int8: the ones spec.quantization.calibration names, in order. Otherwise, with pruning,
  // the first one feeds pruning's per-layer breakdown (`kiln compile --calibration`).
  std::vector<std::string> calibration;
  // Inputs for pruning's per-layer breakdown (report only), before `calibration`'s first.
  std::vector<std::vector<Tensor>> pruning_samples;
  PipelineOptions print;  // --print-after-all / --print-after
  // Progress: each phase's name ("import", "passes", "tune", "codegen") as it starts.
  std::function<void(const std::string& phase)> on_phase;
  std::string tune_cache_path;
  // Where to write the artifact; empty: CompileResult::shared_object holds its bytes.
  std::string output_path;  // tuning's cache file ("" none): only what is measured, not what is chosen
};

struct CompileResult {
  std::string shared_object;  // empty when written to CompileInputs::output_path
  int64_t artifact_bytes = 0;
  std::string action_key;
  v1::Manifest manifest;     // also embedded in the artifact (kiln inspect)
  v1::CompileReport report;  // statistics: passes, memory plan, sizes, timings
  TargetSpec target;
  std::vector<PassStats> passes;
  MemoryPlan memory_plan;
  double import_ms = 0, passes_ms = 0, codegen_ms = 0;
  TuneResult tuning;
  QuantizationSummary quantization;  // precision int8
  PruningSummary pruning;            // when pruning was asked for
  int64_t bf16_nodes = 0;            // precision bf16: products the bf16 pass marked
};

// Normalizes a copy of `spec` first (a normalised one is unchanged), so the action key in
// the manifest and report is the one kilnd computes for the same spec.
absl::StatusOr<CompileResult> CompileModel(const v1::CompileSpec& spec, const CompileInputs& inputs);

// A graph input set from an InputSet blob: tensors matched to graph inputs by name (the
// entry's, else the TensorProto's), else by position; dtypes and static dims must agree.
absl::StatusOr<std::vector<Tensor>> InputSetTensors(const Graph& graph, std::string_view input_set_bytes);

// Calibration samples must hold one tensor per graph input, of its type and shape; the
// error names the sample, the input and both types.
absl::Status CheckCalibrationSamples(const Graph& graph, const std::vector<std::vector<Tensor>>& samples);

// The passes `kiln quantize` runs before writing its QDQ model: kInt8Pipeline up to quantize.
constexpr const char kQuantizeOnlyPipeline[] = "fold-constants,simplify,cse,dce,fold-batchnorm,quantize,dce";

// The pipeline that runs for a spec: its own, else the default for its precision, with the
// spec's quantization and pruning as quantize's and prune's options; with pruning and no
// prune in the pipeline, prune{...} after fold-batchnorm.
absl::StatusOr<Pipeline> PipelineFor(const v1::CompileSpec& spec);

}  // namespace kiln
