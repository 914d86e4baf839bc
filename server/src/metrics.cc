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

// Families and unlabelled series, registered by name and help text.
prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& registry, const char* name,
                                                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Counter& Counter(prometheus::Registry& registry, const char* name, const char* help) {
  return CounterFamily(registry, name, help).Add({});
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& registry, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Gauge& Gauge(prometheus::Registry& registry, const char* name, const char* help) {
  return GaugeFamily(registry, name, help).Add({});
}

}  // namespace

const std::vector<std::string>& Metrics::Names() { return kMetricNames; }

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  submitted_ = &CounterFamily(r, "kiln_jobs_submitted_total",
                              "Jobs accepted by Submit, by target and outcome (queued, joined, cache_hit)");
  finished_ = &CounterFamily(r, "kiln_jobs_finished_total", "Jobs that reached a final state, by state and target");
  phase_ = &prometheus::BuildHistogram()
                .Name("kiln_phase_duration_seconds")
                .Help("Duration of job phases: queue_wait, compile, validate, total")
                .Register(r);
  rpcs_ = &CounterFamily(r, "kiln_rpcs_total", "RPCs handled, by method and gRPC status code");
  cache_lookups_ = &CounterFamily(r, "kiln_action_cache_lookups_total",
                                  "Action-cache lookups by Submit and Lookup, by result (hit, miss)");
  queue_depth_ = &Gauge(r, "kiln_queue_depth", "Compile tasks waiting for a worker");
  tasks_running_ = &Gauge(r, "kiln_tasks_running", "Compile tasks leased to a worker");
  workers_ = &GaugeFamily(r, "kiln_workers", "Workers seen in the last lease period, by state (busy, idle)");
  cache_bytes_ = &Gauge(r, "kiln_cache_bytes", "Bytes held by the blob cache");
  cache_blobs_ = &Gauge(r, "kiln_cache_blobs", "Blobs held by the cache");
  cache_budget_ = &Gauge(r, "kiln_cache_budget_bytes", "Cache size budget (0: unlimited)");
  cache_evictions_ = &Counter(r, "kiln_cache_evictions_total", "Blobs evicted (LRU)");
  cache_evicted_bytes_ = &Counter(r, "kiln_cache_evicted_bytes_total", "Bytes evicted (LRU)");
  cache_corrupt_ = &Counter(r, "kiln_cache_corrupt_blobs_total", "Blobs found corrupt on read and dropped");
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
  for (auto [counter, value] : {std::pair{cache_evictions_, evictions}, std::pair{cache_evicted_bytes_, evicted_bytes},
                                std::pair{cache_corrupt_, corrupt}}) {
    if (value > counter->Value()) counter->Increment(value - counter->Value());
  }
}

}  // namespace kiln::server
