// The recurrent ops, ONNX RNN, GRU and LSTM, as one kernel: the three cells share the
// time loop and its products. Per direction the input projection X·W^T of every time step
// is one GEMM (batched over time), then each step is the recurrent product H·R^T followed
// by the cell's gate arithmetic. f32 products run on the register-blocked core
// (gemm_core.h) in artifacts; the interpreter's build keeps plain loops.
#include "kiln/kernels/rnn.h"

#include "gemm_core.h"
#include "kernel_common.h"
#include "kernel_ops.h"
#include "unary_math.h"

using namespace kiln_kernels;

namespace {

// The kernel's input slots (kiln/kernels/rnn.h).
enum Slot : int32_t { kX = 0, kW, kR, kB, kSeqLens, kInitialH, kInitialC, kPeephole };

// C[0..M, n0..n1) = A[0..M, 0..K) · B[0..K, n0..n1), A with row stride lda, B row-major
// with row stride ldb (a transposed weight), C with row stride ldc.
template <typename T>
struct Product {
  int64_t M, K;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
  int64_t ldc;

  // Products under this many multiply-adds run on the calling thread: a step's recurrent
  // product is small (an LSTM of hidden 256 at batch 1: 1 x 1024 x 256) and waited longer
  // for the pool's other thread than it worked. That LSTM over 64 steps, two threads on a
  // loaded machine: median 87 ms with every product split, 12 ms with this threshold
  // (one thread 10 ms; torch 24 ms). The input projection of every step is one larger
  // product and splits from 2^19 (an LSTM of hidden 48 at batch 8 over 12 steps, two
  // threads: 0.094 -> 0.090 ms).
  static constexpr int64_t kMinParallelMacs = int64_t{1} << 19;

  void Run(const kiln_kcall* call, int64_t n0, int64_t n1) const {
    if (M == 0 || n1 <= n0) return;
    kiln_kcall serial = *call;
    serial.exec = nullptr;
    if (M * (n1 - n0) * K < kMinParallelMacs) call = &serial;
    if constexpr (std::is_same_v<T, float> && kBlockedGemm) {
      if (K > 0) return Blocked(call, n0, n1);
    }
    const Product p = *this;
    ParallelFor(call, M, 1, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T* ci = p.c + i * p.ldc;
        for (int64_t j = n0; j < n1; ++j) ci[j] = T(0);
        for (int64_t k = 0; k < p.K; ++k) {
          const T aik = p.a[i * p.lda + k];
          const T* bk = p.b + k * p.ldb;
          for (int64_t j = n0; j < n1; ++j) ci[j] += aik * bk[j];
        }
      }
    });
  }

  // Jobs of (row group, kNc-column chunk); B is read in place (already transposed).
  void Blocked(const kiln_kcall* call, int64_t n0, int64_t n1) const {
    const int64_t chunks = (n1 - n0 + gemm::kNc - 1) / gemm::kNc;
    const gemm::RowSplit split = gemm::SplitRows(call, M, chunks);
    const Product p = *this;
    ParallelFor(call, split.groups * chunks, 1, [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t rg = job / chunks, cc = job % chunks;
        const int64_t c0 = n0 + cc * gemm::kNc, c1 = c0 + gemm::kNc < n1 ? c0 + gemm::kNc : n1;
        auto pack = [&](int64_t k0, int64_t, int64_t col, int64_t, float*, int64_t* ldb) -> const float* {
          *ldb = p.ldb;
          return p.b + k0 * p.ldb + col;
        };
        gemm::Block(split.Begin(rg), split.Begin(rg + 1), c0, c1, p.K, p.a, p.lda, 1, p.c, p.ldc, pack);
      }
    });
  }
};

// One activation over y[0..n): the ONNX recurrent ops' list, as kiln_unary_op codes plus
// Affine and ScaledTanh.
template <typename T>
void Activate(T* y, int64_t n, const kiln_activation& act) {
  const T alpha = static_cast<T>(act.alpha), beta = static_cast<T>(act.beta);
  switch (act.code) {
    case KILN_RNN_ACT_AFFINE:
      for (int64_t i = 0; i < n; ++i) y[i] = alpha * y[i] + beta;
      return;
    case KILN_RNN_ACT_SCALED_TANH:
      for (int64_t i = 0; i < n; ++i) y[i] = alpha * ApplyUnary<T>(KILN_UNARY_TANH, beta * y[i], 0, 0);
      return;
    case KILN_UNARY_TANH: return ActivationLoop<T, KILN_UNARY_TANH>(y, n, 0, 0);
    default: return ApplyActivation(y, n, act.code, act.alpha, act.beta);
  }
}

// Sizes, read from the tensors, and where each (step, direction, batch) lives.
struct Shape {
  int64_t seq, batch, input, hidden, gates, directions, layout;
  int64_t GateWidth() const { return gates * hidden; }
  // X's (and the projection's) row of step t, batch b.
  int64_t XRow(int64_t t, int64_t b) const { return layout == 0 ? t * batch + b : b * seq + t; }
  // Y's element (t, direction d, b, 0).
  int64_t YOffset(int64_t t, int64_t d, int64_t b) const {
    return (layout == 0 ? (t * directions + d) * batch + b : (b * seq + t) * directions + d) * hidden;
  }
  // Y_h's, Y_c's, initial_h's and initial_c's element (d, b, 0).
  int64_t StateOffset(int64_t d, int64_t b) const {
    return (layout == 0 ? d * batch + b : b * directions + d) * hidden;
  }
};

// Clips n gate pre-activations to [-clip, clip] when the node asks.
template <typename T>
inline void Clip(T* g, int64_t n, const kiln_rnn_params& params) {
  if (params.has_clip == 0) return;
  const T clip = static_cast<T>(params.clip);
  for (int64_t j = 0; j < n; ++j) g[j] = g[j] < -clip ? -clip : (g[j] > clip ? clip : g[j]);
}

// The pre-activation of n gate values: the recurrent product g plus the input's x, clipped.
template <typename T>
inline void PreActivation(T* g, const T* x, int64_t n, const kiln_rnn_params& params) {
  for (int64_t j = 0; j < n; ++j) g[j] += x[j];
  Clip(g, n, params);
}

template <typename T>
struct Recurrence {
  const kiln_kcall* call;
  const kiln_rnn_params& params;
  Shape s;
  int64_t node_outputs;
  T *wt, *rt, *xproj, *gates, *h, *c, *rh;   // the scratch (kiln_rnn_scratch_elements)
  const T *wt_d = nullptr, *rt_d = nullptr;  // this direction's W^T and R^T

  const T* Input(Slot slot) const { return OptionalInputData<T>(call, slot); }
  T* Output(int32_t i) const { return i < node_outputs ? OutputData<T>(call, i) : nullptr; }
  int64_t Length(int64_t b) const {
    const kiln_ktensor* lens = call->num_inputs > kSeqLens ? &call->inputs[kSeqLens] : nullptr;
    if (lens == nullptr || lens->data == nullptr) return s.seq;
    const int64_t len = LoadAsInt64(lens->data, lens->dtype, b);
    return len < 0 ? 0 : (len > s.seq ? s.seq : len);
  }
  const kiln_activation& Act(int64_t d, int i) const { return params.activations[d][i]; }
  // GRU without linear_before_reset: its h gate multiplies r into H before R, so the
  // step's first product covers the z and r gates only.
  bool SplitProduct() const { return params.cell == KILN_RNN_CELL_GRU && params.linear_before_reset == 0; }

  void Run() {
    for (int64_t d = 0; d < s.directions; ++d) {
      const bool reverse = params.direction == KILN_RNN_REVERSE || d == 1;
      Prepare(d);
      for (int64_t i = 0; i < s.seq; ++i) Step(d, reverse ? s.seq - 1 - i : i);
      for (int64_t b = 0; b < s.batch; ++b) {
        if (T* yh = Output(1)) memcpy(yh + s.StateOffset(d, b), h + b * s.hidden, sizeof(T) * s.hidden);
        if (T* yc = Output(2)) memcpy(yc + s.StateOffset(d, b), c + b * s.hidden, sizeof(T) * s.hidden);
      }
    }
  }

  // Direction d's weights transposed (unless they come so), its input projection for
  // every step (plus the biases that add to it), and its initial state.
  void Prepare(int64_t d) {
    const int64_t gh = s.GateWidth(), H = s.hidden;
    const T* w = Input(kW) + d * gh * s.input;
    const T* r = Input(kR) + d * gh * H;
    if (params.weights_transposed != 0) {
      wt_d = w;
      rt_d = r;
    } else {
      for (int64_t n = 0; n < gh; ++n) {
        for (int64_t k = 0; k < s.input; ++k) wt[k * gh + n] = w[n * s.input + k];
        for (int64_t k = 0; k < H; ++k) rt[k * gh + n] = r[n * H + k];
      }
      wt_d = wt;
      rt_d = rt;
    }
    Product<T>{s.seq * s.batch, s.input, Input(kX), s.input, wt_d, gh, xproj, gh}.Run(call, 0, gh);
    if (const T* bias = Input(kB)) {
      // Wb + Rb, but with linear_before_reset GRU's h gate takes its Rb inside r * (...):
      // GruCell adds it.
      const T* wb = bias + d * 2 * gh;
      const bool keep_rbh = params.cell == KILN_RNN_CELL_GRU && params.linear_before_reset != 0;
      // (Through restrict locals: with the struct's members the loop reloaded both
      // pointers per element and stayed scalar, 18 us per LSTM layer of hidden 48 at
      // batch 8.)
      T* __restrict sum = gates;
      for (int64_t n = 0; n < gh; ++n) sum[n] = wb[n] + (keep_rbh && n >= 2 * H ? T(0) : wb[gh + n]);
      for (int64_t row = 0; row < s.seq * s.batch; ++row) {
        T* __restrict x = xproj + row * gh;
        for (int64_t n = 0; n < gh; ++n) x[n] += sum[n];
      }
    }
    const T* h0 = Input(kInitialH);
    const T* c0 = Input(kInitialC);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        h[b * H + j] = h0 != nullptr ? h0[s.StateOffset(d, b) + j] : T(0);
        c[b * H + j] = c0 != nullptr ? c0[s.StateOffset(d, b) + j] : T(0);
      }
    }
  }

  // Step t of direction d: batch entries past their sequence length keep their state and
  // give zeros in Y.
  void Step(int64_t d, int64_t t) {
    const int64_t gh = s.GateWidth(), H = s.hidden;
    Product<T>{s.batch, H, h, H, rt_d, gh, gates, gh}.Run(call, 0, SplitProduct() ? 2 * H : gh);
    if (SplitProduct()) {
      for (int64_t b = 0; b < s.batch; ++b) {
        if (t < Length(b)) {
          GruResetGate(d, t, b);
        } else {
          for (int64_t j = 0; j < H; ++j) rh[b * H + j] = T(0);  // a row the product reads but no cell uses
        }
      }
      Product<T>{s.batch, H, rh, H, rt_d, gh, gates, gh}.Run(call, 2 * H, gh);
    }
    T* y = Output(0);
    for (int64_t b = 0; b < s.batch; ++b) {
      const bool active = t < Length(b);
      if (active) {
        T* g = gates + b * gh;
        const T* x = xproj + s.XRow(t, b) * gh;
        if (params.cell == KILN_RNN_CELL_SIMPLE) SimpleCell(d, g, x, h + b * H);
        if (params.cell == KILN_RNN_CELL_GRU) GruCell(d, g, x, h + b * H);
        if (params.cell == KILN_RNN_CELL_LSTM) LstmCell(d, g, x, h + b * H, c + b * H);
      }
      if (y == nullptr) continue;
      T* yt = y + s.YOffset(t, d, b);
      for (int64_t j = 0; j < H; ++j) yt[j] = active ? h[b * H + j] : T(0);
    }
  }

  // H = f(x + H·R^T).
  void SimpleCell(int64_t d, T* g, const T* x, T* hb) {
    PreActivation(g, x, s.hidden, params);
    Activate(g, s.hidden, Act(d, 0));
    memcpy(hb, g, sizeof(T) * s.hidden);
  }

  // GRU's z and r gates (the first 2H of g), then r * H for the h gate's product.
  void GruResetGate(int64_t d, int64_t t, int64_t b) {
    const int64_t gh = s.GateWidth(), H = s.hidden;
    T* g = gates + b * gh;
    PreActivation(g, xproj + s.XRow(t, b) * gh, 2 * H, params);
    Activate(g, 2 * H, Act(d, 0));
    for (int64_t j = 0; j < H; ++j) rh[b * H + j] = g[H + j] * h[b * H + j];
  }

  // Gates z, r, h. With linear_before_reset, h = g(x_h + r * (H·R_h^T + Rb_h)); without,
  // GruResetGate did z and r and the product gave (r * H)·R_h^T. H = (1 - z) h + z H.
  void GruCell(int64_t d, T* g, const T* x, T* hb) {
    const int64_t H = s.hidden;
    T* z = g;
    T* r = g + H;
    T* hh = g + 2 * H;
    if (params.linear_before_reset != 0) {
      PreActivation(g, x, 2 * H, params);
      Activate(g, 2 * H, Act(d, 0));
      const T* bias = Input(kB);
      const T* rbh = bias != nullptr ? bias + d * 2 * s.GateWidth() + s.GateWidth() + 2 * H : nullptr;
      for (int64_t j = 0; j < H; ++j) hh[j] = r[j] * (hh[j] + (rbh != nullptr ? rbh[j] : T(0)));
    }
    PreActivation(hh, x + 2 * H, H, params);
    Activate(hh, H, Act(d, 1));
    for (int64_t j = 0; j < H; ++j) hb[j] = (T(1) - z[j]) * hh[j] + z[j] * hb[j];
  }

  // Gates i, o, f, c (ONNX's order), peepholes P = [Pi, Po, Pf]:
  // C = f * C + i * g(c); o sees the new C; H = o * h(C).
  void LstmCell(int64_t d, T* g, const T* x, T* hb, T* cb) {
    const int64_t H = s.hidden;
    T* i = g;
    T* o = g + H;
    T* f = g + 2 * H;
    T* cc = g + 3 * H;
    const T* peep = Input(kPeephole);
    const T* p = peep != nullptr ? peep + d * 3 * H : nullptr;
    for (int64_t j = 0; j < 4 * H; ++j) g[j] += x[j];
    if (p != nullptr) {
      for (int64_t j = 0; j < H; ++j) {
        i[j] += p[j] * cb[j];
        f[j] += p[2 * H + j] * cb[j];
      }
    }
    Clip(i, H, params);
    Clip(f, H, params);
    Clip(cc, H, params);
    Activate(i, H, Act(d, 0));
    Activate(f, H, Act(d, 0));
    Activate(cc, H, Act(d, 1));
    if (params.input_forget != 0) {
      for (int64_t j = 0; j < H; ++j) f[j] = T(1) - i[j];
    }
    for (int64_t j = 0; j < H; ++j) cb[j] = f[j] * cb[j] + i[j] * cc[j];
    if (p != nullptr) {
      for (int64_t j = 0; j < H; ++j) o[j] += p[H + j] * cb[j];
    }
    Clip(o, H, params);
    Activate(o, H, Act(d, 0));
    memcpy(cc, cb, sizeof(T) * H);
    Activate(cc, H, Act(d, 2));
    for (int64_t j = 0; j < H; ++j) hb[j] = o[j] * cc[j];
  }
};

struct RnnKernel {
  template <typename T>
  static int32_t Run(const kiln_kcall* call, const kiln_rnn_params& params) {
    if (call->num_inputs != 8 || call->num_outputs < 1) return KILN_KERR_UNSUPPORTED;
    const kiln_ktensor& X = call->inputs[kX];
    const kiln_ktensor& R = call->inputs[kR];
    const int64_t gates = params.cell == KILN_RNN_CELL_LSTM ? 4 : (params.cell == KILN_RNN_CELL_GRU ? 3 : 1);
    Shape s{};
    s.layout = params.layout;
    s.seq = params.layout == 0 ? X.dims[0] : X.dims[1];
    s.batch = params.layout == 0 ? X.dims[1] : X.dims[0];
    s.input = X.dims[2];
    s.hidden = params.weights_transposed != 0 ? R.dims[1] : R.dims[2];
    s.gates = gates;
    s.directions = params.direction == KILN_RNN_BIDIRECTIONAL ? 2 : 1;
    const kiln_ktensor& scratch = call->outputs[call->num_outputs - 1];
    const int64_t needed = kiln_rnn_scratch_elements(s.seq, s.batch, s.input, s.hidden, gates);
    if (scratch.dtype != kU8 || Numel(scratch) < needed * static_cast<int64_t>(sizeof(T))) {
      return KILN_KERR_UNSUPPORTED;
    }
    T* base = static_cast<T*>(scratch.data);
    Recurrence<T> rec{call, params, s, call->num_outputs - 1};
    const int64_t gh = s.GateWidth(), bh = s.batch * s.hidden;
    rec.wt = base;
    rec.rt = rec.wt + s.input * gh;
    rec.xproj = rec.rt + s.hidden * gh;
    rec.gates = rec.xproj + s.seq * s.batch * gh;
    rec.h = rec.gates + s.batch * gh;
    rec.c = rec.h + bh;
    rec.rh = rec.c + bh;
    rec.Run();
    return KILN_KERR_OK;
  }
};

}  // namespace

KILN_FLOAT_KERNEL(rnn, RnnKernel, inputs[0].dtype)
