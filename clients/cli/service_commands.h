// The kiln CLI's service subcommands (submit, job, jobs, watch, cancel, fetch): clients
// of a kilnd server over the kiln.v1 gRPC API.
#pragma once

#include <string>

namespace kiln::cli {

// True when `command` is a service subcommand.
bool IsServiceCommand(const std::string& command);
int RunServiceCommand(const std::string& command, int argc, char** argv);
extern const char kServiceUsage[];

}  // namespace kiln::cli
