// Signal ops and others with a kernel of kernels/signal/signal.cc: DFT (opset 17 and 20
// forms), STFT, MelWeightMatrix, MaxUnpool and TfIdfVectorizer (integer pools). The
// shapes of the first four follow from input data (dft_length, frame_step, ...), so each
// has a run-time rule whose shape function also gives its static shapes when those inputs
// are constants (InferByDynamicRule), as the window generators do.
#include <algorithm>

#include "op_helpers.h"

namespace kiln::ops {
namespace {

// Unlike dynamic_ops.cc's, passes all `num_inputs` operands, omitted ones as null tensors:
// these shape functions index their optional inputs by position.
template <typename K>
DynamicShape ShapeCall(const InferContext& ctx, size_t num_inputs, const kiln_shape_params& params, TensorType out) {
  return DynamicShape{CallWithParams<K>(PassInputs(ctx.node, num_inputs), params), {std::move(out)}};
}

absl::Status RequireFloatInput(const InferContext& ctx, size_t i) {
  const DType d = ctx.type(i).dtype;
  if (d != DType::kFloat32 && d != DType::kFloat64) {
    return NodeError(ctx.node, absl::StrCat("input ", i, " has element type ", DTypeName(d), "; float or double"));
  }
  return absl::OkStatus();
}

// DFT's axis, normalised against input 0's rank r: the attribute (default 1) before
// opset 20, from then on input 2 (a constant; default -2). It may not be the last dim
// (the real/imaginary one).
absl::StatusOr<int64_t> DftAxis(const Node& node, const Tensor* axis_input, int64_t rank) {
  int64_t axis = node.GetInt("axis", 1);
  if (node.opset() >= 20) {
    axis = -2;
    if (node.inputs().size() > 2 && node.input(2) != nullptr) {
      if (axis_input == nullptr) return NodeError(node, "the axis input must be a compile-time constant");
      axis = ToInts(*axis_input).at(0);
    }
  }
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank - 1) return NodeError(node, absl::StrCat("axis is out of range for rank ", rank));
  return axis;
}

bool HasInput(const Node& node, size_t i) { return node.inputs().size() > i && node.input(i) != nullptr; }

absl::StatusOr<DynamicShape> DftRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloatInput(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  kiln_shape_params p{};
  KILN_ASSIGN_OR_RETURN(p.axis, DftAxis(ctx.node, ctx.constant(2), rank));
  const bool onesided = ctx.node.GetInt("onesided", 0) != 0;
  if (onesided && ctx.node.GetInt("inverse", 0) != 0)
    return NodeError(ctx.node, "onesided inverse DFT is not supported");
  p.flags = (onesided ? KILN_SIGNAL_ONESIDED : 0) | (HasInput(ctx.node, 1) ? KILN_SIGNAL_HAS_LENGTH : 0);
  return ShapeCall<kernel::shape_dft>(ctx, 2, p, RankOnly(ctx.type(0).dtype, rank));
}

absl::StatusOr<KernelCall> LowerDft(const Node& node) {
  kiln_signal_params params{};
  const Tensor* axis = HasInput(node, 2) && node.input(2)->is_constant() ? node.input(2)->constant().get() : nullptr;
  KILN_ASSIGN_OR_RETURN(params.axis, DftAxis(node, axis, static_cast<int64_t>(node.input(0)->type().shape.size())));
  params.inverse = node.GetInt("inverse", 0) != 0;
  params.onesided = node.GetInt("onesided", 0) != 0;
  params.has_length = HasInput(node, 1);
  return CallWithParams<kernel::dft>(PassInputs(node, 2), params);
}

absl::StatusOr<DynamicShape> StftRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloatInput(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  if (rank != 3) return NodeError(ctx.node, "signal must be [batch_size, signal_length, 1 or 2]");
  const bool window = HasInput(ctx.node, 2), length = HasInput(ctx.node, 3);
  if (!window && !length) return NodeError(ctx.node, "needs a window or a frame_length");
  if (window && (!ctx.type(2).has_shape || ctx.type(2).shape.size() != 1)) {
    return NodeError(ctx.node, "window must be 1-D");
  }
  kiln_shape_params p{};
  p.flags = (ctx.node.GetInt("onesided", 1) != 0 ? KILN_SIGNAL_ONESIDED : 0) | (length ? KILN_SIGNAL_HAS_LENGTH : 0) |
            (window ? KILN_SIGNAL_HAS_WINDOW : 0);
  return ShapeCall<kernel::shape_stft>(ctx, 4, p, RankOnly(ctx.type(0).dtype, 4));
}

absl::StatusOr<KernelCall> LowerStft(const Node& node) {
  kiln_signal_params params{};
  params.onesided = node.GetInt("onesided", 1) != 0;
  params.has_window = HasInput(node, 2);
  params.has_length = HasInput(node, 3);
  return CallWithParams<kernel::stft>(PassInputs(node, 4), params);
}

absl::StatusOr<DynamicShape> MelWeightMatrixRule(const InferContext& ctx) {
  const auto dtype = static_cast<DType>(ctx.node.GetInt("output_datatype", static_cast<int64_t>(DType::kFloat32)));
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return NodeError(ctx.node, "output_datatype must be float or double");
  }
  return ShapeCall<kernel::shape_mel_weight_matrix>(ctx, 5, kiln_shape_params{}, RankOnly(dtype, 2));
}

absl::StatusOr<DynamicShape> MaxUnpoolRule(const InferContext& ctx) {
  KILN_RETURN_IF_ERROR(RequireFloatInput(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t rank, RankOf(ctx, 0));
  const int64_t r = rank - 2;
  if (r < 1 || r > 4) return NodeError(ctx.node, absl::StrCat("input rank ", rank, " is not 3 to 6"));
  kiln_shape_params p{};
  if (HasInput(ctx.node, 2)) {
    if (!ctx.type(2).IsStatic() || ctx.type(2).StaticDims() != std::vector<int64_t>{rank}) {
      return NodeError(ctx.node, "output_shape must be 1-D with one entry per input dim");
    }
    p.flags = KILN_SIGNAL_FROM_INPUT;
    return ShapeCall<kernel::shape_max_unpool>(ctx, 3, p, RankOnly(ctx.type(0).dtype, rank));
  }
  const std::vector<int64_t> kernel = ctx.node.GetInts("kernel_shape");
  const std::vector<int64_t> strides = ctx.node.GetInts("strides", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> pads = ctx.node.GetInts("pads", std::vector<int64_t>(2 * r, 0));
  if (static_cast<int64_t>(kernel.size()) != r || static_cast<int64_t>(strides.size()) != r ||
      static_cast<int64_t>(pads.size()) != 2 * r) {
    return NodeError(ctx.node, "kernel_shape/strides/pads do not match the spatial rank");
  }
  p.num_ints = r;
  for (int64_t i = 0; i < r; ++i) {
    p.ints[i] = kernel[i];
    p.ints[r + i] = strides[i];
    p.ints[2 * r + i] = pads[i];
    p.ints[3 * r + i] = pads[r + i];
  }
  return ShapeCall<kernel::shape_max_unpool>(ctx, 3, p, RankOnly(ctx.type(0).dtype, rank));
}

absl::StatusOr<KernelCall> LowerMaxUnpool(const Node& node) {
  const int64_t r = static_cast<int64_t>(node.input(0)->type().shape.size()) - 2;
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape");
  const std::vector<int64_t> strides = node.GetInts("strides", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * r, 0));
  if (r < 1 || r > 4 || static_cast<int64_t>(kernel.size()) != r || static_cast<int64_t>(strides.size()) != r ||
      static_cast<int64_t>(pads.size()) != 2 * r) {
    return NodeError(node, "kernel_shape/strides/pads do not match the spatial rank (1 to 4)");
  }
  kiln_unpool_params params{};
  params.num_spatial = r;
  std::copy(kernel.begin(), kernel.end(), params.kernel);
  std::copy(strides.begin(), strides.end(), params.strides);
  std::copy(pads.begin(), pads.end(), params.pads);
  return CallWithParams<kernel::max_unpool>(PassInputs(node, 2), params);
}

constexpr NamedCode kTfIdfModes[] = {{"TF", KILN_TFIDF_TF}, {"IDF", KILN_TFIDF_IDF}, {"TFIDF", KILN_TFIDF_TFIDF}};

// TfIdfVectorizer's attributes, checked: an integer pool grouped by ngram_counts, one
// ngram_indexes entry per pool n-gram. Returns the output width (the largest index + 1).
absl::StatusOr<int64_t> TfIdfWidth(const Node& node) {
  if (node.has_attr("pool_strings")) {
    return NodeError(node, "pool_strings is not supported (Kiln has no string tensors); use pool_int64s");
  }
  const std::vector<int64_t> pool = node.GetInts("pool_int64s"), counts = node.GetInts("ngram_counts");
  const std::vector<int64_t> indexes = node.GetInts("ngram_indexes");
  const int64_t min_n = node.GetInt("min_gram_length", 0), max_n = node.GetInt("max_gram_length", 0);
  if (min_n < 1 || max_n < min_n) return NodeError(node, "needs 1 <= min_gram_length <= max_gram_length");
  if (node.GetInt("max_skip_count", 0) < 0) return NodeError(node, "max_skip_count must not be negative");
  int64_t ngrams = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    const int64_t end = g + 1 < counts.size() ? counts[g + 1] : static_cast<int64_t>(pool.size());
    if (counts[g] < 0 || end < counts[g] || (end - counts[g]) % static_cast<int64_t>(g + 1) != 0) {
      return NodeError(node, "ngram_counts does not split pool_int64s into n-grams of lengths 1, 2, ...");
    }
    ngrams += (end - counts[g]) / static_cast<int64_t>(g + 1);
  }
  if (static_cast<int64_t>(indexes.size()) != ngrams) {
    return NodeError(node, absl::StrCat("ngram_indexes has ", indexes.size(), " entries for ", ngrams, " n-grams"));
  }
  const std::vector<double> weights = node.GetFloats("weights");
  if (!weights.empty() && weights.size() != indexes.size()) {
    return NodeError(node, "weights must have one entry per n-gram");
  }
  int64_t width = 0;
  for (int64_t index : indexes) {
    if (index < 0) return NodeError(node, "ngram_indexes must not be negative");
    width = std::max(width, index + 1);
  }
  return width;
}

absl::Status InferTfIdfVectorizer(InferContext& ctx) {
  const DType d = ctx.type(0).dtype;
  if (d != DType::kInt32 && d != DType::kInt64) {
    return NodeError(ctx.node, absl::StrCat("input has element type ", DTypeName(d), "; int32 or int64 (no strings)"));
  }
  KILN_RETURN_IF_ERROR(RequireStatic(ctx, 0));
  if (auto mode = NamedAttr(ctx.node, "mode", "TF", kTfIdfModes); !mode.ok()) return mode.status();
  KILN_ASSIGN_OR_RETURN(int64_t width, TfIdfWidth(ctx.node));
  const std::vector<int64_t> x = ctx.type(0).StaticDims();
  if (x.size() != 1 && x.size() != 2) return NodeError(ctx.node, "input must be [C] or [N, C]");
  ctx.output_types[0] = TensorType::Static(
      DType::kFloat32, x.size() == 1 ? std::vector<int64_t>{width} : std::vector<int64_t>{x[0], width});
  return absl::OkStatus();
}

template <typename T>
KernelOperand ConstantOperand(DType dtype, const std::vector<T>& values) {
  auto tensor = std::make_shared<Tensor>(dtype, std::vector<int64_t>{static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), tensor->data_as<T>());
  return KernelOperand{-1, std::move(tensor)};
}

absl::StatusOr<KernelCall> LowerTfIdfVectorizer(const Node& node) {
  kiln_tfidf_params params{};
  KILN_ASSIGN_OR_RETURN(params.mode, NamedAttr(node, "mode", "TF", kTfIdfModes));
  params.min_gram_length = node.GetInt("min_gram_length", 1);
  params.max_gram_length = node.GetInt("max_gram_length", 1);
  params.max_skip_count = node.GetInt("max_skip_count", 0);
  std::vector<KernelOperand> operands = PassInputs(node, 1);
  operands.push_back(ConstantOperand(DType::kInt64, node.GetInts("pool_int64s")));
  operands.push_back(ConstantOperand(DType::kInt64, node.GetInts("ngram_counts")));
  operands.push_back(ConstantOperand(DType::kInt64, node.GetInts("ngram_indexes")));
  operands.push_back(ConstantOperand(DType::kFloat64, node.GetFloats("weights")));
  return CallWithParams<kernel::tfidf_vectorizer>(std::move(operands), params);
}

}  // namespace

void RegisterSignalOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}; the first
  // four with their run-time rules.
  struct Row {
    OpSchema schema;
    std::function<absl::StatusOr<DynamicShape>(const InferContext&)> rule;
  };
  const Row rows[] = {
      {{"DFT", 1, 3, 0b110, InferByDynamicRule, LowerDft}, DftRule},
      {{"STFT", 2, 4, 0b1010, InferByDynamicRule, LowerStft}, StftRule},
      {{"MelWeightMatrix", 5, 5, 0b11, InferByDynamicRule, LowerToKernel<kernel::mel_weight_matrix>},
       MelWeightMatrixRule},
      {{"MaxUnpool", 2, 3, 0b100, InferByDynamicRule, LowerMaxUnpool}, MaxUnpoolRule},
      {{"TfIdfVectorizer", 1, 1, 0, InferTfIdfVectorizer, LowerTfIdfVectorizer}, nullptr},
  };
  for (const Row& row : rows) {
    OpSchema schema = row.schema;
    schema.dynamic = row.rule;
    registry.Add(schema);
  }
}

}  // namespace kiln::ops
