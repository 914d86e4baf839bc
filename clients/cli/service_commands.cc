// The kiln CLI's service subcommands (submit, job, jobs, watch, cancel, fetch): clients of
// a kilnd server over the kiln.v1 gRPC API. `kiln submit` builds its CompileSpec from the
// same flags and with the same code as `kiln compile`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "clients/cli/spec_flags.h"
#include "kiln/common/file.h"
#include "kiln/v1/kiln.grpc.pb.h"
#include "proto/client/blob_transfer.h"
#include "proto/client/status_names.h"

namespace kiln::cli {
namespace {

// --server, defaulting to $KILN_SERVER, then 127.0.0.1:50051.
std::string DefaultServer() {
  const char* env = std::getenv("KILN_SERVER");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1:50051";
}

void AddServerFlag(CLI::App& c, std::string& server) {
  server = DefaultServer();
  c.add_option("--server", server, "kilnd's address (default: $KILN_SERVER, else 127.0.0.1:50051)");
}

int RpcFail(const std::string& what, const grpc::Status& status) {
  std::string hint;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    hint = " (is kilnd running there? give its address with --server ADDR or KILN_SERVER)";
  }
  return Fail(
      absl::StrCat(what, ": ", client::StatusCodeName(status.error_code()), ": ", status.error_message(), hint));
}

// "triple/cpu" of a canonical target (its full feature list is long).
std::string ShortTarget(const std::string& canonical) {
  size_t first = canonical.find('/');
  size_t second = first == std::string::npos ? first : canonical.find('/', first + 1);
  return second == std::string::npos ? canonical : canonical.substr(0, second);
}

std::string DigestText(const v1::Digest& d) { return absl::StrCat(d.sha256(), "/", d.size_bytes()); }

bool ParseDigest(const std::string& text, v1::Digest* digest) {
  std::vector<std::string> parts = absl::StrSplit(text, '/');
  int64_t size = 0;
  if (parts.size() != 2 || parts[0].size() != 64 || !absl::SimpleAtoi(parts[1], &size) || size < 0) return false;
  digest->set_sha256(parts[0]);
  digest->set_size_bytes(size);
  return true;
}

bool IsTerminal(v1::JobState state) { return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED; }

std::string FormatMetric(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

void PrintReport(const v1::Job& job) {
  const v1::AccuracyReport& r = job.result().accuracy();
  std::printf("accuracy report: %s (atol %s, rtol %s, inputs %s)%s\n", r.passed() ? "PASS" : "FAIL",
              FormatMetric(r.atol()).c_str(), FormatMetric(r.rtol()).c_str(), r.input_source().c_str(),
              job.cache_hit() ? " [cache hit]" : "");
  if (!r.passed()) std::printf("  verdict: %s\n", r.verdict().c_str());
  for (const auto& o : r.outputs()) {
    std::printf("  output %s [%s]: max_abs %s, mean_abs %s, max_rel %s, cosine %.6f, snr %.1f dB, outside %.0f/%.0f",
                o.name().c_str(), absl::StrJoin(o.shape(), ",").c_str(), FormatMetric(o.max_abs_error()).c_str(),
                FormatMetric(o.mean_abs_error()).c_str(), FormatMetric(o.max_rel_error()).c_str(),
                o.cosine_similarity(), o.snr_db(), o.count_outside_tolerance(), o.num_elements());
    if (o.has_topk()) std::printf(", top1 %.3f, top5 %.3f", o.top1_agreement(), o.top5_agreement());
    std::printf("\n");
  }
  if (r.latency_median_ms() > 0) std::printf("  latency (host, 1 thread): %.3f ms median\n", r.latency_median_ms());
  std::printf("  artifact size: %.0f bytes\n", r.artifact_size_bytes());
}

// Follows a job to its end, drawing a progress line on stderr; returns the final job.
bool Watch(v1::Kiln::Stub& stub, const std::string& id, v1::Job* final_job, std::string* error) {
  const bool tty = isatty(2);
  std::string last_line;
  for (int reconnects = 0; reconnects < 30; ++reconnects) {
    grpc::ClientContext context;
    v1::WatchJobRequest request;
    request.set_id(id);
    auto reader = stub.WatchJob(&context, request);
    v1::JobEvent event;
    while (reader->Read(&event)) {
      const std::string line = absl::StrCat(id, " ", v1::JobState_Name(event.state()), " ", event.phase(), " ",
                                            static_cast<int>(std::lround(event.progress() * 100)), "%");
      if (line != last_line) {
        std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", line.c_str());
        last_line = line;
      }
      *final_job = event.job();
    }
    grpc::Status status = reader->Finish();
    if (status.ok() && IsTerminal(final_job->state())) {
      if (tty) std::fprintf(stderr, "\n");
      return true;
    }
    if (!status.ok() && status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      if (tty) std::fprintf(stderr, "\n");
      *error = absl::StrCat(client::StatusCodeName(status.error_code()), ": ", status.error_message());
      return false;
    }
    // The server restarted or the connection broke: the job is durable, so follow it again.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  *error = "lost the connection to the server while waiting";
  return false;
}

// How a finished job is shown: the report, the outputs written (--output), the exit status.
struct FinishFlags {
  std::string output;
  bool fail_on_accuracy = false;
};

int Finish(v1::Kiln::Stub& stub, const v1::Job& job, const FinishFlags& flags) {
  if (job.state() != v1::SUCCEEDED) {
    std::fprintf(stderr, "kiln: job %s %s: %s\n", job.id().c_str(), v1::JobState_Name(job.state()).c_str(),
                 job.error().c_str());
    std::printf("%s\n", v1::JobState_Name(job.state()).c_str());
    return 1;
  }
  PrintReport(job);
  if (!flags.output.empty()) {
    if (auto s = MakeDirectories(flags.output); !s.ok()) return Fail(std::string(s.message()));
    struct Item {
      const char* file;
      const v1::Digest* digest;
    };
    for (Item item : {Item{"artifact.so", &job.result().artifact()}, Item{"report.json", &job.result().report()},
                      Item{"manifest.json", &job.result().manifest()}}) {
      auto bytes = client::DownloadBlob(stub, *item.digest);
      if (!bytes.ok()) return Fail(absl::StrCat("downloading ", item.file, ": ", bytes.status().message()));
      if (auto s = WriteFile(flags.output + "/" + item.file, *bytes); !s.ok()) return Fail(std::string(s.message()));
    }
    std::printf("wrote %s/artifact.so, report.json, manifest.json\n", flags.output.c_str());
  }
  std::printf("artifact: %s\n", DigestText(job.result().artifact()).c_str());
  if (flags.fail_on_accuracy && !job.result().accuracy().passed()) {
    std::fprintf(stderr, "kiln: the accuracy report fails: %s\n", job.result().accuracy().verdict().c_str());
    return 3;
  }
  return 0;
}

struct SubmitFlags {
  std::string model, server;
  std::vector<std::string> labels;
  bool wait = false;
  FinishFlags finish;
  SpecFlags spec;
};

// Uploads what the server lacks of the spec's blobs (FindMissing first).
int UploadMissing(v1::Kiln::Stub& stub, const SpecWithData& data) {
  std::vector<std::pair<v1::Digest, std::string_view>> blobs = {{data.spec.model(), data.model}};
  std::map<std::string, const char*> what = {{data.spec.model().sha256(), "model"}};
  if (!data.input_set.empty()) {
    blobs.emplace_back(data.spec.accuracy().input_set(), data.input_set);
    what.emplace(data.spec.accuracy().input_set().sha256(), "input set");
  }
  for (int k = 0; k < data.spec.quantization().calibration_size(); ++k) {
    blobs.emplace_back(data.spec.quantization().calibration(k), data.calibration[static_cast<size_t>(k)]);
    what.emplace(data.spec.quantization().calibration(k).sha256(), "calibration sample");
  }
  grpc::ClientContext context;
  v1::FindMissingRequest find;
  for (const auto& [digest, bytes] : blobs) *find.add_digests() = digest;
  v1::FindMissingResponse missing;
  if (auto s = stub.FindMissing(&context, find, &missing); !s.ok()) return RpcFail("FindMissing", s);
  for (const v1::Digest& digest : missing.missing()) {
    auto blob =
        std::find_if(blobs.begin(), blobs.end(), [&](const auto& b) { return b.first.sha256() == digest.sha256(); });
    if (blob == blobs.end()) continue;
    std::fprintf(stderr, "kiln: uploading %s (%lld bytes)\n", what[digest.sha256()],
                 static_cast<long long>(digest.size_bytes()));
    auto uploaded = client::UploadBlob(stub, blob->second, false);
    if (!uploaded.ok()) {
      return Fail(
          absl::StrCat("Upload: ", client::StatusCodeName(static_cast<grpc::StatusCode>(uploaded.status().code())),
                       ": ", uploaded.status().message()));
    }
  }
  if (missing.missing_size() == 0)
    std::fprintf(stderr, "kiln: the server already has the model%s\n", data.input_set.empty() ? "" : " and inputs");
  return 0;
}

int Submit(const SubmitFlags& flags) {
  v1::SubmitRequest request;
  for (const std::string& label : flags.labels) {
    size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0)
      return UsageError("submit", absl::StrCat("--label '", label, "': expected KEY=VALUE"));
    (*request.mutable_labels())[label.substr(0, eq)] = label.substr(eq + 1);
  }
  auto data = BuildSpec(flags.model, flags.spec, SpecCommand::kSubmit);
  if (!data.ok()) {
    return absl::IsInvalidArgument(data.status()) ? UsageError("submit", std::string(data.status().message()))
                                                  : Fail(std::string(data.status().message()));
  }
  *request.mutable_spec() = data->spec;
  auto stub = v1::Kiln::NewStub(client::Connect(flags.server));
  if (int code = UploadMissing(*stub, *data); code != 0) return code;
  grpc::ClientContext context;
  v1::Job job;
  if (auto s = stub->Submit(&context, request, &job); !s.ok()) return RpcFail("Submit", s);
  std::fprintf(stderr, "kiln: job %s %s (target %s%s)\n", job.id().c_str(), v1::JobState_Name(job.state()).c_str(),
               ShortTarget(job.target()).c_str(), job.cache_hit() ? ", cache hit" : "");
  if (!flags.wait && flags.finish.output.empty()) {
    std::printf("%s\n", job.id().c_str());
    return 0;
  }
  v1::Job final_job = job;
  std::string error;
  if (!IsTerminal(job.state()) && !Watch(*stub, job.id(), &final_job, &error)) return Fail(error);
  return Finish(*stub, final_job, flags.finish);
}

void AddSubmit(CLI::App& app, std::vector<Command>& commands) {
  auto flags = std::make_shared<SubmitFlags>();
  CLI::App* c = AddModelSubcommand(app, "submit", flags->model);
  AddServerFlag(*c, flags->server);
  c->add_flag("--wait", flags->wait, "follow the job to its end");
  c->add_option("--output", flags->finish.output, "DIR: write artifact.so, report.json and manifest.json there");
  c->add_flag("--fail-on-accuracy", flags->finish.fail_on_accuracy, "exit 3 when the accuracy verdict fails");
  c->add_option("--label", flags->labels, "KEY=VALUE on the job (repeatable; `kiln jobs --label` filters by them)");
  AddSpecFlags(*c, flags->spec, SpecCommand::kSubmit);
  commands.push_back({c, [flags] { return Submit(*flags); }});
}

struct JobFlags {
  std::string id, server;
  FinishFlags finish;
};

// GetJob or CancelJob on flags.id: 0 and the job, else the failure printed and its exit status.
template <typename Request>
int CallOnJob(const JobFlags& flags, const char* name,
              grpc::Status (v1::Kiln::Stub::*method)(grpc::ClientContext*, const Request&, v1::Job*), v1::Job& job) {
  auto stub = v1::Kiln::NewStub(client::Connect(flags.server));
  grpc::ClientContext context;
  Request request;
  request.set_id(flags.id);
  if (auto s = ((*stub).*method)(&context, request, &job); !s.ok()) return RpcFail(name, s);
  return 0;
}

int ShowJob(const JobFlags& flags) {
  v1::Job job;
  if (int exit = CallOnJob(flags, "GetJob", &v1::Kiln::Stub::GetJob, job)) return exit;
  std::printf("%s\n", v1::JobState_Name(job.state()).c_str());
  std::printf(
      "  id:        %s\n  phase:     %s (%d%%)\n  target:    %s (%s)\n  model:     %s\n  attempts:  %d\n"
      "  cache hit: %s\n",
      job.id().c_str(), job.phase().c_str(), static_cast<int>(std::lround(job.progress() * 100)),
      job.target_name().c_str(), ShortTarget(job.target()).c_str(), DigestText(job.model()).c_str(), job.attempts(),
      job.cache_hit() ? "yes" : "no");
  std::printf("  action:    %s\n", job.action_key().c_str());
  if (!job.labels().empty()) {
    std::vector<std::string> labels;
    for (const auto& [k, v] : job.labels()) labels.push_back(absl::StrCat(k, "=", v));
    std::sort(labels.begin(), labels.end());
    std::printf("  labels:    %s\n", absl::StrJoin(labels, ",").c_str());
  }
  if (!job.error().empty()) std::printf("  error:     %s\n", job.error().c_str());
  if (job.state() == v1::SUCCEEDED) {
    std::printf("  artifact:  %s\n  report:    %s\n  manifest:  %s\n  accuracy:  %s\n",
                DigestText(job.result().artifact()).c_str(), DigestText(job.result().report()).c_str(),
                DigestText(job.result().manifest()).c_str(),
                job.result().accuracy().passed() ? "pass" : job.result().accuracy().verdict().c_str());
  }
  return 0;
}

int WatchJob(const JobFlags& flags) {
  auto stub = v1::Kiln::NewStub(client::Connect(flags.server));
  v1::Job job;
  std::string error;
  if (!Watch(*stub, flags.id, &job, &error)) return Fail(error);
  return Finish(*stub, job, flags.finish);
}

int Cancel(const JobFlags& flags) {
  v1::Job job;
  if (int exit = CallOnJob(flags, "CancelJob", &v1::Kiln::Stub::CancelJob, job)) return exit;
  std::printf("%s\n", v1::JobState_Name(job.state()).c_str());
  return 0;
}

struct ListFlags {
  std::string server, state;
  std::vector<std::string> labels;
  int limit = 100;
};

int ListJobs(const ListFlags& flags) {
  v1::ListJobsRequest request;
  if (!flags.state.empty()) {
    v1::JobState state;
    if (!v1::JobState_Parse(flags.state, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return UsageError(
          "jobs", absl::StrCat("--state '", flags.state, "': one of QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED"));
    }
    request.set_state(state);
  }
  for (const std::string& label : flags.labels) {
    size_t eq = label.find('=');
    if (eq == std::string::npos) return UsageError("jobs", absl::StrCat("--label '", label, "': expected KEY=VALUE"));
    (*request.mutable_labels())[label.substr(0, eq)] = label.substr(eq + 1);
  }
  auto stub = v1::Kiln::NewStub(client::Connect(flags.server));
  int shown = 0;
  do {
    request.set_page_size(std::min(flags.limit - shown, 1000));
    grpc::ClientContext context;
    v1::ListJobsResponse response;
    if (auto s = stub->ListJobs(&context, request, &response); !s.ok()) return RpcFail("ListJobs", s);
    if (shown == 0) std::printf("%-22s %-10s %-11s %-8s %s\n", "ID", "STATE", "PHASE", "CACHED", "TARGET");
    for (const auto& job : response.jobs()) {
      std::printf("%-22s %-10s %-11s %-8s %s\n", job.id().c_str(), v1::JobState_Name(job.state()).c_str(),
                  job.phase().c_str(), job.cache_hit() ? "yes" : "no", ShortTarget(job.target()).c_str());
      ++shown;
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty() && shown < flags.limit);
  return 0;
}

struct FetchFlags {
  std::string digest, out, server;
};

int Fetch(const FetchFlags& flags) {
  v1::Digest digest;
  if (!ParseDigest(flags.digest, &digest)) {
    return UsageError("fetch", absl::StrCat("'", flags.digest,
                                            "' is not a digest; expected SHA256/SIZE (64 hex digits, '/', bytes)"));
  }
  auto stub = v1::Kiln::NewStub(client::Connect(flags.server));
  auto bytes = client::DownloadBlob(*stub, digest);
  if (!bytes.ok()) {
    return Fail(absl::StrCat("Download: ", client::StatusCodeName(static_cast<grpc::StatusCode>(bytes.status().code())),
                             ": ", bytes.status().message()));
  }
  if (auto s = WriteFile(flags.out, *bytes); !s.ok()) return Fail(std::string(s.message()));
  std::fprintf(stderr, "kiln: wrote %s (%lld bytes, digest verified)\n", flags.out.c_str(),
               static_cast<long long>(bytes->size()));
  return 0;
}

// job, watch and cancel: a job ID and the server.
CLI::App* AddJobCommand(CLI::App& app, const char* name, const char* help, JobFlags& flags) {
  CLI::App* c = app.add_subcommand(name, help);
  c->add_option("id", flags.id, "the job ID (job-...)")->required();
  AddServerFlag(*c, flags.server);
  return c;
}

}  // namespace

void AddServiceCommands(CLI::App& app, std::vector<Command>& commands) {
  AddSubmit(app, commands);
  auto job = std::make_shared<JobFlags>();
  commands.push_back({AddJobCommand(app, "job",
                                    "Show a job: its state (QUEUED, RUNNING, SUCCEEDED, FAILED, "
                                    "CANCELLED) on the first line, then its details",
                                    *job),
                      [job] { return ShowJob(*job); }});
  auto watch = std::make_shared<JobFlags>();
  CLI::App* c = AddJobCommand(app, "watch", "Follow a job to its end (exit status as for submit)", *watch);
  c->add_flag("--fail-on-accuracy", watch->finish.fail_on_accuracy, "exit 3 when the accuracy verdict fails");
  commands.push_back({c, [watch] { return WatchJob(*watch); }});
  auto cancel = std::make_shared<JobFlags>();
  commands.push_back(
      {AddJobCommand(app, "cancel", "Cancel a job; prints its state", *cancel), [cancel] { return Cancel(*cancel); }});

  auto list = std::make_shared<ListFlags>();
  c = app.add_subcommand("jobs", "List jobs (filtered by state and labels)");
  AddServerFlag(*c, list->server);
  c->add_option("--state", list->state, "only jobs in this state (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)");
  c->add_option("--label", list->labels, "only jobs with this KEY=VALUE label (repeatable: all must match)");
  c->add_option("--limit", list->limit, "at most this many (default 100)")->check(CLI::PositiveNumber);
  commands.push_back({c, [list] { return ListJobs(*list); }});

  auto fetch = std::make_shared<FetchFlags>();
  c = app.add_subcommand("fetch", "Download a blob by digest (as submit prints it) and verify it");
  c->add_option("digest", fetch->digest, "SHA256/SIZE")->required();
  c->add_option("-o,--output", fetch->out, "FILE to write")->required();
  AddServerFlag(*c, fetch->server);
  commands.push_back({c, [fetch] { return Fetch(*fetch); }});
}

}  // namespace kiln::cli
