// kilnd's gRPC services: see service.h.
#include "server/src/service.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/common/log.h"
#include "kiln/common/time.h"
#include "proto/client/status_names.h"

namespace kiln::server {
namespace {

using cache::Digest;

constexpr int64_t kChunkBytes = 1 << 20;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share their canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status Invalid(const std::string& message) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message); }

grpc::Status ClientGone() { return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"); }

grpc::Status CountRpc(Metrics& metrics, const char* method, grpc::Status status) {
  metrics.Rpc(method, client::StatusCodeName(status.error_code()));
  return status;
}

v1::JobEvent EventOf(const v1::Job& job) {
  v1::JobEvent event;
  event.set_job_id(job.id());
  event.set_state(job.state());
  event.set_phase(job.phase());
  event.set_progress(job.progress());
  event.set_message(job.error());
  event.set_time_ms(UnixMillis());
  *event.mutable_job() = job;
  return event;
}

}  // namespace

void ServerState::SawWorker(const std::string& id, bool busy) {
  std::lock_guard<std::mutex> lock(workers_mutex);
  workers[id] = WorkerSeen{UnixMillis(), busy};
}

void ServerState::Housekeeping() {
  JobStore& store = service->store();
  // A store error here is retried on the next tick; the log says why leases stop expiring.
  if (auto ended = store.ExpireLeases(); ended.ok()) {
    for (const TaskEnd& end : *ended) {
      if (end.state == v1::FAILED) metrics->JobFinished(end.target, "FAILED", end.jobs);
    }
  } else {
    log::Warning({}, "expiring leases: {}", std::string(ended.status().message()));
  }
  if (auto counts = store.CountTasks(); counts.ok()) {
    metrics->SetQueue(static_cast<double>(counts->queued), static_cast<double>(counts->running));
  } else {
    log::Warning({}, "counting tasks: {}", std::string(counts.status().message()));
  }
  CountWorkers();
  cache->EvictToBudget().IgnoreError();
  const auto& c = cache->counters();
  metrics->SetCache(static_cast<double>(cache->total_bytes()), static_cast<double>(cache->blob_count()),
                    static_cast<double>(cache->budget_bytes()), static_cast<double>(c.evictions.load()),
                    static_cast<double>(c.evicted_bytes.load()), static_cast<double>(c.corrupt_blobs.load()));
}

void ServerState::CountWorkers() {
  std::lock_guard<std::mutex> lock(workers_mutex);
  const int64_t now = UnixMillis();
  // A worker polls at least every few seconds; one silent for a lease period is gone.
  const int64_t gone_after_ms = std::max<int64_t>(service->store().options().lease_timeout_ms, 15000);
  double busy = 0, idle = 0;
  for (auto it = workers.begin(); it != workers.end();) {
    if (now - it->second.last_seen_ms > gone_after_ms) {
      it = workers.erase(it);
      continue;
    }
    (it->second.busy ? busy : idle) += 1;
    ++it;
  }
  metrics->SetWorkers(busy, idle);
}

grpc::Status KilnService::Upload(grpc::ServerContext*, grpc::ServerReader<v1::UploadRequest>* reader,
                                 v1::UploadResponse* response) {
  auto run = [&]() -> grpc::Status {
    v1::UploadRequest chunk;
    if (!reader->Read(&chunk)) return Invalid("empty upload: the first message must carry the digest");
    if (!chunk.has_digest())
      return Invalid("the first upload message must carry the blob's digest {sha256, size_bytes}");
    if (auto s = CheckDigest(chunk.digest(), "upload digest"); !s.ok()) return ToGrpc(s);
    const Digest expected = DigestFromProto(chunk.digest());
    if (expected.size_bytes > state_->max_upload_bytes) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("upload of ", expected.size_bytes, " bytes exceeds this server's limit of ",
                                       state_->max_upload_bytes, " bytes (kilnd --max-upload)"));
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
    return ToGrpc(state_->cache->Record(expected));
  };
  return CountRpc(*state_->metrics, "Upload", run());
}

grpc::Status KilnService::FindMissing(grpc::ServerContext*, const v1::FindMissingRequest* request,
                                      v1::FindMissingResponse* response) {
  for (const auto& digest : request->digests()) {
    if (auto s = CheckDigest(digest, "FindMissing"); !s.ok())
      return CountRpc(*state_->metrics, "FindMissing", ToGrpc(s));
    if (!state_->cache->Contains(DigestFromProto(digest))) *response->add_missing() = digest;
  }
  return CountRpc(*state_->metrics, "FindMissing", grpc::Status::OK);
}

grpc::Status KilnService::Submit(grpc::ServerContext*, const v1::SubmitRequest* request, v1::Job* response) {
  const std::map<std::string, std::string> labels(request->labels().begin(), request->labels().end());
  auto job = state_->service->Submit(request->spec(), labels);
  if (job.ok()) *response = std::move(*job);
  return CountRpc(*state_->metrics, "Submit", ToGrpc(job.status()));
}

grpc::Status KilnService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* response) {
  auto job = state_->service->GetJob(request->id());
  if (job.ok()) *response = std::move(*job);
  return CountRpc(*state_->metrics, "GetJob", ToGrpc(job.status()));
}

grpc::Status KilnService::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                   grpc::ServerWriter<v1::JobEvent>* writer) {
  JobStore& store = state_->service->store();
  auto run = [&]() -> grpc::Status {
    std::string last;
    for (;;) {
      const uint64_t seen = store.change_counter();
      auto job = state_->service->GetJob(request->id());
      if (!job.ok()) return ToGrpc(job.status());
      // An event per visible change, not per store change.
      const std::string now = absl::StrCat(job->state(), "/", job->phase(), "/", job->progress());
      if (now != last) {
        if (!writer->Write(EventOf(*job))) return ClientGone();
        last = now;
      }
      if (IsTerminal(job->state())) return grpc::Status::OK;
      if (context->IsCancelled()) return ClientGone();
      store.WaitForChange(seen, 1000);
    }
  };
  return CountRpc(*state_->metrics, "WatchJob", run());
}

grpc::Status KilnService::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request, v1::Job* response) {
  auto job = state_->service->CancelJob(request->id());
  if (job.ok()) *response = std::move(*job);
  return CountRpc(*state_->metrics, "CancelJob", ToGrpc(job.status()));
}

grpc::Status KilnService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                   v1::ListJobsResponse* response) {
  JobQuery query;
  query.state = request->state();
  query.labels.insert(request->labels().begin(), request->labels().end());
  query.page_size = request->page_size();
  query.page_token = request->page_token();
  auto list = state_->service->ListJobs(query);
  if (list.ok()) {
    for (auto& job : list->jobs) *response->add_jobs() = std::move(job);
    response->set_next_page_token(list->next_page_token);
  }
  return CountRpc(*state_->metrics, "ListJobs", ToGrpc(list.status()));
}

grpc::Status KilnService::Lookup(grpc::ServerContext*, const v1::LookupRequest* request, v1::LookupResponse* response) {
  auto hit = state_->service->Lookup(request->spec());
  if (hit.ok()) {
    response->set_action_key(hit->action_key);
    *response->mutable_result() = std::move(hit->result);
  }
  return CountRpc(*state_->metrics, "Lookup", ToGrpc(hit.status()));
}

grpc::Status KilnService::Download(grpc::ServerContext* context, const v1::DownloadRequest* request,
                                   grpc::ServerWriter<v1::DownloadResponse>* writer) {
  auto run = [&]() -> grpc::Status {
    if (auto s = CheckDigest(request->digest(), "download digest"); !s.ok()) return ToGrpc(s);
    const Digest digest = DigestFromProto(request->digest());
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
      if (!writer->Write(chunk) || context->IsCancelled()) return ClientGone();
    } while (offset < digest.size_bytes);
    return grpc::Status::OK;
  };
  return CountRpc(*state_->metrics, "Download", run());
}

grpc::Status WorkerService::Lease(grpc::ServerContext* context, const v1::LeaseRequest* request,
                                  v1::LeaseResponse* response) {
  auto run = [&]() -> grpc::Status {
    if (request->worker_id().empty()) return Invalid("Lease needs a worker_id");
    if (auto s = state_->service->CheckWorkerVersion(request->compiler_version()); !s.ok()) return ToGrpc(s);
    JobStore& store = state_->service->store();
    // A long poll: wait up to wait_ms (at most 30 s) for a task.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp(request->wait_ms(), 0, 30000));
    for (;;) {
      state_->SawWorker(request->worker_id(), false);
      const uint64_t seen = store.change_counter();
      auto leased = state_->service->LeaseTask(request->worker_id());
      if (!leased.ok()) return ToGrpc(leased.status());
      if (leased->has_value()) {
        state_->SawWorker(request->worker_id(), true);
        *response->mutable_task() = std::move((*leased)->task);
        return grpc::Status::OK;
      }
      if (std::chrono::steady_clock::now() >= deadline || context->IsCancelled()) return grpc::Status::OK;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      store.WaitForChange(seen, std::min<int64_t>(left.count(), 1000));
    }
  };
  return CountRpc(*state_->metrics, "Lease", run());
}

grpc::Status WorkerService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) {
  const v1::TaskLease& lease = request->lease();
  state_->SawWorker(lease.worker_id(), true);
  auto verdict = state_->service->Heartbeat(
      TaskProgress{lease.action_key(), lease.attempt(), request->phase(), request->progress()});
  if (verdict.ok()) {
    response->set_keep_going(verdict->keep_going);
    response->set_reason(verdict->reason);
  }
  return CountRpc(*state_->metrics, "Heartbeat", ToGrpc(verdict.status()));
}

grpc::Status WorkerService::Complete(grpc::ServerContext*, const v1::CompleteRequest* request,
                                     v1::CompleteResponse* response) {
  const v1::TaskLease& lease = request->lease();
  state_->SawWorker(lease.worker_id(), false);
  TaskReport report;
  report.worker_id = lease.worker_id();
  report.outcome = TaskOutcome{lease.action_key(), lease.attempt(),      request->success(),
                               request->error(),   request->retryable(), request->result()};
  report.compile_ms = request->timings_ms().compile();
  report.validate_ms = request->timings_ms().validate();
  auto accepted = state_->service->CompleteTask(std::move(report));
  if (accepted.ok()) response->set_accepted(*accepted);
  return CountRpc(*state_->metrics, "Complete", ToGrpc(accepted.status()));
}

}  // namespace kiln::server
