// JobQueue: see job_queue.h.
#include "server/queue/job_queue.h"

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "kiln/cache/cache.h"
#include "kiln/common/time.h"

namespace kiln::server {
namespace {

using ::kiln::Statement;

bool IsTerminal(int state) { return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED; }

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

}  // namespace

absl::StatusOr<std::unique_ptr<JobQueue>> JobQueue::Open(const std::string& path, const QueueOptions& options) {
  std::unique_ptr<JobQueue> queue(new JobQueue());
  queue->options_ = options;
  auto db = SqliteDb::Open(path);
  if (!db.ok()) return db.status();
  queue->db_ = std::move(*db);
  auto s = queue->db_->Exec(
      "CREATE TABLE IF NOT EXISTS tasks (action_key TEXT PRIMARY KEY, state INTEGER NOT NULL,"
      " request BLOB NOT NULL, target TEXT NOT NULL, target_label TEXT NOT NULL DEFAULT '', model_sha TEXT NOT NULL, "
      "input_sha TEXT NOT NULL,"
      " attempts INTEGER NOT NULL DEFAULT 0, generation INTEGER NOT NULL DEFAULT 0, lease_owner TEXT,"
      " lease_expires_ms INTEGER, phase TEXT NOT NULL DEFAULT 'queued', progress REAL NOT NULL DEFAULT 0,"
      " last_error TEXT NOT NULL DEFAULT '', queued_ms INTEGER NOT NULL);"
      "CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state, queued_ms);"
      "CREATE TABLE IF NOT EXISTS jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,"
      " action_key TEXT NOT NULL, state INTEGER NOT NULL, job BLOB NOT NULL, error TEXT NOT NULL DEFAULT '',"
      " result BLOB, started_ms INTEGER NOT NULL DEFAULT 0, finished_ms INTEGER NOT NULL DEFAULT 0);"
      "CREATE INDEX IF NOT EXISTS jobs_key ON jobs(action_key, state);"
      "CREATE TABLE IF NOT EXISTS job_labels (job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL);"
      "CREATE INDEX IF NOT EXISTS job_labels_kv ON job_labels(key, value);"
      // Blobs a task needs beyond its model and input set (int8 calibration samples).
      "CREATE TABLE IF NOT EXISTS task_blobs (action_key TEXT NOT NULL, sha TEXT NOT NULL);"
      "CREATE INDEX IF NOT EXISTS task_blobs_sha ON task_blobs(sha);");
  if (!s.ok()) return s;
  return queue;
}

void JobQueue::NotifyChange() {
  {
    std::lock_guard<std::mutex> lock(change_mutex_);
    ++changes_;
  }
  change_cv_.notify_all();
}

uint64_t JobQueue::change_counter() {
  std::lock_guard<std::mutex> lock(change_mutex_);
  return changes_;
}

uint64_t JobQueue::WaitForChange(uint64_t seen, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(change_mutex_);
  change_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return changes_ != seen; });
  return changes_;
}

absl::StatusOr<SubmitOutcome> JobQueue::Submit(v1::Job job, const v1::CompileSpec& spec,
                                               const std::string& target_label,
                                               const std::optional<v1::JobResult>& cached) {
  SubmitOutcome outcome;
  const int64_t now = UnixMillis();
  job.set_id(NewJobId());
  job.set_created_ms(now);
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Transaction txn(*db_);
    if (!txn.status().ok()) return txn.status();
    int task_state = -1;
    if (!cached) {
      Statement q = db_->Prepare("SELECT state FROM tasks WHERE action_key = ?");
      q.Bind(1, job.action_key());
      if (q.Step()) task_state = static_cast<int>(q.Int(0));
      if (!q.status().ok()) return q.status();
    }
    v1::JobState state;
    std::string result_bytes;
    int64_t started = 0, finished = 0;
    if (cached) {
      state = v1::SUCCEEDED;
      job.set_cache_hit(true);
      cached->SerializeToString(&result_bytes);
      started = finished = now;
    } else if (task_state == v1::QUEUED || task_state == v1::RUNNING) {
      state = static_cast<v1::JobState>(task_state);
      outcome.joined = true;
      if (state == v1::RUNNING) started = now;
    } else {
      // New, or a finished task whose result is no longer cached: (re)start it.
      state = v1::QUEUED;
      std::string request_bytes;
      spec.SerializeToString(&request_bytes);
      auto s =
          db_->Prepare(
                 "INSERT INTO tasks (action_key, state, request, target, model_sha, input_sha, queued_ms, target_label)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(action_key) DO UPDATE SET state = excluded.state,"
                 " request = excluded.request, attempts = 0, lease_owner = NULL, lease_expires_ms = NULL,"
                 " phase = 'queued', progress = 0, last_error = '', queued_ms = excluded.queued_ms")
              .Bind(1, job.action_key())
              .Bind(2, int64_t{v1::QUEUED})
              .BindBlob(3, request_bytes)
              .Bind(4, job.target())
              .Bind(5, spec.model().sha256())
              .Bind(6, spec.accuracy().input_set().sha256())
              .Bind(7, now)
              .Bind(8, target_label)
              .Run();
      if (!s.ok()) return s;
      if (auto d = db_->Prepare("DELETE FROM task_blobs WHERE action_key = ?").Bind(1, job.action_key()).Run(); !d.ok())
        return d;
      for (const auto& sample : spec.quantization().calibration()) {
        auto b = db_->Prepare("INSERT INTO task_blobs (action_key, sha) VALUES (?, ?)")
                     .Bind(1, job.action_key())
                     .Bind(2, sample.sha256())
                     .Run();
        if (!b.ok()) return b;
      }
    }
    job.set_state(state);
    std::string job_bytes;
    job.SerializeToString(&job_bytes);
    Statement insert = db_->Prepare(
        "INSERT INTO jobs (id, action_key, state, job, result, started_ms, finished_ms) VALUES (?, ?, ?, ?, ?, ?, ?)");
    insert.Bind(1, job.id())
        .Bind(2, job.action_key())
        .Bind(3, int64_t{state})
        .BindBlob(4, job_bytes)
        .BindBlob(5, result_bytes)
        .Bind(6, started)
        .Bind(7, finished);
    if (auto s = insert.Run(); !s.ok()) return s;
    for (const auto& [key, value] : job.labels()) {
      auto s = db_->Prepare("INSERT INTO job_labels (job_id, key, value) VALUES (?, ?, ?)")
                   .Bind(1, job.id())
                   .Bind(2, key)
                   .Bind(3, value)
                   .Run();
      if (!s.ok()) return s;
    }
    if (auto s = txn.Commit(); !s.ok()) return s;
  }
  NotifyChange();
  auto loaded = Get(job.id());
  if (!loaded.ok()) return loaded.status();
  outcome.job = std::move(*loaded);
  return outcome;
}

// Caller holds db_->mutex().
absl::StatusOr<v1::Job> JobQueue::LoadJob(const std::string& id) {
  Statement q = db_->Prepare(
      "SELECT j.state, j.job, j.error, j.result, j.started_ms, j.finished_ms, t.phase, t.progress, t.attempts,"
      " t.state FROM jobs j LEFT JOIN tasks t ON t.action_key = j.action_key WHERE j.id = ?");
  q.Bind(1, id);
  if (!q.Step()) {
    if (!q.status().ok()) return q.status();
    return absl::NotFoundError(absl::StrCat("no job '", id, "'; list jobs with ListJobs (kiln jobs)"));
  }
  v1::Job job;
  job.ParseFromString(q.Text(1));
  const auto state = static_cast<v1::JobState>(q.Int(0));
  job.set_state(state);
  job.set_error(q.Text(2));
  if (!q.IsNull(3)) job.mutable_result()->ParseFromString(q.Text(3));
  job.set_started_ms(q.Int(4));
  job.set_finished_ms(q.Int(5));
  if (!job.cache_hit() && !q.IsNull(8)) job.set_attempts(static_cast<int32_t>(q.Int(8)));
  if (!IsTerminal(state) && !q.IsNull(6)) {
    job.set_phase(q.Text(6));
    job.set_progress(q.Real(7));
  } else {
    job.set_phase(state == v1::SUCCEEDED   ? "done"
                  : state == v1::FAILED    ? "failed"
                  : state == v1::CANCELLED ? "cancelled"
                                           : "queued");
    job.set_progress(state == v1::SUCCEEDED ? 1.0 : 0.0);
  }
  return job;
}

absl::StatusOr<v1::Job> JobQueue::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  return LoadJob(id);
}

absl::StatusOr<v1::Job> JobQueue::Cancel(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Transaction txn(*db_);
    if (!txn.status().ok()) return txn.status();
    auto job = LoadJob(id);
    if (!job.ok()) return job.status();
    if (IsTerminal(job->state())) return job;  // cancelling a finished job changes nothing
    const int64_t now = UnixMillis();
    auto s = db_->Prepare("UPDATE jobs SET state = ?, error = 'cancelled by request', finished_ms = ? WHERE id = ?")
                 .Bind(1, int64_t{v1::CANCELLED})
                 .Bind(2, now)
                 .Bind(3, id)
                 .Run();
    if (!s.ok()) return s;
    Statement others = db_->Prepare("SELECT COUNT(*) FROM jobs WHERE action_key = ? AND state IN (?, ?)");
    others.Bind(1, job->action_key()).Bind(2, int64_t{v1::QUEUED}).Bind(3, int64_t{v1::RUNNING});
    int64_t waiting = others.Step() ? others.Int(0) : 0;
    if (waiting == 0) {
      s = db_->Prepare(
                 "UPDATE tasks SET state = ?, last_error = 'cancelled', lease_owner = NULL WHERE action_key = ? AND "
                 "state IN (?, ?)")
              .Bind(1, int64_t{v1::CANCELLED})
              .Bind(2, job->action_key())
              .Bind(3, int64_t{v1::QUEUED})
              .Bind(4, int64_t{v1::RUNNING})
              .Run();
      if (!s.ok()) return s;
    }
    if (auto c = txn.Commit(); !c.ok()) return c;
  }
  NotifyChange();
  return Get(id);
}

absl::StatusOr<std::pair<std::vector<v1::Job>, int64_t>> JobQueue::List(const ListFilter& filter) {
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
  if (filter.state != v1::JOB_STATE_UNSPECIFIED) q.Bind(index++, int64_t{filter.state});
  for (const auto& [key, value] : filter.labels) {
    q.Bind(index++, key);
    q.Bind(index++, value);
  }
  q.Bind(index++, int64_t{filter.page_size} + 1);
  std::vector<std::pair<int64_t, std::string>> rows;
  while (q.Step()) rows.emplace_back(q.Int(0), q.Text(1));
  if (!q.status().ok()) return q.status();
  int64_t next = 0;
  if (static_cast<int64_t>(rows.size()) > filter.page_size) {
    rows.pop_back();
    next = rows.back().first;
  }
  std::vector<v1::Job> jobs;
  for (const auto& [seq, id] : rows) {
    auto job = LoadJob(id);
    if (job.ok()) jobs.push_back(std::move(*job));
  }
  return std::make_pair(std::move(jobs), next);
}

// Caller holds the mutex and a transaction.
absl::Status JobQueue::SetJobsOfTask(const std::string& action_key, v1::JobState state, const std::string& error,
                                     const v1::JobResult* result, int* count) {
  const int64_t now = UnixMillis();
  std::string result_bytes;
  if (result != nullptr) result->SerializeToString(&result_bytes);
  Statement update = db_->Prepare(
      IsTerminal(state)
          ? "UPDATE jobs SET state = ?, error = ?, result = ?, finished_ms = ?, "
            "started_ms = CASE WHEN started_ms = 0 THEN ? ELSE started_ms END WHERE action_key = ? AND state IN (1, 2)"
          : "UPDATE jobs SET state = ?, error = ?, result = ?, finished_ms = 0, "
            "started_ms = CASE WHEN ? > 0 AND started_ms = 0 THEN ? ELSE started_ms END WHERE action_key = ? AND state "
            "IN (1, 2)");
  if (IsTerminal(state)) {
    update.Bind(1, int64_t{state})
        .Bind(2, error)
        .BindBlob(3, result_bytes)
        .Bind(4, now)
        .Bind(5, now)
        .Bind(6, action_key);
  } else {
    int64_t started = state == v1::RUNNING ? now : 0;
    update.Bind(1, int64_t{state})
        .Bind(2, error)
        .BindBlob(3, result_bytes)
        .Bind(4, started)
        .Bind(5, started)
        .Bind(6, action_key);
  }
  if (auto s = update.Run(); !s.ok()) return s;
  if (count != nullptr) *count = static_cast<int>(db_->Changes());
  return absl::OkStatus();
}

std::optional<v1::Task> JobQueue::Lease(const std::string& worker_id, int64_t* queue_wait_ms) {
  v1::Task task;
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Transaction txn(*db_);
    if (!txn.status().ok()) return std::nullopt;
    Statement q = db_->Prepare(
        "SELECT action_key, request, target, attempts, generation, queued_ms FROM tasks WHERE state = ? ORDER BY "
        "queued_ms LIMIT 1");
    q.Bind(1, int64_t{v1::QUEUED});
    if (!q.Step()) return std::nullopt;
    const std::string key = q.Text(0);
    task.set_action_key(key);
    task.mutable_spec()->ParseFromString(q.Text(1));
    const int64_t generation = q.Int(4) + 1;
    if (queue_wait_ms != nullptr) *queue_wait_ms = UnixMillis() - q.Int(5);
    task.set_attempt(static_cast<int32_t>(generation));
    task.set_lease_timeout_ms(options_.lease_timeout_ms);
    task.set_cpu_limit_seconds(options_.cpu_limit_seconds);
    task.set_memory_limit_bytes(options_.memory_limit_bytes);
    auto s = db_->Prepare(
                    "UPDATE tasks SET state = ?, attempts = attempts + 1, generation = ?, lease_owner = ?,"
                    " lease_expires_ms = ?, phase = 'leased', progress = 0 WHERE action_key = ?")
                 .Bind(1, int64_t{v1::RUNNING})
                 .Bind(2, generation)
                 .Bind(3, worker_id)
                 .Bind(4, UnixMillis() + options_.lease_timeout_ms)
                 .Bind(5, key)
                 .Run();
    if (!s.ok()) return std::nullopt;
    if (!SetJobsOfTask(key, v1::RUNNING, "", nullptr, nullptr).ok()) return std::nullopt;
    if (!txn.Commit().ok()) return std::nullopt;
  }
  NotifyChange();
  return task;
}

v1::HeartbeatResponse JobQueue::Heartbeat(const v1::HeartbeatRequest& request) {
  v1::HeartbeatResponse response;
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Statement q = db_->Prepare("SELECT state, generation FROM tasks WHERE action_key = ?");
    q.Bind(1, request.action_key());
    if (!q.Step()) {
      response.set_reason("unknown task");
      return response;
    }
    if (q.Int(1) != request.attempt()) {
      response.set_reason("the lease expired and the task moved on");
      return response;
    }
    if (q.Int(0) != v1::RUNNING) {
      response.set_reason(q.Int(0) == v1::CANCELLED ? "the job was cancelled" : "the task is no longer running");
      return response;
    }
    auto s = db_->Prepare("UPDATE tasks SET lease_expires_ms = ?, phase = ?, progress = ? WHERE action_key = ?")
                 .Bind(1, UnixMillis() + options_.lease_timeout_ms)
                 .Bind(2, request.phase())
                 .Bind(3, request.progress())
                 .Bind(4, request.action_key())
                 .Run();
    response.set_keep_going(s.ok());
  }
  NotifyChange();
  return response;
}

std::optional<TaskEnd> JobQueue::Complete(const std::string& action_key, int32_t attempt, bool success,
                                          const std::string& error, bool retryable, const v1::JobResult& result) {
  TaskEnd end;
  end.action_key = action_key;
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Transaction txn(*db_);
    if (!txn.status().ok()) return std::nullopt;
    Statement q =
        db_->Prepare("SELECT state, generation, attempts, target_label, queued_ms FROM tasks WHERE action_key = ?");
    q.Bind(1, action_key);
    if (!q.Step() || q.Int(0) != v1::RUNNING || q.Int(1) != attempt) return std::nullopt;
    end.target = q.Text(3);
    end.queued_ms = q.Int(4);
    const int64_t attempts = q.Int(2);
    v1::JobState state = success ? v1::SUCCEEDED : v1::FAILED;
    std::string reason = error;
    if (!success && retryable && attempts < options_.max_attempts) state = v1::QUEUED;
    if (!success && retryable && attempts >= options_.max_attempts) {
      reason = absl::StrCat(error, " (gave up after ", attempts, " attempts)");
    }
    auto s = db_->Prepare(
                    "UPDATE tasks SET state = ?, lease_owner = NULL, lease_expires_ms = NULL, last_error = ?,"
                    " phase = ?, progress = 0 WHERE action_key = ?")
                 .Bind(1, int64_t{state})
                 .Bind(2, reason)
                 .Bind(3, state == v1::QUEUED ? "queued" : "done")
                 .Bind(4, action_key)
                 .Run();
    if (!s.ok()) return std::nullopt;
    if (!SetJobsOfTask(action_key, state, state == v1::SUCCEEDED ? "" : reason, success ? &result : nullptr, &end.jobs)
             .ok()) {
      return std::nullopt;
    }
    if (!txn.Commit().ok()) return std::nullopt;
    end.state = state;
  }
  NotifyChange();
  return end;
}

int JobQueue::RecoverLeases(const std::string& owner_prefix) {
  int recovered = 0;
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Transaction txn(*db_);
    if (!txn.status().ok()) return 0;
    Statement q = db_->Prepare("SELECT action_key FROM tasks WHERE state = ? AND substr(lease_owner, 1, ?) = ?");
    q.Bind(1, int64_t{v1::RUNNING}).Bind(2, static_cast<int64_t>(owner_prefix.size())).Bind(3, owner_prefix);
    std::vector<std::string> keys;
    while (q.Step()) keys.push_back(q.Text(0));
    for (const std::string& key : keys) {
      auto s = db_->Prepare(
                      "UPDATE tasks SET state = ?, attempts = MAX(attempts - 1, 0), lease_owner = NULL,"
                      " lease_expires_ms = NULL, phase = 'queued', progress = 0 WHERE action_key = ?")
                   .Bind(1, int64_t{v1::QUEUED})
                   .Bind(2, key)
                   .Run();
      if (!s.ok() || !SetJobsOfTask(key, v1::QUEUED, "", nullptr, nullptr).ok()) return 0;
      ++recovered;
    }
    if (!txn.Commit().ok()) return 0;
  }
  if (recovered > 0) NotifyChange();
  return recovered;
}

std::vector<TaskEnd> JobQueue::ExpireLeases() {
  std::vector<TaskEnd> ended;
  {
    std::lock_guard<std::mutex> lock(db_->mutex());
    Transaction txn(*db_);
    if (!txn.status().ok()) return ended;
    Statement q = db_->Prepare(
        "SELECT action_key, attempts, lease_owner, target_label FROM tasks WHERE state = ? AND lease_expires_ms < ?");
    q.Bind(1, int64_t{v1::RUNNING}).Bind(2, UnixMillis());
    std::vector<std::tuple<std::string, int64_t, std::string, std::string>> expired;
    while (q.Step()) expired.emplace_back(q.Text(0), q.Int(1), q.Text(2), q.Text(3));
    for (const auto& [key, attempts, owner, target] : expired) {
      const bool give_up = attempts >= options_.max_attempts;
      const std::string reason =
          absl::StrCat("worker ", owner, " stopped heartbeating (lease of ", options_.lease_timeout_ms,
                       " ms expired) on attempt ", attempts, " of ", options_.max_attempts);
      const v1::JobState state = give_up ? v1::FAILED : v1::QUEUED;
      auto s = db_->Prepare(
                      "UPDATE tasks SET state = ?, lease_owner = NULL, lease_expires_ms = NULL, last_error = ?,"
                      " phase = 'queued', progress = 0 WHERE action_key = ?")
                   .Bind(1, int64_t{state})
                   .Bind(2, reason)
                   .Bind(3, key)
                   .Run();
      if (!s.ok()) return {};
      TaskEnd end{key, state, target, 0};
      if (!SetJobsOfTask(key, state, give_up ? reason : "", nullptr, &end.jobs).ok()) return {};
      ended.push_back(end);
    }
    if (!txn.Commit().ok()) return {};
  }
  if (!ended.empty()) NotifyChange();
  return ended;
}

bool JobQueue::IsNeeded(const std::string& sha256_hex) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  Statement q = db_->Prepare("SELECT 1 FROM tasks WHERE state IN (1, 2) AND (model_sha = ? OR input_sha = ?) LIMIT 1");
  q.Bind(1, sha256_hex).Bind(2, sha256_hex);
  if (q.Step()) return true;
  Statement b = db_->Prepare(
      "SELECT 1 FROM task_blobs b JOIN tasks t ON t.action_key = b.action_key WHERE b.sha = ? AND t.state IN (1, 2) "
      "LIMIT 1");
  b.Bind(1, sha256_hex);
  return b.Step();
}

JobQueue::Counts JobQueue::CountTasks() {
  std::lock_guard<std::mutex> lock(db_->mutex());
  Counts counts;
  Statement q = db_->Prepare("SELECT state, COUNT(*) FROM tasks WHERE state IN (1, 2) GROUP BY state");
  while (q.Step()) {
    if (q.Int(0) == v1::QUEUED) counts.queued_tasks = q.Int(1);
    if (q.Int(0) == v1::RUNNING) counts.running_tasks = q.Int(1);
  }
  return counts;
}

std::string JobQueue::OwnerOf(const std::string& action_key) {
  std::lock_guard<std::mutex> lock(db_->mutex());
  Statement q = db_->Prepare("SELECT lease_owner FROM tasks WHERE action_key = ?");
  q.Bind(1, action_key);
  return q.Step() ? q.Text(0) : "";
}

}  // namespace kiln::server
