// Graph passes and the pass manager. Each pass lives in its own file under
// compiler/passes/, is listed with its options in compiler/passes/passes.def, and reports
// whether it changed the graph. Pipelines are text (see pipeline.h):
// "fold-constants,cse,dce,simplify,fold-batchnorm,prune{channels=0.3},fuse,plan-memory".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/analyses.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/pipeline.h"

namespace kiln {

// Post-training quantization (the quantize pass): how activation ranges are calibrated.
enum class CalibrationMethod { kMinMax, kPercentile, kEntropy };

struct QuantizationConfig {
  CalibrationMethod method = CalibrationMethod::kMinMax;
  double percentile = 99.99;         // kPercentile: the share of values the range keeps
  std::set<std::string> keep_float;  // node names the user keeps in f32
  // Also quantize each Conv/MatMul's result (after a Relu that alone reads it): the QDQ
  // form ONNX Runtime fuses into its integer ops (`kiln quantize --emit-qdq`). Kiln's own
  // pipeline leaves it off, so results read by f32 ops are not rounded.
  bool quantize_outputs = false;
};

// What the quantize pass did, for the compile report.
struct QuantizationSummary {
  int64_t quantized_nodes = 0;
  int64_t calibration_samples = 0;
  std::string method;
  std::vector<std::string> kept_float;  // "node (why)"
  // Where accuracy went: each quantized node's output on the first calibration sample, the
  // quantized graph (QDQ, as the integer kernels compute it up to rounding) against f32,
  // worst SNR first, at most 10.
  struct LayerError {
    std::string node, op;
    double snr_db = 0, max_abs_error = 0, reference_scale = 0;
  };
  std::vector<LayerError> layers_by_error;
};

// "minmax", "percentile", "entropy".
absl::StatusOr<CalibrationMethod> ParseCalibrationMethod(const std::string& text);
const char* CalibrationMethodName(CalibrationMethod method);

// Pruning (the prune pass): what to remove.
struct PruningConfig {
  double channel_ratio = 0;  // --prune-channels: share of each layer's output channels
  double weight_ratio = 0;   // --prune-weights: share of each weight tensor set to 0
  // --prune-weights zeroes 1x16 blocks of MatMul/Gemm weights (output columns n..n+15 of
  // one input row k, the lowest L1 norms; the sparse kernel's unit) unless false: elements.
  bool weight_blocks = true;
  std::set<std::string> skip;  // node names left whole (--prune-skip)
};

// The quantize and prune passes' options (passes.def) as their configs, and back: the
// driver and `kiln quantize` set a pipeline's options from a CompileSpec or flags.
QuantizationConfig QuantizationConfigFrom(const PassInvocation& options);
absl::Status SetQuantizationOptions(const QuantizationConfig& config, PassInvocation& options);
PruningConfig PruningConfigFrom(const PassInvocation& options);
absl::Status SetPruningOptions(const PruningConfig& config, PassInvocation& options);

// Parameters (elements of the f32 constants the graph reads) and multiply-add flops (2 per
// MAC) of Conv, Gemm and MatMul, from the static shapes.
struct GraphCost {
  int64_t parameters = 0;
  int64_t nonzero_parameters = 0;
  int64_t weights = 0;       // elements of Conv/Gemm/MatMul weights
  int64_t zero_weights = 0;  // of which 0
  double flops = 0;
};
GraphCost MeasureGraphCost(const Graph& graph);

// What the prune pass did, for the compile report.
struct PruningSummary {
  double channel_ratio = 0, weight_ratio = 0;
  GraphCost before, after;  // around the pass (BatchNorm already folded)
  int64_t pruned_layers = 0;
  int64_t channels_before = 0, channels_removed = 0, channels_after = 0;  // over prunable layers
  std::vector<std::string> kept_whole;                                    // "node (why)"
  // Weight pruning: MatMul/Gemm weights whose nonzero 1x16 blocks are few enough for the
  // block-sparse kernel (kSparseMaxBlockDensity, kiln/compiler/sparse.h), of those that
  // could be, and the nonzero share of their blocks, all together.
  int64_t sparse_layers = 0, blockable_layers = 0;
  double block_density = 1;
  // Conv/Gemm/MatMul outputs that kept their shape, pruned graph against the unpruned one
  // on samples[0] in the interpreter, worst SNR first, at most 10.
  std::vector<QuantizationSummary::LayerError> layers_by_error;
};

// What a pipeline run shares between its passes. Options are not here: each pass gets its
// own from its PassInvocation.
struct PassContext {
  // Data from the driver, one tensor per graph input per sample.
  std::vector<std::vector<Tensor>> calibration_samples;  // quantize: activation ranges
  std::vector<std::vector<Tensor>> pruning_samples;      // prune: the per-layer error breakdown
  // What the passes report, for the compile report.
  QuantizationSummary quantization_summary;
  PruningSummary pruning_summary;
  int64_t bf16_nodes = 0;  // bf16: the products it marked
  // Use lists and the memory plan, computed on demand and cached; the pass manager drops
  // them whenever a pass reports a change.
  AnalysisManager analyses;
};

class Pass {
 public:
  virtual ~Pass() = default;
  // Returns whether the graph changed.
  virtual absl::StatusOr<bool> Run(Graph& graph, PassContext& context) = 0;
};

// A new instance of the pass `options` names, configured by them.
std::unique_ptr<Pass> CreatePass(const PassInvocation& options);

struct PassStats {
  std::string name;
  bool changed = false;
  double time_ms = 0;
  size_t nodes_before = 0;
  size_t nodes_after = 0;
};

struct PipelineOptions {
  bool print_after_all = false;
  std::set<std::string> print_after;
  std::ostream* print_stream = nullptr;
};

// Runs each pass in order, verifying the graph after each one.
absl::StatusOr<std::vector<PassStats>> RunPipeline(Graph& graph, const Pipeline& pipeline,
                                                   const PipelineOptions& options, PassContext& context);
// The same for pipeline text (parse errors name the pass, option and position).
absl::StatusOr<std::vector<PassStats>> RunPipeline(Graph& graph, absl::string_view pipeline,
                                                   const PipelineOptions& options, PassContext& context);

// The memory plan codegen should use: the pipeline's (plan-memory), else one without reuse.
MemoryPlan PlannedOrNaiveMemory(const Graph& graph, const PassContext& context);

}  // namespace kiln
