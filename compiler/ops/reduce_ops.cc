// Reductions, ArgMax/ArgMin, the Softmax family and global pooling (a reduction over
// the spatial axes).
#include "kiln/kernels/reduce.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

constexpr NamedCode kReduceOps[] = {
    {"ReduceSum", KILN_REDUCE_SUM},
    {"ReduceMean", KILN_REDUCE_MEAN},
    {"ReduceMax", KILN_REDUCE_MAX},
    {"ReduceMin", KILN_REDUCE_MIN},
    {"ReduceProd", KILN_REDUCE_PROD},
    {"ReduceL1", KILN_REDUCE_L1},
    {"ReduceL2", KILN_REDUCE_L2},
    {"ReduceLogSum", KILN_REDUCE_LOG_SUM},
    {"ReduceLogSumExp", KILN_REDUCE_LOG_SUM_EXP},
    {"ReduceSumSquare", KILN_REDUCE_SUM_SQUARE},
};

// The reduced-axes mask for a Reduce* node, from the attribute or the axes input.
absl::StatusOr<int64_t> ReduceMask(const Node& node, const std::vector<const Tensor*>& constants, bool has_axes_input,
                                   int64_t rank) {
  std::vector<int64_t> axes;
  if (node.has_attr("axes")) {
    axes = node.GetInts("axes");
  } else if (has_axes_input) {
    if (constants.size() < 2 || constants[1] == nullptr) return NodeError(node, "axes must be a compile-time constant");
    axes = ToInts(*constants[1]);
  }
  if (rank > 8) return NodeError(node, "rank above 8 is not supported");
  if (axes.empty()) {
    if (node.GetInt("noop_with_empty_axes", 0) != 0) return 0;
    return (int64_t{1} << rank) - 1;
  }
  int64_t mask = 0;
  for (int64_t a : axes) {
    auto axis = NormalizeAxis(node, a, rank);
    if (!axis.ok()) return axis.status();
    mask |= int64_t{1} << *axis;
  }
  return mask;
}

// The reduce kernel over the axes in `axes_mask` of input 0.
KernelCall ReduceCall(const Node& node, int code, int64_t axes_mask) {
  kiln_reduce_params params{};
  params.op = code;
  params.axes_mask = axes_mask;
  return CallWithParams<kernel::reduce>(PassInputs(node, 1), params);
}

std::vector<Dim> ReducedShape(const std::vector<Dim>& in, int64_t mask, bool keepdims) {
  std::vector<Dim> out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (mask & (int64_t{1} << i)) {
      if (keepdims) out.push_back(Dim::Known(1));
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

// TopK's k: the attribute before opset 10, the constant input after (it decides the shape).
absl::StatusOr<int64_t> TopKCount(const Node& node, const std::vector<const Tensor*>& constants) {
  if (node.opset() < 10) return node.GetInt("k", 0);
  if (constants.size() < 2 || constants[1] == nullptr) {
    return NodeError(node, "k must be a compile-time constant (the output shape needs it)");
  }
  if (constants[1]->num_elements() != 1) return NodeError(node, "k must have one element");
  return constants[1]->GetAsInt64(0);
}

absl::Status InferTopK(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
  std::vector<int64_t> dims = ctx.type(0).StaticDims();
  KILN_ASSIGN_OR_RETURN(const int64_t axis,
                        NormalizeAxis(ctx.node, ctx.node.GetInt("axis", -1), static_cast<int64_t>(dims.size())));
  KILN_ASSIGN_OR_RETURN(const int64_t k, TopKCount(ctx.node, ctx.input_constants));
  if (k < 0 || k > dims[axis]) {
    return NodeError(ctx.node, absl::StrCat("k ", k, " is out of range for axis ", axis, " of extent ", dims[axis]));
  }
  dims[axis] = k;
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, dims);
  ctx.output_types[1] = TensorType::Static(DType::kInt64, dims);
  return absl::OkStatus();
}

// The kernel takes k from the outputs' dims and checks the K input against it.
absl::StatusOr<KernelCall> LowerTopK(const Node& node) {
  kiln_topk_params params{};
  params.axis = AxisAttr(node, -1, node.input(0));
  params.largest = node.GetInt("largest", 1);
  params.sorted = node.GetInt("sorted", 1);
  return CallWithParams<kernel::topk>(PassAllInputs(node), params);
}

}  // namespace

void RegisterReduceOps(Registry& registry) {
  for (const NamedCode& def : kReduceOps) {
    OpSchema s = Schema(def.name, 1, 2, 0b10);
    s.infer = [](InferContext& ctx) -> absl::Status {
      if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
      const auto& in = ctx.type(0).shape;
      auto mask = ReduceMask(ctx.node, ctx.input_constants, ctx.has_input(1), static_cast<int64_t>(in.size()));
      if (!mask.ok()) return mask.status();
      ctx.output_types[0] = WithShape(ctx.type(0).dtype, ReducedShape(in, *mask, ctx.node.GetInt("keepdims", 1) != 0));
      return absl::OkStatus();
    };
    s.lower = [def](const Node& node) -> absl::StatusOr<KernelCall> {
      const int64_t rank = static_cast<int64_t>(StaticDims(node.input(0)).size());
      // Computed axes: the shape function (shape_reduce) completes the mask at run time,
      // unless there are none (a static [0]), which the mask says now.
      const Value* axes = node.input(1);
      const bool computed = axes != nullptr && !axes->is_constant();
      const bool no_axes = computed && axes->type().IsStatic() && NumElements(axes->type().StaticDims()) == 0;
      if (computed && !no_axes) return ReduceCall(node, def.code, 0);
      KILN_ASSIGN_OR_RETURN(int64_t mask, ReduceMask(node, ConstantsOf(node), axes != nullptr && !no_axes, rank));
      return ReduceCall(node, def.code, mask);
    };
    registry.Add(std::move(s));
  }

  for (const char* name : {"GlobalAveragePool", "GlobalMaxPool"}) {
    OpSchema s = Schema(name);
    const int code = std::string(name) == "GlobalMaxPool" ? KILN_REDUCE_MAX : KILN_REDUCE_MEAN;
    s.infer = [](InferContext& ctx) -> absl::Status {
      if (!ctx.type(0).has_shape || ctx.type(0).shape.size() < 3)
        return NodeError(ctx.node, "input must have rank 3 or more");
      std::vector<Dim> out = ctx.type(0).shape;
      for (size_t i = 2; i < out.size(); ++i) out[i] = Dim::Known(1);
      ctx.output_types[0] = WithShape(ctx.type(0).dtype, out);
      return absl::OkStatus();
    };
    s.lower = [code](const Node& node) -> absl::StatusOr<KernelCall> {
      const int64_t rank = static_cast<int64_t>(StaticDims(node.input(0)).size());
      return ReduceCall(node, code, ((int64_t{1} << rank) - 1) & ~int64_t{3});  // the spatial axes
    };
    registry.Add(std::move(s));
  }

  for (const char* name : {"ArgMax", "ArgMin"}) {
    OpSchema s = Schema(name);
    const bool is_min = std::string(name) == "ArgMin";
    s.infer = [](InferContext& ctx) -> absl::Status {
      if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
      const auto& in = ctx.type(0).shape;
      auto axis = NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), static_cast<int64_t>(in.size()));
      if (!axis.ok()) return axis.status();
      ctx.output_types[0] =
          WithShape(DType::kInt64, ReducedShape(in, int64_t{1} << *axis, ctx.node.GetInt("keepdims", 1) != 0));
      return absl::OkStatus();
    };
    s.lower = [is_min](const Node& node) -> absl::StatusOr<KernelCall> {
      const int64_t axis = AxisAttr(node, 0, node.input(0));
      kiln_reduce_params params{};
      params.op = is_min;
      params.axis = axis;
      params.select_last_index = node.GetInt("select_last_index", 0);
      return CallWithParams<kernel::arg_reduce>(PassInputs(node, 1), params);
    };
    registry.Add(std::move(s));
  }

  registry.Add(OpSchema{"TopK", 1, 2, 0b10, InferTopK, LowerTopK});

  for (NamedCode def : {NamedCode{"Softmax", KILN_SOFTMAX}, NamedCode{"LogSoftmax", KILN_LOG_SOFTMAX},
                        NamedCode{"Hardmax", KILN_HARDMAX}}) {
    OpSchema s = Schema(def.name);
    s.infer = [](InferContext& ctx) -> absl::Status {
      if (auto st = RequireFloat(ctx); !st.ok()) return st;
      if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
      auto axis = NormalizeAxis(ctx.node, ctx.node.GetInt("axis", ctx.node.opset() < 13 ? 1 : -1),
                                static_cast<int64_t>(ctx.type(0).shape.size()));
      if (!axis.ok()) return axis.status();
      return SameAsInput0(ctx);
    };
    s.lower = [def](const Node& node) -> absl::StatusOr<KernelCall> {
      const bool coerce = node.opset() < 13;
      const int64_t axis = AxisAttr(node, coerce ? 1 : -1, node.input(0));
      kiln_reduce_params params{};
      params.op = def.code;
      params.axis = axis;
      params.coerce_2d = coerce;
      return CallWithParams<kernel::softmax>(PassInputs(node, 1), params);
    };
    registry.Add(std::move(s));
  }
}

}  // namespace kiln::ops
