// Float8 (opset 19) and 4-bit integer (opset 21) element types: which ops take them, and
// Cast, CastLike, QuantizeLinear and DequantizeLinear extended to them (kernels in
// kernels/lowbit/lowbit.cc). Registered after the other families, whose schemas it wraps:
// any other op meeting one of these types is refused, naming node, op and type.
#include <algorithm>

#include "op_helpers.h"

namespace kiln::ops {
namespace {

// The ops that take float8 / int4 / uint4 values: the casts and (de)quantizers, and ops that
// only move one-byte elements or look at shapes.
constexpr const char* kLowBitOps[] = {
    "Cast",    "CastLike", "Constant", "DequantizeLinear", "Flatten",   "Identity",  "QuantizeLinear",
    "Reshape", "Shape",    "Size",     "Squeeze",          "Transpose", "Unsqueeze",
};

bool TakesLowBit(const std::string& op) {
  return std::any_of(std::begin(kLowBitOps), std::end(kLowBitOps), [&](const char* name) { return op == name; });
}

absl::Status RefuseLowBit(const Node& node, DType dtype) {
  return absl::UnimplementedError(absl::StrCat(
      NodeLabel(node), ": ", node.op(), " does not take element type ", DTypeName(dtype),
      "; float8, int4 and uint4 values are taken by Cast, CastLike, QuantizeLinear, DequantizeLinear and the "
      "data movement ops Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Shape, Size"));
}

// The opset that introduced the type: float8 in 19, int4 and uint4 (and the 16-bit
// quantized outputs) in 21.
absl::Status CheckOpset(const Node& node, DType dtype, bool quantized_16_bit = false) {
  const bool is_21 = dtype == DType::kInt4 || dtype == DType::kUInt4 ||
                     (quantized_16_bit && (dtype == DType::kInt16 || dtype == DType::kUInt16));
  const int64_t needs = IsFloat8(dtype) ? 19 : is_21 ? 21 : 0;
  if (node.opset() < needs) {
    return NodeError(node, absl::StrCat("element type ", DTypeName(dtype), " needs opset ", needs, " or later"));
  }
  return absl::OkStatus();
}

// Every other op: a low-bit input (before its inference) or output (after it) is refused.
void GuardOp(OpSchema& schema) {
  if (!schema.infer) return;
  auto infer = schema.infer;
  auto lower = schema.lower;
  schema.infer = [infer](InferContext& ctx) -> absl::Status {
    for (const TensorType* in : ctx.input_types) {
      if (in != nullptr && IsLowBit(in->dtype)) return RefuseLowBit(ctx.node, in->dtype);
    }
    KILN_RETURN_IF_ERROR(infer(ctx));
    for (const TensorType& out : ctx.output_types) {
      if (IsLowBit(out.dtype)) return RefuseLowBit(ctx.node, out.dtype);
    }
    return absl::OkStatus();
  };
  if (!lower) return;
  schema.lower = [lower](const Node& node) -> absl::StatusOr<KernelCall> {
    for (const auto& values : {node.inputs(), node.outputs()}) {
      for (const Value* v : values) {
        if (v != nullptr && IsLowBit(v->type().dtype)) return RefuseLowBit(node, v->type().dtype);
      }
    }
    return lower(node);
  };
}

// Cast / CastLike with float8, int4 or uint4 on either side run cast_lowbit; the rest the
// schema registered before.
void ExtendCast(const char* name) {
  OpSchema& schema = Table().at(name);
  auto infer = schema.infer;
  auto lower = schema.lower;
  schema.infer = [infer](InferContext& ctx) -> absl::Status {
    const DType from = ctx.type(0).dtype, to = CastTarget(ctx.node, &ctx);
    if (!IsLowBit(from) && !IsLowBit(to)) return infer(ctx);
    KILN_RETURN_IF_ERROR(CheckOpset(ctx.node, from));
    KILN_RETURN_IF_ERROR(CheckOpset(ctx.node, to));
    for (DType d : {from, to}) {
      if (d == DType::kString || DTypeSize(d) == 0) {
        return NodeError(ctx.node,
                         absl::StrCat("cast between ", DTypeName(from), " and ", DTypeName(to), " is not supported"));
      }
    }
    ctx.output_types[0] = ctx.type(0);
    ctx.output_types[0].dtype = to;
    return absl::OkStatus();
  };
  schema.lower = [lower](const Node& node) -> absl::StatusOr<KernelCall> {
    if (!IsLowBit(node.input(0)->type().dtype) && !IsLowBit(CastTarget(node, nullptr))) return lower(node);
    kiln_lowbit_params params{};
    params.saturate = node.GetInt("saturate", 1) != 0;
    return CallWithParams<kernel::cast_lowbit>(PassInputs(node, 1), params);
  };
}

bool IsClassicQuantized(DType d) { return d == DType::kUInt8 || d == DType::kInt8; }

// QuantizeLinear / DequantizeLinear as quant_ops.cc has them (u8 / i8, and an i32 input to
// dequantize, per tensor or per axis) or not (the wider types, blocked scales).
bool IsClassicQuantize(const Node& node, const std::vector<const TensorType*>& types, bool quantize) {
  if (node.GetInt("block_size", 0) != 0) return false;
  const auto type = [&](size_t i) {
    return i < types.size() && types[i] != nullptr ? types[i]->dtype : DType::kUndefined;
  };
  if (quantize) {
    const int64_t out = node.GetInt("output_dtype", 0);
    const DType zp = type(2);
    return (out == 0 || IsClassicQuantized(static_cast<DType>(out))) &&
           (zp == DType::kUndefined || IsClassicQuantized(zp));
  }
  return IsClassicQuantized(type(0)) || type(0) == DType::kInt32;
}

bool IsWideQuantized(DType d) {
  return IsClassicQuantized(d) || IsFloat8(d) || d == DType::kInt16 || d == DType::kUInt16 || d == DType::kInt4 ||
         d == DType::kUInt4;
}

// QuantizeLinear's result type: its zero point's, else output_dtype, else u8.
absl::StatusOr<DType> QuantizedType(const InferContext& ctx) {
  const int64_t output_dtype = ctx.node.GetInt("output_dtype", 0);
  const DType wanted = output_dtype != 0 ? static_cast<DType>(output_dtype) : DType::kUInt8;
  if (!ctx.has_input(2)) return wanted;
  if (output_dtype != 0 && ctx.type(2).dtype != wanted) {
    return NodeError(ctx.node, absl::StrCat("output_dtype ", DTypeName(wanted), " differs from the zero point's ",
                                            DTypeName(ctx.type(2).dtype)));
  }
  return ctx.type(2).dtype;
}

// The scale's (and zero point's) shape against X's: one element, one per index along the
// axis, or (block_size > 0) X's shape with the axis cut into blocks.
absl::Status CheckScaleShape(const InferContext& ctx, const std::vector<int64_t>& x) {
  const std::vector<int64_t> s = ctx.type(1).StaticDims();
  const int64_t block = ctx.node.GetInt("block_size", 0);
  const int64_t elements = NumElements(s);
  if (block < 0) return NodeError(ctx.node, absl::StrCat("block_size ", block, " is negative"));
  if (block == 0 && elements == 1 && s.size() <= 1) return absl::OkStatus();
  KILN_ASSIGN_OR_RETURN(const int64_t axis,
                        NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 1), static_cast<int64_t>(x.size())));
  std::vector<int64_t> want = {x[static_cast<size_t>(axis)]};
  if (block > 0) {
    want = x;
    want[static_cast<size_t>(axis)] = (x[static_cast<size_t>(axis)] + block - 1) / block;
  }
  if (s != want) {
    return NodeError(ctx.node, absl::StrCat("scale has shape [", absl::StrJoin(s, ","), "]; with block_size ", block,
                                            " and axis ", axis, " it must be [", absl::StrJoin(want, ","), "]"));
  }
  return absl::OkStatus();
}

absl::Status InferLowBitQuantize(InferContext& ctx, bool quantize) {
  KILN_RETURN_IF_ERROR(RequireStaticInputs(ctx, {0, 1}));
  const TensorType& x = ctx.type(0);
  DType q = x.dtype;
  if (quantize) {
    if (x.dtype != DType::kFloat32) {
      return NodeError(ctx.node,
                       absl::StrCat("input of element type ", DTypeName(x.dtype), " is not supported (float only)"));
    }
    KILN_ASSIGN_OR_RETURN(q, QuantizedType(ctx));
  }
  if (!IsWideQuantized(q) && !(!quantize && q == DType::kInt32)) {
    return NodeError(ctx.node, absl::StrCat("quantized element type ", DTypeName(q), " is not supported"));
  }
  KILN_RETURN_IF_ERROR(CheckOpset(ctx.node, q, true));
  if (ctx.node.GetInt("block_size", 0) != 0 && ctx.node.opset() < 21) {
    return NodeError(ctx.node, "block_size (blocked quantization) needs opset 21 or later");
  }
  if (ctx.type(1).dtype != DType::kFloat32) {
    return NodeError(ctx.node, absl::StrCat("scale of element type ", DTypeName(ctx.type(1).dtype),
                                            " is not supported (float only)"));
  }
  KILN_RETURN_IF_ERROR(CheckScaleShape(ctx, x.StaticDims()));
  if (ctx.has_input(2)) {
    KILN_RETURN_IF_ERROR(RequireStatic(ctx, 2));
    if (ctx.type(2).dtype != q || ctx.type(2).StaticDims() != ctx.type(1).StaticDims()) {
      return NodeError(ctx.node, absl::StrCat("zero point ", PrintType(ctx.type(2)), " must be ", DTypeName(q),
                                              " with the scale's shape ", PrintType(ctx.type(1))));
    }
  }
  ctx.output_types[0] = x;
  ctx.output_types[0].dtype = quantize ? q : DType::kFloat32;
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerLowBitQuantize(const Node& node, bool quantize) {
  const std::vector<int64_t> x = StaticDims(node.input(0));
  const std::vector<int64_t> s = StaticDims(node.input(1));
  kiln_lowbit_params params{};
  params.saturate = node.GetInt("saturate", 1) != 0;
  params.block_size = node.GetInt("block_size", 0);
  params.outer = 1, params.channels = 1, params.inner = NumElements(x);
  if (params.block_size > 0 || NumElements(s) > 1) {
    KILN_ASSIGN_OR_RETURN(const int64_t axis,
                          NormalizeAxis(node, node.GetInt("axis", 1), static_cast<int64_t>(x.size())));
    params.outer = NumElements(std::vector<int64_t>(x.begin(), x.begin() + axis));
    params.channels = x[static_cast<size_t>(axis)];
    params.inner = NumElements(std::vector<int64_t>(x.begin() + axis + 1, x.end()));
  }
  return quantize ? CallWithParams<kernel::quantize_lowbit>(PassInputs(node, 3), params)
                  : CallWithParams<kernel::dequantize_lowbit>(PassInputs(node, 3), params);
}

void ExtendQuantize(const char* name, bool quantize) {
  OpSchema& schema = Table().at(name);
  auto infer = schema.infer;
  auto lower = schema.lower;
  schema.infer = [infer, quantize](InferContext& ctx) -> absl::Status {
    if (IsClassicQuantize(ctx.node, ctx.input_types, quantize)) return infer(ctx);
    return InferLowBitQuantize(ctx, quantize);
  };
  schema.lower = [lower, quantize](const Node& node) -> absl::StatusOr<KernelCall> {
    std::vector<const TensorType*> types;
    for (const Value* in : node.inputs()) types.push_back(in != nullptr ? &in->type() : nullptr);
    if (IsClassicQuantize(node, types, quantize)) return lower(node);
    return LowerLowBitQuantize(node, quantize);
  };
}

}  // namespace

absl::Status RefuseLowBitInputs(const Node& node) {
  if (TakesLowBit(node.op())) return absl::OkStatus();
  for (const Value* in : node.inputs()) {
    if (in != nullptr && IsLowBit(in->type().dtype)) return RefuseLowBit(node, in->type().dtype);
  }
  return absl::OkStatus();
}

void RegisterLowBitOps(Registry&) {
  for (auto& [name, schema] : Table()) {
    if (!TakesLowBit(name)) GuardOp(schema);
  }
  ExtendCast("Cast");
  ExtendCast("CastLike");
  ExtendQuantize("QuantizeLinear", true);
  ExtendQuantize("DequantizeLinear", false);
}

}  // namespace kiln::ops
