// The durable job queue (SQLite, WAL, synchronous=FULL). Two tables:
//   tasks: one row per action key: the compile itself (QUEUED -> RUNNING, leased to a
//          worker and heartbeated -> SUCCEEDED | FAILED | CANCELLED), its attempts and
//          lease generation;
//   jobs:  one row per Submit. Identical submits (same action key) while a task is in
//          flight join it: one compile, and its end is written to every joined job in
//          the same transaction.
// Every change is committed before the call returns, so a kill -9 of kilnd loses
// nothing it acknowledged; leases held by dead workers expire and the task is retried
// (up to max_attempts) or failed with the reason.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/common/sqlite_db.h"
#include "kiln/v1/kiln.pb.h"
#include "kiln/v1/worker.pb.h"

namespace kiln::server {

struct QueueOptions {
  int64_t lease_timeout_ms = 30000;
  int32_t max_attempts = 3;  // leases lost (worker died) before the job fails
  int64_t cpu_limit_seconds = 0;
  int64_t memory_limit_bytes = 0;
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

struct TaskEnd {
  std::string action_key;
  v1::JobState state;
  std::string target;     // short label for metrics
  int jobs = 0;           // jobs that ended with it
  int64_t queued_ms = 0;  // when the task was (last) queued
};

class JobQueue {
 public:
  static absl::StatusOr<std::unique_ptr<JobQueue>> Open(const std::string& path, const QueueOptions& options);

  // `job` carries model, target, action_key, labels, compiler_version; the queue fills id,
  // state and times. With `cached`, the job is born SUCCEEDED (cache_hit) without a task.
  // `target_label` is the short target name for metrics ("host", a preset, "custom"); `spec`
  // (normalised) is what the task's worker compiles (Task.spec).
  absl::StatusOr<SubmitOutcome> Submit(v1::Job job, const v1::CompileSpec& spec, const std::string& target_label,
                                       const std::optional<v1::JobResult>& cached);
  absl::StatusOr<v1::Job> Get(const std::string& id);
  // Cancels the job; the task stops too when no other job waits on it.
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  absl::StatusOr<std::pair<std::vector<v1::Job>, int64_t>> List(const ListFilter& filter);

  // Worker side.
  // `queue_wait_ms` (optional): how long the leased task waited.
  std::optional<v1::Task> Lease(const std::string& worker_id, int64_t* queue_wait_ms = nullptr);
  // keep_going=false when the task was cancelled or the lease moved on.
  v1::HeartbeatResponse Heartbeat(const v1::HeartbeatRequest& request);
  // Ends a task; returns the jobs' new state, or nullopt when the lease is stale.
  std::optional<TaskEnd> Complete(const std::string& action_key, int32_t attempt, bool success,
                                  const std::string& error, bool retryable, const v1::JobResult& result);
  // At startup: tasks leased to this server's own local workers (ids starting with
  // `owner_prefix`), which died with the previous process, go straight back to QUEUED
  // without using up an attempt. Returns how many.
  int RecoverLeases(const std::string& owner_prefix);
  // Tasks whose leases ran out go back to QUEUED, or FAILED after max_attempts.
  std::vector<TaskEnd> ExpireLeases();

  // Blobs a task not yet finished still needs (its model and input set).
  bool IsNeeded(const std::string& sha256_hex);
  struct Counts {
    int64_t queued_tasks = 0, running_tasks = 0;
  };
  Counts CountTasks();
  std::string OwnerOf(const std::string& action_key);

  // Waits until something changes (or timeout); returns the change counter.
  uint64_t WaitForChange(uint64_t seen, int64_t timeout_ms);
  uint64_t change_counter();
  const QueueOptions& options() const { return options_; }

 private:
  JobQueue() = default;
  void NotifyChange();
  absl::StatusOr<v1::Job> LoadJob(const std::string& id);
  absl::Status SetJobsOfTask(const std::string& action_key, v1::JobState state, const std::string& error,
                             const v1::JobResult* result, int* count);

  std::unique_ptr<SqliteDb> db_;
  QueueOptions options_;
  std::mutex change_mutex_;
  std::condition_variable change_cv_;
  uint64_t changes_ = 0;
};

}  // namespace kiln::server
