// The job process: see job.h.
#include "worker/job.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/common/file.h"
#include "kiln/common/json.h"
#include "kiln/common/status.h"
#include "kiln/common/time.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/reference.h"
#include "kiln/compiler/runtime_tensor.h"
#include "kiln/runtime.h"
#include "kiln/v1/kiln.pb.h"
#include "kiln/v1/worker.pb.h"
#include "worker/report.h"

namespace kiln::worker {
namespace {

void Phase(const std::string& name, double progress) {
  std::printf("phase %s %.3f\n", name.c_str(), progress);
  std::fflush(stdout);
}

int Fail(const std::string& dir, const absl::Status& status) {
  WriteFile(dir + "/error.txt", std::string(status.message())).IgnoreError();
  return kJobFailed;
}

[[noreturn]] void OutOfMemory() {
  // No allocation here: the limit is already hit.
  static const char kMessage[] = "out of memory\n";
  ssize_t ignored = write(2, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  _exit(kJobOutOfMemory);
}

std::string Describe(const std::string& name, const Tensor& t) {
  return absl::StrCat(name, ": ", DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","), "]");
}

constexpr int64_t kValidationBatch = 2;
constexpr int64_t kValidationExtent = 16;

// Seeded inputs from the graph's input types: N(0, 1) floats; zeros for integers (often
// indices, where zero is always valid); alternating booleans; strings of N(0, 1) numbers.
absl::StatusOr<std::vector<Tensor>> RandomInputs(const Graph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    const TensorType& type = input->type();
    std::vector<int64_t> dims;
    // A dim known only at run time is validated at kValidationBatch when it leads (a
    // batch), else kValidationExtent (a sequence or image size); an InputSet fixes others.
    for (size_t k = 0; k < type.shape.size(); ++k) {
      const Dim& d = type.shape[k];
      dims.push_back(d.known() ? d.size : k == 0 ? kValidationBatch : kValidationExtent);
    }
    Tensor t(type.dtype, dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      switch (t.dtype()) {
        case DType::kFloat32: t.data_as<float>()[i] = normal(rng); break;
        case DType::kFloat64: t.data_as<double>()[i] = normal(rng); break;
        case DType::kBool: t.data_as<uint8_t>()[i] = static_cast<uint8_t>(i & 1); break;
        case DType::kString: t.SetString(i, std::to_string(normal(rng))); break;  // a number: Cast reads it
        default: break;                                                           // storage starts zeroed
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// The model as the reference evaluator runs it (validation inputs and reference
// outputs), imported apart from the compile's own graph.
absl::StatusOr<std::unique_ptr<Graph>> ImportReference(const v1::CompileSpec& spec, std::string_view model) {
  ImportOptions options;
  options.model_label = absl::StrCat("model ", spec.model().sha256().substr(0, 12));
  for (const v1::InputShape& shape : spec.input_shapes())
    options.input_shapes[shape.name()] = std::vector<int64_t>(shape.dims().begin(), shape.dims().end());
  return ImportOnnxModel(model, options);
}

// The job's validation inputs: the uploaded InputSet (dir/inputs.pb) or seeded random ones.
absl::StatusOr<std::vector<Tensor>> ValidationInputs(const Graph& graph, const v1::CompileSpec::Accuracy& accuracy,
                                                     const std::string& dir) {
  if (!accuracy.has_input_set()) return RandomInputs(graph, accuracy.seed());
  KILN_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(dir + "/inputs.pb"));
  return InputSetTensors(graph, bytes);
}

// Compiles the task's spec exactly as `kiln compile` would (the same CompileModel), with the
// calibration samples the worker downloaded and, for pruning's per-layer breakdown, the
// validation inputs.
absl::StatusOr<CompileResult> CompileTask(const v1::Task& task, const MappedFile& model, const std::string& dir) {
  const v1::CompileSpec& spec = task.spec();
  CompileInputs inputs;
  inputs.output_path = dir + "/artifact.so";
  inputs.model_bytes = model.bytes();
  inputs.model_file = &model;
  inputs.model_label = absl::StrCat("model ", spec.model().sha256().substr(0, 12));
  for (int k = 0; k < spec.quantization().calibration_size(); ++k) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, ReadFile(absl::StrCat(dir, "/calibration_", k, ".pb")));
    inputs.calibration.push_back(std::move(bytes));
  }
  if (spec.pruning().channels() > 0 || spec.pruning().weights() > 0) {
    // Its own import, freed at the end of this block: keeping the reference graph through
    // the compile would double a large model's peak memory under the job's limit.
    KILN_ASSIGN_OR_RETURN(auto graph, ImportReference(spec, model.bytes()));
    auto sample = ValidationInputs(*graph, spec.accuracy(), dir);
    if (!sample.ok()) return Annotate(sample.status(), "validation inputs");
    inputs.pruning_samples.push_back(std::move(*sample));
  }
  const std::vector<std::string> phases = {"import", "passes", "codegen"};
  inputs.on_phase = [&](const std::string& phase) {
    auto at = std::find(phases.begin(), phases.end(), phase);
    Phase(phase, static_cast<double>(at - phases.begin()) * 0.2);
  };
  KILN_ASSIGN_OR_RETURN(CompileResult compiled, CompileModel(spec, inputs));
  if (compiled.action_key != task.action_key()) {
    return absl::InternalError(absl::StrCat("the compiler's action key ", compiled.action_key,
                                            " for this spec differs from kilnd's ", task.action_key(),
                                            "; this is a Kiln bug, please report it"));
  }
  return compiled;
}

// The artifact loaded in this process with a one-thread session; unloaded on scope exit.
struct LoadedArtifact {
  kiln_module* module = nullptr;
  kiln_session* session = nullptr;
  const kiln_module_desc* desc = nullptr;
  std::vector<kiln_tensor> in, out;
  ~LoadedArtifact() {
    kiln_session_destroy(session);
    kiln_module_unload(module);
  }
};

// Loads dir/artifact.so (the generated code runs here, in the job process, never in the
// worker itself) and runs it once on `inputs` into `outputs`.
absl::Status RunArtifact(const std::string& path, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                         LoadedArtifact& loaded) {
  if (kiln_module_load(path.c_str(), &loaded.module) != KILN_OK ||
      kiln_module_describe(loaded.module, &loaded.desc) != KILN_OK) {
    return absl::InvalidArgumentError(absl::StrCat("loading the artifact: ", kiln_last_error()));
  }
  kiln_session_options options{sizeof(kiln_session_options), 1};
  if (kiln_session_create(loaded.module, &options, &loaded.session) != KILN_OK)
    return absl::InternalError(kiln_last_error());
  // The shaped API runs every artifact (and is the only one for run-time shapes).
  for (const Tensor& t : inputs) loaded.in.push_back(RuntimeView(t));
  loaded.out.resize(static_cast<size_t>(loaded.desc->num_outputs));
  if (kiln_session_run_shaped(loaded.session, loaded.in.data(), loaded.out.data()) != KILN_OK)
    return absl::InvalidArgumentError(absl::StrCat("running the artifact: ", kiln_last_error()));
  for (const kiln_tensor& t : loaded.out) outputs.push_back(FromRuntime(t));
  return absl::OkStatus();
}

// Median and p90 of up to 20 runs within about two seconds (at least three).
Latency MeasureLatency(LoadedArtifact& loaded) {
  std::vector<double> times;
  Stopwatch budget;
  kiln_session_run_shaped(loaded.session, loaded.in.data(), loaded.out.data());
  while (times.size() < 20 && (times.size() < 3 || budget.ElapsedMs() < 2000)) {
    Stopwatch run;
    kiln_session_run_shaped(loaded.session, loaded.in.data(), loaded.out.data());
    times.push_back(run.ElapsedMs());
  }
  std::sort(times.begin(), times.end());
  Latency latency;
  latency.median_ms = times[times.size() / 2];
  latency.p90_ms =
      times[std::min(times.size() - 1, static_cast<size_t>(0.9 * static_cast<double>(times.size() - 1) + 0.5))];
  latency.iters = static_cast<int>(times.size());
  return latency;
}

// Runs the artifact and the independent reference (compiler/reference, which shares no code
// with the kernels) on the same inputs and judges the outputs; measures latency when the artifact runs on this machine.
// Fills the context's input descriptions, latency and validate_ms.
absl::StatusOr<v1::AccuracyReport> Validate(const v1::CompileSpec& spec, std::string_view model,
                                            const CompileResult& compiled, const std::string& artifact_path,
                                            const std::string& dir, ReportContext& context) {
  Phase("validating", 0.7);
  Stopwatch validate_watch;
  KILN_ASSIGN_OR_RETURN(auto reference_graph, ImportReference(spec, model));
  auto inputs = ValidationInputs(*reference_graph, spec.accuracy(), dir);
  if (!inputs.ok()) return Annotate(inputs.status(), "validation inputs");
  auto reference = ReferenceRunGraph(*reference_graph, *inputs);
  if (!reference.ok()) return Annotate(reference.status(), "validation against the reference");
  LoadedArtifact loaded;
  std::vector<Tensor> outputs;
  KILN_RETURN_IF_ERROR(RunArtifact(artifact_path, *inputs, outputs, loaded));
  std::vector<std::string> output_names;
  for (int i = 0; i < loaded.desc->num_outputs; ++i) output_names.push_back(loaded.desc->outputs[i].name);
  v1::AccuracyReport report = Judge(spec, output_names, outputs, *reference, DrawnAtRandom(*reference_graph));
  report.set_artifact_size_bytes(static_cast<double>(compiled.artifact_bytes));
  for (size_t i = 0; i < inputs->size(); ++i)
    context.input_descriptions.push_back(Describe(reference_graph->inputs()[i]->name(), (*inputs)[i]));
  if (compiled.target.is_host && !spec.accuracy().skip_latency()) {
    Phase("measuring", 0.85);
    context.latency = MeasureLatency(loaded);
    report.set_latency_median_ms(context.latency.median_ms);
  }
  context.validate_ms = validate_watch.ElapsedMs();
  return report;
}

// report.json, manifest.json, and result.pb (the result and timings, for the worker).
absl::Status WriteOutputs(const v1::Task& task, const CompileResult& compiled, const v1::AccuracyReport& report,
                          const ReportContext& context, const std::string& dir) {
  const v1::JobReport job_report = JobReportFor(task.action_key(), task.spec(), report, compiled.report, context);
  v1::CompleteRequest result;
  *result.mutable_result()->mutable_accuracy() = report;
  *result.mutable_timings_ms() = job_report.timings_ms();
  KILN_ASSIGN_OR_RETURN(const std::string report_json, ToJson(job_report));
  KILN_ASSIGN_OR_RETURN(const std::string manifest_json, ToJson(compiled.manifest));
  for (const auto& [file, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"report.json", report_json}, {"manifest.json", manifest_json}, {"result.pb", result.SerializeAsString()}}) {
    KILN_RETURN_IF_ERROR(WriteFile(dir + "/" + file, bytes));
  }
  return absl::OkStatus();
}

// Compiles (the linker writes artifact.so), validates and measures; writes artifact.so, report.json, manifest.json and
// result.pb into dir.
absl::Status Run(const v1::Task& task, const MappedFile& model, const std::string& dir) {
  Stopwatch compile_watch;
  KILN_ASSIGN_OR_RETURN(CompileResult compiled, CompileTask(task, model, dir));
  ReportContext context;
  context.compile_ms = compile_watch.ElapsedMs();
  const std::string artifact_path = dir + "/artifact.so";  // written there by the compile
  KILN_ASSIGN_OR_RETURN(const v1::AccuracyReport report,
                        Validate(task.spec(), model.bytes(), compiled, artifact_path, dir, context));
  return WriteOutputs(task, compiled, report, context, dir);
}

}  // namespace

int RunJob(const std::string& dir) {
  std::set_new_handler(OutOfMemory);
  auto task_bytes = ReadFile(dir + "/task.pb");
  if (!task_bytes.ok()) return Fail(dir, task_bytes.status());
  v1::Task task;
  if (!task.ParseFromString(*task_bytes)) return Fail(dir, absl::DataLossError("task.pb does not parse"));
  // Mapped: the compile gives its pages back once imported; validation reads them again.
  auto model = MappedFile::Open(dir + "/model.onnx");
  if (!model.ok()) return Fail(dir, model.status());
  if (auto s = Run(task, *model, dir); !s.ok()) return Fail(dir, s);
  return kJobOk;
}

}  // namespace kiln::worker
