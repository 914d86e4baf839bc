// Quantized ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
// QLinearMatMul, ConvInteger and QLinearConv (kernels in kernels/quant/quant.cc, where the
// requantization rule is stated).
#include <algorithm>
#include <climits>
#include <numeric>
#include <optional>

#include "kiln/kernels/quant.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

bool IsQuantized(DType d) { return d == DType::kUInt8 || d == DType::kInt8; }

// What an integer convolution writes (the qconv kernel's mode int): the int32 sum
// (ConvInteger), the requantized u8/s8 (QLinearConv), or the f32 value (sum * x_scale *
// w_scale + an f32 bias: kiln.QLinearConvToFloat, fold-qdq's form for a Conv whose result
// stays f32).
enum ConvMode : int64_t {
  kSumInt32 = KILN_QUANT_SUM_INT32,
  kRequantize = KILN_QUANT_REQUANTIZE,
  kToFloat = KILN_QUANT_TO_FLOAT
};

int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  return std::accumulate(dims.begin() + begin, dims.begin() + end, int64_t{1}, std::multiplies<int64_t>());
}

int64_t Numel(const TensorType& t) { return Product(t.StaticDims(), 0, t.shape.size()); }

// A scale (f32) and its optional zero point (`zp_types`) for a tensor quantized per tensor
// or along one axis: each a scalar or 1-D; `channels` elements or one. `what` names them.
absl::Status CheckScale(const InferContext& ctx, size_t scale, size_t zero_point, const char* what,
                        std::initializer_list<DType> zp_types, int64_t channels) {
  if (auto st = RequireStatic(ctx, scale); !st.ok()) return st;
  const TensorType& s = ctx.type(scale);
  if (s.dtype != DType::kFloat32)
    return NodeError(ctx.node, absl::StrCat(what, " scale must be float, not ", DTypeName(s.dtype)));
  const int64_t n = Numel(s);
  if (s.shape.size() > 1 || (n != 1 && n != channels)) {
    return NodeError(ctx.node, absl::StrCat(what, " scale has shape [", absl::StrJoin(s.StaticDims(), ","),
                                            "]; it must have one element or ", channels));
  }
  if (!ctx.has_input(zero_point)) return absl::OkStatus();
  if (auto st = RequireStatic(ctx, zero_point); !st.ok()) return st;
  const TensorType& z = ctx.type(zero_point);
  if (std::find(zp_types.begin(), zp_types.end(), z.dtype) == zp_types.end()) {
    return NodeError(ctx.node, absl::StrCat(what, " zero point has element type ", DTypeName(z.dtype)));
  }
  if (Numel(z) != n) {
    return NodeError(ctx.node, absl::StrCat(what, " zero point has ", Numel(z), " elements but its scale has ", n));
  }
  return absl::OkStatus();
}

// QuantizeLinear / DequantizeLinear: X seen as [outer, channels, inner] around the axis a
// per-channel scale runs along; [1, 1, numel] for a per-tensor scale.
absl::StatusOr<std::vector<int64_t>> AxisBlock(const Node& node, const std::vector<int64_t>& x,
                                               int64_t scale_elements) {
  if (scale_elements == 1) return std::vector<int64_t>{1, 1, Product(x, 0, x.size())};
  auto axis = NormalizeAxis(node, node.GetInt("axis", 1), static_cast<int64_t>(x.size()));
  if (!axis.ok()) return axis.status();
  const size_t a = static_cast<size_t>(*axis);
  return std::vector<int64_t>{Product(x, 0, a), x[a], Product(x, a + 1, x.size())};
}

// QuantizeLinear's result type: its zero point's, else opset 21's output_dtype, else u8.
absl::StatusOr<DType> QuantizedType(const InferContext& ctx) {
  DType y_type = ctx.has_input(2) ? ctx.type(2).dtype : DType::kUInt8;
  const int64_t output_dtype = ctx.node.GetInt("output_dtype", 0);
  if (output_dtype == 0) return y_type;
  const DType wanted = static_cast<DType>(output_dtype);
  if (wanted != DType::kUInt8 && wanted != DType::kInt8) {
    return NodeError(ctx.node, absl::StrCat("output_dtype ", output_dtype, " is not supported (uint8 and int8 are)"));
  }
  if (ctx.has_input(2) && y_type != wanted) {
    return NodeError(ctx.node, absl::StrCat("output_dtype ", DTypeName(wanted), " differs from the zero point's ",
                                            DTypeName(y_type)));
  }
  return wanted;
}

absl::Status InferQuantizeLinear(InferContext& ctx, bool quantize) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  if (const int64_t block_size = ctx.node.GetInt("block_size", 0); block_size != 0) {
    return NodeError(ctx.node, absl::StrCat("blocked quantization (block_size ", block_size,
                                            ", opset 21) is not supported; per-tensor and per-axis scales are"));
  }
  const TensorType& x = ctx.type(0);
  if (quantize && x.dtype != DType::kFloat32) {
    return NodeError(ctx.node,
                     absl::StrCat("input of element type ", DTypeName(x.dtype), " is not supported (float only)"));
  }
  if (!quantize && !IsQuantized(x.dtype) && x.dtype != DType::kInt32) {
    return NodeError(
        ctx.node, absl::StrCat("input of element type ", DTypeName(x.dtype), " is not supported (uint8, int8, int32)"));
  }
  const std::vector<int64_t> xd = x.StaticDims();
  const int64_t scale_elements = ctx.has_input(1) && ctx.type(1).IsStatic() ? Numel(ctx.type(1)) : 1;
  if (scale_elements > 1 && ctx.node.opset() < 13) {
    return NodeError(ctx.node, "a per-axis scale needs opset 13 or later");
  }
  auto block = AxisBlock(ctx.node, xd, scale_elements);
  if (!block.ok()) return block.status();
  if (quantize) {
    if (auto st = CheckScale(ctx, 1, 2, "y", {DType::kUInt8, DType::kInt8}, (*block)[1]); !st.ok()) return st;
  } else {
    if (auto st = CheckScale(ctx, 1, 2, "x", {x.dtype}, (*block)[1]); !st.ok()) return st;
    if (x.dtype == DType::kInt32 && ctx.has_input(2)) {
      const Tensor* zp = ctx.constant(2);
      bool zero = zp != nullptr;
      for (int64_t i = 0; zero && i < zp->num_elements(); ++i) zero = zp->GetAsInt64(i) == 0;
      if (!zero) return NodeError(ctx.node, "an int32 input's zero point must be a constant 0");
    }
  }
  ctx.output_types[0] = x;
  KILN_ASSIGN_OR_RETURN(const DType y_type, QuantizedType(ctx));
  ctx.output_types[0].dtype = quantize ? y_type : DType::kFloat32;
  return absl::OkStatus();
}

// The two operands of an integer matrix product or convolution, inputs a and b (called
// a_name and b_name in errors), must be static u8/i8 tensors.
absl::Status RequireQuantizedOperands(const InferContext& ctx, size_t a, size_t b, const char* a_name,
                                      const char* b_name) {
  for (size_t i : {a, b}) {
    if (auto st = RequireStatic(ctx, i); !st.ok()) return st;
    if (!IsQuantized(ctx.type(i).dtype)) {
      return NodeError(ctx.node, absl::StrCat(i == a ? a_name : b_name, " has element type ",
                                              DTypeName(ctx.type(i).dtype), "; uint8 or int8 expected"));
    }
  }
  return absl::OkStatus();
}

// Shared by MatMulInteger and QLinearMatMul: A and B u8/i8, matmul shapes; `out` the
// output element type.
absl::Status InferIntegerMatMul(InferContext& ctx, size_t a, size_t b, DType out) {
  if (auto st = RequireQuantizedOperands(ctx, a, b, "A", "B"); !st.ok()) return st;
  auto shape = MatMulOutputShape(ctx.node, ctx.type(a).StaticDims(), ctx.type(b).StaticDims());
  if (!shape.ok()) return shape.status();
  ctx.output_types[0] = WithShape(out, *shape);
  return absl::OkStatus();
}

// M and N of a matrix product's operands (after promoting 1-D ones).
std::pair<int64_t, int64_t> RowsAndColumns(const InferContext& ctx, size_t a, size_t b) {
  const std::vector<int64_t> ad = ctx.type(a).StaticDims(), bd = ctx.type(b).StaticDims();
  return {ad.size() == 1 ? 1 : ad[ad.size() - 2], bd.size() == 1 ? 1 : bd.back()};
}

// QLinearConv's and kiln.QLinearConvToFloat's X, W and their scales and zero points
// (inputs 0-5): Conv's shape rules, X per tensor, W per tensor or per output channel.
absl::Status InferQuantizedConvOperands(InferContext& ctx, DType out);

// Shared by ConvInteger and QLinearConv: X and W u8/i8 with Conv's shape rules.
absl::Status InferIntegerConv(InferContext& ctx, size_t x, size_t w, DType out) {
  if (auto st = RequireQuantizedOperands(ctx, x, w, "X", "W"); !st.ok()) return st;
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> shape,
                        ConvOutputDims(ctx.node, ctx.type(x).StaticDims(), ctx.type(w).StaticDims()));
  ctx.output_types[0] = TensorType::Static(out, shape);
  return absl::OkStatus();
}

// MatMulInteger's and ConvInteger's optional zero point, input i (2 or 3) of the type of
// its operand, input i - 2: a scalar, or with `elements` values where given.
absl::Status CheckIntegerZeroPoint(const InferContext& ctx, size_t i, const char* name,
                                   std::optional<int64_t> elements) {
  if (!ctx.has_input(i)) return absl::OkStatus();
  if (auto st = RequireStatic(ctx, i); !st.ok()) return st;
  const int64_t numel = Numel(ctx.type(i));
  if (ctx.type(i).dtype != ctx.type(i - 2).dtype || ctx.type(i).shape.size() > 1 ||
      (numel != 1 && numel != elements.value_or(1))) {
    return NodeError(ctx.node, absl::StrCat(name, "_zero_point must be a scalar",
                                            elements ? absl::StrCat(" or have ", *elements, " elements") : "",
                                            ", of the operand's type"));
  }
  return absl::OkStatus();
}

// QLinearMatMul's and QLinearConv's Y element type: their y_zero_point's (input 7).
absl::StatusOr<DType> RequantizedType(const InferContext& ctx) {
  if (!ctx.has_input(7)) return NodeError(ctx.node, "y_zero_point is required");
  if (auto st = RequireStatic(ctx, 7); !st.ok()) return st;
  return ctx.type(7).dtype;
}

// The optional f32 bias [elements] of kiln.QLinearMatMulToFloat and kiln.QLinearConvToFloat
// (input 6), called `name` in errors.
absl::Status CheckFloatBias(const InferContext& ctx, const char* name, int64_t elements) {
  if (ctx.has_input(6) && (ctx.type(6).dtype != DType::kFloat32 || !ctx.type(6).IsStatic() ||
                           ctx.type(6).StaticDims() != std::vector<int64_t>{elements})) {
    return NodeError(ctx.node, absl::StrCat(name, " must be float [", elements, "]"));
  }
  return absl::OkStatus();
}

absl::Status InferQuantizedConvOperands(InferContext& ctx, DType out) {
  if (auto st = InferIntegerConv(ctx, 0, 3, out); !st.ok()) return st;
  if (auto st = CheckScale(ctx, 1, 2, "x", {ctx.type(0).dtype}, 1); !st.ok()) return st;
  return CheckScale(ctx, 4, 5, "w", {ctx.type(3).dtype}, ctx.type(3).StaticDims()[0]);
}

absl::StatusOr<KernelCall> LowerIntegerConv(const Node& node, std::vector<KernelOperand> inputs, ConvMode mode) {
  const std::vector<int64_t> xd = StaticDims(node.input(0));
  const size_t w_input = mode == kSumInt32 ? 1 : 3;
  auto win =
      ComputeWindow(node, Spatial(xd), node.GetInts("kernel_shape", Spatial(StaticDims(node.input(w_input)))), false);
  if (!win.ok()) return win.status();
  kiln_quant_params params{};
  params.group = node.GetInt("group", 1);
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, *win));
  params.mode = mode;
  params.relu = node.GetInt("kiln.relu", 0);  // fold-qdq's Relu: a clamp at Y's zero point
  return CallWithParams<kernel::qconv>(std::move(inputs), params);
}

KernelOperand Input(const Node& node, size_t i) {
  KernelOperand operand;
  if (i < node.inputs().size() && node.input(i) != nullptr) operand.node_input = static_cast<int>(i);
  return operand;
}

// QLinearMatMul's and kiln.QLinearMatMulToFloat's A, B and their scales and zero points
// (inputs 0-5): matmul shapes, A per tensor or per row, B per tensor or per column.
absl::Status InferQuantizedMatMulOperands(InferContext& ctx, DType out) {
  if (auto st = InferIntegerMatMul(ctx, 0, 3, out); !st.ok()) return st;
  const auto [M, N] = RowsAndColumns(ctx, 0, 3);
  if (auto st = CheckScale(ctx, 1, 2, "a", {ctx.type(0).dtype}, M); !st.ok()) return st;
  return CheckScale(ctx, 4, 5, "b", {ctx.type(3).dtype}, N);
}

// The reference kernels' operands for the QLinear ops and their ToFloat forms (inputs A or
// X, its scale, zero point, B or W, its scale, zero point, then `tail`): A, B, their zero
// points, their scales, then `tail` (Y's scale and zero point, or two empty slots and the
// f32 bias).
std::vector<KernelOperand> QuantizedOperands(const Node& node, std::vector<KernelOperand> tail) {
  std::vector<KernelOperand> inputs = {Input(node, 0), Input(node, 3), Input(node, 2),
                                       Input(node, 5), Input(node, 1), Input(node, 4)};
  inputs.insert(inputs.end(), tail.begin(), tail.end());
  return inputs;
}

// The reference qmatmul call of those two ops.
absl::StatusOr<KernelCall> LowerQuantizedMatMul(const Node& node, std::vector<KernelOperand> tail, ConvMode mode) {
  kiln_quant_params params{};
  KILN_ASSIGN_OR_RETURN(params.shape, MatMulShape(node, StaticDims(node.input(0)), StaticDims(node.input(3))));
  params.mode = mode;
  return CallWithParams<kernel::qmatmul>(QuantizedOperands(node, std::move(tail)), params);
}

// The int8 convolution for artifacts (kernels/quant/quant.cc, QConvFast): constant weights,
// zero points and scales; weights packed as s8 w - zw (they must fit) in panels of 8 rows,
// [G][ceil(OC/G / 8)][KH * KW * ceil(C/G / 4)][8][4]; per output channel an i32 offset
// (bias - zx' * sum(w - zw)) and an f32 multiplier (x_scale * w_scale / y_scale, as the
// reference kernel computes it).
constexpr int64_t kQPanelRows = 8;
// Columns (output positions) per chunk of the packed kernel; a last chunk may take one more.
constexpr int64_t kQChunkCols = 48;
// Jobs below which the packed kernel also splits output channels (panel_range): ResNet-50
// int8's 7x7 convs at batch 1 were one chunk of 48 columns and one of 1, so a second
// thread had next to nothing to do (0.60 ms at one thread, 0.60 at two), and the last
// column's job read all the weights again.
constexpr int64_t kQMinJobs = 8;
constexpr int64_t kQMaxSteps = 1280;

// The integer value of a constant tensor's element i (0 for an omitted one).
int64_t IntAt(const Value* v, int64_t i) {
  if (v == nullptr) return 0;
  const Tensor* t = v->constant().get();
  return t->GetAsInt64(t->num_elements() > 1 ? i : 0);
}

// Y's zero point and range as the packed int8 kernels (qconv, qconv_winograd, qgemm) read
// them: Y's u8 or s8 range, its low end raised to the zero point under relu (fold-qdq's
// Relu); the zero point is QLinear*'s input 7 when requantizing, else 0.
void SetOutputRange(const Node& node, bool requantize, bool relu, kiln_quant_params& params) {
  const DType y_type = node.output(0)->type().dtype;
  params.y_zero_point = requantize ? IntAt(node.input(7), 0) : 0;
  params.clamp_lo = y_type == DType::kUInt8 ? 0 : -128;
  params.clamp_hi = y_type == DType::kUInt8 ? 255 : 127;
  if (relu) params.clamp_lo = std::max(params.clamp_lo, params.y_zero_point);
}

// kiln.QLinearConvToFloat's kiln.clip_min and kiln.clip_max (the fuse pass's Clip) as an
// f32 [2] operand for the kernel, or an empty one.
KernelOperand ClipBounds(const Node& node) {
  if (!node.has_attr("kiln.clip_max")) return KernelOperand{};
  auto bounds = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{2});
  bounds->data_as<float>()[0] = static_cast<float>(node.GetFloat("kiln.clip_min", -3.4028234663852886e38));
  bounds->data_as<float>()[1] = static_cast<float>(node.GetFloat("kiln.clip_max", 3.4028234663852886e38));
  return KernelOperand{-1, bounds};
}

absl::StatusOr<std::optional<KernelCall>> LowerIntegerConvFast(const Node& node, ConvMode mode) {
  const bool requantize = mode == kRequantize;
  const size_t w_in = mode == kSumInt32 ? 1 : 3, xz_in = 2, wz_in = mode == kSumInt32 ? 3 : 5;
  const Value* x = node.input(0);
  const Value* w = node.input(w_in);
  auto constant_or_absent = [&](size_t i) { return node.input(i) == nullptr || node.input(i)->is_constant(); };
  if (!w->is_constant() || !constant_or_absent(xz_in) || !constant_or_absent(wz_in)) return std::nullopt;
  if (mode != kSumInt32) {  // scales, zero points and biases (kToFloat's input 7 is its residual)
    for (size_t i : {1, 4, 6, 7, 8, 9, 10, 11}) {
      if (!constant_or_absent(i) && !(mode == kToFloat && i == 7)) return std::nullopt;
    }
  }
  const std::vector<int64_t> xd = StaticDims(x), wd = StaticDims(w), yd = StaticDims(node.output(0));
  if (xd.size() != 4 && xd.size() != 3) return std::nullopt;
  const int64_t group = node.GetInt("group", 1), oc_total = wd[0], ocg = oc_total / group, icg = wd[1];
  int64_t taps = 1;
  for (size_t i = 2; i < wd.size(); ++i) taps *= wd[i];
  auto win = ComputeWindow(node, Spatial(xd), node.GetInts("kernel_shape", Spatial(wd)), false);
  if (!win.ok()) return win.status();
  // A stem's few channels (ResNet-50's 7x7 over RGB) take K as one sequence of (kh, kw,
  // channel) in words of four: 37 steps where channel quads take 49, a quarter of whose
  // bytes are padding.
  const int64_t quads = (icg + 3) / 4, flat_steps = (taps * icg + 3) / 4;
  const bool flat = group == 1 && icg < 4 && xd.size() == 4 && flat_steps < taps * quads && win->dilations[0] == 1 &&
                    win->dilations[1] == 1;
  const int64_t steps = flat ? flat_steps : taps * quads, panels = (ocg + kQPanelRows - 1) / kQPanelRows;
  if (steps > kQMaxSteps) return std::nullopt;
  const Tensor* wt = w->constant().get();
  const bool x_signed = x->type().dtype == DType::kInt8;
  const int64_t zx = IntAt(node.input(xz_in), 0) + (x_signed ? 128 : 0);
  auto packed = std::make_shared<Tensor>(DType::kInt8, std::vector<int64_t>{group * panels * steps * kQPanelRows * 4});
  auto offsets = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{oc_total});
  auto multipliers = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{oc_total});
  int8_t* pw = packed->data_as<int8_t>();
  for (int64_t oc = 0; oc < oc_total; ++oc) {
    const int64_t grp = oc / ocg, row = oc % ocg, panel = row / kQPanelRows, r = row % kQPanelRows;
    const int64_t zw = IntAt(node.input(wz_in), oc);
    int64_t weight_sum = 0;
    for (int64_t ic = 0; ic < icg; ++ic) {
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t v = wt->GetAsInt64((oc * icg + ic) * taps + tap) - zw;
        if (v < -128 || v > 127) return std::nullopt;  // w - zw must be an s8
        weight_sum += v;
        const int64_t k = flat ? tap * icg + ic : (tap * quads + ic / 4) * 4 + ic % 4;
        pw[(((grp * panels + panel) * steps + k / 4) * kQPanelRows + r) * 4 + k % 4] = static_cast<int8_t>(v);
      }
    }
    const int64_t bias = requantize ? IntAt(node.input(8), oc) : 0;  // (kToFloat: an f32 bias, added last)
    const int64_t offset = bias - zx * weight_sum;
    if (offset < INT32_MIN || offset > INT32_MAX) return std::nullopt;
    offsets->data_as<int32_t>()[oc] = static_cast<int32_t>(offset);
    float multiplier = 0.f;
    if (mode != kSumInt32) {
      const float xs = static_cast<float>(node.input(1)->constant()->GetAsDouble(0));
      const Tensor* ws = node.input(4)->constant().get();
      const float wsc = static_cast<float>(ws->GetAsDouble(ws->num_elements() > 1 ? oc : 0));
      multiplier = xs * wsc;
      if (requantize) multiplier = multiplier / static_cast<float>(node.input(6)->constant()->GetAsDouble(0));
    }
    multipliers->data_as<float>()[oc] = multiplier;
  }
  kiln_quant_params params{};
  params.group = group;
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, *win));
  params.mode = mode;
  params.relu = node.GetInt("kiln.relu", 0);
  params.packed_weights = 1;
  params.x_zero_point = zx;
  params.x_signed = x_signed ? 1 : 0;
  params.flat_k = flat ? 1 : 0;
  const int64_t positions = yd.size() == 4 ? yd[2] * yd[3] : yd[2];
  const int64_t units = xd[0] * group * ((positions + kQChunkCols - 1) / kQChunkCols);  // jobs of the kernel
  if (units < kQMinJobs && panels >= 4) {
    const int64_t splits = std::min((kQMinJobs + units - 1) / units, panels / 2);
    const int64_t range = ((panels + splits - 1) / splits + 1) / 2 * 2;  // even: the few-column tile takes pairs
    if (range < panels) params.panel_range = range;
  }
  SetOutputRange(node, requantize, params.relu == 1, params);
  KernelCall call = CallWithParams<kernel::qconv>(
      {Input(node, 0), KernelOperand{-1, packed}, KernelOperand{-1, offsets}, KernelOperand{-1, multipliers}}, params);
  if (mode == kToFloat) {
    call.inputs.push_back(Input(node, 6));                                  // the f32 bias, added after the multiplier
    call.inputs.push_back(Input(node, 7));                                  // the f32 residual, added before relu
    for (size_t i : {8, 9, 10, 11}) call.inputs.push_back(Input(node, i));  // Y's and the residual's (u8/i8)
    call.inputs.push_back(ClipBounds(node));
  }
  int64_t plane = 1;
  for (size_t i = 2; i < xd.size(); ++i) plane *= xd[i];
  call.scratch_bytes = xd[0] * group * quads * plane * 4 + 256;
  if (flat) {  // X padded, channels last: the rows and columns the windows reach, and 64 bytes the gather may read past
    const int64_t hp = (yd[2] - 1) * win->strides[0] + wd[2], wp = (yd[3] - 1) * win->strides[1] + wd[3];
    call.scratch_bytes = xd[0] * hp * wp * icg + 64 + 256;
  }
  if (params.panel_range > 0) {  // the chunks' columns
    call.scratch_bytes += 64 + units * (steps * (kQChunkCols + 1) * 4 + 64);
  }
  return call;
}

// Integer Winograd F(4x4, 3x3) for QLinearConv in artifacts (kernels/quant/qwinograd.cc,
// where the arithmetic is stated): 2-D, a constant 3x3 weight, stride 1, dilation 1, one
// group, channels in and out multiples of 16, and at least 16 tiles of 4 x 4 outputs that
// compute at most 35 % more outputs than the map has and share U's reads (below). U is i16
// pairs in groups of four 16-channel panels (the last group may have fewer),
// [36][OC/64][C/2][4][16][2]; F [36][OC] f32; the bias and multipliers f32 [OC].
// Node attribute kiln.algorithm "direct" keeps the direct kernel.
//
// Bytes of V and M per chunk of tiles: a small U's chunks stay small, so that the chunks
// reuse one scratch that stays in cache (ResNet-50 int8's first 56 x 56 conv, whose
// scratch the stem's tensors had evicted, ran 0.73-0.81 -> 0.58 ms with 1 MiB chunks
// rather than 4 MiB); a U over the kernel's block (512 KiB) takes every tile of an image in
// one chunk (up to 8 MiB), as each chunk reads all of U.
constexpr int64_t kQWinogradSmallUChunk = int64_t{1} << 20, kQWinogradLargeUChunk = int64_t{8} << 20;

// U's bytes per tile above which the direct kernel is faster: the products then wait on
// U from memory. ResNet-50's 14 x 14 convs at batch 1 (256 channels, 16 tiles, 4.6 MiB of
// U, 295 KiB a tile) ran faster in Winograd on the Zen 4 host (0.49-0.52 ms against
// 0.54-0.56); on the Zen 5 host, with the direct kernel's weights prefetched, the direct
// kernel is ahead (0.255 ms against 0.30; ResNet-50 int8 9.75 against 10.04 ms, four
// rounds alternated). The 28 x 28 maps' 24 KiB a tile stay in Winograd.
constexpr int64_t kQWinogradUBytesPerTile = int64_t{256} << 10;

absl::StatusOr<std::optional<KernelCall>> LowerIntegerConvWinograd(const Node& node) {
  // G's rows scaled to whole numbers (G = kGi / kGc), and B^T.
  static constexpr int64_t kGi[6][3] = {{1, 0, 0}, {-1, -1, -1}, {-1, 1, -1}, {1, 2, 4}, {1, -2, 4}, {0, 0, 1}};
  static constexpr int64_t kGc[6] = {4, 6, 6, 24, 24, 1};
  static constexpr int64_t kBt[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                        {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
  if (node.GetString("kiln.algorithm", "") == "direct") return std::nullopt;
  const Value* x = node.input(0);
  const Value* w = node.input(3);
  for (size_t i = 1; i < node.inputs().size(); ++i) {
    if (node.input(i) != nullptr && !node.input(i)->is_constant()) return std::nullopt;
  }
  const std::vector<int64_t> xd = StaticDims(x), wd = StaticDims(w), yd = StaticDims(node.output(0));
  if (xd.size() != 4 || node.GetInt("group", 1) != 1 || wd[2] != 3 || wd[3] != 3) return std::nullopt;
  auto win = ComputeWindow(node, Spatial(xd), node.GetInts("kernel_shape", Spatial(wd)), false);
  if (!win.ok()) return win.status();
  for (size_t i = 0; i < 2; ++i) {
    if (win->strides[i] != 1 || win->dilations[i] != 1) return std::nullopt;
  }
  const int64_t C = xd[1], OC = wd[0], tiles_h = (yd[2] + 3) / 4, tiles_w = (yd[3] + 3) / 4;
  const int64_t tiles = xd[0] * tiles_h * tiles_w;
  if (C % 16 != 0 || OC % 16 != 0 || tiles < 16 || tiles * 16 * 100 > xd[0] * yd[2] * yd[3] * 135) return std::nullopt;
  if (36 * C * OC * 2 > tiles * kQWinogradUBytesPerTile) return std::nullopt;
  const bool x_signed = x->type().dtype == DType::kInt8;
  const int64_t zx = IntAt(node.input(2), 0);
  const int64_t x_lo = (x_signed ? -128 : 0) - zx, x_hi = (x_signed ? 127 : 255) - zx;  // x - zx's range
  // The largest |V| at each point: its coefficients (B^T's rows i and j, outer product)
  // that are positive times one end of x - zx's range, the negative ones times the other.
  int64_t max_v[36];
  for (int64_t xi = 0; xi < 36; ++xi) {
    int64_t pos = 0, neg = 0;
    for (int64_t p = 0; p < 36; ++p) {
      const int64_t coef = kBt[xi / 6][p / 6] * kBt[xi % 6][p % 6];
      (coef > 0 ? pos : neg) += std::abs(coef);
    }
    max_v[xi] = std::max(std::abs(pos * x_hi - neg * x_lo), std::abs(pos * x_lo - neg * x_hi));
  }
  const Tensor* wt = w->constant().get();
  auto u = std::make_shared<Tensor>(DType::kInt16, std::vector<int64_t>{36 * OC * C});
  auto factors = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{36, OC});
  auto bias = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{OC});
  auto multipliers = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{OC});
  int16_t* pu = u->data_as<int16_t>();
  const float xs = static_cast<float>(node.input(1)->constant()->GetAsDouble(0));
  const float ys = static_cast<float>(node.input(6)->constant()->GetAsDouble(0));
  const Tensor* ws = node.input(4)->constant().get();
  std::vector<int64_t> exact(36 * C);  // U of one output channel, exact: [point][channel]
  for (int64_t oc = 0; oc < OC; ++oc) {
    const int64_t zw = IntAt(node.input(5), oc);
    for (int64_t c = 0; c < C; ++c) {
      int64_t k[3][3], gk[6][3];
      for (int64_t tap = 0; tap < 9; ++tap) k[tap / 3][tap % 3] = wt->GetAsInt64((oc * C + c) * 9 + tap) - zw;
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 3; ++j) gk[i][j] = kGi[i][0] * k[0][j] + kGi[i][1] * k[1][j] + kGi[i][2] * k[2][j];
      }
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 6; ++j) {
          exact[(i * 6 + j) * C + c] = gk[i][0] * kGi[j][0] + gk[i][1] * kGi[j][1] + gk[i][2] * kGi[j][2];
        }
      }
    }
    for (int64_t xi = 0; xi < 36; ++xi) {
      // The worst |sum| of this point's i32 sums must stay under 2^31, with room for the
      // rounding of a scaled U (at most one step per channel, below).
      const double limit = static_cast<double>(INT32_MAX) - static_cast<double>(max_v[xi]) * (C + 1);
      double worst = 0;
      for (int64_t c = 0; c < C; ++c) worst += std::abs(static_cast<double>(exact[xi * C + c])) * max_v[xi];
      if (limit <= 0) return std::nullopt;
      const double scale = worst > limit ? limit / worst : 1.0;
      // A scaled U is rounded with the error carried to the next channel, so that the
      // errors of the channels' products cancel where V is alike across channels (a
      // bright, even input) instead of adding up.
      double carry = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double value = static_cast<double>(exact[xi * C + c]) * scale + carry;
        const double rounded = std::nearbyint(value);
        carry = value - rounded;
        const int64_t group = oc / 64, panels = std::min<int64_t>(4, OC / 16 - group * 4);
        pu[xi * OC * C + group * 64 * C + (c / 2 * panels + oc % 64 / 16) * 32 + oc % 16 * 2 + c % 2] =
            static_cast<int16_t>(rounded);
      }
      factors->data_as<float>()[xi * OC + oc] = static_cast<float>(1.0 / (kGc[xi / 6] * kGc[xi % 6] * scale));
    }
    bias->data_as<float>()[oc] = static_cast<float>(IntAt(node.input(8), oc));
    const float wsc = static_cast<float>(ws->GetAsDouble(ws->num_elements() > 1 ? oc : 0));
    multipliers->data_as<float>()[oc] = xs * wsc / ys;
  }
  kiln_quant_params params{};
  params.group = 1;
  KILN_ASSIGN_OR_RETURN(params.window, KernelWindow(node, *win));
  params.mode = kRequantize;
  params.relu = node.GetInt("kiln.relu", 0);
  params.x_zero_point = zx;
  params.x_signed = x_signed ? 1 : 0;
  SetOutputRange(node, true, params.relu == 1, params);
  KernelCall call =
      CallWithParams<kernel::qconv_winograd>({Input(node, 0), KernelOperand{-1, u}, KernelOperand{-1, factors},
                                              KernelOperand{-1, bias}, KernelOperand{-1, multipliers}},
                                             params);
  const int64_t per_tile = 36 * (2 * C + 4 * OC);
  const int64_t budget = 36 * C * OC * 2 > (int64_t{512} << 10) ? kQWinogradLargeUChunk : kQWinogradSmallUChunk;
  int64_t chunk = std::max<int64_t>(6, budget / per_tile / 6 * 6);
  chunk = std::max(std::min(chunk, tiles), xd[0]);  // a chunk holds a tile of every image
  const int64_t padded = xd[0] * C * (tiles_h * 4 + 2) * (tiles_w * 4 + 2);
  call.scratch_bytes = (padded + 63) / 64 * 64 + chunk * per_tile;
  return call;
}

// The int8 GEMM for artifacts (kernels/quant/quant.cc, qgemm): a constant 2-D B packed as
// s8 b - zb (it must fit) in 16-column panels, [ceil(N/16)][ceil(K/4)][16][4]; per column
// an i32 offset (-za' * sum(b - zb)) and an f32 multiplier (a_scale * b_scale, / y_scale
// when requantizing), as the reference kernel computes them. A per tensor. Operand
// positions: MatMulInteger A 0, B 1, za 2, zb 3; QLinearMatMul and
// kiln.QLinearMatMulToFloat A 0, as 1, za 2, B 3, bs 4, zb 5, then ys 6, yz 7 or bias 6.
absl::StatusOr<std::optional<KernelCall>> LowerIntegerMatMulFast(const Node& node, ConvMode mode) {
  const bool integer_sums = mode == kSumInt32;
  const size_t b_in = integer_sums ? 1 : 3, za_in = 2, zb_in = integer_sums ? 3 : 5;
  const Value* a = node.input(0);
  const Value* b = node.input(b_in);
  auto constant_or_absent = [&](size_t i) { return node.input(i) == nullptr || node.input(i)->is_constant(); };
  if (!b->is_constant() || b->type().shape.size() != 2 || !constant_or_absent(za_in) || !constant_or_absent(zb_in))
    return std::nullopt;
  if (node.input(za_in) != nullptr && node.input(za_in)->constant()->num_elements() != 1) return std::nullopt;
  if (!integer_sums) {
    for (size_t i : {1, 4}) {
      if (!node.input(i)->is_constant()) return std::nullopt;
    }
    if (node.input(1)->constant()->num_elements() != 1) return std::nullopt;  // A's scale per tensor
    if (mode == kRequantize && (!node.input(6)->is_constant() || !constant_or_absent(7))) return std::nullopt;
  }
  const std::vector<int64_t> ad = StaticDims(a), bd = StaticDims(b);
  const int64_t K = bd[0], N = bd[1];
  const int64_t rows = Product(ad, 0, ad.size()) / K;
  const int64_t steps = (K + 3) / 4, panels = (N + 15) / 16;
  const Tensor* bt = b->constant().get();
  const bool a_signed = a->type().dtype == DType::kInt8;
  const int64_t za = IntAt(node.input(za_in), 0) + (a_signed ? 128 : 0);
  auto packed = std::make_shared<Tensor>(DType::kInt8, std::vector<int64_t>{panels * steps * 64});
  auto offsets = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{panels * 16});
  auto multipliers = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{panels * 16});
  int8_t* pb = packed->data_as<int8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t zb = IntAt(node.input(zb_in), n);
    int64_t column_sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t v = bt->GetAsInt64(k * N + n) - zb;
      if (v < -128 || v > 127) return std::nullopt;  // b - zb must be an s8
      column_sum += v;
      pb[((n / 16 * steps + k / 4) * 16 + n % 16) * 4 + k % 4] = static_cast<int8_t>(v);
    }
    const int64_t offset = -za * column_sum;
    if (offset < INT32_MIN || offset > INT32_MAX) return std::nullopt;
    offsets->data_as<int32_t>()[n] = static_cast<int32_t>(offset);
    float multiplier = 0.f;
    if (!integer_sums) {
      const Tensor* bs = node.input(4)->constant().get();
      multiplier = static_cast<float>(node.input(1)->constant()->GetAsDouble(0)) *
                   static_cast<float>(bs->GetAsDouble(bs->num_elements() > 1 ? n : 0));
      if (mode == kRequantize) multiplier = multiplier / static_cast<float>(node.input(6)->constant()->GetAsDouble(0));
    }
    multipliers->data_as<float>()[n] = multiplier;
  }
  kiln_quant_params params{};
  params.mode = mode;
  params.rows = rows;
  params.K = K;
  params.N = N;
  params.x_signed = a_signed ? 1 : 0;
  SetOutputRange(node, mode == kRequantize, false, params);
  KernelCall call = CallWithParams<kernel::qgemm>(
      {Input(node, 0), KernelOperand{-1, packed}, KernelOperand{-1, offsets}, KernelOperand{-1, multipliers}}, params);
  if (mode == kToFloat) call.inputs.push_back(Input(node, 6));  // the f32 bias
  return call;
}

}  // namespace

namespace {

void RegisterQuantizeAndDequantize(Registry& registry) {
  for (const bool quantize : {true, false}) {
    OpSchema s = Schema(quantize ? "QuantizeLinear" : "DequantizeLinear", 2, 3);
    s.infer = [quantize](InferContext& ctx) { return InferQuantizeLinear(ctx, quantize); };
    s.lower = [quantize](const Node& node) -> absl::StatusOr<KernelCall> {
      auto block = AxisBlock(node, StaticDims(node.input(0)),
                             Product(StaticDims(node.input(1)), 0, node.input(1)->type().shape.size()));
      if (!block.ok()) return block.status();
      kiln_quant_params params{};
      params.outer = (*block)[0];
      params.channels = (*block)[1];
      params.inner = (*block)[2];
      return quantize ? CallWithParams<kernel::quantize_linear>(PassInputs(node, 3), params)
                      : CallWithParams<kernel::dequantize_linear>(PassInputs(node, 3), params);
    };
    registry.Add(std::move(s));
  }
}

// The artifact lowerings (OpSchema::lower_fast) of the integer matrix products and
// convolutions, by what they write.
template <ConvMode kMode>
absl::StatusOr<std::optional<KernelCall>> IntegerMatMulForArtifact(const Node& node) {
  return LowerIntegerMatMulFast(node, kMode);
}
template <ConvMode kMode>
absl::StatusOr<std::optional<KernelCall>> IntegerConvForArtifact(const Node& node) {
  if constexpr (kMode == kRequantize) {
    KILN_ASSIGN_OR_RETURN(std::optional<KernelCall> winograd, LowerIntegerConvWinograd(node));
    if (winograd) return winograd;
  }
  return LowerIntegerConvFast(node, kMode);
}

absl::Status InferDynamicQuantizeLinear(InferContext& ctx) {
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  if (ctx.type(0).dtype != DType::kFloat32) return NodeError(ctx.node, "input must be float");
  ctx.output_types.resize(3);
  ctx.output_types[0] = ctx.type(0);
  ctx.output_types[0].dtype = DType::kUInt8;
  ctx.output_types[1] = TensorType::Static(DType::kFloat32, {});
  ctx.output_types[2] = TensorType::Static(DType::kUInt8, {});
  return absl::OkStatus();
}

absl::Status InferMatMulInteger(InferContext& ctx) {
  if (auto st = InferIntegerMatMul(ctx, 0, 1, DType::kInt32); !st.ok()) return st;
  const auto [M, N] = RowsAndColumns(ctx, 0, 1);
  if (auto st = CheckIntegerZeroPoint(ctx, 2, "a", M); !st.ok()) return st;
  return CheckIntegerZeroPoint(ctx, 3, "b", N);
}

absl::StatusOr<KernelCall> LowerMatMulInteger(const Node& node) {
  kiln_quant_params params{};
  KILN_ASSIGN_OR_RETURN(params.shape, MatMulShape(node, StaticDims(node.input(0)), StaticDims(node.input(1))));
  params.mode = kSumInt32;
  return CallWithParams<kernel::qmatmul>(PassInputs(node, 4), params);
}

absl::Status InferQLinearMatMul(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const DType y_type, RequantizedType(ctx));
  if (auto st = InferQuantizedMatMulOperands(ctx, y_type); !st.ok()) return st;
  return CheckScale(ctx, 6, 7, "y", {DType::kUInt8, DType::kInt8}, 1);
}

absl::StatusOr<KernelCall> LowerQLinearMatMul(const Node& node) {
  // Kernel order: A, B, A's zero point, B's, A's scale, B's, Y's scale, Y's zero point.
  return LowerQuantizedMatMul(node, {Input(node, 6), Input(node, 7)}, kRequantize);
}

// fold-qdq's MatMul between dequantized inputs whose result stays f32 (a bias Add, a
// GELU): inputs A, a_scale, a_zero_point, B, b_scale, b_zero_point as QLinearMatMul's,
// then an optional f32 bias [N]; y = sum * a_scale * b_scale + bias.
absl::Status InferQLinearMatMulToFloat(InferContext& ctx) {
  if (auto st = InferQuantizedMatMulOperands(ctx, DType::kFloat32); !st.ok()) return st;
  return CheckFloatBias(ctx, "bias", RowsAndColumns(ctx, 0, 3).second);
}

absl::StatusOr<KernelCall> LowerQLinearMatMulToFloat(const Node& node) {
  // Kernel order: A, B, A's zero point, B's, A's scale, B's, (no Y scale, zero point), bias.
  return LowerQuantizedMatMul(node, {KernelOperand{}, KernelOperand{}, Input(node, 6)}, kToFloat);
}

absl::Status InferConvInteger(InferContext& ctx) {
  if (auto st = InferIntegerConv(ctx, 0, 1, DType::kInt32); !st.ok()) return st;
  if (auto st = CheckIntegerZeroPoint(ctx, 2, "x", std::nullopt); !st.ok()) return st;
  return CheckIntegerZeroPoint(ctx, 3, "w", ctx.type(1).StaticDims()[0]);
}

absl::StatusOr<KernelCall> LowerConvInteger(const Node& node) {
  return LowerIntegerConv(node, PassInputs(node, 4), kSumInt32);
}

absl::Status InferQLinearConv(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const DType y_type, RequantizedType(ctx));
  if (auto st = InferQuantizedConvOperands(ctx, y_type); !st.ok()) return st;
  const int64_t out_channels = ctx.type(3).StaticDims()[0];
  if (auto st = CheckScale(ctx, 6, 7, "y", {DType::kUInt8, DType::kInt8}, 1); !st.ok()) return st;
  if (ctx.has_input(8)) {
    if (auto st = RequireStatic(ctx, 8); !st.ok()) return st;
    if (ctx.type(8).dtype != DType::kInt32 || ctx.type(8).StaticDims() != std::vector<int64_t>{out_channels}) {
      return NodeError(ctx.node, absl::StrCat("B must be int32 [", out_channels, "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerQLinearConv(const Node& node) {
  // Kernel order: X, W, X's zero point, W's, X's scale, W's, Y's scale, Y's zero point, B.
  return LowerIntegerConv(node, QuantizedOperands(node, {Input(node, 6), Input(node, 7), Input(node, 8)}), kRequantize);
}

// fold-qdq's Conv between dequantized inputs whose result stays f32 (read by an Add, a
// pool, a graph output): inputs X, x_scale, x_zero_point, W, w_scale, w_zero_point as
// QLinearConv's, then an optional f32 bias [OC]; y = sum * x_scale * w_scale + B. Input 7,
// the fuse pass's residual (ResNet's skip connection), is an f32 tensor of Y's shape added
// before kiln.relu: y = relu(sum * x_scale * w_scale + B + R). Inputs 8 and 9, the fuse
// pass's QuantizeLinear of that result (a scalar scale and zero point), make Y u8 or s8:
// saturate(rint(y / y_scale) + y_zero_point), as the QuantizeLinear would have written it.
// With inputs 10 and 11 (a scalar scale and zero point) R is u8/s8, the fuse pass's
// DequantizeLinear folded in: R = (R8 - zero point) * scale. Attributes kiln.clip_min and
// kiln.clip_max (the fuse pass's Clip) bound y after kiln.relu.
absl::Status InferQLinearConvToFloat(InferContext& ctx) {
  DType y_type = DType::kFloat32;
  if (ctx.has_input(8) || ctx.has_input(9)) {
    if (!ctx.has_input(8) || !ctx.has_input(9)) return NodeError(ctx.node, "y_scale and y_zero_point come together");
    if (auto st = CheckScale(ctx, 8, 9, "y", {DType::kUInt8, DType::kInt8}, 1); !st.ok()) return st;
    y_type = ctx.type(9).dtype;
  }
  if (auto st = InferQuantizedConvOperands(ctx, y_type); !st.ok()) return st;
  if (auto st = CheckFloatBias(ctx, "B", ctx.type(3).StaticDims()[0]); !st.ok()) return st;
  // Inputs 10 and 11: the residual is u8/s8, dequantized by this scale and zero point.
  DType residual_type = DType::kFloat32;
  if (ctx.has_input(10) || ctx.has_input(11)) {
    if (!ctx.has_input(7) || !ctx.has_input(10) || !ctx.has_input(11)) {
      return NodeError(ctx.node, "a quantized residual needs its scale and zero point (inputs 7, 10 and 11)");
    }
    if (auto st = CheckScale(ctx, 10, 11, "residual", {DType::kUInt8, DType::kInt8}, 1); !st.ok()) return st;
    residual_type = ctx.type(11).dtype;
  }
  if (ctx.has_input(7) && (ctx.type(7).dtype != residual_type || !ctx.type(7).IsStatic() ||
                           ctx.type(7).StaticDims() != ctx.output_types[0].StaticDims())) {
    return NodeError(ctx.node,
                     absl::StrCat("the residual (input 7) must be ", DTypeName(residual_type), " of Y's shape"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerQLinearConvToFloat(const Node& node) {
  // Kernel order: X, W, X's zero point, W's, X's scale, W's, (no Y scale, zero point), B, R,
  // then the scale and zero point by which a u8/i8 Y is quantized, then a u8/i8 R's.
  return LowerIntegerConv(
      node,
      QuantizedOperands(node, {KernelOperand{}, KernelOperand{}, Input(node, 6), Input(node, 7), Input(node, 8),
                               Input(node, 9), Input(node, 10), Input(node, 11), ClipBounds(node)}),
      kToFloat);
}

}  // namespace

void RegisterQuantOps(Registry& registry) {
  RegisterQuantizeAndDequantize(registry);
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower, lower_fast}
  const OpSchema ops[] = {
      {"DynamicQuantizeLinear", 1, 1, 0, InferDynamicQuantizeLinear, LowerToKernel<kernel::dynamic_quantize_linear>},
      {"MatMulInteger", 2, 4, 0, InferMatMulInteger, LowerMatMulInteger, IntegerMatMulForArtifact<kSumInt32>},
      {"QLinearMatMul", 8, 8, 0, InferQLinearMatMul, LowerQLinearMatMul, IntegerMatMulForArtifact<kRequantize>},
      {"kiln.QLinearMatMulToFloat", 6, 7, 0, InferQLinearMatMulToFloat, LowerQLinearMatMulToFloat,
       IntegerMatMulForArtifact<kToFloat>},
      {"ConvInteger", 2, 4, 0, InferConvInteger, LowerConvInteger, IntegerConvForArtifact<kSumInt32>},
      {"QLinearConv", 8, 9, 0, InferQLinearConv, LowerQLinearConv, IntegerConvForArtifact<kRequantize>},
      {"kiln.QLinearConvToFloat", 6, 12, 0, InferQLinearConvToFloat, LowerQLinearConvToFloat,
       IntegerConvForArtifact<kToFloat>},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
