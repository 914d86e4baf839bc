// The durable job store (SqliteJobStore) on a real SQLite file: coalescing, leases,
// heartbeats, retries, cancellation, paging, state surviving a reopen, and the upgrade of
// a version-0 file that stored states as numbers.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/common/sqlite_db.h"
#include "server/queue/sqlite_job_store.h"
#include "tests/unit/temp_dir.h"

namespace kiln::server {
namespace {

std::string TempDb() { return kiln::testing::MakeTempDir("kiln-queue") + "/jobs.db"; }

std::unique_ptr<SqliteJobStore> OpenStore(const std::string& path, const JobStoreOptions& options = {}) {
  auto store = SqliteJobStore::Open(path, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

JobStoreOptions Options(int64_t lease_timeout_ms, int32_t max_attempts) {
  JobStoreOptions options;
  options.lease_timeout_ms = lease_timeout_ms;
  options.max_attempts = max_attempts;
  return options;
}

NewJob JobFor(const std::string& key, std::map<std::string, std::string> labels = {},
              std::optional<v1::JobResult> cached = std::nullopt) {
  NewJob request;
  request.job.set_action_key(key);
  request.job.set_target("x86_64/test/");
  request.job.mutable_model()->set_sha256(std::string(64, 'a'));
  for (auto& [k, v] : labels) (*request.job.mutable_labels())[k] = v;
  request.spec.mutable_model()->set_sha256(std::string(64, 'a'));
  request.spec.mutable_model()->set_size_bytes(10);
  request.target_label = "host";
  request.cached = std::move(cached);
  return request;
}

v1::JobResult ResultWith(const std::string& artifact) {
  v1::JobResult result;
  result.mutable_artifact()->set_sha256(artifact);
  return result;
}

// The task a lease hands out; nullopt when none waits (a store error fails the test).
std::optional<v1::Task> LeaseTask(JobStore& store, const std::string& worker) {
  auto leased = store.Lease(worker);
  EXPECT_TRUE(leased.ok()) << leased.status();
  if (!leased.ok() || !leased->has_value()) return std::nullopt;
  return (*leased)->task;
}

TaskOutcome Success(const std::string& key, int32_t attempt, const std::string& artifact) {
  return TaskOutcome{key, attempt, true, "", false, ResultWith(artifact)};
}

TEST(JobQueueTest, IdenticalSubmitsShareOneTask) {
  auto store = OpenStore(TempDb());
  auto first = store->Submit(JobFor("k"));
  auto second = store->Submit(JobFor("k"));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(first->joined);
  EXPECT_TRUE(second->joined);
  EXPECT_NE(first->job.id(), second->job.id());
  EXPECT_EQ(store->CountTasks()->queued, 1);
  auto task = LeaseTask(*store, "w1");
  ASSERT_TRUE(task.has_value());
  EXPECT_FALSE(LeaseTask(*store, "w2").has_value());  // one task only
  EXPECT_EQ(store->Get(second->job.id())->state(), v1::RUNNING);
  auto end = store->Complete(Success("k", task->attempt(), "art"));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->jobs, 2);
  for (const auto& id : {first->job.id(), second->job.id()}) {
    auto job = store->Get(id);
    EXPECT_EQ(job->state(), v1::SUCCEEDED);
    EXPECT_EQ(job->result().artifact().sha256(), "art");
  }
}

TEST(JobQueueTest, CachedSubmitIsBornSucceeded) {
  auto store = OpenStore(TempDb());
  auto outcome = store->Submit(JobFor("k", {}, ResultWith("cached")));
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->job.state(), v1::SUCCEEDED);
  EXPECT_TRUE(outcome->job.cache_hit());
  EXPECT_FALSE(LeaseTask(*store, "w").has_value());
}

TEST(JobQueueTest, UnknownJobIsNotFoundNamingIt) {
  auto store = OpenStore(TempDb());
  auto job = store->Get("job-nope");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(job.status().message().find("job-nope"), std::string::npos);
}

TEST(JobQueueTest, ExpiredLeasesRetryThenFailWithTheReason) {
  auto store = OpenStore(TempDb(), Options(/*lease_timeout_ms=*/1, /*max_attempts=*/2));
  auto job = store->Submit(JobFor("k"));
  auto first = LeaseTask(*store, "dead-worker");
  ASSERT_TRUE(first.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto ended = store->ExpireLeases();
  ASSERT_TRUE(ended.ok());
  ASSERT_EQ(ended->size(), 1u);
  EXPECT_EQ((*ended)[0].state, v1::QUEUED);
  auto second = LeaseTask(*store, "dead-worker-2");
  ASSERT_TRUE(second.has_value());
  EXPECT_GT(second->attempt(), first->attempt());
  // The first lease's completion is stale now.
  EXPECT_EQ(store->Complete(Success("k", first->attempt(), "x")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ended = store->ExpireLeases();
  ASSERT_EQ(ended->size(), 1u);
  EXPECT_EQ((*ended)[0].state, v1::FAILED);
  auto failed = store->Get(job->job.id());
  EXPECT_EQ(failed->state(), v1::FAILED);
  EXPECT_NE(failed->error().find("dead-worker-2 stopped heartbeating"), std::string::npos) << failed->error();
  EXPECT_NE(failed->error().find("attempt 2 of 2"), std::string::npos) << failed->error();
}

TEST(JobQueueTest, RetryableFailuresRequeueUntilMaxAttempts) {
  auto store = OpenStore(TempDb(), Options(/*lease_timeout_ms=*/30000, /*max_attempts=*/2));
  auto job = store->Submit(JobFor("k"));
  auto first = LeaseTask(*store, "w");
  auto end = store->Complete(TaskOutcome{"k", first->attempt(), false, "disk full", true, {}});
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->state, v1::QUEUED);
  auto second = LeaseTask(*store, "w");
  end = store->Complete(TaskOutcome{"k", second->attempt(), false, "disk full", true, {}});
  EXPECT_EQ(end->state, v1::FAILED);
  EXPECT_EQ(store->Get(job->job.id())->error(), "disk full (gave up after 2 attempts)");
}

TEST(JobQueueTest, HeartbeatsKeepTheLeaseAndCarryProgress) {
  auto store = OpenStore(TempDb(), Options(/*lease_timeout_ms=*/200, /*max_attempts=*/3));
  auto job = store->Submit(JobFor("k"));
  auto task = LeaseTask(*store, "w");
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto verdict = store->Heartbeat(TaskProgress{"k", task->attempt(), "codegen", 0.4});
    ASSERT_TRUE(verdict.ok());
    EXPECT_TRUE(verdict->keep_going);
    EXPECT_TRUE(store->ExpireLeases()->empty());
  }
  auto running = store->Get(job->job.id());
  EXPECT_EQ(running->phase(), "codegen");
  EXPECT_DOUBLE_EQ(running->progress(), 0.4);
}

TEST(JobQueueTest, CancelStopsTheTaskOnlyWhenNoOtherJobWaits) {
  auto store = OpenStore(TempDb());
  auto a = store->Submit(JobFor("k"));
  auto b = store->Submit(JobFor("k"));
  auto task = LeaseTask(*store, "w");
  ASSERT_EQ(store->Cancel(a->job.id())->state(), v1::CANCELLED);
  const TaskProgress beat{"k", task->attempt(), "passes", 0.2};
  EXPECT_TRUE(store->Heartbeat(beat)->keep_going);  // b still waits
  ASSERT_EQ(store->Cancel(b->job.id())->state(), v1::CANCELLED);
  auto stop = store->Heartbeat(beat);
  EXPECT_FALSE(stop->keep_going);
  EXPECT_EQ(stop->reason, "the job was cancelled");
  EXPECT_FALSE(store->Complete(Success("k", task->attempt(), "x")).ok());
  // A new submit of the same action starts it again.
  auto c = store->Submit(JobFor("k"));
  EXPECT_FALSE(c->joined);
  EXPECT_EQ(c->job.state(), v1::QUEUED);
}

TEST(JobQueueTest, StateSurvivesReopen) {
  const std::string path = TempDb();
  std::string queued_id, running_id;
  {
    auto store = OpenStore(path);
    running_id = store->Submit(JobFor("k1"))->job.id();
    ASSERT_TRUE(LeaseTask(*store, "w").has_value());
    queued_id = store->Submit(JobFor("k2"))->job.id();
  }
  auto store = OpenStore(path);
  EXPECT_EQ(store->Get(running_id)->state(), v1::RUNNING);
  EXPECT_EQ(store->Get(queued_id)->state(), v1::QUEUED);
  auto task = LeaseTask(*store, "w2");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->action_key(), "k2");
}

TEST(JobQueueTest, RecoverLeasesRequeuesDeadLocalWorkersWithoutAnAttempt) {
  auto store = OpenStore(TempDb());
  auto local = store->Submit(JobFor("k1"));
  auto remote = store->Submit(JobFor("k2"));
  ASSERT_TRUE(LeaseTask(*store, "local-123-0").has_value());
  ASSERT_TRUE(LeaseTask(*store, "remote-host-9").has_value());
  EXPECT_EQ(*store->RecoverLeases("local-"), 1);
  auto job = store->Get(local->job.id());
  EXPECT_EQ(job->state(), v1::QUEUED);
  EXPECT_EQ(job->attempts(), 0);
  EXPECT_EQ(store->Get(remote->job.id())->state(), v1::RUNNING);  // a remote worker may still be alive
  auto again = LeaseTask(*store, "local-456-0");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->action_key(), "k1");
}

TEST(JobQueueTest, ListFiltersByStateAndLabelsAndPages) {
  auto store = OpenStore(TempDb());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store->Submit(JobFor("key" + std::to_string(i), {{"team", i % 2 ? "odd" : "even"}})).ok());
  }
  ListFilter filter;
  filter.labels["team"] = "even";
  auto even = store->List(filter);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(even->jobs.size(), 3u);
  filter = ListFilter();
  filter.page_size = 2;
  std::vector<std::string> ids;
  do {
    auto page = store->List(filter);
    ASSERT_TRUE(page.ok());
    for (const auto& job : page->jobs) ids.push_back(job.id());
    filter.after_seq = page->next_after_seq;
  } while (filter.after_seq != 0);
  EXPECT_EQ(ids.size(), 5u);
  filter = ListFilter();
  filter.state = v1::QUEUED;
  EXPECT_EQ(store->List(filter)->jobs.size(), 5u);
  filter.state = v1::RUNNING;
  EXPECT_TRUE(store->List(filter)->jobs.empty());
}

TEST(JobQueueTest, StatesAreStoredByName) {
  const std::string path = TempDb();
  auto store = OpenStore(path);
  auto job = store->Submit(JobFor("k"));
  ASSERT_TRUE(LeaseTask(*store, "w").has_value());
  store.reset();
  auto db = SqliteDb::Open(path);
  ASSERT_TRUE(db.ok());
  Statement q = (*db)->Prepare("SELECT j.state, t.state FROM jobs j JOIN tasks t USING (action_key)");
  ASSERT_TRUE(q.Step());
  EXPECT_EQ(q.Text(0), "running");
  EXPECT_EQ(q.Text(1), "running");
}

// The schema kilnd wrote before states were stored by name (user_version 0).
constexpr char kVersion0Schema[] =
    "CREATE TABLE tasks (action_key TEXT PRIMARY KEY, state INTEGER NOT NULL,"
    " request BLOB NOT NULL, target TEXT NOT NULL, target_label TEXT NOT NULL DEFAULT '', model_sha TEXT NOT NULL, "
    "input_sha TEXT NOT NULL,"
    " attempts INTEGER NOT NULL DEFAULT 0, generation INTEGER NOT NULL DEFAULT 0, lease_owner TEXT,"
    " lease_expires_ms INTEGER, phase TEXT NOT NULL DEFAULT 'queued', progress REAL NOT NULL DEFAULT 0,"
    " last_error TEXT NOT NULL DEFAULT '', queued_ms INTEGER NOT NULL);"
    "CREATE INDEX tasks_state ON tasks(state, queued_ms);"
    "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,"
    " action_key TEXT NOT NULL, state INTEGER NOT NULL, job BLOB NOT NULL, error TEXT NOT NULL DEFAULT '',"
    " result BLOB, started_ms INTEGER NOT NULL DEFAULT 0, finished_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_key ON jobs(action_key, state);"
    "CREATE TABLE job_labels (job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL);"
    "CREATE INDEX job_labels_kv ON job_labels(key, value);"
    "CREATE TABLE task_blobs (action_key TEXT NOT NULL, sha TEXT NOT NULL);"
    "CREATE INDEX task_blobs_sha ON task_blobs(sha);";

// A version-0 file with one job of each state: a queued task with two jobs waiting (one
// labelled), a running task, and finished jobs.
void WriteVersion0Store(const std::string& path) {
  auto db = SqliteDb::Open(path);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec(kVersion0Schema).ok());
  v1::CompileSpec spec;
  spec.mutable_model()->set_sha256(std::string(64, 'a'));
  const std::string request = spec.SerializeAsString();
  for (auto [key, state, attempts] : {std::tuple{"kq", 1, 0}, std::tuple{"kr", 2, 1}, std::tuple{"ks", 3, 1}}) {
    ASSERT_TRUE(
        (*db)
            ->Prepare("INSERT INTO tasks (action_key, state, request, target, model_sha, input_sha, attempts,"
                      " generation, lease_owner, lease_expires_ms, queued_ms) VALUES (?, ?, ?, 't', ?, '', ?, ?,"
                      " ?, ?, 1)")
            .Bind(1, key)
            .Bind(2, int64_t{state})
            .BindBlob(3, request)
            .Bind(4, std::string(64, 'a'))
            .Bind(5, int64_t{attempts})
            .Bind(6, int64_t{attempts})
            .Bind(7, state == 2 ? "remote-w" : "")
            .Bind(8, int64_t{state == 2 ? 4102444800000 : 0})
            .Run()
            .ok());
  }
  const std::vector<std::tuple<const char*, const char*, int>> jobs = {{"job-q1", "kq", 1}, {"job-q2", "kq", 1},
                                                                       {"job-r", "kr", 2},  {"job-s", "ks", 3},
                                                                       {"job-f", "kf", 4},  {"job-c", "kc", 5}};
  for (const auto& [id, key, state] : jobs) {
    v1::Job job;
    job.set_id(id);
    job.set_action_key(key);
    ASSERT_TRUE((*db)
                    ->Prepare("INSERT INTO jobs (id, action_key, state, job, result) VALUES (?, ?, ?, ?, ?)")
                    .Bind(1, id)
                    .Bind(2, key)
                    .Bind(3, int64_t{state})
                    .BindBlob(4, job.SerializeAsString())
                    .BindBlob(5, state == 3 ? ResultWith("art").SerializeAsString() : "")
                    .Run()
                    .ok());
  }
  ASSERT_TRUE((*db)->Exec("INSERT INTO job_labels VALUES ('job-q2', 'team', 'ml')").ok());
}

TEST(JobQueueTest, UpgradesAVersion0StoreWithoutLosingAJob) {
  const std::string path = TempDb();
  WriteVersion0Store(path);
  if (::testing::Test::HasFatalFailure()) return;
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  const std::vector<std::pair<std::string, v1::JobState>> expected = {{"job-q1", v1::QUEUED}, {"job-q2", v1::QUEUED},
                                                                      {"job-r", v1::RUNNING}, {"job-s", v1::SUCCEEDED},
                                                                      {"job-f", v1::FAILED},  {"job-c", v1::CANCELLED}};
  for (const auto& [id, state] : expected) {
    auto job = store->Get(id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), state) << id;
  }
  EXPECT_EQ(store->Get("job-s")->result().artifact().sha256(), "art");
  // Labels, paging order and the queue itself carry on as before.
  ListFilter filter;
  filter.labels["team"] = "ml";
  EXPECT_EQ(store->List(filter)->jobs.at(0).id(), "job-q2");
  EXPECT_EQ(store->List(ListFilter())->jobs.size(), 6u);
  auto counts = store->CountTasks();
  EXPECT_EQ(counts->queued, 1);
  EXPECT_EQ(counts->running, 1);
  auto task = LeaseTask(*store, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->action_key(), "kq");
  auto end = store->Complete(Success("kq", task->attempt(), "new"));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->jobs, 2);
  // New jobs keep numbering after the old ones, and a second open changes nothing.
  auto fresh = store->Submit(JobFor("kn"));
  ASSERT_TRUE(fresh.ok());
  store.reset();
  {
    auto db = SqliteDb::Open(path);
    Statement version = (*db)->Prepare("PRAGMA user_version");
    ASSERT_TRUE(version.Step());
    EXPECT_EQ(version.Int(0), SqliteJobStore::kSchemaVersion);
    Statement seq = (*db)->Prepare("SELECT seq FROM jobs WHERE state = 'queued'");
    ASSERT_TRUE(seq.Step());
    EXPECT_EQ(seq.Int(0), 7);
  }
  store = OpenStore(path);
  EXPECT_EQ(store->Get("job-r")->state(), v1::RUNNING);
}

TEST(JobQueueTest, RefusesAStoreFromANewerKilnd) {
  const std::string path = TempDb();
  {
    auto db = SqliteDb::Open(path);
    ASSERT_TRUE((*db)->Exec("PRAGMA user_version = 99").ok());
  }
  auto store = SqliteJobStore::Open(path, {});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("version 99"), std::string::npos) << store.status();
}

}  // namespace
}  // namespace kiln::server
