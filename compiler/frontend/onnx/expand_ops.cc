// Opset 18-21 ops written as ops Kiln already has, so they need no kernels of their own:
//   Mish(x)                       =>  Mul(x, Tanh(Softplus(x)))
//   Gelu(x, approximate=tanh)     =>  kiln.GeluTanh(x)  (one op, so float16 rounds once, not
//                                     after each of the seven ops 0.5 x (1 + Tanh(...)) takes)
//   Gelu(x, approximate=none)     =>  Gelu(x)  (Kiln's erf form)
//   GroupNormalization-18(x, s, b) => Reshape(InstanceNormalization(Reshape(x, [0,G,-1]), s, b), Shape(x))
//   GroupNormalization-21(x, s, b) => the same with unit scale and zero bias per group, then
//                                     per channel: Reshape to [N,C,-1], * s[:,None] + b[:,None]
#include "expand_ops.h"

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"

namespace kiln::onnx_import {
namespace {

std::shared_ptr<const Tensor> Int64s(const std::vector<int64_t>& values) {
  auto t = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t->data_as<int64_t>()[i] = values[i];
  return t;
}

// `value` in x's element type (an f64 constant cast like x, as x's type is known only
// after import), repeated `count` times by an Expand when count >= 0: nothing of that size
// is made before the graph's shapes have been checked (num_groups comes from the model).
Value* Like(ExpandBuilder& b, Value* x, double value, int64_t count, const std::string& suffix) {
  auto t = std::make_shared<Tensor>(DType::kFloat64, std::vector<int64_t>{});
  t->data_as<double>()[0] = value;
  Value* scalar = b.emit("CastLike", suffix, {b.constant(t), x}, {}, "");
  if (count < 0) return scalar;
  return b.emit("Expand", suffix + "_expanded", {scalar, b.constant(Int64s({count}))}, {}, "");
}

absl::Status RequireInputs(const std::vector<Value*>& inputs, size_t n, const std::vector<std::string>& outputs) {
  if (inputs.size() != n || outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("needs ", n, " inputs and one output"));
  }
  for (const Value* in : inputs) {
    if (in == nullptr) return absl::InvalidArgumentError("an input is missing");
  }
  return absl::OkStatus();
}

absl::Status ExpandMish(ExpandBuilder& b, const std::map<std::string, AttrValue>&, const std::vector<Value*>& inputs,
                        const std::vector<std::string>& outputs) {
  KILN_RETURN_IF_ERROR(RequireInputs(inputs, 1, outputs));
  Value* x = inputs[0];
  Value* softplus = b.emit("Softplus", "softplus", {x}, {}, "");
  Value* tanh = b.emit("Tanh", "tanh", {softplus}, {}, "");
  b.emit("Mul", "", {x, tanh}, {}, outputs[0]);
  return absl::OkStatus();
}

std::string StringAttr(const std::map<std::string, AttrValue>& attrs, const char* name, const char* fallback) {
  auto it = attrs.find(name);
  const auto* s = it == attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
  return s == nullptr ? fallback : *s;
}

template <typename T>
T NumberAttr(const std::map<std::string, AttrValue>& attrs, const char* name, T fallback) {
  auto it = attrs.find(name);
  const auto* v = it == attrs.end() ? nullptr : std::get_if<T>(&it->second);
  return v == nullptr ? fallback : *v;
}

absl::Status ExpandGelu(ExpandBuilder& b, const std::map<std::string, AttrValue>& attrs,
                        const std::vector<Value*>& inputs, const std::vector<std::string>& outputs) {
  KILN_RETURN_IF_ERROR(RequireInputs(inputs, 1, outputs));
  Value* x = inputs[0];
  const std::string approximate = StringAttr(attrs, "approximate", "none");
  if (approximate == "none") {
    b.emit("Gelu", "", {x}, {}, outputs[0]);
    return absl::OkStatus();
  }
  if (approximate != "tanh") {
    return absl::InvalidArgumentError(absl::StrCat("approximate '", approximate, "' is neither 'none' nor 'tanh'"));
  }
  b.emit("kiln.GeluTanh", "", {x}, {}, outputs[0]);
  return absl::OkStatus();
}

absl::Status ExpandGroupNormalization(ExpandBuilder& b, const std::map<std::string, AttrValue>& attrs,
                                      const std::vector<Value*>& inputs, const std::vector<std::string>& outputs) {
  KILN_RETURN_IF_ERROR(RequireInputs(inputs, 3, outputs));
  const int64_t groups = NumberAttr<int64_t>(attrs, "num_groups", 0);
  if (groups <= 0) return absl::InvalidArgumentError("needs a positive num_groups");
  const double epsilon = NumberAttr<double>(attrs, "epsilon", 1e-5);
  Value* x = inputs[0];
  Value* grouped = b.emit("Reshape", "grouped", {x, b.constant(Int64s({0, groups, -1}))}, {}, "");
  Value* shape = b.emit("Shape", "shape", {x}, {}, "");
  if (b.opset < 21) {  // scale and bias per group
    Value* norm = b.emit("InstanceNormalization", "norm", {grouped, inputs[1], inputs[2]}, {{"epsilon", epsilon}}, "");
    b.emit("Reshape", "", {norm, shape}, {}, outputs[0]);
    return absl::OkStatus();
  }
  Value* norm =
      b.emit("InstanceNormalization", "norm",
             {grouped, Like(b, x, 1.0, groups, "ones"), Like(b, x, 0.0, groups, "zeros")}, {{"epsilon", epsilon}}, "");
  Value* batch_channels = b.emit("Shape", "batch_channels", {x}, {{"end", int64_t{2}}}, "");
  Value* per_channel_shape =
      b.emit("Concat", "per_channel_shape", {batch_channels, b.constant(Int64s({-1}))}, {{"axis", int64_t{0}}}, "");
  Value* per_channel = b.emit("Reshape", "per_channel", {norm, per_channel_shape}, {}, "");
  Value* axis1 = b.constant(Int64s({1}));
  Value* scale = b.emit("Unsqueeze", "scale", {inputs[1], axis1}, {}, "");
  Value* bias = b.emit("Unsqueeze", "bias", {inputs[2], axis1}, {}, "");
  Value* scaled = b.emit("Mul", "scaled", {per_channel, scale}, {}, "");
  Value* shifted = b.emit("Add", "shifted", {scaled, bias}, {}, "");
  b.emit("Reshape", "", {shifted, shape}, {}, outputs[0]);
  return absl::OkStatus();
}

struct ExpansionRow {
  const char* op;
  int since_opset;
  Expansion expand;
};

constexpr ExpansionRow kExpansions[] = {
    {"Mish", 18, ExpandMish},
    {"GroupNormalization", 18, ExpandGroupNormalization},
    {"Gelu", 20, ExpandGelu},
};

}  // namespace

Expansion FindExpansion(const std::string& op, int opset) {
  for (const ExpansionRow& row : kExpansions) {
    if (op == row.op && opset >= row.since_opset) return row.expand;
  }
  return nullptr;
}

}  // namespace kiln::onnx_import
