// The accuracy-validation report: see report.h.
#include "worker/report.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "kiln/compiler/compile.h"

namespace kiln::worker {
namespace {

std::vector<int64_t> TopK(const Tensor& t, int64_t row, int64_t classes, int k) {
  std::vector<int64_t> index(static_cast<size_t>(classes));
  std::iota(index.begin(), index.end(), 0);
  auto value = [&](int64_t c) {
    double v = t.GetAsDouble(row * classes + c);
    return std::isnan(v) ? -INFINITY : v;
  };
  std::partial_sort(index.begin(), index.begin() + k, index.end(),
                    [&](int64_t a, int64_t b) { return value(a) > value(b) || (value(a) == value(b) && a < b); });
  index.resize(static_cast<size_t>(k));
  return index;
}

std::string Number(double v) {
  if (std::isnan(v)) return "null";
  if (std::isinf(v)) return v > 0 ? "1e308" : "-1e308";
  std::ostringstream out;
  out.precision(6);
  out << v;
  return out.str();
}

}  // namespace

v1::OutputAccuracy CompareOutput(const std::string& name, const Tensor& got, const Tensor& reference, double atol,
                                 double rtol, bool* shape_ok) {
  v1::OutputAccuracy out;
  out.set_name(name);
  for (int64_t d : reference.dims()) out.add_shape(d);
  *shape_ok = got.dims() == reference.dims() && got.dtype() == reference.dtype();
  const int64_t n = reference.num_elements();
  out.set_num_elements(n);
  if (!*shape_ok) {
    out.set_count_outside_tolerance(n);
    out.set_max_abs_error(INFINITY);
    return out;
  }
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(reference.GetAsDouble(i)));
  double max_abs = 0, sum_abs = 0, max_rel = 0, dot = 0, norm_ref = 0, norm_got = 0, signal = 0, noise = 0;
  int64_t outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = reference.GetAsDouble(i), g = got.GetAsDouble(i);
    double e = std::fabs(g - r);
    if (std::isnan(e)) e = INFINITY;
    max_abs = std::max(max_abs, e);
    sum_abs += e;
    if (std::fabs(r) > 1e-6 * scale) max_rel = std::max(max_rel, e / std::fabs(r));
    if (!(e <= atol + rtol * std::fabs(r))) ++outside;
    dot += r * g;
    norm_ref += r * r;
    norm_got += g * g;
    signal += r * r;
    noise += (g - r) * (g - r);
  }
  out.set_reference_scale(scale);
  out.set_max_abs_error(max_abs);
  out.set_mean_abs_error(n > 0 ? sum_abs / static_cast<double>(n) : 0);
  out.set_max_rel_error(max_rel);
  out.set_cosine_similarity(norm_ref == 0 && norm_got == 0 ? 1.0 : dot / std::sqrt(norm_ref * norm_got));
  out.set_snr_db(noise == 0 ? 200.0 : signal == 0 ? -200.0 : std::min(200.0, 10 * std::log10(signal / noise)));
  out.set_count_outside_tolerance(outside);
  // Classifier-shaped: [C] or [N, C] with at least five classes.
  const auto& dims = reference.dims();
  const bool classifier = IsFloat(reference.dtype()) &&
                          ((dims.size() == 1 && dims[0] >= 5) || (dims.size() == 2 && dims[1] >= 5 && dims[0] >= 1));
  if (classifier) {
    const int64_t classes = dims.back(), rows = n / classes;
    double top1 = 0, top5 = 0;
    for (int64_t row = 0; row < rows; ++row) {
      auto want = TopK(reference, row, classes, 5), have = TopK(got, row, classes, 5);
      top1 += want[0] == have[0] ? 1 : 0;
      int overlap = 0;
      for (int64_t c : want) overlap += std::count(have.begin(), have.end(), c) ? 1 : 0;
      top5 += overlap / 5.0;
    }
    out.set_has_topk(true);
    out.set_top1_agreement(top1 / static_cast<double>(rows));
    out.set_top5_agreement(top5 / static_cast<double>(rows));
  }
  return out;
}

std::string RenderReportJson(const v1::AccuracyReport& report, const ReportContext& context) {
  std::ostringstream j;
  j << "{\n  \"schema\": \"kiln.accuracy-report\",\n  \"schema_version\": " << report.schema_version() << ",\n"
    << "  \"compiler_version\": \"" << JsonEscape(context.compiler_version) << "\",\n"
    << "  \"action_key\": \"" << context.action_key << "\",\n"
    << "  \"model\": {\"sha256\": \"" << context.model.sha256() << "\", \"size_bytes\": " << context.model.size_bytes()
    << "},\n"
    << "  \"target\": \"" << JsonEscape(context.target) << "\",\n"
    << "  \"verdict\": {\"passed\": " << (report.passed() ? "true" : "false") << ", \"reason\": \""
    << JsonEscape(report.verdict()) << "\", \"atol\": " << Number(report.atol())
    << ", \"rtol\": " << Number(report.rtol());
  const bool pruned = report.prune_channels() > 0 || report.prune_weights() > 0;
  if (report.precision() == "int8" || pruned) {
    j << ", \"top1_drop_points\": " << Number(report.top1_drop_points())
      << ", \"max_top1_drop\": " << Number(report.max_top1_drop());
  }
  j << "},\n  \"precision\": \"" << (report.precision().empty() ? "fp32" : report.precision()) << "\",\n";
  if (pruned) {
    j << "  \"pruning\": {\"channels\": " << Number(report.prune_channels())
      << ", \"weights\": " << Number(report.prune_weights()) << "},\n";
  }
  j << "  \"inputs\": {\"source\": \"" << JsonEscape(context.input_source) << "\", \"tensors\": [";
  for (size_t i = 0; i < context.input_descriptions.size(); ++i) {
    j << (i ? ", " : "") << "\"" << JsonEscape(context.input_descriptions[i]) << "\"";
  }
  j << "]},\n  \"outputs\": [";
  for (int i = 0; i < report.outputs_size(); ++i) {
    const auto& o = report.outputs(i);
    j << (i ? "," : "") << "\n    {\"name\": \"" << JsonEscape(o.name()) << "\", \"shape\": [";
    for (int d = 0; d < o.shape_size(); ++d) j << (d ? ", " : "") << o.shape(d);
    j << "], \"num_elements\": " << o.num_elements() << ", \"reference_scale\": " << Number(o.reference_scale())
      << ", \"max_abs_error\": " << Number(o.max_abs_error()) << ", \"mean_abs_error\": " << Number(o.mean_abs_error())
      << ", \"max_rel_error\": " << Number(o.max_rel_error())
      << ", \"cosine_similarity\": " << Number(o.cosine_similarity()) << ", \"snr_db\": " << Number(o.snr_db())
      << ", \"count_outside_tolerance\": " << o.count_outside_tolerance();
    if (o.has_topk()) {
      j << ", \"top1_agreement\": " << Number(o.top1_agreement())
        << ", \"top5_agreement\": " << Number(o.top5_agreement());
    }
    j << "}";
  }
  j << "\n  ],\n  \"artifact_size_bytes\": " << report.artifact_size_bytes() << ",\n  \"latency_ms\": ";
  if (context.latency_iters > 0) {
    j << "{\"median\": " << Number(context.latency_median_ms) << ", \"p90\": " << Number(context.latency_p90_ms)
      << ", \"iters\": " << context.latency_iters << ", \"threads\": 1}";
  } else {
    j << "null";
  }
  j << ",\n  \"timings_ms\": {\"compile\": " << Number(context.compile_ms)
    << ", \"validate\": " << Number(context.validate_ms)
    << "},\n  \"compile\": " << (context.compile_report_json.empty() ? "null" : context.compile_report_json) << "}\n";
  return j.str();
}

}  // namespace kiln::worker
