// Internal to compiler/reference: the table each op family adds its evaluations to. The
// code here is written from the ONNX operator specification and includes nothing from
// compiler/kernels or compiler/ops: it is the second opinion.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"

namespace kiln::ref {

using Inputs = std::vector<const Tensor*>;  // nullptr for omitted optional inputs
using RefFn = std::function<absl::StatusOr<std::vector<Tensor>>(const Node&, const Inputs&)>;
using RefTable = std::map<std::string, RefFn, std::less<>>;

// One function per family file (ref_<family>.cc); reference.cc calls each once.
void AddElementwiseOps(RefTable& table);
void AddRnnOps(RefTable& table);
void AddDynamicOps(RefTable& table);

}  // namespace kiln::ref
