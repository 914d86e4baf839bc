// kiln-model-check: compiles a real model, runs the artifact, and compares every output
// against the reference evaluator (compiler/reference) running the imported (unoptimised) graph, and when
// given, against outputs recorded from the exporting framework.
//
//   kiln-model-check MODEL.onnx --input FILE.pb [--input ...] [--expected FILE.pb ...]
//                    [--tolerance 1e-4] [--expected-tolerance 1e-3] [--expected-min-cosine C]
//                    [--threads N] [--pipeline P]
//   (kiln-model-check --help describes each flag.)
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
  for (size_t i = 0; i < outputs.size() && i < reference->size(); ++i) {
    Diff d = Compare(outputs[i], (*reference)[i]);
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
    auto versus = [&](const std::vector<Tensor>& others, const std::string& label) {
      if (i >= others.size()) return;
      Diff e = Compare(outputs[i], others[i]);
      bool epass = e.shape_ok && e.max_abs <= args.expected_tolerance * std::max(1.0, e.scale) &&
                   e.cosine >= args.expected_min_cosine;
      pass &= epass;
      f["vs_" + label + "_max_abs"].set_number_value(number(e.max_abs));
      f["vs_" + label + "_cosine"].set_number_value(e.cosine);
      f["vs_" + label + "_ok"].set_bool_value(epass);
    };
    versus(expected, "framework");
    versus(ort_expected, "ort");
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
