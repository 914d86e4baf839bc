// The durable job queue on a real SQLite file: coalescing, leases, heartbeats, retries,
// cancellation, paging, and state surviving a reopen.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/queue/job_queue.h"
#include "tests/unit/temp_dir.h"

namespace kiln::server {
namespace {

std::string TempDb() { return kiln::testing::MakeTempDir("kiln-queue") + "/jobs.db"; }

v1::Job JobFor(const std::string& key, std::map<std::string, std::string> labels = {}) {
  v1::Job job;
  job.set_action_key(key);
  job.set_target("x86_64/test/");
  job.mutable_model()->set_sha256(std::string(64, 'a'));
  for (auto& [k, v] : labels) (*job.mutable_labels())[k] = v;
  return job;
}

v1::CompileSpec RequestFor() {
  v1::CompileSpec spec;
  spec.mutable_model()->set_sha256(std::string(64, 'a'));
  spec.mutable_model()->set_size_bytes(10);
  return spec;
}

v1::JobResult ResultWith(const std::string& artifact) {
  v1::JobResult result;
  result.mutable_artifact()->set_sha256(artifact);
  return result;
}

TEST(JobQueueTest, IdenticalSubmitsShareOneTask) {
  auto queue = JobQueue::Open(TempDb(), {});
  ASSERT_TRUE(queue.ok());
  auto first = (*queue)->Submit(JobFor("k"), RequestFor(), "host", std::nullopt);
  auto second = (*queue)->Submit(JobFor("k"), RequestFor(), "host", std::nullopt);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(first->joined);
  EXPECT_TRUE(second->joined);
  EXPECT_NE(first->job.id(), second->job.id());
  EXPECT_EQ((*queue)->CountTasks().queued_tasks, 1);
  auto task = (*queue)->Lease("w1");
  ASSERT_TRUE(task.has_value());
  EXPECT_FALSE((*queue)->Lease("w2").has_value());  // one task only
  EXPECT_EQ((*queue)->Get(second->job.id())->state(), v1::RUNNING);
  auto end = (*queue)->Complete("k", task->attempt(), true, "", false, ResultWith("art"));
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->jobs, 2);
  for (const auto& id : {first->job.id(), second->job.id()}) {
    auto job = (*queue)->Get(id);
    EXPECT_EQ(job->state(), v1::SUCCEEDED);
    EXPECT_EQ(job->result().artifact().sha256(), "art");
  }
}

TEST(JobQueueTest, CachedSubmitIsBornSucceeded) {
  auto queue = JobQueue::Open(TempDb(), {});
  auto outcome = (*queue)->Submit(JobFor("k"), RequestFor(), "host", ResultWith("cached"));
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->job.state(), v1::SUCCEEDED);
  EXPECT_TRUE(outcome->job.cache_hit());
  EXPECT_FALSE((*queue)->Lease("w").has_value());
}

TEST(JobQueueTest, ExpiredLeasesRetryThenFailWithTheReason) {
  QueueOptions options;
  options.lease_timeout_ms = 1;
  options.max_attempts = 2;
  auto queue = JobQueue::Open(TempDb(), options);
  auto job = (*queue)->Submit(JobFor("k"), RequestFor(), "host", std::nullopt);
  auto first = (*queue)->Lease("dead-worker");
  ASSERT_TRUE(first.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto ended = (*queue)->ExpireLeases();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].state, v1::QUEUED);
  auto second = (*queue)->Lease("dead-worker-2");
  ASSERT_TRUE(second.has_value());
  EXPECT_GT(second->attempt(), first->attempt());
  // The first lease's completion is stale now.
  EXPECT_FALSE((*queue)->Complete("k", first->attempt(), true, "", false, ResultWith("x")).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ended = (*queue)->ExpireLeases();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].state, v1::FAILED);
  auto failed = (*queue)->Get(job->job.id());
  EXPECT_EQ(failed->state(), v1::FAILED);
  EXPECT_NE(failed->error().find("dead-worker-2 stopped heartbeating"), std::string::npos) << failed->error();
  EXPECT_NE(failed->error().find("attempt 2 of 2"), std::string::npos) << failed->error();
}

TEST(JobQueueTest, HeartbeatsKeepTheLeaseAndCarryProgress) {
  QueueOptions options;
  options.lease_timeout_ms = 200;
  auto queue = JobQueue::Open(TempDb(), options);
  auto job = (*queue)->Submit(JobFor("k"), RequestFor(), "host", std::nullopt);
  auto task = (*queue)->Lease("w");
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    v1::HeartbeatRequest beat;
    beat.set_action_key("k");
    beat.set_attempt(task->attempt());
    beat.set_phase("codegen");
    beat.set_progress(0.4);
    EXPECT_TRUE((*queue)->Heartbeat(beat).keep_going());
    EXPECT_TRUE((*queue)->ExpireLeases().empty());
  }
  auto running = (*queue)->Get(job->job.id());
  EXPECT_EQ(running->phase(), "codegen");
  EXPECT_DOUBLE_EQ(running->progress(), 0.4);
}

TEST(JobQueueTest, CancelStopsTheTaskOnlyWhenNoOtherJobWaits) {
  auto queue = JobQueue::Open(TempDb(), {});
  auto a = (*queue)->Submit(JobFor("k"), RequestFor(), "host", std::nullopt);
  auto b = (*queue)->Submit(JobFor("k"), RequestFor(), "host", std::nullopt);
  auto task = (*queue)->Lease("w");
  ASSERT_EQ((*queue)->Cancel(a->job.id())->state(), v1::CANCELLED);
  v1::HeartbeatRequest beat;
  beat.set_action_key("k");
  beat.set_attempt(task->attempt());
  EXPECT_TRUE((*queue)->Heartbeat(beat).keep_going());  // b still waits
  ASSERT_EQ((*queue)->Cancel(b->job.id())->state(), v1::CANCELLED);
  auto stop = (*queue)->Heartbeat(beat);
  EXPECT_FALSE(stop.keep_going());
  EXPECT_EQ(stop.reason(), "the job was cancelled");
  EXPECT_FALSE((*queue)->Complete("k", task->attempt(), true, "", false, ResultWith("x")).has_value());
  // A new submit of the same action starts it again.
  auto c = (*queue)->Submit(JobFor("k"), RequestFor(), "host", std::nullopt);
  EXPECT_FALSE(c->joined);
  EXPECT_EQ(c->job.state(), v1::QUEUED);
}

TEST(JobQueueTest, StateSurvivesReopen) {
  const std::string path = TempDb();
  std::string queued_id, running_id;
  {
    auto queue = JobQueue::Open(path, {});
    running_id = (*queue)->Submit(JobFor("k1"), RequestFor(), "host", std::nullopt)->job.id();
    ASSERT_TRUE((*queue)->Lease("w").has_value());
    queued_id = (*queue)->Submit(JobFor("k2"), RequestFor(), "host", std::nullopt)->job.id();
  }
  auto queue = JobQueue::Open(path, {});
  EXPECT_EQ((*queue)->Get(running_id)->state(), v1::RUNNING);
  EXPECT_EQ((*queue)->Get(queued_id)->state(), v1::QUEUED);
  auto task = (*queue)->Lease("w2");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->action_key(), "k2");
}

TEST(JobQueueTest, RecoverLeasesRequeuesDeadLocalWorkersWithoutAnAttempt) {
  auto queue = JobQueue::Open(TempDb(), {});
  auto local = (*queue)->Submit(JobFor("k1"), RequestFor(), "host", std::nullopt);
  auto remote = (*queue)->Submit(JobFor("k2"), RequestFor(), "host", std::nullopt);
  ASSERT_TRUE((*queue)->Lease("local-123-0").has_value());
  ASSERT_TRUE((*queue)->Lease("remote-host-9").has_value());
  EXPECT_EQ((*queue)->RecoverLeases("local-"), 1);
  auto job = (*queue)->Get(local->job.id());
  EXPECT_EQ(job->state(), v1::QUEUED);
  EXPECT_EQ(job->attempts(), 0);
  EXPECT_EQ((*queue)->Get(remote->job.id())->state(), v1::RUNNING);  // a remote worker may still be alive
  auto again = (*queue)->Lease("local-456-0");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->action_key(), "k1");
}

TEST(JobQueueTest, ListFiltersByStateAndLabelsAndPages) {
  auto queue = JobQueue::Open(TempDb(), {});
  for (int i = 0; i < 5; ++i) {
    (*queue)
        ->Submit(JobFor("key" + std::to_string(i), {{"team", i % 2 ? "odd" : "even"}}), RequestFor(), "host",
                 std::nullopt)
        .IgnoreError();
  }
  ListFilter filter;
  filter.labels["team"] = "even";
  auto even = (*queue)->List(filter);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(even->first.size(), 3u);
  filter = ListFilter();
  filter.page_size = 2;
  std::vector<std::string> ids;
  do {
    auto page = (*queue)->List(filter);
    for (const auto& job : page->first) ids.push_back(job.id());
    filter.after_seq = page->second;
  } while (filter.after_seq != 0);
  EXPECT_EQ(ids.size(), 5u);
  filter = ListFilter();
  filter.state = v1::RUNNING;
  EXPECT_TRUE((*queue)->List(filter)->first.empty());
}

}  // namespace
}  // namespace kiln::server
