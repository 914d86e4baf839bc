// CompileModel: import -> passes -> codegen -> link, with the manifest and compile report
// as messages (printed to JSON by their readers, never built by hand here).
#include "kiln/compiler/compile.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/common/json.h"
#include "kiln/common/status.h"
#include "kiln/common/time.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/sparse.h"

namespace kiln {
namespace {

std::string Describe(const std::string& name, const Tensor& t) {
  return absl::StrCat(name, ": ", DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","), "]");
}

absl::StatusOr<v1::TensorInfo> TensorInfoOf(const Value* v) {
  v1::TensorInfo info;
  info.set_name(v->name());
  info.set_dtype(DTypeName(v->type().dtype));
  for (const Dim& d : v->type().shape) {
    if (d.size > INT32_MAX)
      return absl::InvalidArgumentError(absl::StrCat("'", v->name(), "' has a dimension of ", d.size, " (over 2^31)"));
    info.add_shape(static_cast<int32_t>(d.size));
  }
  return info;
}

// The samples the spec's passes read, decoded: the pass options come from the spec
// through PipelineFor, these data through the PassContext.
struct PassSamples {
  std::vector<std::vector<Tensor>> calibration;  // quantize (int8)
  std::vector<std::vector<Tensor>> pruning;      // prune's per-layer error breakdown
};

absl::StatusOr<PassSamples> SamplesFor(const v1::CompileSpec& spec, const CompileInputs& inputs, const Graph& graph) {
  PassSamples samples;
  for (size_t k = 0; k < inputs.calibration.size(); ++k) {
    auto sample = InputSetTensors(graph, inputs.calibration[k]);
    if (!sample.ok()) return Annotate(sample.status(), absl::StrCat("calibration sample ", k));
    samples.calibration.push_back(std::move(*sample));
  }
  const auto& q = spec.quantization();
  if (q.precision() == "int8") {
    if (samples.calibration.size() != static_cast<size_t>(q.calibration_size())) {
      return absl::InvalidArgumentError(absl::StrCat("the spec names ", q.calibration_size(),
                                                     " calibration samples but ", samples.calibration.size(),
                                                     " were given"));
    }
    KILN_RETURN_IF_ERROR(CheckCalibrationSamples(graph, samples.calibration));
  }
  if (spec.pruning().channels() > 0 || spec.pruning().weights() > 0) {
    samples.pruning = inputs.pruning_samples;
    if (samples.pruning.empty() && !samples.calibration.empty()) samples.pruning.push_back(samples.calibration.front());
    if (!samples.pruning.empty()) KILN_RETURN_IF_ERROR(CheckCalibrationSamples(graph, samples.pruning));
  }
  if (q.precision() != "int8") samples.calibration.clear();
  return samples;
}

// The spec's quantization settings as options of each quantize pass; settings the spec
// leaves unset keep what the pipeline text says.
absl::Status SetQuantizeOptions(const v1::CompileSpec::Quantization& q, Pipeline& pipeline) {
  for (PassInvocation& pass : pipeline) {
    if (pass.name() != "quantize") continue;
    if (!q.method().empty()) KILN_RETURN_IF_ERROR(pass.Set("method", q.method()));
    if (q.percentile() > 0) KILN_RETURN_IF_ERROR(pass.SetNumber("percentile", q.percentile()));
    if (q.keep_float_size() > 0)
      KILN_RETURN_IF_ERROR(pass.SetList("keep-float", {q.keep_float().begin(), q.keep_float().end()}));
  }
  return absl::OkStatus();
}

// Pruning runs as prune{channels=.. weights=.. skip=..}: the pipeline's own prune, else one
// inserted right after fold-batchnorm (pruning BatchNorm-folded weights).
absl::Status SetPruneOptions(const v1::CompileSpec::Pruning& p, Pipeline& pipeline) {
  PassInvocation* prune = FindInvocation(pipeline, "prune");
  if (prune == nullptr) {
    auto at = std::find_if(pipeline.begin(), pipeline.end(),
                           [](const PassInvocation& pass) { return pass.name() == "fold-batchnorm"; });
    if (at == pipeline.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pruning needs a pipeline with fold-batchnorm (prune runs after it) or with prune; got '",
                       PrintPipeline(pipeline), "'"));
    }
    prune = &*pipeline.insert(at + 1, PassInvocation(*FindPass("prune")));
  }
  if (p.channels() > 0) KILN_RETURN_IF_ERROR(prune->SetNumber("channels", p.channels()));
  if (p.weights() > 0) KILN_RETURN_IF_ERROR(prune->SetNumber("weights", p.weights()));
  if (p.skip_size() > 0) KILN_RETURN_IF_ERROR(prune->SetList("skip", {p.skip().begin(), p.skip().end()}));
  return absl::OkStatus();
}

absl::StatusOr<v1::Manifest> ManifestFor(const v1::CompileSpec& spec, const std::string& key,
                                         const std::string& pipeline, const Graph& graph, const MemoryPlan& plan) {
  v1::Manifest manifest;
  manifest.set_schema("kiln.manifest");
  manifest.set_schema_version(2);
  manifest.set_compiler_version(CompilerVersion());
  manifest.set_action_key(key);
  *manifest.mutable_spec() = spec;
  manifest.set_pipeline(pipeline);
  for (const Value* v : graph.inputs()) {
    KILN_ASSIGN_OR_RETURN(*manifest.add_inputs(), TensorInfoOf(v));
  }
  for (const Value* v : graph.outputs()) {
    KILN_ASSIGN_OR_RETURN(*manifest.add_outputs(), TensorInfoOf(v));
  }
  manifest.set_workspace_bytes(static_cast<double>(plan.arena_bytes));
  return manifest;
}

void AddLayerErrors(const std::vector<QuantizationSummary::LayerError>& layers,
                    google::protobuf::RepeatedPtrField<v1::CompileReport::LayerError>* out) {
  for (const auto& l : layers) {
    auto* e = out->Add();
    e->set_node(l.node);
    e->set_op(l.op);
    e->set_snr_db(l.snr_db);
    e->set_max_abs_error(l.max_abs_error);
    e->set_reference_scale(l.reference_scale);
  }
}

v1::CompileReport::Cost CostOf(const GraphCost& c) {
  v1::CompileReport::Cost cost;
  cost.set_parameters(static_cast<double>(c.parameters));
  cost.set_nonzero_parameters(static_cast<double>(c.nonzero_parameters));
  cost.set_flops(c.flops);
  cost.set_weight_sparsity(c.weights ? static_cast<double>(c.zero_weights) / static_cast<double>(c.weights) : 0.0);
  return cost;
}

void ReportQuantization(const QuantizationSummary& q, v1::CompileReport::Quantization* out) {
  out->set_precision("int8");
  out->set_method(q.method);
  out->set_calibration_samples(static_cast<int32_t>(q.calibration_samples));
  out->set_quantized_nodes(static_cast<int32_t>(q.quantized_nodes));
  for (const std::string& k : q.kept_float) out->add_kept_float(k);
  AddLayerErrors(q.layers_by_error, out->mutable_layers_by_error());
}

void ReportPruning(const PruningSummary& p, v1::CompileReport::Pruning* out) {
  out->set_channel_ratio(p.channel_ratio);
  out->set_weight_ratio(p.weight_ratio);
  *out->mutable_before() = CostOf(p.before);
  *out->mutable_after() = CostOf(p.after);
  out->set_pruned_layers(static_cast<int32_t>(p.pruned_layers));
  out->set_channels_before(static_cast<int32_t>(p.channels_before));
  out->set_channels_removed(static_cast<int32_t>(p.channels_removed));
  if (p.weight_ratio > 0 && p.blockable_layers > 0) {
    out->set_kernels(absl::StrFormat(
        "block-sparse (sparse_matmul) for %lld of %lld MatMul/Gemm weights (1x16 blocks %.1f%% nonzero; sparse below "
        "%.0f%%), dense for the rest",
        static_cast<long long>(p.sparse_layers), static_cast<long long>(p.blockable_layers), 100.0 * p.block_density,
        100.0 * kSparseMaxBlockDensity));
  } else {
    out->set_kernels("dense (zeroed weights are not skipped)");
  }
  out->set_sparse_layers(static_cast<int32_t>(p.sparse_layers));
  out->set_block_density(p.block_density);
  for (const std::string& k : p.kept_whole) out->add_kept_whole(k);
  AddLayerErrors(p.layers_by_error, out->mutable_layers_by_error());
}

void ReportTuning(const TuneResult& t, const std::string& cache, v1::CompileReport::Tuning* out) {
  out->set_seconds(t.seconds);
  out->set_measured(t.measured);
  out->set_from_cache(t.from_cache);
  out->set_over_budget(t.over_budget);
  out->set_cache(cache);
  for (const TuneDecision& d : t.decisions) {
    auto* decision = out->add_decisions();
    decision->set_node(d.node);
    decision->set_choice(d.choice);
    decision->set_timings_ms(d.timings);
    decision->set_from_cache(d.from_cache);
  }
}

v1::CompileReport ReportFor(const v1::CompileSpec& spec, const CompileResult& result, int64_t nodes,
                            const ArtifactBytes& artifact, const std::string& pipeline, const std::string& tune_cache) {
  v1::CompileReport report;
  report.set_schema("kiln.compile-report");
  report.set_schema_version(2);
  report.set_compiler_version(CompilerVersion());
  report.set_action_key(result.action_key);
  *report.mutable_target() = spec.target();
  report.set_pipeline(pipeline);
  report.mutable_timings_ms()->set_import(result.import_ms);
  report.mutable_timings_ms()->set_passes(result.passes_ms);
  report.mutable_timings_ms()->set_codegen(result.codegen_ms);
  for (const auto& [phase, ms] : artifact.phase_ms) (*report.mutable_codegen_phases_ms())[phase] = ms;
  if (spec.tuning().enabled()) ReportTuning(result.tuning, tune_cache, report.mutable_tuning());
  if (spec.quantization().precision() == "int8") ReportQuantization(result.quantization, report.mutable_quantization());
  if (spec.pruning().channels() > 0 || spec.pruning().weights() > 0)
    ReportPruning(result.pruning, report.mutable_pruning());
  if (spec.quantization().precision() == "bf16") {
    const std::string reason = Bf16Unavailable(spec.target());
    report.mutable_bf16()->set_ran(reason.empty() ? "bf16" : "fp32");
    report.mutable_bf16()->set_reason(reason);
    report.mutable_bf16()->set_bf16_nodes(static_cast<int32_t>(result.bf16_nodes));
  }
  for (const PassStats& p : result.passes) {
    auto* pass = report.add_passes();
    pass->set_name(p.name);
    pass->set_changed(p.changed);
    pass->set_time_ms(p.time_ms);
    pass->set_nodes_before(static_cast<int32_t>(p.nodes_before));
    pass->set_nodes_after(static_cast<int32_t>(p.nodes_after));
  }
  const MemoryPlan& plan = result.memory_plan;
  auto* memory = report.mutable_memory_plan();
  memory->set_arena_bytes(static_cast<double>(plan.arena_bytes));
  memory->set_naive_bytes(static_cast<double>(plan.naive_bytes));
  memory->set_in_place(static_cast<int32_t>(plan.in_place));
  memory->set_views(static_cast<int32_t>(plan.views));
  memory->set_concats_in_place(static_cast<int32_t>(plan.concats_in_place));
  report.set_nodes(static_cast<int32_t>(nodes));
  report.set_gemm_tile(artifact.gemm_tile);
  report.set_int8_dot(artifact.int8_dot);
  report.set_object_bytes(static_cast<double>(artifact.object_bytes));
  report.set_artifact_bytes(static_cast<double>(artifact.artifact_bytes));
  auto* size = report.mutable_artifact_size();
  size->set_weights_given(static_cast<double>(artifact.size.weights_given));
  size->set_weights_added(static_cast<double>(artifact.size.weights_added));
  size->set_weights_alignment(static_cast<double>(artifact.size.weights_alignment));
  size->set_code(static_cast<double>(artifact.size.code));
  size->set_tables(static_cast<double>(artifact.size.tables));
  size->set_elf_overhead(static_cast<double>(artifact.size.elf_overhead));
  return report;
}

// Passes, then tuning (which may re-plan memory): fills result.passes, tuning, memory plan
// and the passes' summaries.
absl::Status RunPasses(const v1::CompileSpec& spec, const CompileInputs& inputs, const Pipeline& pipeline,
                       PassSamples samples, Graph& graph, CompileResult& result) {
  PassContext context;
  context.calibration_samples = std::move(samples.calibration);
  context.pruning_samples = std::move(samples.pruning);
  if (inputs.on_phase) inputs.on_phase("passes");
  Stopwatch watch;
  // Whatever the pipeline: codegen lowers most ops on f16 and bf16 in f32 only. Listed in
  // the passes when it changed the graph.
  KILN_ASSIGN_OR_RETURN(const Pipeline legalize, ParsePipeline("legalize-float16"));
  auto legalized = RunPipeline(graph, legalize, inputs.print, context);
  if (!legalized.ok()) return Annotate(legalized.status(), inputs.model_label);
  auto stats = RunPipeline(graph, pipeline, inputs.print, context);
  if (!stats.ok()) return Annotate(stats.status(), inputs.model_label);
  result.passes = *stats;
  if (legalized->front().changed) result.passes.insert(result.passes.begin(), legalized->front());
  result.passes_ms = watch.ElapsedMs();
  if (spec.tuning().enabled()) {
    if (!result.target.is_host) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tuning.enabled times candidates on this machine, so it needs a target that runs here (host); target '",
          spec.target().preset(), "' (", CanonicalTarget(spec.target()), ") does not"));
    }
    if (inputs.on_phase) inputs.on_phase("tune");
    TuneOptions tune;
    tune.enabled = true;
    tune.budget_seconds = spec.tuning().budget_seconds();
    tune.cache_path = inputs.tune_cache_path;
    auto tuning = TuneGraph(graph, result.target, tune);
    if (!tuning.ok()) return Annotate(tuning.status(), inputs.model_label);
    result.tuning = std::move(*tuning);
    // A node tuned from Winograd to the GEMM no longer needs scratch: plan again.
    if (context.analyses.GetIfCached<MemoryPlanAnalysis>() != nullptr) {
      context.analyses.Invalidate();
      context.analyses.Get<MemoryPlanAnalysis>(graph);
    }
  }
  result.memory_plan = PlannedOrNaiveMemory(graph, context);
  result.quantization = context.quantization_summary;
  result.pruning = context.pruning_summary;
  // The weights that run block-sparse, counted on the final graph: a later pass may have
  // changed the node (int8 quantization makes it a QLinearMatMul, which stays dense).
  if (result.pruning.weight_ratio > 0) {
    result.pruning.sparse_layers = 0;
    for (const Node* node : graph.nodes()) result.pruning.sparse_layers += RunsSparse(*node);
  }
  result.bf16_nodes = context.bf16_nodes;
  return absl::OkStatus();
}

// A failed compile's error with every problem of the model, not only the first: the
// model is checked again (CheckOnnxModel) and, where that finds problems, they replace the
// message; otherwise (the failure is not a node's) the error stays as it was.
absl::Status WithAllProblems(const absl::Status& failure, std::string_view model_bytes,
                             const ImportOptions& import_options) {
  auto problems = CheckOnnxModel(model_bytes, import_options);
  if (!problems.ok() || problems->empty()) return failure;
  return absl::Status(failure.code(), absl::StrCat(import_options.model_label, ": ", FormatProblems(*problems)));
}

}  // namespace

absl::StatusOr<CompileResult> CompileModel(const v1::CompileSpec& given, const CompileInputs& inputs) {
  v1::CompileSpec spec = given;
  KILN_RETURN_IF_ERROR(Normalize(spec));
  CompileResult result;
  result.action_key = ActionKey(spec, CompilerVersion());
  result.target = ToTargetSpec(spec.target());
  KILN_ASSIGN_OR_RETURN(const Pipeline passes, PipelineFor(spec));
  const std::string pipeline = PrintPipeline(passes);

  if (inputs.on_phase) inputs.on_phase("import");
  Stopwatch watch;
  ImportOptions import_options;
  import_options.model_label = inputs.model_label;
  for (const v1::InputShape& shape : spec.input_shapes())
    import_options.input_shapes[shape.name()] = std::vector<int64_t>(shape.dims().begin(), shape.dims().end());
  import_options.external_data = inputs.external_data;
  // The graph owns the weights once imported; the parsed model holds them until then, so the
  // model's pages can go as soon as it is parsed (read again only to list a failure's problems).
  if (inputs.model_file != nullptr) import_options.after_parse = [&] { inputs.model_file->ReleaseResidentPages(); };
  auto imported = ImportOnnxModel(inputs.model_bytes, import_options);
  if (!imported.ok()) return WithAllProblems(imported.status(), inputs.model_bytes, import_options);
  std::unique_ptr<Graph> graph = std::move(*imported);
  result.import_ms = watch.ElapsedMs();
  if (inputs.print.print_stream && inputs.print.print_after_all) {
    *inputs.print.print_stream << "// ----- IR after import -----\n" << PrintGraph(*graph);
  }

  KILN_ASSIGN_OR_RETURN(PassSamples samples, SamplesFor(spec, inputs, *graph));
  KILN_RETURN_IF_ERROR(RunPasses(spec, inputs, passes, std::move(samples), *graph, result));
  KILN_ASSIGN_OR_RETURN(result.manifest, ManifestFor(spec, result.action_key, pipeline, *graph, result.memory_plan));

  if (inputs.on_phase) inputs.on_phase("codegen");
  watch.Restart();
  CodegenOptions codegen;
  codegen.target = result.target;
  KILN_ASSIGN_OR_RETURN(codegen.manifest_json, ToJson(result.manifest));
  codegen.compiler_version = CompilerVersion();
  codegen.output_path = inputs.output_path;
  // Test only: see CodegenOptions::inject_kernel_bug (tests/unit/validation_test.cc).
  if (const char* kernel = std::getenv("KILN_TEST_INJECT_KERNEL_BUG")) codegen.inject_kernel_bug = kernel;
  auto objects = CompileArtifactObjects(*graph, result.memory_plan, codegen);
  if (!objects.ok()) {
    return WithAllProblems(Annotate(objects.status(), inputs.model_label), inputs.model_bytes, import_options);
  }
  // The weights are in the weights object now: the graph goes before LLD maps that object
  // and writes the artifact, which hold the weights twice more.
  const int64_t nodes = static_cast<int64_t>(graph->num_nodes());
  graph.reset();
#ifdef __GLIBC__
  // Weights of under 32 MB come from malloc's heap once glibc has raised its mmap threshold
  // (it does on the first large free), and a heap with holes keeps them resident: give the
  // free pages back now.
  malloc_trim(0);
#endif
  auto artifact = LinkArtifact(std::move(*objects), codegen);
  if (!artifact.ok()) return Annotate(artifact.status(), inputs.model_label);
  result.codegen_ms = watch.ElapsedMs();
  result.report = ReportFor(spec, result, nodes, *artifact, pipeline, inputs.tune_cache_path);
  result.shared_object = std::move(artifact->shared_object);
  result.artifact_bytes = artifact->artifact_bytes;
  return result;
}

absl::StatusOr<std::vector<Tensor>> InputSetTensors(const Graph& graph, std::string_view bytes) {
  v1::InputSet set;
  if (!set.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return absl::InvalidArgumentError("the input set blob is not a kiln.v1.InputSet");
  if (set.inputs_size() != static_cast<int>(graph.inputs().size())) {
    return absl::InvalidArgumentError(absl::StrCat("the input set has ", set.inputs_size(),
                                                   " tensors but the model has ", graph.inputs().size(), " inputs"));
  }
  std::vector<Tensor> inputs(graph.inputs().size());
  std::vector<bool> filled(graph.inputs().size(), false);
  for (int i = 0; i < set.inputs_size(); ++i) {
    std::string proto_name;
    auto tensor = ParseTensorProto(set.inputs(i).tensor_proto(), &proto_name);
    if (!tensor.ok()) return Annotate(tensor.status(), absl::StrCat("input set tensor ", i));
    const std::string name = !set.inputs(i).name().empty() ? set.inputs(i).name() : proto_name;
    size_t slot = static_cast<size_t>(i);
    for (size_t k = 0; !name.empty() && k < graph.inputs().size(); ++k) {
      // Unknown names fall back to position (TensorProto files often carry no useful name).
      if (graph.inputs()[k]->name() == name) slot = k;
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

absl::Status CheckCalibrationSamples(const Graph& graph, const std::vector<std::vector<Tensor>>& samples) {
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        "--precision int8 needs calibration samples (--calibration DIR): activation ranges come from them");
  }
  for (size_t s = 0; s < samples.size(); ++s) {
    if (samples[s].size() != graph.inputs().size()) {
      return absl::InvalidArgumentError(absl::StrCat("calibration sample ", s, " has ", samples[s].size(),
                                                     " tensors; the model has ", graph.inputs().size(), " inputs"));
    }
    // A symbolic dim (a dynamic batch) takes any size, the same wherever its name recurs.
    std::map<std::string, int64_t> symbols;
    for (size_t i = 0; i < samples[s].size(); ++i) {
      const Value* in = graph.inputs()[i];
      const Tensor& t = samples[s][i];
      const TensorType& type = in->type();
      bool fits = t.is_tensor() && type.is_tensor() && t.dtype() == type.dtype && type.has_shape &&
                  t.rank() == static_cast<int64_t>(type.shape.size());
      for (size_t d = 0; fits && d < type.shape.size(); ++d) {
        const Dim& dim = type.shape[d];
        if (dim.known()) {
          fits = t.dims()[d] == dim.size;
        } else if (!dim.symbol.empty() && dim.symbol != "?") {
          fits = symbols.emplace(dim.symbol, t.dims()[d]).first->second == t.dims()[d];
        }
      }
      if (!fits) {
        return absl::InvalidArgumentError(absl::StrCat("calibration sample ", s, ", input ", i, " ('", in->name(),
                                                       "'): ", DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","),
                                                       "] where the model takes ", PrintType(in->type())));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Pipeline> PipelineFor(const v1::CompileSpec& spec) {
  const bool int8 = spec.quantization().precision() == "int8";
  KILN_ASSIGN_OR_RETURN(Pipeline pipeline, ParsePipeline(spec.pipeline().empty() ? kDefaultPipeline : spec.pipeline()));
  // The default pipeline asked for by name with int8 means int8's (as before the spec).
  if (int8 && PrintPipeline(pipeline) == kDefaultPipeline) {
    KILN_ASSIGN_OR_RETURN(pipeline, ParsePipeline(kInt8Pipeline));
  }
  if (int8) KILN_RETURN_IF_ERROR(SetQuantizeOptions(spec.quantization(), pipeline));
  // bf16 where the target has vdpbf16ps; elsewhere fp32 (the report says why), without the pass.
  const bool bf16 = spec.quantization().precision() == "bf16" && Bf16Unavailable(spec.target()).empty();
  if (bf16 && PrintPipeline(pipeline) == kDefaultPipeline) {
    KILN_ASSIGN_OR_RETURN(pipeline, ParsePipeline(kBf16Pipeline));
  }
  if (!bf16) {
    pipeline.erase(std::remove_if(pipeline.begin(), pipeline.end(),
                                  [](const PassInvocation& pass) { return pass.name() == "bf16"; }),
                   pipeline.end());
  }
  if (spec.pruning().channels() > 0 || spec.pruning().weights() > 0)
    KILN_RETURN_IF_ERROR(SetPruneOptions(spec.pruning(), pipeline));
  // The blocked layout's pointwise tiles take AVX-512's 32 registers; with them, ResNet-style
  // chains run blocked too (layout.cc), unless the pipeline says otherwise, or bf16 runs:
  // its pass (after layout) marks Convs, which blocked ones no longer are.
  PassInvocation* layout = FindInvocation(pipeline, "layout");
  if (layout != nullptr && !bf16 && layout->Choice("dense-runs") == "auto" &&
      TargetHasFeature(spec.target(), "+avx512f")) {
    KILN_RETURN_IF_ERROR(layout->Set("dense-runs", "on"));
  }
  return pipeline;
}

}  // namespace kiln
