// The graph IR: a Graph of Nodes over SSA Values with TensorTypes. Nodes are kept in
// topological order; passes that insert nodes keep that order. Constant tensors are Values
// that carry their data (ONNX initializers and folded results).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "kiln/compiler/tensor.h"

namespace kiln {

// A dimension: a known size, or a symbol ("N", "batch") when the size is not known yet.
struct Dim {
  int64_t size = -1;
  std::string symbol;
  static Dim Known(int64_t n) { return Dim{n, ""}; }
  // "?" (or "") is the anonymous unknown: no symbol, as the IR parser reads "?".
  static Dim Symbolic(std::string name) { return Dim{-1, name == "?" ? std::string() : std::move(name)}; }
  bool known() const { return size >= 0; }
  bool operator==(const Dim& other) const { return size == other.size && symbol == other.symbol; }
};

// A value's type. For a sequence or an optional (`kind`), dtype and shape describe the
// element (a sequence's tensors, an optional's tensor or its sequence's tensors); such a
// type is never static, so the static paths see tensors only.
struct TensorType {
  DType dtype = DType::kUndefined;
  std::vector<Dim> shape;
  bool has_shape = false;  // false: rank unknown
  ValueKind kind = ValueKind::kTensor;

  static TensorType Static(DType dtype, const std::vector<int64_t>& dims);
  bool is_tensor() const { return kind == ValueKind::kTensor; }
  // A sequence, or an optional sequence: its run-time value holds tensors.
  bool holds_sequence() const { return kind == ValueKind::kSequence || kind == ValueKind::kOptionalSequence; }
  bool is_optional() const { return kind == ValueKind::kOptional || kind == ValueKind::kOptionalSequence; }
  // The same type as a plain tensor (a sequence's or an optional's element).
  TensorType Element() const {
    TensorType t = *this;
    t.kind = ValueKind::kTensor;
    return t;
  }
  TensorType WithKind(ValueKind k) const {
    TensorType t = *this;
    t.kind = k;
    return t;
  }
  bool IsStatic() const;
  // Static dims; only valid when IsStatic().
  std::vector<int64_t> StaticDims() const;
  bool operator==(const TensorType& other) const {
    return dtype == other.dtype && has_shape == other.has_shape && shape == other.shape && kind == other.kind;
  }
};

class Graph;
class Node;

// A graph-valued attribute (If's branches, Loop's and Scan's body): a closed graph. The
// importer turns every value a body reads from an enclosing graph into an explicit input:
// the node gets the outer values appended to its inputs (their number in the attribute
// kCapturedAttr), and each body gets matching graph inputs after its own, so no stage
// ever sees a reference across graphs.
using Subgraph = std::shared_ptr<Graph>;
inline constexpr char kCapturedAttr[] = "kiln.captured";

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                               std::vector<std::string>, std::shared_ptr<const Tensor>, Subgraph>;

class Value {
 public:
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const TensorType& type() const { return type_; }
  void set_type(TensorType type) { type_ = std::move(type); }
  Node* producer() const { return producer_; }
  int producer_output() const { return producer_output_; }
  // Non-null when the value is a compile-time constant (initializer or folded).
  const std::shared_ptr<const Tensor>& constant() const { return constant_; }
  bool is_constant() const { return constant_ != nullptr; }

 private:
  friend class Graph;
  friend class Node;
  void AddUse(Node* user) { uses_.push_back(user); }
  void RemoveUse(Node* user);
  std::string name_;
  TensorType type_;
  Node* producer_ = nullptr;
  int producer_output_ = 0;
  std::shared_ptr<const Tensor> constant_;
  // One entry per (live node, input slot) reading this value, kept up to date by every
  // change of a node's inputs, so finding a value's users never scans the graph.
  std::vector<Node*> uses_;
};

class Node {
 public:
  const std::string& op() const { return op_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Inputs may be nullptr for omitted optional inputs.
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return outputs_[i]; }
  void set_input(size_t i, Value* value);
  void set_inputs(std::vector<Value*> values);

  const std::map<std::string, AttrValue>& attrs() const { return attrs_; }
  std::map<std::string, AttrValue>& mutable_attrs() { return attrs_; }
  bool has_attr(const std::string& key) const { return attrs_.count(key) != 0; }
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  double GetFloat(const std::string& key, double fallback) const;
  std::string GetString(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> GetInts(const std::string& key, const std::vector<int64_t>& fallback = {}) const;
  std::vector<double> GetFloats(const std::string& key, const std::vector<double>& fallback = {}) const;
  const Tensor* GetTensor(const std::string& key) const;
  // A graph attribute (null when absent), and every one the node has, by attribute name.
  Graph* GetGraph(const std::string& key) const;
  std::vector<std::pair<std::string, Graph*>> subgraphs() const;
  bool has_subgraphs() const;
  // How many of the node's inputs, at the end, are values its subgraphs capture.
  size_t num_captured() const { return static_cast<size_t>(GetInt(kCapturedAttr, 0)); }

  // Opset of the default domain the node was imported under.
  int opset() const { return opset_; }

 private:
  friend class Graph;
  std::string op_;
  std::string name_;
  int opset_ = 0;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, AttrValue> attrs_;
  bool dead_ = false;
  double order_ = 0;  // increases along the graph's topological order
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* AddValue(std::string name, TensorType type);
  Value* AddConstant(std::string name, std::shared_ptr<const Tensor> tensor);
  // Appends a node producing `num_outputs` fresh values named from `output_names`.
  Node* AddNode(std::string op, std::string name, std::vector<Value*> inputs,
                const std::vector<std::string>& output_names, int opset);
  // Inserts a node immediately before `anchor` in topological order.
  Node* InsertNodeBefore(Node* anchor, std::string op, std::string name, std::vector<Value*> inputs,
                         const std::vector<std::string>& output_names, int opset);

  // Makes `value` a constant holding `tensor`; its producer (if any) keeps running until DCE.
  void SetConstant(Value* value, std::shared_ptr<const Tensor> tensor);
  // Replaces every use of `from` (node inputs and graph outputs) by `to`.
  void ReplaceAllUses(Value* from, Value* to);
  // `to` takes over `from`: its name (so graph outputs keep theirs), its type and every
  // use. `from` is renamed out of the way and left for Compact().
  void TakeOver(Value* from, Value* to);
  // Marks a node for removal; Compact() drops it.
  void RemoveNode(Node* node);
  // Drops removed nodes and values no longer referenced.
  void Compact();

  std::vector<Node*> nodes() const;
  size_t num_nodes() const;
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  void AddInput(Value* value) { inputs_.push_back(value); }
  void set_inputs(std::vector<Value*> values) { inputs_ = std::move(values); }
  void AddOutput(Value* value) { outputs_.push_back(value); }
  void set_output(size_t i, Value* value) { outputs_[i] = value; }
  std::vector<Value*> values() const;

  // Nodes that read `value`, in graph order, each once (from the value's use list: the
  // cost is in its users, not the graph).
  std::vector<Node*> Users(const Value* value) const;
  bool IsGraphOutput(const Value* value) const;
  bool IsGraphInput(const Value* value) const;

  // A value name not yet used in the graph, derived from `hint`.
  std::string UniqueName(const std::string& hint);

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  int opset() const { return opset_; }
  void set_opset(int opset) { opset_ = opset; }

 private:
  std::string name_ = "main";
  int opset_ = 13;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, int> name_counts_;
  double next_order_ = 0;
};

// Checks SSA form, topological order, arity and that every type is set, in subgraphs too
// (each closed: it reads only its own inputs, constants and nodes); the message names the
// offending node.
absl::Status VerifyGraph(const Graph& graph);

// Stable text form: one line per node, constants summarised by shape and a short digest;
// a node's subgraphs follow its line, indented.
std::string PrintGraph(const Graph& graph);
std::string PrintType(const TensorType& type);
// Reads PrintGraph's text back (plus splat(v)/random(seed) constants and `opset N`); the
// error names the line. The result is verified.
absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(std::string_view text);
// Reads PrintType's text back (a type given as an attribute, Optional's `type`).
absl::StatusOr<TensorType> ParseType(std::string_view text);

}  // namespace kiln
