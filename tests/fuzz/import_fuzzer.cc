// libFuzzer target for the ONNX importer: any bytes must give a graph or a Status, never
// a crash, hang or sanitizer report. Built with -DKILN_BUILD_FUZZERS=ON and clang-14.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::ImportOptions options;
  options.model_label = "fuzz.onnx";
  auto graph = kiln::ImportOnnxModel(std::string_view(reinterpret_cast<const char*>(data), size), options);
  if (graph.ok()) (void)kiln::PrintGraph(**graph);
  return 0;
}
