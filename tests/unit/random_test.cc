// The random ops (RandomUniform, RandomNormal, Bernoulli, Multinomial, ...): distribution
// statistics over 1e5 draws, a seed giving the same numbers every time and everywhere
// (reference, interpreter, artifact at 1 and 4 threads: one generator,
// kiln/kernels/random.h), and unseeded nodes drawing anew, so never folded to constants.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "artifact_test_util.h"
#include "gtest/gtest.h"
#include "kiln/compiler/interp.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/pipeline.h"
#include "kiln/compiler/reference.h"

namespace kiln {
namespace {

// One random node over `inputs` (graph inputs), its output the graph's.
std::unique_ptr<Graph> OneNode(const std::string& op, const std::map<std::string, AttrValue>& attrs,
                               const std::vector<Tensor>& inputs = {}) {
  auto g = std::make_unique<Graph>();
  std::vector<Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(g->AddValue("in" + std::to_string(i), TensorType::Static(inputs[i].dtype(), inputs[i].dims())));
    g->AddInput(ins.back());
  }
  Node* node = g->AddNode(op, "node", ins, {"y"}, 15);
  node->mutable_attrs() = attrs;
  g->AddOutput(node->output(0));
  absl::Status inferred = InferTypes(*g);
  EXPECT_TRUE(inferred.ok()) << inferred;
  return g;
}

Tensor Reference(const Graph& g, const std::vector<Tensor>& inputs) {
  auto out = ReferenceRunGraph(g, inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : Tensor();
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = t.GetAsDouble(i);
  return v;
}

void MeanAndVariance(const std::vector<double>& v, double* mean, double* variance) {
  double sum = 0, squares = 0;
  for (double x : v) sum += x;
  *mean = sum / static_cast<double>(v.size());
  for (double x : v) squares += (x - *mean) * (x - *mean);
  *variance = squares / static_cast<double>(v.size() - 1);
}

constexpr int64_t kSamples = 100000;

// Tolerances are about 5 standard errors of the estimate over 1e5 samples.
TEST(RandomTest, NormalMeanAndVariance) {
  auto g = OneNode("RandomNormal", {{"shape", std::vector<int64_t>{kSamples}},
                                    {"mean", 2.0},
                                    {"scale", 3.0},
                                    {"seed", 7.0},
                                    {"dtype", int64_t{11}}});
  double mean, variance;
  MeanAndVariance(Values(Reference(*g, {})), &mean, &variance);
  EXPECT_NEAR(mean, 2.0, 0.05);     // standard error 3 / sqrt(1e5) = 0.0095
  EXPECT_NEAR(variance, 9.0, 0.2);  // standard error 9 sqrt(2 / 1e5) = 0.04
}

TEST(RandomTest, UniformRangeMeanAndVariance) {
  auto g = OneNode("RandomUniform",
                   {{"shape", std::vector<int64_t>{kSamples}}, {"low", -1.0}, {"high", 3.0}, {"seed", 1.5}});
  const std::vector<double> v = Values(Reference(*g, {}));
  for (double x : v) ASSERT_TRUE(x >= -1.0 && x <= 3.0) << x;
  double mean, variance;
  MeanAndVariance(v, &mean, &variance);
  EXPECT_NEAR(mean, 1.0, 0.02);            // standard error 4 / sqrt(12e5) = 0.0037
  EXPECT_NEAR(variance, 16.0 / 12, 0.03);  // standard error ~0.0042
}

TEST(RandomTest, BernoulliFrequencyMatchesP) {
  Tensor p(DType::kFloat32, {kSamples});
  for (int64_t i = 0; i < kSamples; ++i) p.data_as<float>()[i] = i % 2 == 0 ? 0.3f : 0.9f;
  auto g = OneNode("Bernoulli", {{"seed", 3.0}}, {p});
  const std::vector<double> v = Values(Reference(*g, {p}));
  double ones[2] = {0, 0};
  for (int64_t i = 0; i < kSamples; ++i) {
    ASSERT_TRUE(v[i] == 0 || v[i] == 1);
    ones[i % 2] += v[i];
  }
  EXPECT_NEAR(ones[0] / (kSamples / 2), 0.3, 0.011);  // standard error 0.002
  EXPECT_NEAR(ones[1] / (kSamples / 2), 0.9, 0.007);  // standard error 0.0013
}

TEST(RandomTest, MultinomialFrequenciesMatchTheSoftmax) {
  Tensor logits(DType::kFloat32, {1, 3});
  const double p[3] = {0.2, 0.3, 0.5};
  for (int i = 0; i < 3; ++i) logits.data_as<float>()[i] = static_cast<float>(std::log(p[i]));
  auto g = OneNode("Multinomial", {{"sample_size", kSamples}, {"seed", 11.0}}, {logits});
  const Tensor out = Reference(*g, {logits});
  ASSERT_EQ(out.dtype(), DType::kInt32);
  double counts[3] = {0, 0, 0};
  for (double c : Values(out)) {
    ASSERT_TRUE(c >= 0 && c <= 2) << c;
    counts[static_cast<int>(c)] += 1;
  }
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(counts[i] / kSamples, p[i], 0.01) << "class " << i;
}

void ExpectEqual(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    ASSERT_NEAR(got.GetAsDouble(i), want.GetAsDouble(i), 1e-6 * (1 + std::fabs(want.GetAsDouble(i))))
        << what << " element " << i;
  }
}

// A seed gives one output: in the reference, the interpreter (the kernel library) and the
// artifact at 1 and 4 threads (the first two cases big enough for the kernel to split).
TEST(RandomTest, SameSeedSameOutputEverywhere) {
  Tensor p(DType::kFloat64, {5, 7});
  for (int64_t i = 0; i < p.num_elements(); ++i) p.data_as<double>()[i] = static_cast<double>(i % 10) / 10;
  struct Case {
    std::string op;
    std::map<std::string, AttrValue> attrs;
    std::vector<Tensor> inputs;
  };
  const std::vector<Case> cases = {
      {"RandomUniform", {{"shape", std::vector<int64_t>{3, 5001}}, {"seed", 5.0}, {"low", 2.0}, {"high", 4.0}}, {}},
      {"RandomNormal", {{"shape", std::vector<int64_t>{4099}}, {"seed", 5.0}, {"dtype", int64_t{11}}}, {}},
      {"RandomUniformLike", {{"seed", 0.0}}, {p}},
      {"RandomNormalLike", {{"seed", 2.0}, {"dtype", int64_t{1}}}, {p}},
      {"Bernoulli", {{"seed", 0.0}}, {p}},
      {"Multinomial", {{"seed", 9.0}, {"sample_size", int64_t{13}}, {"dtype", int64_t{7}}}, {p}},
  };
  for (const Case& c : cases) {
    auto g = OneNode(c.op, c.attrs, c.inputs);
    const Tensor want = Reference(*g, c.inputs);
    ExpectEqual(Reference(*g, c.inputs), want, c.op + " reference, again");
    std::vector<const Tensor*> args;
    for (const Tensor& t : c.inputs) args.push_back(&t);
    auto interpreted = EvaluateNode(*g->nodes()[0], args);
    ASSERT_TRUE(interpreted.ok()) << interpreted.status();
    ExpectEqual((*interpreted)[0], want, c.op + " interpreted");
    const std::vector<std::vector<Tensor>> runs = RunArtifactOutputs(*g, kDefaultPipeline, c.inputs, {1, 4});
    ASSERT_EQ(runs.size(), 2u);
    for (const auto& run : runs) ExpectEqual(run.at(0), want, c.op + " compiled");
  }
  auto a = OneNode("RandomUniform", {{"shape", std::vector<int64_t>{64}}, {"seed", 1.0}});
  auto b = OneNode("RandomUniform", {{"shape", std::vector<int64_t>{64}}, {"seed", 2.0}});
  EXPECT_NE(Values(Reference(*a, {})), Values(Reference(*b, {}))) << "another seed, other numbers";
}

// Without a seed every run draws anew: the artifact (its node not folded into a constant)
// gives two runs two outputs, and so do the reference and the interpreter.
TEST(RandomTest, UnseededDrawsAnewAndIsNotFolded) {
  auto g = OneNode("RandomUniform", {{"shape", std::vector<int64_t>{64}}});
  const std::vector<std::vector<Tensor>> runs = RunArtifactOutputs(*g, kDefaultPipeline, {}, {1, 1});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_NE(Values(runs[0].at(0)), Values(runs[1].at(0)));
  EXPECT_NE(Values(Reference(*g, {})), Values(Reference(*g, {})));
  auto first = EvaluateNode(*g->nodes()[0], {}), second = EvaluateNode(*g->nodes()[0], {});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(Values((*first)[0]), Values((*second)[0]));
}

}  // namespace
}  // namespace kiln
