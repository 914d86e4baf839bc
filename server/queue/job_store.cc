// JobStore helpers shared by every implementation: see job_store.h.
#include "server/queue/job_store.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

// The one table of state names; the SQL schema's CHECK constraints spell the same names.
struct StateName {
  v1::JobState state;
  const char* name;
};
constexpr StateName kStateNames[] = {
    {v1::QUEUED, "queued"}, {v1::RUNNING, "running"},     {v1::SUCCEEDED, "succeeded"},
    {v1::FAILED, "failed"}, {v1::CANCELLED, "cancelled"},
};

}  // namespace

const char* JobStateName(v1::JobState state) {
  for (const StateName& entry : kStateNames) {
    if (entry.state == state) return entry.name;
  }
  return "unspecified";
}

absl::StatusOr<v1::JobState> JobStateFromName(const std::string& name) {
  for (const StateName& entry : kStateNames) {
    if (name == entry.name) return entry.state;
  }
  return absl::DataLossError(absl::StrCat("job store holds an unknown job state '", name, "'"));
}

bool IsTerminal(v1::JobState state) { return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED; }

void ChangeSignal::Notify() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++changes_;
  }
  cv_.notify_all();
}

uint64_t ChangeSignal::counter() {
  std::lock_guard<std::mutex> lock(mutex_);
  return changes_;
}

uint64_t ChangeSignal::WaitForChange(uint64_t seen, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return changes_ != seen; });
  return changes_;
}

}  // namespace kiln::server
