// The accuracy-validation report: compares the artifact's outputs with the reference
// interpreter's, per output, judges the build, and assembles the report the service
// stores (v1::JobReport, printed as JSON: schema "kiln.accuracy-report", schema_version 2).
//
// Metrics per output (e = got - ref over all elements):
//   max_abs_error, mean_abs_error; max_rel_error = max |e| / |ref| over elements with
//   |ref| > 1e-6 * scale (scale = max |ref|); cosine_similarity; snr_db =
//   10 log10(sum ref^2 / sum e^2), capped at 200 when e is all zero;
//   count_outside_tolerance = #{ |e| > atol + rtol |ref| } (NaN counts as outside);
//   for classifier-shaped outputs ([C] or [N, C], C >= 5): top1_agreement (fraction of
//   rows with the same arg-max) and top5_agreement (mean overlap of the top-5 sets / 5).
// An fp32 build passes when every output has the reference's shape and dtype and no
// element outside tolerance; an int8 or pruned one when no more than max_top1_drop
// percentage points of classifier rows change their top-1 class.
#pragma once

#include <string>
#include <vector>

#include "kiln/compiler/ir.h"
#include "kiln/compiler/tensor.h"
#include "kiln/v1/report.pb.h"
#include "kiln/v1/spec.pb.h"

namespace kiln::worker {

v1::OutputAccuracy CompareOutput(const std::string& name, const Tensor& got, const Tensor& reference, double atol,
                                 double rtol, bool* shape_ok);

// Every output compared, and the verdict by the spec's accuracy section; an output marked in
// `drawn_at_random` (by DrawnAtRandom) is held to the reference's shape and dtype only.
v1::AccuracyReport Judge(const v1::CompileSpec& spec, const std::vector<std::string>& output_names,
                         const std::vector<Tensor>& outputs, const std::vector<Tensor>& reference,
                         const std::vector<bool>& drawn_at_random = {});

// Per graph output: whether its values depend on a random op without a seed.
std::vector<bool> DrawnAtRandom(const Graph& graph);

struct Latency {
  double median_ms = 0, p90_ms = 0;
  int iters = 0;  // 0: not measured
};

struct ReportContext {
  std::vector<std::string> input_descriptions;  // "name: f32[1,3,224,224]"
  double compile_ms = 0, validate_ms = 0;
  Latency latency;
};

v1::JobReport JobReportFor(const std::string& action_key, const v1::CompileSpec& spec, const v1::AccuracyReport& report,
                           const v1::CompileReport& compile, const ReportContext& context);

}  // namespace kiln::worker
