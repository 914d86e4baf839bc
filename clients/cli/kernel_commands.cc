// `kiln kernels`: compiles the kernel library for targets ahead of the first compile. A
// compile links the kernels it calls from objects built once per (kernel bitcode, target);
// this builds them all, for the install tree (--dir PREFIX/lib/kiln/kernels, which
// compiles on every machine search read-only) or the user's cache (the default), so that
// no compile pays for them.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/cli/commands.h"
#include "kiln/common/time.h"
#include "kiln/compiler/kernel_library.h"
#include "kiln/compiler/target.h"

namespace kiln::cli {
namespace {

struct KernelFlags {
  std::vector<std::string> targets;
  bool presets = false;
  bool list = false;
  std::string dir;
};

// The targets asked for: --target values, every preset with --presets, else the host.
std::vector<std::string> TargetsOf(const KernelFlags& flags) {
  std::vector<std::string> targets = flags.targets;
  if (flags.presets) {
    for (const std::string& preset : TargetPresets()) {
      if (preset != "host") targets.push_back(preset);
    }
  }
  if (targets.empty()) targets.push_back("host");
  return targets;
}

int ListDirectories() {
  std::vector<std::string> roots = KernelLibrarySearchPath();
  for (size_t i = 0; i < roots.size(); ++i) {
    std::printf("%s%s\n", roots[i].c_str(), i + 1 == roots.size() ? "  (cache: missing kernels compiled here)" : "");
  }
  return 0;
}

int BuildLibrary(const KernelFlags& flags) {
  if (flags.list) return ListDirectories();
  const std::string root = flags.dir.empty() ? KernelLibrarySearchPath().back() : flags.dir;
  const std::vector<std::string> kernels = AllKernels();
  for (const std::string& text : TargetsOf(flags)) {
    absl::StatusOr<TargetSpec> target = ResolveTarget(text);
    if (!target.ok()) return UsageError("kernels", absl::StrCat("--target ", text, ": ", target.status().message()));
    Stopwatch clock;
    absl::StatusOr<KernelObjects> built = BuildKernels(*target, kernels, root);
    if (!built.ok()) return Fail(absl::StrCat("kernels for ", text, ": ", built.status().message()));
    std::printf("%-14s %s/%s: %zu kernels, %d compiled now, %.1f s\n", text.c_str(), root.c_str(),
                KernelLibraryKey(*target).c_str(), kernels.size(), built->compiled, clock.ElapsedMs() / 1000);
  }
  return 0;
}

}  // namespace

void AddKernelCommands(CLI::App& app, std::vector<Command>& commands) {
  auto flags = std::make_shared<KernelFlags>();
  CLI::App* c = app.add_subcommand("kernels", "Compile the kernel library for targets ahead of the first compile");
  c->footer(absl::StrCat(
      "Kernels are compiled once per (compiler build, target) and kept; a compile then generates only the model's "
      "glue. Without --dir they go to the cache (first of all: $KILN_CACHE_DIR/kernels, $XDG_CACHE_HOME/kiln/kernels, "
      "~/.cache/kiln/kernels); the install step builds the presets into PREFIX/lib/kiln/kernels. Presets: ",
      absl::StrJoin(TargetPresets(), ", ")));
  c->add_option("--target", flags->targets, "a target as for `kiln compile --target` (repeatable; default: host)");
  c->add_flag("--presets", flags->presets, "every preset target (not host)");
  c->add_option("--dir", flags->dir, "write into DIR/<bitcode hash>/<target hash>/ instead of the cache");
  c->add_flag("--list", flags->list, "print the directories searched for kernels, in order, and exit");
  commands.push_back({c, [flags] { return BuildLibrary(*flags); }});
}

}  // namespace kiln::cli
