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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kiln/common/file.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/v1/worker.grpc.pb.h"
#include "proto/client/blob_transfer.h"
#include "worker/job.h"

namespace kiln::worker {
namespace {

constexpr char kUsage[] = R"(kiln-worker: runs Kiln compile jobs for a kilnd server.

Usage: kiln-worker --server ADDR [--id NAME] [--work-dir DIR] [--once]

  --server ADDR    kilnd's gRPC address (host:port)
  --id NAME        worker name in leases and metrics (default: HOSTNAME-PID)
  --work-dir DIR   scratch space for jobs (default: $TMPDIR or /tmp)
  --once           exit after one job (for tests)
  --help           this text

Each job runs in a child process under the CPU-time and memory limits kilnd sets.
)";

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
          std::fprintf(stderr, "kiln-worker %s: %s\n", flags_.id.c_str(), status.error_message().c_str());
          return 1;
        }
        // kilnd restarting or not up yet: keep trying, quietly after the first report.
        if (idle_errors++ == 0) {
          std::fprintf(stderr, "kiln-worker %s: %s unreachable (%s); retrying\n", flags_.id.c_str(),
                       flags_.server.c_str(), status.error_message().c_str());
        }
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
  bool Heartbeat(const v1::Task& task, const std::string& phase, double progress, std::string* reason) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::HeartbeatRequest request;
    request.set_worker_id(flags_.id);
    request.set_action_key(task.action_key());
    request.set_attempt(task.attempt());
    request.set_phase(phase);
    request.set_progress(progress);
    v1::HeartbeatResponse response;
    grpc::Status status = worker_->Heartbeat(&context, request, &response);
    if (!status.ok()) return true;  // a missed heartbeat is not a stop order; the lease decides
    *reason = response.reason();
    return response.keep_going();
  }

  void Complete(const v1::Task& task, v1::CompleteRequest request) {
    request.set_worker_id(flags_.id);
    request.set_action_key(task.action_key());
    request.set_attempt(task.attempt());
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
    std::fprintf(stderr, "kiln-worker %s: job %s failed: %s\n", flags_.id.c_str(),
                 task.action_key().substr(0, 12).c_str(), error.c_str());
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

  void RunTaskIn(const v1::Task& task, const std::string& dir) {
    std::string reason;
    Heartbeat(task, "fetching", 0.0, &reason);
    const auto& request = task.request();
    auto model = client::DownloadBlob(*kiln_, request.model());
    if (!model.ok()) {
      Fail(task, absl::StrCat("fetching the model: ", model.status().message()), true);
      return;
    }
    if (auto s = WriteFile(dir + "/model.onnx", *model); !s.ok()) return Fail(task, std::string(s.message()), true);
    if (request.validation().has_input_set()) {
      auto inputs = client::DownloadBlob(*kiln_, request.validation().input_set());
      if (!inputs.ok()) return Fail(task, absl::StrCat("fetching the input set: ", inputs.status().message()), true);
      if (auto s = WriteFile(dir + "/inputs.pb", *inputs); !s.ok()) return Fail(task, std::string(s.message()), true);
    }
    for (int k = 0; k < request.options().calibration_size(); ++k) {
      auto sample = client::DownloadBlob(*kiln_, request.options().calibration(k));
      if (!sample.ok())
        return Fail(task, absl::StrCat("fetching calibration sample ", k, ": ", sample.status().message()), true);
      if (auto s = WriteFile(absl::StrCat(dir, "/calibration_", k, ".pb"), *sample); !s.ok())
        return Fail(task, std::string(s.message()), true);
    }
    if (auto s = WriteFile(dir + "/task.pb", task.SerializeAsString()); !s.ok())
      return Fail(task, std::string(s.message()), true);

    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Fail(task, "pipe failed", true);
    const std::string self = SelfPath();
    const pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) return Fail(task, absl::StrCat("fork failed: ", std::strerror(errno)), true);
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
    const int progress_fd = pipe_fds[0];

    std::string phase = "import", pending;
    double progress = 0;
    const auto start = std::chrono::steady_clock::now();
    const int64_t beat_ms = std::clamp<int64_t>(task.lease_timeout_ms() / 4, 200, 2000);
    auto last_beat = std::chrono::steady_clock::now() - std::chrono::hours(1);
    bool stopped = false, eof = false;
    int status = 0;
    for (;;) {
      pollfd fd{progress_fd, POLLIN, 0};
      if (!eof && poll(&fd, 1, 100) > 0) {
        char buffer[512];
        ssize_t n = read(progress_fd, buffer, sizeof(buffer));
        if (n <= 0) {
          eof = true;
        } else {
          pending.append(buffer, static_cast<size_t>(n));
          size_t newline;
          while ((newline = pending.find('\n')) != std::string::npos) {
            std::vector<std::string> parts = absl::StrSplit(pending.substr(0, newline), ' ');
            pending.erase(0, newline + 1);
            if (parts.size() == 3 && parts[0] == "phase") {
              phase = parts[1];
              absl::SimpleAtod(parts[2], &progress);
              last_beat = std::chrono::steady_clock::now() - std::chrono::hours(1);  // report at once
            }
          }
        }
      } else if (eof) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (std::chrono::steady_clock::now() - last_beat >= std::chrono::milliseconds(beat_ms)) {
        last_beat = std::chrono::steady_clock::now();
        if (!Heartbeat(task, phase, progress, &reason)) {
          kill(child, SIGKILL);
          stopped = true;
        }
      }
      if (g_stop && !stopped) {
        kill(child, SIGKILL);
        stopped = true;
        reason = "the worker is shutting down";
      }
      pid_t done = waitpid(child, &status, WNOHANG);
      if (done == child) break;
    }
    close(progress_fd);
    if (stopped) {
      std::fprintf(stderr, "kiln-worker %s: stopped job %s: %s\n", flags_.id.c_str(),
                   task.action_key().substr(0, 12).c_str(), reason.c_str());
      if (g_stop) Fail(task, absl::StrCat("worker ", flags_.id, " shut down mid-job"), true);
      return;
    }
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      if (task.cpu_limit_seconds() > 0 && (sig == SIGXCPU || sig == SIGKILL)) {
        return Fail(task,
                    absl::StrCat("the job exceeded its CPU-time limit of ", task.cpu_limit_seconds(),
                                 " s and was killed (kilnd --job-cpu-seconds)"),
                    false);
      }
      return Fail(task,
                  absl::StrCat("the compile process died with signal ", sig, " (", strsignal(sig), ") after ",
                               static_cast<int>(wall_s), " s; this is a Kiln bug, please report it with the model"),
                  false);
    }
    const int code = WEXITSTATUS(status);
    if (code == kJobOutOfMemory || (code == 127 && task.memory_limit_bytes() > 0)) {
      return Fail(task,
                  absl::StrCat("the job exceeded its memory limit of ", task.memory_limit_bytes() >> 20,
                               " MiB and was stopped (kilnd --job-memory)"),
                  false);
    }
    if (code != kJobOk) {
      auto error = ReadFile(dir + "/error.txt");
      return Fail(task, error.ok() ? *error : absl::StrCat("the compile process exited with status ", code), false);
    }

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
    std::fprintf(stderr, "kiln-worker %s: job %s done in %.1f s\n", flags_.id.c_str(),
                 task.action_key().substr(0, 12).c_str(), wall_s);
  }

  Flags flags_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Kiln::Stub> kiln_;
  std::unique_ptr<v1::Worker::Stub> worker_;
};

int Main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--run-job") == 0) return RunJob(argv[2]);
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kiln-worker: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--server") {
      flags.server = value();
    } else if (arg == "--id") {
      flags.id = value();
    } else if (arg == "--work-dir") {
      flags.work_dir = value();
    } else if (arg == "--once") {
      flags.once = true;
    } else {
      std::fprintf(stderr, "kiln-worker: unknown flag '%s'\nRun 'kiln-worker --help' for usage.\n", arg.c_str());
      return 2;
    }
  }
  if (flags.server.empty()) {
    std::fprintf(stderr, "kiln-worker: --server ADDR is required\nRun 'kiln-worker --help' for usage.\n");
    return 2;
  }
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
