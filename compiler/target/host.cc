// Host detection without LLVM: cpuid and xgetbv on x86-64, getauxval(AT_HWCAP) and the
// MIDR on aarch64, mapped to LLVM's CPU and feature names. The CPU name tables follow
// LLVM 19's sys::getHostCPUName for the families Kiln meets (tests/unit/target_llvm_test.cc
// compares both on the machine it runs on); anything else gets the x86-64 level its
// features reach, which costs tuning, never correctness (features are listed explicitly).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kiln/compiler/target.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace kiln {
namespace {

enum Reg { kEax, kEbx, kEcx, kEdx };
enum class Leaf { k1, k7, k7_1, kExt1 };
// What the OS must save for a feature's registers (xgetbv bits): AVX needs XMM and YMM
// state (bits 1, 2), AVX-512 also opmask and ZMM state (bits 5-7).
enum class State { kNone, kAvx, kAvx512 };

struct X86Feature {
  const char* name;  // LLVM's
  Leaf leaf;
  Reg reg;
  int bit;
  State state;
};

// The features codegen may use (LLVM auto-vectorises with them, or the kernels ask for
// them); the x86-64 baseline (SSE2, CMOV, ...) is always there.
constexpr X86Feature kX86Features[] = {
    {"sse3", Leaf::k1, kEcx, 0, State::kNone},
    {"pclmul", Leaf::k1, kEcx, 1, State::kNone},
    {"ssse3", Leaf::k1, kEcx, 9, State::kNone},
    {"fma", Leaf::k1, kEcx, 12, State::kAvx},
    {"cx16", Leaf::k1, kEcx, 13, State::kNone},
    {"sse4.1", Leaf::k1, kEcx, 19, State::kNone},
    {"sse4.2", Leaf::k1, kEcx, 20, State::kNone},
    {"movbe", Leaf::k1, kEcx, 22, State::kNone},
    {"popcnt", Leaf::k1, kEcx, 23, State::kNone},
    {"aes", Leaf::k1, kEcx, 25, State::kNone},
    {"xsave", Leaf::k1, kEcx, 26, State::kNone},
    {"avx", Leaf::k1, kEcx, 28, State::kAvx},
    {"f16c", Leaf::k1, kEcx, 29, State::kAvx},
    {"rdrnd", Leaf::k1, kEcx, 30, State::kNone},
    {"bmi", Leaf::k7, kEbx, 3, State::kNone},
    {"avx2", Leaf::k7, kEbx, 5, State::kAvx},
    {"bmi2", Leaf::k7, kEbx, 8, State::kNone},
    {"avx512f", Leaf::k7, kEbx, 16, State::kAvx512},
    {"avx512dq", Leaf::k7, kEbx, 17, State::kAvx512},
    {"rdseed", Leaf::k7, kEbx, 18, State::kNone},
    {"adx", Leaf::k7, kEbx, 19, State::kNone},
    {"avx512ifma", Leaf::k7, kEbx, 21, State::kAvx512},
    {"avx512cd", Leaf::k7, kEbx, 28, State::kAvx512},
    {"sha", Leaf::k7, kEbx, 29, State::kNone},
    {"avx512bw", Leaf::k7, kEbx, 30, State::kAvx512},
    {"avx512vl", Leaf::k7, kEbx, 31, State::kAvx512},
    {"avx512vbmi", Leaf::k7, kEcx, 1, State::kAvx512},
    {"avx512vbmi2", Leaf::k7, kEcx, 6, State::kAvx512},
    {"gfni", Leaf::k7, kEcx, 8, State::kNone},
    {"vaes", Leaf::k7, kEcx, 9, State::kAvx},
    {"vpclmulqdq", Leaf::k7, kEcx, 10, State::kAvx},
    {"avx512vnni", Leaf::k7, kEcx, 11, State::kAvx512},
    {"avx512bitalg", Leaf::k7, kEcx, 12, State::kAvx512},
    {"avx512vpopcntdq", Leaf::k7, kEcx, 14, State::kAvx512},
    {"avx512fp16", Leaf::k7, kEdx, 23, State::kAvx512},
    {"avxvnni", Leaf::k7_1, kEax, 4, State::kAvx},
    {"avx512bf16", Leaf::k7_1, kEax, 5, State::kAvx512},
    {"avxifma", Leaf::k7_1, kEax, 23, State::kAvx},
    {"avxvnniint8", Leaf::k7_1, kEdx, 4, State::kAvx},
    {"sahf", Leaf::kExt1, kEcx, 0, State::kNone},
    {"lzcnt", Leaf::kExt1, kEcx, 5, State::kNone},
    {"sse4a", Leaf::kExt1, kEcx, 6, State::kNone},
    {"prfchw", Leaf::kExt1, kEcx, 8, State::kNone},
    {"xop", Leaf::kExt1, kEcx, 11, State::kAvx},
    {"fma4", Leaf::kExt1, kEcx, 16, State::kAvx},
};
// LLVM 18+ splits 512-bit vectors off AVX-512 ("evex512"); on hardware they come together.
constexpr char kEvex512[] = "evex512";

struct Aarch64Feature {
  const char* name;
  int hwcap;   // bit in AT_HWCAP, or -1
  int hwcap2;  // bit in AT_HWCAP2, or -1
};
constexpr Aarch64Feature kAarch64Features[] = {
    {"fp-armv8", 0, -1}, {"neon", 1, -1},     {"aes", 3, -1},   {"sha2", 6, -1},  {"crc", 7, -1},
    {"lse", 8, -1},      {"fullfp16", 9, -1}, {"rdm", 12, -1},  {"rcpc", 15, -1}, {"dotprod", 20, -1},
    {"sve", 22, -1},     {"sve2", -1, 1},     {"i8mm", -1, 13}, {"bf16", -1, 14},
};

struct ModelRange {
  int family, first, last;
  const char* cpu;
};
// AMD by family and model (LLVM's getAMDProcessorTypeAndSubtype).
constexpr ModelRange kAmdCpus[] = {
    {0x17, 0x30, 0x3f, "znver2"}, {0x17, 0x47, 0x47, "znver2"}, {0x17, 0x60, 0x7f, "znver2"},
    {0x17, 0x84, 0x87, "znver2"}, {0x17, 0x90, 0xaf, "znver2"}, {0x17, 0x00, 0xff, "znver1"},
    {0x19, 0x00, 0x0f, "znver3"}, {0x19, 0x20, 0x5f, "znver3"}, {0x19, 0x10, 0x1f, "znver4"},
    {0x19, 0x60, 0x7f, "znver4"}, {0x19, 0xa0, 0xaf, "znver4"}, {0x19, 0x00, 0xff, "znver3"},
    {0x1a, 0x00, 0xff, "znver5"},
};
// Intel family 6 by model (LLVM's getIntelProcessorTypeAndSubtype), the server and desktop
// cores of the last decade, each CPU with its models (0 ends a list). Model 0x55 is refined
// by features below.
struct IntelCpu {
  const char* cpu;
  int models[7];
};
constexpr IntelCpu kIntelCpus[] = {
    {"sandybridge", {0x2a, 0x2d}},
    {"ivybridge", {0x3a, 0x3e}},
    {"haswell", {0x3c, 0x3f, 0x45, 0x46}},
    {"broadwell", {0x3d, 0x47, 0x4f, 0x56}},
    {"skylake", {0x4e, 0x5e, 0x8e, 0x9e, 0xa5, 0xa6}},
    {"skylake-avx512", {0x55}},
    {"cannonlake", {0x66}},
    {"icelake-client", {0x7d, 0x7e}},
    {"icelake-server", {0x6a, 0x6c}},
    {"rocketlake", {0xa7}},
    {"tigerlake", {0x8c, 0x8d}},
    {"alderlake", {0x97, 0x9a}},
    {"raptorlake", {0xb7, 0xba, 0xbf}},
    {"meteorlake", {0xaa, 0xac}},
    {"sapphirerapids", {0x8f}},
    {"emeraldrapids", {0xcf}},
    {"graniterapids", {0xad, 0xae}},
    {"sierraforest", {0xaf}},
    {"grandridge", {0xb6}},
    {"goldmont", {0x5c, 0x5f}},
    {"goldmont-plus", {0x7a}},
    {"tremont", {0x86, 0x96, 0x9c}},
};
// aarch64 by MIDR implementer and part (LLVM's getHostCPUNameForARM).
struct Aarch64Part {
  unsigned implementer, part;
  const char* cpu;
};
constexpr Aarch64Part kAarch64Cpus[] = {
    {0x41, 0xd03, "cortex-a53"},  {0x41, 0xd07, "cortex-a57"},  {0x41, 0xd08, "cortex-a72"},
    {0x41, 0xd0b, "cortex-a76"},  {0x41, 0xd0c, "neoverse-n1"}, {0x41, 0xd40, "neoverse-v1"},
    {0x41, 0xd49, "neoverse-n2"}, {0x41, 0xd4f, "neoverse-v2"}, {0x41, 0xd8e, "neoverse-n3"},
    {0x41, 0xd84, "neoverse-v3"}, {0xc0, 0xac3, "ampere1"},     {0xc0, 0xac4, "ampere1a"},
    {0x48, 0xd01, "tsv110"},      {0x51, 0xc00, "falkor"},      {0x46, 0x001, "a64fx"},
};

bool Has(const std::vector<std::string>& on, const char* name) {
  return std::find(on.begin(), on.end(), name) != on.end();
}

// The x86-64 microarchitecture level the features reach (the psABI's lists).
const char* X86Level(const std::vector<std::string>& on) {
  auto all = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return Has(on, n); });
  };
  if (!all({"cx16", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3", "sahf"})) return "x86-64";
  if (!all({"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"})) return "x86-64-v2";
  if (!all({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})) return "x86-64-v3";
  return "x86-64-v4";
}

const char* IntelCpuName(int model, const std::vector<std::string>& on) {
  for (const IntelCpu& c : kIntelCpus) {
    if (std::find(std::begin(c.models), std::end(c.models), model) == std::end(c.models)) continue;
    if (std::string(c.cpu) == "skylake-avx512") {
      if (Has(on, "avx512bf16")) return "cooperlake";
      if (Has(on, "avx512vnni")) return "cascadelake";
    }
    return c.cpu;
  }
  return nullptr;
}

std::string X86CpuName(const X86CpuId& id, const std::vector<std::string>& on) {
  if (id.vendor == "AuthenticAMD") {
    for (const ModelRange& r : kAmdCpus) {
      if (r.family == id.family && id.model >= r.first && id.model <= r.last) return r.cpu;
    }
  } else if (id.vendor == "GenuineIntel" && id.family == 6 && id.model != 0) {
    if (const char* cpu = IntelCpuName(id.model, on)) return cpu;
  }
  return X86Level(on);
}

v1::Target WithFeatures(std::string triple, std::string cpu, const std::vector<std::string>& names,
                        const std::vector<std::string>& on) {
  v1::Target target;
  target.set_preset("host");
  target.set_triple(std::move(triple));
  target.set_cpu(std::move(cpu));
  std::vector<std::string> features;
  for (const std::string& name : names) features.push_back(absl::StrCat(Has(on, name.c_str()) ? "+" : "-", name));
  std::sort(features.begin(), features.end());
  for (const std::string& f : features) target.add_features(f);
  return target;
}

#if defined(__x86_64__)
X86CpuId ReadX86CpuId() {
  X86CpuId id;
  unsigned max_leaf = 0, ebx = 0, ecx = 0, edx = 0;
  __get_cpuid(0, &max_leaf, &ebx, &ecx, &edx);
  char vendor[13] = {};
  std::copy_n(reinterpret_cast<const char*>(&ebx), 4, vendor);
  std::copy_n(reinterpret_cast<const char*>(&edx), 4, vendor + 4);
  std::copy_n(reinterpret_cast<const char*>(&ecx), 4, vendor + 8);
  id.vendor = vendor;
  unsigned* l1 = id.leaf1;
  __get_cpuid(1, &l1[0], &l1[1], &l1[2], &l1[3]);
  const unsigned base_family = (l1[0] >> 8) & 0xf, base_model = (l1[0] >> 4) & 0xf;
  id.family = static_cast<int>(base_family == 0xf ? base_family + ((l1[0] >> 20) & 0xff) : base_family);
  id.model =
      static_cast<int>(base_family == 6 || base_family == 0xf ? base_model | (((l1[0] >> 16) & 0xf) << 4) : base_model);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, id.leaf7[0], id.leaf7[1], id.leaf7[2], id.leaf7[3]);
    if (id.leaf7[0] >= 1) __cpuid_count(7, 1, id.leaf7_1[0], id.leaf7_1[1], id.leaf7_1[2], id.leaf7_1[3]);
  }
  unsigned max_ext = 0;
  __get_cpuid(0x80000000, &max_ext, &ebx, &ecx, &edx);
  if (max_ext >= 0x80000001) __get_cpuid(0x80000001, &id.ext1[0], &id.ext1[1], &id.ext1[2], &id.ext1[3]);
  if ((l1[2] >> 27) & 1) {  // OSXSAVE: xgetbv is available
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    id.xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  return id;
}
#endif

#if defined(__aarch64__)
// The MIDR's implementer and part from /proc/cpuinfo ("CPU implementer : 0x41").
void ReadMidr(unsigned* implementer, unsigned* part) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  auto value = [](const std::string& l) {
    unsigned v = 0;
    const size_t colon = l.find(':');
    if (colon != std::string::npos) std::sscanf(l.c_str() + colon + 1, "%x", &v);
    return v;
  };
  while (std::getline(in, line)) {
    if (line.rfind("CPU implementer", 0) == 0) *implementer = value(line);
    if (line.rfind("CPU part", 0) == 0) {
      *part = value(line);
      return;
    }
  }
}
#endif

v1::Target DetectHost() {
#if defined(__x86_64__)
  return X86HostTarget(ReadX86CpuId());
#elif defined(__aarch64__)
  unsigned implementer = 0, part = 0;
  ReadMidr(&implementer, &part);
  return Aarch64HostTarget(getauxval(AT_HWCAP), getauxval(AT_HWCAP2), implementer, part);
#else
#error "Kiln runs on x86-64 and aarch64 Linux"
#endif
}

}  // namespace

v1::Target X86HostTarget(const X86CpuId& id) {
  const bool avx_state = (id.xcr0 & 0x6) == 0x6;
  const bool avx512_state = avx_state && (id.xcr0 & 0xe0) == 0xe0;
  std::vector<std::string> names, on;
  for (const X86Feature& f : kX86Features) {
    names.push_back(f.name);
    const unsigned* regs = f.leaf == Leaf::k1     ? id.leaf1
                           : f.leaf == Leaf::k7   ? id.leaf7
                           : f.leaf == Leaf::k7_1 ? id.leaf7_1
                                                  : id.ext1;
    bool present = (regs[f.reg] >> f.bit) & 1;
    if (f.state == State::kAvx) present = present && avx_state;
    if (f.state == State::kAvx512) present = present && avx512_state;
    if (present) on.push_back(f.name);
  }
  names.push_back(kEvex512);
  if (Has(on, "avx512f")) on.push_back(kEvex512);
  return WithFeatures("x86_64-unknown-linux-gnu", X86CpuName(id, on), names, on);
}

v1::Target Aarch64HostTarget(unsigned long hwcap, unsigned long hwcap2, unsigned implementer, unsigned part) {
  std::vector<std::string> names, on;
  for (const Aarch64Feature& f : kAarch64Features) {
    names.push_back(f.name);
    const bool present = f.hwcap >= 0 ? (hwcap >> f.hwcap) & 1 : (hwcap2 >> f.hwcap2) & 1;
    // fullfp16 needs both the scalar (FPHP, bit 9) and the vector (ASIMDHP, bit 10) forms.
    if (present && (std::string(f.name) != "fullfp16" || ((hwcap >> 10) & 1))) on.push_back(f.name);
  }
  std::string cpu = "generic";
  for (const Aarch64Part& p : kAarch64Cpus) {
    if (p.implementer == implementer && p.part == part) cpu = p.cpu;
  }
  return WithFeatures("aarch64-unknown-linux-gnu", cpu, names, on);
}

std::vector<std::string> CodegenFeatureNames(absl::string_view triple) {
  std::vector<std::string> names;
  if (absl::StartsWith(triple, "x86_64")) {
    for (const X86Feature& f : kX86Features) names.push_back(f.name);
    names.push_back(kEvex512);
  } else if (absl::StartsWith(triple, "aarch64")) {
    for (const Aarch64Feature& f : kAarch64Features) names.push_back(f.name);
  }
  return names;
}

const v1::Target& HostTarget() {
  static const v1::Target* host = new v1::Target(DetectHost());
  return *host;
}

}  // namespace kiln
