// kilnd's gRPC services: the public kiln.v1.Kiln API and the worker protocol, thin
// adapters over the service layer (server/service): they convert wire messages, call it,
// and convert its absl::Status back. Byte streams (Upload, Download) and long polls
// (WatchJob, Lease) live here, since they are about the transport. Every handler counts
// itself in kiln_rpcs_total.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/cache/cache.h"
#include "kiln/v1/kiln.grpc.pb.h"
#include "kiln/v1/worker.grpc.pb.h"
#include "server/service/compile_service.h"
#include "server/src/metrics.h"

namespace kiln::server {

// What the services share; owned by main.
struct ServerState {
  int64_t max_upload_bytes = int64_t{1} << 30;
  CompileService* service = nullptr;
  cache::Cache* cache = nullptr;
  Metrics* metrics = nullptr;

  // Workers by id: when last seen and whether they hold a lease.
  struct WorkerSeen {
    int64_t last_seen_ms = 0;
    bool busy = false;
  };
  std::mutex workers_mutex;
  std::map<std::string, WorkerSeen> workers;
  void SawWorker(const std::string& id, bool busy);

  // Periodic upkeep: expire leases, refresh gauges, evict to budget.
  void Housekeeping();

 private:
  // Forgets workers silent for a lease period and sets the worker gauges.
  void CountWorkers();
};

class KilnService final : public v1::Kiln::Service {
 public:
  explicit KilnService(ServerState* state) : state_(state) {}
  grpc::Status Upload(grpc::ServerContext* context, grpc::ServerReader<v1::UploadRequest>* reader,
                      v1::UploadResponse* response) override;
  grpc::Status FindMissing(grpc::ServerContext* context, const v1::FindMissingRequest* request,
                           v1::FindMissingResponse* response) override;
  grpc::Status Submit(grpc::ServerContext* context, const v1::SubmitRequest* request, v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request, v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext* context, const v1::LookupRequest* request,
                      v1::LookupResponse* response) override;
  grpc::Status Download(grpc::ServerContext* context, const v1::DownloadRequest* request,
                        grpc::ServerWriter<v1::DownloadResponse>* writer) override;

 private:
  ServerState* state_;
};

class WorkerService final : public v1::Worker::Service {
 public:
  explicit WorkerService(ServerState* state) : state_(state) {}
  grpc::Status Lease(grpc::ServerContext* context, const v1::LeaseRequest* request,
                     v1::LeaseResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Complete(grpc::ServerContext* context, const v1::CompleteRequest* request,
                        v1::CompleteResponse* response) override;

 private:
  ServerState* state_;
};

}  // namespace kiln::server
