// Metrics: see metrics.h.
#include "server/src/metrics.h"

namespace kiln::server {
namespace {

// The one table of metric names (the dashboard test reads them from /metrics).
const std::vector<std::string> kMetricNames = {
    "kiln_jobs_submitted_total",
    "kiln_jobs_finished_total",
    "kiln_phase_duration_seconds",
    "kiln_rpcs_total",
    "kiln_action_cache_lookups_total",
    "kiln_queue_depth",
    "kiln_tasks_running",
    "kiln_workers",
    "kiln_cache_bytes",
    "kiln_cache_blobs",
    "kiln_cache_budget_bytes",
    "kiln_cache_evictions_total",
    "kiln_cache_evicted_bytes_total",
    "kiln_cache_corrupt_blobs_total",
};

}  // namespace

const std::vector<std::string>& Metrics::Names() { return kMetricNames; }

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  submitted_ = &BuildCounter()
                    .Name("kiln_jobs_submitted_total")
                    .Help("Jobs accepted by Submit, by target and outcome (queued, joined, cache_hit)")
                    .Register(*registry_);
  finished_ = &BuildCounter()
                   .Name("kiln_jobs_finished_total")
                   .Help("Jobs that reached a final state, by state and target")
                   .Register(*registry_);
  phase_ = &BuildHistogram()
                .Name("kiln_phase_duration_seconds")
                .Help("Duration of job phases: queue_wait, compile, validate, total")
                .Register(*registry_);
  rpcs_ =
      &BuildCounter().Name("kiln_rpcs_total").Help("RPCs handled, by method and gRPC status code").Register(*registry_);
  cache_lookups_ = &BuildCounter()
                        .Name("kiln_action_cache_lookups_total")
                        .Help("Action-cache lookups by Submit and Lookup, by result (hit, miss)")
                        .Register(*registry_);
  queue_depth_ =
      &BuildGauge().Name("kiln_queue_depth").Help("Compile tasks waiting for a worker").Register(*registry_).Add({});
  tasks_running_ =
      &BuildGauge().Name("kiln_tasks_running").Help("Compile tasks leased to a worker").Register(*registry_).Add({});
  workers_ = &BuildGauge()
                  .Name("kiln_workers")
                  .Help("Workers seen in the last lease period, by state (busy, idle)")
                  .Register(*registry_);
  cache_bytes_ =
      &BuildGauge().Name("kiln_cache_bytes").Help("Bytes held by the blob cache").Register(*registry_).Add({});
  cache_blobs_ = &BuildGauge().Name("kiln_cache_blobs").Help("Blobs held by the cache").Register(*registry_).Add({});
  cache_budget_ = &BuildGauge()
                       .Name("kiln_cache_budget_bytes")
                       .Help("Cache size budget (0: unlimited)")
                       .Register(*registry_)
                       .Add({});
  cache_evictions_ =
      &BuildCounter().Name("kiln_cache_evictions_total").Help("Blobs evicted (LRU)").Register(*registry_).Add({});
  cache_evicted_bytes_ =
      &BuildCounter().Name("kiln_cache_evicted_bytes_total").Help("Bytes evicted (LRU)").Register(*registry_).Add({});
  cache_corrupt_ = &BuildCounter()
                        .Name("kiln_cache_corrupt_blobs_total")
                        .Help("Blobs found corrupt on read and dropped")
                        .Register(*registry_)
                        .Add({});
  for (const char* state : {"busy", "idle"}) workers_->Add({{"state", state}});
  for (const char* result : {"hit", "miss"}) cache_lookups_->Add({{"result", result}});
}

int Metrics::Serve(const std::string& listen) {
  exposer_ = std::make_unique<prometheus::Exposer>(listen);
  exposer_->RegisterCollectable(registry_);
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports[0];
}

void Metrics::JobSubmitted(const std::string& target, const std::string& outcome) {
  submitted_->Add({{"target", target}, {"outcome", outcome}}).Increment();
}

void Metrics::JobFinished(const std::string& target, const std::string& state, int count) {
  finished_->Add({{"target", target}, {"state", state}}).Increment(count);
}

void Metrics::Phase(const std::string& phase, double seconds) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                                   5,    10,   30,  60,   120, 300, 600};
  phase_->Add({{"phase", phase}}, kBuckets).Observe(seconds);
}

void Metrics::Rpc(const std::string& method, const std::string& code) {
  rpcs_->Add({{"method", method}, {"code", code}}).Increment();
}

void Metrics::CacheLookup(bool hit) { cache_lookups_->Add({{"result", hit ? "hit" : "miss"}}).Increment(); }

void Metrics::SetQueue(double queued, double running) {
  queue_depth_->Set(queued);
  tasks_running_->Set(running);
}

void Metrics::SetWorkers(double busy, double idle) {
  workers_->Add({{"state", "busy"}}).Set(busy);
  workers_->Add({{"state", "idle"}}).Set(idle);
}

void Metrics::SetCache(double bytes, double blobs, double budget, double evictions, double evicted_bytes,
                       double corrupt) {
  cache_bytes_->Set(bytes);
  cache_blobs_->Set(blobs);
  cache_budget_->Set(budget);
  // Counters mirror the cache's own monotonic counts.
  if (evictions > cache_evictions_->Value()) cache_evictions_->Increment(evictions - cache_evictions_->Value());
  if (evicted_bytes > cache_evicted_bytes_->Value())
    cache_evicted_bytes_->Increment(evicted_bytes - cache_evicted_bytes_->Value());
  if (corrupt > cache_corrupt_->Value()) cache_corrupt_->Increment(corrupt - cache_corrupt_->Value());
}

}  // namespace kiln::server
