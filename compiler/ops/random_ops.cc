// The random ops: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike,
// Bernoulli and Multinomial, one kernel (kernels/signal/random.cc) drawing with Kiln's
// generator (kiln/kernels/random.h). They are marked OpSchema::random: never folded or
// merged, since without a seed each run draws anew.
#include "op_helpers.h"

namespace kiln::ops {
namespace {

bool IsDrawnFloat(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

// The `dtype` attribute, else `fallback`; random values are drawn into f32 or f64 (and,
// for Bernoulli and Multinomial, the integer and bool types as well).
absl::StatusOr<DType> DrawnType(const Node& node, DType fallback, bool integers_too) {
  const DType dtype = node.has_attr("dtype") ? static_cast<DType>(node.GetInt("dtype", 1)) : fallback;
  const bool ok = IsDrawnFloat(dtype) || (integers_too && (IsInteger(dtype) || dtype == DType::kBool));
  if (!ok) return NodeError(node, absl::StrCat("dtype ", DTypeName(dtype), " is not supported for random values"));
  return dtype;
}

absl::Status InferRandom(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DType dtype, DrawnType(ctx.node, DType::kFloat32, false));
  const std::vector<int64_t> shape = ctx.node.GetInts("shape");
  for (int64_t d : shape) {
    if (d < 0) return NodeError(ctx.node, "shape has a negative dim");
  }
  ctx.output_types[0] = TensorType::Static(dtype, shape);
  return absl::OkStatus();
}

// The *Like ops and Bernoulli: input 0's shape; the dtype attribute or input 0's type.
std::function<absl::Status(InferContext&)> InferLike(bool bernoulli) {
  return [bernoulli](InferContext& ctx) -> absl::Status {
    if (bernoulli && !IsDrawnFloat(ctx.type(0).dtype)) {
      return NodeError(ctx.node, "Bernoulli's probabilities must be float or double");
    }
    KILN_ASSIGN_OR_RETURN(DType dtype, DrawnType(ctx.node, ctx.type(0).dtype, bernoulli));
    KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
    ctx.output_types[0] = TensorType::Static(dtype, ctx.type(0).StaticDims());
    return absl::OkStatus();
  };
}

absl::Status InferMultinomial(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  if (x.size() != 2) return NodeError(ctx.node, "input must be [batch_size, class_size]");
  KILN_ASSIGN_OR_RETURN(DType dtype, DrawnType(ctx.node, DType::kInt32, true));
  if (dtype != DType::kInt32 && dtype != DType::kInt64) return NodeError(ctx.node, "dtype must be int32 or int64");
  const int64_t samples = ctx.node.GetInt("sample_size", 1);
  if (samples < 0) return NodeError(ctx.node, "sample_size must not be negative");
  ctx.output_types[0] = TensorType::Static(dtype, {x[0], samples});
  return absl::OkStatus();
}

// The kernel call: `kind`, the seed when the node has one, and the distribution's two
// attributes (low/high, mean/scale) with their defaults; `inputs` node inputs passed.
std::function<absl::StatusOr<KernelCall>(const Node&)> LowerRandom(int64_t kind, const char* a, double a_default,
                                                                   const char* b, double b_default, size_t inputs) {
  return [=](const Node& node) -> absl::StatusOr<KernelCall> {
    kiln_random_params params{};
    params.kind = kind;
    params.has_seed = node.has_attr("seed") ? 1 : 0;
    params.seed = node.GetFloat("seed", 0.0);
    params.a = a != nullptr ? node.GetFloat(a, a_default) : 0.0;
    params.b = b != nullptr ? node.GetFloat(b, b_default) : 0.0;
    return CallWithParams<kernel::random>(PassInputs(node, inputs), params);
  };
}

}  // namespace

void RegisterRandomOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"RandomUniform", 0, 0, 0, InferRandom, LowerRandom(KILN_RANDOM_UNIFORM, "low", 0.0, "high", 1.0, 0)},
      {"RandomNormal", 0, 0, 0, InferRandom, LowerRandom(KILN_RANDOM_NORMAL, "mean", 0.0, "scale", 1.0, 0)},
      {"RandomUniformLike", 1, 1, 0, InferLike(false), LowerRandom(KILN_RANDOM_UNIFORM, "low", 0.0, "high", 1.0, 0)},
      {"RandomNormalLike", 1, 1, 0, InferLike(false), LowerRandom(KILN_RANDOM_NORMAL, "mean", 0.0, "scale", 1.0, 0)},
      {"Bernoulli", 1, 1, 0, InferLike(true), LowerRandom(KILN_RANDOM_BERNOULLI, nullptr, 0, nullptr, 0, 1)},
      {"Multinomial", 1, 1, 0, InferMultinomial, LowerRandom(KILN_RANDOM_MULTINOMIAL, nullptr, 0, nullptr, 0, 1)},
  };
  for (OpSchema schema : ops) {
    schema.random = true;
    registry.Add(schema);
  }
}

}  // namespace kiln::ops
