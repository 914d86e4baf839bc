// The checks that list every construct Kiln cannot compile at once: CheckGraph over IR,
// CheckOnnxModel over an ONNX model, and a failed CompileModel's error naming them all.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ops.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Lines(const std::vector<NodeProblem>& problems) {
  std::vector<std::string> lines;
  for (const NodeProblem& p : problems) lines.push_back(FormatProblem(p));
  return lines;
}

TEST(CheckGraphTest, ListsEveryProblemAndSkipsWhatFollowsOne) {
  Graph g;
  Value* x = g.AddValue("x", TensorType::Static(DType::kFloat32, {2, 6}));
  // A shape input of unknown length: Reshape's result has no known rank.
  TensorType unknown_length = TensorType::Static(DType::kInt64, {2});
  unknown_length.shape[0] = Dim::Symbolic("L");
  Value* shape = g.AddValue("shape", unknown_length);
  // A batch known only at run time is fine; an op without a run-time shape rule on it is not.
  TensorType dynamic = TensorType::Static(DType::kFloat32, {1, 4, 2, 2});
  dynamic.shape[0] = Dim::Symbolic("N");
  Value* d = g.AddValue("d", dynamic);
  for (Value* in : {x, shape, d}) g.AddInput(in);
  Node* relu = g.AddNode("Relu", "fine", {x}, {"r"}, 18);
  // ImageDecoder (opset 20): an op Kiln does not compile (ONNX Runtime's CPU provider lacks it too).
  Node* decode = g.AddNode("ImageDecoder", "decode", {relu->output(0)}, {"u"}, 20);
  Node* after = g.AddNode("Relu", "after_decode", {decode->output(0)}, {"a"}, 18);
  Node* reshape = g.AddNode("Reshape", "reshape", {x, shape}, {"s"}, 18);
  Node* pad = g.AddNode("Pad", "pad",
                        {x, g.AddConstant("pads", std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{4}))},
                        {"p"}, 18);
  pad->mutable_attrs()["mode"] = std::string("circular");
  Node* softmax = g.AddNode("Softmax", "softmax_on_dynamic", {d}, {"m"}, 18);
  Node* on_dynamic = g.AddNode("DepthToSpace", "on_dynamic", {softmax->output(0)}, {"t"}, 18);
  on_dynamic->mutable_attrs()["blocksize"] = int64_t{2};
  for (Node* n : {after, reshape, pad, on_dynamic}) g.AddOutput(n->output(0));

  EXPECT_THAT(Lines(CheckGraph(g)),
              ElementsAre("node 'decode' (ImageDecoder, opset 20): op 'ImageDecoder' is not supported by Kiln",
                          HasSubstr("node 'reshape' (Reshape, opset 18): the shape input must be 1-D with a static "
                                    "length"),
                          "node 'pad' (Pad, opset 18): unknown pad mode 'circular'",
                          AllOf(HasSubstr("node 'on_dynamic' (DepthToSpace, opset 18)"),
                                HasSubstr("does not compile with shapes known only at run time yet"))));
}

TEST(FormatProblemsTest, OneIsItsLineAndManyAreCounted) {
  std::vector<NodeProblem> problems = {{"a", "ImageDecoder", 20, "op 'ImageDecoder' is not supported by Kiln"}};
  EXPECT_EQ(FormatProblems(problems), "node 'a' (ImageDecoder, opset 20): op 'ImageDecoder' is not supported by Kiln");
  problems.assign(kMaxListedProblems + 5, NodeProblem{"n", "ImageDecoder", 20, "why"});
  const std::string text = FormatProblems(problems);
  EXPECT_THAT(text, ::testing::StartsWith(absl::StrCat(kMaxListedProblems + 5, " constructs cannot be compiled:\n")));
  EXPECT_THAT(text, ::testing::EndsWith("\n  ... and 5 more (kiln compile --check lists them all)"));
}

onnx::ModelProto ModelWithFourProblems() {
  onnx::ModelProto model;
  model.set_ir_version(10);
  auto* opset = model.add_opset_import();
  opset->set_version(21);
  auto* graph = model.mutable_graph();
  auto* x = graph->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int d : {2, 3}) x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  auto* q = graph->add_initializer();  // a complex64 weight
  q->set_name("qc");
  q->set_data_type(14);
  q->add_dims(2);
  q->set_raw_data(std::string(1, '\0'));
  auto node = [&](const char* op, const char* name, std::vector<const char*> inputs, const char* output) {
    auto* n = graph->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const char* in : inputs) n->add_input(in);
    n->add_output(output);
    graph->add_output()->set_name(output);
    return n;
  };
  node("Relu", "fine", {"x"}, "r");
  auto* cast = node("Cast", "to_complex", {"x"}, "c");
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(14);
  node("Identity", "reads_complex", {"qc"}, "i");
  node("Custom", "custom", {"x"}, "k")->set_domain("com.example");
  node("ImageDecoder", "decode", {"x"}, "u");
  return model;
}

TEST(CheckOnnxModelTest, ListsEveryNodeWithOpOpsetAndReason) {
  const std::string bytes = ModelWithFourProblems().SerializeAsString();
  ImportOptions options;
  options.model_label = "m.onnx";
  auto problems = CheckOnnxModel(bytes, options);
  ASSERT_TRUE(problems.ok()) << problems.status();
  EXPECT_THAT(
      Lines(*problems),
      ElementsAre("node 'to_complex' (Cast, opset 21): cast to element type complex64, which Kiln does not support",
                  "node 'reads_complex' (Identity, opset 21): input 'qc' is an initializer of element type complex64, "
                  "which Kiln does not support",
                  "node 'custom' (Custom, opset 21): domain 'com.example' is not supported (only the default "
                  "ONNX domain is)",
                  "node 'decode' (ImageDecoder, opset 21): op 'ImageDecoder' is not supported by Kiln"));
  // The import alone stops at the first; a compile's error lists them all.
  auto graph = ImportOnnxModel(bytes, options);
  EXPECT_THAT(graph.status().message(), HasSubstr("to_complex"));
  EXPECT_THAT(graph.status().message(), ::testing::Not(HasSubstr("decode")));
  v1::CompileSpec spec;
  *spec.mutable_model() = DigestOf(bytes);
  CompileInputs inputs;
  inputs.model_bytes = bytes;
  inputs.model_label = "m.onnx";
  auto compiled = CompileModel(spec, inputs);
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), HasSubstr("m.onnx: 4 constructs cannot be compiled:\n  node 'to_complex'"));
  for (const char* name : {"reads_complex", "custom", "decode"})
    EXPECT_THAT(compiled.status().message(), HasSubstr(absl::StrCat("\n  node '", name, "'")));
}

// From opset 18 libonnx's checker does not run (it knows opsets to 17): a required input
// left out must still be an error naming the node, not a crash in the op's inference.
TEST(CheckOnnxModelTest, RequiredInputLeftOutWithoutTheCheckerIsAnError) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(18);
  auto* graph = model.mutable_graph();
  auto* w = graph->add_input();
  w->set_name("w");
  w->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int d : {2, 1, 1, 1}) w->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  auto* conv = graph->add_node();
  conv->set_op_type("Conv");
  conv->set_name("conv");
  conv->add_input("");
  conv->add_input("w");
  conv->add_output("y");
  graph->add_output()->set_name("y");
  ImportOptions options;
  auto graph_or = ImportOnnxModel(model.SerializeAsString(), options);
  ASSERT_FALSE(graph_or.ok());
  EXPECT_THAT(graph_or.status().message(), HasSubstr("node 'conv' (Conv, opset 18): input 0 is required but left out"));
}

}  // namespace
}  // namespace kiln
