// kiln-model-check: compiles a real model, runs the artifact, and compares every output
// against the reference interpreter running the imported (unoptimised) graph, and when
// given, against outputs recorded from the exporting framework.
//
//   kiln-model-check MODEL.onnx --input FILE.pb [--input ...] [--expected FILE.pb ...]
//                    [--tolerance 1e-4] [--expected-tolerance 1e-3] [--threads N] [--pipeline P]
//
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

#include "kiln/common/file.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/interp.h"
#include "kiln/runtime.h"

namespace kiln {
namespace {

struct Args {
  std::string model;
  std::vector<std::string> inputs, expected;
  double tolerance = 1e-4, expected_tolerance = 1e-3;
  int threads = 2;
  std::string pipeline = kDefaultPipeline;
};

[[noreturn]] void Usage(const char* problem) {
  std::fprintf(stderr,
               "kiln-model-check: %s\nusage: kiln-model-check MODEL.onnx --input FILE.pb [--input ...] "
               "[--expected FILE.pb ...] [--tolerance R] [--expected-tolerance R] [--threads N] [--pipeline P]\n",
               problem);
  std::exit(2);
}

Args ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--input")
      args.inputs.push_back(value());
    else if (a == "--expected")
      args.expected.push_back(value());
    else if (a == "--tolerance")
      args.tolerance = std::atof(value().c_str());
    else if (a == "--expected-tolerance")
      args.expected_tolerance = std::atof(value().c_str());
    else if (a == "--threads")
      args.threads = std::atoi(value().c_str());
    else if (a == "--pipeline")
      args.pipeline = value();
    else if (!a.empty() && a[0] == '-')
      Usage(("unknown flag " + a).c_str());
    else if (args.model.empty())
      args.model = a;
    else
      Usage(("unexpected argument " + a).c_str());
  }
  if (args.model.empty()) Usage("no model given");
  return args;
}

struct Diff {
  double max_abs = 0, scale = 0;
  bool shape_ok = true;
};

Diff Compare(const Tensor& got, const Tensor& want) {
  Diff d;
  if (got.dims() != want.dims() || got.dtype() != want.dtype()) {
    d.shape_ok = false;
    return d;
  }
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double w = want.GetAsDouble(i), g = got.GetAsDouble(i);
    d.scale = std::max(d.scale, std::fabs(w));
    double e = std::fabs(g - w);
    if (std::isnan(e)) e = INFINITY;
    d.max_abs = std::max(d.max_abs, e);
  }
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

int Main(int argc, char** argv) {
  Args args = ParseArgs(argc, argv);
  auto bytes = ReadFile(args.model);
  if (!bytes.ok()) Fail(std::string(bytes.status().message()));

  const std::vector<Tensor> inputs = ReadTensors(args.inputs);
  const std::vector<Tensor> expected = ReadTensors(args.expected);

  // The reference: the imported graph, no passes, run by the interpreter.
  ImportOptions import_options;
  import_options.model_label = args.model;
  auto reference_graph = ImportOnnxModel(*bytes, import_options);
  if (!reference_graph.ok()) Fail(std::string(reference_graph.status().message()));
  if (inputs.size() != (*reference_graph)->inputs().size()) {
    Fail("the model has " + std::to_string((*reference_graph)->inputs().size()) + " inputs but " +
         std::to_string(inputs.size()) + " --input files were given");
  }
  auto start = std::chrono::steady_clock::now();
  auto reference = RunGraph(**reference_graph, inputs);
  if (!reference.ok()) Fail("reference interpreter: " + std::string(reference.status().message()));
  double interp_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  CompileOptions options;
  options.model_label = args.model;
  options.pipeline = args.pipeline;
  auto compiled = CompileModel(*bytes, options);
  if (!compiled.ok()) Fail("compile: " + std::string(compiled.status().message()));
  char path[] = "/tmp/kiln-model-check-XXXXXX.so";
  int fd = mkstemps(path, 3);
  if (fd < 0) Fail("cannot create a temporary file");
  close(fd);
  if (auto s = WriteFile(path, compiled->shared_object); !s.ok()) Fail(std::string(s.message()));

  kiln_module* module = nullptr;
  kiln_session* session = nullptr;
  if (kiln_module_load(path, &module) != KILN_OK) Fail(kiln_last_error());
  unlink(path);
  kiln_session_options session_options{sizeof(kiln_session_options), args.threads};
  if (kiln_session_create(module, &session_options, &session) != KILN_OK) Fail(kiln_last_error());
  const kiln_module_desc* desc = nullptr;
  if (kiln_module_describe(module, &desc) != KILN_OK) Fail(kiln_last_error());
  std::vector<const void*> in_ptrs;
  for (const Tensor& t : inputs) in_ptrs.push_back(t.data());
  std::vector<Tensor> outputs;
  std::vector<std::string> output_names;
  for (int i = 0; i < desc->num_outputs; ++i) {
    const kiln_tensor_info& info = desc->outputs[i];
    output_names.push_back(info.name);
    outputs.emplace_back(static_cast<DType>(info.dtype), std::vector<int64_t>(info.dims, info.dims + info.rank));
  }
  std::vector<void*> out_ptrs;
  for (Tensor& t : outputs) out_ptrs.push_back(t.data());
  if (kiln_session_run(session, in_ptrs.data(), out_ptrs.data()) != KILN_OK) Fail(kiln_last_error());
  kiln_session_destroy(session);
  kiln_module_unload(module);

  bool ok = outputs.size() == reference->size();
  for (size_t i = 0; i < outputs.size() && i < reference->size(); ++i) {
    Diff d = Compare(outputs[i], (*reference)[i]);
    bool pass = d.shape_ok && d.scale >= 1e-3 && d.max_abs <= args.tolerance * d.scale;
    std::string vs_expected;
    if (i < expected.size()) {
      Diff e = Compare(outputs[i], expected[i]);
      bool epass = e.shape_ok && e.max_abs <= args.expected_tolerance * e.scale;
      pass &= epass;
      char buf[160];
      std::snprintf(buf, sizeof(buf), ", \"vs_framework_max_abs\": %.3g, \"vs_framework_ok\": %s", e.max_abs,
                    epass ? "true" : "false");
      vs_expected = buf;
    }
    std::printf(
        "{\"model\": \"%s\", \"output\": \"%s\", \"scale\": %.4g, \"max_abs_error\": %.3g, "
        "\"relative_to_scale\": %.3g, \"tolerance\": %.3g%s, \"interpreter_ms\": %.0f, \"ok\": %s}\n",
        JsonEscape(args.model).c_str(), JsonEscape(output_names[i]).c_str(), d.scale, d.max_abs,
        d.scale > 0 ? d.max_abs / d.scale : INFINITY, args.tolerance, vs_expected.c_str(), interp_ms,
        pass ? "true" : "false");
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
