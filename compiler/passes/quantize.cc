// quantize: post-training static quantization to QDQ form. Runs the (f32, BatchNorm-folded)
// graph in the reference interpreter over the calibration samples, takes each activation's
// range (min/max, a percentile, or the KL-divergence threshold), and rewrites every Conv
// and MatMul with a constant f32 weight (a Gemm becomes one first, its bias an Add), unless
// the user keeps it in f32 or it is a grouped conv too narrow for the int8 kernel
// (depthwise):
//   %y = Conv(%x, W, B)
//     =>  %xq = QuantizeLinear(%x, sx, zx) ; %xd = DequantizeLinear(%xq, sx, zx)  (after %x's
//         producer, read by everything that read %x)
//         %wd = DequantizeLinear(Wq, sw) {axis=0}          Wq = rint(W / sw), sw per channel
//         %y = Conv(%xd, %wd, B)
// Activations are u8, asymmetric, per tensor, with 0 inside the range (zero padding and
// ReLU stay exact); weights s8, symmetric (zero point 0, [-127, 127]) per output channel
// (a MatMul's B per column). Only what a Conv or MatMul reads is quantized, once, at its
// producer: a Conv (+ Relu) feeding another becomes a QLinearConv with u8 output (fold-qdq
// finds the QuantizeLinear after it), one feeding f32 ops (a residual Add, a pool) a
// kiln.QLinearConvToFloat, so no value is rounded to 8 bits that no integer op reads.
// Last, the quantized graph runs once more on the first sample: each quantized node's output
// against its f32 value (SNR, max error), worst 10 into the summary for the report.
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/passes.h"

namespace kiln {

absl::StatusOr<CalibrationMethod> ParseCalibrationMethod(const std::string& text) {
  if (text == "minmax") return CalibrationMethod::kMinMax;
  if (text == "percentile") return CalibrationMethod::kPercentile;
  if (text == "entropy") return CalibrationMethod::kEntropy;
  return absl::InvalidArgumentError(
      absl::StrCat("calibration method '", text, "' is not one of minmax, percentile, entropy"));
}

QuantizationConfig QuantizationConfigFrom(const PassInvocation& options) {
  QuantizationConfig config;
  // The option's choices are the method names, so the parse cannot fail.
  config.method = ParseCalibrationMethod(options.Choice("method")).value_or(CalibrationMethod::kMinMax);
  config.percentile = options.Number("percentile");
  for (std::string& name : options.List("keep-float")) config.keep_float.insert(std::move(name));
  config.quantize_outputs = options.Bool("quantize-outputs");
  return config;
}

absl::Status SetQuantizationOptions(const QuantizationConfig& config, PassInvocation& options) {
  if (absl::Status s = options.Set("method", CalibrationMethodName(config.method)); !s.ok()) return s;
  if (absl::Status s = options.SetNumber("percentile", config.percentile); !s.ok()) return s;
  if (absl::Status s = options.SetList("keep-float", {config.keep_float.begin(), config.keep_float.end()}); !s.ok())
    return s;
  return options.Set("quantize-outputs", config.quantize_outputs ? "true" : "false");
}

const char* CalibrationMethodName(CalibrationMethod method) {
  switch (method) {
    case CalibrationMethod::kPercentile: return "percentile";
    case CalibrationMethod::kEntropy: return "entropy";
    default: return "minmax";
  }
}

namespace {

constexpr int kHistogramBins = 2048;
constexpr int64_t kMinInt8ChannelsPerGroup = 8;  // the int8 conv's tile rows

// One activation's statistics over the calibration samples.
struct Observed {
  double lo = INFINITY, hi = -INFINITY;
  std::vector<double> histogram;  // kHistogramBins over [lo, hi] (second pass)
};

bool IsQuantizable(const Node* node) {
  if (node->outputs().size() != 1) return false;
  const Value* x = node->input(0);
  const Value* w = node->input(1);
  if (x == nullptr || w == nullptr || x->is_constant() || x->type().dtype != DType::kFloat32 || !x->type().IsStatic() ||
      !w->is_constant() || w->type().dtype != DType::kFloat32) {
    return false;
  }
  for (const auto& [key, value] : node->attrs()) {
    if (key.rfind("kiln.", 0) == 0) return false;
  }
  if (node->op() == "Conv") {
    if (node->inputs().size() > 3 || (node->input(2) != nullptr && !node->input(2)->is_constant())) return false;
    const size_t rank = w->type().shape.size();
    return rank == 3 || rank == 4;
  }
  return node->op() == "MatMul" && node->inputs().size() == 2 && w->type().shape.size() == 2;
}

// The range kept of an observed tensor by the calibration method, always holding 0.
std::pair<double, double> ChooseRange(const Observed& o, const QuantizationConfig& config) {
  double lo = std::min(o.lo, 0.0), hi = std::max(o.hi, 0.0);
  if (config.method == CalibrationMethod::kMinMax || o.histogram.empty() || !(o.hi > o.lo)) return {lo, hi};
  const double width = (o.hi - o.lo) / kHistogramBins;
  double total = 0;
  for (double c : o.histogram) total += c;
  if (total <= 0) return {lo, hi};
  if (config.method == CalibrationMethod::kPercentile) {
    // The lower and upper (100 - p) / 2 % tails are clipped (for a one-sided ReLU output,
    // the whole 100 - p at the top; its lower bound is 0 anyway).
    const double tail = (100.0 - config.percentile) / 100.0 * total / (o.lo >= 0 ? 1 : 2);
    double seen = 0;
    int first = 0, last = kHistogramBins - 1;
    for (; first < kHistogramBins - 1 && seen + o.histogram[first] <= tail; ++first) seen += o.histogram[first];
    seen = 0;
    for (; last > first && seen + o.histogram[last] <= tail; --last) seen += o.histogram[last];
    return {std::min(o.lo + first * width, 0.0), std::max(o.lo + (last + 1) * width, 0.0)};
  }
  // Entropy: the upper bound whose 255-level quantization of the clipped distribution
  // (the mass past it folded into the last bin) diverges least (KL) from the distribution,
  // as TensorRT calibrates; the lower bound scales with it for two-sided tensors.
  const int zero_bin = std::clamp(static_cast<int>(std::floor(-o.lo / width)), 0, kHistogramBins - 1);
  const int above = kHistogramBins - zero_bin;  // bins from 0 to the max
  constexpr int kLevels = 255;
  if (above <= kLevels) return {lo, hi};
  double best = INFINITY;
  int best_end = above;
  for (int end = kLevels; end <= above; end += 8) {
    // p: the distribution clipped at `end`, the mass past it folded into its last bin; q:
    // the clipped bins without that mass merged into kLevels levels, each level's mass
    // spread over its nonempty bins (what quantizing at this range keeps). At end = kLevels
    // q differs from p only by the folded outliers, so clipping is weighed against rounding.
    std::vector<double> clipped(o.histogram.begin() + zero_bin, o.histogram.begin() + zero_bin + end);
    clipped[0] = 0;  // values at 0 (a ReLU's half of them) stay exact at any range: not weighed
    std::vector<double> p = clipped;
    for (int i = zero_bin + end; i < kHistogramBins; ++i) p.back() += o.histogram[i];
    std::vector<double> q(end, 0.0);
    for (int level = 0; level < kLevels; ++level) {
      const int b0 = level * end / kLevels, b1 = (level + 1) * end / kLevels;
      double mass = 0;
      int nonzero = 0;
      for (int i = b0; i < b1; ++i) {
        mass += clipped[i];
        nonzero += clipped[i] > 0;
      }
      for (int i = b0; i < b1 && nonzero > 0; ++i) q[i] = clipped[i] > 0 ? mass / nonzero : 0;
    }
    double sp = 0, sq = 0;
    for (int i = 0; i < end; ++i) {
      sp += p[i];
      sq += q[i];
    }
    double kl = 0;
    for (int i = 0; i < end; ++i) {
      if (p[i] <= 0) continue;
      const double pi = p[i] / sp, qi = q[i] / sq;
      kl += qi > 0 ? pi * std::log(pi / qi) : pi * 30.0;  // an empty level where p has mass: heavily penalised
    }
    if (kl < best) {
      best = kl;
      best_end = end;
    }
  }
  const double upper = best_end * width;  // above 0
  const double scale = upper / std::max(hi, 1e-30);
  return {lo * std::min(scale, 1.0), upper};
}

// u8 scale and zero point for a range holding 0.
std::pair<float, uint8_t> ActivationParams(double lo, double hi) {
  const double span = hi - lo;
  if (!(span > 0)) return {1.f, 0};
  const float scale = static_cast<float>(span / 255.0);
  const double zero = std::nearbyint(-lo / scale);
  return {scale, static_cast<uint8_t>(std::clamp(zero, 0.0, 255.0))};
}

class Quantize : public Pass {
 public:
  explicit Quantize(QuantizationConfig config) : config_(std::move(config)) {}

  absl::StatusOr<bool> Run(Graph& graph, PassContext& context) override {
    // Samples are data, not options: the driver decodes them into the context.
    if (context.calibration_samples.empty()) {
      return absl::InvalidArgumentError(
          "the quantize pass needs calibration samples (kiln compile --precision int8 --calibration DIR)");
    }
    const std::vector<std::vector<Tensor>>& samples = context.calibration_samples;
    QuantizationSummary& summary = context.quantization_summary;
    summary.method = CalibrationMethodName(config_.method);
    summary.calibration_samples = static_cast<int64_t>(samples.size());
    GemmsToMatMuls(graph, summary);
    graph.Compact();
    Targets targets = SelectTargets(graph, summary);
    if (absl::Status st = CheckKeepFloatNames(graph); !st.ok()) return st;
    if (targets.nodes.empty()) return false;
    // The f32 outputs of the nodes to quantize on the first sample (kept by calibration's
    // first run), for the per-layer error breakdown once they are quantized.
    std::map<const Value*, Tensor> reference;
    for (Node* node : targets.nodes) reference[node->output(0)];
    if (auto st = Calibrate(graph, config_, samples, targets.observed, reference); !st.ok()) return st;
    std::map<const Value*, Value*> dequantized;
    for (Node* node : targets.nodes) {
      // (An earlier target's result may be this one's input: its readers, this node among
      // them, already read the dequantized value, which QuantizeValue finds by the
      // original.)
      QuantizeValue(graph, targets.input_of[node], targets.observed, dequantized);
      QuantizeWeight(graph, node);
      if (config_.quantize_outputs) QuantizeValue(graph, targets.result_of[node], targets.observed, dequantized);
      ++summary.quantized_nodes;
    }
    if (auto st = BreakDownError(graph, samples.front(), targets.nodes, reference, summary); !st.ok()) return st;
    return true;
  }

 private:
  // The nodes to quantize, and the activations they read (and, with quantize-outputs, the
  // results to quantize), as they were before any rewriting.
  struct Targets {
    std::vector<Node*> nodes;
    std::map<const Value*, Observed> observed;
    std::map<Node*, Value*> input_of, result_of;
  };

  void GemmsToMatMuls(Graph& graph, QuantizationSummary& summary) const {
    for (Node* node : graph.nodes()) {
      if (node->op() != "Gemm") continue;
      if (config_.keep_float.count(node->name())) {
        summary.kept_float.push_back(node->name() + " (--keep-float)");
      } else if (!GemmToMatMul(graph, node)) {
        summary.kept_float.push_back(node->name() +
                                     " (Gemm with transA, a non-constant B or a C per row: not quantized)");
      }
    }
  }

  // Why `node` (a Conv or MatMul) stays in f32, or "" to quantize it.
  std::string KeptFloatBecause(const Node* node) const {
    if (config_.keep_float.count(node->name())) return "--keep-float";
    if (!IsQuantizable(node)) {
      const Value* x = node->input(0);
      const Value* w = node->input(1);
      if (x != nullptr && x->type().is_tensor() && !x->type().IsStatic() && w != nullptr && w->is_constant()) {
        // Calibration runs such a graph; the int8 kernels compile with static shapes only.
        return absl::StrCat("its input's shape ", PrintType(x->type()),
                            " is known only at run time: int8 needs static shapes (--input-shape)");
      }
      return "not a 2-D/1-D Conv or MatMul with a constant f32 weight";
    }
    // The int8 convolution computes 8 output channels of one group per tile over quads
    // of its input channels: a depthwise conv (1 channel per group) would use 1/32 of
    // it and run several times slower than the f32 depthwise kernel.
    if (node->op() == "Conv" && node->GetInt("group", 1) > 1 &&
        node->input(1)->type().shape[0].size / node->GetInt("group", 1) < kMinInt8ChannelsPerGroup) {
      return "grouped conv with fewer than 8 output channels per group: faster in f32";
    }
    return "";
  }

  // Conv and MatMul nodes inside control-flow bodies stay f32: calibration runs the bodies
  // (a body value's range is taken over all iterations), but the QDQ rewrite and fold-qdq
  // work on the main graph.
  static void ListBodyNodes(const Node& node, QuantizationSummary& summary) {
    for (const auto& [key, body] : node.subgraphs()) {
      for (const Node* inner : body->nodes()) {
        if (inner->op() == "Conv" || inner->op() == "MatMul") {
          summary.kept_float.push_back(absl::StrCat(inner->name(), " (inside subgraph '", key, "' of ", node.op(), " '",
                                                    node.name(), "': bodies stay f32)"));
        }
        ListBodyNodes(*inner, summary);
      }
    }
  }

  Targets SelectTargets(Graph& graph, QuantizationSummary& summary) const {
    Targets targets;
    for (Node* node : graph.nodes()) {
      ListBodyNodes(*node, summary);
      if (node->op() != "Conv" && node->op() != "MatMul") continue;
      if (const std::string why = KeptFloatBecause(node); !why.empty()) {
        summary.kept_float.push_back(node->name() + " (" + why + ")");
        continue;
      }
      targets.nodes.push_back(node);
      targets.input_of[node] = node->input(0);
      targets.observed[node->input(0)];
      if (config_.quantize_outputs) {
        Value* result = node->output(0);
        const std::vector<Node*> users = graph.Users(result);
        if (users.size() == 1 && users[0]->op() == "Relu" && !graph.IsGraphOutput(result)) result = users[0]->output(0);
        targets.result_of[node] = result;
        targets.observed[result];
      }
    }
    return targets;
  }

  absl::Status CheckKeepFloatNames(const Graph& graph) const {
    for (const std::string& name : config_.keep_float) {
      bool found = false;
      for (const Node* node : graph.nodes()) found |= node->name() == name;
      if (!found) return absl::InvalidArgumentError(absl::StrCat("--keep-float: the graph has no node '", name, "'"));
    }
    return absl::OkStatus();
  }

  // One QuantizeLinear/DequantizeLinear pair per activation, after its producer; every
  // reader of `v` reads the dequantized value instead.
  Value* QuantizeValue(Graph& graph, Value* v, std::map<const Value*, Observed>& observed,
                       std::map<const Value*, Value*>& dequantized) const {
    auto it = dequantized.find(v);
    if (it != dequantized.end()) return it->second;
    const auto [lo, hi] = ChooseRange(observed[v], config_);
    const auto [scale, zero] = ActivationParams(lo, hi);
    auto s = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{});
    s->data_as<float>()[0] = scale;
    auto z = std::make_shared<Tensor>(DType::kUInt8, std::vector<int64_t>{});
    z->data_as<uint8_t>()[0] = zero;
    Value* sv = graph.AddConstant(graph.UniqueName(v->name() + ".scale"), s);
    Value* zv = graph.AddConstant(graph.UniqueName(v->name() + ".zero_point"), z);
    const std::vector<Node*> readers = graph.Users(v);
    Node* anchor = v->producer() != nullptr ? NextNode(graph, v->producer()) : FirstNode(graph);
    Node* q = InsertBefore(graph, anchor, "QuantizeLinear", v->name() + ".quantize", {v, sv, zv}, v->name() + ".q");
    q->output(0)->set_type(TensorType::Static(DType::kUInt8, v->type().StaticDims()));
    Node* dq = InsertBefore(graph, anchor, "DequantizeLinear", v->name() + ".dequantize", {q->output(0), sv, zv},
                            v->name() + ".dq");
    dq->output(0)->set_type(v->type());
    for (Node* reader : readers) {
      for (size_t i = 0; i < reader->inputs().size(); ++i) {
        if (reader->input(i) == v) reader->set_input(i, dq->output(0));
      }
    }
    dequantized[v] = dq->output(0);
    return dq->output(0);
  }

  QuantizationConfig config_;  // from the pass options

  // A Gemm with a constant B and a bias of N values (or none) as the MatMul the rest of
  // quantization handles, plus an Add of the bias (fold-qdq then takes the Add into the
  // integer op):  Gemm(A, B, C) {alpha, beta, transB}  =>  Add(MatMul(A, alpha * B'), beta * C).
  static bool GemmToMatMul(Graph& graph, Node* gemm) {
    const Value* a = gemm->input(0);
    const Value* b = gemm->input(1);
    const Value* c = gemm->input(2);
    if (gemm->GetInt("transA", 0) != 0 || a == nullptr || a->is_constant() || a->type().dtype != DType::kFloat32 ||
        !a->type().IsStatic() || b == nullptr || !b->is_constant() || b->type().dtype != DType::kFloat32 ||
        b->type().shape.size() != 2) {
      return false;
    }
    const bool trans_b = gemm->GetInt("transB", 0) != 0;
    const std::vector<int64_t> bd = b->type().StaticDims();
    const int64_t K = trans_b ? bd[1] : bd[0], N = trans_b ? bd[0] : bd[1];
    if (c != nullptr && (!c->is_constant() || c->type().dtype != DType::kFloat32 ||
                         (c->constant()->num_elements() != N && c->constant()->num_elements() != 1) ||
                         (c->type().shape.size() == 2 && c->type().shape[0].size != 1))) {
      return false;
    }
    const float alpha = static_cast<float>(gemm->GetFloat("alpha", 1.0)),
                beta = static_cast<float>(gemm->GetFloat("beta", 1.0));
    auto weight = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{K, N});
    const float* src = b->constant()->data_as<float>();
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n = 0; n < N; ++n)
        weight->data_as<float>()[k * N + n] = alpha * (trans_b ? src[n * K + k] : src[k * N + n]);
    }
    Value* w = graph.AddConstant(graph.UniqueName(b->name() + ".kn"), weight);
    Node* matmul = graph.InsertNodeBefore(gemm, "MatMul", gemm->name(), {gemm->input(0), w},
                                          {graph.UniqueName(gemm->output(0)->name() + ".mm")},
                                          gemm->opset() < 13 ? 13 : gemm->opset());
    matmul->output(0)->set_type(gemm->output(0)->type());
    Value* result = matmul->output(0);
    if (c != nullptr) {
      auto bias = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{N});
      for (int64_t n = 0; n < N; ++n)
        bias->data_as<float>()[n] =
            beta * static_cast<float>(c->constant()->GetAsDouble(c->constant()->num_elements() > 1 ? n : 0));
      Node* add = graph.InsertNodeBefore(gemm, "Add", gemm->name() + ".bias",
                                         {result, graph.AddConstant(graph.UniqueName(gemm->name() + ".bias"), bias)},
                                         {graph.UniqueName(gemm->output(0)->name() + ".biased")},
                                         gemm->opset() < 13 ? 13 : gemm->opset());
      add->output(0)->set_type(gemm->output(0)->type());
      result = add->output(0);
    }
    graph.TakeOver(gemm->output(0), result);
    graph.RemoveNode(gemm);
    return true;
  }

  // Two passes over the samples: ranges, then (percentile, entropy) histograms over them.
  // The first run also fills `first_sample` (keyed by the values wanted) with its tensors.
  static absl::Status Calibrate(const Graph& graph, const QuantizationConfig& config,
                                const std::vector<std::vector<Tensor>>& samples,
                                std::map<const Value*, Observed>& observed,
                                std::map<const Value*, Tensor>& first_sample) {
    for (int pass = 0; pass < (config.method == CalibrationMethod::kMinMax ? 1 : 2); ++pass) {
      for (const std::vector<Tensor>& sample : samples) {
        const bool first = pass == 0 && &sample == &samples.front();
        auto observe = [&](const Value* v, const Tensor& t) {
          if (first) {
            auto kept = first_sample.find(v);
            if (kept != first_sample.end()) kept->second = t;
          }
          auto it = observed.find(v);
          if (it == observed.end() || t.dtype() != DType::kFloat32) return;
          Observed& o = it->second;
          const float* data = t.data_as<float>();
          if (pass == 0) {
            for (int64_t i = 0; i < t.num_elements(); ++i) {
              if (std::isfinite(data[i])) {
                o.lo = std::min(o.lo, static_cast<double>(data[i]));
                o.hi = std::max(o.hi, static_cast<double>(data[i]));
              }
            }
            return;
          }
          if (!(o.hi > o.lo)) return;
          o.histogram.resize(kHistogramBins);
          const double per_bin = kHistogramBins / (o.hi - o.lo);
          for (int64_t i = 0; i < t.num_elements(); ++i) {
            if (!std::isfinite(data[i])) continue;
            const int bin = std::clamp(static_cast<int>((data[i] - o.lo) * per_bin), 0, kHistogramBins - 1);
            o.histogram[bin] += 1;
          }
        };
        auto run = RunGraph(graph, sample, observe);
        if (!run.ok()) return absl::Status(run.status().code(), absl::StrCat("calibration: ", run.status().message()));
      }
    }
    for (auto& [value, o] : observed) {
      if (!(o.lo <= o.hi)) o.lo = o.hi = 0;  // never seen finite: an empty range
    }
    return absl::OkStatus();
  }

  // Runs the quantized (QDQ) graph on the first calibration sample and ranks the quantized
  // nodes' outputs by SNR against their f32 values: the first 10 go to the summary.
  static absl::Status BreakDownError(const Graph& graph, const std::vector<Tensor>& first_sample,
                                     const std::vector<Node*>& targets, const std::map<const Value*, Tensor>& reference,
                                     QuantizationSummary& summary) {
    std::map<const Value*, QuantizationSummary::LayerError> errors;
    for (Node* node : targets) errors[node->output(0)] = {node->name(), node->op()};
    auto run = RunGraph(graph, first_sample, [&](const Value* v, const Tensor& t) {
      auto it = errors.find(v);
      if (it == errors.end() || t.dtype() != DType::kFloat32) return;
      const Tensor& want = reference.at(v);
      double signal = 0, noise = 0, max_abs = 0, scale = 0;
      for (int64_t i = 0; i < t.num_elements() && i < want.num_elements(); ++i) {
        const double r = want.data_as<float>()[i], e = t.data_as<float>()[i] - r;
        signal += r * r;
        noise += e * e;
        max_abs = std::max(max_abs, std::fabs(e));
        scale = std::max(scale, std::fabs(r));
      }
      it->second.snr_db = noise == 0 ? 200.0 : signal == 0 ? -200.0 : std::min(200.0, 10 * std::log10(signal / noise));
      it->second.max_abs_error = max_abs;
      it->second.reference_scale = scale;
    });
    if (!run.ok()) return absl::Status(run.status().code(), absl::StrCat("per-layer error: ", run.status().message()));
    std::vector<QuantizationSummary::LayerError> ranked;
    for (const auto& [value, error] : errors) ranked.push_back(error);
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.snr_db != b.snr_db ? a.snr_db < b.snr_db : a.node < b.node;
    });
    if (ranked.size() > 10) ranked.resize(10);
    summary.layers_by_error = std::move(ranked);
    return absl::OkStatus();
  }

  // W -> DequantizeLinear(Wq, sw): s8 symmetric per output channel (Conv axis 0, MatMul's
  // B axis 1).
  static void QuantizeWeight(Graph& graph, Node* node) {
    Value* w = node->input(1);
    const std::vector<int64_t> wd = w->type().StaticDims();
    const bool conv = node->op() == "Conv";
    const int64_t channels = conv ? wd[0] : wd[1];
    const int64_t n = w->constant()->num_elements();
    const float* data = w->constant()->data_as<float>();
    auto channel_of = [&](int64_t i) { return conv ? i / (n / channels) : i % channels; };
    std::vector<double> amax(channels, 0.0);
    for (int64_t i = 0; i < n; ++i)
      amax[channel_of(i)] = std::max(amax[channel_of(i)], std::fabs(static_cast<double>(data[i])));
    auto scales = std::make_shared<Tensor>(DType::kFloat32, std::vector<int64_t>{channels});
    for (int64_t c = 0; c < channels; ++c)
      scales->data_as<float>()[c] = amax[c] > 0 ? static_cast<float>(amax[c] / 127.0) : 1.f;
    auto q = std::make_shared<Tensor>(DType::kInt8, wd);
    for (int64_t i = 0; i < n; ++i) {
      const double v = std::nearbyint(data[i] / scales->data_as<float>()[channel_of(i)]);
      q->data_as<int8_t>()[i] = static_cast<int8_t>(std::clamp(v, -127.0, 127.0));
    }
    Value* wq = graph.AddConstant(graph.UniqueName(w->name() + ".int8"), q);
    Value* ws = graph.AddConstant(graph.UniqueName(w->name() + ".scale"), scales);
    Node* dq = InsertBefore(graph, node, "DequantizeLinear", w->name() + ".dequantize", {wq, ws}, w->name() + ".dq");
    dq->mutable_attrs()["axis"] = int64_t{conv ? 0 : 1};
    dq->output(0)->set_type(w->type());
    node->set_input(1, dq->output(0));
  }

  static Node* InsertBefore(Graph& graph, Node* anchor, const std::string& op, const std::string& name,
                            std::vector<Value*> inputs, const std::string& output) {
    if (anchor == nullptr)
      return graph.AddNode(op, graph.UniqueName(name), std::move(inputs), {graph.UniqueName(output)}, 13);
    return graph.InsertNodeBefore(anchor, op, graph.UniqueName(name), std::move(inputs), {graph.UniqueName(output)},
                                  13);
  }

  static Node* FirstNode(const Graph& graph) { return graph.nodes().front(); }

  // The node after `node` in graph order (new nodes go before it, so after `node`); null
  // when `node` is the last.
  static Node* NextNode(const Graph& graph, const Node* node) {
    const std::vector<Node*> nodes = graph.nodes();
    for (size_t i = 0; i + 1 < nodes.size(); ++i) {
      if (nodes[i] == node) return nodes[i + 1];
    }
    return nullptr;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateQuantize(const PassInvocation& options) {
  return std::make_unique<Quantize>(QuantizationConfigFrom(options));
}

}  // namespace kiln
