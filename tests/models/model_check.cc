// kiln-model-check: compiles a real model, runs the artifact, and compares every output
// against the reference evaluator (compiler/reference) running the imported (unoptimised) graph, and when
// given, against outputs recorded from the exporting framework.
//
//   kiln-model-check MODEL.onnx --input FILE.pb [--input ...] [--expected FILE.pb ...]
//                    [--tolerance 1e-4] [--expected-tolerance 1e-3] [--expected-min-cosine C]
//                    [--threads N] [--pipeline P] [--ranked-by I]
//   (kiln-model-check --help describes each flag.)
// --ranked-by I names a detector's 1-D score output, sorted best first (Faster R-CNN's,
// SSD's): where two of its scores lie within the tolerance of each other their order is
// not determined by the model within that tolerance (Faster R-CNN's detections 98 and 99
// are 7.8e-7 apart, 1.1e-5 of the score: any other summation order in a conv may swap
// them), so within each such run of near-equal scores the compiled rows of every output
// that shares the score's first dimension (boxes, labels) are matched to the other side's
// rows before comparing, each to the closest; everything else is compared in place.
// Tolerances are relative to the output's scale (max |reference|): an output passes when
// max |compiled - reference| <= tolerance * scale. One JSON line per output; exit status 1
// when any output fails or any reference output is degenerate (scale < 1e-3).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "kiln/common/cli.h"
#include "kiln/common/file.h"
#include "kiln/common/json.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/reference.h"
#include "kiln/compiler/runtime_tensor.h"
#include "kiln/runtime.h"

namespace kiln {
namespace {

struct Args {
  std::string model;
  std::vector<std::string> inputs, expected, ort_expected;
  double tolerance = 1e-4, expected_tolerance = 1e-3;
  double expected_min_cosine = -1;  // -1: not checked
  int threads = 2;
  std::string pipeline;  // empty: the compiler's default
  int ranked_by = -1;    // the index of a sorted 1-D score output (-1: none)
};

struct Diff {
  double max_abs = 0, scale = 0;
  double cosine = 0;  // of the two outputs as vectors (1 when both are zero)
  bool shape_ok = true;
};

Diff Compare(const Tensor& got, const Tensor& want) {
  Diff d;
  if (got.dims() != want.dims() || got.dtype() != want.dtype()) {
    d.shape_ok = false;
    return d;
  }
  double dot = 0, got_norm = 0, want_norm = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double w = want.GetAsDouble(i), g = got.GetAsDouble(i);
    dot += g * w;
    got_norm += g * g;
    want_norm += w * w;
    d.scale = std::max(d.scale, std::fabs(w));
    double e = std::fabs(g - w);
    if (std::isnan(e)) e = INFINITY;
    d.max_abs = std::max(d.max_abs, e);
  }
  d.cosine = got_norm == 0 && want_norm == 0 ? 1.0 : dot / std::sqrt(got_norm * want_norm);
  if (std::isnan(d.cosine)) d.cosine = -1;
  return d;
}

// The largest |a[i, ..] - b[j, ..]| of rows i of `a` and j of `b` (same dims), over
// max(1, scale): rows of different outputs (boxes in pixels, labels) on one footing.
double RowDistance(const Tensor& a, int64_t i, const Tensor& b, int64_t j, double scale) {
  const int64_t width = a.dims()[0] > 0 ? a.num_elements() / a.dims()[0] : 0;
  double worst = 0;
  for (int64_t q = 0; q < width; ++q) {
    worst = std::max(worst, std::fabs(a.GetAsDouble(i * width + q) - b.GetAsDouble(j * width + q)));
  }
  return worst / std::max(1.0, scale);
}

// `got` with rows reordered inside runs of near-equal scores (--ranked-by): in each run of
// `want[score]` whose neighbours differ by at most `eps`, each of want's rows in turn takes
// the closest of got's rows not yet taken (over every output whose first dimension is the
// score's). `moved` counts the rows that changed place.
std::vector<Tensor> AlignTiedRows(const std::vector<Tensor>& got, const std::vector<Tensor>& want, int score,
                                  double eps, int64_t& moved) {
  std::vector<Tensor> aligned = got;
  moved = 0;
  if (score < 0 || static_cast<size_t>(score) >= got.size() || static_cast<size_t>(score) >= want.size()) {
    return aligned;
  }
  const Tensor& ranking = want[static_cast<size_t>(score)];
  if (ranking.rank() != 1 || got[static_cast<size_t>(score)].dims() != ranking.dims()) return aligned;
  const int64_t n = ranking.dims()[0];
  std::vector<size_t> rowed;  // the outputs whose rows follow the ranking
  std::vector<double> scales;
  for (size_t j = 0; j < got.size() && j < want.size(); ++j) {
    if (!want[j].is_tensor() || want[j].rank() < 1 || want[j].dims() != got[j].dims() || want[j].dims()[0] != n ||
        want[j].dtype() == DType::kString) {
      continue;
    }
    double scale = 0;
    for (int64_t e = 0; e < want[j].num_elements(); ++e) scale = std::max(scale, std::fabs(want[j].GetAsDouble(e)));
    rowed.push_back(j);
    scales.push_back(scale);
  }
  for (int64_t a = 0; a < n;) {
    int64_t b = a + 1;
    while (b < n && std::fabs(ranking.GetAsDouble(b) - ranking.GetAsDouble(b - 1)) <= eps) ++b;
    std::vector<bool> taken(static_cast<size_t>(b - a), false);
    for (int64_t r = a; b - a > 1 && r < b; ++r) {
      int64_t best = -1;
      double best_distance = INFINITY;
      for (int64_t c = a; c < b; ++c) {
        if (taken[static_cast<size_t>(c - a)]) continue;
        double distance = 0;
        for (size_t k = 0; k < rowed.size(); ++k) {
          distance = std::max(distance, RowDistance(got[rowed[k]], c, want[rowed[k]], r, scales[k]));
        }
        if (best < 0 || distance < best_distance) best = c, best_distance = distance;
      }
      taken[static_cast<size_t>(best - a)] = true;
      if (best == r) continue;
      ++moved;
      for (size_t j : rowed) {
        const int64_t bytes = got[j].size_bytes() / n;
        std::memcpy(static_cast<char*>(aligned[j].data()) + r * bytes,
                    static_cast<const char*>(got[j].data()) + best * bytes, static_cast<size_t>(bytes));
      }
    }
    a = b;
  }
  return aligned;
}

// The tolerance window of --ranked-by's scores in `want`: `relative` x their scale, and
// at least `relative` when `at_least_one` (the framework's bound, max(1, scale)).
double TieWindow(const std::vector<Tensor>& want, int score, double relative, bool at_least_one) {
  if (score < 0 || static_cast<size_t>(score) >= want.size()) return 0;
  double scale = 0;
  const Tensor& s = want[static_cast<size_t>(score)];
  for (int64_t e = 0; e < s.num_elements(); ++e) scale = std::max(scale, std::fabs(s.GetAsDouble(e)));
  return relative * (at_least_one ? std::max(1.0, scale) : scale);
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "kiln-model-check: %s\n", what.c_str());
  std::exit(1);
}

// TensorProto files, in order; exits with the file's name on the first bad one.
std::vector<Tensor> ReadTensors(const std::vector<std::string>& paths) {
  std::vector<Tensor> tensors;
  for (const auto& path : paths) {
    auto data = ReadFile(path);
    if (!data.ok()) Fail(std::string(data.status().message()));
    auto t = ParseTensorProto(*data);
    if (!t.ok()) Fail(path + ": " + std::string(t.status().message()));
    tensors.push_back(std::move(*t));
  }
  return tensors;
}

// Compiles the model with the compiler's own entry point and runs the artifact once on
// `inputs`: its outputs, and their names in `output_names`.
std::vector<Tensor> CompileAndRun(const Args& args, const std::string& bytes, const std::vector<Tensor>& inputs,
                                  std::vector<std::string>& output_names) {
  v1::CompileSpec spec;
  *spec.mutable_model() = DigestOf(bytes);
  spec.set_pipeline(args.pipeline);
  char path[] = "/tmp/kiln-model-check-XXXXXX.so";
  int fd = mkstemps(path, 3);
  if (fd < 0) Fail("cannot create a temporary file");
  close(fd);
  CompileInputs compile_inputs;
  compile_inputs.model_bytes = bytes;
  compile_inputs.model_label = args.model;
  compile_inputs.output_path = path;  // the linker writes the artifact there
  auto compiled = CompileModel(spec, compile_inputs);
  if (!compiled.ok()) {
    unlink(path);
    Fail("compile: " + std::string(compiled.status().message()));
  }

  kiln_module* module = nullptr;
  kiln_session* session = nullptr;
  if (kiln_module_load(path, &module) != KILN_OK) Fail(kiln_last_error());
  unlink(path);
  kiln_session_options session_options{sizeof(kiln_session_options), args.threads};
  if (kiln_session_create(module, &session_options, &session) != KILN_OK) Fail(kiln_last_error());
  const kiln_module_desc* desc = nullptr;
  if (kiln_module_describe(module, &desc) != KILN_OK) Fail(kiln_last_error());
  // The shaped API runs every artifact, with shapes known only at run time or not.
  std::vector<kiln_tensor> in, out(static_cast<size_t>(desc->num_outputs));
  for (const Tensor& t : inputs) in.push_back(RuntimeView(t));
  if (kiln_session_run_shaped(session, in.data(), out.data()) != KILN_OK) Fail(kiln_last_error());
  std::vector<Tensor> outputs;
  for (int i = 0; i < desc->num_outputs; ++i) {
    output_names.push_back(desc->outputs[i].name);
    outputs.push_back(FromRuntime(out[static_cast<size_t>(i)]));
  }
  kiln_session_destroy(session);
  kiln_module_unload(module);

  return outputs;
}

int Main(int argc, char** argv) {
  CLI::App app(
      "kiln-model-check: compile a real model, run the artifact and compare every output with the reference "
      "evaluator and, when given, with the exporting framework's outputs. One JSON line per output; exit "
      "status 1 when any output fails or is degenerate (scale < 1e-3).",
      "kiln-model-check");
  Args args;
  app.add_option("model", args.model, "MODEL.onnx")->required();
  app.add_option("--input", args.inputs, "an input TensorProto, in graph-input order (repeatable)");
  app.add_option("--expected", args.expected, "the framework's output TensorProto, in output order (repeatable)");
  app.add_option("--ort-expected", args.ort_expected,
                 "ONNX Runtime's output TensorProto (bench/ort_run.js), in output order (repeatable); held to the "
                 "framework's tolerance and cosine");
  app.add_option("--tolerance", args.tolerance, "max |compiled - reference| / output scale")->capture_default_str();
  app.add_option("--expected-tolerance", args.expected_tolerance, "the same against the framework's outputs")
      ->capture_default_str();
  app.add_option("--expected-min-cosine", args.expected_min_cosine,
                 "the least cosine similarity with the framework's outputs (-1: not checked)")
      ->capture_default_str();
  app.add_option("--threads", args.threads, "artifact threads")->capture_default_str();
  app.add_option("--pipeline", args.pipeline, "pass pipeline (default: the compiler's)");
  app.add_option("--ranked-by", args.ranked_by,
                 "the index of a 1-D score output sorted best first (a detector's): rows of the outputs sharing its "
                 "first dimension may trade places where the scores are within the tolerance of each other");
  if (auto exit = ParseCommandLine(app, argc, argv)) return *exit;
  auto bytes = ReadFile(args.model);
  if (!bytes.ok()) Fail(std::string(bytes.status().message()));

  const std::vector<Tensor> inputs = ReadTensors(args.inputs);
  const std::vector<Tensor> expected = ReadTensors(args.expected);
  const std::vector<Tensor> ort_expected = ReadTensors(args.ort_expected);

  // The reference: the imported graph, no passes, run by the independent reference evaluator.
  ImportOptions import_options;
  import_options.model_label = args.model;
  auto reference_graph = ImportOnnxModel(*bytes, import_options);
  if (!reference_graph.ok()) Fail(std::string(reference_graph.status().message()));
  if (inputs.size() != (*reference_graph)->inputs().size()) {
    Fail("the model has " + std::to_string((*reference_graph)->inputs().size()) + " inputs but " +
         std::to_string(inputs.size()) + " --input files were given");
  }
  auto start = std::chrono::steady_clock::now();
  auto reference = ReferenceRunGraph(**reference_graph, inputs);
  if (!reference.ok()) Fail("reference: " + std::string(reference.status().message()));
  double reference_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::vector<std::string> output_names;
  const std::vector<Tensor> outputs = CompileAndRun(args, *bytes, inputs, output_names);
  bool ok = outputs.size() == reference->size();
  // The outputs as compared with each side: rows of near-tied scores matched (--ranked-by).
  int64_t moved[3] = {0, 0, 0};
  const int by = args.ranked_by;
  const std::vector<Tensor> vs_reference =
      AlignTiedRows(outputs, *reference, by, TieWindow(*reference, by, args.tolerance, false), moved[0]);
  const std::vector<Tensor> vs_expected =
      AlignTiedRows(outputs, expected, by, TieWindow(expected, by, args.expected_tolerance, true), moved[1]);
  const std::vector<Tensor> vs_ort =
      AlignTiedRows(outputs, ort_expected, by, TieWindow(ort_expected, by, args.expected_tolerance, true), moved[2]);
  for (size_t i = 0; i < outputs.size() && i < reference->size(); ++i) {
    Diff d = Compare(vs_reference[i], (*reference)[i]);
    bool pass = d.shape_ok && d.scale >= 1e-3 && d.max_abs <= args.tolerance * d.scale;
    // One JSON line (a Struct printed by protobuf) per output.
    google::protobuf::Struct line;
    auto& f = *line.mutable_fields();
    // JSON has no infinity or NaN (a NaN error counts as infinite): the largest double.
    auto number = [](double v) { return std::isfinite(v) ? v : 1e308; };
    f["model"].set_string_value(args.model);
    f["output"].set_string_value(output_names[i]);
    f["scale"].set_number_value(number(d.scale));
    f["max_abs_error"].set_number_value(number(d.max_abs));
    f["relative_to_scale"].set_number_value(number(d.scale > 0 ? d.max_abs / d.scale : INFINITY));
    f["tolerance"].set_number_value(args.tolerance);
    // Against the exporting framework's outputs and ONNX Runtime's: the same bound, with
    // max(1, scale) so an output of small magnitude is not held to a tighter absolute error.
    auto versus = [&](const std::vector<Tensor>& others, const std::vector<Tensor>& aligned, const std::string& label) {
      if (i >= others.size()) return;
      Diff e = Compare(aligned[i], others[i]);
      bool epass = e.shape_ok && e.max_abs <= args.expected_tolerance * std::max(1.0, e.scale) &&
                   e.cosine >= args.expected_min_cosine;
      pass &= epass;
      f["vs_" + label + "_max_abs"].set_number_value(number(e.max_abs));
      f["vs_" + label + "_cosine"].set_number_value(e.cosine);
      f["vs_" + label + "_ok"].set_bool_value(epass);
    };
    versus(expected, vs_expected, "framework");
    versus(ort_expected, vs_ort, "ort");
    if (by >= 0) {  // rows that traded places within near-tied scores, against each side
      f["rows_reordered"].set_number_value(static_cast<double>(moved[0]));
      if (!expected.empty()) f["vs_framework_rows_reordered"].set_number_value(static_cast<double>(moved[1]));
      if (!ort_expected.empty()) f["vs_ort_rows_reordered"].set_number_value(static_cast<double>(moved[2]));
    }
    f["reference_ms"].set_number_value(reference_ms);
    f["ok"].set_bool_value(pass);
    JsonOptions compact;
    compact.pretty = false;
    auto json = ToJson(line, compact);
    std::printf("%s\n", json.ok() ? json->c_str() : "{}");
    if (!d.shape_ok)
      std::fprintf(stderr, "kiln-model-check: output %zu: shape or dtype differs from the reference\n", i);
    if (d.scale < 1e-3) std::fprintf(stderr, "kiln-model-check: output %zu is degenerate (scale %g)\n", i, d.scale);
    ok &= pass;
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::Main(argc, argv); }
