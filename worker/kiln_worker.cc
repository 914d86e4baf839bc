// kiln-worker: leases compile tasks from kilnd over the worker protocol, runs each in a
// child process (`--run-job`) under the task's CPU-time and memory limits, heartbeats
// its progress, uploads the artifact, report and manifest, and completes the task. The
// same binary serves kilnd's local workers and workers on other hosts.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kiln/common/cli.h"
#include "kiln/common/file.h"
#include "kiln/common/log.h"
#include "kiln/common/time.h"
#include "kiln/compiler/version.h"
#include "kiln/v1/worker.grpc.pb.h"
#include "proto/client/blob_transfer.h"
#include "worker/job.h"

namespace kiln::worker {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

struct Flags {
  std::string server, id, work_dir;
  bool once = false;
};

std::string SelfPath() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

// How the job process ended, as the supervising loop saw it.
struct ChildEnd {
  bool stopped = false;  // killed on a stop order (cancel, lost lease, shutdown)
  std::string reason;
  int status = 0;  // waitpid's
  double wall_s = 0;
};

// Reads the job process's stdout: lines "phase NAME PROGRESS".
class PhaseReader {
 public:
  explicit PhaseReader(int fd) : fd_(fd) {}

  // Waits up to timeout_ms for output; true when a new phase line arrived.
  bool Poll(int timeout_ms) {
    if (eof_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return false;
    }
    pollfd fd{fd_, POLLIN, 0};
    if (poll(&fd, 1, timeout_ms) <= 0) return false;
    char buffer[512];
    const ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    pending_.append(buffer, static_cast<size_t>(n));
    bool changed = false;
    size_t newline;
    while ((newline = pending_.find('\n')) != std::string::npos) {
      std::vector<std::string> parts = absl::StrSplit(pending_.substr(0, newline), ' ');
      pending_.erase(0, newline + 1);
      if (parts.size() == 3 && parts[0] == "phase") {
        phase_ = parts[1];
        absl::SimpleAtod(parts[2], &progress_);
        changed = true;
      }
    }
    return changed;
  }

  const std::string& phase() const { return phase_; }
  double progress() const { return progress_; }

 private:
  int fd_;
  bool eof_ = false;
  std::string pending_;
  std::string phase_ = "import";
  double progress_ = 0;
};

class Worker {
 public:
  explicit Worker(const Flags& flags)
      : flags_(flags),
        channel_(client::Connect(flags.server)),
        kiln_(v1::Kiln::NewStub(channel_)),
        worker_(v1::Worker::NewStub(channel_)) {}

  int Loop() {
    int idle_errors = 0;
    while (!g_stop) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
      v1::LeaseRequest request;
      request.set_worker_id(flags_.id);
      request.set_wait_ms(2000);
      request.set_compiler_version(CompilerVersion());
      v1::LeaseResponse response;
      grpc::Status status = worker_->Lease(&context, request, &response);
      if (!status.ok()) {
        if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
          log::Error(Fields(), "{}", status.error_message());
          return 1;
        }
        // kilnd restarting or not up yet: keep trying, quietly after the first report.
        if (idle_errors++ == 0)
          log::Warning(Fields(), "{} unreachable ({}); retrying", flags_.server, status.error_message());
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      idle_errors = 0;
      if (!response.has_task()) continue;
      RunTask(response.task());
      if (flags_.once) return 0;
    }
    return 0;
  }

 private:
  // Log fields: this worker, and the task's action key (a task serves every job that asked
  // for the same action).
  log::Fields Fields(const v1::Task* task = nullptr) const {
    log::Fields fields;
    fields.worker = flags_.id;
    if (task != nullptr) fields.job_id = task->action_key().substr(0, 12);
    return fields;
  }

  // This worker's lease on the task, which Heartbeat and Complete speak for.
  v1::TaskLease LeaseOf(const v1::Task& task) const {
    v1::TaskLease lease;
    lease.set_worker_id(flags_.id);
    lease.set_action_key(task.action_key());
    lease.set_attempt(task.attempt());
    return lease;
  }

  bool Heartbeat(const v1::Task& task, const std::string& phase, double progress, std::string* reason) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::HeartbeatRequest request;
    *request.mutable_lease() = LeaseOf(task);
    request.set_phase(phase);
    request.set_progress(progress);
    v1::HeartbeatResponse response;
    grpc::Status status = worker_->Heartbeat(&context, request, &response);
    if (!status.ok()) return true;  // a missed heartbeat is not a stop order; the lease decides
    *reason = response.reason();
    return response.keep_going();
  }

  void Complete(const v1::Task& task, v1::CompleteRequest request) {
    *request.mutable_lease() = LeaseOf(task);
    for (int attempt = 0; attempt < 5; ++attempt) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::CompleteResponse response;
      grpc::Status status = worker_->Complete(&context, request, &response);
      if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE) return;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }

  void Fail(const v1::Task& task, const std::string& error, bool retryable) {
    log::Error(Fields(&task), "job failed: {}", error);
    v1::CompleteRequest request;
    request.set_success(false);
    request.set_error(error);
    request.set_retryable(retryable);
    Complete(task, request);
  }

  void RunTask(const v1::Task& task) {
    std::string base =
        flags_.work_dir.empty() ? (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") : flags_.work_dir;
    std::string templ = base + "/kiln-job-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      Fail(task,
           absl::StrCat("worker ", flags_.id, " cannot create a job directory in ", base, ": ", std::strerror(errno)),
           true);
      return;
    }
    const std::string dir = templ;
    RunTaskIn(task, dir);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // The blobs the spec names, and the task itself, into the job directory.
  absl::Status FetchInputs(const v1::Task& task, const std::string& dir) {
    const v1::CompileSpec& spec = task.spec();
    std::vector<std::pair<std::string, const v1::Digest*>> blobs = {{"model.onnx", &spec.model()}};
    if (spec.accuracy().has_input_set()) blobs.emplace_back("inputs.pb", &spec.accuracy().input_set());
    for (int k = 0; k < spec.quantization().calibration_size(); ++k)
      blobs.emplace_back(absl::StrCat("calibration_", k, ".pb"), &spec.quantization().calibration(k));
    for (const auto& [file, digest] : blobs) {
      auto bytes = client::DownloadBlob(*kiln_, *digest);
      if (!bytes.ok())
        return absl::Status(bytes.status().code(), absl::StrCat("fetching ", file, ": ", bytes.status().message()));
      if (auto s = WriteFile(dir + "/" + file, *bytes); !s.ok()) return s;
    }
    return WriteFile(dir + "/task.pb", task.SerializeAsString());
  }

  // Forks `kiln-worker --run-job DIR` under the task's limits; its stdout comes back on
  // *progress_fd.
  pid_t StartJobProcess(const v1::Task& task, const std::string& dir, int* progress_fd) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
    const std::string self = SelfPath();
    const pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) {
      close(pipe_fds[0]);
      close(pipe_fds[1]);
      return -1;
    }
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      if (task.cpu_limit_seconds() > 0) {
        rlimit cpu{static_cast<rlim_t>(task.cpu_limit_seconds()), static_cast<rlim_t>(task.cpu_limit_seconds() + 2)};
        setrlimit(RLIMIT_CPU, &cpu);
      }
      if (task.memory_limit_bytes() > 0) {
        rlimit memory{static_cast<rlim_t>(task.memory_limit_bytes()), static_cast<rlim_t>(task.memory_limit_bytes())};
        setrlimit(RLIMIT_AS, &memory);
      }
      dup2(pipe_fds[1], 1);
      execl(self.c_str(), self.c_str(), "--run-job", dir.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(pipe_fds[1]);
    *progress_fd = pipe_fds[0];
    return child;
  }

  // Relays the job process's "phase NAME PROGRESS" lines as heartbeats until it exits,
  // killing it when kilnd says stop or the worker shuts down.
  ChildEnd Supervise(const v1::Task& task, pid_t child, int progress_fd) {
    ChildEnd end;
    PhaseReader reader(progress_fd);
    Stopwatch wall;
    const int64_t beat_ms = std::clamp<int64_t>(task.lease_timeout_ms() / 4, 200, 2000);
    auto last_beat = std::chrono::steady_clock::now() - std::chrono::hours(1);
    for (;;) {
      // A new phase is reported at once; otherwise every beat_ms.
      if (reader.Poll(100)) last_beat = std::chrono::steady_clock::now() - std::chrono::hours(1);
      if (std::chrono::steady_clock::now() - last_beat >= std::chrono::milliseconds(beat_ms)) {
        last_beat = std::chrono::steady_clock::now();
        if (!Heartbeat(task, reader.phase(), reader.progress(), &end.reason)) {
          kill(child, SIGKILL);
          end.stopped = true;
        }
      }
      if (g_stop && !end.stopped) {
        kill(child, SIGKILL);
        end.stopped = true;
        end.reason = "the worker is shutting down";
      }
      if (waitpid(child, &end.status, WNOHANG) == child) break;
    }
    close(progress_fd);
    end.wall_s = wall.ElapsedMs() / 1000;
    return end;
  }

  // Why the job process failed, for the job's error (empty: it succeeded); *retryable when
  // the failure is this worker's rather than the model's.
  std::string FailureOf(const v1::Task& task, const ChildEnd& end, const std::string& dir) {
    if (WIFSIGNALED(end.status)) {
      const int sig = WTERMSIG(end.status);
      if (task.cpu_limit_seconds() > 0 && (sig == SIGXCPU || sig == SIGKILL)) {
        return absl::StrCat("the job exceeded its CPU-time limit of ", task.cpu_limit_seconds(),
                            " s and was killed (kilnd --job-cpu-seconds)");
      }
      return absl::StrCat("the compile process died with signal ", sig, " (", strsignal(sig), ") after ",
                          static_cast<int>(end.wall_s), " s; this is a Kiln bug, please report it with the model");
    }
    const int code = WEXITSTATUS(end.status);
    if (code == kJobOutOfMemory || (code == 127 && task.memory_limit_bytes() > 0)) {
      return absl::StrCat("the job exceeded its memory limit of ", task.memory_limit_bytes() >> 20,
                          " MiB and was stopped (kilnd --job-memory)");
    }
    if (code != kJobOk) {
      auto error = ReadFile(dir + "/error.txt");
      return error.ok() ? *error : absl::StrCat("the compile process exited with status ", code);
    }
    return "";
  }

  // Uploads the job's outputs and completes the task with them.
  void Store(const v1::Task& task, const std::string& dir, double wall_s) {
    std::string reason;
    Heartbeat(task, "storing", 0.95, &reason);
    auto result_bytes = ReadFile(dir + "/result.pb");
    v1::CompleteRequest complete;
    if (!result_bytes.ok() || !complete.ParseFromString(*result_bytes))
      return Fail(task, "the job left no result", false);
    complete.set_success(true);
    struct Output {
      const char* file;
      v1::Digest* digest;
    };
    for (Output out : {Output{"artifact.so", complete.mutable_result()->mutable_artifact()},
                       Output{"report.json", complete.mutable_result()->mutable_report()},
                       Output{"manifest.json", complete.mutable_result()->mutable_manifest()}}) {
      auto bytes = ReadFile(dir + "/" + out.file);
      if (!bytes.ok()) return Fail(task, std::string(bytes.status().message()), false);
      auto digest = client::UploadBlob(*kiln_, *bytes);
      if (!digest.ok()) return Fail(task, absl::StrCat("uploading ", out.file, ": ", digest.status().message()), true);
      *out.digest = *digest;
    }
    Complete(task, complete);
    log::Info(Fields(&task), "job done in {:.1f} s", wall_s);
  }

  void RunTaskIn(const v1::Task& task, const std::string& dir) {
    std::string reason;
    Heartbeat(task, "fetching", 0.0, &reason);
    if (auto s = FetchInputs(task, dir); !s.ok()) return Fail(task, std::string(s.message()), true);
    int progress_fd = -1;
    const pid_t child = StartJobProcess(task, dir, &progress_fd);
    if (child < 0) return Fail(task, absl::StrCat("cannot start the job process: ", std::strerror(errno)), true);
    const ChildEnd end = Supervise(task, child, progress_fd);
    if (end.stopped) {
      log::Info(Fields(&task), "stopped job {}: {}", task.action_key().substr(0, 12), end.reason);
      if (g_stop) Fail(task, absl::StrCat("worker ", flags_.id, " shut down mid-job"), true);
      return;
    }
    if (const std::string failure = FailureOf(task, end, dir); !failure.empty()) return Fail(task, failure, false);
    Store(task, dir, end.wall_s);
  }

  Flags flags_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Kiln::Stub> kiln_;
  std::unique_ptr<v1::Worker::Stub> worker_;
};

int Main(int argc, char** argv) {
  CLI::App app(
      "kiln-worker: runs Kiln compile jobs for a kilnd server. Each job runs in a child process under the "
      "CPU-time and memory limits kilnd sets.",
      "kiln-worker");
  Flags flags;
  std::string log_format = "text", log_level = "info";
  std::string run_job;
  app.add_option("--server", flags.server, "kilnd's gRPC address (host:port); required");
  app.add_option("--id", flags.id, "worker name in leases, logs and metrics (default: HOSTNAME-PID)");
  app.add_option("--work-dir", flags.work_dir, "scratch space for jobs (default: $TMPDIR or /tmp)");
  app.add_flag("--once", flags.once, "exit after one job (for tests)");
  app.add_option("--log-format", log_format, "text or json (JSON lines for log collectors)")->capture_default_str();
  app.add_option("--log-level", log_level, "debug, info, warning or error")->capture_default_str();
  // The worker re-executes itself with this to run one job (Supervise); not for people.
  app.add_option("--run-job", run_job, "run the job in DIR and exit")->group("");
  if (auto exit = ParseCommandLine(app, argc, argv)) return *exit;
  if (!run_job.empty()) return RunJob(run_job);
  if (flags.server.empty()) return ReportUsageError("kiln-worker", "--server is required");
  log::Options log_options;
  log_options.program = "kiln-worker";
  auto format = log::ParseFormat(log_format);
  auto level = log::ParseLevel(log_level);
  for (const absl::Status& s : {format.status(), level.status()}) {
    if (!s.ok()) return ReportUsageError("kiln-worker", std::string(s.message()));
  }
  log_options.format = *format;
  log_options.level = *level;
  log::Init(log_options);
  if (flags.id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    flags.id = absl::StrCat(host, "-", getpid());
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  Worker worker(flags);
  return worker.Loop();
}

}  // namespace
}  // namespace kiln::worker

int main(int argc, char** argv) { return kiln::worker::Main(argc, argv); }
