// SqliteJobStore: see sqlite_job_store.h.
#include "server/queue/sqlite_job_store.h"

#include <mutex>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/common/time.h"

namespace kiln::server {
namespace {

using ::kiln::Statement;

std::string NewJobId() {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(UnixMillis()));
  std::lock_guard<std::mutex> lock(mutex);
  static const char kHex[] = "0123456789abcdef";
  std::string id = "job-";
  uint64_t bits = rng();
  for (int i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 15];
  return id;
}

// Schema version 1. `tasks` and `jobs` are created without indexes here so the migration
// can build them under these names while the old tables still hold theirs.
constexpr char kCreateTasks[] =
    "CREATE TABLE tasks (action_key TEXT PRIMARY KEY, state TEXT NOT NULL, request BLOB NOT NULL,"
    " target TEXT NOT NULL, target_label TEXT NOT NULL DEFAULT '', model_sha TEXT NOT NULL, input_sha TEXT NOT NULL,"
    " attempts INTEGER NOT NULL DEFAULT 0, generation INTEGER NOT NULL DEFAULT 0, lease_owner TEXT,"
    " lease_expires_ms INTEGER, phase TEXT NOT NULL DEFAULT 'queued', progress REAL NOT NULL DEFAULT 0,"
    " last_error TEXT NOT NULL DEFAULT '', queued_ms INTEGER NOT NULL);";
constexpr char kCreateJobs[] =
    "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, action_key TEXT NOT NULL,"
    " state TEXT NOT NULL, job BLOB NOT NULL, error TEXT NOT NULL DEFAULT '', result BLOB,"
    " started_ms INTEGER NOT NULL DEFAULT 0, finished_ms INTEGER NOT NULL DEFAULT 0);";
constexpr char kCreateRest[] =
    "CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state, queued_ms);"
    "CREATE INDEX IF NOT EXISTS jobs_key ON jobs(action_key, state);"
    "CREATE TABLE IF NOT EXISTS job_labels (job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS job_labels_kv ON job_labels(key, value);"
    // Blobs a task needs beyond its model and input set (int8 calibration samples).
    "CREATE TABLE IF NOT EXISTS task_blobs (action_key TEXT NOT NULL, sha TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS task_blobs_sha ON task_blobs(sha);";

// Version 0 stored states as kiln.v1.JobState numbers; this maps them to names in SQL.
std::string StateNumberToName(const std::string& column) {
  std::string sql = absl::StrCat("CASE ", column);
  for (v1::JobState state : {v1::QUEUED, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    absl::StrAppend(&sql, " WHEN ", static_cast<int>(state), " THEN '", JobStateName(state), "'");
  }
  return sql + " END";  // anything else is NULL and fails NOT NULL: the migration rolls back
}

// Version 0 -> 1: the same columns, states as names. The old tables are renamed aside,
// copied and dropped in the caller's transaction, so a failure leaves the file as it was.
std::string MigrateFromVersion0Sql() {
  const std::string task_columns =
      "action_key, request, target, target_label, model_sha, input_sha, attempts, generation, lease_owner,"
      " lease_expires_ms, phase, progress, last_error, queued_ms";
  const std::string job_columns = "seq, id, action_key, job, error, result, started_ms, finished_ms";
  return absl::StrCat("ALTER TABLE tasks RENAME TO tasks_v0; ALTER TABLE jobs RENAME TO jobs_v0;", kCreateTasks,
                      kCreateJobs, "INSERT INTO tasks (state, ", task_columns, ") SELECT ", StateNumberToName("state"),
                      ", ", task_columns, " FROM tasks_v0;", "INSERT INTO jobs (state, ", job_columns, ") SELECT ",
                      StateNumberToName("state"), ", ", job_columns, " FROM jobs_v0;",
                      "DROP TABLE tasks_v0; DROP TABLE jobs_v0;");
}

absl::StatusOr<int64_t> QueryInt(SqliteDb& db, const std::string& sql) {
  Statement q = db.Prepare(sql);
  const bool row = q.Step();
  if (!q.status().ok()) return q.status();
  return row ? q.Int(0) : 0;
}

absl::Status StaleLease(const std::string& action_key, int32_t attempt) {
  return absl::FailedPreconditionError(
      absl::StrCat("lease ", attempt, " of task ", action_key, " is stale: the task was cancelled or leased again"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path,
                                                                     const JobStoreOptions& options) {
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore());
  store->options_ = options;
  auto db = SqliteDb::Open(path);
  if (!db.ok()) return db.status();
  store->db_ = std::move(*db);
  if (auto s = store->Migrate(); !s.ok()) return s;
  return store;
}

absl::Status SqliteJobStore::Migrate() {
  std::lock_guard<std::mutex> lock(db_->mutex());
  Transaction txn(*db_);
  if (!txn.status().ok()) return txn.status();
  auto version = QueryInt(*db_, "PRAGMA user_version");
  if (!version.ok()) return version.status();
  if (*version == kSchemaVersion) return absl::OkStatus();
  if (*version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(db_->path(), " has job store schema version ", *version,
                                                      ", newer than this kilnd's ", kSchemaVersion,
                                                      "; run the kilnd that wrote it, or a newer one"));
  }
  auto old_tables = QueryInt(*db_, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'tasks'");
  if (!old_tables.ok()) return old_tables.status();
  const std::string create = *old_tables > 0 ? MigrateFromVersion0Sql() : absl::StrCat(kCreateTasks, kCreateJobs);
  if (auto s = db_->Exec(absl::StrCat(create, kCreateRest, "PRAGMA user_version = ", kSchemaVersion, ";")); !s.ok())
    return absl::Status(s.code(), absl::StrCat("upgrading job store ", db_->path(), ": ", s.message()));
  return txn.Commit();
}

// Runs `body(changed)` under the store's lock in one transaction, committed when it returns
// OK. Watchers are woken only when the body says it changed something: long-polling leases
// would otherwise wake each other in a loop.
template <typename Body>
auto SqliteJobStore::InTransaction(Body body) -> decltype(body(std::declval<bool&>())) {
  bool changed = false;
  std::lock_guard<std::mutex> lock(db_->mutex());
  Transaction txn(*db_);
  if (!txn.status().ok()) return txn.status();
  auto result = body(changed);
  if (!result.ok()) return result;
  if (auto s = txn.Commit(); !s.ok()) return s;
  if (changed) changes_.Notify();  // lock order: the store's mutex, then the signal's
  return result;
}

absl::StatusOr<SubmitOutcome> SqliteJobStore::Submit(const NewJob& request) {
  const int64_t now = UnixMillis();
  v1::Job job = request.job;
  job.set_id(NewJobId());
  job.set_created_ms(now);
  auto joined = InTransaction([&](bool& changed) -> absl::StatusOr<bool> {
    changed = true;
    std::optional<v1::JobState> task_state;
    if (!request.cached) {
      KILN_ASSIGN_OR_RETURN(task_state, TaskState(job.action_key()));
    }
    std::string result_bytes;
    int64_t started = 0, finished = 0;
    bool joined = false;
    if (request.cached) {
      job.set_state(v1::SUCCEEDED);
      job.set_cache_hit(true);
      request.cached->SerializeToString(&result_bytes);
      started = finished = now;
    } else if (task_state == v1::QUEUED || task_state == v1::RUNNING) {
      job.set_state(*task_state);
      joined = true;
      if (*task_state == v1::RUNNING) started = now;
    } else {
      // New, or a finished task whose result is no longer cached: (re)start it.
      job.set_state(v1::QUEUED);
      KILN_RETURN_IF_ERROR(QueueTask(request, now));
    }
    KILN_RETURN_IF_ERROR(InsertJob(job, result_bytes, started, finished));
    return joined;
  });
  if (!joined.ok()) return joined.status();
  KILN_ASSIGN_OR_RETURN(v1::Job stored, Get(job.id()));
  return SubmitOutcome{std::move(stored), *joined};
}

absl::StatusOr<std::optional<v1::JobState>> SqliteJobStore::TaskState(const std::string& action_key) {
  Statement q = db_->Prepare("SELECT state FROM tasks WHERE action_key = ?");
  q.Bind(1, action_key);
  const bool found = q.Step();
  if (!q.status().ok()) return q.status();
  if (!found) return std::nullopt;
  auto state = JobStateFromName(q.Text(0));
  if (!state.ok()) return state.status();
  return *state;
}

absl::Status SqliteJobStore::QueueTask(const NewJob& request, int64_t now) {
  const std::string& key = request.job.action_key();
  std::string request_bytes;
  request.spec.SerializeToString(&request_bytes);
  auto s =
      db_->Prepare(
             "INSERT INTO tasks (action_key, state, request, target, model_sha, input_sha, queued_ms, target_label)"
             " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(action_key) DO UPDATE SET state = excluded.state,"
             " request = excluded.request, attempts = 0, lease_owner = NULL, lease_expires_ms = NULL,"
             " phase = 'queued', progress = 0, last_error = '', queued_ms = excluded.queued_ms")
          .Bind(1, key)
          .Bind(2, JobStateName(v1::QUEUED))
          .BindBlob(3, request_bytes)
          .Bind(4, request.job.target())
          .Bind(5, request.spec.model().sha256())
          .Bind(6, request.spec.accuracy().input_set().sha256())
          .Bind(7, now)
          .Bind(8, request.target_label)
          .Run();
  if (!s.ok()) return s;
  if (auto d = db_->Prepare("DELETE FROM task_blobs WHERE action_key = ?").Bind(1, key).Run(); !d.ok()) return d;
  for (const auto& sample : request.spec.quantization().calibration()) {
    auto b = db_->Prepare("INSERT INTO task_blobs (action_key, sha) VALUES (?, ?)")
                 .Bind(1, key)
                 .Bind(2, sample.sha256())
                 .Run();
    if (!b.ok()) return b;
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::InsertJob(const v1::Job& job, const std::string& result_bytes, int64_t started,
                                       int64_t finished) {
  std::string job_bytes;
  job.SerializeToString(&job_bytes);
  auto s = db_->Prepare(
                  "INSERT INTO jobs (id, action_key, state, job, result, started_ms, finished_ms)"
                  " VALUES (?, ?, ?, ?, ?, ?, ?)")
               .Bind(1, job.id())
               .Bind(2, job.action_key())
               .Bind(3, JobStateName(job.state()))
               .BindBlob(4, job_bytes)
               .BindBlob(5, result_bytes)
               .Bind(6, started)
               .Bind(7, finished)
               .Run();
  if (!s.ok()) return s;
  for (const auto& [key, value] : job.labels()) {
    s = db_->Prepare("INSERT INTO job_labels (job_id, key, value) VALUES (?, ?, ?)")
            .Bind(1, job.id())
            .Bind(2, key)
            .Bind(3, value)
            .Run();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> SqliteJobStore::LoadJob(const std::string& id) {
  Statement q = db_->Prepare(
      "SELECT j.state, j.job, j.error, j.result, j.started_ms, j.finished_ms, t.phase, t.progress, t.attempts"
      " FROM jobs j LEFT JOIN tasks t ON t.action_key = j.action_key WHERE j.id = ?");
  q.Bind(1, id);
  if (!q.Step()) {
    if (!q.status().ok()) return q.status();
    return absl::NotFoundError(absl::StrCat("no job '", id, "'; list jobs with ListJobs (kiln jobs)"));
  }
  auto state = JobStateFromName(q.Text(0));
  if (!state.ok()) return state.status();
  v1::Job job;
  job.ParseFromString(q.Text(1));
  job.set_state(*state);
  job.set_error(q.Text(2));
  if (!q.IsNull(3)) job.mutable_result()->ParseFromString(q.Text(3));
  job.set_started_ms(q.Int(4));
  job.set_finished_ms(q.Int(5));
  if (!job.cache_hit() && !q.IsNull(8)) job.set_attempts(static_cast<int32_t>(q.Int(8)));
  if (!IsTerminal(*state) && !q.IsNull(6)) {
    job.set_phase(q.Text(6));
    job.set_progress(q.Real(7));
  } else {
    // A finished job's phase is its state's name ("succeeded" reads as "done").
    job.set_phase(*state == v1::SUCCEEDED ? "done" : JobStateName(*state));
    job.set_progress(*state == v1::SUCCEEDED ? 1.0 : 0.0);
  }
  return job;
}

absl::StatusOr<v1::Job> SqliteJobStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  return LoadJob(id);
}

absl::StatusOr<v1::Job> SqliteJobStore::Cancel(const std::string& id) {
  return InTransaction([&](bool& changed) -> absl::StatusOr<v1::Job> {
    KILN_ASSIGN_OR_RETURN(v1::Job job, LoadJob(id));
    if (IsTerminal(job.state())) return job;  // cancelling a finished job changes nothing
    changed = true;
    KILN_RETURN_IF_ERROR(
        db_->Prepare(
               "UPDATE jobs SET state = 'cancelled', error = 'cancelled by request', finished_ms = ? WHERE id = ?")
            .Bind(1, UnixMillis())
            .Bind(2, id)
            .Run());
    Statement others =
        db_->Prepare("SELECT COUNT(*) FROM jobs WHERE action_key = ? AND state IN ('queued', 'running')");
    others.Bind(1, job.action_key());
    const int64_t waiting = others.Step() ? others.Int(0) : 0;
    KILN_RETURN_IF_ERROR(others.status());
    if (waiting == 0) {
      KILN_RETURN_IF_ERROR(
          db_->Prepare("UPDATE tasks SET state = 'cancelled', last_error = 'cancelled', lease_owner = NULL"
                       " WHERE action_key = ? AND state IN ('queued', 'running')")
              .Bind(1, job.action_key())
              .Run());
    }
    return LoadJob(id);
  });
}

absl::StatusOr<JobPage> SqliteJobStore::List(const ListFilter& filter) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  std::string sql = "SELECT j.seq, j.id FROM jobs j WHERE j.seq > ?";
  if (filter.state != v1::JOB_STATE_UNSPECIFIED) sql += " AND j.state = ?";
  for (size_t i = 0; i < filter.labels.size(); ++i) {
    sql += " AND EXISTS (SELECT 1 FROM job_labels l WHERE l.job_id = j.id AND l.key = ? AND l.value = ?)";
  }
  sql += " ORDER BY j.seq LIMIT ?";
  Statement q = db_->Prepare(sql);
  int index = 1;
  q.Bind(index++, filter.after_seq);
  if (filter.state != v1::JOB_STATE_UNSPECIFIED) q.Bind(index++, JobStateName(filter.state));
  for (const auto& [key, value] : filter.labels) {
    q.Bind(index++, key);
    q.Bind(index++, value);
  }
  q.Bind(index++, int64_t{filter.page_size} + 1);  // one more than a page: is there a next?
  std::vector<std::pair<int64_t, std::string>> rows;
  while (q.Step()) rows.emplace_back(q.Int(0), q.Text(1));
  if (!q.status().ok()) return q.status();
  JobPage page;
  if (static_cast<int64_t>(rows.size()) > filter.page_size) {
    rows.pop_back();
    page.next_after_seq = rows.back().first;
  }
  for (const auto& [seq, id] : rows) {
    auto job = LoadJob(id);
    if (!job.ok()) return job.status();
    page.jobs.push_back(std::move(*job));
  }
  return page;
}

// Moves every job still waiting on the task to `state`. Terminal states stamp finished_ms;
// RUNNING and terminal states stamp started_ms once.
absl::Status SqliteJobStore::SetJobsOfTask(const std::string& action_key, v1::JobState state, const std::string& error,
                                           const v1::JobResult* result, int* count) {
  const int64_t now = UnixMillis();
  std::string result_bytes;
  if (result != nullptr) result->SerializeToString(&result_bytes);
  const int64_t finished = IsTerminal(state) ? now : 0;
  const int64_t started = IsTerminal(state) || state == v1::RUNNING ? now : 0;
  auto s = db_->Prepare(
                  "UPDATE jobs SET state = ?1, error = ?2, result = ?3, finished_ms = ?4,"
                  " started_ms = CASE WHEN ?5 > 0 AND started_ms = 0 THEN ?5 ELSE started_ms END"
                  " WHERE action_key = ?6 AND state IN ('queued', 'running')")
               .Bind(1, JobStateName(state))
               .Bind(2, error)
               .BindBlob(3, result_bytes)
               .Bind(4, finished)
               .Bind(5, started)
               .Bind(6, action_key)
               .Run();
  if (!s.ok()) return s;
  if (count != nullptr) *count = static_cast<int>(db_->Changes());
  return absl::OkStatus();
}

// Releases the task's lease: back to QUEUED for another attempt, or ended.
absl::Status SqliteJobStore::RequeueOrEndTask(const std::string& action_key, v1::JobState state,
                                              const std::string& reason) {
  return db_
      ->Prepare(
          "UPDATE tasks SET state = ?, lease_owner = NULL, lease_expires_ms = NULL, last_error = ?,"
          " phase = ?, progress = 0 WHERE action_key = ?")
      .Bind(1, JobStateName(state))
      .Bind(2, reason)
      .Bind(3, state == v1::QUEUED ? "queued" : "done")
      .Bind(4, action_key)
      .Run();
}

absl::StatusOr<std::optional<LeasedTask>> SqliteJobStore::Lease(const std::string& worker_id) {
  return InTransaction([&](bool& changed) -> absl::StatusOr<std::optional<LeasedTask>> {
    Statement q = db_->Prepare(
        "SELECT action_key, request, generation, queued_ms FROM tasks WHERE state = 'queued'"
        " ORDER BY queued_ms LIMIT 1");
    if (!q.Step()) {
      KILN_RETURN_IF_ERROR(q.status());
      return std::nullopt;
    }
    changed = true;
    const int64_t now = UnixMillis();
    LeasedTask leased;
    v1::Task& task = leased.task;
    task.set_action_key(q.Text(0));
    task.mutable_spec()->ParseFromString(q.Text(1));
    // The generation is the lease's fencing token: heartbeats and completions must echo it.
    const int64_t generation = q.Int(2) + 1;
    leased.queue_wait_ms = now - q.Int(3);
    task.set_attempt(static_cast<int32_t>(generation));
    task.set_lease_timeout_ms(options_.lease_timeout_ms);
    task.set_cpu_limit_seconds(options_.cpu_limit_seconds);
    task.set_memory_limit_bytes(options_.memory_limit_bytes);
    KILN_RETURN_IF_ERROR(db_->Prepare("UPDATE tasks SET state = 'running', attempts = attempts + 1, generation = ?,"
                                      " lease_owner = ?, lease_expires_ms = ?, phase = 'leased', progress = 0"
                                      " WHERE action_key = ?")
                             .Bind(1, generation)
                             .Bind(2, worker_id)
                             .Bind(3, now + options_.lease_timeout_ms)
                             .Bind(4, task.action_key())
                             .Run());
    KILN_RETURN_IF_ERROR(SetJobsOfTask(task.action_key(), v1::RUNNING, "", nullptr, nullptr));
    return leased;
  });
}

absl::StatusOr<HeartbeatVerdict> SqliteJobStore::Heartbeat(const TaskProgress& progress) {
  return InTransaction([&](bool& changed) -> absl::StatusOr<HeartbeatVerdict> {
    Statement q = db_->Prepare("SELECT state, generation FROM tasks WHERE action_key = ?");
    q.Bind(1, progress.action_key);
    if (!q.Step()) {
      KILN_RETURN_IF_ERROR(q.status());
      return HeartbeatVerdict{false, "unknown task"};
    }
    KILN_ASSIGN_OR_RETURN(const v1::JobState state, JobStateFromName(q.Text(0)));
    if (q.Int(1) != progress.attempt) return HeartbeatVerdict{false, "the lease expired and the task moved on"};
    if (state != v1::RUNNING) {
      return HeartbeatVerdict{false,
                              state == v1::CANCELLED ? "the job was cancelled" : "the task is no longer running"};
    }
    changed = true;
    KILN_RETURN_IF_ERROR(
        db_->Prepare("UPDATE tasks SET lease_expires_ms = ?, phase = ?, progress = ? WHERE action_key = ?")
            .Bind(1, UnixMillis() + options_.lease_timeout_ms)
            .Bind(2, progress.phase)
            .Bind(3, progress.progress)
            .Bind(4, progress.action_key)
            .Run());
    return HeartbeatVerdict{true, ""};
  });
}

absl::StatusOr<TaskEnd> SqliteJobStore::Complete(const TaskOutcome& outcome) {
  return InTransaction([&](bool& changed) -> absl::StatusOr<TaskEnd> {
    Statement q =
        db_->Prepare("SELECT state, generation, attempts, target_label, queued_ms FROM tasks WHERE action_key = ?");
    q.Bind(1, outcome.action_key);
    const bool found = q.Step();
    KILN_RETURN_IF_ERROR(q.status());
    if (!found || q.Text(0) != JobStateName(v1::RUNNING) || q.Int(1) != outcome.attempt)
      return StaleLease(outcome.action_key, outcome.attempt);
    changed = true;
    TaskEnd end{outcome.action_key, outcome.success ? v1::SUCCEEDED : v1::FAILED, q.Text(3), 0, q.Int(4)};
    const int64_t attempts = q.Int(2);
    std::string reason = outcome.error;
    if (!outcome.success && outcome.retryable) {
      if (attempts < options_.max_attempts) {
        end.state = v1::QUEUED;
      } else {
        reason = absl::StrCat(outcome.error, " (gave up after ", attempts, " attempts)");
      }
    }
    KILN_RETURN_IF_ERROR(RequeueOrEndTask(outcome.action_key, end.state, reason));
    const std::string job_error = end.state == v1::SUCCEEDED ? "" : reason;
    KILN_RETURN_IF_ERROR(SetJobsOfTask(outcome.action_key, end.state, job_error,
                                       outcome.success ? &outcome.result : nullptr, &end.jobs));
    return end;
  });
}

absl::StatusOr<int> SqliteJobStore::RecoverLeases(const std::string& owner_prefix) {
  return InTransaction([&](bool& changed) -> absl::StatusOr<int> {
    Statement q =
        db_->Prepare("SELECT action_key FROM tasks WHERE state = 'running' AND substr(lease_owner, 1, ?) = ?");
    q.Bind(1, static_cast<int64_t>(owner_prefix.size())).Bind(2, owner_prefix);
    std::vector<std::string> keys;
    while (q.Step()) keys.push_back(q.Text(0));
    KILN_RETURN_IF_ERROR(q.status());
    for (const std::string& key : keys) {
      // The attempt is given back: the worker died with kilnd, not because of the model.
      KILN_RETURN_IF_ERROR(db_->Prepare("UPDATE tasks SET state = 'queued', attempts = MAX(attempts - 1, 0),"
                                        " lease_owner = NULL, lease_expires_ms = NULL, phase = 'queued', progress = 0"
                                        " WHERE action_key = ?")
                               .Bind(1, key)
                               .Run());
      KILN_RETURN_IF_ERROR(SetJobsOfTask(key, v1::QUEUED, "", nullptr, nullptr));
    }
    changed = !keys.empty();
    return static_cast<int>(keys.size());
  });
}

absl::StatusOr<std::vector<TaskEnd>> SqliteJobStore::ExpireLeases() {
  return InTransaction([&](bool& changed) -> absl::StatusOr<std::vector<TaskEnd>> {
    Statement q = db_->Prepare(
        "SELECT action_key, attempts, lease_owner, target_label FROM tasks WHERE state = 'running'"
        " AND lease_expires_ms < ?");
    q.Bind(1, UnixMillis());
    std::vector<std::tuple<std::string, int64_t, std::string, std::string>> expired;
    while (q.Step()) expired.emplace_back(q.Text(0), q.Int(1), q.Text(2), q.Text(3));
    KILN_RETURN_IF_ERROR(q.status());
    std::vector<TaskEnd> ended;
    for (const auto& [key, attempts, owner, target] : expired) {
      const bool give_up = attempts >= options_.max_attempts;
      const std::string reason =
          absl::StrCat("worker ", owner, " stopped heartbeating (lease of ", options_.lease_timeout_ms,
                       " ms expired) on attempt ", attempts, " of ", options_.max_attempts);
      TaskEnd end{key, give_up ? v1::FAILED : v1::QUEUED, target, 0, 0};
      KILN_RETURN_IF_ERROR(RequeueOrEndTask(key, end.state, reason));
      KILN_RETURN_IF_ERROR(SetJobsOfTask(key, end.state, give_up ? reason : "", nullptr, &end.jobs));
      ended.push_back(end);
    }
    changed = !ended.empty();
    return ended;
  });
}

absl::StatusOr<bool> SqliteJobStore::IsNeeded(const std::string& sha256_hex) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  Statement q = db_->Prepare(
      "SELECT 1 FROM tasks WHERE state IN ('queued', 'running') AND (model_sha = ?1 OR input_sha = ?1)"
      " UNION ALL SELECT 1 FROM task_blobs b JOIN tasks t ON t.action_key = b.action_key"
      " WHERE b.sha = ?1 AND t.state IN ('queued', 'running') LIMIT 1");
  q.Bind(1, sha256_hex);
  const bool needed = q.Step();
  if (!q.status().ok()) return q.status();
  return needed;
}

absl::StatusOr<TaskCounts> SqliteJobStore::CountTasks() {
  std::lock_guard<std::mutex> lock(db_->mutex());
  TaskCounts counts;
  Statement q = db_->Prepare("SELECT state, COUNT(*) FROM tasks WHERE state IN ('queued', 'running') GROUP BY state");
  while (q.Step()) {
    (q.Text(0) == JobStateName(v1::QUEUED) ? counts.queued : counts.running) = q.Int(1);
  }
  if (!q.status().ok()) return q.status();
  return counts;
}

}  // namespace kiln::server
