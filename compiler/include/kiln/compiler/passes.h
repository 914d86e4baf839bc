// Graph passes and the pass manager. Each pass lives in its own file under
// compiler/passes/, registers itself by name, and reports whether it changed the graph.
// Pipelines are text: "fold-constants,cse,dce,simplify,fold-batchnorm,fuse,plan-memory".
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
#include "kiln/compiler/ir.h"

namespace kiln {

// Where each non-constant value lives at run time.
struct MemoryPlan {
  struct Slot {
    int64_t offset = 0;  // in the workspace arena
    int64_t size_bytes = 0;
  };
  std::map<const Value*, Slot> arena;          // intermediates
  std::map<const Value*, const Value*> alias;  // views and in-place results: value -> owner
  // Concat inputs written straight into their slice of the Concat's result, which then
  // copies nothing: value -> (the Concat's result, byte offset in it).
  struct Part {
    const Value* whole = nullptr;
    int64_t offset_bytes = 0;
  };
  std::map<const Value*, Part> parts;
  std::map<const Node*, Slot> scratch;  // kernel workspace (KernelCall::scratch_bytes)
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;       // sum of all intermediates, no reuse
  int64_t in_place = 0;          // results written over a dying input
  int64_t views = 0;             // results that share their input's buffer
  int64_t concats_in_place = 0;  // Concats whose inputs were written in place (no copy)
};

// Post-training quantization (the quantize pass): how activation ranges are calibrated.
enum class CalibrationMethod { kMinMax, kPercentile, kEntropy };

struct QuantizationConfig {
  CalibrationMethod method = CalibrationMethod::kMinMax;
  double percentile = 99.99;  // kPercentile: the share of values the range keeps
  // Calibration samples, each one tensor per graph input in graph-input order.
  std::vector<std::vector<Tensor>> calibration;
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
  double channel_ratio = 0;    // --prune-channels: share of each layer's output channels
  double weight_ratio = 0;     // --prune-weights: share of each weight tensor set to 0
  std::set<std::string> skip;  // node names left whole (--prune-skip)
  // Inputs (one tensor per graph input) for the per-layer error breakdown; none: no
  // breakdown. The service passes its validation inputs, the CLI its --calibration samples.
  std::vector<std::vector<Tensor>> samples;
};

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
  // Conv/Gemm/MatMul outputs that kept their shape, pruned graph against the unpruned one
  // on samples[0] in the interpreter, worst SNR first, at most 10.
  std::vector<QuantizationSummary::LayerError> layers_by_error;
};

struct PassContext {
  MemoryPlan memory_plan;
  bool has_memory_plan = false;
  const QuantizationConfig* quantization = nullptr;  // input to the quantize pass
  QuantizationSummary quantization_summary;          // its output
  const PruningConfig* pruning = nullptr;            // input to the prune pass
  PruningSummary pruning_summary;                    // its output
};

class Pass {
 public:
  virtual ~Pass() = default;
  // Returns whether the graph changed.
  virtual absl::StatusOr<bool> Run(Graph& graph, PassContext& context) = 0;
};

struct PassInfo {
  std::string name;
  std::string summary;
  std::function<std::unique_ptr<Pass>()> create;
};

// Called by each pass file through KILN_REGISTER_PASS.
bool RegisterPass(PassInfo info);
std::vector<PassInfo> RegisteredPasses();

#define KILN_REGISTER_PASS(CLASS, NAME, SUMMARY)                                                        \
  static const bool kiln_registered_##CLASS =                                                           \
      ::kiln::RegisterPass({NAME, SUMMARY, [] { return std::unique_ptr<::kiln::Pass>(new CLASS()); }}); \
  void kiln_link_pass_##CLASS() { (void)kiln_registered_##CLASS; }

constexpr const char kDefaultPipeline[] =
    "fold-qdq,fold-constants,simplify,cse,dce,fold-batchnorm,fuse,dce,layout,plan-memory";
// --precision int8: quantize (calibrated QDQ) after BatchNorm folding, then fold-qdq turns
// the QDQ pairs into integer ops.
constexpr const char kInt8Pipeline[] =
    "fold-constants,simplify,cse,dce,fold-batchnorm,quantize,fold-qdq,fold-constants,dce,fuse,dce,layout,plan-memory";

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

// Runs each named pass in order, verifying the graph after each one.
absl::StatusOr<std::vector<PassStats>> RunPipeline(Graph& graph, const std::string& pipeline,
                                                   const PipelineOptions& options, PassContext& context);

// Plans buffers without reuse: every intermediate gets its own slot. Codegen uses it when
// the pipeline has no plan-memory pass.
MemoryPlan NaiveMemoryPlan(const Graph& graph);

}  // namespace kiln
