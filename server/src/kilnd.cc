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
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kiln/compiler/version.h"
#include "server/queue/sqlite_job_store.h"
#include "server/service/compile_service.h"
#include "server/src/metrics.h"
#include "server/src/service.h"

namespace kiln::server {
namespace {

constexpr char kUsage[] = R"(kilnd: the Kiln compile service (gRPC API kiln.v1.Kiln, worker protocol kiln.v1.Worker).

Usage: kilnd [flags]

  --listen ADDR            gRPC address (default 127.0.0.1:50051; port 0 picks a free one,
                           written to DATA_DIR/kilnd.addr)
  --data-dir DIR           job store (jobs.db), cache index and blobs (cache/) (default ./kiln-data)
  --workers N              local kiln-worker processes to run (default: number of CPUs; 0: none,
                           remote workers connect with kiln-worker --server ADDR)
  --metrics-listen ADDR    Prometheus /metrics address (default 127.0.0.1:9464; port 0 picks
                           one, written to DATA_DIR/metrics.addr; "off" disables)
  --cache-budget SIZE      blob cache size budget, LRU-evicted (default 20G; 0: unlimited)
  --max-upload SIZE        largest blob a client may upload (default 2G)
  --job-cpu-seconds N      CPU-time limit per compile job (default 1800; 0: none)
  --job-memory SIZE        address-space limit per compile job (default 16G; 0: none)
  --lease-timeout-ms N     a worker silent this long loses its job (default 30000)
  --max-attempts N         leases a job may lose to dead workers before it fails (default 3)
  --worker-binary PATH     kiln-worker to start (default: the one beside kilnd)
  --help                   this text

SIZE takes a K, M or G suffix (powers of 1024). Stop with SIGTERM or SIGINT.
)";

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr, "kilnd: %s\nRun 'kilnd --help' for usage.\n", message.c_str());
  std::exit(2);
}

int64_t ParseSize(const std::string& flag, const std::string& text) {
  int64_t scale = 1;
  std::string digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k': scale = int64_t{1} << 10; break;
      case 'M':
      case 'm': scale = int64_t{1} << 20; break;
      case 'G':
      case 'g': scale = int64_t{1} << 30; break;
      default: scale = 1;
    }
    if (scale != 1) digits.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value < 0)
    UsageError(absl::StrCat(flag, ": '", text, "' is not a size (e.g. 512M, 2G)"));
  return value * scale;
}

int64_t ParseCount(const std::string& flag, const std::string& text, int64_t min_value) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min_value) {
    UsageError(absl::StrCat(flag, " must be an integer >= ", min_value, ", got '", text, "'"));
  }
  return value;
}

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir = "kiln-data";
  int64_t workers = -1;
  std::string metrics_listen = "127.0.0.1:9464";
  int64_t cache_budget = int64_t{20} << 30;
  int64_t max_upload = int64_t{2} << 30;
  int64_t job_cpu_seconds = 1800;
  int64_t job_memory = int64_t{16} << 30;
  int64_t lease_timeout_ms = 30000;
  int64_t max_attempts = 3;
  std::string worker_binary;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg.rfind("--", 0) == 0) {
      if (i + 1 >= argc) UsageError(absl::StrCat(arg, " needs a value"));
      value = argv[++i];
    }
    if (arg == "--listen")
      flags.listen = value;
    else if (arg == "--data-dir")
      flags.data_dir = value;
    else if (arg == "--workers")
      flags.workers = ParseCount(arg, value, 0);
    else if (arg == "--metrics-listen")
      flags.metrics_listen = value;
    else if (arg == "--cache-budget")
      flags.cache_budget = ParseSize(arg, value);
    else if (arg == "--max-upload")
      flags.max_upload = ParseSize(arg, value);
    else if (arg == "--job-cpu-seconds")
      flags.job_cpu_seconds = ParseCount(arg, value, 0);
    else if (arg == "--job-memory")
      flags.job_memory = ParseSize(arg, value);
    else if (arg == "--lease-timeout-ms")
      flags.lease_timeout_ms = ParseCount(arg, value, 500);
    else if (arg == "--max-attempts")
      flags.max_attempts = ParseCount(arg, value, 1);
    else if (arg == "--worker-binary")
      flags.worker_binary = value;
    else
      UsageError(absl::StrCat("unknown flag '", arg, "'"));
  }
  if (flags.workers < 0) flags.workers = std::max(1u, std::thread::hardware_concurrency());
  if (flags.worker_binary.empty()) {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    flags.worker_binary = (self.parent_path() / "kiln-worker").string();
    // In the build tree kilnd and kiln-worker live in sibling directories.
    if (!std::filesystem::exists(flags.worker_binary)) {
      flags.worker_binary = (self.parent_path().parent_path() / "worker" / "kiln-worker").string();
    }
  }
  return flags;
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
      std::fprintf(stderr, "kilnd: worker %s (pid %d) exited (%s %d); restarting it\n", it->second.c_str(), pid,
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
      std::fprintf(stderr, "kilnd: cannot start %s: %s\n", binary_.c_str(), std::strerror(errno));
      _exit(127);
    }
    if (pid > 0) pids_[pid] = id;
  }

  std::string binary_, server_;
  int count_;
  std::map<pid_t, std::string> pids_;
};

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  std::error_code ec;
  std::filesystem::create_directories(flags.data_dir, ec);
  if (ec) UsageError(absl::StrCat("--data-dir ", flags.data_dir, ": ", ec.message()));

  // One kilnd per data directory: the job store and cache index assume a single writer.
  const std::string lock_path = flags.data_dir + "/kilnd.lock";
  int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    std::fprintf(stderr, "kilnd: data directory %s is in use by another kilnd (lock %s held)\n", flags.data_dir.c_str(),
                 lock_path.c_str());
    return 1;
  }

  auto cache = cache::Cache::Open({flags.data_dir + "/cache", flags.cache_budget});
  if (!cache.ok()) {
    std::fprintf(stderr, "kilnd: %s\n", std::string(cache.status().message()).c_str());
    return 1;
  }
  JobStoreOptions store_options;
  store_options.lease_timeout_ms = flags.lease_timeout_ms;
  store_options.max_attempts = static_cast<int32_t>(flags.max_attempts);
  store_options.cpu_limit_seconds = flags.job_cpu_seconds;
  store_options.memory_limit_bytes = flags.job_memory;
  auto store = SqliteJobStore::Open(flags.data_dir + "/jobs.db", store_options);
  if (!store.ok()) {
    std::fprintf(stderr, "kilnd: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  JobStore* store_ptr = store->get();
  // Local workers of a previous kilnd died with it (PDEATHSIG): requeue their tasks now
  // instead of waiting out the lease, and without charging the job an attempt.
  auto recovered = store_ptr->RecoverLeases("local-");
  if (!recovered.ok()) {
    std::fprintf(stderr, "kilnd: %s\n", std::string(recovered.status().message()).c_str());
    return 1;
  }
  if (*recovered > 0) {
    std::fprintf(stderr, "kilnd: requeued %d job(s) that the previous kilnd's local workers were running\n",
                 *recovered);
  }
  // When the store cannot answer, keep the blob: eviction can wait, a lost input cannot.
  (*cache)->SetNeededCallback([store_ptr](const std::string& sha) { return store_ptr->IsNeeded(sha).value_or(true); });

  Metrics metrics;
  if (flags.metrics_listen != "off") {
    try {
      int port = metrics.Serve(flags.metrics_listen);
      const std::string host = flags.metrics_listen.substr(0, flags.metrics_listen.rfind(':'));
      std::ofstream(flags.data_dir + "/metrics.addr") << host << ":" << port << "\n";
      std::fprintf(stderr, "kilnd: metrics on http://%s:%d/metrics\n", host.c_str(), port);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kilnd: cannot serve metrics on %s: %s\n", flags.metrics_listen.c_str(), e.what());
      return 1;
    }
  }

  CompileService service({CompilerVersion()}, cache->get(), store_ptr, &metrics);
  ServerState state;
  state.max_upload_bytes = flags.max_upload;
  state.service = &service;
  state.cache = cache->get();
  state.metrics = &metrics;
  KilnService kiln_service(&state);
  WorkerService worker_service(&state);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&kiln_service);
  builder.RegisterService(&worker_service);
  builder.SetMaxReceiveMessageSize(8 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "kilnd: cannot listen on %s (in use, or not host:port?)\n", flags.listen.c_str());
    return 1;
  }
  const std::string host = flags.listen.substr(0, flags.listen.rfind(':'));
  const std::string address = absl::StrCat(host, ":", port);
  std::ofstream(flags.data_dir + "/kilnd.addr") << address << "\n";
  std::fprintf(stderr, "kilnd: serving kiln.v1 on %s (data %s, compiler %s, %lld local workers)\n", address.c_str(),
               flags.data_dir.c_str(), CompilerVersion().c_str(), static_cast<long long>(flags.workers));

  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  const std::string worker_server =
      (host == "0.0.0.0" || host == "[::]" || host.empty()) ? absl::StrCat("127.0.0.1:", port) : address;
  WorkerSupervisor supervisor(flags.worker_binary, worker_server, static_cast<int>(flags.workers));
  while (!g_stop) {
    supervisor.Tick();
    state.Housekeeping();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  std::fprintf(stderr, "kilnd: stopping\n");
  supervisor.StopAll();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace
}  // namespace kiln::server

int main(int argc, char** argv) { return kiln::server::Main(argc, argv); }
