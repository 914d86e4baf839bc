// kilnd's gRPC services: see service.h.
#include "server/src/service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/common/time.h"
#include "kiln/compiler/spec.h"
#include "kiln/compiler/target.h"
#include "onnx/onnx_pb.h"
#include "proto/client/status_names.h"

namespace kiln::server {
namespace {

using cache::Digest;

constexpr int64_t kChunkBytes = 1 << 20;

Digest FromProto(const v1::Digest& d) { return Digest{d.sha256(), d.size_bytes()}; }
v1::Digest ToProto(const Digest& d) {
  v1::Digest out;
  out.set_sha256(d.sha256_hex);
  out.set_size_bytes(d.size_bytes);
  return out;
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status Invalid(const std::string& message) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message); }

grpc::Status CheckDigest(const v1::Digest& digest, const char* what) {
  if (auto s = cache::ValidateDigest(FromProto(digest)); !s.ok()) {
    return Invalid(absl::StrCat(what, ": ", s.message()));
  }
  return grpc::Status::OK;
}

// Cheap sanity check before queueing: the bytes must parse as an ONNX ModelProto with a
// graph. Deeper problems (unsupported ops, bad shapes) fail the job with the importer's
// message.
grpc::Status CheckModel(cache::Cache& cache, const v1::Digest& digest) {
  auto bytes = cache.Get(FromProto(digest));
  if (!bytes.ok()) {
    if (absl::IsDataLoss(bytes.status())) {
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          absl::StrCat(bytes.status().message(), "; upload the model again"));
    }
    return ToGrpc(bytes.status());
  }
  onnx::ModelProto model;
  if (!model.ParseFromString(*bytes)) {
    return Invalid(
        absl::StrCat("model ", digest.sha256(), " is not an ONNX model (the bytes do not parse as a ModelProto)"));
  }
  if (!model.has_graph() || model.graph().node_size() == 0) {
    return Invalid(absl::StrCat("model ", digest.sha256(), " has no graph nodes; is it an ONNX model?"));
  }
  if (model.ir_version() <= 0) {
    return Invalid(absl::StrCat("model ", digest.sha256(), " has no ir_version; is it an ONNX model?"));
  }
  return grpc::Status::OK;
}

}  // namespace

void ServerState::SawWorker(const std::string& id, bool busy) {
  std::lock_guard<std::mutex> lock(workers_mutex);
  workers[id] = WorkerSeen{UnixMillis(), busy};
}

void ServerState::Housekeeping() {
  for (const TaskEnd& end : queue->ExpireLeases()) {
    if (end.state == v1::FAILED) metrics->JobFinished(end.target, "FAILED", end.jobs);
  }
  auto counts = queue->CountTasks();
  metrics->SetQueue(static_cast<double>(counts.queued_tasks), static_cast<double>(counts.running_tasks));
  {
    std::lock_guard<std::mutex> lock(workers_mutex);
    const int64_t now = UnixMillis();
    double busy = 0, idle = 0;
    for (auto it = workers.begin(); it != workers.end();) {
      // A worker polls at least every few seconds; one silent for a lease period is gone.
      if (now - it->second.last_seen_ms > std::max<int64_t>(queue->options().lease_timeout_ms, 15000)) {
        it = workers.erase(it);
        continue;
      }
      (it->second.busy ? busy : idle) += 1;
      ++it;
    }
    metrics->SetWorkers(busy, idle);
  }
  cache->EvictToBudget().IgnoreError();
  const auto& c = cache->counters();
  metrics->SetCache(static_cast<double>(cache->total_bytes()), static_cast<double>(cache->blob_count()),
                    static_cast<double>(cache->budget_bytes()), static_cast<double>(c.evictions.load()),
                    static_cast<double>(c.evicted_bytes.load()), static_cast<double>(c.corrupt_blobs.load()));
}

grpc::Status KilnService::Count(const char* method, grpc::Status status) {
  state_->metrics->Rpc(method, client::StatusCodeName(status.error_code()));
  return status;
}

grpc::Status WorkerService::Count(const char* method, grpc::Status status) {
  state_->metrics->Rpc(method, client::StatusCodeName(status.error_code()));
  return status;
}

grpc::Status KilnService::Upload(grpc::ServerContext*, grpc::ServerReader<v1::UploadRequest>* reader,
                                 v1::UploadResponse* response) {
  auto run = [&]() -> grpc::Status {
    v1::UploadRequest chunk;
    if (!reader->Read(&chunk)) return Invalid("empty upload: the first message must carry the digest");
    if (!chunk.has_digest())
      return Invalid("the first upload message must carry the blob's digest {sha256, size_bytes}");
    if (auto s = CheckDigest(chunk.digest(), "upload digest"); !s.ok()) return s;
    const Digest expected = FromProto(chunk.digest());
    if (expected.size_bytes > state_->options.max_upload_bytes) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("upload of ", expected.size_bytes, " bytes exceeds this server's limit of ",
                                       state_->options.max_upload_bytes, " bytes (kilnd --max-upload)"));
    }
    *response->mutable_digest() = chunk.digest();
    if (state_->cache->Contains(expected)) {
      response->set_already_present(true);
      return grpc::Status::OK;
    }
    auto hold = state_->cache->HoldBlob(expected);
    auto writer = state_->cache->NewWriter();
    if (!writer.ok()) return ToGrpc(writer.status());
    do {
      if ((*writer)->bytes_written() + static_cast<int64_t>(chunk.data().size()) > expected.size_bytes) {
        return Invalid(absl::StrCat("upload sent more than the ", expected.size_bytes, " bytes its digest declares"));
      }
      if (auto s = (*writer)->Append(chunk.data()); !s.ok()) return ToGrpc(s);
    } while (reader->Read(&chunk));
    if (auto s = (*writer)->Commit(expected); !s.ok()) return ToGrpc(s);
    if (auto s = state_->cache->Record(expected); !s.ok()) return ToGrpc(s);
    return grpc::Status::OK;
  };
  return Count("Upload", run());
}

grpc::Status KilnService::FindMissing(grpc::ServerContext*, const v1::FindMissingRequest* request,
                                      v1::FindMissingResponse* response) {
  for (const auto& digest : request->digests()) {
    if (auto s = CheckDigest(digest, "FindMissing"); !s.ok()) return Count("FindMissing", s);
    if (!state_->cache->Contains(FromProto(digest))) *response->add_missing() = digest;
  }
  return Count("FindMissing", grpc::Status::OK);
}

namespace {

// The request's spec normalised (target resolved here: "host" is this machine) and its
// action key; the service does not tune (that measures on whichever worker leases it).
grpc::Status NormalizeSpec(v1::CompileSpec& spec, const std::string& compiler_version, std::string* key) {
  if (!spec.has_model()) return Invalid("Submit needs spec.model, the model's digest (upload the model first)");
  if (auto s = CheckDigest(spec.model(), "model digest"); !s.ok()) return s;
  if (spec.tuning().enabled()) {
    return Invalid(
        "tuning.enabled: the service does not tune (timings would come from whichever worker ran the "
        "job); tune with `kiln compile --tune`");
  }
  if (auto s = Normalize(spec); !s.ok()) return ToGrpc(s);
  *key = ActionKey(spec, compiler_version);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status KilnService::Submit(grpc::ServerContext*, const v1::SubmitRequest* incoming, v1::Job* response) {
  auto run = [&]() -> grpc::Status {
    v1::CompileSpec spec = incoming->spec();
    std::string key;
    if (auto s = NormalizeSpec(spec, state_->options.compiler_version, &key); !s.ok()) return s;
    const std::string canonical_target = CanonicalTarget(spec.target());
    // Held until the task is queued (from then on the queue's needs protect it).
    auto model_hold = state_->cache->HoldBlob(FromProto(spec.model()));
    if (!state_->cache->Contains(FromProto(spec.model()))) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("model blob ", spec.model().sha256(), " (", spec.model().size_bytes(),
                       " bytes) is not in the cache; Upload it first (FindMissing lists what to upload)"));
    }
    if (spec.accuracy().has_input_set()) {
      if (auto s = CheckDigest(spec.accuracy().input_set(), "input set digest"); !s.ok()) return s;
      if (!state_->cache->Contains(FromProto(spec.accuracy().input_set()))) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("input set blob ", spec.accuracy().input_set().sha256(),
                                         " is not in the cache; Upload it first"));
      }
    }
    for (const auto& sample : spec.quantization().calibration()) {
      if (auto s = CheckDigest(sample, "calibration digest"); !s.ok()) return s;
      if (!state_->cache->Contains(FromProto(sample))) {
        return grpc::Status(
            grpc::StatusCode::FAILED_PRECONDITION,
            absl::StrCat("calibration blob ", sample.sha256(), " is not in the cache; Upload it first"));
      }
    }
    v1::Job job;
    *job.mutable_model() = spec.model();
    job.set_target(canonical_target);
    job.set_target_name(spec.target().preset());
    job.set_action_key(key);
    job.set_compiler_version(state_->options.compiler_version);
    *job.mutable_labels() = incoming->labels();
    std::optional<v1::JobResult> cached;
    if (auto hit = state_->cache->LookupAction(key)) {
      v1::JobResult result;
      result.ParseFromString(hit->details);
      cached = result;
    }
    state_->metrics->CacheLookup(cached.has_value());
    if (!cached) {
      if (auto s = CheckModel(*state_->cache, spec.model()); !s.ok()) return s;
    }
    // Metrics label targets by preset (host, a preset, or custom), not by the canonical
    // feature list, so dashboards stay readable.
    const std::string target_label = spec.target().preset();
    auto outcome = state_->queue->Submit(job, spec, target_label, cached);
    if (!outcome.ok()) return ToGrpc(outcome.status());
    state_->metrics->JobSubmitted(target_label, cached ? "cache_hit" : outcome->joined ? "joined" : "queued");
    if (cached) state_->metrics->JobFinished(target_label, "SUCCEEDED");
    *response = outcome->job;
    return grpc::Status::OK;
  };
  return Count("Submit", run());
}

grpc::Status KilnService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* response) {
  auto job = state_->queue->Get(request->id());
  if (!job.ok()) return Count("GetJob", ToGrpc(job.status()));
  *response = *job;
  return Count("GetJob", grpc::Status::OK);
}

grpc::Status KilnService::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                   grpc::ServerWriter<v1::JobEvent>* writer) {
  auto run = [&]() -> grpc::Status {
    std::string last;
    for (;;) {
      const uint64_t seen = state_->queue->change_counter();
      auto job = state_->queue->Get(request->id());
      if (!job.ok()) return ToGrpc(job.status());
      const std::string now = absl::StrCat(job->state(), "/", job->phase(), "/", job->progress());
      const bool terminal =
          job->state() == v1::SUCCEEDED || job->state() == v1::FAILED || job->state() == v1::CANCELLED;
      if (now != last) {
        v1::JobEvent event;
        event.set_job_id(job->id());
        event.set_state(job->state());
        event.set_phase(job->phase());
        event.set_progress(job->progress());
        event.set_message(job->error());
        event.set_time_ms(UnixMillis());
        *event.mutable_job() = *job;
        if (!writer->Write(event)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
        last = now;
      }
      if (terminal) return grpc::Status::OK;
      if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      state_->queue->WaitForChange(seen, 1000);
    }
  };
  return Count("WatchJob", run());
}

grpc::Status KilnService::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request, v1::Job* response) {
  auto before = state_->queue->Get(request->id());
  if (!before.ok()) return Count("CancelJob", ToGrpc(before.status()));
  auto job = state_->queue->Cancel(request->id());
  if (!job.ok()) return Count("CancelJob", ToGrpc(job.status()));
  if (before->state() != job->state() && job->state() == v1::CANCELLED)
    state_->metrics->JobFinished(job->target_name(), "CANCELLED");
  *response = *job;
  return Count("CancelJob", grpc::Status::OK);
}

grpc::Status KilnService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                   v1::ListJobsResponse* response) {
  auto run = [&]() -> grpc::Status {
    ListFilter filter;
    filter.state = request->state();
    filter.labels.insert(request->labels().begin(), request->labels().end());
    filter.page_size = request->page_size() == 0 ? 50 : request->page_size();
    if (filter.page_size < 0 || filter.page_size > 1000) return Invalid("page_size must be between 1 and 1000");
    if (!request->page_token().empty() && !absl::SimpleAtoi(request->page_token(), &filter.after_seq)) {
      return Invalid(absl::StrCat("page_token '", request->page_token(), "' is not one this server gave out"));
    }
    auto page = state_->queue->List(filter);
    if (!page.ok()) return ToGrpc(page.status());
    for (auto& job : page->first) *response->add_jobs() = std::move(job);
    if (page->second > 0) response->set_next_page_token(absl::StrCat(page->second));
    return grpc::Status::OK;
  };
  return Count("ListJobs", run());
}

grpc::Status KilnService::Lookup(grpc::ServerContext*, const v1::LookupRequest* incoming,
                                 v1::LookupResponse* response) {
  auto run = [&]() -> grpc::Status {
    v1::CompileSpec spec = incoming->spec();
    std::string key;
    if (auto s = NormalizeSpec(spec, state_->options.compiler_version, &key); !s.ok()) return s;
    response->set_action_key(key);
    auto hit = state_->cache->LookupAction(key);
    state_->metrics->CacheLookup(hit.has_value());
    if (!hit) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat("no cached result for action ", key, " (this model, target, options and compiler ",
                       state_->options.compiler_version, "); Submit compiles it"));
    }
    response->mutable_result()->ParseFromString(hit->details);
    return grpc::Status::OK;
  };
  return Count("Lookup", run());
}

grpc::Status KilnService::Download(grpc::ServerContext* context, const v1::DownloadRequest* request,
                                   grpc::ServerWriter<v1::DownloadResponse>* writer) {
  auto run = [&]() -> grpc::Status {
    if (auto s = CheckDigest(request->digest(), "download digest"); !s.ok()) return s;
    const Digest digest = FromProto(request->digest());
    auto hold = state_->cache->HoldBlob(digest);
    if (auto s = state_->cache->Verify(digest); !s.ok()) {
      if (absl::IsDataLoss(s)) {
        return grpc::Status(grpc::StatusCode::DATA_LOSS,
                            absl::StrCat(s.message(), "; resubmit the job that produced it, or upload it again"));
      }
      return ToGrpc(s);
    }
    if (request->offset() < 0 || request->offset() > digest.size_bytes) {
      return grpc::Status(
          grpc::StatusCode::OUT_OF_RANGE,
          absl::StrCat("offset ", request->offset(), " is outside the blob's ", digest.size_bytes, " bytes"));
    }
    int64_t offset = request->offset();
    do {
      auto bytes = state_->cache->ReadRange(digest, offset, std::min(kChunkBytes, digest.size_bytes - offset));
      if (!bytes.ok()) return ToGrpc(bytes.status());
      v1::DownloadResponse chunk;
      chunk.set_offset(offset);
      offset += static_cast<int64_t>(bytes->size());
      chunk.set_data(std::move(*bytes));
      if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    } while (offset < digest.size_bytes);
    return grpc::Status::OK;
  };
  return Count("Download", run());
}

grpc::Status WorkerService::Lease(grpc::ServerContext* context, const v1::LeaseRequest* request,
                                  v1::LeaseResponse* response) {
  auto run = [&]() -> grpc::Status {
    if (request->worker_id().empty()) return Invalid("Lease needs a worker_id");
    if (request->compiler_version() != state_->options.compiler_version) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("worker compiler version '", request->compiler_version(), "' differs from the server's '",
                       state_->options.compiler_version, "'; run a matching kiln-worker"));
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp(request->wait_ms(), 0, 30000));
    for (;;) {
      state_->SawWorker(request->worker_id(), false);
      const uint64_t seen = state_->queue->change_counter();
      int64_t queue_wait_ms = 0;
      if (auto task = state_->queue->Lease(request->worker_id(), &queue_wait_ms)) {
        // A result cached by an attempt whose completion was lost (a crash between the
        // action-cache write and the queue update) finishes the task without a compile.
        if (auto hit = state_->cache->LookupAction(task->action_key())) {
          v1::JobResult result;
          result.ParseFromString(hit->details);
          if (auto end = state_->queue->Complete(task->action_key(), task->attempt(), true, "", false, result)) {
            state_->metrics->JobFinished(end->target, "SUCCEEDED", end->jobs);
          }
          continue;
        }
        state_->SawWorker(request->worker_id(), true);
        state_->metrics->Phase("queue_wait", static_cast<double>(queue_wait_ms) / 1000.0);
        *response->mutable_task() = *task;
        return grpc::Status::OK;
      }
      if (std::chrono::steady_clock::now() >= deadline || context->IsCancelled()) return grpc::Status::OK;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      state_->queue->WaitForChange(seen, std::min<int64_t>(left.count(), 1000));
    }
  };
  return Count("Lease", run());
}

grpc::Status WorkerService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) {
  state_->SawWorker(request->worker_id(), true);
  *response = state_->queue->Heartbeat(*request);
  return Count("Heartbeat", grpc::Status::OK);
}

grpc::Status WorkerService::Complete(grpc::ServerContext*, const v1::CompleteRequest* request,
                                     v1::CompleteResponse* response) {
  auto run = [&]() -> grpc::Status {
    state_->SawWorker(request->worker_id(), false);
    bool success = request->success();
    std::string error = request->error();
    bool retryable = request->retryable();
    if (success) {
      const auto& r = request->result();
      for (const v1::Digest* d : {&r.artifact(), &r.report(), &r.manifest()}) {
        if (!state_->cache->Contains(FromProto(*d))) {
          success = false;
          retryable = true;
          error = absl::StrCat("worker ", request->worker_id(), " completed without uploading blob ", d->sha256());
        }
      }
    }
    if (success) {
      cache::ActionResult action;
      action.artifact = FromProto(request->result().artifact());
      action.report = FromProto(request->result().report());
      action.manifest = FromProto(request->result().manifest());
      request->result().SerializeToString(&action.details);
      // The action cache first: if kilnd dies before the queue update, the retried lease
      // finds the result here instead of compiling again.
      if (auto s = state_->cache->PutAction(request->action_key(), action); !s.ok()) return ToGrpc(s);
    }
    auto end = state_->queue->Complete(request->action_key(), request->attempt(), success, error, retryable,
                                       request->result());
    response->set_accepted(end.has_value());
    if (end && end->state != v1::QUEUED) {
      state_->metrics->JobFinished(end->target, v1::JobState_Name(end->state), end->jobs);
      if (request->compile_ms() > 0) state_->metrics->Phase("compile", request->compile_ms() / 1000.0);
      if (request->validate_ms() > 0) state_->metrics->Phase("validate", request->validate_ms() / 1000.0);
      state_->metrics->Phase("total", static_cast<double>(UnixMillis() - end->queued_ms) / 1000.0);
    }
    return grpc::Status::OK;
  };
  return Count("Complete", run());
}

}  // namespace kiln::server
