// The job process: see job.h.
#include "worker/job.h"
#include "kiln/common/file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <new>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/interp.h"
#include "kiln/runtime.h"
#include "kiln/v1/worker.pb.h"
#include "worker/report.h"

namespace kiln::worker {
namespace {

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void Phase(const std::string& name, double progress) {
  std::printf("phase %s %.3f\n", name.c_str(), progress);
  std::fflush(stdout);
}

int Fail(const std::string& dir, const std::string& message) {
  WriteFile(dir + "/error.txt", message).IgnoreError();
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

// Seeded inputs from the graph's input types: N(0, 1) floats; zeros for integers (often
// indices, where zero is always valid); alternating booleans.
absl::StatusOr<std::vector<Tensor>> RandomInputs(const Graph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    const TensorType& type = input->type();
    std::vector<int64_t> dims;
    for (const auto& d : type.shape) {
      if (!d.known()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input->name(), "' has a symbolic dimension; give its shape in the job's input_shapes"));
      }
      dims.push_back(d.size);
    }
    Tensor t(type.dtype, dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      switch (t.dtype()) {
        case DType::kFloat32: t.data_as<float>()[i] = normal(rng); break;
        case DType::kFloat64: t.data_as<double>()[i] = normal(rng); break;
        case DType::kBool: t.data_as<uint8_t>()[i] = static_cast<uint8_t>(i & 1); break;
        default: break;  // storage starts zeroed
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

absl::StatusOr<std::vector<Tensor>> UploadedInputs(const Graph& graph, const std::string& bytes) {
  v1::InputSet set;
  if (!set.ParseFromString(bytes)) return absl::InvalidArgumentError("the input set blob is not a kiln.v1.InputSet");
  if (set.inputs_size() != static_cast<int>(graph.inputs().size())) {
    return absl::InvalidArgumentError(absl::StrCat("the input set has ", set.inputs_size(),
                                                   " tensors but the model has ", graph.inputs().size(), " inputs"));
  }
  std::vector<Tensor> inputs(graph.inputs().size());
  std::vector<bool> filled(graph.inputs().size(), false);
  for (int i = 0; i < set.inputs_size(); ++i) {
    std::string proto_name;
    auto tensor = ParseTensorProto(set.inputs(i).tensor_proto(), &proto_name);
    if (!tensor.ok())
      return absl::InvalidArgumentError(absl::StrCat("input set tensor ", i, ": ", tensor.status().message()));
    const std::string name = !set.inputs(i).name().empty() ? set.inputs(i).name() : proto_name;
    size_t slot = static_cast<size_t>(i);
    if (!name.empty()) {
      slot = graph.inputs().size();
      for (size_t k = 0; k < graph.inputs().size(); ++k) {
        if (graph.inputs()[k]->name() == name) slot = k;
      }
      // Unknown names fall back to position (TensorProto files often carry no useful name).
      if (slot == graph.inputs().size()) slot = static_cast<size_t>(i);
    }
    if (filled[slot])
      return absl::InvalidArgumentError(
          absl::StrCat("the input set gives input '", graph.inputs()[slot]->name(), "' twice"));
    const TensorType& type = graph.inputs()[slot]->type();
    bool shape_ok = tensor->dtype() == type.dtype && tensor->rank() == static_cast<int64_t>(type.shape.size());
    for (size_t d = 0; shape_ok && d < type.shape.size(); ++d) {
      shape_ok = !type.shape[d].known() || type.shape[d].size == tensor->dims()[d];
    }
    if (!shape_ok) {
      return absl::InvalidArgumentError(absl::StrCat("input set tensor ", i, " (", Describe(name, *tensor),
                                                     ") does not match model input '", graph.inputs()[slot]->name(),
                                                     "' (", PrintType(type), ")"));
    }
    inputs[slot] = std::move(*tensor);
    filled[slot] = true;
  }
  return inputs;
}

struct Latency {
  double median = 0, p90 = 0;
  int iters = 0;
};

// The job's validation inputs: the uploaded InputSet (dir/inputs.pb) or seeded random ones.
absl::StatusOr<std::vector<Tensor>> ValidationInputs(const Graph& graph, const v1::ValidationSpec& validation,
                                                     const std::string& dir) {
  if (!validation.has_input_set()) return RandomInputs(graph, validation.seed());
  auto bytes = ReadFile(dir + "/inputs.pb");
  if (!bytes.ok()) return bytes.status();
  return UploadedInputs(graph, *bytes);
}

}  // namespace

int RunJob(const std::string& dir) {
  std::set_new_handler(OutOfMemory);
  auto task_bytes = ReadFile(dir + "/task.pb");
  if (!task_bytes.ok()) return Fail(dir, std::string(task_bytes.status().message()));
  v1::Task task;
  if (!task.ParseFromString(*task_bytes)) return Fail(dir, "task.pb does not parse");
  const v1::SubmitRequest& request = task.request();
  auto model = ReadFile(dir + "/model.onnx");
  if (!model.ok()) return Fail(dir, std::string(model.status().message()));

  const auto compile_start = std::chrono::steady_clock::now();
  CompileOptions options;
  // Compile for the canonical target kilnd put in the action key, not for whatever
  // "host" means on this worker's machine.
  options.target = request.target();
  if (!task.canonical_target().empty()) {
    std::vector<std::string> parts = absl::StrSplit(task.canonical_target(), absl::MaxSplits('/', 2));
    if (parts.size() == 3)
      options.target = absl::StrCat("triple=", parts[0], ",cpu=", parts[1], ",features=", parts[2]);
  }
  if (!request.options().pipeline().empty()) options.pipeline = request.options().pipeline();
  options.model_label = absl::StrCat("model ", request.model().sha256().substr(0, 12));
  for (const auto& shape : request.options().input_shapes()) {
    options.input_shapes[shape.name()] = std::vector<int64_t>(shape.dims().begin(), shape.dims().end());
  }
  // The model as the reference interpreter runs it (for calibration and validation inputs
  // and the reference outputs), imported apart from the compile's own graph.
  auto import_model = [&] {
    ImportOptions import_options;
    import_options.model_label = options.model_label;
    import_options.input_shapes = options.input_shapes;
    return ImportOnnxModel(*model, import_options);
  };
  const bool int8 = request.options().precision() == "int8";
  if (int8) {
    options.precision = "int8";
    auto method = ParseCalibrationMethod(
        request.options().calibration_method().empty() ? "minmax" : request.options().calibration_method());
    if (!method.ok()) return Fail(dir, std::string(method.status().message()));
    options.quantization.method = *method;
    for (const auto& name : request.options().keep_float()) options.quantization.keep_float.insert(name);
    // Calibration InputSets, matched to the graph's inputs as the validation set is. (Its
    // own import, freed at the end of this block: keeping the reference graph through the
    // compile instead would double a large model's peak memory under the job's limit.)
    auto graph = import_model();
    if (!graph.ok()) return Fail(dir, std::string(graph.status().message()));
    for (int k = 0; k < request.options().calibration_size(); ++k) {
      auto bytes = ReadFile(absl::StrCat(dir, "/calibration_", k, ".pb"));
      if (!bytes.ok()) return Fail(dir, std::string(bytes.status().message()));
      auto sample = UploadedInputs(**graph, *bytes);
      if (!sample.ok()) return Fail(dir, absl::StrCat("calibration sample ", k, ": ", sample.status().message()));
      options.quantization.calibration.push_back(std::move(*sample));
    }
  }
  options.pruning.channel_ratio = request.options().prune_channels();
  options.pruning.weight_ratio = request.options().prune_weights();
  for (const auto& name : request.options().prune_skip()) options.pruning.skip.insert(name);
  const bool pruned = options.pruning.channel_ratio > 0 || options.pruning.weight_ratio > 0;
  if (pruned) {
    // The validation inputs also feed the prune pass's per-layer breakdown (pruned layers
    // against the unpruned model); its own import, freed here, as for calibration.
    auto graph = import_model();
    if (!graph.ok()) return Fail(dir, std::string(graph.status().message()));
    auto sample = ValidationInputs(**graph, request.validation(), dir);
    if (!sample.ok()) return Fail(dir, absl::StrCat("validation inputs: ", sample.status().message()));
    options.pruning.samples.push_back(std::move(*sample));
  }
  const std::vector<std::string> phases = {"import", "passes", "codegen"};
  options.on_phase = [&](const std::string& phase) {
    auto at = std::find(phases.begin(), phases.end(), phase);
    Phase(phase, static_cast<double>(at - phases.begin()) * 0.2);
  };
  auto compiled = CompileModel(*model, options);
  if (!compiled.ok()) return Fail(dir, std::string(compiled.status().message()));
  const double compile_ms = MsSince(compile_start);
  if (auto s = WriteFile(dir + "/artifact.so", compiled->shared_object); !s.ok())
    return Fail(dir, std::string(s.message()));

  Phase("validating", 0.7);
  const auto validate_start = std::chrono::steady_clock::now();
  auto reference_graph = import_model();
  if (!reference_graph.ok()) return Fail(dir, std::string(reference_graph.status().message()));
  auto inputs = ValidationInputs(**reference_graph, request.validation(), dir);
  const std::string input_source = request.validation().has_input_set()
                                       ? "uploaded"
                                       : absl::StrCat("random(seed=", request.validation().seed(), ")");
  if (!inputs.ok()) return Fail(dir, absl::StrCat("validation inputs: ", inputs.status().message()));
  auto reference = RunGraph(**reference_graph, *inputs);
  if (!reference.ok()) return Fail(dir, absl::StrCat("reference interpreter: ", reference.status().message()));

  // The generated code runs here, in the job process, never in the worker itself.
  kiln_module* module = nullptr;
  kiln_session* session = nullptr;
  const kiln_module_desc* desc = nullptr;
  const std::string artifact_path = dir + "/artifact.so";
  if (kiln_module_load(artifact_path.c_str(), &module) != KILN_OK || kiln_module_describe(module, &desc) != KILN_OK) {
    return Fail(dir, absl::StrCat("loading the artifact: ", kiln_last_error()));
  }
  kiln_session_options session_options{sizeof(kiln_session_options), 1};
  if (kiln_session_create(module, &session_options, &session) != KILN_OK) return Fail(dir, kiln_last_error());
  std::vector<Tensor> outputs;
  for (int i = 0; i < desc->num_outputs; ++i) {
    const kiln_tensor_info& info = desc->outputs[i];
    outputs.emplace_back(static_cast<DType>(info.dtype), std::vector<int64_t>(info.dims, info.dims + info.rank));
  }
  std::vector<const void*> in_ptrs;
  for (const Tensor& t : *inputs) in_ptrs.push_back(t.data());
  std::vector<void*> out_ptrs;
  for (Tensor& t : outputs) out_ptrs.push_back(t.data());
  if (kiln_session_run(session, in_ptrs.data(), out_ptrs.data()) != KILN_OK) {
    return Fail(dir, absl::StrCat("running the artifact: ", kiln_last_error()));
  }

  v1::AccuracyReport report;
  report.set_schema_version(1);
  report.set_atol(request.validation().atol());
  report.set_rtol(request.validation().rtol());
  report.set_input_source(input_source);
  report.set_artifact_size_bytes(static_cast<int64_t>(compiled->shared_object.size()));
  std::string failure;
  if (outputs.size() != reference->size()) {
    failure = absl::StrCat("the artifact has ", outputs.size(), " outputs, the reference ", reference->size());
  }
  for (size_t i = 0; i < outputs.size() && i < reference->size(); ++i) {
    bool shape_ok = true;
    *report.add_outputs() =
        CompareOutput(desc->outputs[i].name, outputs[i], (*reference)[i], report.atol(), report.rtol(), &shape_ok);
    const auto& o = report.outputs(static_cast<int>(i));
    if (failure.empty() && !shape_ok)
      failure = absl::StrCat("output '", o.name(), "' differs in shape or dtype from the reference");
    if (failure.empty() && o.count_outside_tolerance() > 0) {
      failure = absl::StrCat("output '", o.name(), "': ", o.count_outside_tolerance(), " of ", o.num_elements(),
                             " elements outside atol ", report.atol(), " + rtol ", report.rtol(),
                             " x |reference| (max abs error ", o.max_abs_error(), ")");
    }
  }
  report.set_precision(int8 ? "int8" : "fp32");
  report.set_prune_channels(options.pruning.channel_ratio);
  report.set_prune_weights(options.pruning.weight_ratio);
  if (int8 || pruned) {
    // Judged against the fp32 model by top-1 agreement; atol/rtol describe fp32 builds.
    failure.clear();
    if (outputs.size() != reference->size()) {
      failure = absl::StrCat("the artifact has ", outputs.size(), " outputs, the reference ", reference->size());
    }
    double drop = 0;
    bool any_classifier = false;
    for (const auto& o : report.outputs()) {
      if (!o.has_topk()) continue;
      any_classifier = true;
      drop = std::max(drop, 100.0 * (1.0 - o.top1_agreement()));
    }
    report.set_top1_drop_points(drop);
    report.set_max_top1_drop(request.validation().max_top1_drop());
    if (failure.empty() && !any_classifier) {
      failure =
          "no classifier-shaped output ([C] or [N, C], C >= 5) to judge a lossy (int8 or pruned) build's top-1 "
          "agreement by";
    }
    if (failure.empty() && drop > request.validation().max_top1_drop()) {
      failure =
          absl::StrCat(int8 && pruned ? "int8, pruned"
                       : int8         ? "int8"
                                      : "pruned",
                       ": top-1 changed on ", drop, " % of the validation rows against the fp32 model (max_top1_drop ",
                       request.validation().max_top1_drop(), ")");
    }
  }
  report.set_passed(failure.empty());
  report.set_verdict(failure.empty() ? "pass" : failure);

  ReportContext context;
  context.action_key = task.action_key();
  context.target = task.canonical_target();
  context.compiler_version = CompilerVersion();
  context.model = request.model();
  context.input_source = input_source;
  for (size_t i = 0; i < inputs->size(); ++i)
    context.input_descriptions.push_back(Describe((*reference_graph)->inputs()[i]->name(), (*inputs)[i]));
  context.compile_report_json = compiled->report_json;
  while (!context.compile_report_json.empty() && context.compile_report_json.back() == '\n')
    context.compile_report_json.pop_back();
  context.compile_ms = compile_ms;
  if (compiled->target.is_host && !request.validation().skip_latency()) {
    Phase("measuring", 0.85);
    std::vector<double> times;
    const auto budget_start = std::chrono::steady_clock::now();
    kiln_session_run(session, in_ptrs.data(), out_ptrs.data());
    while (times.size() < 20 && (times.size() < 3 || MsSince(budget_start) < 2000)) {
      const auto start = std::chrono::steady_clock::now();
      kiln_session_run(session, in_ptrs.data(), out_ptrs.data());
      times.push_back(MsSince(start));
    }
    std::sort(times.begin(), times.end());
    context.latency_median_ms = times[times.size() / 2];
    context.latency_p90_ms =
        times[std::min(times.size() - 1, static_cast<size_t>(0.9 * static_cast<double>(times.size() - 1) + 0.5))];
    context.latency_iters = static_cast<int>(times.size());
    report.set_latency_median_ms(context.latency_median_ms);
  }
  kiln_session_destroy(session);
  kiln_module_unload(module);
  context.validate_ms = MsSince(validate_start);

  v1::CompleteRequest result;  // carries the result and timings back to the worker
  *result.mutable_result()->mutable_accuracy() = report;
  result.set_compile_ms(compile_ms);
  result.set_validate_ms(context.validate_ms);
  for (const auto& [file, bytes] :
       std::vector<std::pair<std::string, std::string>>{{"report.json", RenderReportJson(report, context)},
                                                        {"manifest.json", compiled->manifest_json},
                                                        {"result.pb", result.SerializeAsString()}}) {
    if (auto s = WriteFile(dir + "/" + file, bytes); !s.ok()) return Fail(dir, std::string(s.message()));
  }
  return kJobOk;
}

}  // namespace kiln::worker
