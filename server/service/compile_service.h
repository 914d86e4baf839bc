// kilnd's service layer: what Submit, Lookup, GetJob, CancelJob, ListJobs and the worker
// protocol mean, apart from how they travel. It speaks Kiln's own types (CompileSpec,
// Job, absl::Status) and links no gRPC; the handlers in server/src/service.cc convert wire
// messages and call it. Every error is an absl::Status whose message names the field or
// blob to fix; its code is the gRPC code the client sees.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/cache/cache.h"
#include "kiln/v1/kiln.pb.h"
#include "kiln/v1/spec.pb.h"
#include "server/queue/job_store.h"
#include "server/src/metrics.h"

namespace kiln::server {

struct CompileServiceOptions {
  std::string compiler_version;  // part of every action key; workers must match it
};

struct LookupHit {
  std::string action_key;
  v1::JobResult result;
};

struct JobQuery {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  // unspecified: any
  std::map<std::string, std::string> labels;       // all must match
  int32_t page_size = 0;                           // 0: 50
  std::string page_token;                          // from the previous page
};

struct JobList {
  std::vector<v1::Job> jobs;
  std::string next_page_token;  // empty: the last page
};

// What a worker reports when a task ends.
struct TaskReport {
  std::string worker_id;
  TaskOutcome outcome;
  double compile_ms = 0;
  double validate_ms = 0;
};

// The cache's name for a digest, and a check of its form; `what` names the field in the
// error ("model digest: ...").
cache::Digest DigestFromProto(const v1::Digest& digest);
absl::Status CheckDigest(const v1::Digest& digest, const char* what);

class CompileService {
 public:
  // `cache`, `store` and `metrics` outlive the service.
  CompileService(CompileServiceOptions options, cache::Cache* cache, JobStore* store, Metrics* metrics);

  // Client side.
  // Validates and normalises `spec`; answers from the action cache (a job born SUCCEEDED),
  // joins a job in flight for the same action, or queues a new task.
  absl::StatusOr<v1::Job> Submit(v1::CompileSpec spec, const std::map<std::string, std::string>& labels);
  // The cached result for `spec`, or NotFound naming the action key: never compiles.
  absl::StatusOr<LookupHit> Lookup(v1::CompileSpec spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  absl::StatusOr<v1::Job> CancelJob(const std::string& id);
  absl::StatusOr<JobList> ListJobs(const JobQuery& query);

  // Worker side.
  // FailedPrecondition when the worker's compiler differs from this server's.
  absl::Status CheckWorkerVersion(const std::string& worker_compiler_version) const;
  // The next task for `worker_id`, or nullopt when none waits. A task whose result is
  // already in the action cache is finished here instead of being handed out.
  absl::StatusOr<std::optional<LeasedTask>> LeaseTask(const std::string& worker_id);
  absl::StatusOr<HeartbeatVerdict> Heartbeat(const TaskProgress& progress);
  // Records the result (action cache first, then the store). Returns whether the store
  // accepted it: false when the lease was stale.
  absl::StatusOr<bool> CompleteTask(TaskReport report);

  JobStore& store() { return *store_; }
  const CompileServiceOptions& options() const { return options_; }

 private:
  struct Normalized {
    v1::CompileSpec spec;
    std::string action_key;
  };
  absl::StatusOr<Normalized> NormalizeSpec(v1::CompileSpec spec) const;
  absl::Status CheckBlobsPresent(const v1::CompileSpec& spec) const;
  absl::Status CheckModel(const v1::Digest& digest) const;
  std::optional<v1::JobResult> LookupResult(const std::string& action_key);

  CompileServiceOptions options_;
  cache::Cache* cache_;
  JobStore* store_;
  Metrics* metrics_;
};

}  // namespace kiln::server
