// The stable text form of the IR, used by --print-after-all and the golden tests:
//   graph main(%x: f32[1,3,8,8]) {
//     %w = constant f32[4,3,3,3] #3f9a01c2
//     %y = Conv(%x, %w) {group=1, pads=[1,1,1,1]} : f32[1,4,8,8]
//     return %y
//   }
#include <cctype>
#include <cstdio>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/compiler/ir.h"

namespace kiln {
namespace {

std::string ValueRef(const Value* value) {
  if (value == nullptr) return "_";
  const std::string& name = value->name();
  bool plain = !name.empty();
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') plain = false;
  }
  if (plain) return "%" + name;
  std::string quoted = "%\"";
  for (char c : name) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

// FNV-1a over the bytes: short, stable, enough to tell constants apart in golden text.
std::string ShortDigest(const Tensor& tensor) {
  uint32_t hash = 2166136261u;
  const auto* bytes = static_cast<const unsigned char*>(tensor.data());
  for (int64_t i = 0; i < tensor.size_bytes(); ++i) hash = (hash ^ bytes[i]) * 16777619u;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", hash);
  return buf;
}

std::string FormatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// An attribute float always reads as a float ("1.0", not "1") so the parser can tell it
// from an integer.
std::string FormatAttrDouble(double v) {
  std::string text = FormatDouble(v);
  if (text.find_first_of(".eEna") == std::string::npos) text += ".0";
  return text;
}

std::string ConstantText(const Tensor& tensor) {
  // Small constants are printed in full so golden tests can see folded values.
  if (tensor.num_elements() <= 8) {
    std::vector<std::string> items;
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      items.push_back(IsFloat(tensor.dtype()) ? FormatDouble(tensor.GetAsDouble(i))
                                              : std::to_string(tensor.GetAsInt64(i)));
    }
    return "[" + absl::StrJoin(items, ", ") + "]";
  }
  return "#" + ShortDigest(tensor);
}

std::string AttrText(const AttrValue& value) {
  struct Visitor {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return FormatAttrDouble(v); }
    std::string operator()(const std::string& v) const { return "\"" + v + "\""; }
    std::string operator()(const std::vector<int64_t>& v) const { return "[" + absl::StrJoin(v, ",") + "]"; }
    std::string operator()(const std::vector<double>& v) const {
      std::vector<std::string> items;
      for (double d : v) items.push_back(FormatAttrDouble(d));
      return "[" + absl::StrJoin(items, ",") + "]";
    }
    std::string operator()(const std::vector<std::string>& v) const {
      std::vector<std::string> items;
      for (const auto& s : v) items.push_back("\"" + s + "\"");
      return "[" + absl::StrJoin(items, ",") + "]";
    }
    std::string operator()(const std::shared_ptr<const Tensor>& t) const {
      return absl::StrCat(PrintType(TensorType::Static(t->dtype(), t->dims())), " ", ConstantText(*t));
    }
    // The graph itself follows the node's line (PrintGraph).
    std::string operator()(const Subgraph& g) const { return absl::StrCat("graph ", g ? g->name() : "null"); }
  };
  return std::visit(Visitor{}, value);
}

}  // namespace

std::string PrintType(const TensorType& type) {
  switch (type.kind) {
    case ValueKind::kTensor: break;
    case ValueKind::kSequence: return "seq<" + PrintType(type.Element()) + ">";
    case ValueKind::kOptional: return "opt<" + PrintType(type.Element()) + ">";
    case ValueKind::kOptionalSequence: return "opt<seq<" + PrintType(type.Element()) + ">>";
  }
  std::string text(DTypeName(type.dtype));
  if (!type.has_shape) return text + "[*]";
  std::vector<std::string> dims;
  for (const Dim& d : type.shape)
    dims.push_back(d.known() ? std::to_string(d.size) : d.symbol.empty() ? "?" : d.symbol);
  return text + "[" + absl::StrJoin(dims, ",") + "]";
}

std::string PrintGraph(const Graph& graph) {
  std::ostringstream out;
  std::vector<std::string> inputs;
  for (const Value* in : graph.inputs()) inputs.push_back(ValueRef(in) + ": " + PrintType(in->type()));
  out << "graph " << graph.name() << "(" << absl::StrJoin(inputs, ", ") << ") {\n";
  // Constants first, in the order nodes first use them, so the text does not depend on
  // the order initializers happened to have in the file.
  std::vector<const Value*> printed;
  for (const Node* node : graph.nodes()) {
    for (const Value* in : node->inputs()) {
      if (in == nullptr || !in->is_constant()) continue;
      bool seen = false;
      for (const Value* p : printed) seen |= p == in;
      if (seen) continue;
      printed.push_back(in);
      out << "  " << ValueRef(in) << " = constant " << PrintType(in->type()) << " " << ConstantText(*in->constant())
          << "\n";
    }
  }
  for (const Value* v : graph.outputs()) {
    if (v->is_constant() && v->producer() == nullptr) {
      bool seen = false;
      for (const Value* p : printed) seen |= p == v;
      if (!seen) {
        printed.push_back(v);
        out << "  " << ValueRef(v) << " = constant " << PrintType(v->type()) << " " << ConstantText(*v->constant())
            << "\n";
      }
    }
  }
  for (const Node* node : graph.nodes()) {
    std::vector<std::string> outs, ins, attrs, types;
    for (const Value* v : node->outputs()) {
      outs.push_back(ValueRef(v));
      types.push_back(PrintType(v->type()));
    }
    for (const Value* v : node->inputs()) ins.push_back(ValueRef(v));
    for (const auto& [key, value] : node->attrs()) attrs.push_back(key + "=" + AttrText(value));
    out << "  " << absl::StrJoin(outs, ", ") << " = " << node->op() << "(" << absl::StrJoin(ins, ", ") << ")";
    if (!attrs.empty()) out << " {" << absl::StrJoin(attrs, ", ") << "}";
    out << " : " << absl::StrJoin(types, ", ") << "\n";
    for (const auto& [key, body] : node->subgraphs()) {
      // Each line of the subgraph's text, indented under the node: "    graph then(...) {".
      const std::string text = PrintGraph(*body);
      out << "    " << key << ": ";
      for (size_t begin = 0; begin < text.size();) {
        const size_t end = text.find('\n', begin);
        out << (begin == 0 ? "" : "    ") << text.substr(begin, end - begin + 1);
        begin = end == std::string::npos ? text.size() : end + 1;
      }
    }
  }
  std::vector<std::string> outs;
  for (const Value* v : graph.outputs()) outs.push_back(ValueRef(v));
  out << "  return " << absl::StrJoin(outs, ", ") << "\n}\n";
  return out.str();
}

}  // namespace kiln
