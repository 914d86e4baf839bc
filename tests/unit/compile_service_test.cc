// The service layer (CompileService) without gRPC: a real SqliteJobStore and a real cache
// in a temporary directory. Submit's validation errors, coalescing, action-cache hits,
// cancellation, and a job's states from queued to succeeded as a worker would drive them.
#include <map>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/compiler/spec.h"
#include "onnx/onnx_pb.h"
#include "server/queue/sqlite_job_store.h"
#include "server/service/compile_service.h"
#include "tests/unit/temp_dir.h"

namespace kiln::server {
namespace {

constexpr char kCompilerVersion[] = "kiln-test-1";

// y = Relu(x): the smallest model that passes Submit's ONNX check.
std::string ReluModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("relu");
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type("Relu");
  node->add_input("x");
  node->add_output("y");
  for (auto* value : {graph->add_input(), graph->add_output()}) {
    value->set_name(value == &graph->input(0) ? "x" : "y");
    auto* tensor = value->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    tensor->mutable_shape()->add_dim()->set_dim_value(4);
  }
  return model.SerializeAsString();
}

class CompileServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = kiln::testing::MakeTempDir("kiln-service");
    auto cache = cache::Cache::Open({dir + "/cache", 0});
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
    auto store = SqliteJobStore::Open(dir + "/jobs.db", {});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    service_ = std::make_unique<CompileService>(CompileServiceOptions{kCompilerVersion}, cache_.get(), store_.get(),
                                                &metrics_);
  }

  v1::Digest Upload(const std::string& bytes) {
    auto digest = cache_->Put(bytes);
    EXPECT_TRUE(digest.ok()) << digest.status();
    return DigestOf(bytes);
  }

  // An uploaded model on a fixed preset (not "host", so the key is the same on any machine).
  v1::CompileSpec UploadedSpec() {
    v1::CompileSpec spec;
    *spec.mutable_model() = Upload(ReluModel());
    spec.mutable_target()->set_preset("x86-64-v3");
    return spec;
  }

  // Leases the one queued task, as a worker would, and fails the test if there is none.
  v1::Task LeaseOne() {
    auto leased = service_->LeaseTask("worker-1");
    EXPECT_TRUE(leased.ok() && leased->has_value());
    return leased.ok() && leased->has_value() ? (*leased)->task : v1::Task();
  }

  // A worker's successful report, its artifact, report and manifest uploaded.
  TaskReport Finished(const v1::Task& task, bool upload = true) {
    TaskReport report;
    report.worker_id = "worker-1";
    report.outcome.action_key = task.action_key();
    report.outcome.attempt = task.attempt();
    report.outcome.success = true;
    v1::JobResult& result = report.outcome.result;
    const std::string name = task.action_key().substr(0, 8);
    *result.mutable_artifact() = upload ? Upload("artifact " + name) : DigestOf("artifact " + name);
    *result.mutable_report() = upload ? Upload("report " + name) : DigestOf("report " + name);
    *result.mutable_manifest() = upload ? Upload("manifest " + name) : DigestOf("manifest " + name);
    return report;
  }

  std::string SubmitError(const v1::CompileSpec& spec, absl::StatusCode code) {
    auto job = service_->Submit(spec, {});
    EXPECT_EQ(job.status().code(), code) << job.status();
    return std::string(job.status().message());
  }

  Metrics metrics_;
  std::unique_ptr<cache::Cache> cache_;
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<CompileService> service_;
};

TEST_F(CompileServiceTest, SubmitErrorsNameTheBadField) {
  using ::testing::HasSubstr;
  EXPECT_THAT(SubmitError(v1::CompileSpec(), absl::StatusCode::kInvalidArgument), HasSubstr("spec.model"));

  v1::CompileSpec bad_digest = UploadedSpec();
  bad_digest.mutable_model()->set_sha256("xyz");
  EXPECT_THAT(SubmitError(bad_digest, absl::StatusCode::kInvalidArgument), HasSubstr("spec.model digest"));

  v1::CompileSpec tuning = UploadedSpec();
  tuning.mutable_tuning()->set_enabled(true);
  EXPECT_THAT(SubmitError(tuning, absl::StatusCode::kInvalidArgument), HasSubstr("spec.tuning.enabled"));

  v1::CompileSpec pruning = UploadedSpec();
  pruning.mutable_pruning()->set_channels(1.5);
  EXPECT_THAT(SubmitError(pruning, absl::StatusCode::kInvalidArgument), HasSubstr("pruning.channels"));

  v1::CompileSpec missing = UploadedSpec();
  *missing.mutable_model() = DigestOf("never uploaded");
  EXPECT_THAT(SubmitError(missing, absl::StatusCode::kFailedPrecondition), HasSubstr("Upload it first"));

  v1::CompileSpec inputs = UploadedSpec();
  *inputs.mutable_accuracy()->mutable_input_set() = DigestOf("inputs never uploaded");
  EXPECT_THAT(SubmitError(inputs, absl::StatusCode::kFailedPrecondition), HasSubstr("input set blob"));

  v1::CompileSpec not_onnx = UploadedSpec();
  *not_onnx.mutable_model() = Upload("these bytes are no ONNX model");
  EXPECT_THAT(SubmitError(not_onnx, absl::StatusCode::kInvalidArgument), HasSubstr("not an ONNX model"));

  EXPECT_TRUE(store_->List(ListFilter())->jobs.empty());  // no rejected submit left a job
}

TEST_F(CompileServiceTest, IdenticalSubmitsShareOneCompile) {
  auto first = service_->Submit(UploadedSpec(), {{"team", "a"}});
  auto second = service_->Submit(UploadedSpec(), {{"team", "b"}});
  ASSERT_TRUE(first.ok() && second.ok()) << first.status() << second.status();
  EXPECT_NE(first->id(), second->id());
  EXPECT_EQ(first->action_key(), second->action_key());
  EXPECT_EQ(second->labels().at("team"), "b");
  EXPECT_EQ(store_->CountTasks()->queued, 1);
  const v1::Task task = LeaseOne();
  EXPECT_EQ(task.action_key(), first->action_key());
  EXPECT_FALSE(service_->LeaseTask("worker-2")->has_value());  // one compile for both
  ASSERT_TRUE(*service_->CompleteTask(Finished(task)));
  for (const auto& id : {first->id(), second->id()}) {
    auto job = service_->GetJob(id);
    EXPECT_EQ(job->state(), v1::SUCCEEDED);
    EXPECT_FALSE(job->cache_hit());
  }
}

TEST_F(CompileServiceTest, CacheHitAnswersWithTheArtifactWithoutACompile) {
  auto miss = service_->Lookup(UploadedSpec());
  EXPECT_EQ(miss.status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(service_->Submit(UploadedSpec(), {}).ok());
  const TaskReport report = Finished(LeaseOne());
  ASSERT_TRUE(*service_->CompleteTask(report));

  auto hit = service_->Submit(UploadedSpec(), {});
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->state(), v1::SUCCEEDED);
  EXPECT_TRUE(hit->cache_hit());
  EXPECT_EQ(hit->result().artifact().sha256(), report.outcome.result.artifact().sha256());
  EXPECT_EQ(store_->CountTasks()->queued, 0);
  EXPECT_FALSE(service_->LeaseTask("worker-2")->has_value());
  auto lookup = service_->Lookup(UploadedSpec());
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->action_key, hit->action_key());
  EXPECT_EQ(lookup->result.artifact().sha256(), report.outcome.result.artifact().sha256());
}

TEST_F(CompileServiceTest, LeaseFinishesATaskWhoseResultIsAlreadyCached) {
  // As after a crash between the action-cache write and the store update: the task is
  // still queued, but its result is in the action cache.
  auto job = service_->Submit(UploadedSpec(), {});
  ASSERT_TRUE(job.ok());
  v1::Task task;
  task.set_action_key(job->action_key());
  const TaskReport report = Finished(task);
  cache::ActionResult action;
  action.artifact = DigestFromProto(report.outcome.result.artifact());
  action.report = DigestFromProto(report.outcome.result.report());
  action.manifest = DigestFromProto(report.outcome.result.manifest());
  report.outcome.result.SerializeToString(&action.details);
  ASSERT_TRUE(cache_->PutAction(job->action_key(), action).ok());

  EXPECT_FALSE(service_->LeaseTask("worker-1")->has_value());  // nothing to compile
  auto done = service_->GetJob(job->id());
  EXPECT_EQ(done->state(), v1::SUCCEEDED);
  EXPECT_EQ(done->result().artifact().sha256(), action.artifact.sha256_hex);
}

TEST_F(CompileServiceTest, CancelStopsAQueuedJob) {
  auto job = service_->Submit(UploadedSpec(), {});
  ASSERT_TRUE(job.ok());
  auto cancelled = service_->CancelJob(job->id());
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(cancelled->error(), "cancelled by request");
  EXPECT_EQ(service_->CancelJob(job->id())->state(), v1::CANCELLED);  // again: unchanged
  EXPECT_FALSE(service_->LeaseTask("worker-1")->has_value());         // nothing left to compile
  EXPECT_EQ(service_->CancelJob("job-unknown").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CompileServiceTest, StatusFollowsTheJobFromQueuedToSucceeded) {
  auto job = service_->Submit(UploadedSpec(), {});
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::QUEUED);
  EXPECT_EQ(job->phase(), "queued");
  const v1::Task task = LeaseOne();
  EXPECT_EQ(service_->GetJob(job->id())->state(), v1::RUNNING);
  auto verdict = service_->Heartbeat(TaskProgress{task.action_key(), task.attempt(), "codegen", 0.4});
  ASSERT_TRUE(verdict.ok() && verdict->keep_going);
  EXPECT_EQ(service_->GetJob(job->id())->phase(), "codegen");

  // A worker that reports success without uploading its outputs gets the task retried.
  ASSERT_TRUE(*service_->CompleteTask(Finished(task, /*upload=*/false)));
  auto requeued = service_->GetJob(job->id());
  EXPECT_EQ(requeued->state(), v1::QUEUED);
  const v1::Task retry = LeaseOne();
  EXPECT_GT(retry.attempt(), task.attempt());
  EXPECT_FALSE(*service_->CompleteTask(Finished(task)));  // the old lease is stale
  ASSERT_TRUE(*service_->CompleteTask(Finished(retry)));
  auto done = service_->GetJob(job->id());
  EXPECT_EQ(done->state(), v1::SUCCEEDED);
  EXPECT_EQ(done->phase(), "done");
  EXPECT_DOUBLE_EQ(done->progress(), 1.0);
  EXPECT_GT(done->finished_ms(), 0);
}

TEST_F(CompileServiceTest, ListJobsPagesAndRejectsBadQueries) {
  for (const char* team : {"a", "b", "a"}) ASSERT_TRUE(service_->Submit(UploadedSpec(), {{"team", team}}).ok());
  JobQuery query;
  query.labels["team"] = "a";
  EXPECT_EQ(service_->ListJobs(query)->jobs.size(), 2u);
  query = JobQuery();
  query.page_size = 2;
  auto page = service_->ListJobs(query);
  ASSERT_EQ(page->jobs.size(), 2u);
  query.page_token = page->next_page_token;
  EXPECT_EQ(service_->ListJobs(query)->jobs.size(), 1u);
  query.page_token = "not-a-token";
  EXPECT_EQ(service_->ListJobs(query).status().code(), absl::StatusCode::kInvalidArgument);
  query = JobQuery();
  query.page_size = 5000;
  EXPECT_EQ(service_->ListJobs(query).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CompileServiceTest, WorkersWithAnotherCompilerAreTurnedAway) {
  EXPECT_TRUE(service_->CheckWorkerVersion(kCompilerVersion).ok());
  auto other = service_->CheckWorkerVersion("kiln-other");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.message().find("kiln-other"), std::string::npos);
}

}  // namespace
}  // namespace kiln::server
