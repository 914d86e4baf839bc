// Reads the IR's text form (what PrintGraph writes) back into a Graph, so golden tests can
// state a pass's input as text. Besides the printer's output it accepts:
//   graph NAME(...) opset N {      the opset of every node (default 17)
//   constant f32[64] splat(0.5)    every element the same
//   constant f32[4,3,3,3] random(7)  deterministic values in [-1, 1) from seed 7
//   // comment lines                 (FileCheck directives live there)
// A node's graph attribute (`body=graph NAME`) is read from the block after its line,
// `body: graph NAME(...) { ... }`, a graph of its own (closed: its own names only).
// The printer's "#digest" form of a large constant names no values and is refused.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/compiler/ir.h"
#include "kiln/kernels/float8.h"

namespace kiln {
namespace {

// A number token: its value as a double, and an integer token's exact value (a uint64
// past INT64_MAX kept as its bits), which a double would round past 2^53.
struct NumberToken {
  double value = 0;
  bool is_float = false;  // written as a float (1.0, 1e-5, inf, nan)
  int64_t integer = 0;    // when !is_float
};

void SetElement(Tensor& t, int64_t i, double v) {
  void* p = t.data();
  switch (t.dtype()) {
    case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DType::kFloat16: static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DType::kInt8:
    case DType::kInt4: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DType::kUInt8:
    case DType::kUInt4: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
      static_cast<uint8_t*>(p)[i] = kiln_float_to_float8(static_cast<float>(v), static_cast<int32_t>(t.dtype()), 1);
      break;
    case DType::kInt16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DType::kUInt16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v); break;
    case DType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::kUInt32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case DType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::kUInt64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case DType::kBool: static_cast<bool*>(p)[i] = v != 0; break;
    default: break;
  }
}

// An integer token goes into an integer tensor exactly.
void SetElement(Tensor& t, int64_t i, const NumberToken& n) {
  if (n.is_float || IsFloat(t.dtype()) || t.dtype() == DType::kBool) return SetElement(t, i, n.value);
  void* p = t.data();
  switch (t.dtype()) {
    case DType::kInt64: static_cast<int64_t*>(p)[i] = n.integer; break;
    case DType::kUInt64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(n.integer); break;
    case DType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(n.integer); break;
    case DType::kUInt32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(n.integer); break;
    default: SetElement(t, i, n.value); break;  // 16 bits and fewer: exact as a double
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<std::unique_ptr<Graph>> Parse() {
    auto graph = std::make_unique<Graph>();
    graph_ = graph.get();
    KILN_RETURN_IF_ERROR(ParseGraph(/*top=*/true));
    return graph;
  }
  absl::StatusOr<TensorType> ParseWholeType() {
    KILN_ASSIGN_OR_RETURN(TensorType type, Type());
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the type");
    return type;
  }

 private:
  // --- lexing -------------------------------------------------------------------------
  void SkipSpace() {
    for (;;) {
      while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        if (text_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (text_.substr(pos_, 2) == "//") {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
        continue;
      }
      return;
    }
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool Accept(char c) {
    if (!Peek(c)) return false;
    ++pos_;
    return true;
  }
  bool AcceptWord(std::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    size_t end = pos_ + word.size();
    if (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) return false;
    pos_ = end;
    return true;
  }
  absl::Status Error(const std::string& what) {
    std::string near(text_.substr(pos_, 24));
    for (char& c : near) {
      if (c == '\n') c = ' ';
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", what, " (near \"", near, "\")"));
  }
  absl::Status Expect(char c) {
    if (Accept(c)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", std::string(1, c), "'"));
  }
  // Identifiers: op names (kiln.Elementwise), attribute keys, dtypes, symbols.
  std::string Word() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' || text_[pos_] == '.'))
      ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  absl::StatusOr<std::string> Quoted() {
    if (!Accept('"')) return Error("expected a quoted string");
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      out += text_[pos_++];
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    ++pos_;
    return out;
  }
  // A number token.
  absl::StatusOr<NumberToken> ReadNumber() {
    SkipSpace();
    size_t start = pos_;
    if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
            ((text_[pos_] == '-' || text_[pos_] == '+') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E')))) {
      ++pos_;
    }
    std::string token(text_.substr(start, pos_ - start));
    if (token.empty()) return Error("expected a number");
    char* end = nullptr;
    NumberToken n;
    n.value = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) return Error("'" + token + "' is not a number");
    n.is_float = token.find_first_of(".eEnN") != std::string::npos;  // also inf, nan
    if (!n.is_float) {
      errno = 0;
      if (token[0] == '-') {
        n.integer = std::strtoll(token.c_str(), &end, 10);
      } else {
        n.integer = static_cast<int64_t>(std::strtoull(token.c_str(), &end, 10));
      }
      if (errno == ERANGE || end != token.c_str() + token.size()) {
        return Error("'" + token + "' is not a 64-bit integer");
      }
    }
    return n;
  }
  // An integer token (a dimension, an opset) exactly; a float is an error.
  absl::StatusOr<int64_t> Integer() {
    KILN_ASSIGN_OR_RETURN(NumberToken n, ReadNumber());
    if (n.is_float) return Error(absl::StrCat("expected an integer, not ", n.value));
    return n.integer;
  }
  absl::StatusOr<std::string> ValueName() {
    if (!Accept('%')) return Error("expected a value name (%name)");
    if (Peek('"')) return Quoted();
    std::string name = Word();
    if (name.empty()) return Error("empty value name");
    return name;
  }

  // --- grammar ------------------------------------------------------------------------
  // f32[2,?], or a sequence / optional of one: seq<T>, opt<T>, opt<seq<T>>.
  absl::StatusOr<TensorType> Type() {
    std::string dtype_name = Word();
    if (dtype_name == "seq" || dtype_name == "opt") {
      KILN_RETURN_IF_ERROR(Expect('<'));
      KILN_ASSIGN_OR_RETURN(TensorType inner, Type());
      KILN_RETURN_IF_ERROR(Expect('>'));
      if (dtype_name == "seq" && inner.is_tensor()) return inner.WithKind(ValueKind::kSequence);
      if (dtype_name == "opt" && inner.kind == ValueKind::kTensor) return inner.WithKind(ValueKind::kOptional);
      if (dtype_name == "opt" && inner.kind == ValueKind::kSequence) {
        return inner.WithKind(ValueKind::kOptionalSequence);
      }
      return Error("a sequence holds tensors and an optional a tensor or a sequence");
    }
    auto dtype = DTypeFromName(dtype_name);
    if (!dtype.ok()) return Error(std::string(dtype.status().message()));
    TensorType type;
    type.dtype = *dtype;
    KILN_RETURN_IF_ERROR(Expect('['));
    if (Accept('*')) {
      KILN_RETURN_IF_ERROR(Expect(']'));
      return type;
    }
    type.has_shape = true;
    if (Accept(']')) return type;
    do {
      SkipSpace();
      if (Accept('?')) {
        type.shape.push_back(Dim{});
      } else if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer());
        type.shape.push_back(Dim::Known(n));
      } else {
        std::string symbol = Word();
        if (symbol.empty()) return Error("expected a dimension");
        type.shape.push_back(Dim::Symbolic(symbol));
      }
    } while (Accept(','));
    KILN_RETURN_IF_ERROR(Expect(']'));
    return type;
  }

  // Values of a constant of static type `type`: [v, ...], splat(v) or random(seed).
  absl::StatusOr<std::shared_ptr<Tensor>> TensorValues(const TensorType& type) {
    if (!type.IsStatic()) return Error("a constant needs a static shape");
    auto tensor = std::make_shared<Tensor>(type.dtype, type.StaticDims());
    const int64_t n = tensor->num_elements();
    if (Peek('#'))
      return Error("a constant printed as a digest has no values; write them, or splat(v) or random(seed)");
    if (AcceptWord("splat")) {
      KILN_RETURN_IF_ERROR(Expect('('));
      KILN_ASSIGN_OR_RETURN(NumberToken v, ReadNumber());
      for (int64_t i = 0; i < n; ++i) SetElement(*tensor, i, v);
      KILN_RETURN_IF_ERROR(Expect(')'));
      return tensor;
    }
    if (AcceptWord("random")) {
      KILN_RETURN_IF_ERROR(Expect('('));
      KILN_ASSIGN_OR_RETURN(int64_t seed, Integer());
      uint64_t state = static_cast<uint64_t>(seed) * 6364136223846793005ull + 1442695040888963407ull;
      for (int64_t i = 0; i < n; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const double unit = static_cast<double>(state >> 11) / 9007199254740992.0;  // [0, 1)
        SetElement(*tensor, i,
                   IsFloat(type.dtype) ? unit * 2 - 1 : static_cast<double>(static_cast<int64_t>(unit * 10)));
      }
      KILN_RETURN_IF_ERROR(Expect(')'));
      return tensor;
    }
    KILN_RETURN_IF_ERROR(Expect('['));
    int64_t count = 0;
    if (!Accept(']')) {
      do {
        KILN_ASSIGN_OR_RETURN(NumberToken v, ReadNumber());
        if (count < n) SetElement(*tensor, count, v);
        ++count;
      } while (Accept(','));
      KILN_RETURN_IF_ERROR(Expect(']'));
    }
    if (count != n) return Error(absl::StrCat("the constant has ", n, " elements but ", count, " values are given"));
    return tensor;
  }

  absl::StatusOr<AttrValue> Attr() {
    SkipSpace();
    if (Peek('"')) {
      KILN_ASSIGN_OR_RETURN(auto s, Quoted());
      return AttrValue(s);
    }
    if (Accept('[')) {
      if (Accept(']')) return AttrValue(std::vector<int64_t>{});
      if (Peek('"')) {
        KILN_ASSIGN_OR_RETURN(auto items, List(&Parser::Quoted));
        KILN_RETURN_IF_ERROR(Expect(']'));
        return AttrValue(items);
      }
      std::vector<double> values;
      std::vector<int64_t> integers;
      bool any_float = false;
      do {
        KILN_ASSIGN_OR_RETURN(NumberToken v, ReadNumber());
        values.push_back(v.value);
        integers.push_back(v.integer);
        any_float |= v.is_float;
      } while (Accept(','));
      KILN_RETURN_IF_ERROR(Expect(']'));
      if (any_float) return AttrValue(values);
      return AttrValue(integers);
    }
    if (AcceptWord("graph")) {  // read from the block after the node's line
      auto subgraph = std::make_shared<Graph>();
      subgraph->set_name(Word());
      return AttrValue(Subgraph(subgraph));
    }
    SkipSpace();
    if (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_])) &&
        text_.substr(pos_, 3) != "inf" && text_.substr(pos_, 3) != "nan") {
      KILN_ASSIGN_OR_RETURN(auto type, Type());  // a tensor attribute: TYPE VALUES
      KILN_ASSIGN_OR_RETURN(auto tensor, TensorValues(type));
      return AttrValue(std::shared_ptr<const Tensor>(tensor));
    }
    KILN_ASSIGN_OR_RETURN(NumberToken v, ReadNumber());
    if (v.is_float) return AttrValue(v.value);
    return AttrValue(v.integer);
  }

  // ITEM, ITEM, ...: one or more, each read by `item`.
  absl::StatusOr<std::vector<std::string>> List(absl::StatusOr<std::string> (Parser::*item)()) {
    std::vector<std::string> items;
    do {
      KILN_ASSIGN_OR_RETURN(auto text, (this->*item)());
      items.push_back(std::move(text));
    } while (Accept(','));
    return items;
  }

  absl::StatusOr<Value*> Lookup(const std::string& name) {
    auto it = values_.find(name);
    if (it == values_.end()) return Error("use of undefined value %" + name);
    return it->second;
  }
  absl::Status Define(const std::string& name, Value* value) {
    if (!values_.emplace(name, value).second) return Error("value %" + name + " is defined twice");
    return absl::OkStatus();
  }

  absl::Status ParseGraph(bool top) {
    if (!AcceptWord("graph")) return Error("expected 'graph'");
    const std::string name = Word();
    if (!top && name != graph_->name()) return Error("expected graph " + graph_->name() + ", found " + name);
    graph_->set_name(name);
    KILN_RETURN_IF_ERROR(Expect('('));
    if (!Accept(')')) {
      do {
        KILN_ASSIGN_OR_RETURN(auto name, ValueName());
        KILN_RETURN_IF_ERROR(Expect(':'));
        KILN_ASSIGN_OR_RETURN(auto type, Type());
        Value* v = graph_->AddValue(name, type);
        graph_->AddInput(v);
        KILN_RETURN_IF_ERROR(Define(name, v));
      } while (Accept(','));
      KILN_RETURN_IF_ERROR(Expect(')'));
    }
    int opset = 17;
    if (AcceptWord("opset")) {
      KILN_ASSIGN_OR_RETURN(int64_t n, Integer());
      opset = static_cast<int>(n);
    }
    graph_->set_opset(opset);
    KILN_RETURN_IF_ERROR(Expect('{'));
    for (;;) {
      if (AcceptWord("return")) {
        if (!Peek('}')) {
          do {
            KILN_ASSIGN_OR_RETURN(auto name, ValueName());
            KILN_ASSIGN_OR_RETURN(auto v, Lookup(name));
            graph_->AddOutput(v);
          } while (Accept(','));
        }
        KILN_RETURN_IF_ERROR(Expect('}'));
        SkipSpace();
        if (top && pos_ != text_.size()) return Error("text after the end of the graph");
        return absl::OkStatus();
      }
      KILN_RETURN_IF_ERROR(Statement(opset));
    }
  }

  absl::Status Statement(int opset) {
    KILN_ASSIGN_OR_RETURN(auto outs, List(&Parser::ValueName));
    KILN_RETURN_IF_ERROR(Expect('='));
    if (AcceptWord("constant")) {
      if (outs.size() != 1) return Error("a constant defines one value");
      KILN_ASSIGN_OR_RETURN(auto type, Type());
      KILN_ASSIGN_OR_RETURN(auto tensor, TensorValues(type));
      return Define(outs[0], graph_->AddConstant(outs[0], tensor));
    }
    std::string op = Word();
    if (op.empty()) return Error("expected an op name or 'constant'");
    KILN_RETURN_IF_ERROR(Expect('('));
    std::vector<Value*> inputs;
    if (!Accept(')')) {
      do {
        if (Accept('_')) {
          inputs.push_back(nullptr);
          continue;
        }
        KILN_ASSIGN_OR_RETURN(auto name, ValueName());
        KILN_ASSIGN_OR_RETURN(auto v, Lookup(name));
        inputs.push_back(v);
      } while (Accept(','));
      KILN_RETURN_IF_ERROR(Expect(')'));
    }
    std::map<std::string, AttrValue> attrs;
    if (Accept('{')) {
      if (!Accept('}')) {
        do {
          std::string key = Word();
          if (key.empty()) return Error("expected an attribute name");
          KILN_RETURN_IF_ERROR(Expect('='));
          KILN_ASSIGN_OR_RETURN(auto value, Attr());
          attrs[key] = value;
        } while (Accept(','));
        KILN_RETURN_IF_ERROR(Expect('}'));
      }
    }
    KILN_RETURN_IF_ERROR(Expect(':'));
    std::vector<TensorType> types;
    do {
      KILN_ASSIGN_OR_RETURN(auto type, Type());
      types.push_back(type);
    } while (Accept(','));
    if (types.size() != outs.size()) {
      return Error(absl::StrCat(op, " defines ", outs.size(), " values but ", types.size(), " types are given"));
    }
    Node* node = graph_->AddNode(op, outs[0], inputs, outs, opset);
    node->mutable_attrs() = std::move(attrs);
    for (size_t i = 0; i < outs.size(); ++i) {
      node->output(i)->set_type(types[i]);
      KILN_RETURN_IF_ERROR(Define(outs[i], node->output(i)));
    }
    for (const auto& [key, body] : node->subgraphs()) KILN_RETURN_IF_ERROR(SubgraphBlock(key, *body));
    return absl::OkStatus();
  }

  // `key: graph NAME(...) { ... }`, read into `body` with names of its own.
  absl::Status SubgraphBlock(const std::string& key, Graph& body) {
    if (Word() != key) return Error("expected the block of graph attribute '" + key + "'");
    KILN_RETURN_IF_ERROR(Expect(':'));
    Graph* outer = graph_;
    std::map<std::string, Value*> outer_values = std::move(values_);
    values_.clear();
    graph_ = &body;
    absl::Status status = ParseGraph(/*top=*/false);
    graph_ = outer;
    values_ = std::move(outer_values);
    return status;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  Graph* graph_ = nullptr;  // the graph being read (a subgraph's while in its block)
  std::map<std::string, Value*> values_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(std::string_view text) {
  Parser parser(text);
  KILN_ASSIGN_OR_RETURN(auto graph, parser.Parse());
  KILN_RETURN_IF_ERROR(VerifyGraph(*graph));
  return graph;
}

absl::StatusOr<TensorType> ParseType(std::string_view text) { return Parser(text).ParseWholeType(); }

}  // namespace kiln
