// CompileService: see compile_service.h.
#include "server/service/compile_service.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/common/time.h"
#include "kiln/compiler/spec.h"
#include "kiln/compiler/target.h"
#include "onnx/onnx_pb.h"

namespace kiln::server {
namespace {

constexpr int32_t kDefaultPageSize = 50;
constexpr int32_t kMaxPageSize = 1000;

// A blob a Submit names must already be uploaded: FAILED_PRECONDITION, not INVALID_ARGUMENT,
// since the same request succeeds after an Upload.
absl::Status CheckUploaded(const cache::Cache& cache, const v1::Digest& digest, const char* what) {
  if (cache.Contains(DigestFromProto(digest))) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, " blob ", digest.sha256(), " (", digest.size_bytes(),
                                                    " bytes) is not in the cache; Upload it first (FindMissing lists "
                                                    "what to upload)"));
}

v1::JobResult ResultOf(const cache::ActionResult& action) {
  v1::JobResult result;
  result.ParseFromString(action.details);
  return result;
}

}  // namespace

cache::Digest DigestFromProto(const v1::Digest& digest) { return cache::Digest{digest.sha256(), digest.size_bytes()}; }

absl::Status CheckDigest(const v1::Digest& digest, const char* what) {
  if (auto s = cache::ValidateDigest(DigestFromProto(digest)); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  return absl::OkStatus();
}

CompileService::CompileService(CompileServiceOptions options, cache::Cache* cache, JobStore* store, Metrics* metrics)
    : options_(std::move(options)), cache_(cache), store_(store), metrics_(metrics) {}

// The spec normalised (target resolved here: "host" is this machine) and its action key.
// The service does not tune: timings would come from whichever worker leased the job.
absl::StatusOr<CompileService::Normalized> CompileService::NormalizeSpec(v1::CompileSpec spec) const {
  if (!spec.has_model()) {
    return absl::InvalidArgumentError("spec.model is missing: give the model's digest (upload the model first)");
  }
  KILN_RETURN_IF_ERROR(CheckDigest(spec.model(), "spec.model digest"));
  if (spec.accuracy().has_input_set()) {
    KILN_RETURN_IF_ERROR(CheckDigest(spec.accuracy().input_set(), "spec.accuracy.input_set digest"));
  }
  for (const auto& sample : spec.quantization().calibration()) {
    KILN_RETURN_IF_ERROR(CheckDigest(sample, "spec.quantization.calibration digest"));
  }
  if (spec.tuning().enabled()) {
    return absl::InvalidArgumentError(
        "spec.tuning.enabled: the service does not tune (timings would come from whichever worker ran the "
        "job); tune with `kiln compile --tune`");
  }
  KILN_RETURN_IF_ERROR(::kiln::Normalize(spec));
  Normalized normalized;
  normalized.action_key = ActionKey(spec, options_.compiler_version);
  normalized.spec = std::move(spec);
  return normalized;
}

absl::Status CompileService::CheckBlobsPresent(const v1::CompileSpec& spec) const {
  KILN_RETURN_IF_ERROR(CheckUploaded(*cache_, spec.model(), "model"));
  if (spec.accuracy().has_input_set()) {
    KILN_RETURN_IF_ERROR(CheckUploaded(*cache_, spec.accuracy().input_set(), "input set"));
  }
  for (const auto& sample : spec.quantization().calibration()) {
    KILN_RETURN_IF_ERROR(CheckUploaded(*cache_, sample, "calibration"));
  }
  return absl::OkStatus();
}

// Cheap sanity check before queueing: the bytes must parse as an ONNX ModelProto with a
// graph. Deeper problems (unsupported ops, bad shapes) fail the job with the importer's
// message.
absl::Status CompileService::CheckModel(const v1::Digest& digest) const {
  auto bytes = cache_->Get(DigestFromProto(digest));
  if (!bytes.ok()) {
    if (absl::IsDataLoss(bytes.status())) {
      return absl::DataLossError(absl::StrCat(bytes.status().message(), "; upload the model again"));
    }
    return bytes.status();
  }
  onnx::ModelProto model;
  const std::string name = absl::StrCat("spec.model ", digest.sha256());
  if (!model.ParseFromString(*bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is not an ONNX model (the bytes do not parse as a ModelProto)"));
  }
  if (!model.has_graph() || model.graph().node_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has no graph nodes; is it an ONNX model?"));
  }
  if (model.ir_version() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has no ir_version; is it an ONNX model?"));
  }
  return absl::OkStatus();
}

std::optional<v1::JobResult> CompileService::LookupResult(const std::string& action_key) {
  auto hit = cache_->LookupAction(action_key);
  metrics_->CacheLookup(hit.has_value());
  if (!hit) return std::nullopt;
  return ResultOf(*hit);
}

absl::StatusOr<v1::Job> CompileService::Submit(v1::CompileSpec spec, const std::map<std::string, std::string>& labels) {
  KILN_ASSIGN_OR_RETURN(Normalized normalized, NormalizeSpec(std::move(spec)));
  // Held until the task is queued (from then on the store's IsNeeded protects it).
  auto model_hold = cache_->HoldBlob(DigestFromProto(normalized.spec.model()));
  KILN_RETURN_IF_ERROR(CheckBlobsPresent(normalized.spec));
  NewJob request;
  v1::Job& job = request.job;
  *job.mutable_model() = normalized.spec.model();
  job.set_target(CanonicalTarget(normalized.spec.target()));
  job.set_target_name(normalized.spec.target().preset());
  job.set_action_key(normalized.action_key);
  job.set_compiler_version(options_.compiler_version);
  job.mutable_labels()->insert(labels.begin(), labels.end());
  // Metrics label targets by preset (host, a preset, or custom), not by the canonical
  // feature list, so dashboards stay readable.
  request.target_label = normalized.spec.target().preset();
  request.spec = std::move(normalized.spec);
  request.cached = LookupResult(normalized.action_key);
  if (!request.cached) KILN_RETURN_IF_ERROR(CheckModel(request.spec.model()));
  KILN_ASSIGN_OR_RETURN(SubmitOutcome outcome, store_->Submit(request));
  const bool cached = request.cached.has_value();
  metrics_->JobSubmitted(request.target_label, cached ? "cache_hit" : outcome.joined ? "joined" : "queued");
  if (cached) metrics_->JobFinished(request.target_label, "SUCCEEDED");
  return std::move(outcome.job);
}

absl::StatusOr<LookupHit> CompileService::Lookup(v1::CompileSpec spec) {
  KILN_ASSIGN_OR_RETURN(Normalized normalized, NormalizeSpec(std::move(spec)));
  auto result = LookupResult(normalized.action_key);
  if (!result) {
    return absl::NotFoundError(absl::StrCat("no cached result for action ", normalized.action_key,
                                            " (this model, target, options and compiler ", options_.compiler_version,
                                            "); Submit compiles it"));
  }
  return LookupHit{normalized.action_key, std::move(*result)};
}

absl::StatusOr<v1::Job> CompileService::GetJob(const std::string& id) { return store_->Get(id); }

absl::StatusOr<v1::Job> CompileService::CancelJob(const std::string& id) {
  KILN_ASSIGN_OR_RETURN(const v1::Job before, store_->Get(id));
  KILN_ASSIGN_OR_RETURN(v1::Job job, store_->Cancel(id));
  if (before.state() != job.state() && job.state() == v1::CANCELLED)
    metrics_->JobFinished(job.target_name(), "CANCELLED");
  return job;
}

absl::StatusOr<JobList> CompileService::ListJobs(const JobQuery& query) {
  ListFilter filter;
  filter.state = query.state;
  filter.labels = query.labels;
  filter.page_size = query.page_size == 0 ? kDefaultPageSize : query.page_size;
  if (filter.page_size < 0 || filter.page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", query.page_size, " must be between 1 and ", kMaxPageSize));
  }
  // The page token is the last row's sequence number, as text.
  if (!query.page_token.empty() && !absl::SimpleAtoi(query.page_token, &filter.after_seq)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token '", query.page_token, "' is not one this server gave out"));
  }
  KILN_ASSIGN_OR_RETURN(JobPage page, store_->List(filter));
  JobList list;
  list.jobs = std::move(page.jobs);
  if (page.next_after_seq > 0) list.next_page_token = absl::StrCat(page.next_after_seq);
  return list;
}

absl::Status CompileService::CheckWorkerVersion(const std::string& worker_compiler_version) const {
  if (worker_compiler_version == options_.compiler_version) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("worker compiler version '", worker_compiler_version,
                                                    "' differs from the server's '", options_.compiler_version,
                                                    "'; run a matching kiln-worker"));
}

absl::StatusOr<std::optional<LeasedTask>> CompileService::LeaseTask(const std::string& worker_id) {
  for (;;) {
    KILN_ASSIGN_OR_RETURN(std::optional<LeasedTask> leased, store_->Lease(worker_id));
    if (!leased) return leased;
    const v1::Task& task = leased->task;
    // A result cached by an attempt whose completion was lost (a crash between the
    // action-cache write and the store update) finishes the task without a compile.
    auto hit = cache_->LookupAction(task.action_key());
    if (!hit) {
      metrics_->Phase("queue_wait", static_cast<double>(leased->queue_wait_ms) / 1000.0);
      return leased;
    }
    TaskOutcome done{task.action_key(), task.attempt(), true, "", false, ResultOf(*hit)};
    if (auto end = store_->Complete(done); end.ok()) metrics_->JobFinished(end->target, "SUCCEEDED", end->jobs);
  }
}

absl::StatusOr<HeartbeatVerdict> CompileService::Heartbeat(const TaskProgress& progress) {
  return store_->Heartbeat(progress);
}

absl::StatusOr<bool> CompileService::CompleteTask(TaskReport report) {
  TaskOutcome& outcome = report.outcome;
  const v1::JobResult& result = outcome.result;
  for (const v1::Digest* digest : {&result.artifact(), &result.report(), &result.manifest()}) {
    if (outcome.success && !cache_->Contains(DigestFromProto(*digest))) {
      outcome.success = false;
      outcome.retryable = true;
      outcome.error = absl::StrCat("worker ", report.worker_id, " completed without uploading blob ", digest->sha256());
    }
  }
  if (outcome.success) {
    cache::ActionResult action;
    action.artifact = DigestFromProto(result.artifact());
    action.report = DigestFromProto(result.report());
    action.manifest = DigestFromProto(result.manifest());
    result.SerializeToString(&action.details);
    // The action cache first: if kilnd dies before the store update, the retried lease
    // finds the result there instead of compiling again.
    KILN_RETURN_IF_ERROR(cache_->PutAction(outcome.action_key, action));
  }
  auto end = store_->Complete(outcome);
  if (absl::IsFailedPrecondition(end.status())) return false;  // a stale lease: another attempt owns it
  if (!end.ok()) return end.status();
  if (end->state != v1::QUEUED) {
    metrics_->JobFinished(end->target, v1::JobState_Name(end->state), end->jobs);
    if (report.compile_ms > 0) metrics_->Phase("compile", report.compile_ms / 1000.0);
    if (report.validate_ms > 0) metrics_->Phase("validate", report.validate_ms / 1000.0);
    metrics_->Phase("total", static_cast<double>(UnixMillis() - end->queued_ms) / 1000.0);
  }
  return true;
}

}  // namespace kiln::server
