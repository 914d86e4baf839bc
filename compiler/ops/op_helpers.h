// Helpers shared by the op definitions in compiler/ops/*.cc (private to the op table).
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernel_ops.h"
#include "kiln/common/status.h"
#include "kiln/compiler/ops.h"
#include "kiln/kernels/conv.h"
#include "kiln/kernels/elementwise.h"
#include "kiln/kernels/gemm.h"
#include "kiln/kernels/linalg.h"
#include "kiln/kernels/loss.h"
#include "kiln/kernels/lowbit.h"
#include "kiln/kernels/movement.h"
#include "kiln/kernels/norm.h"
#include "kiln/kernels/params.h"
#include "kiln/kernels/pool.h"
#include "kiln/kernels/quant.h"
#include "kiln/kernels/random.h"
#include "kiln/kernels/reduce.h"
#include "kiln/kernels/resize.h"
#include "kiln/kernels/rnn.h"
#include "kiln/kernels/sampling.h"
#include "kiln/kernels/sequence.h"
#include "kiln/kernels/shape.h"
#include "kiln/kernels/signal.h"
#include "kiln/kernels/sparse.h"
#include "kiln/kernels/spatial.h"
#include "kiln/kernels/strings.h"

namespace kiln::ops {

class Registry {
 public:
  void Add(OpSchema schema);
};

void RegisterElementwiseOps(Registry& registry);
void RegisterShapeOps(Registry& registry);
void RegisterReduceOps(Registry& registry);
void RegisterNnOps(Registry& registry);
void RegisterLayoutOps(Registry& registry);
void RegisterQuantOps(Registry& registry);
void RegisterRnnOps(Registry& registry);
void RegisterSelectOps(Registry& registry);
void RegisterControlOps(Registry& registry);
// After the others: it extends Cast and CastLike to strings.
void RegisterStringOps(Registry& registry);
// After the elementwise ops: it extends Equal to strings (text_ops.cc).
void RegisterTextOps(Registry& registry);
// After those: float8, int4 and uint4 for Cast, CastLike, QuantizeLinear and DequantizeLinear,
// and every other op's refusal of them (lowbit_ops.cc).
void RegisterLowBitOps(Registry& registry);
// A node of an op that does not take float8 / int4 / uint4 with such an input: the error
// naming node, op and type (type inference checks it first, run-time shape rules included).
absl::Status RefuseLowBitInputs(const Node& node);
// A cast's target: `to`, or CastLike's second input's element type (from the inference
// context's types when given, else the node's).
DType CastTarget(const Node& node, const InferContext* ctx);
// The op table, by name.
std::map<std::string, OpSchema>& Table();
// After registration: the run-time shape rules (OpSchema::dynamic) of the ops that have one.
void AttachDynamicShapes(std::map<std::string, OpSchema>& table);
// Resize's and Upsample's shape-function parameters (shape_resize): the resized axes as
// `ints`, then at ints[KILN_MAX_RANK] the scales input, the sizes input (-1: none) and the
// keep_aspect_ratio_policy (kiln_resize_aspect).
absl::StatusOr<kiln_shape_params> ResizeShapeParams(const Node& node, int64_t rank);
// An infer function for ops whose run-time rule (OpSchema::dynamic) also gives their static
// shapes: the rule's shape function run on the constant inputs.
absl::Status InferByDynamicRule(InferContext& ctx);
// The unary elementwise ops (Relu, Exp, ...): one kernel, one shape.
std::vector<std::string> UnaryOpNames();
void RegisterResizeOps(Registry& registry);
void RegisterLossOps(Registry& registry);
void RegisterSamplingOps(Registry& registry);
void RegisterLinalgOps(Registry& registry);
void RegisterOpset18Ops(Registry& registry);
void RegisterRandomOps(Registry& registry);
void RegisterSignalOps(Registry& registry);
void RegisterSpatialOps(Registry& registry);
// Run-time shape rules of spatial_ops.cc, attached with the others in dynamic_ops.cc.
absl::StatusOr<DynamicShape> MaxRoiPoolShapeRule(const InferContext& ctx);
// For run-time shape rules (defined in dynamic_ops.cc): input i's rank, an error naming the
// node when it is unknown; and a type of `rank` dims all known only at run time.
absl::StatusOr<int64_t> RankOf(const InferContext& ctx, size_t i);
TensorType RankOnly(DType dtype, int64_t rank);
absl::StatusOr<DynamicShape> Col2ImShapeRule(const InferContext& ctx);
absl::StatusOr<DynamicShape> AffineGridShapeRule(const InferContext& ctx);
absl::StatusOr<DynamicShape> GridSampleShapeRule(const InferContext& ctx);     // sampling_ops.cc
absl::StatusOr<DynamicShape> CenterCropPadShapeRule(const InferContext& ctx);  // opset18_ops.cc
void RegisterSequenceOps(Registry& registry);                                  // sequence_ops.cc

// Each op file lists its single ops as rows of an OpSchema table, {name, min_inputs,
// max_inputs, constant_inputs, infer, lower[, lower_fast]} over named Infer*/Lower*
// functions, and registers its op families (one inference and lowering over a table of
// names and kernel codes) and the ops that need more (from_types, shared helpers) in
// registration functions that start from Schema().
//
// A schema for `name` taking `min_inputs` to `max_inputs` inputs, of which those in the
// `constant_inputs` bitmask must be known at compile time; infer and lower still to set.
OpSchema Schema(const char* name, int min_inputs = 1, int max_inputs = 1, uint32_t constant_inputs = 0);

// A name in an op family's table (an op, a fused activation) and the kernel's code for it
// (KILN_REDUCE_SUM, KILN_UNARY_RELU, ...).
struct NamedCode {
  const char* name;
  int code;
};

// The code of string attribute `attr` (`fallback` when absent) among `names`; another name
// is an error naming the node, the attribute and the choices.
absl::StatusOr<int64_t> NamedAttr(const Node& node, const char* attr, const char* fallback, const NamedCode* names,
                                  size_t count);
template <size_t N>
absl::StatusOr<int64_t> NamedAttr(const Node& node, const char* attr, const char* fallback,
                                  const NamedCode (&names)[N]) {
  return NamedAttr(node, attr, fallback, names, N);
}

inline absl::Status NodeError(const Node& node, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": ", message));
}

// Normalises a possibly negative axis against `rank`; error names the node.
absl::StatusOr<int64_t> NormalizeAxis(const Node& node, int64_t axis, int64_t rank, const char* what = "axis");

// Numpy-style broadcast of two shapes.
absl::StatusOr<std::vector<Dim>> BroadcastShapes(const Node& node, const std::vector<Dim>& a,
                                                 const std::vector<Dim>& b);

// Reads a constant integer tensor (axes, shape, pads) into a vector.
std::vector<int64_t> ToInts(const Tensor& tensor);

// One tag per kernel of kernel_list.inc: kernel::conv::kName is "conv", kernel::conv::Params
// the struct it reads (void for none).
namespace kernel {
#define NONE void
#define X(name, typing, source, params)    \
  struct name {                            \
    static constexpr char kName[] = #name; \
    using Params = params;                 \
  };
#include "kernel_list.inc"
#undef X
#undef NONE
}  // namespace kernel

// A call of kernel K with the parameter struct K reads: passing another struct, or none to
// a kernel that reads one, does not compile.
template <typename K>
KernelCall CallWithParams(std::vector<KernelOperand> inputs, const typename K::Params& params) {
  KernelCall call{K::kName, std::move(inputs)};
  call.params.Set(params);
  return call;
}
template <typename K>
KernelCall Call(std::vector<KernelOperand> inputs) {
  static_assert(std::is_void_v<typename K::Params>, "this kernel reads a parameter struct: use CallWithParams");
  return KernelCall{K::kName, std::move(inputs)};
}

// Kernel operands that pass node inputs [0, n) through unchanged.
std::vector<KernelOperand> PassInputs(const Node& node, size_t n);
std::vector<KernelOperand> PassAllInputs(const Node& node);

// The lowering of an op that is kernel K applied to all the node's inputs, K reading no
// parameter struct (OpSchema::lower = LowerToKernel<kernel::tile>).
template <typename K>
absl::StatusOr<KernelCall> LowerToKernel(const Node& node) {
  return Call<K>(PassAllInputs(node));
}

std::vector<int64_t> StaticDims(const Value* value);
// The node's `axis` attribute (`fallback` when absent), a negative one counted from the end
// of `value`'s static rank: the lowerings' form, after type inference checked the range.
inline int64_t AxisAttr(const Node& node, int64_t fallback, const Value* value) {
  int64_t axis = node.GetInt("axis", fallback);
  if (axis < 0) axis += static_cast<int64_t>(StaticDims(value).size());
  return axis;
}
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& dims);

// Requires a constant input; error says which input must be constant.
absl::StatusOr<const Tensor*> RequireConstant(const InferContext& ctx, size_t i, const char* what);
// The ints of constant input i (axes, shape, repeats); RequireConstant's error otherwise.
absl::StatusOr<std::vector<int64_t>> ConstantInts(const InferContext& ctx, size_t i, const char* what);

// Constant inputs of a node (nullptr where an input is not constant or omitted).
std::vector<const Tensor*> ConstantsOf(const Node& node);

// Input i must have a fully static shape / a float element type (f32, f64).
absl::Status RequireStatic(const InferContext& ctx, size_t i);
absl::Status RequireFloat(const InferContext& ctx);
// Each of `inputs` must have a fully static shape (the first that has not is the error).
absl::Status RequireStaticInputs(const InferContext& ctx, std::initializer_list<size_t> inputs);

// Output 0 gets input 0's type.
absl::Status SameAsInput0(InferContext& ctx);
// Input 0 must have a float element type; output 0 gets its type.
absl::Status SameFloatTypeAsInput0(InferContext& ctx);
TensorType WithShape(DType dtype, std::vector<Dim> shape);
std::vector<Dim> KnownDims(const std::vector<int64_t>& dims);

// Whether the node's attribute or input gives the value (attribute in old opsets,
// input in newer ones): returns the ints of whichever is present.
absl::StatusOr<std::vector<int64_t>> IntsFromAttrOrInput(const InferContext& ctx, const char* attr, size_t input,
                                                         bool* present);

// Spatial window of a Conv/Pool node after auto_pad: the parameters and output extents
// (nn_ops.cc).
struct WindowParams {
  std::vector<int64_t> kernel, strides, pads_begin, pads_end, dilations, out;
};
absl::StatusOr<WindowParams> ComputeWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                           const std::vector<int64_t>& kernel, bool ceil_mode);
// The kernels' window struct; error (naming the node) past KILN_MAX_SPATIAL dims.
absl::StatusOr<kiln_window> KernelWindow(const Node& node, const WindowParams& w);
// The epilogue activation the fuse pass named in `kiln.activation` (none: code -1); an
// unknown name is an error naming the node.
absl::StatusOr<kiln_activation> FusedActivation(const Node& node);

// Artifacts: a MatMul or Gemm by a constant weight mostly made of zero 1x16 blocks, on the
// block-sparse kernel (sparse_lowering.cc); std::nullopt where the dense kernel is faster.
absl::StatusOr<std::optional<KernelCall>> LowerSparseMatMul(const Node& node);
// The spatial dims of an N, C, spatial... shape.
std::vector<int64_t> Spatial(const std::vector<int64_t>& dims);
// Conv's output dims [N, OC, spatial...] for static X and W dims, after Conv's checks
// (rank, group, kernel_shape; explicit or auto pads); errors name the node.
absl::StatusOr<std::vector<int64_t>> ConvOutputDims(const Node& node, const std::vector<int64_t>& x,
                                                    const std::vector<int64_t>& w);
// numpy.matmul's result shape for static operand dims (1-D operands promoted and their
// unit dim dropped again); the error names the node.
absl::StatusOr<std::vector<Dim>> MatMulOutputShape(const Node& node, std::vector<int64_t> a, std::vector<int64_t> b);
// A matrix product's shape for the kernels (numpy matmul broadcasting; 1-D operands
// promoted); error past KILN_MAX_RANK batch dims.
absl::StatusOr<kiln_matmul_shape> MatMulShape(const Node& node, std::vector<int64_t> a, std::vector<int64_t> b);

}  // namespace kiln::ops
