// JobStore: the durable job queue as kilnd's service layer sees it, independent of the
// database behind it. Two kinds of rows:
//   task: one per action key: the compile itself (QUEUED -> RUNNING, leased to a worker
//         and heartbeated -> SUCCEEDED | FAILED | CANCELLED), its attempts and lease
//         generation (the fencing token a worker echoes);
//   job:  one per Submit. Identical submits (same action key) while a task is in flight
//         join it: one compile, and its end is written to every joined job at once.
// Every change is durable before the call returns, so a crash of kilnd loses nothing it
// acknowledged. SqliteJobStore (sqlite_job_store.h) is the embedded implementation; a
// PostgreSQL one for several kilnd frontends implements the same interface.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/v1/kiln.pb.h"
#include "kiln/v1/worker.pb.h"

namespace kiln::server {

struct JobStoreOptions {
  int64_t lease_timeout_ms = 30000;
  int32_t max_attempts = 3;  // leases lost (worker died) before the job fails
  int64_t cpu_limit_seconds = 0;
  int64_t memory_limit_bytes = 0;
};

// One Submit as the store records it.
struct NewJob {
  // model, target, target_name, action_key, labels, compiler_version; the store fills id,
  // state and times.
  v1::Job job;
  v1::CompileSpec spec;      // normalised: what the task's worker compiles
  std::string target_label;  // short target name for metrics ("host", a preset, "custom")
  // Set: the action cache answered, and the job is born SUCCEEDED without a task.
  std::optional<v1::JobResult> cached;
};

struct SubmitOutcome {
  v1::Job job;
  bool joined = false;  // joined a task already in flight
};

struct ListFilter {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::map<std::string, std::string> labels;
  int32_t page_size = 50;
  int64_t after_seq = 0;
};

struct JobPage {
  std::vector<v1::Job> jobs;
  int64_t next_after_seq = 0;  // 0: this was the last page
};

struct LeasedTask {
  v1::Task task;
  int64_t queue_wait_ms = 0;  // how long the task waited for a worker
};

// A worker's report on a task it holds, fenced by `attempt` (the lease generation).
struct TaskProgress {
  std::string action_key;
  int32_t attempt = 0;
  std::string phase;
  double progress = 0;
};

struct HeartbeatVerdict {
  bool keep_going = false;
  std::string reason;  // why not, for the worker's log
};

struct TaskOutcome {
  std::string action_key;
  int32_t attempt = 0;
  bool success = false;
  std::string error;
  bool retryable = false;  // the worker's fault, not the model's: try again
  v1::JobResult result;
};

struct TaskEnd {
  std::string action_key;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  // QUEUED when it goes round again
  std::string target;                              // short label for metrics
  int jobs = 0;                                    // jobs that ended with it
  int64_t queued_ms = 0;                           // when the task was (last) queued
};

struct TaskCounts {
  int64_t queued = 0;
  int64_t running = 0;
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Client side.
  virtual absl::StatusOr<SubmitOutcome> Submit(const NewJob& request) = 0;
  // NotFound names the id.
  virtual absl::StatusOr<v1::Job> Get(const std::string& id) = 0;
  // Cancels the job; the task stops too when no other job waits on it. A finished job is
  // returned unchanged.
  virtual absl::StatusOr<v1::Job> Cancel(const std::string& id) = 0;
  virtual absl::StatusOr<JobPage> List(const ListFilter& filter) = 0;

  // Worker side. Lease gives the oldest queued task, or nullopt when none waits.
  virtual absl::StatusOr<std::optional<LeasedTask>> Lease(const std::string& worker_id) = 0;
  // keep_going=false when the task was cancelled or the lease moved on.
  virtual absl::StatusOr<HeartbeatVerdict> Heartbeat(const TaskProgress& progress) = 0;
  // Ends (or, for a retryable failure, requeues) a task and its jobs. FailedPrecondition
  // when the lease is stale: the task was cancelled or leased again since.
  virtual absl::StatusOr<TaskEnd> Complete(const TaskOutcome& outcome) = 0;
  // At startup: tasks leased to this server's own local workers (ids starting with
  // `owner_prefix`), which died with the previous process, go straight back to QUEUED
  // without using up an attempt. Returns how many.
  virtual absl::StatusOr<int> RecoverLeases(const std::string& owner_prefix) = 0;
  // Tasks whose leases ran out go back to QUEUED, or FAILED after max_attempts.
  virtual absl::StatusOr<std::vector<TaskEnd>> ExpireLeases() = 0;

  // Whether a task not yet finished still needs this blob (model, inputs, calibration).
  virtual absl::StatusOr<bool> IsNeeded(const std::string& sha256_hex) = 0;
  virtual absl::StatusOr<TaskCounts> CountTasks() = 0;
  virtual const JobStoreOptions& options() const = 0;

  // Change notification for watchers and long-polling leases: a counter bumped on every
  // change this process makes.
  virtual uint64_t change_counter() = 0;
  // Waits until the counter differs from `seen` (or timeout); returns the counter.
  virtual uint64_t WaitForChange(uint64_t seen, int64_t timeout_ms) = 0;
};

// The change counter for implementations whose changes all pass through this process.
class ChangeSignal {
 public:
  void Notify();
  uint64_t counter();
  uint64_t WaitForChange(uint64_t seen, int64_t timeout_ms);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t changes_ = 0;
};

// How job states are written in the store: by name, so the rows read alike in any SQL
// console and do not depend on the proto's numbering.
const char* JobStateName(v1::JobState state);  // "queued", "running", ...
absl::StatusOr<v1::JobState> JobStateFromName(const std::string& name);
bool IsTerminal(v1::JobState state);

}  // namespace kiln::server
