// Wall-clock and elapsed time in the units the rest of Kiln stores (milliseconds).
#pragma once

#include <chrono>
#include <cstdint>

namespace kiln {

// Milliseconds since the Unix epoch (what job records and metrics store).
int64_t UnixMillis();

// Elapsed time on the monotonic clock, for phase timings.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double ElapsedMs() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  void Restart() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
