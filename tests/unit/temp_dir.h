// Fresh temporary directories for unit tests, removed when the test binary exits.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::testing {

inline std::string MakeTempDir(const std::string& prefix) {
  static struct Cleanup {
    std::vector<std::string> dirs;
    ~Cleanup() {
      for (const auto& d : dirs) std::filesystem::remove_all(d);
    }
  } cleanup;
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  cleanup.dirs.push_back(pattern);
  return pattern;
}

}  // namespace kiln::testing
