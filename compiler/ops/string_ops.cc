// String ops: Cast and CastLike extended to and from strings (the numeric casts stay in
// elementwise_ops.cc), and StringNormalizer, whose output count follows from the data (a
// run-time rule with its own shape function). Registered after the other families.
#include <variant>

#include "op_helpers.h"

namespace kiln::ops {

DType CastTarget(const Node& node, const InferContext* ctx) {
  if (node.op() == "CastLike") {
    if (ctx != nullptr) return ctx->type(1).dtype;
    return node.input(1) != nullptr ? node.input(1)->type().dtype : DType::kUndefined;
  }
  return static_cast<DType>(node.GetInt("to", 0));
}

namespace {

bool Castable(DType d) { return d != DType::kUndefined && DTypeSize(d) > 0; }

// Cast/CastLike with a string on either side go to the string kernels; the rest to the
// numeric schema registered before.
void ExtendCast(const char* name) {
  OpSchema& schema = Table().at(name);
  auto numeric_infer = schema.infer;
  auto numeric_lower = schema.lower;
  schema.infer = [numeric_infer](InferContext& ctx) -> absl::Status {
    const DType to = CastTarget(ctx.node, &ctx), from = ctx.type(0).dtype;
    if (to != DType::kString && from != DType::kString) return numeric_infer(ctx);
    for (DType d : {to, from}) {
      if (!Castable(d)) {
        return NodeError(ctx.node,
                         absl::StrCat("cast between ", DTypeName(from), " and ", DTypeName(to), " is not supported"));
      }
    }
    ctx.output_types[0] = ctx.type(0);
    ctx.output_types[0].dtype = to;
    return absl::OkStatus();
  };
  schema.lower = [numeric_lower](const Node& node) -> absl::StatusOr<KernelCall> {
    const DType to = CastTarget(node, nullptr), from = node.input(0)->type().dtype;
    if (from == DType::kString && to == DType::kString) return Call<kernel::copy>(PassInputs(node, 1));
    if (from == DType::kString) return Call<kernel::cast_from_string>(PassInputs(node, 1));
    if (to == DType::kString) return Call<kernel::cast_to_string>(PassInputs(node, 1));
    return numeric_lower(node);
  };
}

std::vector<std::string> StringsAttr(const Node& node, const std::string& key) {
  auto it = node.attrs().find(key);
  if (it == node.attrs().end()) return {};
  const auto* strings = std::get_if<std::vector<std::string>>(&it->second);
  return strings != nullptr ? *strings : std::vector<std::string>{};
}

absl::StatusOr<kiln_string_params> NormalizerParams(const Node& node) {
  static constexpr NamedCode kActions[] = {
      {"NONE", KILN_CASE_NONE}, {"LOWER", KILN_CASE_LOWER}, {"UPPER", KILN_CASE_UPPER}};
  kiln_string_params p{};
  KILN_ASSIGN_OR_RETURN(p.case_change, NamedAttr(node, "case_change_action", "NONE", kActions));
  const std::string locale = node.GetString("locale", "");
  if (!locale.empty() && locale != "en_US" && locale != "en_US.UTF-8" && locale != "C") {
    return NodeError(node, absl::StrCat("locale '", locale,
                                        "' is not supported: Kiln changes case and compares stopwords by ASCII "
                                        "rules only (en_US)"));
  }
  p.case_sensitive = node.GetInt("is_case_sensitive", 0) != 0;
  p.num_stopwords = static_cast<int64_t>(StringsAttr(node, "stopwords").size());
  return p;
}

// The stopwords as the kernels read them: a u8 constant of NUL-terminated words.
std::vector<KernelOperand> NormalizerOperands(const Node& node) {
  std::string blob;
  for (const std::string& word : StringsAttr(node, "stopwords")) blob += word + '\0';
  if (blob.empty()) blob.push_back('\0');
  auto words = std::make_shared<Tensor>(DType::kUInt8, std::vector<int64_t>{static_cast<int64_t>(blob.size())});
  std::copy(blob.begin(), blob.end(), words->data_as<char>());
  std::vector<KernelOperand> operands = PassInputs(node, 1);
  operands.push_back(KernelOperand{-1, std::move(words)});
  return operands;
}

absl::StatusOr<DynamicShape> NormalizerRule(const InferContext& ctx) {
  const TensorType& x = ctx.type(0);
  if (x.dtype != DType::kString) return NodeError(ctx.node, "input X must be a string tensor");
  const size_t rank = x.shape.size();
  if (!x.has_shape || rank < 1 || rank > 2 || (rank == 2 && x.shape[0].known() && x.shape[0].size != 1)) {
    return NodeError(ctx.node, absl::StrCat("input X must be [C] or [1, C], has ", PrintType(x)));
  }
  KILN_ASSIGN_OR_RETURN(kiln_string_params p, NormalizerParams(ctx.node));
  TensorType out;
  out.dtype = DType::kString;
  out.has_shape = true;
  out.shape.assign(rank, Dim::Symbolic("?"));
  return DynamicShape{CallWithParams<kernel::shape_string_normalizer>(NormalizerOperands(ctx.node), p), {out}};
}

absl::StatusOr<KernelCall> LowerNormalizer(const Node& node) {
  KILN_ASSIGN_OR_RETURN(kiln_string_params p, NormalizerParams(node));
  return CallWithParams<kernel::string_normalizer>(NormalizerOperands(node), p);
}

}  // namespace

void RegisterStringOps(Registry& registry) {
  ExtendCast("Cast");
  ExtendCast("CastLike");
  // X's data decides the output count: a constant X folds, any other runs its rule.
  OpSchema normalizer = Schema("StringNormalizer", 1, 1, 0b1);
  normalizer.infer = InferByDynamicRule;
  normalizer.lower = LowerNormalizer;
  normalizer.dynamic = NormalizerRule;
  registry.Add(std::move(normalizer));
}

}  // namespace kiln::ops
