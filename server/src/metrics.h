// kilnd's Prometheus metrics. Every name lives in kMetricNames (metrics.cc); the Grafana
// dashboard in deploy/grafana is checked against the names kilnd really exports.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kiln::server {

class Metrics {
 public:
  Metrics();
  // Serves /metrics on `listen` (host:port); port 0 picks one. Returns the bound port.
  int Serve(const std::string& listen);

  void JobSubmitted(const std::string& target, const std::string& outcome);  // queued|joined|cache_hit
  void JobFinished(const std::string& target, const std::string& state, int count = 1);
  void Phase(const std::string& phase, double seconds);  // queue_wait|compile|validate|total
  void Rpc(const std::string& method, const std::string& code);
  void CacheLookup(bool hit);
  void SetQueue(double queued, double running);
  void SetWorkers(double busy, double idle);
  void SetCache(double bytes, double blobs, double budget, double evictions, double evicted_bytes, double corrupt);

  static const std::vector<std::string>& Names();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>* submitted_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Family<prometheus::Histogram>* phase_;
  prometheus::Family<prometheus::Counter>* rpcs_;
  prometheus::Family<prometheus::Counter>* cache_lookups_;
  prometheus::Gauge* queue_depth_;
  prometheus::Gauge* tasks_running_;
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Gauge* cache_bytes_;
  prometheus::Gauge* cache_blobs_;
  prometheus::Gauge* cache_budget_;
  prometheus::Counter* cache_evictions_;
  prometheus::Counter* cache_evicted_bytes_;
  prometheus::Counter* cache_corrupt_;
};

}  // namespace kiln::server
