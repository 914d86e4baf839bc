// The accuracy-validation report: compares the artifact's outputs with the reference
// interpreter's, per output, and renders the versioned JSON (schema
// "kiln.accuracy-report", schema_version 1) that the service stores and returns.
//
// Metrics per output (e = got - ref over all elements):
//   max_abs_error, mean_abs_error; max_rel_error = max |e| / |ref| over elements with
//   |ref| > 1e-6 * scale (scale = max |ref|); cosine_similarity; snr_db =
//   10 log10(sum ref^2 / sum e^2), capped at 200 when e is all zero;
//   count_outside_tolerance = #{ |e| > atol + rtol |ref| } (NaN counts as outside);
//   for classifier-shaped outputs ([C] or [N, C], C >= 5): top1_agreement (fraction of
//   rows with the same arg-max) and top5_agreement (mean overlap of the top-5 sets / 5).
// The verdict passes when every output has the reference's shape and dtype and no
// element outside tolerance.
#pragma once

#include <string>
#include <vector>

#include "kiln/compiler/tensor.h"
#include "kiln/v1/kiln.pb.h"

namespace kiln::worker {

v1::OutputAccuracy CompareOutput(const std::string& name, const Tensor& got, const Tensor& reference, double atol,
                                 double rtol, bool* shape_ok);

struct ReportContext {
  std::string action_key, target, compiler_version;
  v1::Digest model;
  std::string input_source;
  std::vector<std::string> input_descriptions;  // "name: f32[1,3,224,224]"
  std::string compile_report_json;              // the compiler's own report (an object)
  double compile_ms = 0, validate_ms = 0;
  double latency_median_ms = 0, latency_p90_ms = 0;
  int latency_iters = 0;
};

std::string RenderReportJson(const v1::AccuracyReport& report, const ReportContext& context);

}  // namespace kiln::worker
