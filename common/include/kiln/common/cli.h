// Command lines through one library (CLI11, Debian's libcli11-dev, header only) for every
// Kiln program: this runs the parse with Kiln's conventions, so each program reads alike.
// --help (on the program or any subcommand) prints that command's help and exits 0; a
// usage error prints "PROGRAM: message" and a hint to stderr and exits 2.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace kiln {

// A usage error as every Kiln program prints it: "PROGRAM: message" and where the help for
// `command` ("kiln compile", "kiln-worker") is, on stderr. Returns the exit status, 2.
inline int ReportUsageError(const std::string& command, const std::string& message) {
  const std::string program = command.substr(0, command.find(' '));
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", program.c_str(), message.c_str(), command.c_str());
  return 2;
}

// Parses argv into `app`: nullopt to go on, else the exit status to return now.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& done) {  // --help
    return app.exit(done);
  } catch (const CLI::ParseError& error) {
    // The innermost subcommand parsed so far names the help to read.
    std::string command = app.get_name();
    for (const CLI::App* at = &app; !at->get_subcommands().empty();) {
      at = at->get_subcommands().front();
      command += " " + at->get_name();
    }
    return ReportUsageError(command, error.what());
  }
}

}  // namespace kiln
