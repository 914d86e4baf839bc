// ONNX backend node-test conformance runner. For each data/node/<test>/: compile
// model.onnx for the host, run every test_data_set_* through the artifact and compare with
// the expected outputs (floats: |got - want| <= atol + rtol*|want|, rtol 1e-3, atol 1e-5;
// integers and bools exact). Prints passed / failed / unsupported counts.
//
//   kiln-conformance [--data DIR] [--filter SUBSTR] [--pass-list FILE] [--write-pass-list FILE] [--verbose]
//                    [--reference | --interpreter]
//
// With --reference it checks the reference evaluator instead: each model is imported and
// evaluated by kiln::ReferenceRunGraph, so the reference is itself held to the suite. A
// model refused for a non-constant shape input is retried with its inputs as initializers.
// With --interpreter it checks the interpreter (kiln::RunGraph: the host walk calibration,
// pruning and folding use) the same way, on the imported graph with no pass run.
// With --pass-list, a test on the list that does not pass is a regression: exit 1.
//
// Random ops (RandomUniform, RandomNormal, their *Like forms, Bernoulli, Multinomial): ONNX
// leaves the generator to the implementation, and the node tests' expected outputs were
// drawn with numpy's, which no other implementation reproduces (ONNX Runtime skips these
// tests). A test whose graph contains a random op is therefore checked by the random-output
// rule instead of by value: each output must have the expected dtype and shape, finite
// values, and values in the range of the op that produced it (Bernoulli {0, 1},
// RandomUniform [low, high], Multinomial non-negative integers); an output computed from a
// random op by other ops (Bernoulli's function body: RandomUniformLike, Greater, Cast) must
// be 0 or 1 wherever the expected output is all 0 and 1. The summary says how many tests
// were checked so.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/common/cli.h"
#include "kiln/common/file.h"
#include "kiln/common/status.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/reference.h"
#include "kiln/compiler/runtime_tensor.h"
#include "kiln/runtime.h"
#include "onnx/onnx_pb.h"

namespace fs = std::filesystem;

namespace {

enum class Outcome { kPass, kFail, kUnsupported };

std::string CompareTensors(const kiln::Tensor& got, const kiln::Tensor& want);

// Sequences and optionals: the same kind, as many elements, each equal.
std::string Compare(const kiln::Tensor& got, const kiln::Tensor& want) {
  if (got.is_tensor() && want.is_tensor()) return CompareTensors(got, want);
  if (got.kind() != want.kind()) {
    return absl::StrCat("a ", kiln::ValueKindName(got.kind()), ", want a ", kiln::ValueKindName(want.kind()));
  }
  if (got.elements().size() != want.elements().size()) {
    return absl::StrCat(got.elements().size(), " elements, want ", want.elements().size());
  }
  for (size_t i = 0; i < got.elements().size(); ++i) {
    std::string diff = Compare(got.elements()[i], want.elements()[i]);
    if (!diff.empty()) return absl::StrCat("element ", i, ": ", diff);
  }
  return "";
}

std::string CompareTensors(const kiln::Tensor& got, const kiln::Tensor& want) {
  // ONNX 1.12 writes bfloat16 expectations as their bits in uint16 (numpy has no bfloat16):
  // those compare bit for bit.
  if (got.dtype() == kiln::DType::kBFloat16 && want.dtype() == kiln::DType::kUInt16 && got.dims() == want.dims()) {
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      if (got.data_as<uint16_t>()[i] != want.data_as<uint16_t>()[i]) {
        return absl::StrCat("element ", i, ": got bits ", got.data_as<uint16_t>()[i], ", want ",
                            want.data_as<uint16_t>()[i]);
      }
    }
    return "";
  }
  if (got.dtype() != want.dtype())
    return absl::StrCat("dtype ", kiln::DTypeName(got.dtype()), " vs ", kiln::DTypeName(want.dtype()));
  if (got.dims() != want.dims()) return "shape differs";
  if (got.dtype() == kiln::DType::kString) {  // texts compare byte for byte
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      if (got.GetString(i) != want.GetString(i))
        return absl::StrCat("element ", i, ": got '", std::string(got.GetString(i)), "', want '",
                            std::string(want.GetString(i)), "'");
    }
    return "";
  }
  const bool is_float = kiln::IsFloat(got.dtype());
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    if (is_float) {
      const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
      if (std::isnan(w) && std::isnan(g)) continue;
      if (std::isinf(w) && g == w) continue;
      if (!(std::fabs(g - w) <= 1e-5 + 1e-3 * std::fabs(w)))
        return absl::StrCat("element ", i, ": got ", g, ", want ", w);
    } else if (got.GetAsInt64(i) != want.GetAsInt64(i)) {
      return absl::StrCat("element ", i, ": got ", got.GetAsInt64(i), ", want ", want.GetAsInt64(i));
    }
  }
  return "";
}

// What the random-output rule accepts of one graph output (see the header).
struct RandomRange {
  double low = -std::numeric_limits<double>::infinity(), high = std::numeric_limits<double>::infinity();
  bool integral = false;
  bool indicator_if_expected = false;  // not a random op's own output: 0/1 where the expected is
};

bool IsRandomOp(const std::string& op) {
  static const std::set<std::string> ops = {"Bernoulli",        "Multinomial",   "RandomNormal",
                                            "RandomNormalLike", "RandomUniform", "RandomUniformLike"};
  return ops.count(op) != 0;
}

float FloatAttr(const onnx::NodeProto& node, const std::string& name, float fallback) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name) return attr.f();
  }
  return fallback;
}

// The random-output rule's range for each graph output, or nullopt when the graph has no
// random op (its outputs are compared by value).
std::optional<std::vector<RandomRange>> RandomOutputRanges(const std::string& model_bytes) {
  onnx::ModelProto proto;
  if (!proto.ParseFromString(model_bytes)) return std::nullopt;
  std::map<std::string, const onnx::NodeProto*> producer;
  bool random = false;
  for (const onnx::NodeProto& node : proto.graph().node()) {
    random = random || IsRandomOp(node.op_type());
    for (const std::string& out : node.output()) producer[out] = &node;
  }
  if (!random) return std::nullopt;
  std::vector<RandomRange> ranges;
  for (const auto& output : proto.graph().output()) {
    RandomRange range;
    const auto it = producer.find(output.name());
    const std::string op = it == producer.end() ? "" : it->second->op_type();
    if (op == "Bernoulli") {
      range.low = 0, range.high = 1, range.integral = true;
    } else if (op == "RandomUniform" || op == "RandomUniformLike") {
      range.low = FloatAttr(*it->second, "low", 0.0f), range.high = FloatAttr(*it->second, "high", 1.0f);
    } else if (op == "Multinomial") {
      range.low = 0, range.integral = true;
    } else if (!IsRandomOp(op)) {
      range.indicator_if_expected = true;
    }
    ranges.push_back(range);
  }
  return ranges;
}

// The random-output rule for one output: "" when `got` passes it.
std::string CompareRandom(const kiln::Tensor& got, const kiln::Tensor& want, const RandomRange& range) {
  if (got.dtype() != want.dtype())
    return absl::StrCat("dtype ", kiln::DTypeName(got.dtype()), " vs ", kiln::DTypeName(want.dtype()));
  if (got.dims() != want.dims()) return "shape differs";
  bool indicator = range.indicator_if_expected;
  for (int64_t i = 0; i < want.num_elements() && indicator; ++i) {
    indicator = want.GetAsDouble(i) == 0 || want.GetAsDouble(i) == 1;
  }
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double g = got.GetAsDouble(i);
    const bool in_range = std::isfinite(g) && g >= range.low && g <= range.high &&
                          (!range.integral || g == std::floor(g)) && (!indicator || g == 0 || g == 1);
    if (!in_range) return absl::StrCat("element ", i, ": ", g, " is outside the random op's range");
  }
  return "";
}

// One test_data_set_*: its inputs and expected outputs.
struct DataSet {
  std::string name;
  std::vector<kiln::Tensor> inputs, expected;
};

// A value's file: a TensorProto, or a SequenceProto / OptionalProto where the model declares
// a sequence or an optional.
absl::StatusOr<kiln::Tensor> ReadTensor(const fs::path& path, kiln::ValueKind kind) {
  auto data = kiln::ReadFile(path.string());
  if (!data.ok()) return data.status();
  return kiln::ParseValueProto(*data, kind);
}

kiln::ValueKind KindOf(const onnx::TypeProto& type) {
  if (type.has_sequence_type()) return kiln::ValueKind::kSequence;
  if (!type.has_optional_type()) return kiln::ValueKind::kTensor;
  return type.optional_type().elem_type().has_sequence_type() ? kiln::ValueKind::kOptionalSequence
                                                              : kiln::ValueKind::kOptional;
}

// The kinds of the model's graph inputs (initializers aside) and outputs, as declared.
void DeclaredKinds(const fs::path& dir, std::vector<kiln::ValueKind>& inputs, std::vector<kiln::ValueKind>& outputs) {
  onnx::ModelProto model;
  auto bytes = kiln::ReadFile((dir / "model.onnx").string());
  if (!bytes.ok() || !model.ParseFromString(*bytes)) return;
  std::set<std::string> initialized;
  for (const auto& init : model.graph().initializer()) initialized.insert(init.name());
  for (const auto& in : model.graph().input()) {
    if (!initialized.count(in.name())) inputs.push_back(KindOf(in.type()));
  }
  for (const auto& out : model.graph().output()) outputs.push_back(KindOf(out.type()));
}

absl::StatusOr<std::vector<DataSet>> ReadDataSets(const fs::path& dir, size_t num_inputs, size_t num_outputs) {
  std::vector<kiln::ValueKind> input_kinds, output_kinds;
  DeclaredKinds(dir, input_kinds, output_kinds);
  auto kind = [](const std::vector<kiln::ValueKind>& kinds, size_t i) {
    return i < kinds.size() ? kinds[i] : kiln::ValueKind::kTensor;
  };
  std::vector<DataSet> sets;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory() || entry.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
    DataSet set{entry.path().filename().string(), {}, {}};
    for (size_t i = 0; i < num_inputs; ++i) {
      KILN_ASSIGN_OR_RETURN(kiln::Tensor t,
                            ReadTensor(entry.path() / absl::StrCat("input_", i, ".pb"), kind(input_kinds, i)));
      set.inputs.push_back(std::move(t));
    }
    for (size_t i = 0; i < num_outputs; ++i) {
      KILN_ASSIGN_OR_RETURN(kiln::Tensor t,
                            ReadTensor(entry.path() / absl::StrCat("output_", i, ".pb"), kind(output_kinds, i)));
      set.expected.push_back(std::move(t));
    }
    sets.push_back(std::move(set));
  }
  if (sets.empty()) return absl::NotFoundError("no test_data_set_* directories");
  return sets;
}

// "" when every output matches (by the random-output rule where `random` is set), else
// what differs first.
std::string CompareOutputs(const DataSet& set, const std::vector<kiln::Tensor>& outputs,
                           const std::optional<std::vector<RandomRange>>& random) {
  for (size_t i = 0; i < outputs.size() && i < set.expected.size(); ++i) {
    std::string diff = random && i < random->size() ? CompareRandom(outputs[i], set.expected[i], (*random)[i])
                                                    : Compare(outputs[i], set.expected[i]);
    if (!diff.empty()) return absl::StrCat(set.name, " output ", i, ": ", diff);
  }
  return outputs.size() == set.expected.size() ? "" : absl::StrCat(set.name, ": wrong number of outputs");
}

// Refusals (unsupported op, dtype, dynamic shape) are "unsupported"; other errors fail.
Outcome Refused(const absl::Status& status, std::string& detail) {
  detail = std::string(status.message());
  const auto code = status.code();
  return code == absl::StatusCode::kUnimplemented || code == absl::StatusCode::kInvalidArgument ||
                 code == absl::StatusCode::kFailedPrecondition
             ? Outcome::kUnsupported
             : Outcome::kFail;
}

// Tests checked by the random-output rule (their graph has a random op), for the summary.
int random_rule_tests = 0;

// Runs every data set through `run` and compares with the expected outputs (by the
// random-output rule when `model_bytes` has a random op).
Outcome RunDataSets(const fs::path& dir, size_t num_inputs, size_t num_outputs,
                    const std::function<absl::StatusOr<std::vector<kiln::Tensor>>(const DataSet&)>& run,
                    const std::string& model_bytes, std::string& detail) {
  const std::optional<std::vector<RandomRange>> random = RandomOutputRanges(model_bytes);
  if (random) ++random_rule_tests;
  auto sets = ReadDataSets(dir, num_inputs, num_outputs);
  if (!sets.ok()) {
    detail = std::string(sets.status().message());
    return Outcome::kFail;
  }
  for (const DataSet& set : *sets) {
    auto outputs = run(set);
    if (!outputs.ok()) {
      detail = std::string(outputs.status().message());
      return Outcome::kFail;
    }
    detail = CompareOutputs(set, *outputs, random);
    if (!detail.empty()) return Outcome::kFail;
  }
  return Outcome::kPass;
}

// An input as the model declares it (`dtype`, static `dims`). Some ONNX 1.12 cases store an
// input flattened, a bfloat16 one as its uint16 bits, or (CastLike's `like`, read for its
// type only) with fewer elements than declared: where the dims are static they stand, over
// a copy (zero-padded when the count differs) kept in `store`. Otherwise `t` as it is.
const kiln::Tensor& AsDeclared(const kiln::Tensor& t, kiln::DType dtype, const std::vector<int64_t>& dims,
                               std::deque<kiln::Tensor>& store) {
  const bool fixed = std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 0; });
  const bool bf16_bits = dtype == kiln::DType::kBFloat16 && t.dtype() == kiln::DType::kUInt16;
  if (t.dtype() == kiln::DType::kString) return t;  // its pointers belong to its own texts
  if (!fixed || !(bf16_bits || dtype == t.dtype()) || (dtype == t.dtype() && dims == t.dims())) return t;
  kiln::Tensor& copy = store.emplace_back(dtype, dims);
  std::memcpy(copy.data(), t.data(), static_cast<size_t>(std::min(t.size_bytes(), copy.size_bytes())));
  return copy;
}

Outcome RunCompiled(const fs::path& dir, const std::string& work, std::string& detail) {
  auto bytes = kiln::ReadFile((dir / "model.onnx").string());
  if (!bytes.ok()) {
    detail = std::string(bytes.status().message());
    return Outcome::kFail;
  }
  kiln::v1::CompileSpec spec;
  *spec.mutable_model() = kiln::DigestOf(*bytes);
  kiln::CompileInputs inputs;
  inputs.model_bytes = *bytes;
  inputs.model_label = dir.filename().string();
  const std::string so_path = work + "/model.so";
  inputs.output_path = so_path;  // the linker writes the artifact there
  auto result = kiln::CompileModel(spec, inputs);
  if (!result.ok()) return Refused(result.status(), detail);
  kiln_module* module = nullptr;
  const kiln_module_desc* desc = nullptr;
  kiln_session* session = nullptr;
  if (kiln_module_load(so_path.c_str(), &module) != KILN_OK || kiln_module_describe(module, &desc) != KILN_OK ||
      kiln_session_create(module, nullptr, &session) != KILN_OK) {
    detail = kiln_last_error();
    kiln_module_unload(module);
    return Outcome::kFail;
  }
  // The shaped API: every artifact, and the only one for run-time shapes.
  auto run = [&](const DataSet& set) -> absl::StatusOr<std::vector<kiln::Tensor>> {
    std::vector<kiln_tensor> in, out(static_cast<size_t>(desc->num_outputs));
    std::deque<kiln::Tensor> padded;
    kiln::RuntimeSequences sequences;
    for (size_t i = 0; i < set.inputs.size() && i < static_cast<size_t>(desc->num_inputs); ++i) {
      const kiln_tensor_info& info = desc->inputs[i];
      if (info.kind != KILN_VALUE_TENSOR) {
        in.push_back(kiln::RuntimeValue(set.inputs[i], sequences));
        continue;
      }
      in.push_back(kiln::RuntimeView(AsDeclared(set.inputs[i], static_cast<kiln::DType>(info.dtype),
                                                std::vector<int64_t>(info.dims, info.dims + info.rank), padded)));
    }
    if (kiln_session_run_shaped(session, in.data(), out.data()) != KILN_OK) {
      return absl::InternalError(kiln_last_error());
    }
    std::vector<kiln::Tensor> outputs;
    for (size_t i = 0; i < out.size(); ++i) outputs.push_back(kiln::FromRuntimeValue(out[i], desc->outputs[i]));
    return outputs;
  };
  const Outcome outcome = RunDataSets(dir, desc->num_inputs, desc->num_outputs, run, *bytes, detail);
  kiln_session_destroy(session);
  kiln_module_unload(module);
  return outcome;
}

// `model` with its graph inputs turned into initializers holding `set`'s inputs. Kiln imports
// static shapes only, so a node test whose shape-deciding inputs (CumSum's axis, Pad's pads,
// Range's limits) are graph inputs is refused; bound, the reference can still be checked on it.
absl::StatusOr<std::string> BindInputs(const std::string& model, const DataSet& set) {
  onnx::ModelProto proto;
  if (!proto.ParseFromString(model)) return absl::InvalidArgumentError("model.onnx does not parse");
  std::set<std::string> initialized;
  for (const auto& init : proto.graph().initializer()) initialized.insert(init.name());
  onnx::GraphProto* graph = proto.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  size_t next = 0;
  for (const onnx::ValueInfoProto& input : graph->input()) {
    if (initialized.count(input.name())) {
      *kept.Add() = input;
      continue;
    }
    if (next >= set.inputs.size()) return absl::InvalidArgumentError("more graph inputs than input_*.pb files");
    if (!graph->add_initializer()->ParseFromString(kiln::SerializeTensorProto(set.inputs[next++], input.name()))) {
      return absl::InternalError("an input does not serialize as a TensorProto");
    }
  }
  graph->mutable_input()->Swap(&kept);
  return proto.SerializeAsString();
}

// A node test the importer refused (`import_status`) for a non-constant input, run with each
// data set's inputs bound as initializers; still unsupported when the importer refuses that.
Outcome RunReferenceBound(const fs::path& dir, const std::string& bytes, const absl::Status& import_status,
                          bool interpreter, std::string& detail) {
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) return Refused(import_status, detail);
  size_t num_inputs = 0;
  std::set<std::string> initialized;
  for (const auto& init : proto.graph().initializer()) initialized.insert(init.name());
  for (const auto& input : proto.graph().input()) num_inputs += initialized.count(input.name()) ? 0 : 1;
  bool refused = false;
  absl::Status refusal;
  auto run = [&](const DataSet& set) -> absl::StatusOr<std::vector<kiln::Tensor>> {
    KILN_ASSIGN_OR_RETURN(std::string bound, BindInputs(bytes, set));
    kiln::ImportOptions bound_options;
    bound_options.model_label = dir.filename().string();
    auto bound_graph = kiln::ImportOnnxModel(bound, bound_options);
    if (!bound_graph.ok()) {
      refused = true, refusal = bound_graph.status();
      return bound_graph.status();
    }
    auto outputs = interpreter ? kiln::RunGraph(**bound_graph, {}) : kiln::ReferenceRunGraph(**bound_graph, {});
    if (!outputs.ok() && outputs.status().code() == absl::StatusCode::kUnimplemented) {
      refused = true, refusal = outputs.status();
    }
    return outputs;
  };
  const Outcome outcome = RunDataSets(dir, num_inputs, proto.graph().output_size(), run, bytes, detail);
  if (refused) return Refused(refusal, detail);
  if (outcome == Outcome::kPass) detail = "(inputs bound as initializers)";
  return outcome;
}

// The reference's self-check: the imported graph evaluated by kiln::ReferenceRunGraph (or,
// `interpreter`, by kiln::RunGraph); a model the importer refuses for a non-constant input
// is retried with its inputs bound.
Outcome RunReference(const fs::path& dir, bool interpreter, std::string& detail) {
  auto bytes = kiln::ReadFile((dir / "model.onnx").string());
  if (!bytes.ok()) {
    detail = std::string(bytes.status().message());
    return Outcome::kFail;
  }
  kiln::ImportOptions options;
  options.model_label = dir.filename().string();
  auto graph = kiln::ImportOnnxModel(*bytes, options);
  if (graph.ok()) {
    for (const kiln::Node* node : (*graph)->nodes()) {
      if (!interpreter && !kiln::HasReference(node->op())) {
        detail = absl::StrCat("the reference has no evaluation of ", node->op());
        return Outcome::kUnsupported;
      }
    }
    // As the graph declares them (AsDeclared).
    auto run = [&](const DataSet& set) {
      std::deque<kiln::Tensor> store;
      std::vector<kiln::Tensor> inputs;
      for (size_t i = 0; i < set.inputs.size(); ++i) {
        const kiln::TensorType* type =
            i < (*graph)->inputs().size() && (*graph)->inputs()[i]->type().has_shape && set.inputs[i].is_tensor()
                ? &(*graph)->inputs()[i]->type()
                : nullptr;
        inputs.push_back(type ? AsDeclared(set.inputs[i], type->dtype, type->StaticDims(), store) : set.inputs[i]);
      }
      return interpreter ? kiln::RunGraph(**graph, inputs) : kiln::ReferenceRunGraph(**graph, inputs);
    };
    return RunDataSets(dir, (*graph)->inputs().size(), (*graph)->outputs().size(), run, *bytes, detail);
  }
  if (graph.status().message().find("compile-time constant") == std::string::npos) {
    return Refused(graph.status(), detail);
  }
  return RunReferenceBound(dir, *bytes, graph.status(), interpreter, detail);
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data/node", filter, pass_list, write_pass_list, deviations_file;
  bool verbose = false, reference = false, interpreter = false;
  CLI::App app(
      "kiln-conformance: compile every ONNX backend node test for the host, run it and compare with the "
      "expected outputs (floats rtol 1e-3, atol 1e-5; integers exact). A test whose graph has a random op "
      "(RandomUniform, RandomNormal, their *Like forms, Bernoulli, Multinomial) is checked by the random-output "
      "rule instead, since its expected values come from numpy's generator: dtype, shape and each value in the "
      "op's range (Bernoulli {0, 1}, RandomUniform [low, high], Multinomial non-negative integers)",
      "kiln-conformance");
  app.add_option("--data", data, "the node tests' directory (libonnx-testdata)")->capture_default_str();
  app.add_option("--filter", filter, "only tests whose name contains this");
  app.add_option("--pass-list", pass_list, "tests that must pass: one that does not is a regression (exit 1)");
  app.add_option("--write-pass-list", write_pass_list, "write the tests that pass to FILE");
  app.add_option("--deviations", deviations_file,
                 "tests whose expected outputs Kiln knowingly differs from (FILE: a name and the reason per "
                 "line): their failure is counted apart, with the reason");
  app.add_flag("--verbose", verbose, "a line for every test, not only failures");
  app.add_flag("--reference", reference,
               "check the reference evaluator (kiln::ReferenceRunGraph) instead of compiled artifacts");
  app.add_flag("--interpreter", interpreter,
               "check the interpreter (kiln::RunGraph, what calibration and pruning run) on the imported graph "
               "instead of compiled artifacts");
  if (auto exit = kiln::ParseCommandLine(app, argc, argv)) return *exit;
  std::vector<fs::path> tests;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(data, ec)) {
    if (entry.is_directory() && entry.path().filename().string().find(filter) != std::string::npos)
      tests.push_back(entry.path());
  }
  if (ec || (tests.empty() && filter.empty())) {
    std::fprintf(stderr, "kiln-conformance: no tests under %s (install libonnx-testdata)\n", data.c_str());
    return 2;
  }
  if (tests.empty()) {
    std::fprintf(stderr, "kiln-conformance: no test under %s has '%s' in its name\n", data.c_str(), filter.c_str());
    return 2;
  }
  std::sort(tests.begin(), tests.end());
  std::string work = (fs::temp_directory_path() / absl::StrCat("kiln-conformance-", getpid())).string();
  fs::create_directories(work);
  std::map<std::string, std::string> deviations;
  if (!deviations_file.empty()) {
    std::ifstream in(deviations_file);
    if (!in) {
      std::fprintf(stderr, "kiln-conformance: cannot read %s\n", deviations_file.c_str());
      return 2;
    }
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.find(' ');
      deviations[line.substr(0, space)] =
          space == std::string::npos ? "" : line.substr(line.find_first_not_of(' ', space));
    }
  }
  std::set<std::string> passed;
  int failed = 0, unsupported = 0, deviating = 0;
  for (const fs::path& test : tests) {
    std::string detail;
    Outcome outcome =
        reference || interpreter ? RunReference(test, interpreter, detail) : RunCompiled(test, work, detail);
    const std::string name = test.filename().string();
    if (outcome == Outcome::kPass) passed.insert(name);
    if (outcome == Outcome::kFail && deviations.count(name)) {
      ++deviating;
      std::printf("%-60s DEVIATES %s (%s)\n", name.c_str(), deviations[name].c_str(), detail.substr(0, 200).c_str());
      continue;
    }
    if (outcome == Outcome::kFail) ++failed;
    if (outcome == Outcome::kUnsupported) ++unsupported;
    if (verbose || outcome == Outcome::kFail) {
      std::printf("%-60s %s %s\n", name.c_str(),
                  outcome == Outcome::kPass   ? "PASS"
                  : outcome == Outcome::kFail ? "FAIL"
                                              : "UNSUPPORTED",
                  detail.substr(0, 300).c_str());
    }
  }
  fs::remove_all(work, ec);
  std::printf("conformance%s: %zu passed, %d failed, %d unsupported, %d deviate as documented, of %zu node tests\n",
              interpreter ? " (interpreter)"
              : reference ? " (reference)"
                          : "",
              passed.size(), failed, unsupported, deviating, tests.size());
  std::printf("random-output rule: %d tests with a random op checked for dtype, shape and range, not values\n",
              random_rule_tests);
  if (!write_pass_list.empty()) {
    std::ofstream out(write_pass_list);
    out << (interpreter ? "# ONNX node tests the interpreter passes (kiln-conformance --interpreter "
                          "--write-pass-list). Only grows.\n"
            : reference ? "# ONNX node tests the reference evaluator passes (kiln-conformance --reference "
                          "--write-pass-list). Only grows.\n"
                        : "# ONNX node tests that pass compiled (kiln-conformance --write-pass-list). Only grows.\n");
    for (const std::string& name : passed) out << name << "\n";
  }
  int regressions = 0;
  if (!pass_list.empty()) {
    std::ifstream in(pass_list);
    if (!in) {
      std::fprintf(stderr, "kiln-conformance: cannot read %s\n", pass_list.c_str());
      return 2;
    }
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (!filter.empty() && line.find(filter) == std::string::npos) continue;
      if (!passed.count(line)) {
        std::printf("REGRESSION: %s is on the pass list but did not pass\n", line.c_str());
        ++regressions;
      }
    }
  }
  return regressions == 0 ? 0 : 1;
}
