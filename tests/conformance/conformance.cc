// ONNX backend node-test conformance runner. For each data/node/<test>/: compile
// model.onnx for the host, run every test_data_set_* through the artifact and compare with
// the expected outputs (floats: |got - want| <= atol + rtol*|want|, rtol 1e-3, atol 1e-5;
// integers and bools exact). Prints passed / failed / unsupported counts.
//
//   kiln-conformance [--data DIR] [--filter SUBSTR] [--pass-list FILE] [--write-pass-list FILE] [--verbose]
//
// With --pass-list, a test on the list that does not pass is a regression: exit 1.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/common/cli.h"
#include "kiln/common/file.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/runtime.h"

namespace fs = std::filesystem;

namespace {

enum class Outcome { kPass, kFail, kUnsupported };

std::string Compare(const kiln::Tensor& got, const kiln::Tensor& want) {
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

Outcome RunTest(const fs::path& dir, const std::string& work, std::string& detail) {
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
  if (!result.ok()) {
    detail = std::string(result.status().message());
    // Refusals (unsupported op, dtype, dynamic shape) are "unsupported"; anything else
    // that fails to compile counts as a failure.
    const auto code = result.status().code();
    return code == absl::StatusCode::kUnimplemented || code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kFailedPrecondition
               ? Outcome::kUnsupported
               : Outcome::kFail;
  }
  kiln_module* module = nullptr;
  const kiln_module_desc* desc = nullptr;
  kiln_session* session = nullptr;
  if (kiln_module_load(so_path.c_str(), &module) != KILN_OK || kiln_module_describe(module, &desc) != KILN_OK ||
      kiln_session_create(module, nullptr, &session) != KILN_OK) {
    detail = kiln_last_error();
    kiln_module_unload(module);
    return Outcome::kFail;
  }
  Outcome outcome = Outcome::kPass;
  int sets = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory() || entry.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
    ++sets;
    std::vector<kiln::Tensor> inputs, outputs, expected;
    // Reads <set>/<kind>_<i>.pb into `into`; on failure records why.
    auto read = [&](const char* kind, int32_t i, std::vector<kiln::Tensor>& into) {
      auto data = kiln::ReadFile((entry.path() / absl::StrCat(kind, "_", i, ".pb")).string());
      auto t = data.ok() ? kiln::ParseTensorProto(*data) : absl::StatusOr<kiln::Tensor>(data.status());
      if (!t.ok()) {
        detail = std::string(t.status().message());
        outcome = Outcome::kFail;
        return false;
      }
      into.push_back(std::move(*t));
      return true;
    };
    for (int32_t i = 0; i < desc->num_inputs; ++i) {
      if (!read("input", i, inputs)) break;
    }
    if (outcome != Outcome::kPass) break;
    for (int32_t i = 0; i < desc->num_outputs; ++i) {
      if (!read("output", i, expected)) break;
    }
    if (outcome != Outcome::kPass) break;
    // The shaped API: every artifact, and the only one for run-time shapes.
    std::vector<kiln_tensor> in, out(static_cast<size_t>(desc->num_outputs));
    std::deque<kiln::Tensor> padded;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const kiln::Tensor& t = inputs[i];
      kiln_tensor view{const_cast<void*>(t.data()), t.dims().data(), static_cast<int32_t>(t.rank()),
                       static_cast<int32_t>(t.dtype())};
      // Some ONNX 1.12 cases store an input flattened, a bfloat16 one as its uint16 bits, or
      // (CastLike's `like`, read for its type only) with fewer elements than the model
      // declares: where the artifact's dims are static they stand, over a copy padded with
      // zeros when the count differs.
      const kiln_tensor_info& info = desc->inputs[i];
      int64_t elements = 1;
      for (int32_t d = 0; d < info.rank && elements >= 0; ++d)
        elements = info.dims[d] < 0 ? -1 : elements * info.dims[d];
      const bool bf16_bits =
          info.dtype == static_cast<int32_t>(kiln::DType::kBFloat16) && t.dtype() == kiln::DType::kUInt16;
      if (elements >= 0 && (bf16_bits || info.dtype == view.dtype)) {
        if (elements != t.num_elements()) {
          padded.emplace_back(static_cast<kiln::DType>(info.dtype),
                              std::vector<int64_t>(info.dims, info.dims + info.rank));
          std::memcpy(padded.back().data(), t.data(),
                      static_cast<size_t>(std::min(t.size_bytes(), padded.back().size_bytes())));
          view.data = padded.back().data();
        }
        view = kiln_tensor{view.data, info.dims, info.rank, info.dtype};
      }
      in.push_back(view);
    }
    if (kiln_session_run_shaped(session, in.data(), out.data()) != KILN_OK) {
      detail = kiln_last_error();
      outcome = Outcome::kFail;
      break;
    }
    for (const kiln_tensor& t : out) {
      outputs.emplace_back(static_cast<kiln::DType>(t.dtype), std::vector<int64_t>(t.dims, t.dims + t.rank));
      std::memcpy(outputs.back().data(), t.data, static_cast<size_t>(outputs.back().size_bytes()));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string diff = Compare(outputs[i], expected[i]);
      if (!diff.empty()) {
        detail = absl::StrCat(entry.path().filename().string(), " output ", i, ": ", diff);
        outcome = Outcome::kFail;
        break;
      }
    }
    if (outcome != Outcome::kPass) break;
  }
  if (sets == 0 && outcome == Outcome::kPass) {
    detail = "no test_data_set_* directories";
    outcome = Outcome::kFail;
  }
  kiln_session_destroy(session);
  kiln_module_unload(module);
  return outcome;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data/node", filter, pass_list, write_pass_list;
  bool verbose = false;
  CLI::App app(
      "kiln-conformance: compile every ONNX backend node test for the host, run it and compare with the "
      "expected outputs (floats rtol 1e-3, atol 1e-5; integers exact)",
      "kiln-conformance");
  app.add_option("--data", data, "the node tests' directory (libonnx-testdata)")->capture_default_str();
  app.add_option("--filter", filter, "only tests whose name contains this");
  app.add_option("--pass-list", pass_list, "tests that must pass: one that does not is a regression (exit 1)");
  app.add_option("--write-pass-list", write_pass_list, "write the tests that pass to FILE");
  app.add_flag("--verbose", verbose, "a line for every test, not only failures");
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
  std::set<std::string> passed;
  int failed = 0, unsupported = 0;
  for (const fs::path& test : tests) {
    std::string detail;
    Outcome outcome = RunTest(test, work, detail);
    const std::string name = test.filename().string();
    if (outcome == Outcome::kPass) passed.insert(name);
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
  std::printf("conformance: %zu passed, %d failed, %d unsupported, of %zu node tests\n", passed.size(), failed,
              unsupported, tests.size());
  if (!write_pass_list.empty()) {
    std::ofstream out(write_pass_list);
    out << "# ONNX node tests that pass compiled (kiln-conformance --write-pass-list). Only grows.\n";
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
