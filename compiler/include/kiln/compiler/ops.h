// The operator table: for each supported ONNX op, how to infer its output types and how
// to lower it to a call into the kernel library. The reference interpreter, constant
// folding and codegen all go through this one table.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"

namespace kiln {

// What type inference sees of one node.
struct InferContext {
  const Node& node;
  std::vector<const TensorType*> input_types;  // nullptr for omitted optional inputs
  std::vector<const Tensor*> input_constants;  // nullptr unless the input is a constant
  std::vector<TensorType> output_types;        // to fill, one per node output

  const TensorType& type(size_t i) const { return *input_types[i]; }
  bool has_input(size_t i) const { return i < input_types.size() && input_types[i] != nullptr; }
  const Tensor* constant(size_t i) const { return i < input_constants.size() ? input_constants[i] : nullptr; }
};

// One operand of a kernel call: a node input, or a constant the lowering made.
struct KernelOperand {
  int node_input = -1;                     // index into node inputs, or -1
  std::shared_ptr<const Tensor> constant;  // when node_input == -1 (null: omitted input)
};

// A kernel's parameter struct (one per op family: compiler/kernels/include/kiln/kernels/),
// held as its bytes. The interpreter passes their address; codegen emits them as one
// constant of the struct's size and alignment. The struct is filled and read by field
// name on both sides, so a changed parameter is a compile error, not a shifted index.
class KernelParams {
 public:
  template <typename P>
  void Set(const P& params) {
    static_assert(std::is_trivially_copyable_v<P>, "kernel parameters are plain C structs");
    static_assert(alignof(P) <= alignof(uint64_t) && sizeof(P) % sizeof(uint64_t) == 0,
                  "kernel parameter structs are made of 8-byte fields");
    words_.assign(sizeof(P) / sizeof(uint64_t), 0);
    std::memcpy(words_.data(), &params, sizeof(P));
  }
  // The struct set last, as type P (a default P when the sizes differ): for the fast
  // lowerings that amend a call and for tests.
  template <typename P>
  P Get() const {
    P params{};
    if (words_.size() * sizeof(uint64_t) == sizeof(P)) std::memcpy(&params, words_.data(), sizeof(P));
    return params;
  }
  bool empty() const { return words_.empty(); }
  const void* data() const { return words_.empty() ? nullptr : words_.data(); }
  int64_t size_bytes() const { return static_cast<int64_t>(words_.size() * sizeof(uint64_t)); }

 private:
  std::vector<uint64_t> words_;  // 8-byte words keep the struct's alignment
};

// A call into the kernel library: kiln_k_<kernel>(inputs, outputs = node outputs, params).
struct KernelCall {
  std::string kernel;
  std::vector<KernelOperand> inputs;
  KernelParams params;
  // Outputs that alias input 0 (Reshape and friends): codegen may skip the copy.
  bool is_view = false;
  // Workspace the kernel needs during the call. Codegen passes it as one more output, a
  // u8 tensor of this many bytes after the node's outputs, placed in the arena by
  // plan-memory for the node's duration.
  int64_t scratch_bytes = 0;
  // The kernel takes its outputs' buffers from exec->alloc and sets their data and dims
  // itself (sequence and optional kernels, kiln/kernels/sequence.h): the run-time-shape
  // glue only reads them back.
  bool allocates_outputs = false;
};

// Dynamic shapes: a node whose output dims are known only at run time (symbolic input
// dims, or dims that follow from input data such as Reshape's shape) runs a shape function
// of the kernel library (kiln/kernels/shape.h) before its kernel. `shape` is that call:
// a shape_* kernel over node inputs, with its kiln_shape_params; `outputs` gives each
// output's element type and rank (its dims are filled in by running the shape function at
// compile time on what is known).
struct DynamicShape {
  KernelCall shape;
  std::vector<TensorType> outputs;
};

struct OpSchema {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;
  // Inputs that decide output shapes and must be known at compile time (bitmask).
  uint32_t constant_inputs = 0;
  std::function<absl::Status(InferContext&)> infer;
  // Requires static types on all inputs and outputs.
  std::function<absl::StatusOr<KernelCall>(const Node&)> lower;
  // Optional, for artifacts only: a faster lowering that may rewrite constant operands at
  // compile time (a Winograd weight transform) or ask for scratch; std::nullopt where it
  // does not apply. The interpreter always runs `lower`, so validation compares the two.
  std::function<absl::StatusOr<std::optional<KernelCall>>(const Node&)> lower_fast;
  // For ops whose result follows from input types alone (Shape, Size): computes outputs.
  std::function<absl::StatusOr<std::vector<Tensor>>(const Node&)> from_types;
  // Set for ops that compile with run-time shapes (compiler/ops/dynamic_ops.cc).
  std::function<absl::StatusOr<DynamicShape>(const InferContext&)> dynamic;
  // Draws random numbers (RandomUniform, Bernoulli, ...): not a function of its inputs, so
  // fold-constants, cse and compile-time evaluation of shape inputs leave it alone.
  bool random = false;
  // Inputs folded to constants at type inference when compile-time facts decide them (If's
  // condition computed from dims that are known), though the op compiles either way (bitmask).
  uint32_t decided_inputs = 0;
};

const OpSchema* FindOp(std::string_view name);

// Gather(Shape(%x), k) where the dims it picks are known, though others of %x are not (a
// run-time batch): those dims, as the Gather's value; std::nullopt for any other node.
//   %s = Shape(%x : f32[?,1]) ; %d = Gather(%s, 1)  =>  i64[] 1
std::optional<Tensor> KnownDimsPicked(const Node& node);

// The call the run-time-shape glue copies a sequence, an optional or a tensor of run-time
// rank out to a graph output with (sequence_ops.cc): one input, the value; one output, the
// slot.
KernelCall ValueExportCall();

// The kernel call codegen (and plan-memory, for its scratch) uses: lower_fast where it
// applies, otherwise lower.
absl::StatusOr<KernelCall> LowerForArtifact(const OpSchema& schema, const Node& node);
std::vector<std::string> SupportedOps();

// Whether an f32 Conv lowers to the 3-D Winograd (3x3x3, stride and dilation 1, one group,
// channels multiples of 8 and 16, its transformed weight within 64 MB; ops/nn_ops.cc).
bool TakesWinograd3d(const Node& node);

// "node 'conv_1' (Conv, opset 13)": the prefix of every error about a node.
std::string NodeLabel(const Node& node);

// One elementwise op seen as a scalar operation, for loop fusion: unary (a KILN_UNARY_*
// code from kernel_ops.h, with its alpha/beta) or binary (a KILN_BINARY_* code).
struct ScalarOp {
  bool binary = false;
  int code = 0;
  double alpha = 0, beta = 0;
};
// Set when `node` is a floating-point elementwise op (Add, Relu, Erf, ...) whose inputs and
// result share one element type, i.e. one that kiln.Elementwise can run in a fused loop.
std::optional<ScalarOp> AsScalarOp(const Node& node);
// A kiln.Elementwise node's program as the fused kernel and codegen run it: per op
// {binary, code, operand a, operand b}, from the node's `ops` (op names) and `operands`
// (two per op: inputs first, then earlier results; b is 0 for a unary op). The IR names
// the ops; only compiler/ops knows their kernel codes.
absl::StatusOr<std::vector<int64_t>> FusedProgram(const Node& node);

// kiln.Elementwise, the fused form: inputs are the chain's external operands; attributes
//   ops     = ["Mul", "Erf", ...]  the fused ops, in evaluation order (for people)
//   program = [binary, code, a, b] per op; operand k < #inputs is input k, otherwise the
//             result of op k - #inputs; the last op's result is the output
//   params  = [alpha, beta] per op
inline constexpr char kFusedElementwiseOp[] = "kiln.Elementwise";
// Its limits: external inputs and ops of one chain (the kernel's KILN_FUSED_MAX_*, checked
// in elementwise_ops.cc, so that passes need no kernel header).
inline constexpr size_t kFusedMaxInputs = 8;
inline constexpr size_t kFusedMaxOps = 32;

// f16 and bf16: the ops that move or reinterpret their elements natively (byte kernels,
// views, Cast) and the rule for every other op: it computes in f32. Such a node is typed
// as the op on f32 inputs with its float outputs in the narrow type, and the compiler's
// legalize-float16 pass writes it between Casts before anything lowers it.
bool IsNarrowFloat(DType dtype);
// An f32 value rounded to f16 (bf16) and back: Cast[to=f32](Cast[to=f16](x)) as one
// elementwise op that fused loops take in.
inline constexpr char kRoundToFloat16Op[] = "kiln.RoundToFloat16";
inline constexpr char kRoundToBFloat16Op[] = "kiln.RoundToBFloat16";
// The narrow float type the node computes on in f32, or kUndefined when it computes as it is.
DType NarrowFloatComputedInFloat32(const Node& node);

// Whether the node reads or makes a sequence or an optional (its kernel makes its outputs,
// sequence_ops.cc).
bool TouchesNonTensor(const Node& node);

// Whether the node's shapes are known only at run time: an input without static dims, or a
// shape-deciding input (OpSchema::constant_inputs) that is not a constant.
bool IsDynamicNode(const Node& node, const OpSchema& schema);

// Runs a shape function (DynamicShape::shape) on what is known at compile time: each
// input's dims and the data of constant inputs. An unknown dim goes in as a negative id,
// -1 for an anonymous one ("?"), -2, -3, ... for named symbols (`symbols` records which,
// when given), and a dim the function passes through keeps its id. Returns each output's
// dims, negative where they depend on an unknown; an error names the node when the known
// dims already disagree.
using SymbolIds = std::map<std::string, int64_t>;
absl::StatusOr<std::vector<std::vector<int64_t>>> EvaluateShape(const Node& node, const DynamicShape& shape,
                                                                SymbolIds* symbols = nullptr);

// A construct Kiln cannot compile: the node (or, with `op` empty, the graph input) it is
// in, and why, in words a person can act on.
struct NodeProblem {
  std::string node;
  std::string op;
  int opset = 0;
  std::string reason;
};
// "node 'n' (Op, opset k): reason", or "graph input 'x': reason".
std::string FormatProblem(const NodeProblem& problem);
// "3 constructs cannot be compiled:" and one indented line per problem (one: its line),
// the first kMaxListedProblems of them: an error message (a job's, too) stays readable.
inline constexpr size_t kMaxListedProblems = 100;
std::string FormatProblems(const std::vector<NodeProblem>& problems);

// InferTypes that goes on past a failure: every node whose op is unknown, whose type
// inference fails (a shape known only at run time that its op cannot take among them) or
// that has no kernel lowering becomes a problem, and nodes downstream of one are skipped
// (their cause is already listed).
std::vector<NodeProblem> CheckGraph(Graph& graph);

// Infers the types of every node output in order. Inputs listed as constant_inputs that
// are computed (for example Shape -> Gather -> Concat feeding a Reshape) are evaluated
// with the reference interpreter and replaced by constants.
absl::Status InferTypes(Graph& graph);

}  // namespace kiln
