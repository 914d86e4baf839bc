// Argument parsing shared by the kiln CLI's local and service subcommands.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln::cli {

struct Args {
  std::vector<std::string> positional;
  std::multimap<std::string, std::string> flags;
  std::string Get(const std::string& key, const std::string& fallback = "") const {
    auto it = flags.find(key);
    return it == flags.end() ? fallback : it->second;
  }
  bool Has(const std::string& key) const { return flags.count(key) != 0; }
  std::vector<std::string> All(const std::string& key) const {
    std::vector<std::string> values;
    for (auto [it, end] = flags.equal_range(key); it != end; ++it) values.push_back(it->second);
    return values;
  }
};

inline int UsageError(const std::string& message) {
  std::fprintf(stderr, "kiln: %s\nRun 'kiln help' for usage.\n", message.c_str());
  return 2;
}

inline int Fail(const std::string& message) {
  std::fprintf(stderr, "kiln: error: %s\n", message.c_str());
  return 1;
}

// Parses "--flag value", "--flag=value" and boolean flags; unknown flags are errors.
inline bool ParseArgs(int argc, char** argv, int start, const std::map<std::string, bool>& known, Args& args,
                      std::string& error) {
  for (int i = start; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      std::string key = a, value;
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        key = a.substr(0, eq);
        value = a.substr(eq + 1);
      }
      auto it = known.find(key);
      if (it == known.end()) {
        error = absl::StrCat("unknown option '", key, "'");
        return false;
      }
      if (it->second && eq == std::string::npos) {
        if (i + 1 >= argc) {
          error = absl::StrCat("option '", key, "' needs a value");
          return false;
        }
        value = argv[++i];
      }
      args.flags.emplace(key, value);
    } else {
      args.positional.push_back(a);
    }
  }
  return true;
}

inline bool ParseInt(const std::string& text, const char* flag, int min_value, int* out, std::string& error) {
  if (!absl::SimpleAtoi(text, out) || *out < min_value) {
    error = absl::StrCat(flag, " must be an integer >= ", min_value, ", got '", text, "'");
    return false;
  }
  return true;
}

}  // namespace kiln::cli
