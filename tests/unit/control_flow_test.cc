// If, Loop and Scan through the importer, type inference, the printer, the verifier and
// the reference: bodies become closed subgraphs (outer-scope reads are captured inputs, at
// every level between), and errors inside a body name the node, op and opset around it.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/compiler/frontend.h"
#include "kiln/compiler/ir.h"
#include "kiln/compiler/ops.h"
#include "kiln/compiler/passes.h"
#include "kiln/compiler/reference.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// A dim of -1 is a symbolic one ("d<position>").
void SetTensorType(onnx::ValueInfoProto* info, const std::string& name, int elem_type, std::vector<int64_t> dims) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(elem_type);
  auto* shape = type->mutable_shape();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] >= 0) {
      shape->add_dim()->set_dim_value(dims[i]);
    } else {
      shape->add_dim()->set_dim_param("d" + std::to_string(i));
    }
  }
}

onnx::NodeProto* AddNode(onnx::GraphProto* graph, const std::string& op, const std::string& name,
                         std::vector<std::string> inputs, std::vector<std::string> outputs) {
  auto* node = graph->add_node();
  node->set_op_type(op);
  node->set_name(name);
  for (const auto& in : inputs) node->add_input(in);
  for (const auto& out : outputs) node->add_output(out);
  return node;
}

onnx::GraphProto* AddGraphAttr(onnx::NodeProto* node, const std::string& name) {
  auto* attr = node->add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::GRAPH);
  attr->mutable_g()->set_name(name);
  return attr->mutable_g();
}

// y = Loop(n, true, acc=x): acc = If(sum(acc) > 0, acc + s, acc - s) where s = x * 2 is a
// main-graph value read in the If's branches (two levels up); each iteration also emits
// acc as a scan output.
onnx::ModelProto NestedModel(int opset, const std::string& then_reads = "s") {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(opset);
  auto* g = model.mutable_graph();
  g->set_name("nested");
  SetTensorType(g->add_input(), "x", onnx::TensorProto::FLOAT, {3});
  SetTensorType(g->add_input(), "n", onnx::TensorProto::INT64, {});
  auto* two = g->add_initializer();
  two->set_name("two");
  two->set_data_type(onnx::TensorProto::FLOAT);
  two->add_float_data(2.0f);
  auto* yes = g->add_initializer();
  yes->set_name("yes");
  yes->set_data_type(onnx::TensorProto::BOOL);
  yes->add_int32_data(1);
  AddNode(g, "Mul", "scale", {"x", "two"}, {"s"});
  auto* loop = AddNode(g, "Loop", "loop", {"n", "yes", "x"}, {"acc_final", "accs"});
  auto* body = AddGraphAttr(loop, "body");
  SetTensorType(body->add_input(), "i", onnx::TensorProto::INT64, {});
  SetTensorType(body->add_input(), "c", onnx::TensorProto::BOOL, {});
  SetTensorType(body->add_input(), "acc", onnx::TensorProto::FLOAT, {3});
  auto* sum = AddNode(body, "ReduceSum", "sum", {"acc"}, {"total"});
  auto* keep = sum->add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  auto* zero = body->add_initializer();
  zero->set_name("zero");
  zero->set_data_type(onnx::TensorProto::FLOAT);
  zero->add_float_data(0.0f);
  AddNode(body, "Greater", "positive", {"total", "zero"}, {"up"});
  auto* branch = AddNode(body, "If", "branch", {"up"}, {"next"});
  auto* then_graph = AddGraphAttr(branch, "then_branch");
  AddNode(then_graph, "Add", "add", {"acc", then_reads}, {"plus"});
  SetTensorType(then_graph->add_output(), "plus", onnx::TensorProto::FLOAT, {3});
  auto* else_graph = AddGraphAttr(branch, "else_branch");
  AddNode(else_graph, "Sub", "sub", {"acc", "s"}, {"minus"});
  SetTensorType(else_graph->add_output(), "minus", onnx::TensorProto::FLOAT, {3});
  AddNode(body, "Identity", "keep_going", {"c"}, {"c_out"});
  AddNode(body, "Identity", "emit", {"next"}, {"scan"});
  SetTensorType(body->add_output(), "c_out", onnx::TensorProto::BOOL, {});
  SetTensorType(body->add_output(), "next", onnx::TensorProto::FLOAT, {3});
  SetTensorType(body->add_output(), "scan", onnx::TensorProto::FLOAT, {3});
  SetTensorType(g->add_output(), "acc_final", onnx::TensorProto::FLOAT, {3});
  SetTensorType(g->add_output(), "accs", onnx::TensorProto::FLOAT, {-1, 3});
  return model;
}

TEST(ControlFlowImportTest, OuterReadsBecomeCapturedInputsAtEveryLevel) {
  ImportOptions options;
  auto graph = ImportOnnxModel(NestedModel(17).SerializeAsString(), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Node* loop = nullptr;
  for (const Node* node : (*graph)->nodes()) loop = node->op() == "Loop" ? node : loop;
  ASSERT_NE(loop, nullptr);
  // The Loop reads s for its body: n, cond, x, then the captured s.
  ASSERT_EQ(loop->num_captured(), 1u);
  EXPECT_EQ(loop->inputs().back()->name(), "s");
  const Graph* body = loop->GetGraph("body");
  ASSERT_NE(body, nullptr);
  ASSERT_EQ(body->inputs().size(), 4u);
  EXPECT_EQ(body->inputs()[3]->name(), "s");
  const Node* branch = nullptr;
  for (const Node* node : body->nodes()) branch = node->op() == "If" ? node : branch;
  ASSERT_NE(branch, nullptr);
  // The If captures acc and s, both branches get both inputs in one order.
  EXPECT_EQ(branch->num_captured(), 2u);
  for (const char* key : {"then_branch", "else_branch"}) {
    const Graph* g = branch->GetGraph(key);
    ASSERT_NE(g, nullptr);
    ASSERT_EQ(g->inputs().size(), 2u) << key;
    EXPECT_EQ(g->inputs()[1]->type().dtype, DType::kFloat32);
  }
  EXPECT_EQ(PrintType(loop->output(0)->type()), "f32[3]");
  EXPECT_EQ(PrintType(loop->output(1)->type()), "f32[?,3]");
  EXPECT_TRUE(VerifyGraph(**graph).ok());
  const std::string text = PrintGraph(**graph);
  EXPECT_THAT(text, HasSubstr("    body: graph body(%i: i64[], %c: bool[], %acc: f32[3], %s: f32[3]) {"));
  EXPECT_THAT(text, HasSubstr("        then_branch: graph then_branch("));
}

TEST(ControlFlowImportTest, ReferenceRunsTheBodies) {
  ImportOptions options;
  auto graph = ImportOnnxModel(NestedModel(17).SerializeAsString(), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  Tensor x(DType::kFloat32, {3});
  const float xs[] = {1.0f, -4.0f, 0.5f};  // s = [2, -8, 1]; sum(x) < 0: subtract first
  for (int i = 0; i < 3; ++i) x.data_as<float>()[i] = xs[i];
  Tensor n(DType::kInt64, {});
  n.data_as<int64_t>()[0] = 2;
  auto outputs = ReferenceRunGraph(**graph, {x, n});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  // acc: [1,-4,.5] -> (sum -2.5) - s = [-1, 4, -.5] -> (sum 2.5) + s = [1, -4, .5]
  ASSERT_EQ((*outputs)[1].dims(), (std::vector<int64_t>{2, 3}));
  const float want[] = {-1.0f, 4.0f, -0.5f, 1.0f, -4.0f, 0.5f};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ((*outputs)[1].data_as<float>()[i], want[i]) << i;
}

TEST(ControlFlowImportTest, UndefinedValueInABodyNamesNodeOpAndOpset) {
  // Opset 18 skips libonnx's checker: Kiln's own import must name the body's node.
  ImportOptions options;
  options.model_label = "m.onnx";
  auto graph = ImportOnnxModel(NestedModel(18, "nowhere").SerializeAsString(), options);
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(graph.status().message(),
              HasSubstr("m.onnx: node 'loop' (Loop, opset 18): subgraph 'body': node 'branch' (If, opset 18): "
                        "subgraph 'then_branch': node 'add' (Add, opset 18): input 'nowhere' is not defined before "
                        "this node"));
}

TEST(ControlFlowImportTest, CheckListsNoProblem) {
  ImportOptions options;
  auto problems = CheckOnnxModel(NestedModel(17).SerializeAsString(), options);
  ASSERT_TRUE(problems.ok()) << problems.status();
  EXPECT_TRUE(problems->empty()) << FormatProblems(*problems);
}

TEST(ControlFlowInferTest, IfMergesBranchShapes) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto* g = model.mutable_graph();
  g->set_name("pick");
  SetTensorType(g->add_input(), "c", onnx::TensorProto::BOOL, {});
  SetTensorType(g->add_input(), "a", onnx::TensorProto::FLOAT, {2, 3});
  SetTensorType(g->add_input(), "b", onnx::TensorProto::FLOAT, {2, 5});
  auto* node = AddNode(g, "If", "pick", {"c"}, {"y"});
  AddNode(AddGraphAttr(node, "then_branch"), "Identity", "ta", {"a"}, {"ya"});
  AddNode(AddGraphAttr(node, "else_branch"), "Identity", "tb", {"b"}, {"yb"});
  for (auto& attr : *node->mutable_attribute()) {
    const bool then = attr.name() == "then_branch";
    SetTensorType(attr.mutable_g()->add_output(), then ? "ya" : "yb", onnx::TensorProto::FLOAT, {2, then ? 3 : 5});
  }
  SetTensorType(g->add_output(), "y", onnx::TensorProto::FLOAT, {2, -1});
  ImportOptions options;
  auto graph = ImportOnnxModel(model.SerializeAsString(), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(PrintType((*graph)->outputs()[0]->type()), "f32[2,?]");
}

// fold-constants inlines an If whose condition is a constant: the taken branch's nodes on
// the captured values; dce keeps what a body reads (its captured inputs are node inputs).
TEST(ControlFlowPassesTest, ConstantConditionInlinesTheTakenBranch) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto* g = model.mutable_graph();
  g->set_name("fold");
  SetTensorType(g->add_input(), "a", onnx::TensorProto::FLOAT, {2});
  auto* no = g->add_initializer();
  no->set_name("no");
  no->set_data_type(onnx::TensorProto::BOOL);
  no->add_int32_data(0);
  AddNode(g, "Neg", "neg", {"a"}, {"na"});  // read by the else branch only
  auto* node = AddNode(g, "If", "pick", {"no"}, {"y"});
  auto* then_graph = AddGraphAttr(node, "then_branch");
  AddNode(then_graph, "Identity", "same", {"a"}, {"ya"});
  SetTensorType(then_graph->add_output(), "ya", onnx::TensorProto::FLOAT, {2});
  auto* else_graph = AddGraphAttr(node, "else_branch");
  AddNode(else_graph, "Relu", "relu", {"na"}, {"yb"});
  SetTensorType(else_graph->add_output(), "yb", onnx::TensorProto::FLOAT, {2});
  SetTensorType(g->add_output(), "y", onnx::TensorProto::FLOAT, {2});
  ImportOptions options;
  auto graph = ImportOnnxModel(model.SerializeAsString(), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  PassContext context;
  auto dce = RunPipeline(**graph, "dce", PipelineOptions{}, context);
  ASSERT_TRUE(dce.ok()) << dce.status();
  EXPECT_EQ((*graph)->num_nodes(), 2u);  // Neg stays: the If's else branch reads it
  auto folded = RunPipeline(**graph, "fold-constants,dce", PipelineOptions{}, context);
  ASSERT_TRUE(folded.ok()) << folded.status();
  std::vector<std::string> ops;
  for (const Node* n : (*graph)->nodes()) ops.push_back(n->op());
  EXPECT_THAT(ops, ::testing::ElementsAre("Neg", "Relu"));
  EXPECT_EQ((*graph)->outputs()[0]->name(), "y");
  Tensor a(DType::kFloat32, {2});
  a.data_as<float>()[0] = 1.5f;
  a.data_as<float>()[1] = -2.0f;
  auto outputs = ReferenceRunGraph(**graph, {a});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_FLOAT_EQ((*outputs)[0].data_as<float>()[0], 0.0f);
  EXPECT_FLOAT_EQ((*outputs)[0].data_as<float>()[1], 2.0f);
}

}  // namespace
}  // namespace kiln
