// Ops of opsets 18 to 21 that the importer writes as ops Kiln already has (private to the
// frontend): Mish, GroupNormalization, and Gelu's tanh approximation.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kiln/compiler/ir.h"

namespace kiln::onnx_import {

// How an expansion adds IR: `emit` adds one node of one output (named `output`, or a fresh
// name when empty) and returns it; `constant` adds a graph constant.
struct ExpandBuilder {
  std::string name;  // the expanded node's: the last node keeps it, the others extend it
  int opset = 0;
  std::function<Value*(const std::string& op, const std::string& suffix, std::vector<Value*> inputs,
                       std::map<std::string, AttrValue> attrs, const std::string& output)>
      emit;
  std::function<Value*(std::shared_ptr<const Tensor>)> constant;
};

// Writes the node (attributes, inputs with omitted ones null, output names) as other ops;
// an error is the reason alone (the importer adds the node's label).
using Expansion = absl::Status (*)(ExpandBuilder& builder, const std::map<std::string, AttrValue>& attrs,
                                   const std::vector<Value*>& inputs, const std::vector<std::string>& outputs);

// The expansion of `op` at `opset`, or nullptr when the op is imported as it is.
Expansion FindExpansion(const std::string& op, int opset);

}  // namespace kiln::onnx_import
