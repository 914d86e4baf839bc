// The kiln CLI's service subcommands: see service_commands.h.
#include "clients/cli/service_commands.h"
#include "kiln/common/file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/args.h"
#include "kiln/compiler/frontend.h"
#include "kiln/v1/kiln.grpc.pb.h"
#include "proto/client/blob_transfer.h"
#include "proto/client/status_names.h"

namespace kiln::cli {

const char kServiceUsage[] = R"(Service commands (a kilnd server; --server defaults to $KILN_SERVER or 127.0.0.1:50051):
  kiln submit MODEL.onnx --server ADDR [--target T] [--inputs DIR] [--atol A --rtol R] [--wait]
              [--output DIR] [--fail-on-accuracy] [--label KEY=VALUE]... [--pipeline P]
              [--precision int8 --calibration DIR [--calibration-method M] [--keep-float N,...]
               [--max-top1-drop POINTS]] [--prune-channels R] [--prune-weights R] [--prune-skip N,...]
              [--input-shape NAME=1x3x224x224]... [--seed N]
      uploads what FindMissing reports missing (the model; the input set made from
      DIR/*.pb, ONNX TensorProtos, one per model input, in file-name order), submits, and
      without --wait prints the job id alone on its last line. With --wait (or --output) it
      shows a live progress line, prints the accuracy report and the artifact digest, and
      with --output writes artifact.so, report.json and manifest.json into DIR.
      --precision int8 quantizes as `kiln compile --precision int8` does, with the samples
      of --calibration DIR uploaded as blobs; the report then judges the build by top-1
      agreement with the fp32 model on the validation inputs: it fails when more than
      --max-top1-drop points (default 1) of the classifier rows change their top-1 class.
      --prune-channels / --prune-weights / --prune-skip prune as `kiln compile` does; a
      pruned build is judged by top-1 agreement the same way.
      Exit status: 0 succeeded; 1 the job failed or was cancelled; 3 --fail-on-accuracy is
      set and the report's verdict is a failure.
  kiln job ID --server ADDR          the job's state (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
  kiln jobs --server ADDR [--state S] [--label KEY=VALUE]... [--limit N]
  kiln watch ID --server ADDR        follow a job to its end (exit status as for submit)
  kiln cancel ID --server ADDR
  kiln fetch DIGEST -o FILE --server ADDR   DIGEST is SHA256/SIZE as submit prints it
)";

namespace {

std::string ServerOf(const Args& args) {
  if (args.Has("--server")) return args.Get("--server");
  const char* env = std::getenv("KILN_SERVER");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1:50051";
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
    std::printf("  output %s [%s]: max_abs %s, mean_abs %s, max_rel %s, cosine %.6f, snr %.1f dB, outside %lld/%lld",
                o.name().c_str(), absl::StrJoin(o.shape(), ",").c_str(), FormatMetric(o.max_abs_error()).c_str(),
                FormatMetric(o.mean_abs_error()).c_str(), FormatMetric(o.max_rel_error()).c_str(),
                o.cosine_similarity(), o.snr_db(), static_cast<long long>(o.count_outside_tolerance()),
                static_cast<long long>(o.num_elements()));
    if (o.has_topk()) std::printf(", top1 %.3f, top5 %.3f", o.top1_agreement(), o.top5_agreement());
    std::printf("\n");
  }
  if (r.latency_median_ms() > 0) std::printf("  latency (host, 1 thread): %.3f ms median\n", r.latency_median_ms());
  std::printf("  artifact size: %lld bytes\n", static_cast<long long>(r.artifact_size_bytes()));
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
        if (tty) {
          std::fprintf(stderr, "\r\033[K%s", line.c_str());
        } else {
          std::fprintf(stderr, "%s\n", line.c_str());
        }
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

int Finish(v1::Kiln::Stub& stub, const v1::Job& job, const Args& args) {
  if (job.state() != v1::SUCCEEDED) {
    std::fprintf(stderr, "kiln: job %s %s: %s\n", job.id().c_str(), v1::JobState_Name(job.state()).c_str(),
                 job.error().c_str());
    std::printf("%s\n", v1::JobState_Name(job.state()).c_str());
    return 1;
  }
  PrintReport(job);
  if (args.Has("--output")) {
    const std::string dir = args.Get("--output");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Fail(absl::StrCat(dir, ": ", ec.message()));
    struct Item {
      const char* file;
      const v1::Digest* digest;
    };
    for (Item item : {Item{"artifact.so", &job.result().artifact()}, Item{"report.json", &job.result().report()},
                      Item{"manifest.json", &job.result().manifest()}}) {
      auto bytes = client::DownloadBlob(stub, *item.digest);
      if (!bytes.ok()) return Fail(absl::StrCat("downloading ", item.file, ": ", bytes.status().message()));
      if (auto s = WriteFile(dir + "/" + item.file, *bytes); !s.ok()) return Fail(std::string(s.message()));
    }
    std::printf("wrote %s/artifact.so, report.json, manifest.json\n", dir.c_str());
  }
  std::printf("artifact: %s\n", DigestText(job.result().artifact()).c_str());
  if (args.Has("--fail-on-accuracy") && !job.result().accuracy().passed()) {
    std::fprintf(stderr, "kiln: the accuracy report fails: %s\n", job.result().accuracy().verdict().c_str());
    return 3;
  }
  return 0;
}

// Calibration samples as InputSet blobs: one subdirectory per sample holding input_0.pb,
// input_1.pb, ... (the ONNX test-data layout; by position), or one *.pb per sample for a
// one-input model. The same layout `kiln compile --calibration` reads.
absl::StatusOr<std::vector<std::string>> CalibrationInputSets(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat("calibration directory '", dir, "' does not exist"));
  std::vector<fs::path> subdirs, files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory()) subdirs.push_back(entry.path());
    if (entry.is_regular_file() && entry.path().extension() == ".pb") files.push_back(entry.path());
  }
  std::sort(subdirs.begin(), subdirs.end());
  std::sort(files.begin(), files.end());
  std::vector<std::vector<fs::path>> samples;
  for (const fs::path& sub : subdirs) {
    std::vector<fs::path> tensors;
    for (int i = 0; fs::exists(sub / absl::StrCat("input_", i, ".pb")); ++i)
      tensors.push_back(sub / absl::StrCat("input_", i, ".pb"));
    if (tensors.empty())
      return absl::InvalidArgumentError(absl::StrCat("calibration sample '", sub.string(), "' has no input_0.pb"));
    samples.push_back(tensors);
  }
  if (subdirs.empty()) {
    for (const fs::path& file : files) samples.push_back({file});
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration directory '", dir, "' holds no samples (subdirectories with input_0.pb, or *.pb files)"));
  }
  std::vector<std::string> blobs;
  for (const auto& tensors : samples) {
    v1::InputSet set;
    for (const fs::path& path : tensors) {
      auto bytes = ReadFile(path.string());
      if (!bytes.ok()) return bytes.status();
      set.add_inputs()->set_tensor_proto(*bytes);
    }
    blobs.push_back(set.SerializeAsString());
  }
  return blobs;
}

int Submit(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2,
                 {{"--server", true},
                  {"--target", true},
                  {"--inputs", true},
                  {"--atol", true},
                  {"--rtol", true},
                  {"--wait", false},
                  {"--output", true},
                  {"--fail-on-accuracy", false},
                  {"--label", true},
                  {"--pipeline", true},
                  {"--input-shape", true},
                  {"--seed", true},
                  {"--precision", true},
                  {"--calibration", true},
                  {"--calibration-method", true},
                  {"--keep-float", true},
                  {"--max-top1-drop", true},
                  {"--prune-channels", true},
                  {"--prune-weights", true},
                  {"--prune-skip", true}},
                 args, error)) {
    return UsageError(error);
  }
  if (args.positional.size() != 1) return UsageError("submit takes one MODEL.onnx");
  v1::SubmitRequest request;
  request.set_target(args.Get("--target", "host"));
  request.mutable_options()->set_pipeline(args.Get("--pipeline"));
  for (const std::string& spec : args.All("--input-shape")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos)
      return UsageError(absl::StrCat("--input-shape '", spec, "': expected NAME=1x3x224x224"));
    auto* shape = request.mutable_options()->add_input_shapes();
    shape->set_name(spec.substr(0, eq));
    for (absl::string_view part : absl::StrSplit(spec.substr(eq + 1), absl::ByAnyChar("x,"))) {
      int64_t d;
      if (!absl::SimpleAtoi(part, &d) || d <= 0)
        return UsageError(absl::StrCat("--input-shape '", spec, "': '", part, "' is not a dimension"));
      shape->add_dims(d);
    }
  }
  for (const char* flag : {"--atol", "--rtol"}) {
    if (!args.Has(flag)) continue;
    double v;
    if (!absl::SimpleAtod(args.Get(flag), &v) || !(v >= 0) || !std::isfinite(v)) {
      return UsageError(absl::StrCat(flag, " must be a number >= 0, got '", args.Get(flag), "'"));
    }
    if (std::string(flag) == "--atol")
      request.mutable_validation()->set_atol(v);
    else
      request.mutable_validation()->set_rtol(v);
  }
  if (args.Has("--atol") != args.Has("--rtol")) return UsageError("--atol and --rtol go together");
  if (args.Has("--seed")) {
    uint64_t seed;
    if (!absl::SimpleAtoi(args.Get("--seed"), &seed)) return UsageError("--seed must be a non-negative integer");
    request.mutable_validation()->set_seed(seed);
  }
  for (const std::string& label : args.All("--label")) {
    size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0)
      return UsageError(absl::StrCat("--label '", label, "': expected KEY=VALUE"));
    (*request.mutable_labels())[label.substr(0, eq)] = label.substr(eq + 1);
  }

  // int8: the calibration samples go up as InputSet blobs, one per sample.
  const std::string precision = args.Get("--precision", "fp32");
  if (precision != "fp32" && precision != "int8")
    return UsageError("--precision '" + precision + "': expected fp32 or int8");
  for (const char* flag : {"--calibration", "--calibration-method", "--keep-float"}) {
    if (args.Has(flag) && precision != "int8") return UsageError(std::string(flag) + " goes with --precision int8");
  }
  for (const char* flag : {"--prune-channels", "--prune-weights"}) {
    if (!args.Has(flag)) continue;
    double v;
    if (!absl::SimpleAtod(args.Get(flag), &v) || !(v >= 0 && v < 1)) {
      return UsageError(absl::StrCat(flag, " '", args.Get(flag),
                                     "': expected a share (of each layer's channels or weights), a number in [0, 1)"));
    }
    if (std::string(flag) == "--prune-channels")
      request.mutable_options()->set_prune_channels(v);
    else
      request.mutable_options()->set_prune_weights(v);
  }
  const bool pruned = request.options().prune_channels() > 0 || request.options().prune_weights() > 0;
  if (args.Has("--prune-skip") && !pruned)
    return UsageError("--prune-skip goes with --prune-channels or --prune-weights");
  for (const std::string& list : args.All("--prune-skip")) {
    for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty()))
      request.mutable_options()->add_prune_skip(std::string(name));
  }
  if (args.Has("--max-top1-drop")) {
    if (precision != "int8" && !pruned) return UsageError("--max-top1-drop goes with --precision int8 or pruning");
    double v;
    if (!absl::SimpleAtod(args.Get("--max-top1-drop"), &v) || !(v >= 0 && v <= 100)) {
      return UsageError("--max-top1-drop must be percentage points in [0, 100], got '" + args.Get("--max-top1-drop") +
                        "'");
    }
    request.mutable_validation()->set_max_top1_drop(v);
  }
  std::vector<std::string> calibration;
  if (precision == "int8") {
    if (!args.Has("--calibration"))
      return UsageError("--precision int8 needs --calibration DIR (the samples activation ranges come from)");
    request.mutable_options()->set_precision("int8");
    request.mutable_options()->set_calibration_method(args.Get("--calibration-method", "minmax"));
    for (const std::string& list : args.All("--keep-float")) {
      for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty()))
        request.mutable_options()->add_keep_float(std::string(name));
    }
    auto samples = CalibrationInputSets(args.Get("--calibration"));
    if (!samples.ok()) return Fail(std::string(samples.status().message()));
    calibration = std::move(*samples);
  }

  auto model_bytes = ReadFile(args.positional[0]);
  if (!model_bytes.ok()) return Fail(std::string(model_bytes.status().message()));
  const std::string& model = *model_bytes;
  std::string input_set;
  if (args.Has("--inputs")) {
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(args.Get("--inputs"), ec)) {
      if (entry.path().extension() == ".pb") files.push_back(entry.path().string());
    }
    if (ec) return Fail(absl::StrCat("--inputs ", args.Get("--inputs"), ": ", ec.message()));
    if (files.empty())
      return Fail(absl::StrCat("--inputs ", args.Get("--inputs"), ": no .pb files (ONNX TensorProtos) there"));
    std::sort(files.begin(), files.end());
    v1::InputSet set;
    for (const std::string& file : files) {
      auto bytes = ReadFile(file);
      if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
      set.add_inputs()->set_tensor_proto(*bytes);
    }
    set.SerializeToString(&input_set);
  }

  auto channel = client::Connect(ServerOf(args));
  auto stub = v1::Kiln::NewStub(channel);
  // Upload only what the server lacks.
  {
    grpc::ClientContext context;
    v1::FindMissingRequest find;
    *find.add_digests() = client::DigestOfBytes(model);
    if (!input_set.empty()) *find.add_digests() = client::DigestOfBytes(input_set);
    for (const std::string& sample : calibration)
      *request.mutable_options()->add_calibration() = client::DigestOfBytes(sample);
    for (const auto& d : request.options().calibration()) *find.add_digests() = d;
    v1::FindMissingResponse missing;
    if (auto s = stub->FindMissing(&context, find, &missing); !s.ok()) return RpcFail("FindMissing", s);
    for (const auto& digest : missing.missing()) {
      const bool is_model = digest.sha256() == find.digests(0).sha256();
      const std::string* bytes = is_model ? &model : &input_set;
      const char* what = is_model ? "model" : "input set";
      for (size_t k = 0; k < calibration.size(); ++k) {
        if (digest.sha256() == request.options().calibration(static_cast<int>(k)).sha256()) {
          bytes = &calibration[k];
          what = "calibration sample";
        }
      }
      std::fprintf(stderr, "kiln: uploading %s (%lld bytes)\n", what, static_cast<long long>(digest.size_bytes()));
      auto uploaded = client::UploadBlob(*stub, *bytes, false);
      if (!uploaded.ok()) {
        return Fail(
            absl::StrCat("Upload: ", client::StatusCodeName(static_cast<grpc::StatusCode>(uploaded.status().code())),
                         ": ", uploaded.status().message()));
      }
    }
    if (missing.missing_size() == 0)
      std::fprintf(stderr, "kiln: the server already has the model%s\n", input_set.empty() ? "" : " and inputs");
    *request.mutable_model() = find.digests(0);
    if (!input_set.empty()) *request.mutable_validation()->mutable_input_set() = find.digests(1);
  }
  grpc::ClientContext context;
  v1::Job job;
  if (auto s = stub->Submit(&context, request, &job); !s.ok()) return RpcFail("Submit", s);
  std::fprintf(stderr, "kiln: job %s %s (target %s%s)\n", job.id().c_str(), v1::JobState_Name(job.state()).c_str(),
               ShortTarget(job.target()).c_str(), job.cache_hit() ? ", cache hit" : "");
  if (!args.Has("--wait") && !args.Has("--output")) {
    std::printf("%s\n", job.id().c_str());
    return 0;
  }
  v1::Job final_job = job;
  if (!IsTerminal(job.state()) && !Watch(*stub, job.id(), &final_job, &error)) return Fail(error);
  return Finish(*stub, final_job, args);
}

int ShowJob(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {{"--server", true}}, args, error)) return UsageError(error);
  if (args.positional.size() != 1) return UsageError("job takes one job ID");
  auto stub = v1::Kiln::NewStub(client::Connect(ServerOf(args)));
  grpc::ClientContext context;
  v1::GetJobRequest request;
  request.set_id(args.positional[0]);
  v1::Job job;
  if (auto s = stub->GetJob(&context, request, &job); !s.ok()) return RpcFail("GetJob", s);
  std::printf("%s\n", v1::JobState_Name(job.state()).c_str());
  std::printf(
      "  id:        %s\n  phase:     %s (%d%%)\n  target:    %s\n  model:     %s\n  attempts:  %d\n  cache hit: %s\n",
      job.id().c_str(), job.phase().c_str(), static_cast<int>(std::lround(job.progress() * 100)),
      ShortTarget(job.target()).c_str(), DigestText(job.model()).c_str(), job.attempts(),
      job.cache_hit() ? "yes" : "no");
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

int ListJobs(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {{"--server", true}, {"--state", true}, {"--label", true}, {"--limit", true}}, args,
                 error)) {
    return UsageError(error);
  }
  v1::ListJobsRequest request;
  if (args.Has("--state")) {
    v1::JobState state;
    if (!v1::JobState_Parse(args.Get("--state"), &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return UsageError(
          absl::StrCat("--state '", args.Get("--state"), "': one of QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED"));
    }
    request.set_state(state);
  }
  for (const std::string& label : args.All("--label")) {
    size_t eq = label.find('=');
    if (eq == std::string::npos) return UsageError(absl::StrCat("--label '", label, "': expected KEY=VALUE"));
    (*request.mutable_labels())[label.substr(0, eq)] = label.substr(eq + 1);
  }
  int limit = 100;
  if (args.Has("--limit") && !ParseInt(args.Get("--limit"), "--limit", 1, &limit, error)) return UsageError(error);
  auto stub = v1::Kiln::NewStub(client::Connect(ServerOf(args)));
  int shown = 0;
  do {
    request.set_page_size(std::min(limit - shown, 1000));
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
  } while (!request.page_token().empty() && shown < limit);
  return 0;
}

int WatchCommand(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {{"--server", true}, {"--fail-on-accuracy", false}}, args, error))
    return UsageError(error);
  if (args.positional.size() != 1) return UsageError("watch takes one job ID");
  auto stub = v1::Kiln::NewStub(client::Connect(ServerOf(args)));
  v1::Job job;
  if (!Watch(*stub, args.positional[0], &job, &error)) return Fail(error);
  return Finish(*stub, job, args);
}

int Cancel(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {{"--server", true}}, args, error)) return UsageError(error);
  if (args.positional.size() != 1) return UsageError("cancel takes one job ID");
  auto stub = v1::Kiln::NewStub(client::Connect(ServerOf(args)));
  grpc::ClientContext context;
  v1::CancelJobRequest request;
  request.set_id(args.positional[0]);
  v1::Job job;
  if (auto s = stub->CancelJob(&context, request, &job); !s.ok()) return RpcFail("CancelJob", s);
  std::printf("%s\n", v1::JobState_Name(job.state()).c_str());
  return 0;
}

int Fetch(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, 2, {{"--server", true}, {"-o", true}, {"--output", true}}, args, error))
    return UsageError(error);
  if (args.positional.size() != 1) return UsageError("fetch takes one DIGEST (SHA256/SIZE)");
  const std::string out = args.Get("-o", args.Get("--output"));
  if (out.empty()) return UsageError("fetch needs -o FILE");
  v1::Digest digest;
  if (!ParseDigest(args.positional[0], &digest)) {
    return UsageError(
        absl::StrCat("'", args.positional[0], "' is not a digest; expected SHA256/SIZE (64 hex digits, '/', bytes)"));
  }
  auto stub = v1::Kiln::NewStub(client::Connect(ServerOf(args)));
  auto bytes = client::DownloadBlob(*stub, digest);
  if (!bytes.ok()) {
    return Fail(absl::StrCat("Download: ", client::StatusCodeName(static_cast<grpc::StatusCode>(bytes.status().code())),
                             ": ", bytes.status().message()));
  }
  if (auto s = WriteFile(out, *bytes); !s.ok()) return Fail(std::string(s.message()));
  std::fprintf(stderr, "kiln: wrote %s (%lld bytes, digest verified)\n", out.c_str(),
               static_cast<long long>(bytes->size()));
  return 0;
}

}  // namespace

bool IsServiceCommand(const std::string& command) {
  return command == "submit" || command == "job" || command == "jobs" || command == "watch" || command == "cancel" ||
         command == "fetch";
}

int RunServiceCommand(const std::string& command, int argc, char** argv) {
  if (command == "submit") return Submit(argc, argv);
  if (command == "job") return ShowJob(argc, argv);
  if (command == "jobs") return ListJobs(argc, argv);
  if (command == "watch") return WatchCommand(argc, argv);
  if (command == "cancel") return Cancel(argc, argv);
  return Fetch(argc, argv);
}

}  // namespace kiln::cli
