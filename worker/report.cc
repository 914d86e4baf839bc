// The accuracy-validation report: see report.h.
#include "worker/report.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/spec.h"
#include "kiln/compiler/version.h"

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

}  // namespace

v1::OutputAccuracy CompareOutput(const std::string& name, const Tensor& got, const Tensor& reference, double atol,
                                 double rtol, bool* shape_ok) {
  v1::OutputAccuracy out;
  out.set_name(name);
  for (int64_t d : reference.dims()) out.add_shape(static_cast<int32_t>(d));
  *shape_ok = got.dims() == reference.dims() && got.dtype() == reference.dtype();
  const int64_t n = reference.num_elements();
  out.set_num_elements(static_cast<double>(n));
  if (!*shape_ok) {
    out.set_count_outside_tolerance(static_cast<double>(n));
    out.set_max_abs_error(INFINITY);
    return out;
  }
  if (reference.dtype() == DType::kString) {  // texts match exactly or not at all
    int64_t outside = 0;
    for (int64_t i = 0; i < n; ++i) outside += got.GetString(i) != reference.GetString(i) ? 1 : 0;
    out.set_count_outside_tolerance(static_cast<double>(outside));
    out.set_max_abs_error(outside > 0 ? INFINITY : 0);
    out.set_cosine_similarity(outside > 0 ? 0.0 : 1.0);
    out.set_snr_db(outside > 0 ? -200.0 : 200.0);
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
  out.set_count_outside_tolerance(static_cast<double>(outside));
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

namespace {

// The fp32 verdict: shapes as the reference's and every element within atol + rtol |ref|.
std::string ToleranceFailure(const v1::AccuracyReport& report, const std::vector<bool>& shape_ok, size_t outputs,
                             size_t references) {
  if (outputs != references) return absl::StrCat("the artifact has ", outputs, " outputs, the reference ", references);
  for (int i = 0; i < report.outputs_size(); ++i) {
    const auto& o = report.outputs(i);
    if (!shape_ok[static_cast<size_t>(i)])
      return absl::StrCat("output '", o.name(), "' differs in shape or dtype from the reference");
    if (o.count_outside_tolerance() > 0) {
      return absl::StrCat("output '", o.name(), "': ", static_cast<int64_t>(o.count_outside_tolerance()), " of ",
                          static_cast<int64_t>(o.num_elements()), " elements outside atol ", report.atol(), " + rtol ",
                          report.rtol(), " x |reference| (max abs error ", o.max_abs_error(), ")");
    }
  }
  return "";
}

// The int8 / pruned verdict: the worst top-1 change over classifier outputs against the bar.
std::string TopOneFailure(const v1::CompileSpec& spec, v1::AccuracyReport& report, size_t outputs, size_t references) {
  const bool int8 = spec.quantization().precision() == "int8";
  const bool pruned = spec.pruning().channels() > 0 || spec.pruning().weights() > 0;
  double drop = 0;
  bool any_classifier = false;
  for (const auto& o : report.outputs()) {
    if (!o.has_topk()) continue;
    any_classifier = true;
    drop = std::max(drop, 100.0 * (1.0 - o.top1_agreement()));
  }
  report.set_top1_drop_points(drop);
  report.set_max_top1_drop(spec.accuracy().max_top1_drop());
  if (outputs != references) return absl::StrCat("the artifact has ", outputs, " outputs, the reference ", references);
  if (!any_classifier) {
    return "no classifier-shaped output ([C] or [N, C], C >= 5) to judge a lossy (int8 or pruned) build's top-1 "
           "agreement by";
  }
  if (drop > spec.accuracy().max_top1_drop()) {
    return absl::StrCat(int8 && pruned ? "int8, pruned"
                        : int8         ? "int8"
                                       : "pruned",
                        ": top-1 changed on ", drop, " % of the validation rows against the fp32 model (max_top1_drop ",
                        spec.accuracy().max_top1_drop(), ")");
  }
  return "";
}

// The bf16 verdict: a classifier-shaped output by the top-1 bar as for int8, any other by
// its max abs error against kBf16MaxRelativeError of its scale (max |reference|).
std::string Bf16Failure(const v1::CompileSpec& spec, v1::AccuracyReport& report, const std::vector<bool>& shapes_ok,
                        size_t outputs, size_t references) {
  if (outputs != references) return absl::StrCat("the artifact has ", outputs, " outputs, the reference ", references);
  double drop = 0;
  for (int i = 0; i < report.outputs_size(); ++i) {
    const v1::OutputAccuracy& o = report.outputs(i);
    if (!shapes_ok[i]) return absl::StrCat("output '", o.name(), "': shape or type differs from the reference");
    if (o.drawn_at_random()) continue;
    if (o.has_topk()) {
      drop = std::max(drop, 100.0 * (1.0 - o.top1_agreement()));
      continue;
    }
    const double relative = o.reference_scale() > 0 ? o.max_abs_error() / o.reference_scale() : o.max_abs_error();
    if (!(relative <= kBf16MaxRelativeError)) {
      return absl::StrCat("bf16: output '", o.name(), "': max abs error ", o.max_abs_error(), " is ", relative,
                          " of its scale (max |reference| ", o.reference_scale(), "); the bar is ",
                          kBf16MaxRelativeError);
    }
  }
  report.set_top1_drop_points(drop);
  report.set_max_top1_drop(spec.accuracy().max_top1_drop());
  if (drop > spec.accuracy().max_top1_drop()) {
    return absl::StrCat("bf16: top-1 changed on ", drop,
                        " % of the validation rows against the fp32 model (max_top1_drop ",
                        spec.accuracy().max_top1_drop(), ")");
  }
  return "";
}

}  // namespace

std::vector<bool> DrawnAtRandom(const Graph& graph) {
  std::set<const Value*> drawn;
  for (const Node* node : graph.nodes()) {
    const OpSchema* schema = FindOp(node->op());
    bool tainted = schema != nullptr && schema->random && node->attrs().count("seed") == 0;
    for (const Value* in : node->inputs()) tainted = tainted || (in != nullptr && drawn.count(in) > 0);
    if (tainted) drawn.insert(node->outputs().begin(), node->outputs().end());
  }
  std::vector<bool> result;
  for (const Value* out : graph.outputs()) result.push_back(drawn.count(out) > 0);
  return result;
}

v1::AccuracyReport Judge(const v1::CompileSpec& spec, const std::vector<std::string>& output_names,
                         const std::vector<Tensor>& outputs, const std::vector<Tensor>& reference,
                         const std::vector<bool>& drawn_at_random) {
  v1::AccuracyReport report;
  report.set_schema_version(2);
  report.set_atol(spec.accuracy().atol());
  report.set_rtol(spec.accuracy().rtol());
  report.set_input_source(spec.accuracy().has_input_set() ? "uploaded"
                                                          : absl::StrCat("random(seed=", spec.accuracy().seed(), ")"));
  report.set_precision(spec.quantization().precision());
  report.set_prune_channels(spec.pruning().channels());
  report.set_prune_weights(spec.pruning().weights());
  std::vector<bool> shapes_ok;
  for (size_t i = 0; i < outputs.size() && i < reference.size(); ++i) {
    bool shape_ok = true;
    if (i < drawn_at_random.size() && drawn_at_random[i]) {
      v1::OutputAccuracy* out = report.add_outputs();
      out->set_name(output_names[i]);
      for (int64_t d : reference[i].dims()) out->add_shape(static_cast<int32_t>(d));
      out->set_num_elements(static_cast<double>(reference[i].num_elements()));
      out->set_drawn_at_random(true);
      shapes_ok.push_back(outputs[i].dims() == reference[i].dims() && outputs[i].dtype() == reference[i].dtype());
      continue;
    }
    *report.add_outputs() =
        CompareOutput(output_names[i], outputs[i], reference[i], report.atol(), report.rtol(), &shape_ok);
    shapes_ok.push_back(shape_ok);
  }
  const bool bf16_only =
      spec.quantization().precision() == "bf16" && spec.pruning().channels() == 0 && spec.pruning().weights() == 0;
  const std::string failure = bf16_only       ? Bf16Failure(spec, report, shapes_ok, outputs.size(), reference.size())
                              : IsLossy(spec) ? TopOneFailure(spec, report, outputs.size(), reference.size())
                                              : ToleranceFailure(report, shapes_ok, outputs.size(), reference.size());
  report.set_passed(failure.empty());
  report.set_verdict(failure.empty() ? "pass" : failure);
  return report;
}

v1::JobReport JobReportFor(const std::string& action_key, const v1::CompileSpec& spec, const v1::AccuracyReport& report,
                           const v1::CompileReport& compile, const ReportContext& context) {
  v1::JobReport out;
  out.set_schema("kiln.accuracy-report");
  out.set_schema_version(2);
  out.set_compiler_version(CompilerVersion());
  out.set_action_key(action_key);
  *out.mutable_model() = spec.model();
  *out.mutable_target() = spec.target();
  auto* verdict = out.mutable_verdict();
  verdict->set_passed(report.passed());
  verdict->set_reason(report.verdict());
  verdict->set_atol(report.atol());
  verdict->set_rtol(report.rtol());
  verdict->set_top1_drop_points(report.top1_drop_points());
  verdict->set_max_top1_drop(report.max_top1_drop());
  out.set_precision(report.precision());
  if (report.prune_channels() > 0 || report.prune_weights() > 0) {
    out.mutable_pruning()->set_channels(report.prune_channels());
    out.mutable_pruning()->set_weights(report.prune_weights());
  }
  out.mutable_inputs()->set_source(report.input_source());
  for (const std::string& d : context.input_descriptions) out.mutable_inputs()->add_tensors(d);
  *out.mutable_outputs() = report.outputs();
  out.set_artifact_size_bytes(report.artifact_size_bytes());
  if (context.latency.iters > 0) {
    auto* latency = out.mutable_latency_ms();
    latency->set_median(context.latency.median_ms);
    latency->set_p90(context.latency.p90_ms);
    latency->set_iters(context.latency.iters);
    latency->set_threads(1);
  }
  out.mutable_timings_ms()->set_compile(context.compile_ms);
  out.mutable_timings_ms()->set_validate(context.validate_ms);
  *out.mutable_compile() = compile;
  return out;
}

}  // namespace kiln::worker
