// The recurrent ops RNN, GRU and LSTM, from the ONNX specification: each batch entry on
// its own, each gate's pre-activation a plain dot product, all in double.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <variant>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

// One activation function with its alpha and beta (the spec's list for f, g, h).
struct Activation {
  std::string name;  // lower case
  double alpha = 0, beta = 0;

  double operator()(double x) const {
    if (name == "relu") return std::max(x, 0.0);
    if (name == "tanh") return std::tanh(x);
    if (name == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "affine") return alpha * x + beta;
    if (name == "leakyrelu") return x >= 0 ? x : alpha * x;
    if (name == "thresholdedrelu") return x > alpha ? x : 0.0;
    if (name == "scaledtanh") return alpha * std::tanh(beta * x);
    if (name == "hardsigmoid") return std::min(std::max(alpha * x + beta, 0.0), 1.0);
    if (name == "elu") return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
    if (name == "softsign") return x / (1.0 + std::fabs(x));
    return std::log1p(std::exp(x));  // softplus
  }
};

// The attributes and sizes of one node.
struct Rnn {
  std::string op;
  int64_t gates = 1, directions = 1, layout = 0;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  bool reverse_only = false, has_clip = false, linear_before_reset = false, input_forget = false;
  double clip = 0;
  std::vector<std::vector<Activation>> activations;  // [direction][f, g, h]
};

std::vector<std::string> Strings(const Node& node, const char* key) {
  auto it = node.attrs().find(key);
  if (it == node.attrs().end()) return {};
  const auto* strings = std::get_if<std::vector<std::string>>(&it->second);
  return strings != nullptr ? *strings : std::vector<std::string>{};
}

// activations, activation_alpha, activation_beta: a function that takes alpha (beta)
// consumes the next value of that list; the defaults are those of the ONNX operators.
absl::Status ParseActivations(const Node& node, Rnn& rnn) {
  std::vector<std::string> defaults = {"Tanh"};
  if (rnn.op == "GRU") defaults = {"Sigmoid", "Tanh"};
  if (rnn.op == "LSTM") defaults = {"Sigmoid", "Tanh", "Tanh"};
  std::vector<std::string> names = Strings(node, "activations");
  if (names.empty()) names = defaults;
  if (names.size() == defaults.size() && rnn.directions == 2) {
    const std::vector<std::string> forward = names;
    names.insert(names.end(), forward.begin(), forward.end());
  }
  if (names.size() != defaults.size() * rnn.directions)
    return absl::InvalidArgumentError("wrong number of activations");
  const std::vector<double> alphas = node.GetFloats("activation_alpha"), betas = node.GetFloats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  rnn.activations.assign(rnn.directions, {});
  for (size_t k = 0; k < names.size(); ++k) {
    Activation act;
    for (char ch : names[k]) act.name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const std::string& n = act.name;
    const bool takes_alpha = n == "affine" || n == "leakyrelu" || n == "thresholdedrelu" || n == "scaledtanh" ||
                             n == "hardsigmoid" || n == "elu";
    const bool takes_beta = n == "affine" || n == "scaledtanh" || n == "hardsigmoid";
    double alpha = n == "leakyrelu" ? 0.01 : (n == "hardsigmoid" ? 0.2 : 1.0);
    double beta = n == "hardsigmoid" ? 0.5 : (n == "scaledtanh" ? 1.0 : 0.0);
    if (takes_alpha && next_alpha < alphas.size()) alpha = alphas[next_alpha++];
    if (takes_beta && next_beta < betas.size()) beta = betas[next_beta++];
    act.alpha = alpha;
    act.beta = beta;
    const bool known =
        takes_alpha || n == "relu" || n == "tanh" || n == "sigmoid" || n == "softsign" || n == "softplus";
    if (!known) return absl::InvalidArgumentError(absl::StrCat("unknown activation '", names[k], "'"));
    rnn.activations[k / defaults.size()].push_back(act);
  }
  return absl::OkStatus();
}

absl::StatusOr<Rnn> Parse(const Node& node, const Inputs& in) {
  Rnn rnn;
  rnn.op = node.op();
  rnn.gates = rnn.op == "LSTM" ? 4 : (rnn.op == "GRU" ? 3 : 1);
  const std::string direction = node.GetString("direction", "forward");
  rnn.directions = direction == "bidirectional" ? 2 : 1;
  rnn.reverse_only = direction == "reverse";
  rnn.layout = node.GetInt("layout", 0);
  rnn.has_clip = node.has_attr("clip");
  rnn.clip = node.GetFloat("clip", 0);
  rnn.linear_before_reset = node.GetInt("linear_before_reset", 0) != 0;
  rnn.input_forget = node.GetInt("input_forget", 0) != 0;
  const std::vector<int64_t>& x = in[0]->dims();
  if (x.size() != 3 || in[2]->dims().size() != 3) return absl::InvalidArgumentError("X and R must have rank 3");
  rnn.seq = rnn.layout == 0 ? x[0] : x[1];
  rnn.batch = rnn.layout == 0 ? x[1] : x[0];
  rnn.input = x[2];
  rnn.hidden = in[2]->dims()[2];
  if (absl::Status s = ParseActivations(node, rnn); !s.ok()) return s;
  return rnn;
}

// Reads element i of an optional input (0 when the input is absent).
double At(const Tensor* t, int64_t i) { return t == nullptr ? 0.0 : t->GetAsDouble(i); }

// One batch entry of one direction: the spec's equations step by step.
struct Sequence {
  const Rnn& rnn;
  const Inputs& in;
  int64_t d, b;
  std::vector<double> h, c;

  // W·x_t + R·h + Wb + Rb for row `row` of the stacked gates; `with_recurrence` false
  // leaves out R·h and Rb (GRU's h gate adds them itself).
  double Pre(int64_t t, int64_t row, bool with_recurrence, const std::vector<double>& state) const {
    const int64_t H = rnn.hidden, G = rnn.gates;
    double sum = At(in[3], d * 2 * G * H + row);
    for (int64_t k = 0; k < rnn.input; ++k) {
      const int64_t xi = (rnn.layout == 0 ? t * rnn.batch + b : b * rnn.seq + t) * rnn.input + k;
      sum += in[0]->GetAsDouble(xi) * in[1]->GetAsDouble((d * G * H + row) * rnn.input + k);
    }
    if (!with_recurrence) return sum;
    sum += At(in[3], d * 2 * G * H + G * H + row);
    for (int64_t k = 0; k < H; ++k) sum += state[k] * in[2]->GetAsDouble((d * G * H + row) * H + k);
    return sum;
  }
  double Clip(double v) const { return rnn.has_clip ? std::min(std::max(v, -rnn.clip), rnn.clip) : v; }
  const Activation& Act(int i) const { return rnn.activations[d][i]; }

  void Step(int64_t t) {
    const int64_t H = rnn.hidden;
    std::vector<double> next(H);
    if (rnn.op == "RNN") {
      for (int64_t j = 0; j < H; ++j) next[j] = Act(0)(Clip(Pre(t, j, true, h)));
    } else if (rnn.op == "GRU") {
      std::vector<double> z(H), r(H), rh(H);
      for (int64_t j = 0; j < H; ++j) {
        z[j] = Act(0)(Clip(Pre(t, j, true, h)));
        r[j] = Act(0)(Clip(Pre(t, H + j, true, h)));
        rh[j] = r[j] * h[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        const int64_t row = 2 * H + j;
        const double rbh = At(in[3], d * 6 * H + 3 * H + row);
        double recurrent = rbh;
        for (int64_t k = 0; k < H; ++k) {
          const double state = rnn.linear_before_reset ? h[k] : rh[k];
          recurrent += state * in[2]->GetAsDouble((d * 3 * H + row) * H + k);
        }
        const double pre = Pre(t, row, false, h) + (rnn.linear_before_reset ? r[j] * recurrent : recurrent);
        next[j] = (1 - z[j]) * Act(1)(Clip(pre)) + z[j] * h[j];
      }
    } else {
      const Tensor* p = in.size() > 7 ? in[7] : nullptr;
      for (int64_t j = 0; j < H; ++j) {
        const double i = Act(0)(Clip(Pre(t, j, true, h) + At(p, d * 3 * H + j) * c[j]));
        double f = Act(0)(Clip(Pre(t, 2 * H + j, true, h) + At(p, d * 3 * H + 2 * H + j) * c[j]));
        if (rnn.input_forget) f = 1 - i;
        const double cell = Act(1)(Clip(Pre(t, 3 * H + j, true, h)));
        const double c_next = f * c[j] + i * cell;
        const double o = Act(0)(Clip(Pre(t, H + j, true, h) + At(p, d * 3 * H + H + j) * c_next));
        next[j] = o * Act(2)(c_next);
        c[j] = c_next;  // c[j] is read only by gate j
      }
    }
    h = next;
  }
};

void Put(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kFloat64) {
    t.data_as<double>()[i] = v;
  } else {
    t.data_as<float>()[i] = static_cast<float>(v);
  }
}

Result Evaluate(const Node& node, const Inputs& in_raw) {
  Inputs in = in_raw;
  in.resize(8, nullptr);
  absl::StatusOr<Rnn> parsed = Parse(node, in);
  if (!parsed.ok()) return parsed.status();
  const Rnn& rnn = *parsed;
  const int64_t S = rnn.seq, B = rnn.batch, H = rnn.hidden, D = rnn.directions;
  const DType dtype = in[0]->dtype();
  Tensor y(dtype, rnn.layout == 0 ? std::vector<int64_t>{S, D, B, H} : std::vector<int64_t>{B, S, D, H});
  const std::vector<int64_t> state_dims =
      rnn.layout == 0 ? std::vector<int64_t>{D, B, H} : std::vector<int64_t>{B, D, H};
  Tensor y_h(dtype, state_dims), y_c(dtype, state_dims);
  for (int64_t i = 0; i < y.num_elements(); ++i) Put(y, i, 0.0);
  auto state_at = [&](int64_t d, int64_t b, int64_t j) { return (rnn.layout == 0 ? d * B + b : b * D + d) * H + j; };
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = rnn.reverse_only || d == 1;
    for (int64_t b = 0; b < B; ++b) {
      Sequence s{rnn, in, d, b, std::vector<double>(H), std::vector<double>(H)};
      for (int64_t j = 0; j < H; ++j) {
        s.h[j] = At(in[5], state_at(d, b, j));
        s.c[j] = At(in[6], state_at(d, b, j));
      }
      const int64_t len = in[4] != nullptr ? std::clamp<int64_t>(in[4]->GetAsInt64(b), 0, S) : S;
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = reverse ? len - 1 - step : step;
        s.Step(t);
        for (int64_t j = 0; j < H; ++j) {
          Put(y, (rnn.layout == 0 ? (t * D + d) * B + b : (b * S + t) * D + d) * H + j, s.h[j]);
        }
      }
      for (int64_t j = 0; j < H; ++j) {
        Put(y_h, state_at(d, b, j), s.h[j]);
        Put(y_c, state_at(d, b, j), s.c[j]);
      }
    }
  }
  std::vector<Tensor> outputs = {std::move(y), std::move(y_h)};
  if (rnn.op == "LSTM") outputs.push_back(std::move(y_c));
  outputs.resize(std::min(outputs.size(), node.outputs().size()));
  return outputs;
}

}  // namespace

void AddRnnOps(RefTable& table) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) table[op] = Evaluate;
}

}  // namespace kiln::ref
