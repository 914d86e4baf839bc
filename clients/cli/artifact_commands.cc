// The kiln CLI's artifact subcommands: run (ONNX TensorProto files in and out), bench
// (timings, and per-kernel times with --profile) and inspect (the embedded manifest), all
// through the runtime's C API, as a user's program would load an artifact.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "google/protobuf/struct.pb.h"
#include "kiln/common/file.h"
#include "kiln/common/json.h"
#include "kiln/common/time.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/runtime_tensor.h"
#include "kiln/compiler/tensor.h"
#include "kiln/runtime.h"

namespace kiln::cli {
namespace {

// A loaded artifact with a session; closes both on scope exit.
struct Loaded {
  kiln_module* module = nullptr;
  kiln_session* session = nullptr;
  const kiln_module_desc* desc = nullptr;
  ~Loaded() {
    kiln_session_destroy(session);
    kiln_module_unload(module);
  }
};

bool Load(const std::string& path, int threads, Loaded& loaded, std::string& error) {
  if (kiln_module_load(path.c_str(), &loaded.module) != KILN_OK ||
      kiln_module_describe(loaded.module, &loaded.desc) != KILN_OK) {
    error = kiln_last_error();
    return false;
  }
  kiln_session_options options{sizeof(kiln_session_options), threads};
  if (kiln_session_create(loaded.module, &options, &loaded.session) != KILN_OK) {
    error = kiln_last_error();
    return false;
  }
  return true;
}

std::string ShapeText(const kiln_tensor_info& info) {
  if (info.kind == KILN_VALUE_SEQUENCE || info.kind == KILN_VALUE_OPTIONAL_SEQUENCE) {
    return absl::StrCat(info.kind == KILN_VALUE_SEQUENCE ? "seq<" : "opt<seq<",
                        DTypeName(static_cast<DType>(info.element_dtype)),
                        info.kind == KILN_VALUE_SEQUENCE ? ">" : ">>");
  }
  std::vector<int64_t> dims(info.dims, info.dims + info.rank);
  const std::string text = absl::StrCat(DTypeName(static_cast<DType>(info.dtype)), "[", absl::StrJoin(dims, ","), "]");
  return info.kind == KILN_VALUE_OPTIONAL ? absl::StrCat("opt<", text, ">") : text;
}

// Output tensors of the artifact's shapes, and the pointer arrays a run takes.
struct Buffers {
  std::vector<Tensor> inputs, outputs;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  void Bind(const kiln_module_desc* desc) {
    for (int32_t i = 0; i < desc->num_outputs; ++i) {
      const kiln_tensor_info& info = desc->outputs[i];
      outputs.emplace_back(static_cast<DType>(info.dtype), std::vector<int64_t>(info.dims, info.dims + info.rank));
    }
    for (auto& t : inputs) in_ptrs.push_back(t.data());
    for (auto& t : outputs) out_ptrs.push_back(t.data());
  }
};

struct RunFlags {
  std::string artifact, output_dir;
  std::vector<std::string> inputs;
  int threads = 1;
};

// The artifact's inputs from the NAME=FILE.pb flags, in its input order.
int ReadRunInputs(const RunFlags& flags, const kiln_module_desc* desc, std::vector<Tensor>& inputs) {
  std::map<std::string, std::string> files;
  for (const std::string& spec : flags.inputs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos) return UsageError("run", absl::StrCat("--input '", spec, "': expected NAME=FILE.pb"));
    files[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  for (int32_t i = 0; i < desc->num_inputs; ++i) {
    const kiln_tensor_info& info = desc->inputs[i];
    auto it = files.find(info.name);
    if (it == files.end())
      return UsageError("run", absl::StrCat("missing --input ", info.name, "=FILE.pb (", ShapeText(info), ")"));
    auto bytes = ReadFile(it->second);
    if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
    // A sequence or an optional input is a SequenceProto or an OptionalProto file.
    auto tensor = ParseValueProto(*bytes, static_cast<ValueKind>(info.kind));
    if (!tensor.ok()) return Fail(absl::StrCat(it->second, ": ", tensor.status().message()));
    if (info.kind != KILN_VALUE_TENSOR) {
      inputs.push_back(std::move(*tensor));
      files.erase(it);
      continue;
    }
    // A dim of -1 is known only at run time: any size.
    bool fits = static_cast<int32_t>(tensor->dtype()) == info.dtype && tensor->rank() == info.rank;
    for (int32_t d = 0; fits && d < info.rank; ++d) fits = info.dims[d] < 0 || tensor->dims()[d] == info.dims[d];
    if (!fits) {
      return Fail(absl::StrCat(it->second, ": input '", info.name, "' is ",
                               PrintType(TensorType::Static(tensor->dtype(), tensor->dims())),
                               ", the artifact expects ", ShapeText(info)));
    }
    inputs.push_back(std::move(*tensor));
    files.erase(it);
  }
  if (!files.empty())
    return UsageError("run", absl::StrCat("'", files.begin()->first, "' is not an input of this artifact"));
  return 0;
}

int Run(const RunFlags& flags) {
  Loaded loaded;
  std::string error;
  if (!Load(flags.artifact, flags.threads, loaded, error)) return Fail(error);
  const kiln_module_desc* desc = loaded.desc;
  std::vector<Tensor> inputs;
  if (int code = ReadRunInputs(flags, desc, inputs); code != 0) return code;
  // The shaped API runs every artifact, with run-time shapes or not.
  std::vector<kiln_tensor> in, out(static_cast<size_t>(desc->num_outputs));
  RuntimeSequences sequences;
  for (const Tensor& t : inputs) in.push_back(RuntimeValue(t, sequences));
  if (kiln_session_run_shaped(loaded.session, in.data(), out.data()) != KILN_OK) return Fail(kiln_last_error());
  if (auto s = MakeDirectories(flags.output_dir); !s.ok()) return Fail(std::string(s.message()));
  for (int32_t i = 0; i < desc->num_outputs; ++i) {
    const Tensor result = FromRuntimeValue(out[i], desc->outputs[i]);
    const std::string path = absl::StrCat(flags.output_dir, "/output_", i, ".pb");
    if (auto s = WriteFile(path, SerializeValueProto(result, desc->outputs[i].name)); !s.ok())
      return Fail(std::string(s.message()));
  }
  return 0;
}

struct BenchFlags {
  std::string artifact;
  std::vector<std::string> input_shapes;  // NAME=1x3x224x224, for dims known only at run time
  int threads = 1, iters = 50, warmup = 5;
  bool profile = false;
};

// Random inputs: N(0, 1) floats; integers zero (often indices: keep them small and valid).
// A dim known only at run time (-1) takes its size from --input-shape NAME=AxBxC.
int RandomInputs(const kiln_module_desc* desc, const std::vector<std::string>& shapes, std::vector<Tensor>& inputs) {
  std::map<std::string, std::vector<int64_t>> given;
  for (const std::string& spec : shapes) {
    const size_t eq = spec.find('=');
    std::vector<int64_t> dims;
    bool valid = eq != std::string::npos;
    for (absl::string_view part : absl::StrSplit(valid ? spec.substr(eq + 1) : "", 'x')) {
      int64_t d = 0;
      valid = valid && absl::SimpleAtoi(part, &d) && d >= 0;
      dims.push_back(d);
    }
    if (!valid) return UsageError("bench", absl::StrCat("--input-shape '", spec, "': expected NAME=AxBxC"));
    given[spec.substr(0, eq)] = dims;
  }
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int32_t i = 0; i < desc->num_inputs; ++i) {
    const kiln_tensor_info& info = desc->inputs[i];
    std::vector<int64_t> dims(info.dims, info.dims + info.rank);
    if (auto it = given.find(info.name); it != given.end()) {
      bool fits = it->second.size() == dims.size();
      for (size_t d = 0; fits && d < dims.size(); ++d) fits = dims[d] < 0 || dims[d] == it->second[d];
      if (!fits) {
        return UsageError("bench", absl::StrCat("--input-shape for '", info.name, "' does not fit ", ShapeText(info)));
      }
      dims = it->second;
    } else if (std::find(dims.begin(), dims.end(), -1) != dims.end()) {
      return UsageError("bench",
                        absl::StrCat("input '", info.name, "' is ", ShapeText(info),
                                     " (-1: known only at run time): give --input-shape ", info.name, "=AxBx..."));
    }
    Tensor t(static_cast<DType>(info.dtype), dims);
    if (t.dtype() == DType::kFloat32) {
      for (int64_t k = 0; k < t.num_elements(); ++k) t.data_as<float>()[k] = dist(rng);
    } else {
      std::memset(t.data(), 0, t.size_bytes());
    }
    inputs.push_back(std::move(t));
  }
  return 0;
}

// Separate runs, so the hooks' own cost never touches the timings: time per kernel on stderr.
int Profile(const BenchFlags& flags, Loaded& loaded, const std::function<kiln_status(double*)>& run_profiled) {
  const int32_t kernels = loaded.desc->num_kernels;
  std::vector<double> kernel_ms(static_cast<size_t>(kernels), 0.0);
  double profiled_total = 0;
  for (int i = 0; i < flags.iters; ++i) {
    Stopwatch run;
    if (run_profiled(kernel_ms.data()) != KILN_OK) return Fail(kiln_last_error());
    profiled_total += run.ElapsedMs();
  }
  std::vector<int32_t> order(static_cast<size_t>(kernels));
  for (int32_t k = 0; k < kernels; ++k) order[static_cast<size_t>(k)] = k;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return kernel_ms[a] > kernel_ms[b]; });
  double kernel_sum = 0;
  for (double ms : kernel_ms) kernel_sum += ms;
  std::fprintf(stderr, "profile: %d kernels, %d runs, %.4f ms per run (%.4f ms in kernels)\n", kernels, flags.iters,
               profiled_total / flags.iters, kernel_sum / flags.iters);
  std::fprintf(stderr, "%5s %12s %7s %7s  %s\n", "rank", "ms/run", "%", "cum %", "kernel");
  double cumulative = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    const double ms = kernel_ms[order[r]] / flags.iters;
    if (ms <= 0 && r >= 10) break;
    cumulative += ms;
    std::fprintf(stderr, "%5zu %12.4f %6.1f%% %6.1f%%  #%d %s\n", r + 1, ms, 100.0 * ms * flags.iters / kernel_sum,
                 100.0 * cumulative * flags.iters / kernel_sum, order[r], loaded.desc->kernel_names[order[r]]);
  }
  return 0;
}

int Bench(const BenchFlags& flags) {
  Loaded loaded;
  std::string error;
  if (!Load(flags.artifact, flags.threads, loaded, error)) return Fail(error);
  Buffers buffers;
  if (int code = RandomInputs(loaded.desc, flags.input_shapes, buffers.inputs); code != 0) return code;
  // Run-time shapes go through the shaped API, whose outputs the session owns.
  const bool shaped = loaded.desc->dynamic_entry != nullptr;
  std::vector<kiln_tensor> in, out(static_cast<size_t>(loaded.desc->num_outputs));
  for (const Tensor& t : buffers.inputs) in.push_back(RuntimeView(t));
  if (!shaped) buffers.Bind(loaded.desc);
  auto run_once = [&] {
    return shaped ? kiln_session_run_shaped(loaded.session, in.data(), out.data())
                  : kiln_session_run(loaded.session, buffers.in_ptrs.data(), buffers.out_ptrs.data());
  };
  for (int i = 0; i < flags.warmup; ++i) {
    if (run_once() != KILN_OK) return Fail(kiln_last_error());
  }
  std::vector<double> times;
  for (int i = 0; i < flags.iters; ++i) {
    Stopwatch run;
    if (run_once() != KILN_OK) return Fail(kiln_last_error());
    times.push_back(run.ElapsedMs());
  }
  if (flags.profile) {
    auto run_profiled = [&](double* kernel_ms) {
      return shaped ? kiln_session_run_shaped_profiled(loaded.session, in.data(), out.data(), kernel_ms)
                    : kiln_session_run_profiled(loaded.session, buffers.in_ptrs.data(), buffers.out_ptrs.data(),
                                                kernel_ms);
    };
    if (int code = Profile(flags, loaded, run_profiled); code != 0) return code;
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double t : times) mean += t;
  mean /= static_cast<double>(times.size());
  auto percentile = [&](double p) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * (sorted.size() - 1) + 0.5))];
  };
  // One JSON line (a Struct printed by protobuf, as every JSON Kiln writes).
  google::protobuf::Struct line;
  auto& f = *line.mutable_fields();
  f["median_ms"].set_number_value(percentile(0.5));
  f["p90_ms"].set_number_value(percentile(0.9));
  f["mean_ms"].set_number_value(mean);
  f["min_ms"].set_number_value(sorted.front());
  f["iters"].set_number_value(flags.iters);
  f["threads"].set_number_value(kiln_session_num_threads(loaded.session));
  JsonOptions compact;
  compact.pretty = false;
  auto json = ToJson(line, compact);
  if (!json.ok()) return Fail(std::string(json.status().message()));
  std::printf("%s\n", json->c_str());
  return 0;
}

int Inspect(const std::string& artifact) {
  kiln_module* module = nullptr;
  const kiln_module_desc* desc = nullptr;
  if (kiln_module_load(artifact.c_str(), &module) != KILN_OK || kiln_module_describe(module, &desc) != KILN_OK) {
    return Fail(kiln_last_error());
  }
  std::fputs(desc->manifest_json, stdout);
  kiln_module_unload(module);
  return 0;
}

}  // namespace

void AddArtifactCommands(CLI::App& app, std::vector<Command>& commands) {
  auto run = std::make_shared<RunFlags>();
  CLI::App* c = app.add_subcommand("run", "Run an artifact on ONNX TensorProto inputs");
  c->add_option("artifact", run->artifact, "OUT.so")->required();
  c->add_option("--input", run->inputs, "NAME=FILE.pb: an ONNX TensorProto for the graph input NAME (repeatable)");
  c->add_option("--output-dir", run->output_dir, "writes DIR/output_0.pb, output_1.pb, ... in the model's output order")
      ->required();
  c->add_option("--threads", run->threads, "worker threads (default 1; 0 = one per CPU)")
      ->check(CLI::NonNegativeNumber);
  commands.push_back({c, [run] { return Run(*run); }});

  auto bench = std::make_shared<BenchFlags>();
  c = app.add_subcommand("bench", "Time an artifact on random inputs");
  c->footer("Prints one JSON line: median_ms, p90_ms, mean_ms, min_ms, iters, threads.");
  c->add_option("artifact", bench->artifact, "OUT.so")->required();
  c->add_option("--threads", bench->threads, "worker threads (default 1; 0 = one per CPU)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--iters", bench->iters, "timed runs (default 50)")->check(CLI::PositiveNumber);
  c->add_option("--warmup", bench->warmup, "untimed runs first (default 5)")->check(CLI::NonNegativeNumber);
  c->add_option("--input-shape", bench->input_shapes,
                "NAME=AxBxC: the size of an input whose dims are known only at run time (-1 in `kiln inspect`); "
                "repeat per input");
  c->add_flag("--profile", bench->profile,
              "also run the iterations profiled and print, on stderr, the time per kernel (each node of the "
              "compiled graph, fused ones as one), slowest first");
  commands.push_back({c, [bench] { return Bench(*bench); }});

  auto artifact = std::make_shared<std::string>();
  c = app.add_subcommand("inspect", "Print the manifest embedded in an artifact");
  c->footer(
      "JSON, schema kiln.manifest version 2: the normalised CompileSpec (model digest, target preset and its "
      "triple/cpu/features, options), the action key, the pipeline run, inputs, outputs, workspace bytes and the "
      "compiler version.");
  c->add_option("artifact", *artifact, "OUT.so")->required();
  commands.push_back({c, [artifact] { return Inspect(*artifact); }});
}

}  // namespace kiln::cli
