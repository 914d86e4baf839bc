// Graph construction and mutation.
#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "kiln/compiler/ir.h"

namespace kiln {

TensorType TensorType::Static(DType dtype, const std::vector<int64_t>& dims) {
  TensorType type;
  type.dtype = dtype;
  type.has_shape = true;
  for (int64_t d : dims) type.shape.push_back(Dim::Known(d));
  return type;
}

bool TensorType::IsStatic() const {
  if (!has_shape || kind != ValueKind::kTensor) return false;
  for (const Dim& d : shape) {
    if (!d.known()) return false;
  }
  return true;
}

std::vector<int64_t> TensorType::StaticDims() const {
  std::vector<int64_t> dims;
  for (const Dim& d : shape) dims.push_back(d.size);
  return dims;
}

namespace {

// A number attribute as T, whether it was written as an integer or a float.
template <typename T>
T NumberAttr(const std::map<std::string, AttrValue>& attrs, const std::string& key, T fallback) {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<int64_t>(&it->second)) return static_cast<T>(*v);
  if (auto* v = std::get_if<double>(&it->second)) return static_cast<T>(*v);
  return fallback;
}

}  // namespace

int64_t Node::GetInt(const std::string& key, int64_t fallback) const { return NumberAttr(attrs_, key, fallback); }

double Node::GetFloat(const std::string& key, double fallback) const { return NumberAttr(attrs_, key, fallback); }

std::string Node::GetString(const std::string& key, const std::string& fallback) const {
  auto it = attrs_.find(key);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return fallback;
}

std::vector<int64_t> Node::GetInts(const std::string& key, const std::vector<int64_t>& fallback) const {
  auto it = attrs_.find(key);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return {*v};
  return fallback;
}

std::vector<double> Node::GetFloats(const std::string& key, const std::vector<double>& fallback) const {
  auto it = attrs_.find(key);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  return fallback;
}

const Tensor* Node::GetTensor(const std::string& key) const {
  auto it = attrs_.find(key);
  if (it == attrs_.end()) return nullptr;
  if (auto* v = std::get_if<std::shared_ptr<const Tensor>>(&it->second)) return v->get();
  return nullptr;
}

Graph* Node::GetGraph(const std::string& key) const {
  auto it = attrs_.find(key);
  if (it == attrs_.end()) return nullptr;
  if (auto* v = std::get_if<Subgraph>(&it->second)) return v->get();
  return nullptr;
}

std::vector<std::pair<std::string, Graph*>> Node::subgraphs() const {
  std::vector<std::pair<std::string, Graph*>> result;
  for (const auto& [key, value] : attrs_) {
    if (auto* v = std::get_if<Subgraph>(&value); v != nullptr && *v != nullptr) result.emplace_back(key, v->get());
  }
  return result;
}

bool Node::has_subgraphs() const {
  for (const auto& [key, value] : attrs_) {
    if (std::holds_alternative<Subgraph>(value)) return true;
  }
  return false;
}

void Value::RemoveUse(Node* user) {
  auto it = std::find(uses_.begin(), uses_.end(), user);
  if (it != uses_.end()) uses_.erase(it);
}

void Node::set_input(size_t i, Value* value) {
  if (inputs_[i] == value) return;
  if (inputs_[i] != nullptr && !dead_) inputs_[i]->RemoveUse(this);
  inputs_[i] = value;
  if (value != nullptr && !dead_) value->AddUse(this);
}

void Node::set_inputs(std::vector<Value*> values) {
  if (!dead_) {
    for (Value* in : inputs_) {
      if (in != nullptr) in->RemoveUse(this);
    }
    for (Value* in : values) {
      if (in != nullptr) in->AddUse(this);
    }
  }
  inputs_ = std::move(values);
}

std::string Graph::UniqueName(const std::string& hint) {
  std::string base = hint.empty() ? "v" : hint;
  int& count = name_counts_[base];
  std::string name = count == 0 ? base : absl::StrCat(base, ".", count);
  ++count;
  while (name_counts_.count(name) && name != base) {
    name = absl::StrCat(base, ".", count++);
  }
  if (name != base) name_counts_[name] = 1;
  return name;
}

Value* Graph::AddValue(std::string name, TensorType type) {
  auto value = std::make_unique<Value>();
  value->name_ = std::move(name);
  ++name_counts_[value->name_];
  value->type_ = std::move(type);
  values_.push_back(std::move(value));
  return values_.back().get();
}

Value* Graph::AddConstant(std::string name, std::shared_ptr<const Tensor> tensor) {
  Value* value = AddValue(std::move(name), TensorType::Static(tensor->dtype(), tensor->dims()));
  value->constant_ = std::move(tensor);
  return value;
}

Node* Graph::AddNode(std::string op, std::string name, std::vector<Value*> inputs,
                     const std::vector<std::string>& output_names, int opset) {
  auto node = std::make_unique<Node>();
  node->op_ = std::move(op);
  node->name_ = std::move(name);
  node->opset_ = opset;
  node->order_ = next_order_++;
  node->set_inputs(std::move(inputs));
  for (size_t i = 0; i < output_names.size(); ++i) {
    Value* out = AddValue(output_names[i], TensorType{});
    out->producer_ = node.get();
    out->producer_output_ = static_cast<int>(i);
    node->outputs_.push_back(out);
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().get();
}

Node* Graph::InsertNodeBefore(Node* anchor, std::string op, std::string name, std::vector<Value*> inputs,
                              const std::vector<std::string>& output_names, int opset) {
  Node* node = AddNode(std::move(op), std::move(name), std::move(inputs), output_names, opset);
  auto owned = std::move(nodes_.back());
  nodes_.pop_back();
  auto it = std::find_if(nodes_.begin(), nodes_.end(),
                         [anchor](const std::unique_ptr<Node>& n) { return n.get() == anchor; });
  it = nodes_.insert(it, std::move(owned));
  // Between its neighbours; when halving has no room left, renumber the whole order.
  const double before = it == nodes_.begin() ? anchor->order_ - 1 : (*(it - 1))->order_;
  node->order_ = before + (anchor->order_ - before) / 2;
  if (!(node->order_ > before && node->order_ < anchor->order_)) {
    next_order_ = 0;
    for (auto& n : nodes_) n->order_ = next_order_++;
  }
  return node;
}

void Graph::SetConstant(Value* value, std::shared_ptr<const Tensor> tensor) {
  value->type_ = TensorType::Static(tensor->dtype(), tensor->dims());
  value->constant_ = std::move(tensor);
  value->producer_ = nullptr;
}

void Graph::ReplaceAllUses(Value* from, Value* to) {
  if (from == to) return;
  const std::vector<Node*> users = from->uses_;  // (set_input edits the list)
  for (Node* node : users) {
    for (size_t i = 0; i < node->inputs_.size(); ++i) {
      if (node->inputs_[i] == from) node->set_input(i, to);
    }
  }
  for (Value*& out : outputs_) {
    if (out == from) out = to;
  }
}

void Graph::TakeOver(Value* from, Value* to) {
  const std::string name = from->name();
  from->set_name(UniqueName(name + ".replaced"));
  to->set_name(name);
  to->set_type(from->type());
  ReplaceAllUses(from, to);
}

void Graph::RemoveNode(Node* node) {
  if (node->dead_) return;
  for (Value* in : node->inputs_) {
    if (in != nullptr) in->RemoveUse(node);
  }
  node->dead_ = true;
}

void Graph::Compact() {
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [](const std::unique_ptr<Node>& n) { return n->dead_; }),
               nodes_.end());
  std::unordered_set<const Value*> live(inputs_.begin(), inputs_.end());
  live.insert(outputs_.begin(), outputs_.end());
  for (auto& node : nodes_) {
    live.insert(node->inputs_.begin(), node->inputs_.end());
    live.insert(node->outputs_.begin(), node->outputs_.end());
  }
  values_.erase(std::remove_if(values_.begin(), values_.end(),
                               [&](const std::unique_ptr<Value>& v) { return live.count(v.get()) == 0; }),
                values_.end());
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> result;
  result.reserve(nodes_.size());
  for (auto& node : nodes_) {
    if (!node->dead_) result.push_back(node.get());
  }
  return result;
}

size_t Graph::num_nodes() const {
  size_t n = 0;
  for (auto& node : nodes_) n += node->dead_ ? 0 : 1;
  return n;
}

std::vector<Value*> Graph::values() const {
  std::vector<Value*> result;
  for (auto& v : values_) result.push_back(v.get());
  return result;
}

std::vector<Node*> Graph::Users(const Value* value) const {
  std::vector<Node*> users = value->uses_;
  std::sort(users.begin(), users.end(), [](const Node* a, const Node* b) { return a->order_ < b->order_; });
  users.erase(std::unique(users.begin(), users.end()), users.end());
  return users;
}

bool Graph::IsGraphOutput(const Value* value) const {
  return std::find(outputs_.begin(), outputs_.end(), value) != outputs_.end();
}

bool Graph::IsGraphInput(const Value* value) const {
  return std::find(inputs_.begin(), inputs_.end(), value) != inputs_.end();
}

}  // namespace kiln
