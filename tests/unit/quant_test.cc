// Quantized ops (ops/quant_ops.cc, kernels/quant/quant.cc): the interpreter and artifacts
// against expectations written out here (rounding ties to even, saturation, per-channel
// scales and zero points), integer outputs compared exactly.
#include <cmath>
#include <map>
#include <random>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"

namespace kiln {
namespace {

template <typename T>
std::shared_ptr<Tensor> Filled(DType dtype, std::vector<int64_t> dims, std::vector<T> values) {
  auto t = std::make_shared<Tensor>(dtype, dims);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t->num_elements());
  for (size_t i = 0; i < values.size(); ++i) t->data_as<T>()[i] = values[i];
  return t;
}

// Uniform integers in [lo, hi] as a u8 or i8 tensor.
std::shared_ptr<Tensor> RandomInts(DType dtype, std::vector<int64_t> dims, int lo, int hi, uint32_t seed) {
  auto t = std::make_shared<Tensor>(dtype, dims);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  for (int64_t i = 0; i < t->num_elements(); ++i) {
    if (dtype == DType::kUInt8) {
      t->data_as<uint8_t>()[i] = static_cast<uint8_t>(dist(rng));
    } else {
      t->data_as<int8_t>()[i] = static_cast<int8_t>(dist(rng));
    }
  }
  return t;
}

std::shared_ptr<Tensor> FloatsIn(std::vector<int64_t> dims, float lo, float hi, uint32_t seed) {
  auto t = std::make_shared<Tensor>(DType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t->num_elements(); ++i) t->data_as<float>()[i] = dist(rng);
  return t;
}

// Requantization as the kernels state it: saturate(rint(float(sum) * m) + zero point).
int64_t Requantize(int64_t sum, float multiplier, int64_t zero_point, DType dtype) {
  const float v = std::nearbyint(static_cast<float>(sum) * multiplier) + static_cast<float>(zero_point);
  const float lo = dtype == DType::kUInt8 ? 0.f : -128.f, hi = dtype == DType::kUInt8 ? 255.f : 127.f;
  return static_cast<int64_t>(std::min(hi, std::max(lo, v)));
}

// Runs the one-input graph through the interpreter and as artifacts (each of `targets`,
// 1 and 2 threads) and expects every output element to equal `want`.
void ExpectEverywhere(const std::function<std::unique_ptr<Graph>()>& build, const Tensor& input,
                      const std::vector<double>& want, const std::vector<std::string>& targets = TileTargets()) {
  auto graph = build();
  auto ref = RunGraph(*graph, {input});
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ((*ref)[0].num_elements(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < (*ref)[0].num_elements(); ++i)
    ASSERT_EQ((*ref)[0].GetAsDouble(i), want[i]) << "interpreter, element " << i;
  for (const std::string& target : targets) {
    auto g = build();
    const std::vector<Tensor> outs = RunArtifact(*g, kDefaultPipeline, input, {1, 2}, target);
    ASSERT_EQ(outs.size(), 2u);
    for (const Tensor& out : outs) {
      ASSERT_EQ(out.dtype(), (*ref)[0].dtype());
      for (int64_t i = 0; i < out.num_elements(); ++i)
        ASSERT_EQ(out.GetAsDouble(i), want[i]) << target << ", element " << i;
    }
  }
}

TEST(QuantTest, QuantizeLinearRoundsHalfToEvenAndSaturates) {
  // x / 0.5: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.48 -> 0, 0.52 -> 1, and values past the range.
  const std::vector<float> x = {1.25f, 1.75f, -1.25f, 200.f, -100.f, 0.f, 0.24f, 0.26f};
  for (DType type : {DType::kUInt8, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(type));
    const int zero = type == DType::kUInt8 ? 10 : -3;
    auto build = [&] {
      auto g = std::make_unique<Graph>();
      Value* in = g->AddValue("x", TensorType::Static(DType::kFloat32, {8}));
      g->AddInput(in);
      auto zp = std::make_shared<Tensor>(type, std::vector<int64_t>{});
      if (type == DType::kUInt8) zp->data_as<uint8_t>()[0] = static_cast<uint8_t>(zero);
      if (type == DType::kInt8) zp->data_as<int8_t>()[0] = static_cast<int8_t>(zero);
      Node* q = g->AddNode(
          "QuantizeLinear", "q",
          {in, g->AddConstant("s", Filled<float>(DType::kFloat32, {}, {0.5f})), g->AddConstant("z", zp)}, {"y"}, 13);
      g->AddOutput(q->output(0));
      EXPECT_TRUE(InferTypes(*g).ok());
      return g;
    };
    const double lo = type == DType::kUInt8 ? 0 : -128, hi = type == DType::kUInt8 ? 255 : 127;
    const std::vector<double> rounded = {2, 4, -2, 400, -200, 0, 0, 1};
    std::vector<double> want;
    for (double r : rounded) want.push_back(std::min(hi, std::max(lo, r + zero)));
    ExpectEverywhere(build, *Filled<float>(DType::kFloat32, {8}, x), want);
  }
}

TEST(QuantTest, DequantizeLinearPerAxis) {
  auto input = RandomInts(DType::kInt8, {2, 3, 5}, -128, 127, 7);
  const std::vector<float> scales = {0.5f, 0.03125f, 2.f};
  const std::vector<int8_t> zeros = {0, -7, 100};
  auto build = [&] {
    auto g = std::make_unique<Graph>();
    Value* in = g->AddValue("x", TensorType::Static(DType::kInt8, {2, 3, 5}));
    g->AddInput(in);
    Node* dq = g->AddNode("DequantizeLinear", "dq",
                          {in, g->AddConstant("s", Filled<float>(DType::kFloat32, {3}, scales)),
                           g->AddConstant("z", Filled<int8_t>(DType::kInt8, {3}, zeros))},
                          {"y"}, 13);
    dq->mutable_attrs()["axis"] = int64_t{1};
    g->AddOutput(dq->output(0));
    EXPECT_TRUE(InferTypes(*g).ok());
    return g;
  };
  std::vector<double> want;
  for (int64_t i = 0; i < 30; ++i) {
    const int64_t c = i / 5 % 3;
    want.push_back(static_cast<float>(input->data_as<int8_t>()[i] - zeros[c]) * scales[c]);
  }
  ExpectEverywhere(build, *input, want);
}

// Per-tensor QuantizeLinear then DequantizeLinear over 70000 elements (the kernels split a
// long row into pieces for the pool): the round trip of each element, exactly.
TEST(QuantTest, LongPerTensorRoundTrip) {
  auto input = FloatsIn({70000}, -3.f, 3.f, 9);
  auto build = [&] {
    auto g = std::make_unique<Graph>();
    Value* in = g->AddValue("x", TensorType::Static(DType::kFloat32, {70000}));
    g->AddInput(in);
    Value* s = g->AddConstant("s", Filled<float>(DType::kFloat32, {}, {0.02f}));
    Value* z = g->AddConstant("z", Filled<int8_t>(DType::kInt8, {}, {-5}));
    Node* q = g->AddNode("QuantizeLinear", "q", {in, s, z}, {"q"}, 13);
    Node* dq = g->AddNode("DequantizeLinear", "dq", {q->output(0), s, z}, {"y"}, 13);
    g->AddOutput(dq->output(0));
    EXPECT_TRUE(InferTypes(*g).ok());
    return g;
  };
  std::vector<double> want;
  for (int64_t i = 0; i < 70000; ++i) {
    const float q = std::min(127.f, std::max(-128.f, std::nearbyint(input->data_as<float>()[i] / 0.02f) - 5.f));
    want.push_back(static_cast<float>(static_cast<int32_t>(q) + 5) * 0.02f);
  }
  ExpectEverywhere(build, *input, want);
}

// QLinearMatMul: A [2, 3, 13] u8 (the input; batch broadcast against a 2-D B), B [13, 17]
// i8 with one scale and zero point per column, A's per row. MatMulInteger on the same
// operands, int32 out.
TEST(QuantTest, IntegerMatMulsMatchPlainLoops) {
  const int64_t M = 3, K = 13, N = 17;
  auto a = RandomInts(DType::kUInt8, {2, M, K}, 0, 255, 1);
  auto b = RandomInts(DType::kInt8, {K, N}, -128, 127, 2);
  auto a_zero = RandomInts(DType::kUInt8, {M}, 100, 150, 3);
  auto b_zero = RandomInts(DType::kInt8, {N}, -5, 5, 4);
  auto a_scale = FloatsIn({M}, 0.01f, 0.02f, 5);
  auto b_scale = FloatsIn({N}, 0.001f, 0.004f, 6);
  const float y_scale = 0.05f;
  const int64_t y_zero = -4;
  auto sum = [&](int64_t batch, int64_t m, int64_t n) {
    int64_t s = 0;
    for (int64_t k = 0; k < K; ++k) {
      s += (a->data_as<uint8_t>()[(batch * M + m) * K + k] - a_zero->data_as<uint8_t>()[m]) *
           (b->data_as<int8_t>()[k * N + n] - b_zero->data_as<int8_t>()[n]);
    }
    return s;
  };
  for (bool requantize : {true, false}) {
    SCOPED_TRACE(requantize ? "QLinearMatMul" : "MatMulInteger");
    auto build = [&] {
      auto g = std::make_unique<Graph>();
      Value* in = g->AddValue("a", TensorType::Static(DType::kUInt8, {2, M, K}));
      g->AddInput(in);
      Node* mm;
      if (requantize) {
        mm = g->AddNode("QLinearMatMul", "mm",
                        {in, g->AddConstant("as", a_scale), g->AddConstant("az", a_zero), g->AddConstant("b", b),
                         g->AddConstant("bs", b_scale), g->AddConstant("bz", b_zero),
                         g->AddConstant("ys", Filled<float>(DType::kFloat32, {}, {y_scale})),
                         g->AddConstant("yz", Filled<int8_t>(DType::kInt8, {}, {static_cast<int8_t>(y_zero)}))},
                        {"y"}, 10);
      } else {
        mm = g->AddNode("MatMulInteger", "mm",
                        {in, g->AddConstant("b", b), g->AddConstant("az", a_zero), g->AddConstant("bz", b_zero)}, {"y"},
                        10);
      }
      g->AddOutput(mm->output(0));
      auto st = InferTypes(*g);
      EXPECT_TRUE(st.ok()) << st;
      return g;
    };
    std::vector<double> want;
    for (int64_t batch = 0; batch < 2; ++batch) {
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          const int64_t s = sum(batch, m, n);
          want.push_back(requantize
                             ? Requantize(s, a_scale->data_as<float>()[m] * b_scale->data_as<float>()[n] / y_scale,
                                          y_zero, DType::kInt8)
                             : s);
        }
      }
    }
    ExpectEverywhere(build, *a, want);
  }
}

// The targets int8 artifacts are checked on: the GEMM tile targets (neither has VNNI, so
// the int8 kernels take their i32 path) and, where this CPU has them, AVX-512 VNNI and
// AVX-VNNI (256-bit vpdpbusd without AVX-512: x86-64-v3 plus the feature), and AVX-512 VNNI
// with VBMI.
std::vector<std::string> Int8Targets() {
  std::vector<std::string> targets = TileTargets();
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vnni") && targets.size() > 1) {
    targets.push_back("triple=x86_64-pc-linux-gnu,cpu=x86-64-v4,features=+avx512vnni");
    // and the byte permutes of the int8 conv stem's column gather (Zen 4, Ice Lake and later)
    if (__builtin_cpu_supports("avx512vbmi")) {
      targets.push_back("triple=x86_64-pc-linux-gnu,cpu=x86-64-v4,features=+avx512vnni,+avx512vbmi");
    }
  }
  if (__builtin_cpu_supports("avxvnni"))
    targets.push_back("triple=x86_64-pc-linux-gnu,cpu=x86-64-v3,features=+avxvnni");
  return targets;
}

// Which dot product the int8 kernels take follows the target (the compile report's
// int8_dot), whether or not this CPU could run it: vpdpbusd on 512-bit vectors with AVX-512
// VNNI, on 256-bit ones with AVX-VNNI alone (Alder Lake; x86-64-v3 plus the feature), i32
// arithmetic otherwise.
TEST(QuantTest, Int8DotFollowsTarget) {
  auto b = RandomInts(DType::kInt8, {13, 17}, -120, 120, 31);
  for (const auto& [spec, dot] : std::vector<std::pair<std::string, std::string>>{
           {"x86-64-v3", "plain"},
           {"x86-64-v4", "plain"},
           {"triple=x86_64-pc-linux-gnu,cpu=x86-64-v4,features=+avx512vnni", "avx512-vnni"},
           {"znver4", "avx512-vnni"},
           {"triple=x86_64-pc-linux-gnu,cpu=alderlake", "avx-vnni"},
           {"triple=x86_64-pc-linux-gnu,cpu=x86-64-v3,features=+avxvnni", "avx-vnni"},
           {"aarch64", "plain"}}) {
    SCOPED_TRACE(spec);
    auto g = std::make_unique<Graph>();
    Value* a = g->AddValue("a", TensorType::Static(DType::kUInt8, {2, 13}));
    g->AddInput(a);
    Node* mm = g->AddNode("MatMulInteger", "mm", {a, g->AddConstant("b", b)}, {"y"}, 10);
    g->AddOutput(mm->output(0));
    ASSERT_TRUE(InferTypes(*g).ok());
    auto artifact = GenerateFor(*g, spec);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    EXPECT_EQ(artifact->int8_dot, dot);
  }
}

// The int8 GEMM artifacts take for a constant 2-D B with A quantized per tensor (qgemm):
// MatMulInteger, QLinearMatMul and kiln.QLinearMatMulToFloat (+ bias) on A [2, 5, K] (10
// rows: a full tile of 8 and a partial one) of u8 or s8, B [K, N] with per-column zero
// points; K = 13 (a partial last word of four), N = 17 (a 32-column tile, one column
// used past 16) and 50 (a 48-column tile, then 2).
TEST(QuantTest, IntegerGemmMatchesPlainLoops) {
  struct Case {
    DType a_type, b_type;
    int64_t K, N;
  };
  for (const Case& c : {Case{DType::kUInt8, DType::kInt8, 13, 17}, Case{DType::kInt8, DType::kUInt8, 13, 50},
                        Case{DType::kUInt8, DType::kInt8, 64, 50}}) {
    const int64_t rows = 10, K = c.K, N = c.N;
    const bool a_u8 = c.a_type == DType::kUInt8, b_u8 = c.b_type == DType::kUInt8;
    auto a = RandomInts(c.a_type, {2, 5, K}, a_u8 ? 0 : -128, a_u8 ? 255 : 127, 21);
    auto b = RandomInts(c.b_type, {K, N}, b_u8 ? 8 : -120, b_u8 ? 247 : 120, 22);
    auto b_zero = RandomInts(c.b_type, {N}, b_u8 ? 123 : -5, b_u8 ? 133 : 5, 23);
    auto b_scale = FloatsIn({N}, 0.001f, 0.004f, 24);
    auto bias = FloatsIn({N}, -2.f, 2.f, 25);
    const int64_t a_zero = a_u8 ? 131 : -7;
    const float a_scale = 0.03f, y_scale = 0.2f;
    const int64_t y_zero = 9;
    auto scalar = [](DType type, int64_t v) {
      auto t = std::make_shared<Tensor>(type, std::vector<int64_t>{});
      if (type == DType::kUInt8) t->data_as<uint8_t>()[0] = static_cast<uint8_t>(v);
      if (type == DType::kInt8) t->data_as<int8_t>()[0] = static_cast<int8_t>(v);
      return t;
    };
    for (const std::string op : {"QLinearMatMul", "MatMulInteger", "kiln.QLinearMatMulToFloat"}) {
      SCOPED_TRACE(::testing::Message() << op << " K " << K << " N " << N);
      auto build = [&] {
        auto g = std::make_unique<Graph>();
        Value* in = g->AddValue("a", TensorType::Static(c.a_type, {2, 5, K}));
        g->AddInput(in);
        Value* az = g->AddConstant("az", scalar(c.a_type, a_zero));
        Value* as = g->AddConstant("as", Filled<float>(DType::kFloat32, {}, {a_scale}));
        Node* mm;
        if (op == "MatMulInteger") {
          mm = g->AddNode(op, "mm", {in, g->AddConstant("b", b), az, g->AddConstant("bz", b_zero)}, {"y"}, 10);
        } else if (op == "QLinearMatMul") {
          mm = g->AddNode(
              op, "mm",
              {in, as, az, g->AddConstant("b", b), g->AddConstant("bs", b_scale), g->AddConstant("bz", b_zero),
               g->AddConstant("ys", Filled<float>(DType::kFloat32, {}, {y_scale})),
               g->AddConstant("yz", scalar(DType::kUInt8, y_zero))},
              {"y"}, 10);
        } else {
          mm = g->AddNode(op, "mm",
                          {in, as, az, g->AddConstant("b", b), g->AddConstant("bs", b_scale),
                           g->AddConstant("bz", b_zero), g->AddConstant("bias", bias)},
                          {"y"}, 13);
        }
        g->AddOutput(mm->output(0));
        auto st = InferTypes(*g);
        EXPECT_TRUE(st.ok()) << st;
        return g;
      };
      std::vector<double> want;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          int64_t sum = 0;
          for (int64_t k = 0; k < K; ++k) {
            sum += (static_cast<int64_t>(a->GetAsDouble(r * K + k)) - a_zero) *
                   (static_cast<int64_t>(b->GetAsDouble(k * N + n)) - static_cast<int64_t>(b_zero->GetAsDouble(n)));
          }
          const float m = a_scale * b_scale->data_as<float>()[n];
          if (op == "MatMulInteger") {
            want.push_back(static_cast<double>(sum));
          } else if (op == "QLinearMatMul") {
            want.push_back(static_cast<double>(Requantize(sum, m / y_scale, y_zero, DType::kUInt8)));
          } else {
            want.push_back(static_cast<float>(sum) * m + bias->data_as<float>()[n]);
          }
        }
      }
      ExpectEverywhere(build, *a, want, Int8Targets());
    }
  }
}

// An integer convolution case: X [1, C, H, W] of x_type, W [OC, C / G, K, K] of w_type
// with per-output-channel zero points (w_type u8: around 128) and scales.
struct QConvCase {
  DType x_type, w_type, y_type;
  int64_t C, H, W, OC, G, K, S, P;
};

// A u8 or s8 scalar tensor holding v.
std::shared_ptr<Tensor> ScalarOf(DType type, int64_t v) {
  auto t = std::make_shared<Tensor>(type, std::vector<int64_t>{});
  if (type == DType::kUInt8) t->data_as<uint8_t>()[0] = static_cast<uint8_t>(v);
  if (type == DType::kInt8) t->data_as<int8_t>()[0] = static_cast<int8_t>(v);
  return t;
}

// v quantized by QuantizeLinear's rule (f32 division, ties to even, saturated to `type`).
float QuantizedAs(float v, float scale, int64_t zero, DType type) {
  const float lo = type == DType::kUInt8 ? 0.f : -128.f, hi = type == DType::kUInt8 ? 255.f : 127.f;
  return std::min(hi, std::max(lo, std::nearbyint(v / scale) + static_cast<float>(zero)));
}

// The graph's first node (op) lowers for artifacts to the packed int8 conv, not the
// reference kernel it falls back to (CheckIntegerConv draws weights whose w - zw fits s8,
// as the packed kernel needs).
void ExpectPackedKernel(const Graph& graph, const std::string& op) {
  auto call = LowerForArtifact(*FindOp(op), *graph.nodes()[0]);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->kernel, "qconv");
}

// The ops and epilogues CheckIntegerConv runs each case through.
const char* const kConvVariants[] = {"QLinearConv",
                                     "ConvInteger",
                                     "kiln.QLinearConvToFloat",
                                     "kiln.QLinearConvToFloat+relu",
                                     "kiln.QLinearConvToFloat+residual+relu",
                                     "kiln.QLinearConvToFloat+residual+quantized+relu",
                                     "kiln.QLinearConvToFloat+qresidual+quantized+relu",
                                     "kiln.QLinearConvToFloat+residual+clip",
                                     "kiln.QLinearConvToFloat+residual+quantized+clip",
                                     "kiln.QLinearConvToFloat+qresidual+quantized+clip+relu"};

void CheckIntegerConv(const QConvCase& c) {
  const int64_t OH = (c.H + 2 * c.P - c.K) / c.S + 1, OW = (c.W + 2 * c.P - c.K) / c.S + 1, icg = c.C / c.G;
  const bool x_u8 = c.x_type == DType::kUInt8, w_u8 = c.w_type == DType::kUInt8;
  auto x = RandomInts(c.x_type, {1, c.C, c.H, c.W}, x_u8 ? 0 : -128, x_u8 ? 255 : 127, 11);
  auto w = RandomInts(c.w_type, {c.OC, icg, c.K, c.K}, w_u8 ? 2 : -127, w_u8 ? 254 : 126, 12);
  auto w_zero = RandomInts(c.w_type, {c.OC}, w_u8 ? 127 : -1, w_u8 ? 129 : 1, 13);
  auto w_scale = FloatsIn({c.OC}, 0.002f, 0.006f, 14);
  auto bias = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{c.OC});
  for (int64_t oc = 0; oc < c.OC; ++oc) bias->data_as<int32_t>()[oc] = static_cast<int32_t>(oc * 997 - 2500);
  const int64_t x_zero = x_u8 ? 128 : -3;
  const float x_scale = 0.02f, y_scale = 0.1f;
  const int64_t y_zero = c.y_type == DType::kUInt8 ? 120 : 5;
  auto at = [](const Tensor& t, int64_t i) { return static_cast<int64_t>(t.GetAsDouble(i)); };
  auto float_bias = FloatsIn({c.OC}, -1.f, 1.f, 15);
  auto residual = FloatsIn({1, c.OC, OH, OW}, -2.f, 2.f, 16);  // the fuse pass's skip connection
  auto residual_bytes = RandomInts(c.x_type, {1, c.OC, OH, OW}, x_u8 ? 0 : -128, x_u8 ? 255 : 127, 17);
  const float residual_scale = 0.015f;
  const int64_t residual_zero = x_u8 ? 100 : -7;
  for (const std::string variant : kConvVariants) {
    SCOPED_TRACE(variant);
    const bool relu = variant.size() > 5 && variant.substr(variant.size() - 5) == "+relu";
    // +qresidual: the residual as bytes, scale and zero point (a folded DequantizeLinear).
    const bool quantized_residual = variant.find("+qresidual") != std::string::npos;
    const bool with_residual = quantized_residual || variant.find("+residual") != std::string::npos;
    const bool quantized = variant.find("+quantized") != std::string::npos;  // the fuse pass's QuantizeLinear
    const bool clip = variant.find("+clip") != std::string::npos;            // and Clip, to [-0.5, 0.75]
    const std::string op = variant.substr(0, variant.find('+'));
    const bool requantize = op == "QLinearConv", to_float = op == "kiln.QLinearConvToFloat";
    auto build = [&] {
      auto g = std::make_unique<Graph>();
      Value* in = g->AddValue("x", TensorType::Static(c.x_type, {1, c.C, c.H, c.W}));
      g->AddInput(in);
      Value* xz = g->AddConstant("xz", ScalarOf(c.x_type, x_zero));
      Node* conv;
      if (to_float) {
        conv = g->AddNode(
            op, "conv",
            {in, g->AddConstant("xs", Filled<float>(DType::kFloat32, {}, {x_scale})), xz, g->AddConstant("w", w),
             g->AddConstant("ws", w_scale), g->AddConstant("wz", w_zero), g->AddConstant("b", float_bias)},
            {"y"}, 13);
        if (with_residual) {
          std::vector<Value*> inputs = conv->inputs();
          inputs.push_back(g->AddConstant("r", quantized_residual ? residual_bytes : residual));
          if (quantized) {
            inputs.push_back(g->AddConstant("ys", Filled<float>(DType::kFloat32, {}, {y_scale})));
            inputs.push_back(g->AddConstant("yz", ScalarOf(c.y_type, y_zero)));
          }
          if (quantized_residual) {
            inputs.push_back(g->AddConstant("rs", Filled<float>(DType::kFloat32, {}, {residual_scale})));
            inputs.push_back(g->AddConstant("rz", ScalarOf(c.x_type, residual_zero)));
          }
          conv->set_inputs(inputs);
        }
        if (relu) conv->mutable_attrs()["kiln.relu"] = int64_t{1};
        if (clip) {
          conv->mutable_attrs()["kiln.clip_min"] = -0.5;
          conv->mutable_attrs()["kiln.clip_max"] = 0.75;
        }
      } else if (requantize) {
        conv = g->AddNode("QLinearConv", "conv",
                          {in, g->AddConstant("xs", Filled<float>(DType::kFloat32, {}, {x_scale})), xz,
                           g->AddConstant("w", w), g->AddConstant("ws", w_scale), g->AddConstant("wz", w_zero),
                           g->AddConstant("ys", Filled<float>(DType::kFloat32, {}, {y_scale})),
                           g->AddConstant("yz", ScalarOf(c.y_type, y_zero)), g->AddConstant("b", bias)},
                          {"y"}, 10);
      } else {
        conv = g->AddNode("ConvInteger", "conv", {in, g->AddConstant("w", w), xz, g->AddConstant("wz", w_zero)}, {"y"},
                          10);
      }
      conv->mutable_attrs()["group"] = c.G;
      conv->mutable_attrs()["strides"] = std::vector<int64_t>{c.S, c.S};
      conv->mutable_attrs()["pads"] = std::vector<int64_t>{c.P, c.P, c.P, c.P};
      g->AddOutput(conv->output(0));
      auto st = InferTypes(*g);
      EXPECT_TRUE(st.ok()) << st;
      if (quantized) EXPECT_EQ(conv->output(0)->type().dtype, c.y_type);
      return g;
    };
    ExpectPackedKernel(*build(), op);
    std::vector<double> want;
    for (int64_t oc = 0; oc < c.OC; ++oc) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t s = requantize ? bias->data_as<int32_t>()[oc] : 0;
          for (int64_t ic = 0; ic < icg; ++ic) {
            for (int64_t kh = 0; kh < c.K; ++kh) {
              for (int64_t kw = 0; kw < c.K; ++kw) {
                const int64_t ih = oh * c.S - c.P + kh, iw = ow * c.S - c.P + kw;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t ch = oc / (c.OC / c.G) * icg + ic;
                s += (at(*x, (ch * c.H + ih) * c.W + iw) - x_zero) *
                     (at(*w, ((oc * icg + ic) * c.K + kh) * c.K + kw) - at(*w_zero, oc));
              }
            }
          }
          if (to_float) {
            const float m = x_scale * w_scale->data_as<float>()[oc];
            float v = static_cast<float>(s) * m + float_bias->data_as<float>()[oc];
            const int64_t r_at = (oc * OH + oh) * OW + ow;
            if (quantized_residual) {
              v += static_cast<float>(at(*residual_bytes, r_at) - residual_zero) * residual_scale;
            } else if (with_residual) {
              v += residual->data_as<float>()[r_at];
            }
            v = relu && v < 0.f ? 0.f : v;
            v = clip ? std::min(0.75f, std::max(-0.5f, v)) : v;
            want.push_back(quantized ? QuantizedAs(v, y_scale, y_zero, c.y_type) : v);
          } else {
            want.push_back(
                requantize ? Requantize(s, x_scale * w_scale->data_as<float>()[oc] / y_scale, y_zero, c.y_type) : s);
          }
        }
      }
    }
    ExpectEverywhere(build, *x, want, Int8Targets());
  }
}

// The int8 convolution's two ways to its columns, each with its three outputs (u8/s8,
// int32 sums, f32): copied per tap (3x3, stride 2, clipped
// pads, two groups of two channels: one channel quad half padding) and read in place (1x1:
// 77 positions, two chunks of 48 columns, the second partial; 7 channels: the second quad
// padded; 13 output channels: a partial row panel); s8 and u8 inputs and weights. The
// last 1-4 columns of a chunk take the four-lane tile: 10x10 positions (48 + 48 + 4,
// copied) and 7x7 (48 + 1, read in place); on AVX-512 VNNI a last single column joins
// the chunk before as its 49th (7x7 read in place; 5 x 29 = 48 + 48 + 49 copied, its 49th
// column packed after the others). Fewer than four channels take K as one (kh, kw,
// channel) sequence (flat_k): a stem's 7x7 stride 2 over three channels (19 x 23 outputs,
// so chunks span rows; the byte-permute gather where the target has it; and 7 x 7
// outputs, a chunk of 49), two channels of s8 X (3x3: a word across two kernel rows), and
// one channel (3x3: a row of three bytes, too short for the byte permutes). Few columns
// and at least four row panels split the output channels among jobs (panel_range): 7x7
// positions (48 + 1), 40 output channels (panels 0-3 and 4, which the one-column tile
// takes alone), copied; 64 output channels in four ranges, read in place.
TEST(QuantTest, IntegerConvsMatchPlainLoops) {
  const QConvCase cases[] = {
      {DType::kUInt8, DType::kInt8, DType::kUInt8, 4, 9, 11, 6, 2, 3, 2, 1},
      {DType::kInt8, DType::kUInt8, DType::kInt8, 7, 7, 11, 13, 1, 1, 1, 0},
      {DType::kUInt8, DType::kInt8, DType::kInt8, 16, 10, 10, 20, 1, 3, 1, 1},
      {DType::kUInt8, DType::kInt8, DType::kUInt8, 8, 7, 7, 16, 1, 1, 1, 0},
      {DType::kUInt8, DType::kInt8, DType::kUInt8, 3, 37, 45, 16, 1, 7, 2, 3},
      {DType::kInt8, DType::kInt8, DType::kInt8, 2, 9, 10, 8, 1, 3, 1, 1},
      {DType::kUInt8, DType::kInt8, DType::kUInt8, 1, 12, 13, 9, 1, 3, 1, 1},
      {DType::kUInt8, DType::kInt8, DType::kUInt8, 16, 7, 7, 40, 1, 3, 1, 1},
      {DType::kInt8, DType::kInt8, DType::kInt8, 8, 7, 7, 64, 1, 1, 1, 0},
      {DType::kUInt8, DType::kInt8, DType::kUInt8, 12, 5, 29, 24, 1, 3, 1, 1},
      {DType::kUInt8, DType::kInt8, DType::kUInt8, 3, 13, 13, 16, 1, 7, 2, 3},
  };
  for (const QConvCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "C " << c.C << " K " << c.K << " OC " << c.OC);
    CheckIntegerConv(c);
  }
}

// A QLinearConv (3x3, stride 1) that artifacts run as the integer Winograd kernel.
struct QWinogradCase {
  int64_t N, C, H, W, OC;
  std::vector<int64_t> pads;  // top, left, bottom, right
  DType x_type, y_type;
  bool relu;
  int x_lo, x_hi;         // X's range
  int w_lo, w_hi;         // the weights' range (the zero points are 0)
  int64_t max_steps;      // how far an output may be from the exact requantized sum
  double exact_fraction;  // how many outputs at least must equal it
};

// Integer Winograd F(4x4, 3x3) (kernels/quant/qwinograd.cc) against the exact sums,
// requantized: every output within one step, and all but a few exactly equal (the kernel's
// f32 output transform rounds). Each case must take qconv_winograd, on every int8 target
// (the AVX-512 VNNI products and the plain ones) at 1 and 2 threads. Cases: u8 X with zero
// point 128, partial tiles at the bottom and right, 80 output channels (a group of four
// 16-channel panels and a group of one), relu; s8 X and Y, two images, no padding, 48
// output channels (a group of three); asymmetric pads; and 256 input channels of weights
// all near 127 against X near 255, where i32 sums of the exact U would pass 2^31 (at the
// tile point that sums all nine taps: 256 x 1111 x 36 x 227, about 2.3e9) and lowering
// scales U down (its rounding moves some outputs by a step).
TEST(QuantTest, WinogradConvMatchesExactSumsWithinAStep) {
  const QWinogradCase cases[] = {
      {1, 16, 17, 18, 80, {1, 1, 1, 1}, DType::kUInt8, DType::kUInt8, true, 0, 255, -127, 127, 1, 0.995},
      {2, 32, 16, 16, 48, {0, 0, 0, 0}, DType::kInt8, DType::kInt8, false, -128, 127, -127, 127, 1, 0.995},
      {1, 32, 20, 20, 64, {0, 1, 2, 1}, DType::kUInt8, DType::kUInt8, false, 0, 255, -127, 127, 1, 0.995},
      {1, 256, 18, 18, 32, {0, 0, 0, 0}, DType::kUInt8, DType::kUInt8, false, 200, 255, 120, 127, 1, 0.85},
  };
  for (const QWinogradCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "N " << c.N << " C " << c.C << " H " << c.H << " OC " << c.OC);
    const int64_t OH = c.H + c.pads[0] + c.pads[2] - 2, OW = c.W + c.pads[1] + c.pads[3] - 2;
    const bool x_u8 = c.x_type == DType::kUInt8;
    auto x = RandomInts(c.x_type, {c.N, c.C, c.H, c.W}, c.x_lo, c.x_hi, 41);
    auto w = RandomInts(DType::kInt8, {c.OC, c.C, 3, 3}, c.w_lo, c.w_hi, 42);
    auto w_scale = FloatsIn({c.OC}, 0.002f, 0.006f, 43);
    auto w_zero = RandomInts(DType::kInt8, {c.OC}, 0, 0, 44);
    const int64_t x_zero = c.w_lo > 0 ? 0 : (x_u8 ? 128 : -3), y_zero = x_u8 ? 128 : 5;
    const float x_scale = 0.02f;
    // Y's scale and the bias put the sums' spread over about 60 steps around Y's zero point.
    const double mean_x = (c.x_lo + c.x_hi) / 2.0 - static_cast<double>(x_zero), mean_w = (c.w_lo + c.w_hi) / 2.0;
    const double sd_x = (c.x_hi - c.x_lo + 1) / std::sqrt(12.0), sd_w = (c.w_hi - c.w_lo + 1) / std::sqrt(12.0);
    const double term = std::sqrt(sd_x * sd_x * (mean_w * mean_w + sd_w * sd_w) + sd_w * sd_w * mean_x * mean_x);
    const double spread = std::sqrt(9.0 * c.C) * term * x_scale * 0.004;
    const float y_scale = static_cast<float>(spread / 30);
    auto bias = std::make_shared<Tensor>(DType::kInt32, std::vector<int64_t>{c.OC});
    for (int64_t oc = 0; oc < c.OC; ++oc)
      bias->data_as<int32_t>()[oc] = static_cast<int32_t>(-9.0 * c.C * mean_x * mean_w + oc * 37);
    auto build = [&] {
      auto g = std::make_unique<Graph>();
      Value* in = g->AddValue("x", TensorType::Static(c.x_type, {c.N, c.C, c.H, c.W}));
      g->AddInput(in);
      Node* conv = g->AddNode(
          "QLinearConv", "conv",
          {in, g->AddConstant("xs", Filled<float>(DType::kFloat32, {}, {x_scale})),
           g->AddConstant("xz", ScalarOf(c.x_type, x_zero)), g->AddConstant("w", w), g->AddConstant("ws", w_scale),
           g->AddConstant("wz", w_zero), g->AddConstant("ys", Filled<float>(DType::kFloat32, {}, {y_scale})),
           g->AddConstant("yz", ScalarOf(c.y_type, y_zero)), g->AddConstant("b", bias)},
          {"y"}, 10);
      conv->mutable_attrs()["pads"] = c.pads;
      if (c.relu) conv->mutable_attrs()["kiln.relu"] = int64_t{1};
      g->AddOutput(conv->output(0));
      auto st = InferTypes(*g);
      EXPECT_TRUE(st.ok()) << st;
      return g;
    };
    {
      auto g = build();
      auto call = LowerForArtifact(*FindOp("QLinearConv"), *g->nodes()[0]);
      ASSERT_TRUE(call.ok()) << call.status();
      ASSERT_EQ(call->kernel, "qconv_winograd");
    }
    auto at = [](const Tensor& t, int64_t i) { return static_cast<int64_t>(t.GetAsDouble(i)); };
    std::vector<int64_t> want;
    for (int64_t n = 0; n < c.N; ++n) {
      for (int64_t oc = 0; oc < c.OC; ++oc) {
        for (int64_t oh = 0; oh < OH; ++oh) {
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t s = bias->data_as<int32_t>()[oc];
            for (int64_t ic = 0; ic < c.C; ++ic) {
              for (int64_t tap = 0; tap < 9; ++tap) {
                const int64_t ih = oh - c.pads[0] + tap / 3, iw = ow - c.pads[1] + tap % 3;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                s += (at(*x, ((n * c.C + ic) * c.H + ih) * c.W + iw) - x_zero) * at(*w, (oc * c.C + ic) * 9 + tap);
              }
            }
            const int64_t y = Requantize(s, x_scale * w_scale->data_as<float>()[oc] / y_scale, y_zero, c.y_type);
            want.push_back(c.relu ? std::max(y, y_zero) : y);
          }
        }
      }
    }
    int64_t unsaturated = 0;  // the sums must spread over Y's range, not pile up at its ends
    for (int64_t v : want) unsaturated += v > (x_u8 ? 0 : -128) && v < (x_u8 ? 255 : 127);
    EXPECT_GT(unsaturated, static_cast<int64_t>(want.size()) * 9 / 10);
    for (const std::string& target : Int8Targets()) {
      SCOPED_TRACE(target);
      auto g = build();
      for (const Tensor& out : RunArtifact(*g, kDefaultPipeline, *x, {1, 2}, target)) {
        ASSERT_EQ(out.num_elements(), static_cast<int64_t>(want.size()));
        int64_t equal = 0;
        for (int64_t i = 0; i < out.num_elements(); ++i) {
          ASSERT_LE(std::abs(at(out, i) - want[i]), c.max_steps) << "element " << i << ": want " << want[i];
          equal += at(out, i) == want[i];
        }
        EXPECT_GE(equal, static_cast<int64_t>(c.exact_fraction * out.num_elements()));
      }
    }
  }
}

// MaxPool then QuantizeLinear runs as QuantizeLinear then a u8 MaxPool (fold-qdq; exact,
// as quantizing never reverses an order): u8 rows of 32 outputs or more take the row walk
// (ResNet's 112x112 with pads 1, a 261-wide row, 65 wide: 32 outputs, one vector exactly,
// or 33: a vector and an overlapping one), narrower ones the plain loop; values that
// saturate at both ends.
TEST(QuantTest, MaxPoolBeforeAQuantizeLinearMatchesPlainLoops) {
  const float scale = 0.03f;
  const int64_t zero = 10;
  const std::vector<int64_t> shapes[] = {{1, 2, 112, 112}, {1, 3, 9, 261}, {2, 2, 5, 65}, {1, 2, 7, 66}, {1, 2, 9, 9}};
  for (const std::vector<int64_t>& shape : shapes) {
    for (int64_t pad : {0, 1}) {
      for (int64_t ceil_mode : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << shape[2] << "x" << shape[3] << " pads " << pad << " ceil " << ceil_mode);
        auto x = FloatsIn(shape, -2.f, 6.f, 7);
        auto build = [&] {
          auto g = std::make_unique<Graph>();
          Value* in = g->AddValue("x", TensorType::Static(DType::kFloat32, shape));
          g->AddInput(in);
          Node* pool = g->AddNode("MaxPool", "pool", {in}, {"m"}, 13);
          pool->mutable_attrs()["kernel_shape"] = std::vector<int64_t>{3, 3};
          pool->mutable_attrs()["strides"] = std::vector<int64_t>{2, 2};
          pool->mutable_attrs()["pads"] = std::vector<int64_t>(4, pad);
          pool->mutable_attrs()["ceil_mode"] = ceil_mode;
          Node* q = g->AddNode("QuantizeLinear", "q",
                               {pool->output(0), g->AddConstant("s", Filled<float>(DType::kFloat32, {}, {scale})),
                                g->AddConstant("z", ScalarOf(DType::kUInt8, zero))},
                               {"y"}, 13);
          g->AddOutput(q->output(0));
          auto st = InferTypes(*g);
          EXPECT_TRUE(st.ok()) << st;
          return g;
        };
        const int64_t H = shape[2], W = shape[3];
        auto out_dim = [&](int64_t in) {
          const int64_t span = in + 2 * pad - 3;
          return (ceil_mode ? (span + 1) / 2 : span / 2) + 1 - (ceil_mode && (span + 1) / 2 * 2 >= in + pad ? 1 : 0);
        };
        const int64_t OH = out_dim(H), OW = out_dim(W);
        std::vector<double> want;
        for (int64_t plane = 0; plane < shape[0] * shape[1]; ++plane) {
          for (int64_t oh = 0; oh < OH; ++oh) {
            for (int64_t ow = 0; ow < OW; ++ow) {
              float m = -INFINITY;
              for (int64_t ih = oh * 2 - pad; ih < oh * 2 - pad + 3; ++ih) {
                for (int64_t iw = ow * 2 - pad; iw < ow * 2 - pad + 3; ++iw) {
                  if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    m = std::max(m, x->data_as<float>()[(plane * H + ih) * W + iw]);
                }
              }
              want.push_back(QuantizedAs(m, scale, zero, DType::kUInt8));
            }
          }
        }
        ExpectEverywhere(build, *x, want);
      }
    }
  }
}

// A QDQ Conv + Relu (as a quantizer writes it: per-channel weights, float bias) gives the
// same u8 result folded into QLinearConv (fold-qdq, default pipeline) as the float graph
// between its conversions does in the interpreter, to within one quantization step (the
// integer op sums exactly and rounds once; the float graph rounds the bias and each sum).
TEST(QuantTest, FoldedQdqConvMatchesTheFloatGraph) {
  const int64_t C = 8, OC = 16, H = 10, W = 10;
  auto w = RandomInts(DType::kInt8, {OC, C, 3, 3}, -127, 127, 21);
  auto w_scale = FloatsIn({OC}, 0.001f, 0.003f, 22);
  auto bias = FloatsIn({OC}, -0.5f, 0.5f, 23);
  auto build = [&] {
    auto g = std::make_unique<Graph>();
    Value* xq = g->AddValue("xq", TensorType::Static(DType::kUInt8, {1, C, H, W}));
    g->AddInput(xq);
    Value* xs = g->AddConstant("xs", Filled<float>(DType::kFloat32, {}, {0.05f}));
    Node* x = g->AddNode("DequantizeLinear", "dq_x",
                         {xq, xs, g->AddConstant("xz", Filled<uint8_t>(DType::kUInt8, {}, {100}))}, {"x"}, 13);
    Node* wd =
        g->AddNode("DequantizeLinear", "dq_w", {g->AddConstant("wq", w), g->AddConstant("ws", w_scale)}, {"w"}, 13);
    wd->mutable_attrs()["axis"] = int64_t{0};
    Node* conv = g->AddNode("Conv", "conv", {x->output(0), wd->output(0), g->AddConstant("b", bias)}, {"c"}, 13);
    conv->mutable_attrs()["pads"] = std::vector<int64_t>{1, 1, 1, 1};
    Node* relu = g->AddNode("Relu", "relu", {conv->output(0)}, {"r"}, 13);
    Node* q = g->AddNode("QuantizeLinear", "q",
                         {relu->output(0), g->AddConstant("ys", Filled<float>(DType::kFloat32, {}, {0.02f})),
                          g->AddConstant("yz", Filled<uint8_t>(DType::kUInt8, {}, {3}))},
                         {"yq"}, 13);
    g->AddOutput(q->output(0));
    auto st = InferTypes(*g);
    EXPECT_TRUE(st.ok()) << st;
    return g;
  };
  auto input = RandomInts(DType::kUInt8, {1, C, H, W}, 0, 255, 24);
  auto reference = RunGraph(*build(), {*input});
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const std::string& target : Int8Targets()) {
    auto g = build();
    const std::vector<Tensor> outs = RunArtifact(*g, kDefaultPipeline, *input, {1, 2}, target);
    ASSERT_EQ(outs.size(), 2u);
    std::string ops;
    for (const Node* node : g->nodes()) ops += node->op() + " ";
    EXPECT_EQ(ops, "QLinearConv ") << target;
    for (const Tensor& out : outs) {
      int64_t off_by_one = 0, clamped = 0;
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        const int64_t got = out.data_as<uint8_t>()[i], want = (*reference)[0].data_as<uint8_t>()[i];
        ASSERT_LE(std::abs(got - want), 1) << target << ", element " << i;
        off_by_one += got != want;
        clamped += want == 3;
      }
      EXPECT_LT(off_by_one, out.num_elements() / 50) << target;
      EXPECT_GT(clamped, out.num_elements() / 10) << "the Relu should clamp a good part of the outputs";
    }
  }
}

// x[1,3,12,12] -> Conv(8, 3x3, pad 1) -> Relu -> Conv(16, 3x3, stride 2) -> Relu -> Add(x2)
// -> Conv(4, 1x1) -> Reshape -> MatMul(4*6*6 -> 10): f32, as quantize sees a model after
// BatchNorm folding.
std::unique_ptr<Graph> SmallCnn() {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddValue("x", TensorType::Static(DType::kFloat32, {1, 3, 12, 12}));
  g->AddInput(x);
  Node* c1 =
      g->AddNode("Conv", "conv1",
                 {x, g->AddConstant("w1", Random({8, 3, 3, 3}, 31, 0.3f)), g->AddConstant("b1", Random({8}, 32, 0.1f))},
                 {"c1"}, 13);
  c1->mutable_attrs()["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  Node* r1 = g->AddNode("Relu", "relu1", {c1->output(0)}, {"r1"}, 13);
  Node* c2 =
      g->AddNode("Conv", "conv2", {r1->output(0), g->AddConstant("w2", Random({16, 8, 3, 3}, 33, 0.2f))}, {"c2"}, 13);
  c2->mutable_attrs()["strides"] = std::vector<int64_t>{2, 2};
  c2->mutable_attrs()["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  Node* r2 = g->AddNode("Relu", "relu2", {c2->output(0)}, {"r2"}, 13);
  Node* twice = g->AddNode("Add", "twice", {r2->output(0), r2->output(0)}, {"a"}, 13);
  Node* c3 = g->AddNode("Conv", "conv3", {twice->output(0), g->AddConstant("w3", Random({4, 16, 1, 1}, 34, 0.3f))},
                        {"c3"}, 13);
  Node* flat = AddReshape(*g, "flat", c3->output(0), {1, 144});
  Node* fc =
      g->AddNode("MatMul", "fc", {flat->output(0), g->AddConstant("wf", Random({144, 10}, 35, 0.2f))}, {"y"}, 13);
  return WithOutput(std::move(g), fc->output(0));
}

double SnrDb(const Tensor& reference, const Tensor& got) {
  double signal = 0, noise = 0;
  for (int64_t i = 0; i < reference.num_elements(); ++i) {
    const double r = reference.data_as<float>()[i], e = got.data_as<float>()[i] - r;
    signal += r * r;
    noise += e * e;
  }
  return 10 * std::log10(signal / std::max(noise, 1e-30));
}

// kInt8Pipeline with the config as quantize's options (its samples go in the PassContext).
Pipeline Int8PipelineWith(const QuantizationConfig& config) {
  Pipeline pipeline = *ParsePipeline(kInt8Pipeline);
  EXPECT_TRUE(SetQuantizationOptions(config, *FindInvocation(pipeline, "quantize")).ok());
  return pipeline;
}

// Post-training quantization (the quantize pass in kInt8Pipeline) on SmallCnn, calibrated on
// 8 random samples, run on another: every Conv and the MatMul become integer ops (or
// stay f32 when kept), and the output keeps its signal (SNR against the f32 graph) with
// each calibration method.
TEST(QuantTest, PostTrainingQuantizationKeepsTheSignal) {
  QuantizationConfig config;
  std::vector<std::vector<Tensor>> samples;
  for (uint32_t s = 0; s < 8; ++s) samples.push_back({*Random({1, 3, 12, 12}, 100 + s)});
  auto input = Random({1, 3, 12, 12}, 7);
  auto reference = RunGraph(*SmallCnn(), {*input});
  ASSERT_TRUE(reference.ok());
  for (CalibrationMethod method :
       {CalibrationMethod::kMinMax, CalibrationMethod::kPercentile, CalibrationMethod::kEntropy}) {
    SCOPED_TRACE(CalibrationMethodName(method));
    config.method = method;
    auto g = SmallCnn();
    PassContext ctx;
    ctx.calibration_samples = samples;
    auto stats = RunPipeline(*g, Int8PipelineWith(config), {}, ctx);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(ctx.quantization_summary.quantized_nodes, 4);
    // The per-layer breakdown: every quantized node, worst SNR first, each with a real error.
    const auto& layers = ctx.quantization_summary.layers_by_error;
    ASSERT_EQ(layers.size(), 4u);
    for (size_t i = 0; i < layers.size(); ++i) {
      EXPECT_GT(layers[i].max_abs_error, 0.0) << layers[i].node;
      EXPECT_GT(layers[i].snr_db, 15.0) << layers[i].node;
      EXPECT_LT(layers[i].snr_db, 80.0) << layers[i].node;
      if (i > 0) EXPECT_LE(layers[i - 1].snr_db, layers[i].snr_db);
    }
    std::map<std::string, int> ops;
    for (const Node* node : g->nodes()) ++ops[node->op()];
    // conv1 (+ relu1) feeds conv2: u8 out; conv2 feeds an Add and conv3 a Reshape: f32 out.
    EXPECT_EQ(ops["QLinearConv"], 1);
    EXPECT_EQ(ops["kiln.QLinearConvToFloat"], 2);
    EXPECT_EQ(ops["QLinearMatMul"], 0);  // its output is the graph's: int8 sums, f32 result
    EXPECT_EQ(ops["kiln.QLinearMatMulToFloat"], 1);
    EXPECT_EQ(ops["Conv"], 0);
    EXPECT_EQ(ops["MatMul"], 0);
    const std::vector<Tensor> outs = RunArtifact(*g, "", *input, {1, 2}, Int8Targets().back());
    ASSERT_EQ(outs.size(), 2u);
    // (Entropy clips the sparse tails of 8 samples' histograms harder than the other two.)
    const double min_snr_db = method == CalibrationMethod::kEntropy ? 18.0 : 25.0;
    for (const Tensor& out : outs) EXPECT_GT(SnrDb((*reference)[0], out), min_snr_db);
  }
  // --keep-float: conv2 stays f32 (its neighbours still quantized).
  config.method = CalibrationMethod::kMinMax;
  config.keep_float = {"conv2"};
  auto g = SmallCnn();
  PassContext ctx;
  ctx.calibration_samples = samples;
  ASSERT_TRUE(RunPipeline(*g, Int8PipelineWith(config), {}, ctx).ok());
  std::map<std::string, int> ops;
  for (const Node* node : g->nodes()) ++ops[node->op()];
  EXPECT_EQ(ops["Conv"], 1);
  EXPECT_EQ(ops["kiln.QLinearConvToFloat"], 2);  // conv1 (conv2 reads f32 now) and conv3
  EXPECT_EQ(ctx.quantization_summary.kept_float.size(), 1u);
  // No calibration: a clear error.
  PassContext no_data;
  auto failed = RunPipeline(*SmallCnn(), "quantize", {}, no_data);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("--calibration"), std::string::npos) << failed.status();
}

TEST(QuantTest, ScaleOfTheWrongLengthNamesTheNode) {
  Graph g;
  Value* in = g.AddValue("x", TensorType::Static(DType::kFloat32, {2, 3}));
  g.AddInput(in);
  Node* q = g.AddNode("QuantizeLinear", "quant_7",
                      {in, g.AddConstant("s", Filled<float>(DType::kFloat32, {4}, {1, 2, 3, 4}))}, {"y"}, 13);
  g.AddOutput(q->output(0));
  const absl::Status st = InferTypes(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'quant_7' (QuantizeLinear, opset 13)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("one element or 3"), std::string::npos) << st;
}

}  // namespace
}  // namespace kiln
