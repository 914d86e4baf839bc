// The compiler's version: the release number plus a hash of the sources that decide what
// a compile produces (generated at build time by cmake/compiler_version.cmake). Manifests,
// reports and the service's action keys carry it.
#pragma once

#include <string>

namespace kiln {

std::string CompilerVersion();

}  // namespace kiln
