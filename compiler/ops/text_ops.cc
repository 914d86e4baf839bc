// String ops of opsets 19 and 20: Equal extended to strings, StringConcat (both broadcast
// like Add), StringSplit (its last output dim follows from the data: a run-time rule with
// its own shape function) and RegexFullMatch (its pattern checked and compiled here, at
// compile time, by regex_program.cc). Registered after the numeric families.
#include <algorithm>

#include "op_helpers.h"
#include "regex_program.h"

namespace kiln::ops {
namespace {

absl::Status RequireStrings(const InferContext& ctx, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (!ctx.has_input(i)) return NodeError(ctx.node, absl::StrCat("input ", i, " is required"));
    if (ctx.type(i).dtype != DType::kString) {
      return NodeError(ctx.node, absl::StrCat("input ", i, " must be a string tensor, is ", PrintType(ctx.type(i))));
    }
  }
  return absl::OkStatus();
}

// Output 0: the broadcast of inputs 0 and 1, of `dtype`.
absl::Status InferBroadcastOf2(InferContext& ctx, DType dtype) {
  if (!ctx.type(0).has_shape || !ctx.type(1).has_shape) {
    ctx.output_types[0] = TensorType{dtype, {}, false};
    return absl::OkStatus();
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Dim> shape, BroadcastShapes(ctx.node, ctx.type(0).shape, ctx.type(1).shape));
  ctx.output_types[0] = WithShape(dtype, std::move(shape));
  return absl::OkStatus();
}

absl::StatusOr<DynamicShape> BroadcastRule(const InferContext& ctx, DType dtype) {
  KILN_ASSIGN_OR_RETURN(int64_t a, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t b, RankOf(ctx, 1));
  return DynamicShape{CallWithParams<kernel::shape_broadcast>(PassInputs(ctx.node, 2), kiln_shape_params{}),
                      {RankOnly(dtype, std::max(a, b))}};
}

// Equal on two string tensors (opset 19) goes to string_equal; the rest to the numeric
// schema registered before.
void ExtendEqual() {
  OpSchema& schema = Table().at("Equal");
  auto numeric_infer = schema.infer;
  auto numeric_lower = schema.lower;
  schema.infer = [numeric_infer](InferContext& ctx) -> absl::Status {
    if (ctx.type(0).dtype != DType::kString && ctx.type(1).dtype != DType::kString) return numeric_infer(ctx);
    if (ctx.node.opset() < 19) {
      return NodeError(ctx.node, "Equal takes string tensors from opset 19 on");
    }
    KILN_RETURN_IF_ERROR(RequireStrings(ctx, 2));
    return InferBroadcastOf2(ctx, DType::kBool);
  };
  schema.lower = [numeric_lower](const Node& node) -> absl::StatusOr<KernelCall> {
    if (node.input(0)->type().dtype != DType::kString) return numeric_lower(node);
    return Call<kernel::string_equal>(PassInputs(node, 2));
  };
}

absl::Status InferStringConcat(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireStrings(ctx, 2));
  return InferBroadcastOf2(ctx, DType::kString);
}

// StringSplit's kernel operands: X, then the delimiter as a u8 constant, NUL-terminated.
std::vector<KernelOperand> SplitOperands(const Node& node) {
  const std::string delimiter = node.GetString("delimiter", "");
  auto blob = std::make_shared<Tensor>(DType::kUInt8, std::vector<int64_t>{static_cast<int64_t>(delimiter.size()) + 1});
  std::copy(delimiter.begin(), delimiter.end(), blob->data_as<char>());
  blob->data_as<char>()[delimiter.size()] = '\0';
  std::vector<KernelOperand> operands = PassInputs(node, 1);
  operands.push_back(KernelOperand{-1, std::move(blob)});
  return operands;
}

absl::StatusOr<kiln_string_split_params> SplitParams(const Node& node) {
  const std::string delimiter = node.GetString("delimiter", "");
  if (delimiter.find('\0') != std::string::npos) return NodeError(node, "the delimiter holds a NUL character");
  kiln_string_split_params p{};
  p.maxsplit = node.GetInt("maxsplit", -1);
  return p;
}

// Y: X's dims and one more, the most pieces of any element (data-dependent); Z: X's dims.
absl::StatusOr<DynamicShape> SplitRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireStrings(ctx, 1));
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  KILN_ASSIGN_OR_RETURN(kiln_string_split_params p, SplitParams(ctx.node));
  std::vector<TensorType> outputs = {RankOnly(DType::kString, rank + 1), RankOnly(DType::kInt64, rank)};
  outputs.resize(ctx.node.outputs().size(), RankOnly(DType::kInt64, rank));
  return DynamicShape{CallWithParams<kernel::shape_string_split>(SplitOperands(ctx.node), p), std::move(outputs)};
}

absl::StatusOr<KernelCall> LowerSplit(const Node& node) {
  KILN_ASSIGN_OR_RETURN(kiln_string_split_params p, SplitParams(node));
  return CallWithParams<kernel::string_split>(SplitOperands(node), p);
}

// The pattern compiled, or an error naming the node and what in the pattern is wrong.
absl::StatusOr<std::vector<int32_t>> PatternProgram(const Node& node) {
  if (node.attrs().find("pattern") == node.attrs().end()) return NodeError(node, "the pattern attribute is required");
  const std::string pattern = node.GetString("pattern", "");
  absl::StatusOr<std::vector<int32_t>> program = CompileRegex(pattern);
  if (!program.ok()) return NodeError(node, absl::StrCat("pattern '", pattern, "' ", program.status().message()));
  return program;
}

absl::Status InferRegexFullMatch(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireStrings(ctx, 1));
  KILN_RETURN_IF_ERROR(PatternProgram(ctx.node).status());
  ctx.output_types[0] = ctx.type(0);
  ctx.output_types[0].dtype = DType::kBool;
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerRegexFullMatch(const Node& node) {
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> program, PatternProgram(node));
  auto code = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{static_cast<int64_t>(program.size())});
  std::copy(program.begin(), program.end(), code->data_as<int32_t>());
  std::vector<KernelOperand> operands = PassInputs(node, 1);
  operands.push_back(KernelOperand{-1, std::move(code)});
  return Call<kernel::regex_full_match>(std::move(operands));
}

absl::StatusOr<DynamicShape> RegexFullMatchRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireStrings(ctx, 1));
  KILN_RETURN_IF_ERROR(PatternProgram(ctx.node).status());
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  return DynamicShape{CallWithParams<kernel::shape_same>(PassInputs(ctx.node, 1), kiln_shape_params{}),
                      {RankOnly(DType::kBool, rank)}};
}

}  // namespace

void RegisterTextOps(Registry& registry) {
  ExtendEqual();
  OpSchema concat = Schema("StringConcat", 2, 2);
  concat.infer = InferStringConcat;
  concat.lower = LowerToKernel<kernel::string_concat>;
  concat.dynamic = [](const InferContext& ctx) { return BroadcastRule(ctx, DType::kString); };
  registry.Add(std::move(concat));
  // X's data decides Y's last dim: a constant X folds, any other runs the rule.
  OpSchema split = Schema("StringSplit", 1, 1, 0b1);
  split.infer = InferByDynamicRule;
  split.lower = LowerSplit;
  split.dynamic = SplitRule;
  registry.Add(std::move(split));
  OpSchema regex = Schema("RegexFullMatch", 1, 1);
  regex.infer = InferRegexFullMatch;
  regex.lower = LowerRegexFullMatch;
  regex.dynamic = RegexFullMatchRule;
  registry.Add(std::move(regex));
}

}  // namespace kiln::ops
