// One compile job, run in a child process of kiln-worker (`kiln-worker --run-job DIR`)
// under the job's CPU-time and memory limits: the only process that loads generated
// code. It reads DIR/task.pb, DIR/model.onnx and optionally DIR/inputs.pb; reports
// phases as lines "phase NAME PROGRESS" on stdout; writes DIR/artifact.so, report.json,
// manifest.json and result.pb, or DIR/error.txt.
#pragma once

#include <string>

namespace kiln::worker {

// Exit codes of the job process.
constexpr int kJobOk = 0;
constexpr int kJobFailed = 1;       // the model could not be compiled or validated (error.txt)
constexpr int kJobOutOfMemory = 3;  // an allocation failed under the memory limit

int RunJob(const std::string& dir);

}  // namespace kiln::worker
