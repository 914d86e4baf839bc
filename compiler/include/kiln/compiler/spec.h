// The CompileSpec (proto/kiln/v1/spec.proto) made whole once: Normalize fills its defaults
// and checks it wherever it came from (`kiln compile` / `kiln submit` flags, a gRPC
// SubmitRequest), and ActionKey names what it produces. Part of kiln_spec, which has no
// LLVM and no ONNX in it: kilnd uses it as the CLI and the compiler do.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/spec.pb.h"

namespace kiln {

constexpr double kDefaultAtol = 1e-3, kDefaultRtol = 1e-3;  // when both are 0
constexpr double kDefaultMaxTop1Drop = 1.0;                 // percentage points, int8 and pruned builds
constexpr double kDefaultPercentile = 99.99;                // calibration method percentile
constexpr double kDefaultTuneBudgetSeconds = 120;

// Defaults once: target resolved (ResolveTarget: "host" means this machine, unless the
// spec was resolved elsewhere already), precision fp32, calibration method minmax, the
// percentile, atol/rtol 1e-3 when both are 0, max_top1_drop 1 point for int8 and pruned
// builds, the tuning budget; lists sorted where their order means nothing (input shapes,
// keep_float, prune skip, features), the pipeline trimmed, unknown fields dropped and
// every section present, so equal specs serialize to equal bytes. Idempotent.
// InvalidArgument for what cannot be right, naming the field ("pruning.channels 1.5 is not
// a share in [0, 1)").
absl::Status Normalize(v1::CompileSpec& spec);

// The action key: sha256 (hex) of "kiln.action.v2", the compiler build id and the
// deterministic serialization of the normalised spec. Every field is in it; nothing is
// listed by hand. `spec` must be normalised.
std::string ActionKey(const v1::CompileSpec& spec, std::string_view build_id);

// int8, bf16 or pruned: judged against the fp32 model's results by top-1 agreement (and,
// bf16, by the error relative to each output's scale) rather than atol/rtol.
bool IsLossy(const v1::CompileSpec& spec);

// Precision bf16 on a target without AVX512-BF16 (vdpbf16ps) compiles as fp32: why, e.g.
// "target x86-64-v3 has no avx512bf16", or "" when the target has it.
std::string Bf16Unavailable(const v1::Target& target);

// Whether the resolved target's feature list holds `feature` ("+avx512f").
bool TargetHasFeature(const v1::Target& target, absl::string_view feature);

// The worst error a bf16 build's output that is not a classifier's may have, relative to
// its scale (max |reference|): bf16 keeps 8 significant bits (relative rounding 2^-9 per
// operand) and a deep network's layers add their errors up. BERT-base's outputs measured
// 0.25 % and 0.55 %. (Classifier outputs are judged by top-1 agreement instead: ResNet-50's
// logits on image-like inputs measured 0.8-1.2 %, but on the normal noise of a random
// validation input, whose logits are small, 14 %, with top-1 unchanged.)
constexpr double kBf16MaxRelativeError = 0.1;

// The digest of a blob's bytes (sha256 hex and size), as the service's cache names it.
v1::Digest DigestOf(std::string_view bytes);

// "name=1x3x224x224" (x or , between dims), the text form of --input-shape.
absl::StatusOr<v1::InputShape> ParseInputShape(absl::string_view text);

}  // namespace kiln
