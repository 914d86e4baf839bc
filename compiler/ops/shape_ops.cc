// Shape and data-movement ops: Shape/Size, Reshape family, Transpose, Slice,
// Expand, Concat/Split, Gather/Scatter families, Tile, Pad,
// DepthToSpace/SpaceToDepth, Trilu, and the generators ConstantOfShape, Range,
// EyeLike, OneHot, CumSum.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/kernels/movement.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

// A strided view copy: the lowering of Transpose, Slice, Expand and the
// depth/space ops.
absl::StatusOr<KernelCall> StridedCopy(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                                       int64_t offset) {
  if (dims.size() > KILN_MAX_RANK) {
    return absl::InvalidArgumentError(
        absl::StrCat("a strided copy of rank ", dims.size(), "; at most ", KILN_MAX_RANK));
  }
  kiln_strided_copy_params params{};
  params.rank = static_cast<int64_t>(dims.size());
  params.offset = offset;
  std::copy(dims.begin(), dims.end(), params.dims);
  std::copy(strides.begin(), strides.end(), params.strides);
  return CallWithParams<kernel::strided_copy>({KernelOperand{0, nullptr}}, params);
}

// Whether an input from `first` on is given but computed: then the node's shape function
// (compiler/ops/dynamic_ops.cc) reads it at run time and completes the kernel parameters
// that follow from it, so the lowering leaves them zero.
bool HasComputedInputs(const Node& node, size_t first) {
  for (size_t i = first; i < node.inputs().size(); ++i) {
    if (node.input(i) != nullptr && !node.input(i)->is_constant()) return true;
  }
  return false;
}

// ScatterElements' and ScatterND's `reduction` as
// kiln_movement_params.reduction.
absl::StatusOr<int64_t> ScatterReduction(const Node& node) {
  std::string r = node.GetString("reduction", "none");
  if (r == "none") return 0;
  if (r == "add") return 1;
  if (r == "mul") return 2;
  if (r == "max") return 3;
  if (r == "min") return 4;
  return NodeError(node, absl::StrCat("unknown reduction '", r, "'"));
}

kiln_movement_params Axis(int64_t axis) {
  kiln_movement_params params{};
  params.axis = axis;
  return params;
}

// The lowering of Split, Gather and GatherElements: kernel K on the node's
// first `num_inputs` inputs, reading the `axis` attribute (default 0) against
// input 0's rank.
template <typename K>
std::function<absl::StatusOr<KernelCall>(const Node&)> LowerWithAxis(size_t num_inputs) {
  return [num_inputs](const Node& node) -> absl::StatusOr<KernelCall> {
    return CallWithParams<K>(PassInputs(node, num_inputs), Axis(AxisAttr(node, 0, node.input(0))));
  };
}

// The lowering of the ops whose output is input 0's data seen with another
// shape.
absl::StatusOr<KernelCall> LowerToView(const Node&) {
  KernelCall call = Call<kernel::copy>({KernelOperand{0, nullptr}});
  call.is_view = true;
  return call;
}

// Per-axis slice parameters after ONNX's clamping rules.
struct SliceParams {
  std::vector<int64_t> dims, starts, steps;
};

absl::StatusOr<SliceParams> ComputeSlice(const Node& node, const std::vector<int64_t>& in_dims,
                                         const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                                         std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const int64_t rank = static_cast<int64_t>(in_dims.size());
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return NodeError(node, "starts, ends, axes and steps must have the same length");
  }
  SliceParams p{in_dims, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1)};
  for (size_t i = 0; i < axes.size(); ++i) {
    auto axis = NormalizeAxis(node, axes[i], rank, "slice axis");
    if (!axis.ok()) return axis.status();
    const int64_t dim = in_dims[*axis];
    const int64_t step = steps[i];
    if (step == 0) return NodeError(node, "slice step is 0");
    int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
    }
    int64_t len = step > 0 ? (end - start + step - 1) / step : (start - end + (-step) - 1) / (-step);
    p.dims[*axis] = std::max<int64_t>(len, 0);
    p.starts[*axis] = start;
    p.steps[*axis] = step;
  }
  return p;
}

absl::StatusOr<SliceParams> SliceFromNode(const Node& node, const std::vector<int64_t>& in_dims,
                                          const std::vector<const Tensor*>& constants) {
  if (node.opset() < 10) {
    return ComputeSlice(node, in_dims, node.GetInts("starts"), node.GetInts("ends"), node.GetInts("axes"), {});
  }
  for (size_t i = 1; i < 3; ++i) {
    if (constants[i] == nullptr) return NodeError(node, "starts and ends must be compile-time constants");
  }
  auto optional = [&](size_t i) -> std::vector<int64_t> {
    return i < constants.size() && constants[i] ? ToInts(*constants[i]) : std::vector<int64_t>{};
  };
  return ComputeSlice(node, in_dims, ToInts(*constants[1]), ToInts(*constants[2]), optional(3), optional(4));
}

absl::StatusOr<std::vector<int64_t>> ReshapeTarget(const Node& node, const std::vector<int64_t>& in_dims,
                                                   std::vector<int64_t> shape) {
  const bool allow_zero = node.GetInt("allowzero", 0) != 0;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= in_dims.size()) return NodeError(node, "shape has 0 at a position past the input rank");
      shape[i] = in_dims[i];
    }
    if (shape[i] == -1) {
      if (infer_at >= 0) return NodeError(node, "shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      return NodeError(node, absl::StrCat("shape has invalid dimension ", shape[i]));
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      return NodeError(node, absl::StrCat("shape [", absl::StrJoin(shape, ","), "] has more than 2^63 elements"));
    }
  }
  const int64_t total = NumElements(in_dims);
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0) {
      return NodeError(node,
                       absl::StrCat("cannot reshape ", total, " elements into [", absl::StrJoin(shape, ","), "]"));
    }
    shape[infer_at] = total / known;
  } else if (known != total) {
    return NodeError(node, absl::StrCat("cannot reshape ", total, " elements into [", absl::StrJoin(shape, ","), "]"));
  }
  return shape;
}

absl::StatusOr<std::vector<int64_t>> SqueezeAxes(const InferContext& ctx) {
  bool present = false;
  auto axes = IntsFromAttrOrInput(ctx, "axes", 1, &present);
  return axes;
}

}  // namespace

namespace {

void RegisterShape(Registry& registry) {
  OpSchema s = Schema("Shape", 1, 1);
  auto range = [](const Node& node, int64_t rank) {
    int64_t start = node.GetInt("start", 0), end = node.GetInt("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, 0, rank);
    return std::make_pair(start, std::max(start, end));
  };
  s.infer = [range](InferContext& ctx) -> absl::Status {
    if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
    auto [start, end] = range(ctx.node, static_cast<int64_t>(ctx.type(0).shape.size()));
    ctx.output_types[0] = TensorType::Static(DType::kInt64, {end - start});
    return absl::OkStatus();
  };
  s.from_types = [range](const Node& node) -> absl::StatusOr<std::vector<Tensor>> {
    const TensorType& type = node.input(0)->type();
    if (!type.IsStatic()) return NodeError(node, "input shape is not static");
    auto [start, end] = range(node, static_cast<int64_t>(type.shape.size()));
    Tensor t(DType::kInt64, {end - start});
    for (int64_t i = start; i < end; ++i) t.data_as<int64_t>()[i - start] = type.shape[i].size;
    std::vector<Tensor> out;
    out.push_back(std::move(t));
    return out;
  };
  registry.Add(std::move(s));
}

void RegisterSize(Registry& registry) {
  OpSchema s = Schema("Size", 1, 1);
  s.infer = [](InferContext& ctx) -> absl::Status {
    ctx.output_types[0] = TensorType::Static(DType::kInt64, {});
    return absl::OkStatus();
  };
  s.from_types = [](const Node& node) -> absl::StatusOr<std::vector<Tensor>> {
    const TensorType& type = node.input(0)->type();
    if (!type.IsStatic()) return NodeError(node, "input shape is not static");
    Tensor t(DType::kInt64, {});
    t.data_as<int64_t>()[0] = NumElements(type.StaticDims());
    std::vector<Tensor> out;
    out.push_back(std::move(t));
    return out;
  };
  registry.Add(std::move(s));
}

absl::Status InferReshape(InferContext& ctx) {
  std::vector<int64_t> shape;
  if (ctx.node.opset() < 5) {
    shape = ctx.node.GetInts("shape");
  } else {
    KILN_ASSIGN_OR_RETURN(shape, ConstantInts(ctx, 1, "shape"));
  }
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  auto dims = ReshapeTarget(ctx.node, ctx.type(0).StaticDims(), shape);
  if (!dims.ok()) return dims.status();
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, *dims);
  return absl::OkStatus();
}

void RegisterIdentityFlattenSqueeze(Registry& registry) {
  for (const char* name : {"Identity", "Flatten", "Squeeze", "Unsqueeze"}) {
    OpSchema s = Schema(name, 1, std::string(name) == "Squeeze" || std::string(name) == "Unsqueeze" ? 2 : 1, 0b10);
    std::string op = name;
    s.infer = [op](InferContext& ctx) -> absl::Status {
      if (op == "Identity") return SameAsInput0(ctx);
      if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
      const std::vector<Dim>& in = ctx.type(0).shape;
      const int64_t rank = static_cast<int64_t>(in.size());
      std::vector<Dim> out;
      if (op == "Flatten") {
        // Flatten's axis ranges over [-rank, rank]; a negative one counts from
        // rank.
        int64_t flat_axis = ctx.node.GetInt("axis", 1);
        if (flat_axis < 0) flat_axis += rank;
        if (flat_axis < 0 || flat_axis > rank)
          return NodeError(ctx.node,
                           absl::StrCat("axis ", ctx.node.GetInt("axis", 1), " is out of range for rank ", rank));
        const int64_t* axis = &flat_axis;
        if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
        int64_t outer = 1, inner = 1;
        for (int64_t i = 0; i < rank; ++i) (i < *axis ? outer : inner) *= in[i].size;
        out = {Dim::Known(outer), Dim::Known(inner)};
      } else if (op == "Squeeze") {
        auto axes = SqueezeAxes(ctx);
        if (!axes.ok()) return axes.status();
        std::vector<bool> drop(rank, false);
        for (int64_t a : *axes) {
          auto axis = NormalizeAxis(ctx.node, a, rank);
          if (!axis.ok()) return axis.status();
          if (in[*axis].known() && in[*axis].size != 1) {
            return NodeError(ctx.node, absl::StrCat("cannot squeeze axis ", a, " of size ", in[*axis].size));
          }
          drop[*axis] = true;
        }
        for (int64_t i = 0; i < rank; ++i) {
          bool squeeze = axes->empty() ? (in[i].known() && in[i].size == 1) : drop[i];
          if (!squeeze) out.push_back(in[i]);
        }
      } else {  // Unsqueeze
        auto axes = SqueezeAxes(ctx);
        if (!axes.ok()) return axes.status();
        const int64_t out_rank = rank + static_cast<int64_t>(axes->size());
        std::vector<bool> inserted(out_rank, false);
        for (int64_t a : *axes) {
          auto axis = NormalizeAxis(ctx.node, a, out_rank);
          if (!axis.ok()) return axis.status();
          if (inserted[*axis]) return NodeError(ctx.node, absl::StrCat("axis ", a, " repeated"));
          inserted[*axis] = true;
        }
        size_t next = 0;
        for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? Dim::Known(1) : in[next++]);
      }
      ctx.output_types[0] = WithShape(ctx.type(0).dtype, out);
      return absl::OkStatus();
    };
    s.lower = LowerToView;
    registry.Add(std::move(s));
  }
}

// Transpose's `perm`; by default the axes reversed.
std::vector<int64_t> TransposePerm(const Node& node, int64_t rank) {
  std::vector<int64_t> perm = node.GetInts("perm");
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  return perm;
}

absl::Status InferTranspose(InferContext& ctx) {
  if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
  const auto& in = ctx.type(0).shape;
  std::vector<int64_t> perm = TransposePerm(ctx.node, static_cast<int64_t>(in.size()));
  if (perm.size() != in.size()) return NodeError(ctx.node, "perm length does not match the input rank");
  std::vector<bool> seen(in.size(), false);
  std::vector<Dim> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[p]) {
      return NodeError(ctx.node, absl::StrCat("perm [", absl::StrJoin(perm, ","), "] is not a permutation"));
    }
    seen[p] = true;
    out.push_back(in[p]);
  }
  ctx.output_types[0] = WithShape(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerTranspose(const Node& node) {
  std::vector<int64_t> in = StaticDims(node.input(0));
  std::vector<int64_t> perm = TransposePerm(node, static_cast<int64_t>(in.size()));
  std::vector<int64_t> in_strides = ContiguousStrides(in), dims, strides;
  for (int64_t p : perm) {
    dims.push_back(in[p]);
    strides.push_back(in_strides[p]);
  }
  return StridedCopy(dims, strides, 0);
}

absl::Status InferSlice(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  auto p = SliceFromNode(ctx.node, ctx.type(0).StaticDims(), ctx.input_constants);
  if (!p.ok()) return p.status();
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, p->dims);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerSlice(const Node& node) {
  std::vector<int64_t> in = StaticDims(node.input(0));
  if (node.opset() >= 10 && HasComputedInputs(node, 1)) {
    return StridedCopy(in, std::vector<int64_t>(in.size(), 0), 0);  // completed by shape_slice
  }
  auto p = SliceFromNode(node, in, ConstantsOf(node));
  if (!p.ok()) return p.status();
  std::vector<int64_t> in_strides = ContiguousStrides(in), strides;
  int64_t offset = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    offset += p->starts[i] * in_strides[i];
    strides.push_back(p->steps[i] * in_strides[i]);
  }
  return StridedCopy(p->dims, strides, offset);
}

absl::Status InferExpand(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, ConstantInts(ctx, 1, "shape"));
  if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
  auto out = BroadcastShapes(ctx.node, ctx.type(0).shape, KnownDims(shape));
  if (!out.ok()) return out.status();
  ctx.output_types[0] = WithShape(ctx.type(0).dtype, *out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerExpand(const Node& node) {
  std::vector<int64_t> in = StaticDims(node.input(0)), out = StaticDims(node.output(0));
  std::vector<int64_t> in_strides = ContiguousStrides(in), strides(out.size(), 0);
  const size_t shift = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) strides[shift + i] = in[i] == 1 ? 0 : in_strides[i];
  return StridedCopy(out, strides, 0);
}

absl::Status InferConcat(InferContext& ctx) {
  for (size_t i = 0; i < ctx.input_types.size(); ++i) {
    if (auto st = RequireStatic(ctx, i); !st.ok()) return st;
  }
  std::vector<int64_t> out = ctx.type(0).StaticDims();
  auto axis = NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), static_cast<int64_t>(out.size()));
  if (!axis.ok()) return axis.status();
  for (size_t i = 1; i < ctx.input_types.size(); ++i) {
    std::vector<int64_t> d = ctx.type(i).StaticDims();
    if (d.size() != out.size())
      return NodeError(ctx.node, absl::StrCat("input ", i, " has rank ", d.size(), ", input 0 has ", out.size()));
    for (size_t k = 0; k < d.size(); ++k) {
      if (static_cast<int64_t>(k) != *axis && d[k] != out[k]) {
        return NodeError(ctx.node, absl::StrCat("input ", i, " dimension ", k, " is ", d[k], ", input 0 has ", out[k]));
      }
    }
    out[*axis] += d[*axis];
  }
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerConcat(const Node& node) {
  return CallWithParams<kernel::concat>(PassAllInputs(node), Axis(AxisAttr(node, 0, node.output(0))));
}

absl::Status InferSplit(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  std::vector<int64_t> in = ctx.type(0).StaticDims();
  auto axis = NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), static_cast<int64_t>(in.size()));
  if (!axis.ok()) return axis.status();
  bool present = false;
  auto split = IntsFromAttrOrInput(ctx, "split", 1, &present);
  if (!split.ok()) return split.status();
  const int64_t n = static_cast<int64_t>(ctx.output_types.size());
  std::vector<int64_t> sizes = *split;
  if ((!present || sizes.empty()) && ctx.node.has_attr("num_outputs")) {
    // Opset 18: num_outputs parts of ceil(size / num_outputs), the last one what is left.
    const int64_t parts = ctx.node.GetInt("num_outputs", 0);
    if (parts != n || parts <= 0 || parts > in[*axis]) {
      return NodeError(ctx.node,
                       absl::StrCat("num_outputs ", parts, " does not fit ", n, " outputs and axis size ", in[*axis]));
    }
    const int64_t part = (in[*axis] + parts - 1) / parts;
    sizes.assign(n, part);
    sizes.back() = in[*axis] - part * (n - 1);
    if (sizes.back() <= 0) {
      return NodeError(ctx.node, absl::StrCat("axis size ", in[*axis], " does not split into ", n, " parts of ", part,
                                              " and a smaller last one"));
    }
  } else if (!present || sizes.empty()) {
    if (in[*axis] % n != 0)
      return NodeError(ctx.node, absl::StrCat("axis size ", in[*axis], " does not split evenly into ", n));
    sizes.assign(n, in[*axis] / n);
  }
  int64_t total = 0;
  for (int64_t v : sizes) total += v;
  if (static_cast<int64_t>(sizes.size()) != n || total != in[*axis]) {
    return NodeError(ctx.node, absl::StrCat("split sizes [", absl::StrJoin(sizes, ","), "] do not cover axis size ",
                                            in[*axis], " in ", n, " outputs"));
  }
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> d = in;
    d[*axis] = sizes[i];
    ctx.output_types[i] = TensorType::Static(ctx.type(0).dtype, d);
  }
  return absl::OkStatus();
}

absl::Status InferGather(InferContext& ctx) {
  if (!ctx.type(0).has_shape || !ctx.type(1).has_shape) return NodeError(ctx.node, "input rank is unknown");
  const auto& data = ctx.type(0).shape;
  auto axis = NormalizeAxis(ctx.node, ctx.node.GetInt("axis", 0), static_cast<int64_t>(data.size()));
  if (!axis.ok()) return axis.status();
  std::vector<Dim> out(data.begin(), data.begin() + *axis);
  for (const Dim& d : ctx.type(1).shape) out.push_back(d);
  for (size_t i = *axis + 1; i < data.size(); ++i) out.push_back(data[i]);
  ctx.output_types[0] = WithShape(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::Status InferGatherElements(InferContext& ctx) {
  ctx.output_types[0] = WithShape(ctx.type(0).dtype, ctx.type(1).shape);
  return absl::OkStatus();
}

absl::Status InferGatherND(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  if (auto st = RequireStatic(ctx, 1); !st.ok()) return st;
  std::vector<int64_t> data = ctx.type(0).StaticDims(), idx = ctx.type(1).StaticDims();
  const int64_t batch_dims = ctx.node.GetInt("batch_dims", 0);
  const int64_t depth = idx.back();
  if (batch_dims + depth > static_cast<int64_t>(data.size()))
    return NodeError(ctx.node, "index depth exceeds data rank");
  std::vector<int64_t> out(idx.begin(), idx.end() - 1);
  for (size_t i = batch_dims + depth; i < data.size(); ++i) out.push_back(data[i]);
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerGatherND(const Node& node) {
  kiln_movement_params params{};
  params.batch_dims = node.GetInt("batch_dims", 0);
  return CallWithParams<kernel::gather_nd>(PassInputs(node, 2), params);
}

void RegisterScatterElements(Registry& registry) {
  for (const char* name : {"ScatterElements", "Scatter"}) {
    OpSchema s = Schema(name, 3, 3);
    s.infer = SameAsInput0;
    s.lower = [](const Node& node) -> absl::StatusOr<KernelCall> {
      kiln_movement_params params = Axis(AxisAttr(node, 0, node.input(0)));
      KILN_ASSIGN_OR_RETURN(params.reduction, ScatterReduction(node));
      return CallWithParams<kernel::scatter_elements>(PassInputs(node, 3), params);
    };
    registry.Add(std::move(s));
  }
}

absl::StatusOr<KernelCall> LowerScatterND(const Node& node) {
  kiln_movement_params params{};
  KILN_ASSIGN_OR_RETURN(params.reduction, ScatterReduction(node));
  return CallWithParams<kernel::scatter_nd>(PassInputs(node, 3), params);
}

absl::Status InferTile(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> reps, ConstantInts(ctx, 1, "repeats"));
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  std::vector<int64_t> in = ctx.type(0).StaticDims();
  if (reps.size() != in.size()) return NodeError(ctx.node, "repeats length does not match the input rank");
  for (size_t i = 0; i < in.size(); ++i) in[i] *= reps[i];
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, in);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerTile(const Node& node) { return Call<kernel::tile>(PassInputs(node, 1)); }

// Pad's begin and end amounts for every axis, from the attribute (before opset 11) or
// the constant inputs pads and axes.
absl::StatusOr<std::vector<int64_t>> PadAmounts(const Node& node, const std::vector<const Tensor*>& constants,
                                                int64_t rank) {
  std::vector<int64_t> pads;
  if (node.opset() < 11) {
    pads = node.GetInts("pads");
  } else {
    if (constants.size() < 2 || constants[1] == nullptr) return NodeError(node, "pads must be a compile-time constant");
    pads = ToInts(*constants[1]);
  }
  if (constants.size() > 3 && constants[3] != nullptr) {  // axes (opset 18): pads for those axes only
    std::vector<int64_t> axes = ToInts(*constants[3]), full(2 * rank, 0);
    if (pads.size() != 2 * axes.size()) {
      return NodeError(node, absl::StrCat("pads has ", pads.size(), " entries for ", axes.size(), " axes; expected ",
                                          2 * axes.size()));
    }
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < axes.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(const int64_t a, NormalizeAxis(node, axes[i], rank, "pad axis"));
      if (seen[a]) return NodeError(node, absl::StrCat("pad axis ", axes[i], " is given twice"));
      seen[a] = true;
      full[a] = pads[i];
      full[a + rank] = pads[i + axes.size()];
    }
    pads = full;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank) {
    return NodeError(node, absl::StrCat("pads has ", pads.size(), " entries, expected ", 2 * rank));
  }
  return pads;
}

absl::Status InferPad(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  std::vector<int64_t> in = ctx.type(0).StaticDims();
  const int64_t rank = static_cast<int64_t>(in.size());
  auto pads = PadAmounts(ctx.node, ctx.input_constants, rank);
  if (!pads.ok()) return pads.status();
  for (int64_t i = 0; i < rank; ++i) in[i] += (*pads)[i] + (*pads)[i + rank];
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, in);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerPad(const Node& node) {
  std::vector<int64_t> in = StaticDims(node.input(0));
  const int64_t rank = static_cast<int64_t>(in.size());
  const bool computed = node.input(1) != nullptr && !node.input(1)->is_constant();
  // Computed pads (or axes): shape_pad completes pads_begin at run time.
  absl::StatusOr<std::vector<int64_t>> pads = std::vector<int64_t>(2 * rank, 0);
  if (!computed && !HasComputedInputs(node, 3)) pads = PadAmounts(node, ConstantsOf(node), rank);
  if (!pads.ok()) return pads.status();
  const std::string mode = node.GetString("mode", "constant");
  constexpr NamedCode kModes[] = {
      {"constant", KILN_PAD_CONSTANT}, {"reflect", KILN_PAD_REFLECT}, {"edge", KILN_PAD_EDGE}, {"wrap", KILN_PAD_WRAP}};
  const NamedCode* found =
      std::find_if(std::begin(kModes), std::end(kModes), [&](const NamedCode& m) { return mode == m.name; });
  if (found == std::end(kModes) || (found->code == KILN_PAD_WRAP && node.opset() < 19))
    return NodeError(node, absl::StrCat("unknown pad mode '", mode, "'"));
  const int64_t code = found->code;
  if (rank > KILN_MAX_RANK) return NodeError(node, absl::StrCat("rank above ", KILN_MAX_RANK, " is not supported"));
  kiln_pad_params params{};
  params.mode = code;
  std::copy(pads->begin(), pads->begin() + rank, params.pads_begin);
  KernelCall call = CallWithParams<kernel::pad>(PassInputs(node, 1), params);
  call.inputs.push_back(KernelOperand{});
  if (node.opset() < 11) {
    auto value = std::make_shared<Tensor>(node.input(0)->type().dtype, std::vector<int64_t>{});
    double v = node.GetFloat("value", 0.0);
    if (value->dtype() == DType::kFloat32)
      value->data_as<float>()[0] = static_cast<float>(v);
    else if (value->dtype() == DType::kFloat64)
      value->data_as<double>()[0] = v;
    call.inputs.push_back(KernelOperand{-1, value});
  } else {
    call.inputs.push_back(node.input(2) ? KernelOperand{2, nullptr} : KernelOperand{});
  }
  return call;
}

void RegisterDepthToSpaceAndBack(Registry& registry) {
  for (const char* name : {"DepthToSpace", "SpaceToDepth"}) {
    OpSchema s = Schema(name, 1, 1);
    const bool to_space = std::string(name) == "DepthToSpace";
    s.infer = [to_space](InferContext& ctx) -> absl::Status {
      if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
      std::vector<int64_t> d = ctx.type(0).StaticDims();
      const int64_t b = ctx.node.GetInt("blocksize", 0);
      if (d.size() != 4 || b <= 0) return NodeError(ctx.node, "needs a 4-D input and a positive blocksize");
      if (to_space) {
        if (d[1] % (b * b) != 0) return NodeError(ctx.node, "channels not divisible by blocksize^2");
        d = {d[0], d[1] / (b * b), d[2] * b, d[3] * b};
      } else {
        if (d[2] % b || d[3] % b) return NodeError(ctx.node, "height/width not divisible by blocksize");
        d = {d[0], d[1] * b * b, d[2] / b, d[3] / b};
      }
      ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, d);
      return absl::OkStatus();
    };
    s.lower = [to_space](const Node& node) -> absl::StatusOr<KernelCall> {
      std::vector<int64_t> d = StaticDims(node.input(0));
      const int64_t b = node.GetInt("blocksize", 0), N = d[0], C = d[1], H = d[2], W = d[3];
      if (to_space) {
        const int64_t c = C / (b * b);
        const bool crd = node.GetString("mode", "DCR") == "CRD";
        // Input seen as [N, b, b, c, H, W] (DCR) or [N, c, b, b, H, W] (CRD).
        std::vector<int64_t> view =
            crd ? std::vector<int64_t>{N, c, b, b, H, W} : std::vector<int64_t>{N, b, b, c, H, W};
        std::vector<int64_t> st = ContiguousStrides(view);
        std::vector<int64_t> strides = crd ? std::vector<int64_t>{st[0], st[1], st[4], st[2], st[5], st[3]}
                                           : std::vector<int64_t>{st[0], st[3], st[4], st[1], st[5], st[2]};
        return StridedCopy({N, c, H, b, W, b}, strides, 0);
      }
      // Input seen as [N, C, H/b, b, W/b, b]; output is [N, b, b, C, H/b, W/b].
      std::vector<int64_t> st = ContiguousStrides({N, C, H / b, b, W / b, b});
      return StridedCopy({N, b, b, C, H / b, W / b}, {st[0], st[3], st[5], st[1], st[2], st[4]}, 0);
    };
    registry.Add(std::move(s));
  }
}

// A constant k goes into the parameters; a computed one is the kernel's input 1, read at
// run time (the output shape does not depend on it).
absl::StatusOr<KernelCall> LowerTrilu(const Node& node) {
  kiln_movement_params params{};
  params.upper = node.GetInt("upper", 1);
  const Value* k = node.inputs().size() > 1 ? node.input(1) : nullptr;
  if (k != nullptr && k->is_constant()) params.k = k->constant()->GetAsInt64(0);
  return CallWithParams<kernel::trilu>(PassInputs(node, k != nullptr && !k->is_constant() ? 2 : 1), params);
}

absl::Status InferConstantOfShape(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, ConstantInts(ctx, 0, "shape"));
  const Tensor* value = ctx.node.GetTensor("value");
  ctx.output_types[0] = TensorType::Static(value ? value->dtype() : DType::kFloat32, shape);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerConstantOfShape(const Node& node) {
  auto value = std::make_shared<Tensor>(node.output(0)->type().dtype, std::vector<int64_t>{});
  if (const Tensor* given = node.GetTensor("value")) {
    std::memcpy(value->data(), given->data(), DTypeSize(given->dtype()));
  }
  return Call<kernel::fill>({KernelOperand{-1, value}});
}

absl::Status InferRange(InferContext& ctx) {
  double v[3];
  for (size_t i = 0; i < 3; ++i) {
    auto t = RequireConstant(ctx, i, i == 0 ? "start" : i == 1 ? "limit" : "delta");
    if (!t.ok()) return t.status();
    v[i] = (*t)->GetAsDouble(0);
  }
  if (v[2] == 0) return NodeError(ctx.node, "delta is 0");
  const int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((v[1] - v[0]) / v[2])), 0);
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, {n});
  return absl::OkStatus();
}

absl::Status InferEyeLike(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  if (ctx.type(0).shape.size() != 2) return NodeError(ctx.node, "input must be 2-D");
  ctx.output_types[0] = ctx.type(0);
  if (ctx.node.has_attr("dtype")) ctx.output_types[0].dtype = static_cast<DType>(ctx.node.GetInt("dtype", 1));
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerEyeLike(const Node& node) {
  kiln_movement_params params{};
  params.k = node.GetInt("k", 0);
  return CallWithParams<kernel::eye_like>({}, params);
}

absl::Status InferOneHot(InferContext& ctx) {
  auto depth = RequireConstant(ctx, 1, "depth");
  if (!depth.ok()) return depth.status();
  if (!ctx.type(0).has_shape) return NodeError(ctx.node, "input rank is unknown");
  std::vector<Dim> out = ctx.type(0).shape;
  auto axis = NormalizeAxis(ctx.node, ctx.node.GetInt("axis", -1), static_cast<int64_t>(out.size()) + 1);
  if (!axis.ok()) return axis.status();
  out.insert(out.begin() + *axis, Dim::Known(static_cast<int64_t>((*depth)->GetAsDouble(0))));
  ctx.output_types[0] = WithShape(ctx.type(2).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerOneHot(const Node& node) {
  const int64_t axis = AxisAttr(node, -1, node.output(0));
  return CallWithParams<kernel::one_hot>(PassInputs(node, 3), Axis(axis));
}

absl::Status InferCumSum(InferContext& ctx) {
  if (const Tensor* axis = ctx.constant(1); axis != nullptr && ctx.type(0).has_shape) {
    KILN_RETURN_IF_ERROR(
        NormalizeAxis(ctx.node, axis->GetAsInt64(0), static_cast<int64_t>(ctx.type(0).shape.size())).status());
  }
  return SameAsInput0(ctx);
}

// A constant axis goes into the parameters; a computed one is the kernel's input 1, read
// and checked at run time (the output shape does not depend on it).
absl::StatusOr<KernelCall> LowerCumSum(const Node& node) {
  kiln_movement_params params{};
  params.exclusive = node.GetInt("exclusive", 0);
  params.reverse = node.GetInt("reverse", 0);
  if (!node.input(1)->is_constant()) return CallWithParams<kernel::cumsum>(PassInputs(node, 2), params);
  params.axis = node.input(1)->constant()->GetAsInt64(0);
  if (params.axis < 0) params.axis += static_cast<int64_t>(StaticDims(node.input(0)).size());
  return CallWithParams<kernel::cumsum>(PassInputs(node, 1), params);
}

// ReverseSequence: X [time, batch, ...] or [batch, time, ...] (time_axis, batch_axis: 0
// and 1 in either order) and sequence_lens [batch].
absl::Status InferReverseSequence(InferContext& ctx) {
  if (auto st = RequireStaticInputs(ctx, {0, 1}); !st.ok()) return st;
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  const int64_t time = ctx.node.GetInt("time_axis", 0), batch = ctx.node.GetInt("batch_axis", 1);
  if (x.size() < 2 || time + batch != 1 || time < 0 || batch < 0) {
    return NodeError(ctx.node, "time_axis and batch_axis must be 0 and 1 (in either order) of an input of rank >= 2");
  }
  if (ctx.type(1).StaticDims() != std::vector<int64_t>{x[batch]} || ctx.type(1).dtype != DType::kInt64) {
    return NodeError(ctx.node, absl::StrCat("sequence_lens must be [", x[batch], "] of int64"));
  }
  return SameAsInput0(ctx);
}

absl::StatusOr<KernelCall> LowerReverseSequence(const Node& node) {
  kiln_movement_params params = Axis(node.GetInt("time_axis", 0));
  params.batch_axis = node.GetInt("batch_axis", 1);
  return CallWithParams<kernel::reverse_sequence>(PassInputs(node, 2), params);
}

}  // namespace

void RegisterShapeOps(Registry& registry) {
  for (auto add : {RegisterShape, RegisterSize, RegisterIdentityFlattenSqueeze, RegisterScatterElements,
                   RegisterDepthToSpaceAndBack}) {
    add(registry);
  }
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"Reshape", 1, 2, 0b10, InferReshape, LowerToView},
      {"Transpose", 1, 1, 0, InferTranspose, LowerTranspose},
      {"Slice", 1, 5, 0b11110, InferSlice, LowerSlice},
      {"Expand", 2, 2, 0b10, InferExpand, LowerExpand},
      {"Concat", 1, 1 << 20, 0, InferConcat, LowerConcat},
      {"Split", 1, 2, 0b10, InferSplit, LowerWithAxis<kernel::split>(1)},
      {"Gather", 2, 2, 0, InferGather, LowerWithAxis<kernel::gather>(2)},
      {"GatherElements", 2, 2, 0, InferGatherElements, LowerWithAxis<kernel::gather_elements>(2)},
      {"GatherND", 2, 2, 0, InferGatherND, LowerGatherND},
      {"ScatterND", 3, 3, 0, SameAsInput0, LowerScatterND},
      {"Tile", 2, 2, 0b10, InferTile, LowerTile},
      {"Pad", 1, 4, 0b1010, InferPad, LowerPad},
      {"Trilu", 1, 2, 0, SameAsInput0, LowerTrilu},
      {"ConstantOfShape", 1, 1, 0b1, InferConstantOfShape, LowerConstantOfShape},
      {"Range", 3, 3, 0b111, InferRange, LowerToKernel<kernel::range>},
      {"EyeLike", 1, 1, 0, InferEyeLike, LowerEyeLike},
      {"OneHot", 3, 3, 0b10, InferOneHot, LowerOneHot},
      {"CumSum", 2, 2, 0, InferCumSum, LowerCumSum},
      {"ReverseSequence", 2, 2, 0, InferReverseSequence, LowerReverseSequence},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
