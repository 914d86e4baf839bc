// The kiln CLI's subcommands on one CLI11 app: each adds itself (its flags, with a true
// `kiln SUBCOMMAND --help`) and the function main runs when it is the one given.
// Exit status: 0 on success, 1 on a failed operation, 2 on a usage error.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace kiln::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// compile, quantize (kiln.cc), then run, bench, inspect, kernels.
void AddLocalCommands(CLI::App& app, std::vector<Command>& commands);
// run, bench, inspect: artifacts through the runtime (artifact_commands.cc).
void AddArtifactCommands(CLI::App& app, std::vector<Command>& commands);
// kernels: the kernel library built ahead of use (kernel_commands.cc).
void AddKernelCommands(CLI::App& app, std::vector<Command>& commands);
// submit, job, jobs, watch, cancel, fetch (service_commands.cc).
void AddServiceCommands(CLI::App& app, std::vector<Command>& commands);

// A subcommand whose first argument is MODEL.onnx (compile, quantize, submit), with its
// one-line description and --help footer from kiln.cc's table; `model` gets the path.
CLI::App* AddModelSubcommand(CLI::App& app, const char* name, std::string& model);

// "kiln: MESSAGE" and a pointer to the subcommand's help (kiln's for ""); returns 2.
int UsageError(const std::string& command, const std::string& message);
// "kiln: error: MESSAGE"; returns 1.
int Fail(const std::string& message);

}  // namespace kiln::cli
