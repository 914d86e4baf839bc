// kilnd: the Kiln service. One command starts the embedded default: SQLite job store and
// cache index under --data-dir, the blob cache beside them, and N local kiln-worker
// processes that it restarts when they die.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kiln/common/cli.h"
#include "kiln/common/log.h"
#include "kiln/common/units.h"
#include "kiln/compiler/version.h"
#include "server/queue/sqlite_job_store.h"
#include "server/service/compile_service.h"
#include "server/src/metrics.h"
#include "server/src/service.h"

namespace kiln::server {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir = "kiln-data";
  int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string metrics_listen = "127.0.0.1:9464";
  int64_t cache_budget_bytes = int64_t{20} << 30;
  int64_t max_upload_bytes = int64_t{2} << 30;
  int64_t job_cpu_ms = 1800 * 1000;
  int64_t job_memory_bytes = int64_t{16} << 30;
  int64_t lease_timeout_ms = 30000;
  int max_attempts = 3;
  std::string worker_binary;
  log::Options log_options;
};

// A flag's text through one of common/'s parsers; a parse error becomes CLI11's usage error
// ("--cache-budget: '20Q' is not a size ...").
template <typename T, typename Parse>
std::function<void(const std::string&)> Into(T* out, const char* flag, Parse parse) {
  return [out, flag, parse](const std::string& text) {
    auto value = parse(text);
    if (!value.ok()) throw CLI::ValidationError(flag, std::string(value.status().message()));
    *out = *value;
  };
}

absl::StatusOr<int64_t> ParseSeconds(const std::string& text) { return ParseDurationMs(text, 1000); }
absl::StatusOr<int64_t> ParseMillis(const std::string& text) { return ParseDurationMs(text, 1); }

void AddServiceFlags(CLI::App& app, Flags& flags) {
  app.add_option("--listen", flags.listen, "gRPC address; port 0 picks a free one, written to DATA_DIR/kilnd.addr")
      ->capture_default_str()
      ->type_name("ADDR");
  app.add_option("--data-dir", flags.data_dir, "job store (jobs.db), cache index and blobs (cache/)")
      ->capture_default_str()
      ->type_name("DIR");
  app.add_option("--workers", flags.workers,
                 "local kiln-worker processes to run (default: number of CPUs; 0: none, remote workers connect "
                 "with kiln-worker --server ADDR)")
      ->check(CLI::NonNegativeNumber)
      ->type_name("N");
  app.add_option("--metrics-listen", flags.metrics_listen,
                 "Prometheus /metrics address; port 0 picks one, written to DATA_DIR/metrics.addr; \"off\" disables")
      ->capture_default_str()
      ->type_name("ADDR");
  app.add_option("--worker-binary", flags.worker_binary, "kiln-worker to start (default: the one beside kilnd)")
      ->type_name("PATH");
}

// Sizes take binary units (512M, 20GiB); durations a unit (90s, 30m, 2h) or the flag's own.
void AddLimitFlags(CLI::App& app, Flags& flags) {
  app.add_option_function<std::string>("--cache-budget",
                                       Into(&flags.cache_budget_bytes, "--cache-budget", ParseByteSize),
                                       "blob cache size budget, LRU-evicted (0: unlimited)")
      ->type_name("SIZE")
      ->default_str("20GiB");
  app.add_option_function<std::string>("--max-upload", Into(&flags.max_upload_bytes, "--max-upload", ParseByteSize),
                                       "largest blob a client may upload")
      ->type_name("SIZE")
      ->default_str("2GiB");
  app.add_option_function<std::string>("--job-cpu-seconds", Into(&flags.job_cpu_ms, "--job-cpu-seconds", ParseSeconds),
                                       "CPU-time limit per compile job: seconds, or a duration (30m) (0: none)")
      ->type_name("DURATION")
      ->default_str("1800");
  app.add_option_function<std::string>("--job-memory", Into(&flags.job_memory_bytes, "--job-memory", ParseByteSize),
                                       "address-space limit per compile job (0: none)")
      ->type_name("SIZE")
      ->default_str("16GiB");
  app.add_option_function<std::string>("--lease-timeout-ms",
                                       Into(&flags.lease_timeout_ms, "--lease-timeout-ms", ParseMillis),
                                       "a worker silent this long loses its job: milliseconds, or a duration (30s); "
                                       "at least 500 ms")
      ->type_name("DURATION")
      ->default_str("30000");
  app.add_option("--max-attempts", flags.max_attempts, "leases a job may lose to dead workers before it fails")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str()
      ->type_name("N");
}

void AddLogFlags(CLI::App& app, Flags& flags) {
  app.add_option_function<std::string>("--log-format",
                                       Into(&flags.log_options.format, "--log-format", log::ParseFormat),
                                       "text, or json (JSON lines for log collectors)")
      ->type_name("FORMAT")
      ->default_str("text");
  app.add_option_function<std::string>("--log-level", Into(&flags.log_options.level, "--log-level", log::ParseLevel),
                                       "debug, info, warning or error")
      ->type_name("LEVEL")
      ->default_str("info");
}

// In the build tree kilnd and kiln-worker live in sibling directories; installed, side by side.
std::string DefaultWorkerBinary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto beside = self.parent_path() / "kiln-worker";
  if (std::filesystem::exists(beside)) return beside.string();
  return (self.parent_path().parent_path() / "worker" / "kiln-worker").string();
}

// Parses argv into *flags: nullopt to go on, else the exit status to return now.
std::optional<int> ParseFlags(int argc, char** argv, Flags* flags) {
  CLI::App app(
      "kilnd: the Kiln compile service (gRPC API kiln.v1.Kiln, worker protocol kiln.v1.Worker). "
      "Stop it with SIGTERM or SIGINT.",
      "kilnd");
  app.get_formatter()->column_width(32);
  AddServiceFlags(app, *flags);
  AddLimitFlags(app, *flags);
  AddLogFlags(app, *flags);
  if (auto exit = ParseCommandLine(app, argc, argv)) return exit;
  if (flags->lease_timeout_ms < 500) {
    return ReportUsageError("kilnd",
                            absl::StrCat("--lease-timeout-ms must be at least 500 ms, got ", flags->lease_timeout_ms));
  }
  if (flags->worker_binary.empty()) flags->worker_binary = DefaultWorkerBinary();
  flags->log_options.program = "kilnd";
  return std::nullopt;
}

// Starts and restarts the local workers. They die with kilnd (PR_SET_PDEATHSIG), so a
// kill -9 of kilnd leaves no orphan holding a lease.
class WorkerSupervisor {
 public:
  WorkerSupervisor(std::string binary, std::string server, int count)
      : binary_(std::move(binary)), server_(std::move(server)), count_(count) {}

  void Tick() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = pids_.find(pid);
      if (it == pids_.end()) continue;
      log::Fields fields;
      fields.worker = it->second;
      log::Warning(fields, "worker (pid {}) exited ({} {}); restarting it", pid,
                   WIFSIGNALED(status) ? "signal" : "status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      pids_.erase(it);
    }
    for (int k = 0; k < count_; ++k) {
      const std::string id = absl::StrCat("local-", getpid(), "-", k);
      bool running = false;
      for (const auto& [p, name] : pids_) running |= name == id;
      if (!running) Start(id);
    }
  }

  void StopAll() {
    for (const auto& [pid, name] : pids_) kill(pid, SIGTERM);
    for (int i = 0; i < 30 && !pids_.empty(); ++i) {
      int status;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) pids_.erase(pid);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (const auto& [pid, name] : pids_) kill(pid, SIGKILL);
  }

 private:
  void Start(const std::string& id) {
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      execl(binary_.c_str(), binary_.c_str(), "--server", server_.c_str(), "--id", id.c_str(),
            static_cast<char*>(nullptr));
      // In the forked child: plain stderr, not the logger (its state belongs to the parent).
      std::fprintf(stderr, "kilnd: cannot start %s: %s\n", binary_.c_str(), std::strerror(errno));
      _exit(127);
    }
    if (pid > 0) pids_[pid] = id;
  }

  std::string binary_, server_;
  int count_;
  std::map<pid_t, std::string> pids_;
};

// One kilnd per data directory: the job store and cache index assume a single writer. The
// lock is held (fd left open) until the process exits.
absl::Status LockDataDir(const std::string& data_dir) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--data-dir ", data_dir, ": ", ec.message()));
  const std::string lock_path = data_dir + "/kilnd.lock";
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", data_dir, " is in use by another kilnd (lock ", lock_path, " held)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobStore>> OpenStore(const Flags& flags) {
  JobStoreOptions options;
  options.lease_timeout_ms = flags.lease_timeout_ms;
  options.max_attempts = flags.max_attempts;
  options.cpu_limit_seconds = (flags.job_cpu_ms + 999) / 1000;
  options.memory_limit_bytes = flags.job_memory_bytes;
  auto store = SqliteJobStore::Open(flags.data_dir + "/jobs.db", options);
  if (!store.ok()) return store.status();
  // Local workers of a previous kilnd died with it (PDEATHSIG): requeue their tasks now
  // instead of waiting out the lease, and without charging the job an attempt.
  auto recovered = (*store)->RecoverLeases("local-");
  if (!recovered.ok()) return recovered.status();
  if (*recovered > 0)
    log::Info({}, "requeued {} job(s) that the previous kilnd's local workers were running", *recovered);
  return std::unique_ptr<JobStore>(std::move(*store));
}

// The host part of "host:port" with the port actually bound.
std::string BoundAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

absl::Status ServeMetrics(const Flags& flags, Metrics& metrics) {
  if (flags.metrics_listen == "off") return absl::OkStatus();
  try {
    const std::string address = BoundAddress(flags.metrics_listen, metrics.Serve(flags.metrics_listen));
    std::ofstream(flags.data_dir + "/metrics.addr") << address << "\n";
    log::Info({}, "metrics on http://{}/metrics", address);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", flags.metrics_listen, ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpc(const Flags& flags, KilnService& kiln, WorkerService& worker,
                                                        std::string* address) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&kiln);
  builder.RegisterService(&worker);
  builder.SetMaxReceiveMessageSize(8 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", flags.listen, " (in use, or not host:port?)"));
  }
  *address = BoundAddress(flags.listen, port);
  std::ofstream(flags.data_dir + "/kilnd.addr") << *address << "\n";
  return server;
}

// Local workers reach a wildcard listener on loopback.
std::string WorkerTarget(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) return "127.0.0.1" + address.substr(address.rfind(':'));
  return address;
}

// Supervises the local workers and does the periodic upkeep until SIGTERM or SIGINT.
void RunUntilSignalled(const Flags& flags, const std::string& address, ServerState& state) {
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  WorkerSupervisor supervisor(flags.worker_binary, WorkerTarget(address), flags.workers);
  while (!g_stop) {
    supervisor.Tick();
    state.Housekeeping();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  log::Info({}, "stopping");
  supervisor.StopAll();
}

int Fatal(const absl::Status& status) {
  log::Error({}, "{}", std::string(status.message()));
  return 1;
}

int Main(int argc, char** argv) {
  Flags flags;
  if (auto exit = ParseFlags(argc, argv, &flags)) return *exit;
  log::Init(flags.log_options);
  if (auto s = LockDataDir(flags.data_dir); !s.ok()) return Fatal(s);
  auto cache = cache::Cache::Open({flags.data_dir + "/cache", flags.cache_budget_bytes});
  if (!cache.ok()) return Fatal(cache.status());
  auto store = OpenStore(flags);
  if (!store.ok()) return Fatal(store.status());
  JobStore* store_ptr = store->get();
  // When the store cannot answer, keep the blob: eviction can wait, a lost input cannot.
  (*cache)->SetNeededCallback([store_ptr](const std::string& sha) { return store_ptr->IsNeeded(sha).value_or(true); });
  Metrics metrics;
  if (auto s = ServeMetrics(flags, metrics); !s.ok()) return Fatal(s);

  CompileService service({CompilerVersion()}, cache->get(), store_ptr, &metrics);
  ServerState state;
  state.max_upload_bytes = flags.max_upload_bytes;
  state.service = &service;
  state.cache = cache->get();
  state.metrics = &metrics;
  KilnService kiln_service(&state);
  WorkerService worker_service(&state);
  std::string address;
  auto server = StartGrpc(flags, kiln_service, worker_service, &address);
  if (!server.ok()) return Fatal(server.status());
  log::Info({}, "serving kiln.v1 on {} (data {}, compiler {}, {} local workers)", address, flags.data_dir,
            CompilerVersion(), flags.workers);
  RunUntilSignalled(flags, address, state);
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace
}  // namespace kiln::server

int main(int argc, char** argv) { return kiln::server::Main(argc, argv); }
