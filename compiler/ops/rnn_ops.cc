// The recurrent ops RNN, GRU and LSTM: one type inference and one lowering, to the rnn
// kernel (kernels/rnn/rnn.cc), over a table of the three cells. The attributes become
// kiln_rnn_params; sizes stay in the tensors and sequence_lens stays a run-time input.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <variant>

#include "op_helpers.h"

namespace kiln::ops {
namespace {

struct CellDef {
  const char* op;
  int64_t cell;  // KILN_RNN_CELL_*
  int64_t gates;
  int max_inputs;
  std::vector<const char*> default_activations;  // one direction's, in ONNX's order
};

const std::vector<CellDef>& Cells() {
  static const auto* cells = new std::vector<CellDef>{
      {"RNN", KILN_RNN_CELL_SIMPLE, 1, 6, {"Tanh"}},
      {"GRU", KILN_RNN_CELL_GRU, 3, 6, {"Sigmoid", "Tanh"}},
      {"LSTM", KILN_RNN_CELL_LSTM, 4, 8, {"Sigmoid", "Tanh", "Tanh"}},
  };
  return *cells;
}

const CellDef& CellOf(const Node& node) {
  for (const CellDef& def : Cells()) {
    if (node.op() == def.op) return def;
  }
  return Cells().front();
}

// The activations ONNX's recurrent ops accept: the kernel's code, whether the function
// takes alpha and beta from activation_alpha / activation_beta (each consumes the next
// value of its list, in activation order, as onnxruntime does) and their defaults (the
// corresponding ONNX operators').
struct ActivationDef {
  const char* name;
  int64_t code;
  bool takes_alpha, takes_beta;
  double alpha, beta;
};

constexpr ActivationDef kActivations[] = {
    {"Relu", KILN_UNARY_RELU, false, false, 0, 0},
    {"Tanh", KILN_UNARY_TANH, false, false, 0, 0},
    {"Sigmoid", KILN_UNARY_SIGMOID, false, false, 0, 0},
    {"Affine", KILN_RNN_ACT_AFFINE, true, true, 1.0, 0.0},
    {"LeakyRelu", KILN_UNARY_LEAKY_RELU, true, false, 0.01, 0},
    {"ThresholdedRelu", KILN_UNARY_THRESHOLDED_RELU, true, false, 1.0, 0},
    {"ScaledTanh", KILN_RNN_ACT_SCALED_TANH, true, true, 1.0, 1.0},
    {"HardSigmoid", KILN_UNARY_HARD_SIGMOID, true, true, 0.2, 0.5},
    {"Elu", KILN_UNARY_ELU, true, false, 1.0, 0},
    {"Softsign", KILN_UNARY_SOFTSIGN, false, false, 0, 0},
    {"Softplus", KILN_UNARY_SOFTPLUS, false, false, 0, 0},
};

const ActivationDef* FindActivation(const std::string& name) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
    return s;
  };
  for (const ActivationDef& def : kActivations) {
    if (lower(def.name) == lower(name)) return &def;
  }
  return nullptr;
}

std::vector<std::string> StringsAttr(const Node& node, const char* key) {
  auto it = node.attrs().find(key);
  if (it == node.attrs().end()) return {};
  if (const auto* strings = std::get_if<std::vector<std::string>>(&it->second)) return *strings;
  return {};
}

// Fills params.activations from the activations, activation_alpha and activation_beta
// attributes (one direction's list serves both directions of a bidirectional node).
absl::Status FillActivations(const Node& node, const CellDef& def, int64_t directions, kiln_rnn_params& params) {
  std::vector<std::string> names = StringsAttr(node, "activations");
  const size_t per_direction = def.default_activations.size();
  if (names.empty()) names.assign(def.default_activations.begin(), def.default_activations.end());
  if (names.size() == per_direction && directions == 2) {
    const std::vector<std::string> forward = names;  // (inserting a vector's own range is undefined)
    names.insert(names.end(), forward.begin(), forward.end());
  }
  if (names.size() != per_direction * static_cast<size_t>(directions)) {
    return NodeError(node, absl::StrCat("has ", names.size(), " activations; expected ", per_direction,
                                        " per direction (", directions, " direction", directions == 2 ? "s" : "", ")"));
  }
  const std::vector<double> alphas = node.GetFloats("activation_alpha");
  const std::vector<double> betas = node.GetFloats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    const ActivationDef* act = FindActivation(names[k]);
    if (act == nullptr) {
      return NodeError(node, absl::StrCat("activation '", names[k],
                                          "' is not one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, "
                                          "ScaledTanh, HardSigmoid, Elu, Softsign, Softplus"));
    }
    kiln_activation& out = params.activations[k / per_direction][k % per_direction];
    out.code = act->code;
    out.alpha = act->takes_alpha && next_alpha < alphas.size() ? alphas[next_alpha++] : act->alpha;
    out.beta = act->takes_beta && next_beta < betas.size() ? betas[next_beta++] : act->beta;
  }
  return absl::OkStatus();
}

// The node's attributes as the kernel's parameters; errors name the node.
absl::StatusOr<kiln_rnn_params> RnnParams(const Node& node) {
  const CellDef& def = CellOf(node);
  kiln_rnn_params params{};
  params.cell = def.cell;
  const std::string direction = node.GetString("direction", "forward");
  if (direction == "forward") {
    params.direction = KILN_RNN_FORWARD;
  } else if (direction == "reverse") {
    params.direction = KILN_RNN_REVERSE;
  } else if (direction == "bidirectional") {
    params.direction = KILN_RNN_BIDIRECTIONAL;
  } else {
    return NodeError(node, absl::StrCat("direction '", direction, "' is not forward, reverse or bidirectional"));
  }
  params.layout = node.GetInt("layout", 0);
  if (params.layout != 0 && params.layout != 1) {
    return NodeError(node, absl::StrCat("layout ", params.layout, " is not 0 or 1"));
  }
  params.has_clip = node.has_attr("clip") ? 1 : 0;
  params.clip = node.GetFloat("clip", 0.0);
  if (params.has_clip != 0 && !(params.clip > 0)) {
    return NodeError(node, absl::StrCat("clip ", params.clip, " must be positive"));
  }
  params.linear_before_reset = node.GetInt("linear_before_reset", 0);
  params.input_forget = node.GetInt("input_forget", 0);
  const int64_t directions = params.direction == KILN_RNN_BIDIRECTIONAL ? 2 : 1;
  KILN_RETURN_IF_ERROR(FillActivations(node, def, directions, params));
  return params;
}

std::string DimsText(const std::vector<Dim>& dims) {
  std::vector<std::string> parts;
  for (const Dim& d : dims) parts.push_back(d.known() ? std::to_string(d.size) : d.symbol.empty() ? "?" : d.symbol);
  return "[" + absl::StrJoin(parts, ",") + "]";
}

// The optional inputs the kernel reads, each against the shape the sizes give it:
// B [dirs, 2*gates*hidden], sequence_lens [batch], initial_h and initial_c `state`,
// P [dirs, 3*hidden]. Unknown dims pass.
absl::Status CheckOptionalInputs(const InferContext& ctx, const CellDef& def, const Dim& dirs, const Dim& batch,
                                 int64_t hidden, const std::vector<Dim>& state) {
  const std::vector<std::pair<const char*, std::vector<Dim>>> inputs = {
      {"X", {}},
      {"W", {}},
      {"R", {}},
      {"B", {dirs, Dim::Known(2 * def.gates * hidden)}},
      {"sequence_lens", {batch}},
      {"initial_h", state},
      {"initial_c", state},
      {"P", {dirs, Dim::Known(3 * hidden)}},
  };
  for (size_t i = 3; i < inputs.size() && i < ctx.input_types.size(); ++i) {
    if (!ctx.has_input(i) || !ctx.type(i).has_shape) continue;
    const std::vector<Dim>& got = ctx.type(i).shape;
    const std::vector<Dim>& want = inputs[i].second;
    bool fits = got.size() == want.size();
    for (size_t k = 0; fits && k < got.size(); ++k) fits = !got[k].known() || !want[k].known() || got[k] == want[k];
    if (!fits) {
      return NodeError(ctx.node, absl::StrCat("input ", i, " (", inputs[i].first, ") has shape ", DimsText(got),
                                              "; expected ", DimsText(want)));
    }
    const bool integer = i == 4;
    if (integer != (ctx.type(i).dtype == DType::kInt32 || ctx.type(i).dtype == DType::kInt64) ||
        (!integer && ctx.type(i).dtype != ctx.type(0).dtype)) {
      return NodeError(ctx.node, absl::StrCat("input ", i, " (", inputs[i].first, ") has element type ",
                                              DTypeName(ctx.type(i).dtype), "; expected ",
                                              integer ? "int32" : DTypeName(ctx.type(0).dtype)));
    }
  }
  return absl::OkStatus();
}

// X [seq, batch, input] (layout 1: [batch, seq, input]), W [dirs, gates*hidden, input],
// R [dirs, gates*hidden, hidden]; the optional inputs are checked against those sizes.
// Outputs Y [seq, dirs, batch, hidden] and Y_h, Y_c [dirs, batch, hidden] (layout 1:
// Y [batch, seq, dirs, hidden], Y_h, Y_c [batch, dirs, hidden]).
absl::Status InferRnn(InferContext& ctx) {
  const Node& node = ctx.node;
  const CellDef& def = CellOf(node);
  KILN_RETURN_IF_ERROR(RequireFloat(ctx));
  KILN_RETURN_IF_ERROR(RequireStaticInputs(ctx, {1, 2}));
  KILN_ASSIGN_OR_RETURN(kiln_rnn_params params, RnnParams(node));
  const TensorType& x = ctx.type(0);
  const std::vector<int64_t> w = ctx.type(1).StaticDims(), r = ctx.type(2).StaticDims();
  if (!x.has_shape || x.shape.size() != 3 || w.size() != 3 || r.size() != 3) {
    return NodeError(node, "X, W and R must have rank 3");
  }
  const int64_t directions = params.direction == KILN_RNN_BIDIRECTIONAL ? 2 : 1;
  const int64_t hidden = node.GetInt("hidden_size", r[2]);
  if (w[0] != directions || r[0] != directions || w[1] != def.gates * hidden || r[1] != def.gates * hidden ||
      r[2] != hidden || (x.shape[2].known() && x.shape[2].size != w[2])) {
    return NodeError(node, absl::StrCat("W [", absl::StrJoin(w, ","), "] and R [", absl::StrJoin(r, ","),
                                        "] do not fit ", directions, " direction(s), ", def.gates,
                                        " gate(s) of hidden size ", hidden, " and input size ", w[2]));
  }
  const Dim seq = params.layout == 0 ? x.shape[0] : x.shape[1];
  const Dim batch = params.layout == 0 ? x.shape[1] : x.shape[0];
  const Dim dirs = Dim::Known(directions), h = Dim::Known(hidden);
  std::vector<std::vector<Dim>> shapes = {
      params.layout == 0 ? std::vector<Dim>{seq, dirs, batch, h} : std::vector<Dim>{batch, seq, dirs, h},
      params.layout == 0 ? std::vector<Dim>{dirs, batch, h} : std::vector<Dim>{batch, dirs, h}};
  shapes.push_back(shapes[1]);
  KILN_RETURN_IF_ERROR(CheckOptionalInputs(ctx, def, dirs, batch, hidden, shapes[1]));
  const size_t outputs = def.cell == KILN_RNN_CELL_LSTM ? 3 : 2;
  if (ctx.output_types.size() > outputs) {
    return NodeError(node, absl::StrCat("has ", ctx.output_types.size(), " outputs; ", def.op, " has ", outputs));
  }
  for (size_t i = 0; i < ctx.output_types.size(); ++i) ctx.output_types[i] = WithShape(x.dtype, shapes[i]);
  return absl::OkStatus();
}

// [dirs, rows, cols] -> [dirs, cols, rows], f32 or f64.
std::shared_ptr<const Tensor> TransposedWeights(const Tensor& t) {
  const std::vector<int64_t>& d = t.dims();
  auto out = std::make_shared<Tensor>(t.dtype(), std::vector<int64_t>{d[0], d[2], d[1]});
  const int64_t size = DTypeSize(t.dtype());
  const auto* src = static_cast<const char*>(t.data());
  auto* dst = static_cast<char*>(out->data());
  for (int64_t k = 0; k < d[0]; ++k) {
    for (int64_t i = 0; i < d[1]; ++i) {
      for (int64_t j = 0; j < d[2]; ++j) {
        std::memcpy(dst + ((k * d[2] + j) * d[1] + i) * size, src + ((k * d[1] + i) * d[2] + j) * size, size);
      }
    }
  }
  return out;
}

// The kernel's eight input slots (absent ones empty) and its scratch, sized for the static
// shapes (kiln_rnn_scratch_elements).
absl::StatusOr<KernelCall> LowerRnn(const Node& node) {
  KILN_ASSIGN_OR_RETURN(kiln_rnn_params params, RnnParams(node));
  const std::vector<int64_t> x = StaticDims(node.input(0)), r = StaticDims(node.input(2));
  const int64_t seq = params.layout == 0 ? x[0] : x[1], batch = params.layout == 0 ? x[1] : x[0];
  std::vector<KernelOperand> operands = PassInputs(node, 8);
  // Constant weights go in transposed ([dirs, K, gates*hidden]), as each step's product
  // reads them: a run then does not transpose them again (an LSTM of hidden 48 at batch
  // 8 spent about a sixth of its time there).
  const Value* w = node.input(1);
  const Value* rv = node.input(2);
  if (w->is_constant() && rv->is_constant()) {
    operands[1].node_input = -1;
    operands[1].constant = TransposedWeights(*w->constant());
    operands[2].node_input = -1;
    operands[2].constant = TransposedWeights(*rv->constant());
    params.weights_transposed = 1;
  }
  KernelCall call = CallWithParams<kernel::rnn>(std::move(operands), params);
  const int64_t element_bytes = node.input(0)->type().dtype == DType::kFloat64 ? 8 : 4;
  call.scratch_bytes = kiln_rnn_scratch_elements(seq, batch, x[2], r[2], CellOf(node).gates) * element_bytes;
  return call;
}

}  // namespace

void RegisterRnnOps(Registry& registry) {
  for (const CellDef& def : Cells()) {
    OpSchema schema = Schema(def.op, 3, def.max_inputs);
    schema.infer = InferRnn;
    schema.lower = LowerRnn;
    registry.Add(std::move(schema));
  }
}

}  // namespace kiln::ops
