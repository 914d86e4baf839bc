// SqliteJobStore: the embedded JobStore (one SQLite file, WAL, synchronous=FULL). Four
// tables: tasks (one per action key), jobs (one per Submit), job_labels, and task_blobs
// (calibration samples a task needs). States are stored by name. The schema version is
// PRAGMA user_version; Open migrates an older file in one transaction (version 0 stored
// states as the proto's enum numbers).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "kiln/common/sqlite_db.h"
#include "server/queue/job_store.h"

namespace kiln::server {

class SqliteJobStore final : public JobStore {
 public:
  // The schema this build writes; Open upgrades older files to it.
  static constexpr int kSchemaVersion = 1;

  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path, const JobStoreOptions& options);

  absl::StatusOr<SubmitOutcome> Submit(const NewJob& request) override;
  absl::StatusOr<v1::Job> Get(const std::string& id) override;
  absl::StatusOr<v1::Job> Cancel(const std::string& id) override;
  absl::StatusOr<JobPage> List(const ListFilter& filter) override;

  absl::StatusOr<std::optional<LeasedTask>> Lease(const std::string& worker_id) override;
  absl::StatusOr<HeartbeatVerdict> Heartbeat(const TaskProgress& progress) override;
  absl::StatusOr<TaskEnd> Complete(const TaskOutcome& outcome) override;
  absl::StatusOr<int> RecoverLeases(const std::string& owner_prefix) override;
  absl::StatusOr<std::vector<TaskEnd>> ExpireLeases() override;

  absl::StatusOr<bool> IsNeeded(const std::string& sha256_hex) override;
  absl::StatusOr<TaskCounts> CountTasks() override;
  const JobStoreOptions& options() const override { return options_; }

  uint64_t change_counter() override { return changes_.counter(); }
  uint64_t WaitForChange(uint64_t seen, int64_t timeout_ms) override {
    return changes_.WaitForChange(seen, timeout_ms);
  }

 private:
  SqliteJobStore() = default;
  absl::Status Migrate();
  template <typename Body>
  auto InTransaction(Body body) -> decltype(body(std::declval<bool&>()));
  // Each of these runs inside the caller's lock and transaction.
  absl::StatusOr<v1::Job> LoadJob(const std::string& id);
  absl::StatusOr<std::optional<v1::JobState>> TaskState(const std::string& action_key);
  absl::Status QueueTask(const NewJob& request, int64_t now);
  absl::Status InsertJob(const v1::Job& job, const std::string& result_bytes, int64_t started, int64_t finished);
  absl::Status RequeueOrEndTask(const std::string& action_key, v1::JobState state, const std::string& reason);
  absl::Status SetJobsOfTask(const std::string& action_key, v1::JobState state, const std::string& error,
                             const v1::JobResult* result, int* count);

  std::unique_ptr<SqliteDb> db_;
  JobStoreOptions options_;
  ChangeSignal changes_;
};

}  // namespace kiln::server
