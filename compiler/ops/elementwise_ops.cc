// Elementwise ops: unary math and activations, broadcasting binary ops, comparisons,
// logic, Where, Cast/CastLike and Clip.
#include <limits>

#include "kiln/kernels/elementwise.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

static_assert(kFusedMaxInputs == KILN_FUSED_MAX_INPUTS && kFusedMaxOps == KILN_FUSED_MAX_OPS,
              "the fuse pass's limits (ops.h) must be the kernel's");

struct UnaryDef {
  const char* name;
  int code;
  const char* alpha_attr;
  double alpha_default;
  const char* beta_attr;
  double beta_default;
  bool float_only;
};

constexpr UnaryDef kUnaryOps[] = {
    {"Abs", KILN_UNARY_ABS, nullptr, 0, nullptr, 0, false},
    {"Neg", KILN_UNARY_NEG, nullptr, 0, nullptr, 0, false},
    {"Exp", KILN_UNARY_EXP, nullptr, 0, nullptr, 0, true},
    {"Log", KILN_UNARY_LOG, nullptr, 0, nullptr, 0, true},
    {"Sqrt", KILN_UNARY_SQRT, nullptr, 0, nullptr, 0, true},
    {"Reciprocal", KILN_UNARY_RECIPROCAL, nullptr, 0, nullptr, 0, true},
    {"Sin", KILN_UNARY_SIN, nullptr, 0, nullptr, 0, true},
    {"Cos", KILN_UNARY_COS, nullptr, 0, nullptr, 0, true},
    {"Tan", KILN_UNARY_TAN, nullptr, 0, nullptr, 0, true},
    {"Asin", KILN_UNARY_ASIN, nullptr, 0, nullptr, 0, true},
    {"Acos", KILN_UNARY_ACOS, nullptr, 0, nullptr, 0, true},
    {"Atan", KILN_UNARY_ATAN, nullptr, 0, nullptr, 0, true},
    {"Sinh", KILN_UNARY_SINH, nullptr, 0, nullptr, 0, true},
    {"Cosh", KILN_UNARY_COSH, nullptr, 0, nullptr, 0, true},
    {"Asinh", KILN_UNARY_ASINH, nullptr, 0, nullptr, 0, true},
    {"Acosh", KILN_UNARY_ACOSH, nullptr, 0, nullptr, 0, true},
    {"Atanh", KILN_UNARY_ATANH, nullptr, 0, nullptr, 0, true},
    {"Tanh", KILN_UNARY_TANH, nullptr, 0, nullptr, 0, true},
    {"Sigmoid", KILN_UNARY_SIGMOID, nullptr, 0, nullptr, 0, true},
    {"Relu", KILN_UNARY_RELU, nullptr, 0, nullptr, 0, false},
    {"Floor", KILN_UNARY_FLOOR, nullptr, 0, nullptr, 0, true},
    {"Ceil", KILN_UNARY_CEIL, nullptr, 0, nullptr, 0, true},
    {"Round", KILN_UNARY_ROUND, nullptr, 0, nullptr, 0, true},
    {"Sign", KILN_UNARY_SIGN, nullptr, 0, nullptr, 0, false},
    {"Erf", KILN_UNARY_ERF, nullptr, 0, nullptr, 0, true},
    {"Softplus", KILN_UNARY_SOFTPLUS, nullptr, 0, nullptr, 0, true},
    {"Softsign", KILN_UNARY_SOFTSIGN, nullptr, 0, nullptr, 0, true},
    {"Elu", KILN_UNARY_ELU, "alpha", 1.0, nullptr, 0, true},
    {"Selu", KILN_UNARY_SELU, "alpha", 1.67326319217681884765625, "gamma", 1.05070102214813232421875, true},
    {"LeakyRelu", KILN_UNARY_LEAKY_RELU, "alpha", 0.01, nullptr, 0, true},
    {"HardSigmoid", KILN_UNARY_HARD_SIGMOID, "alpha", 0.2, "beta", 0.5, true},
    {"ThresholdedRelu", KILN_UNARY_THRESHOLDED_RELU, "alpha", 1.0, nullptr, 0, true},
    {"Celu", KILN_UNARY_CELU, "alpha", 1.0, nullptr, 0, true},
    {"HardSwish", KILN_UNARY_HARD_SWISH, nullptr, 0, nullptr, 0, true},
    {"Shrink", KILN_UNARY_SHRINK, "lambd", 0.5, "bias", 0.0, false},
    {"Not", KILN_UNARY_NOT, nullptr, 0, nullptr, 0, false},
    {"Gelu", KILN_UNARY_GELU, nullptr, 0, nullptr, 0, true},  // kiln-internal (fusion)
    // kiln-internal: Gelu-20 with approximate=tanh (compiler/frontend/onnx/expand_ops.cc)
    {"kiln.GeluTanh", KILN_UNARY_GELU_TANH, nullptr, 0, nullptr, 0, true},
    // kiln-internal (legalize-float16): an f32 value rounded to a narrow float and back
    {"kiln.RoundToFloat16", KILN_UNARY_ROUND_TO_F16, nullptr, 0, nullptr, 0, true},
    {"kiln.RoundToBFloat16", KILN_UNARY_ROUND_TO_BF16, nullptr, 0, nullptr, 0, true},
};

struct BinaryDef {
  const char* name;
  int code;
  bool boolean_result;
};

constexpr BinaryDef kBinaryOps[] = {
    {"Add", KILN_BINARY_ADD, false},
    {"Sub", KILN_BINARY_SUB, false},
    {"Mul", KILN_BINARY_MUL, false},
    {"Div", KILN_BINARY_DIV, false},
    {"Pow", KILN_BINARY_POW, false},
    {"Mod", KILN_BINARY_MOD, false},
    {"Max", KILN_BINARY_MAX, false},
    {"Min", KILN_BINARY_MIN, false},
    {"Equal", KILN_BINARY_EQUAL, true},
    {"Less", KILN_BINARY_LESS, true},
    {"Greater", KILN_BINARY_GREATER, true},
    {"LessOrEqual", KILN_BINARY_LESS_EQUAL, true},
    {"GreaterOrEqual", KILN_BINARY_GREATER_EQUAL, true},
    {"And", KILN_BINARY_AND, false},
    {"Or", KILN_BINARY_OR, false},
    {"Xor", KILN_BINARY_XOR, false},
    {"BitShift", KILN_BINARY_SHIFT_LEFT, false},
    {"PRelu", KILN_BINARY_PRELU, false},
};

}  // namespace

std::vector<std::string> UnaryOpNames() {
  std::vector<std::string> names;
  for (const UnaryDef& def : kUnaryOps) names.push_back(def.name);
  return names;
}

namespace {

absl::Status RequireNumeric(const InferContext& ctx, size_t i) {
  DType d = ctx.type(i).dtype;
  if (d == DType::kString || d == DType::kFloat16 || d == DType::kBFloat16 || d == DType::kUndefined) {
    return NodeError(ctx.node, absl::StrCat("element type ", DTypeName(d), " of input ", i, " is not supported"));
  }
  return absl::OkStatus();
}

// Input 0 must have a numeric element type; output 0 gets its type.
absl::Status SameNumericTypeAsInput0(InferContext& ctx) {
  if (auto s = RequireNumeric(ctx, 0); !s.ok()) return s;
  return SameAsInput0(ctx);
}

absl::Status InferBroadcast(InferContext& ctx, DType result) {
  std::vector<Dim> shape;
  bool all_ranked = true;
  for (size_t i = 0; i < ctx.input_types.size(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (!ctx.type(i).has_shape) all_ranked = false;
  }
  if (!all_ranked) {
    ctx.output_types[0] = TensorType{result, {}, false};
    return absl::OkStatus();
  }
  for (size_t i = 0; i < ctx.input_types.size(); ++i) {
    auto b = BroadcastShapes(ctx.node, shape, ctx.type(i).shape);
    if (!b.ok()) return b.status();
    shape = *b;
  }
  ctx.output_types[0] = WithShape(result, shape);
  return absl::OkStatus();
}

// The binary ops a fused loop may contain: float results of the operands' own type.
bool FusibleBinary(int code) {
  return code == KILN_BINARY_ADD || code == KILN_BINARY_SUB || code == KILN_BINARY_MUL || code == KILN_BINARY_DIV ||
         code == KILN_BINARY_POW || code == KILN_BINARY_MAX || code == KILN_BINARY_MIN;
}

absl::Status InferFusedElementwise(InferContext& ctx) {
  const size_t n = ctx.input_types.size();
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> program, FusedProgram(ctx.node));
  for (size_t i = 0; i < program.size() / 4; ++i) {
    for (size_t k = 2; k < (program[i * 4] ? 4u : 3u); ++k) {
      const int64_t operand = program[i * 4 + k];
      if (operand < 0 || operand >= static_cast<int64_t>(n + i)) {
        return NodeError(ctx.node, absl::StrCat("op ", i, " reads operand ", operand,
                                                ", which is not an input or an earlier result"));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!ctx.has_input(i)) return NodeError(ctx.node, absl::StrCat("input ", i, " is missing"));
    if (ctx.type(i).dtype != ctx.type(0).dtype) return NodeError(ctx.node, "inputs have different element types");
  }
  if (auto s = RequireFloat(ctx); !s.ok()) return s;
  return InferBroadcast(ctx, ctx.type(0).dtype);
}

}  // namespace

std::optional<ScalarOp> ScalarOpOf(const Node& node) {
  if (node.outputs().size() != 1) return std::nullopt;
  const DType dtype = node.output(0)->type().dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) return std::nullopt;
  for (const Value* in : node.inputs()) {
    if (in == nullptr || in->type().dtype != dtype) return std::nullopt;
  }
  for (const UnaryDef& def : kUnaryOps) {
    if (node.op() != def.name || node.inputs().size() != 1 || def.code == KILN_UNARY_NOT) continue;
    return ScalarOp{false, def.code, def.alpha_attr ? node.GetFloat(def.alpha_attr, def.alpha_default) : 0.0,
                    def.beta_attr ? node.GetFloat(def.beta_attr, def.beta_default) : 0.0};
  }
  for (const BinaryDef& def : kBinaryOps) {
    if (node.op() != def.name || node.inputs().size() != 2 || !FusibleBinary(def.code)) continue;
    return ScalarOp{true, def.code, 0, 0};
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<int64_t>> FusedProgramOf(const Node& node) {
  auto ops_attr = node.attrs().find("ops");
  const auto* ops = ops_attr == node.attrs().end() ? nullptr : std::get_if<std::vector<std::string>>(&ops_attr->second);
  const std::vector<int64_t> operands = node.GetInts("operands");
  const std::vector<double> params = node.GetFloats("params");
  if (ops == nullptr || ops->empty() || operands.size() != 2 * ops->size() || params.size() != 2 * ops->size()) {
    return NodeError(node, "needs ops (names), operands (2 per op) and params (2 per op)");
  }
  std::vector<int64_t> program;
  for (size_t i = 0; i < ops->size(); ++i) {
    const std::string& name = (*ops)[i];
    auto binary = std::find_if(std::begin(kBinaryOps), std::end(kBinaryOps),
                               [&](const BinaryDef& d) { return name == d.name && FusibleBinary(d.code); });
    auto unary = std::find_if(std::begin(kUnaryOps), std::end(kUnaryOps),
                              [&](const UnaryDef& d) { return name == d.name && d.code != KILN_UNARY_NOT; });
    if (binary != std::end(kBinaryOps)) {
      program.insert(program.end(), {1, binary->code, operands[2 * i], operands[2 * i + 1]});
    } else if (unary != std::end(kUnaryOps)) {
      program.insert(program.end(), {0, unary->code, operands[2 * i], 0});
    } else {
      return NodeError(node, absl::StrCat("op ", i, " '", name, "' cannot run in a fused loop"));
    }
  }
  return program;
}

namespace {

absl::StatusOr<KernelCall> LowerFusedElementwise(const Node& node) {
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> program, FusedProgram(node));
  const std::vector<double> op_params = node.GetFloats("params");
  const size_t num_ops = program.size() / 4;
  if (num_ops > KILN_FUSED_MAX_OPS || op_params.size() != 2 * num_ops) {
    return NodeError(node, absl::StrCat("needs at most ", KILN_FUSED_MAX_OPS, " ops (4 program ints, 2 params each)"));
  }
  kiln_fused_elementwise_params params{};
  params.num_ops = static_cast<int64_t>(num_ops);
  for (size_t op = 0; op < num_ops; ++op) {
    for (size_t i = 0; i < 4; ++i) params.program[op][i] = program[op * 4 + i];
    for (size_t i = 0; i < 2; ++i) params.op_params[op][i] = op_params[op * 2 + i];
  }
  return CallWithParams<kernel::fused_elementwise>(PassAllInputs(node), params);
}

void RegisterUnaryOps(Registry& registry) {
  for (const UnaryDef& def : kUnaryOps) {
    OpSchema schema = Schema(def.name);
    schema.infer = def.float_only ? SameFloatTypeAsInput0 : SameNumericTypeAsInput0;
    schema.lower = [def](const Node& node) -> absl::StatusOr<KernelCall> {
      kiln_elementwise_params params{};
      params.op = def.code;
      params.alpha = def.alpha_attr ? node.GetFloat(def.alpha_attr, def.alpha_default) : 0.0;
      params.beta = def.beta_attr ? node.GetFloat(def.beta_attr, def.beta_default) : 0.0;
      return CallWithParams<kernel::unary>(PassInputs(node, 1), params);
    };
    registry.Add(std::move(schema));
  }
}

void RegisterIsNaNAndIsInf(Registry& registry) {
  for (const char* name : {"IsNaN", "IsInf"}) {
    OpSchema schema = Schema(name);
    schema.infer = [](InferContext& ctx) -> absl::Status {
      if (auto s = RequireFloat(ctx); !s.ok()) return s;
      ctx.output_types[0] = ctx.type(0);
      ctx.output_types[0].dtype = DType::kBool;
      return absl::OkStatus();
    };
    const bool is_nan = std::string(name) == "IsNaN";
    schema.lower = [is_nan](const Node& node) -> absl::StatusOr<KernelCall> {
      kiln_elementwise_params params{};
      params.op = is_nan ? KILN_UNARY_IS_NAN : KILN_UNARY_IS_INF;
      params.detect_negative = node.GetInt("detect_negative", 1);
      params.detect_positive = node.GetInt("detect_positive", 1);
      return CallWithParams<kernel::unary>(PassInputs(node, 1), params);
    };
    registry.Add(std::move(schema));
  }
}

void RegisterBinaryOps(Registry& registry) {
  for (const BinaryDef& def : kBinaryOps) {
    OpSchema schema = Schema(def.name, 2, 2);
    schema.infer = [def](InferContext& ctx) -> absl::Status {
      for (size_t i = 0; i < 2; ++i) {
        if (auto s = RequireNumeric(ctx, i); !s.ok()) return s;
      }
      const bool mixed_ok = def.code == KILN_BINARY_POW;
      if (!mixed_ok && ctx.type(0).dtype != ctx.type(1).dtype) {
        return NodeError(ctx.node, absl::StrCat("inputs have different element types (", DTypeName(ctx.type(0).dtype),
                                                " and ", DTypeName(ctx.type(1).dtype), ")"));
      }
      return InferBroadcast(ctx, def.boolean_result ? DType::kBool : ctx.type(0).dtype);
    };
    schema.lower = [def](const Node& node) -> absl::StatusOr<KernelCall> {
      int code = def.code;
      if (code == KILN_BINARY_MOD && node.GetInt("fmod", 0) != 0) code = KILN_BINARY_FMOD;
      if (code == KILN_BINARY_SHIFT_LEFT && node.GetString("direction", "") == "RIGHT") {
        code = KILN_BINARY_SHIFT_RIGHT;
      }
      kiln_elementwise_params params{};
      params.op = code;
      return CallWithParams<kernel::binary>(PassInputs(node, 2), params);
    };
    registry.Add(std::move(schema));
  }
}

absl::Status InferWhere(InferContext& ctx) {
  if (ctx.type(1).dtype != ctx.type(2).dtype) {
    return NodeError(ctx.node, "X and Y have different element types");
  }
  return InferBroadcast(ctx, ctx.type(1).dtype);
}

void RegisterCastAndCastLike(Registry& registry) {
  for (const char* name : {"Cast", "CastLike"}) {
    const bool like = std::string(name) == "CastLike";
    OpSchema schema = Schema(name, like ? 2 : 1, like ? 2 : 1);
    schema.infer = [like](InferContext& ctx) -> absl::Status {
      DType to = like ? ctx.type(1).dtype : static_cast<DType>(ctx.node.GetInt("to", 0));
      for (DType d : {to, ctx.type(0).dtype}) {
        if (d == DType::kString || DTypeSize(d) == 0) {
          return NodeError(ctx.node, absl::StrCat("cast involving ", DTypeName(d), " is not supported"));
        }
      }
      ctx.output_types[0] = ctx.type(0);
      ctx.output_types[0].dtype = to;
      return absl::OkStatus();
    };
    schema.lower = [](const Node& node) -> absl::StatusOr<KernelCall> {
      return Call<kernel::cast>(PassInputs(node, 1));
    };
    registry.Add(std::move(schema));
  }
}

absl::StatusOr<KernelCall> LowerClip(const Node& node) {
  kiln_elementwise_params params{};
  if (node.opset() < 11) {
    params.has_min = params.has_max = 1;
    params.alpha = node.GetFloat("min", -std::numeric_limits<float>::max());
    params.beta = node.GetFloat("max", std::numeric_limits<float>::max());
  } else {
    params.has_min = node.input(1) != nullptr;
    params.has_max = node.input(2) != nullptr;
  }
  return CallWithParams<kernel::clip>(PassAllInputs(node), params);
}

}  // namespace

void RegisterElementwiseOps(Registry& registry) {
  for (auto add : {RegisterUnaryOps, RegisterIsNaNAndIsInf, RegisterBinaryOps, RegisterCastAndCastLike}) {
    add(registry);
  }
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {kFusedElementwiseOp, 1, KILN_FUSED_MAX_INPUTS, 0, InferFusedElementwise, LowerFusedElementwise},
      {"Where", 3, 3, 0, InferWhere, LowerToKernel<kernel::where>},
      {"Clip", 1, 3, 0, SameNumericTypeAsInput0, LowerClip},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops

namespace kiln {
std::optional<ScalarOp> AsScalarOp(const Node& node) { return ops::ScalarOpOf(node); }
absl::StatusOr<std::vector<int64_t>> FusedProgram(const Node& node) { return ops::FusedProgramOf(node); }
}  // namespace kiln
