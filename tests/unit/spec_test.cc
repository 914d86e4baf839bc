// The CompileSpec library without LLVM (kiln_spec, kiln_target): target presets, explicit
// specs and their errors, host detection from raw cpuid / HWCAP values, Normalize's
// defaults and field-naming errors, and an action key that every field reaches.
#include <algorithm>
#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"
#include "kiln/compiler/spec.h"
#include "kiln/compiler/target.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

v1::CompileSpec MinimalSpec() {
  v1::CompileSpec spec;
  *spec.mutable_model() = DigestOf("model bytes");
  spec.mutable_target()->set_preset("x86-64-v3");
  return spec;
}

std::string ErrorOf(v1::CompileSpec spec) {
  absl::Status status = Normalize(spec);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  return std::string(status.message());
}

TEST(TargetTest, PresetsResolveFromOneTable) {
  auto v3 = ResolveTarget("x86-64-v3");
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->name, "x86-64-v3");
  EXPECT_EQ(v3->triple, "x86_64-unknown-linux-gnu");
  EXPECT_EQ(v3->cpu, "x86-64-v3");
  EXPECT_THAT(v3->features, HasSubstr("+avx2"));
  EXPECT_EQ(v3->features.find("avx512"), std::string::npos);
  auto arm = ResolveTarget("aarch64");
  ASSERT_TRUE(arm.ok());
  EXPECT_EQ(CanonicalTarget(*arm), "aarch64-unknown-linux-gnu/generic/+fp-armv8,+neon");
  EXPECT_FALSE(arm->is_host);
  EXPECT_EQ(TargetPresets().front(), "host");
}

TEST(TargetTest, ExplicitSpecsAreCheckedAgainstLlvmNames) {
  auto custom = ResolveTarget("triple=aarch64-linux-gnu,cpu=neoverse-v1,features=+sve,+neon");
  ASSERT_TRUE(custom.ok()) << custom.status();
  EXPECT_EQ(custom->name, "custom");
  EXPECT_EQ(custom->triple, "aarch64-unknown-linux-gnu");  // vendor filled in, as LLVM normalises
  EXPECT_EQ(custom->features, "+neon,+sve");               // sorted
  EXPECT_FALSE(custom->is_host);
  auto bad_cpu = ResolveTarget("triple=x86_64-linux-gnu,cpu=znver9");
  ASSERT_FALSE(bad_cpu.ok());
  EXPECT_THAT(std::string(bad_cpu.status().message()), HasSubstr("target.cpu 'znver9' is not a CPU LLVM knows"));
  EXPECT_THAT(std::string(bad_cpu.status().message()), HasSubstr("znver4"));  // the nearest names
  auto bad_feature = ResolveTarget("triple=x86_64-linux-gnu,features=+avx3");
  ASSERT_FALSE(bad_feature.ok());
  EXPECT_THAT(std::string(bad_feature.status().message()), HasSubstr("'avx3' is not a feature LLVM knows"));
  auto unsigned_feature = ResolveTarget("triple=x86_64-linux-gnu,features=avx2");
  ASSERT_FALSE(unsigned_feature.ok());
  EXPECT_THAT(std::string(unsigned_feature.status().message()), HasSubstr("with + or - in front"));
  auto both = ResolveTarget("triple=x86_64-linux-gnu,features=+avx2,-avx2");
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("both on and off"));
  auto windows = ResolveTarget("triple=x86_64-pc-windows-msvc");
  EXPECT_THAT(std::string(windows.status().message()), HasSubstr("only Linux ELF targets"));
  auto unknown = ResolveTarget("pentium-pro");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("unknown target 'pentium-pro'"));
}

TEST(TargetTest, APresetWithOtherFieldsIsRefused) {
  v1::Target target;
  target.set_preset("znver4");
  target.set_cpu("znver3");
  auto resolved = ResolveTarget(target);
  ASSERT_FALSE(resolved.ok());
  EXPECT_THAT(std::string(resolved.status().message()), HasSubstr("target.preset 'znver4' comes with its own"));
  // Its own resolution is accepted again (Normalize is idempotent).
  v1::Target preset;
  preset.set_preset("znver4");
  auto once = ResolveTarget(preset);
  ASSERT_TRUE(once.ok());
  auto twice = ResolveTarget(*once);
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(once->SerializeAsString(), twice->SerializeAsString());
}

TEST(TargetTest, HostIsThisMachineWithEveryCodegenFeatureExplicit) {
  const v1::Target& host = HostTarget();
  EXPECT_EQ(host.preset(), "host");
  EXPECT_EQ(host.features_size(), static_cast<int>(CodegenFeatureNames(host.triple()).size()));
  EXPECT_TRUE(CanRunHere(host));
  auto resolved = ResolveTarget("host");
  ASSERT_TRUE(resolved.ok());
  EXPECT_TRUE(resolved->is_host);
  // A host resolved elsewhere (kilnd's) keeps its fields when normalised again.
  v1::Target elsewhere = host;
  elsewhere.set_cpu("x86-64");
  auto kept = ResolveTarget(elsewhere);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->cpu(), "x86-64");
}

// cpuid values of an AMD Zen 4 (family 0x19, model 0x11) with AVX-512 saved by the OS.
X86CpuId Zen4() {
  X86CpuId id;
  id.vendor = "AuthenticAMD";
  id.family = 0x19;
  id.model = 0x11;
  id.leaf1[2] = (1u << 0) | (1u << 9) | (1u << 12) | (1u << 13) | (1u << 19) | (1u << 20) | (1u << 22) | (1u << 23) |
                (1u << 26) | (1u << 27) | (1u << 28) | (1u << 29);
  id.leaf7[1] = (1u << 3) | (1u << 5) | (1u << 8) | (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
  id.leaf7[2] = 1u << 11;  // avx512vnni
  id.ext1[2] = (1u << 0) | (1u << 5);
  id.xcr0 = 0xe7;
  return id;
}

TEST(HostTest, X86FromCpuid) {
  v1::Target zen4 = X86HostTarget(Zen4());
  EXPECT_EQ(zen4.cpu(), "znver4");
  auto has = [](const v1::Target& t, const std::string& f) {
    return std::find(t.features().begin(), t.features().end(), f) != t.features().end();
  };
  EXPECT_TRUE(has(zen4, "+avx512f") && has(zen4, "+evex512") && has(zen4, "+avx512vnni"));
  EXPECT_TRUE(has(zen4, "-avxvnni") && has(zen4, "-avx512fp16"));
  // The same CPU where the OS does not save AVX-512 state: AVX-512 off, explicitly.
  X86CpuId masked = Zen4();
  masked.xcr0 = 0x7;
  v1::Target no512 = X86HostTarget(masked);
  EXPECT_TRUE(has(no512, "-avx512f") && has(no512, "-evex512") && has(no512, "+avx2"));
  // An Intel model 0x55 with VNNI is a Cascade Lake; an unknown vendor gets its x86-64 level.
  X86CpuId intel = Zen4();
  intel.vendor = "GenuineIntel";
  intel.family = 6;
  intel.model = 0x55;
  EXPECT_EQ(X86HostTarget(intel).cpu(), "cascadelake");
  intel.vendor = "SomeoneElse";
  EXPECT_EQ(X86HostTarget(intel).cpu(), "x86-64-v4");
  intel.leaf7[1] = 0;  // no AVX2, no AVX-512
  EXPECT_EQ(X86HostTarget(intel).cpu(), "x86-64-v2");
}

TEST(HostTest, Aarch64FromHwcap) {
  // Neoverse V1 (ARM 0xd40): fp, asimd, fphp + asimdhp, asimddp, sve; HWCAP2 i8mm, bf16.
  const unsigned long hwcap = (1ul << 0) | (1ul << 1) | (1ul << 9) | (1ul << 10) | (1ul << 20) | (1ul << 22);
  const unsigned long hwcap2 = (1ul << 13) | (1ul << 14);
  v1::Target v1 = Aarch64HostTarget(hwcap, hwcap2, 0x41, 0xd40);
  EXPECT_EQ(v1.cpu(), "neoverse-v1");
  EXPECT_EQ(v1.triple(), "aarch64-unknown-linux-gnu");
  std::string joined;
  for (const auto& f : v1.features()) joined += f + ",";
  EXPECT_THAT(joined, HasSubstr("+dotprod,"));
  EXPECT_THAT(joined, HasSubstr("+fullfp16,"));
  EXPECT_THAT(joined, HasSubstr("+i8mm,"));
  EXPECT_THAT(joined, HasSubstr("-sve2,"));
  EXPECT_EQ(Aarch64HostTarget(hwcap, hwcap2, 0x12, 0x345).cpu(), "generic");
}

TEST(SpecTest, NormalizeFillsDefaultsOnce) {
  v1::CompileSpec spec = MinimalSpec();
  spec.mutable_pruning()->set_channels(0.25);
  spec.mutable_pruning()->add_skip("b");
  spec.mutable_pruning()->add_skip("a");
  spec.add_input_shapes()->set_name("y");
  spec.mutable_input_shapes(0)->add_dims(3);
  spec.add_input_shapes()->set_name("x");
  spec.mutable_input_shapes(1)->add_dims(1);
  spec.set_pipeline("  fold-constants,dce \n");
  ASSERT_TRUE(Normalize(spec).ok());
  EXPECT_EQ(spec.quantization().precision(), "fp32");
  EXPECT_EQ(spec.accuracy().atol(), kDefaultAtol);
  EXPECT_EQ(spec.accuracy().rtol(), kDefaultRtol);
  EXPECT_EQ(spec.accuracy().max_top1_drop(), kDefaultMaxTop1Drop);  // pruned: judged by top-1
  EXPECT_EQ(spec.pruning().skip(0), "a");
  EXPECT_EQ(spec.input_shapes(0).name(), "x");
  EXPECT_EQ(spec.pipeline(), "fold-constants,dce");
  EXPECT_EQ(spec.target().cpu(), "x86-64-v3");
  v1::CompileSpec again = spec;
  ASSERT_TRUE(Normalize(again).ok());
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString());

  v1::CompileSpec int8 = MinimalSpec();
  int8.mutable_quantization()->set_precision("int8");
  *int8.mutable_quantization()->add_calibration() = DigestOf("sample");
  int8.mutable_quantization()->set_method("percentile");
  ASSERT_TRUE(Normalize(int8).ok());
  EXPECT_EQ(int8.quantization().percentile(), kDefaultPercentile);
  // An explicit 0-point bar stays 0 (it used to become the 1-point default).
  v1::CompileSpec strict = MinimalSpec();
  strict.mutable_pruning()->set_weights(0.5);
  strict.mutable_accuracy()->set_max_top1_drop(0);
  ASSERT_TRUE(Normalize(strict).ok());
  EXPECT_EQ(strict.accuracy().max_top1_drop(), 0);
  // Tuning's budget: 120 s by default, and 0 (measure nothing) kept.
  v1::CompileSpec tuned = MinimalSpec();
  tuned.mutable_tuning()->set_enabled(true);
  ASSERT_TRUE(Normalize(tuned).ok());
  EXPECT_EQ(tuned.tuning().budget_seconds(), kDefaultTuneBudgetSeconds);
}

// Pipelines that mean the same give the same spec, and so the same action key.
TEST(SpecTest, NormalizeCanonicalisesThePipeline) {
  v1::CompileSpec a = MinimalSpec(), b = MinimalSpec();
  a.set_pipeline(" fold-constants, prune{weights=0.50,channels=0.3} ");
  b.set_pipeline("fold-constants,prune{channels=0.3 weights=0.5}");
  a.mutable_pruning()->set_channels(0.3);
  b.mutable_pruning()->set_channels(0.3);
  ASSERT_TRUE(Normalize(a).ok());
  ASSERT_TRUE(Normalize(b).ok());
  EXPECT_EQ(a.pipeline(), "fold-constants,prune{channels=0.3 weights=0.5}");
  EXPECT_EQ(ActionKey(a, "v"), ActionKey(b, "v"));
  // Options that prune or quantize where the spec does not would escape the report.
  v1::CompileSpec hidden = MinimalSpec();
  hidden.set_pipeline("fold-batchnorm,prune{weights=0.5}");
  EXPECT_THAT(ErrorOf(hidden), HasSubstr("pipeline: prune{weights=0.5} without pruning.channels or pruning.weights"));
  hidden.mutable_pruning()->set_channels(0.25);
  EXPECT_TRUE(Normalize(hidden).ok());
  v1::CompileSpec bad = MinimalSpec();
  bad.set_pipeline("fold-constants,fuze");
  EXPECT_THAT(ErrorOf(bad), HasSubstr("pipeline: pipeline 'fold-constants,fuze' at character 16: unknown pass 'fuze'"));
}

TEST(SpecTest, ErrorsNameTheField) {
  struct Case {
    std::function<void(v1::CompileSpec&)> mutate;
    const char* error;
  };
  const Case cases[] = {
      {[](v1::CompileSpec& s) { s.mutable_pruning()->set_channels(1.5); },
       "pruning.channels 1.5 is not a share in [0, 1)"},
      {[](v1::CompileSpec& s) { s.mutable_quantization()->set_precision("int8"); },
       "quantization.precision int8 needs quantization.calibration"},
      {[](v1::CompileSpec& s) { *s.mutable_quantization()->add_calibration() = DigestOf("x"); },
       "quantization.calibration goes with quantization.precision int8"},
      {[](v1::CompileSpec& s) { s.mutable_quantization()->set_precision("int4"); },
       "quantization.precision 'int4' is not one of fp32, int8"},
      {[](v1::CompileSpec& s) { s.mutable_accuracy()->set_max_top1_drop(5); },
       "accuracy.max_top1_drop goes with quantization.precision int8 or bf16 or pruning"},
      {[](v1::CompileSpec& s) { s.mutable_accuracy()->set_atol(-1); },
       "accuracy.atol and accuracy.rtol must be finite and >= 0"},
      {[](v1::CompileSpec& s) { s.add_input_shapes()->set_name("x"); }, "input_shapes 'x' has no dims"},
      {[](v1::CompileSpec& s) { s.mutable_tuning()->set_budget_seconds(3); },
       "tuning.budget_seconds goes with tuning.enabled"},
      {[](v1::CompileSpec& s) { s.mutable_model()->set_sha256("xyz"); }, "model: sha256 'xyz' is not 64 lowercase hex"},
      {[](v1::CompileSpec& s) { s.mutable_target()->set_preset("pdp-11"); }, "unknown target preset 'pdp-11'"},
  };
  for (const Case& c : cases) {
    v1::CompileSpec spec = MinimalSpec();
    c.mutate(spec);
    EXPECT_THAT(ErrorOf(spec), HasSubstr(c.error));
  }
}

// Every scalar leaf of a message, as a function that changes it (a different value, or an
// added element for a repeated field).
void Mutators(google::protobuf::Message* root, std::vector<std::string> path,
              std::vector<std::pair<std::string, std::function<void(google::protobuf::Message*)>>>& out) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = root->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    std::vector<std::string> here = path;
    here.push_back(f->name());
    std::string name;
    for (const std::string& p : here) name += (name.empty() ? "" : ".") + p;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_repeated()) {
      Mutators(root->GetReflection()->MutableMessage(root, f), here, out);
      continue;
    }
    out.emplace_back(name, [here](google::protobuf::Message* m) {
      for (size_t k = 0; k + 1 < here.size(); ++k)
        m = m->GetReflection()->MutableMessage(m, m->GetDescriptor()->FindFieldByName(here[k]));
      const FieldDescriptor* leaf = m->GetDescriptor()->FindFieldByName(here.back());
      const google::protobuf::Reflection* r = m->GetReflection();
      if (leaf->is_repeated()) {
        if (leaf->cpp_type() == FieldDescriptor::CPPTYPE_STRING) r->AddString(m, leaf, "+avx2");
        if (leaf->cpp_type() == FieldDescriptor::CPPTYPE_INT32) r->AddInt32(m, leaf, 7);
        if (leaf->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) r->AddMessage(m, leaf);
        return;
      }
      switch (leaf->cpp_type()) {
        case FieldDescriptor::CPPTYPE_STRING: r->SetString(m, leaf, r->GetString(*m, leaf) + "x"); break;
        case FieldDescriptor::CPPTYPE_DOUBLE: r->SetDouble(m, leaf, r->GetDouble(*m, leaf) + 0.125); break;
        case FieldDescriptor::CPPTYPE_INT64: r->SetInt64(m, leaf, r->GetInt64(*m, leaf) + 1); break;
        case FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(m, leaf, r->GetUInt64(*m, leaf) + 1); break;
        case FieldDescriptor::CPPTYPE_BOOL: r->SetBool(m, leaf, !r->GetBool(*m, leaf)); break;
        default: FAIL() << "no mutator for " << leaf->full_name();
      }
    });
  }
}

// The key is the hash of the whole spec: no field can be forgotten, as a hand-listed one was.
TEST(SpecTest, EveryFieldReachesTheActionKey) {
  v1::CompileSpec spec = MinimalSpec();
  ASSERT_TRUE(Normalize(spec).ok());
  const std::string key = ActionKey(spec, "build-1");
  EXPECT_EQ(key.size(), 64u);
  EXPECT_NE(ActionKey(spec, "build-2"), key);
  std::vector<std::pair<std::string, std::function<void(google::protobuf::Message*)>>> mutators;
  v1::CompileSpec scratch;
  Mutators(&scratch, {}, mutators);
  EXPECT_GE(mutators.size(), 25u);
  for (const auto& [field, mutate] : mutators) {
    v1::CompileSpec changed = spec;
    mutate(&changed);
    EXPECT_NE(ActionKey(changed, "build-1"), key) << field << " does not change the action key";
  }
  // Equal specs hash equally whatever the order of lists that mean nothing in order, and
  // -0 is 0.
  v1::CompileSpec a = MinimalSpec(), b = MinimalSpec();
  a.mutable_quantization()->set_precision("int8");
  *a.mutable_quantization()->add_calibration() = DigestOf("s");
  a.mutable_quantization()->add_keep_float("n1");
  a.mutable_quantization()->add_keep_float("n2");
  b.mutable_quantization()->set_precision("int8");
  *b.mutable_quantization()->add_calibration() = DigestOf("s");
  b.mutable_quantization()->add_keep_float("n2");
  b.mutable_quantization()->add_keep_float("n1");
  b.mutable_pruning()->set_channels(-0.0);
  ASSERT_TRUE(Normalize(a).ok() && Normalize(b).ok());
  EXPECT_EQ(ActionKey(a, "build"), ActionKey(b, "build"));
}

}  // namespace
}  // namespace kiln
