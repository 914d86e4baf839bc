// Target specs without LLVM: the preset table, the text form of --target, and the checks
// that make an explicit triple/cpu/features one LLVM will accept (llvm_names.inc).
#include "kiln/compiler/target.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

#include "llvm_names.inc"

constexpr char kX86Triple[] = "x86_64-unknown-linux-gnu";
constexpr char kAarch64Triple[] = "aarch64-unknown-linux-gnu";

// The presets, each with the features its CPU turns on among those codegen may use (the
// same names as host detection; tests/unit/target_llvm_test.cc checks them against LLVM),
// so whether a preset runs on a machine is a plain subset test.
struct Preset {
  const char* name;
  const char* triple;
  const char* cpu;
  const char* features[6];  // groups of features, joined
};
constexpr char kV2[] = "+cx16,+popcnt,+sahf,+sse3,+sse4.1,+sse4.2,+ssse3";  // the psABI's levels
constexpr char kV3[] = "+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+xsave";
constexpr char kV4[] = "+avx512bw,+avx512cd,+avx512dq,+avx512f,+avx512vl,+evex512";
constexpr char kServer[] = "+adx,+aes,+pclmul,+prfchw,+rdrnd,+rdseed";
constexpr char kZen3[] = "+sha,+sse4a,+vaes,+vpclmulqdq";
constexpr char kZen4[] =
    "+avx512bf16,+avx512bitalg,+avx512ifma,+avx512vbmi,+avx512vbmi2,+avx512vnni,+avx512vpopcntdq,+gfni";
constexpr Preset kPresets[] = {
    {"x86-64", kX86Triple, "x86-64", {}},
    {"x86-64-v2", kX86Triple, "x86-64-v2", {kV2}},
    {"x86-64-v3", kX86Triple, "x86-64-v3", {kV2, kV3}},
    {"x86-64-v4", kX86Triple, "x86-64-v4", {kV2, kV3, kV4}},
    {"znver3", kX86Triple, "znver3", {kV2, kV3, kServer, kZen3}},
    {"znver4", kX86Triple, "znver4", {kV2, kV3, kV4, kServer, kZen3, kZen4}},
    {"skylake-avx512", kX86Triple, "skylake-avx512", {kV2, kV3, kV4, kServer}},
    {"aarch64", kAarch64Triple, "generic", {"+fp-armv8,+neon"}},
    {"neoverse-v1",
     kAarch64Triple,
     "neoverse-v1",
     {"+aes,+bf16,+crc,+dotprod,+fp-armv8,+fullfp16,+i8mm,+lse,+neon,+rcpc,+rdm,+sha2,+sve"}},
};

// A preset's features, sorted.
std::vector<std::string> PresetFeatures(const Preset& preset) {
  std::vector<std::string> features;
  for (const char* group : preset.features) {
    if (group == nullptr) break;
    for (absl::string_view f : absl::StrSplit(group, ',')) features.emplace_back(f);
  }
  std::sort(features.begin(), features.end());
  return features;
}

const Preset* FindPreset(absl::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

std::vector<std::string> SortedFeatures(absl::string_view text) {
  std::vector<std::string> features = absl::StrSplit(text, ',', absl::SkipEmpty());
  std::sort(features.begin(), features.end());
  return features;
}

bool IsX86(absl::string_view triple) { return absl::StartsWith(triple, "x86_64-"); }

// The names LLVM knows for the triple's architecture.
template <size_t N>
bool In(const char* const (&names)[N], absl::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}
bool KnownCpu(absl::string_view triple, absl::string_view cpu) {
  return IsX86(triple) ? In(kX86Cpus, cpu) : In(kAarch64Cpus, cpu);
}
bool KnownFeature(absl::string_view triple, absl::string_view feature) {
  return IsX86(triple) ? In(kX86Features, feature) : In(kAarch64Features, feature);
}

// The five known names closest to `name` (edit distance), for "did you mean".
template <size_t N>
std::string Nearest(const char* const (&names)[N], absl::string_view name) {
  auto distance = [](absl::string_view a, absl::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::vector<std::pair<size_t, std::string>> ranked;
  for (const char* n : names) ranked.emplace_back(distance(name, n), n);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> best;
  for (size_t i = 0; i < ranked.size() && i < 5; ++i) best.push_back(ranked[i].second);
  return absl::StrJoin(best, ", ");
}

// LLVM's normal form for the Linux triples Kiln emits: ARCH-VENDOR-linux-ENV, with the
// vendor "unknown" when left out (x86_64-linux-gnu) and arm64/amd64 spelled as LLVM does.
absl::StatusOr<std::string> NormalizeTriple(absl::string_view text) {
  std::vector<std::string> parts = absl::StrSplit(absl::AsciiStrToLower(std::string(text)), '-');
  if (parts[0] == "amd64" || parts[0] == "x86-64") parts[0] = "x86_64";
  if (parts[0] == "arm64") parts[0] = "aarch64";
  if (parts[0] != "x86_64" && parts[0] != "aarch64") {
    return absl::InvalidArgumentError(absl::StrCat("target.triple '", text, "': architecture '", parts[0],
                                                   "' is not one Kiln generates code for (x86_64, aarch64)"));
  }
  if (parts.size() >= 2 && parts[1] == "linux") parts.insert(parts.begin() + 1, "unknown");
  if (parts.size() < 3 || parts.size() > 4 || parts[2] != "linux") {
    return absl::InvalidArgumentError(absl::StrCat("target.triple '", text,
                                                   "': only Linux ELF targets are supported "
                                                   "(ARCH-linux-gnu or ARCH-VENDOR-linux-ENV, e.g. ",
                                                   kX86Triple, ")"));
  }
  if (parts.size() == 3) parts.push_back("gnu");
  return absl::StrJoin(parts, "-");
}

// Checks an explicit triple/cpu/features and puts it in normal form (features sorted).
absl::Status NormalizeExplicit(v1::Target& target) {
  auto triple = NormalizeTriple(target.triple());
  if (!triple.ok()) return triple.status();
  target.set_triple(*triple);
  const bool x86 = IsX86(*triple);
  if (target.cpu().empty()) target.set_cpu("generic");
  if (!KnownCpu(*triple, target.cpu())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target.cpu '", target.cpu(), "' is not a CPU LLVM knows for ", *triple,
        "; the nearest are: ", x86 ? Nearest(kX86Cpus, target.cpu()) : Nearest(kAarch64Cpus, target.cpu())));
  }
  std::map<std::string, char> seen;
  std::vector<std::string> features;
  for (const std::string& raw : target.features()) {
    const std::string f(absl::StripAsciiWhitespace(raw));
    if (f.size() < 2 || (f[0] != '+' && f[0] != '-')) {
      return absl::InvalidArgumentError(
          absl::StrCat("target.features '", f, "': write each feature with + or - in front, e.g. +avx2"));
    }
    const std::string name = f.substr(1);
    if (!KnownFeature(*triple, name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target.features '", f, "': '", name, "' is not a feature LLVM knows for ", *triple,
                       "; the nearest are: ", x86 ? Nearest(kX86Features, name) : Nearest(kAarch64Features, name)));
    }
    auto [at, inserted] = seen.emplace(name, f[0]);
    if (!inserted && at->second != f[0]) {
      return absl::InvalidArgumentError(absl::StrCat("target.features turns '", name, "' both on and off"));
    }
    if (inserted) features.push_back(f);
  }
  std::sort(features.begin(), features.end());
  target.clear_features();
  for (const std::string& f : features) target.add_features(f);
  return absl::OkStatus();
}

std::string PresetList() {
  return absl::StrCat(absl::StrJoin(TargetPresets(), ", "), " or triple=T[,cpu=C][,features=+a,-b]");
}

}  // namespace

std::vector<std::string> TargetPresets() {
  std::vector<std::string> names = {"host"};
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

absl::StatusOr<v1::Target> ParseTarget(absl::string_view text) {
  v1::Target target;
  const std::string spec(absl::StripAsciiWhitespace(text));
  if (spec.find('=') == std::string::npos) {
    if (spec != "host" && spec != "" && FindPreset(spec) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown target '", spec, "'; use one of ", PresetList()));
    }
    target.set_preset(spec.empty() ? "host" : spec);
    return target;
  }
  target.set_preset("custom");
  // features may contain commas, so it comes last: triple=...,cpu=...,features=+a,+b
  std::string rest = spec;
  const size_t features_at = rest.find("features=");
  if (features_at != std::string::npos) {
    for (absl::string_view f : absl::StrSplit(rest.substr(features_at + 9), ',', absl::SkipEmpty()))
      target.add_features(std::string(f));
    rest = rest.substr(0, features_at);
  }
  for (absl::string_view part : absl::StrSplit(rest, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.first == "triple") {
      target.set_triple(kv.second);
    } else if (kv.first == "cpu") {
      target.set_cpu(kv.second);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("target spec '", spec, "': unknown key '", kv.first, "' (use triple, cpu, features)"));
    }
  }
  if (target.triple().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("target spec '", spec, "' needs triple=..., e.g. triple=", kX86Triple));
  }
  return target;
}

absl::StatusOr<v1::Target> ResolveTarget(const v1::Target& in) {
  v1::Target target = in;
  const bool explicit_fields = !target.triple().empty() || !target.cpu().empty() || target.features_size() > 0;
  if (target.preset().empty()) target.set_preset(explicit_fields ? "custom" : "host");
  if (target.preset() == "host" && !explicit_fields) return HostTarget();
  if (target.preset() == "host" || target.preset() == "custom") {
    // An explicit target, or a host resolved elsewhere: checked and kept.
    if (target.triple().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("target.triple is required with target.preset '", target.preset(), "'"));
    }
    if (auto s = NormalizeExplicit(target); !s.ok()) return s;
    return target;
  }
  const Preset* preset = FindPreset(target.preset());
  if (preset == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown target preset '", target.preset(), "'; use one of ", PresetList()));
  }
  v1::Target resolved;
  resolved.set_preset(preset->name);
  resolved.set_triple(preset->triple);
  resolved.set_cpu(preset->cpu);
  for (const std::string& f : PresetFeatures(*preset)) resolved.add_features(f);
  std::vector<std::string> given(target.features().begin(), target.features().end());
  std::sort(given.begin(), given.end());
  if (explicit_fields &&
      (target.triple() != resolved.triple() || target.cpu() != resolved.cpu() ||
       !std::equal(given.begin(), given.end(), resolved.features().begin(), resolved.features().end()))) {
    return absl::InvalidArgumentError(absl::StrCat("target.preset '", preset->name,
                                                   "' comes with its own triple, cpu and features; give either the "
                                                   "preset or triple/cpu/features (preset \"custom\")"));
  }
  return resolved;
}

absl::StatusOr<TargetSpec> ResolveTarget(const std::string& spec) {
  auto parsed = ParseTarget(spec);
  if (!parsed.ok()) return parsed.status();
  auto resolved = ResolveTarget(*parsed);
  if (!resolved.ok())
    return absl::InvalidArgumentError(absl::StrCat("target '", spec, "': ", resolved.status().message()));
  return ToTargetSpec(*resolved);
}

TargetSpec ToTargetSpec(const v1::Target& target) {
  TargetSpec spec;
  spec.name = target.preset();
  spec.triple = target.triple();
  spec.cpu = target.cpu();
  spec.features = absl::StrJoin(target.features(), ",");
  spec.is_host = CanRunHere(target);
  return spec;
}

v1::Target ToTargetProto(const TargetSpec& spec) {
  v1::Target target;
  target.set_preset(spec.name);
  target.set_triple(spec.triple);
  target.set_cpu(spec.cpu);
  for (const std::string& f : SortedFeatures(spec.features)) target.add_features(f);
  return target;
}

std::string CanonicalTarget(const TargetSpec& target) {
  return absl::StrCat(target.triple, "/", target.cpu, "/", absl::StrJoin(SortedFeatures(target.features), ","));
}

std::string CanonicalTarget(const v1::Target& target) {
  return absl::StrCat(target.triple(), "/", target.cpu(), "/", absl::StrJoin(target.features(), ","));
}

bool CanRunHere(const v1::Target& target) {
  const v1::Target& host = HostTarget();
  auto arch = [](const std::string& triple) { return triple.substr(0, triple.find('-')); };
  if (target.triple().empty() || arch(target.triple()) != arch(host.triple())) return false;
  const std::set<std::string> host_has(host.features().begin(), host.features().end());
  std::set<std::string> on, off;
  for (const std::string& f : target.features()) (f[0] == '+' ? on : off).insert(f.substr(1));
  // What the CPU name turns on, unless turned off explicitly: known for the presets' CPUs
  // and this machine's own; another CPU runs here only when every feature codegen may use
  // is given explicitly (as a host resolved on another machine has them).
  const Preset* by_cpu = nullptr;
  for (const Preset& p : kPresets) {
    if (target.cpu() == p.cpu && arch(target.triple()) == arch(p.triple)) by_cpu = &p;
  }
  if (by_cpu != nullptr) {
    for (const std::string& f : PresetFeatures(*by_cpu)) {
      if (off.count(f.substr(1)) == 0) on.insert(f.substr(1));
    }
  } else if (target.cpu() != host.cpu() && target.cpu() != "generic") {
    for (const std::string& name : CodegenFeatureNames(target.triple())) {
      if (on.count(name) == 0 && off.count(name) == 0) return false;
    }
  }
  return std::all_of(on.begin(), on.end(), [&](const std::string& name) { return host_has.count("+" + name) > 0; });
}

}  // namespace kiln
