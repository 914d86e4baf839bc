// The CompileSpec's flags, shared by `kiln compile` and `kiln submit`: one table of flags,
// each bound to one spec field, so both commands turn the same flags into the same spec
// (and the same action key), and calibration and validation directories into the same
// InputSet blobs. Validation is Normalize's; its messages are put in flag terms here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/common/file.h"
#include "kiln/v1/spec.pb.h"

namespace kiln::cli {

enum class SpecCommand { kCompile, kSubmit };

// Flag values as parsed; `Given` tells a flag left out from one set to its default.
struct SpecFlags {
  std::string target = "host";
  std::vector<std::string> input_shapes, keep_float, prune_skip;
  std::string pipeline, precision, calibration, calibration_method, inputs;
  double calibration_percentile = 0, prune_channels = 0, prune_weights = 0;
  double atol = 0, rtol = 0, max_top1_drop = 0, tune_budget = 0;
  uint64_t seed = 0;
  bool skip_latency = false, tune = false;
  CLI::App* command = nullptr;
  bool Given(const std::string& flag) const {
    const CLI::Option* option = command->get_option_no_throw(flag);
    return option != nullptr && option->count() > 0;
  }
};

// Adds the spec's flags to a subcommand (compile also gets --tune and --tune-budget).
void AddSpecFlags(CLI::App& command, SpecFlags& flags, SpecCommand which);

// A spec from the flags with the blobs it names. Not normalised: `kiln compile` normalises
// it (CompileModel), kilnd does for `kiln submit` (a "host" target is kilnd's machine).
struct SpecWithData {
  v1::CompileSpec spec;
  std::shared_ptr<const MappedFile> model_file;  // the model, mapped (see CompileInputs::model_file)
  std::string_view model;                        // its bytes
  std::vector<std::string> calibration;          // InputSet blobs, one per sample (DIR's order)
  std::string input_set;                         // the InputSet of --inputs, or empty
};

// Reads the model and the directories and fills the spec, then checks it with Normalize
// (on a copy; for submit with the target left to kilnd). InvalidArgument: a usage error
// (exit 2), its message in flag terms; anything else: a failed operation (exit 1).
absl::StatusOr<SpecWithData> BuildSpec(const std::string& model_path, const SpecFlags& flags, SpecCommand which);

// Normalize's field names ("pruning.channels") as the flags that set them ("--prune-channels").
std::string InFlagTerms(absl::string_view message);

// Calibration samples as InputSet blobs: one subdirectory per sample (sorted by name)
// holding input_0.pb, input_1.pb, ... (the ONNX test-data layout; by position), or one
// *.pb per sample for a one-input model.
absl::StatusOr<std::vector<std::string>> CalibrationInputSets(const std::string& dir);

// Validation inputs as an InputSet blob: DIR/*.pb (ONNX TensorProtos), one per model input,
// in file-name order.
absl::StatusOr<std::string> InputSetFromDirectory(const std::string& dir);

}  // namespace kiln::cli
