// Elementwise ops, from the ONNX specification: unary math and activations, broadcasting
// binary arithmetic, comparisons and logic, Where, Clip, Cast. Floats are computed in double
// and rounded once on store; integers in int64 (uint64 compared and divided unsigned).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

using RealFn = std::function<double(double)>;
// Makes an op's per-element function from the node's attributes.
using RealFnFactory = std::function<RealFn(const Node&)>;

Outputs Unary(const Tensor& x, const RealFn& f, DType out_dtype) {
  Tensor out(out_dtype, x.dims());
  for (int64_t i = 0; i < x.num_elements(); ++i) StoreDouble(out, i, f(LoadDouble(x, i)));
  return std::vector<Tensor>{std::move(out)};
}

void AddUnaryFloat(RefTable& table, const char* op, RealFnFactory factory) {
  table[op] = [factory](const Node& node, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    return Unary(*x, factory(node), x->dtype());
  };
}

void AddPlainUnary(RefTable& table, const char* op, double (*f)(double)) {
  AddUnaryFloat(table, op, [f](const Node&) { return RealFn(f); });
}

// Ops whose integer forms matter (Abs of int8 -128 wraps, Neg of int64 is exact).
void AddSignedUnary(RefTable& table, const char* op, double (*real)(double), int64_t (*integer)(int64_t)) {
  table[op] = [real, integer](const Node&, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    if (IsFloatType(x->dtype())) return Unary(*x, real, x->dtype());
    Tensor out(x->dtype(), x->dims());
    for (int64_t i = 0; i < x->num_elements(); ++i) StoreInt(out, i, integer(LoadInt(*x, i)));
    return std::vector<Tensor>{std::move(out)};
  };
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void AddUnaryOps(RefTable& table) {
  AddSignedUnary(table, "Abs", [](double x) { return std::fabs(x); }, [](int64_t x) { return x < 0 ? -x : x; });
  AddSignedUnary(table, "Neg", [](double x) { return -x; }, [](int64_t x) { return -x; });
  AddSignedUnary(
      table, "Sign", [](double x) { return x > 0   ? 1.0
                                           : x < 0 ? -1.0
                                                   : 0.0; },
      [](int64_t x) -> int64_t { return x > 0   ? 1
                                        : x < 0 ? -1
                                                : 0; });
  AddSignedUnary(
      table, "Relu", [](double x) { return x > 0 ? x : 0.0; }, [](int64_t x) -> int64_t { return x > 0 ? x : 0; });
  AddPlainUnary(table, "Exp", [](double x) { return std::exp(x); });
  AddPlainUnary(table, "Log", [](double x) { return std::log(x); });
  AddPlainUnary(table, "Sqrt", [](double x) { return std::sqrt(x); });
  AddPlainUnary(table, "Reciprocal", [](double x) { return 1.0 / x; });
  AddPlainUnary(table, "Sin", [](double x) { return std::sin(x); });
  AddPlainUnary(table, "Cos", [](double x) { return std::cos(x); });
  AddPlainUnary(table, "Tan", [](double x) { return std::tan(x); });
  AddPlainUnary(table, "Asin", [](double x) { return std::asin(x); });
  AddPlainUnary(table, "Acos", [](double x) { return std::acos(x); });
  AddPlainUnary(table, "Atan", [](double x) { return std::atan(x); });
  AddPlainUnary(table, "Sinh", [](double x) { return std::sinh(x); });
  AddPlainUnary(table, "Cosh", [](double x) { return std::cosh(x); });
  AddPlainUnary(table, "Asinh", [](double x) { return std::asinh(x); });
  AddPlainUnary(table, "Acosh", [](double x) { return std::acosh(x); });
  AddPlainUnary(table, "Atanh", [](double x) { return std::atanh(x); });
  AddPlainUnary(table, "Tanh", [](double x) { return std::tanh(x); });
  AddPlainUnary(table, "Sigmoid", Sigmoid);
  AddPlainUnary(table, "Floor", [](double x) { return std::floor(x); });
  AddPlainUnary(table, "Ceil", [](double x) { return std::ceil(x); });
  // Round: halves go to the even neighbour; nearbyint does so in the default rounding mode.
  AddPlainUnary(table, "Round", [](double x) { return std::nearbyint(x); });
  AddPlainUnary(table, "Erf", [](double x) { return std::erf(x); });
  AddPlainUnary(table, "Softplus", [](double x) { return std::log(std::exp(x) + 1.0); });
  AddPlainUnary(table, "Softsign", [](double x) { return x / (1.0 + std::fabs(x)); });
  AddPlainUnary(table, "HardSwish", [](double x) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); });
}

void AddActivationOps(RefTable& table) {
  AddUnaryFloat(table, "Elu", [](const Node& n) -> RealFn {
    const double alpha = n.GetFloat("alpha", 1.0);
    return [alpha](double x) { return x < 0 ? alpha * (std::exp(x) - 1.0) : x; };
  });
  AddUnaryFloat(table, "Selu", [](const Node& n) -> RealFn {
    const double alpha = n.GetFloat("alpha", 1.67326319217681884765625);
    const double gamma = n.GetFloat("gamma", 1.05070102214050292968750);
    return [alpha, gamma](double x) { return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha); };
  });
  AddUnaryFloat(table, "LeakyRelu", [](const Node& n) -> RealFn {
    const double alpha = n.GetFloat("alpha", 0.01);
    return [alpha](double x) { return x < 0 ? alpha * x : x; };
  });
  AddUnaryFloat(table, "HardSigmoid", [](const Node& n) -> RealFn {
    const double alpha = n.GetFloat("alpha", 0.2), beta = n.GetFloat("beta", 0.5);
    return [alpha, beta](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); };
  });
  AddUnaryFloat(table, "ThresholdedRelu", [](const Node& n) -> RealFn {
    const double alpha = n.GetFloat("alpha", 1.0);
    return [alpha](double x) { return x > alpha ? x : 0.0; };
  });
  AddUnaryFloat(table, "Celu", [](const Node& n) -> RealFn {
    const double alpha = n.GetFloat("alpha", 1.0);
    return [alpha](double x) { return std::max(0.0, x) + std::min(0.0, alpha * (std::exp(x / alpha) - 1.0)); };
  });
  AddUnaryFloat(table, "Shrink", [](const Node& n) -> RealFn {
    const double bias = n.GetFloat("bias", 0.0), lambd = n.GetFloat("lambd", 0.5);
    return [bias, lambd](double x) { return x < -lambd ? x + bias : x > lambd ? x - bias : 0.0; };
  });
  AddUnaryFloat(table, "Gelu", [](const Node& n) -> RealFn {
    if (n.GetString("approximate", "none") == "tanh") {
      return [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); };
    }
    return [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); };
  });
  AddUnaryFloat(table, "kiln.GeluTanh", [](const Node&) -> RealFn {
    return [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); };
  });
  table["IsNaN"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    return Unary(*x, [](double v) { return std::isnan(v) ? 1.0 : 0.0; }, DType::kBool);
  };
  table["IsInf"] = [](const Node& node, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    const bool negative = node.GetInt("detect_negative", 1) != 0, positive = node.GetInt("detect_positive", 1) != 0;
    return Unary(
        *x, [=](double v) { return std::isinf(v) && ((v > 0 && positive) || (v < 0 && negative)) ? 1.0 : 0.0; },
        DType::kBool);
  };
  table["Not"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    return Unary(*x, [](double v) { return v != 0 ? 0.0 : 1.0; }, DType::kBool);
  };
}

// A binary op: `real` for floating-point operands, `integer` for integer and bool ones
// (`u64` set when the operands are uint64, whose order and division are unsigned).
struct Binary {
  std::function<double(double, double)> real;
  std::function<int64_t(int64_t, int64_t, bool u64)> integer;
  bool to_bool = false;  // comparisons and logic produce bool
};

Outputs EvaluateBinary(const Binary& op, const Tensor& a, const Tensor& b, DType out_dtype) {
  const bool real = IsFloatType(a.dtype()) || IsFloatType(b.dtype());
  const bool u64 = a.dtype() == DType::kUInt64;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  absl::StatusOr<std::vector<int64_t>> dims =
      ForEachBroadcast({&a, &b}, [&](int64_t, const int64_t* at) { pairs.emplace_back(at[0], at[1]); });
  if (!dims.ok()) return dims.status();
  Tensor out(out_dtype, *dims);
  for (int64_t i = 0; i < static_cast<int64_t>(pairs.size()); ++i) {
    const auto [ai, bi] = pairs[i];
    if (real || !op.integer) {
      StoreDouble(out, i, op.real(LoadDouble(a, ai), LoadDouble(b, bi)));
    } else {
      StoreInt(out, i, op.integer(LoadInt(a, ai), LoadInt(b, bi), u64));
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

void AddBinary(RefTable& table, const char* op, std::function<Binary(const Node&)> make) {
  table[op] = [make](const Node& node, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(a, in, 0);
    KILN_REF_INPUT(b, in, 1);
    const Binary binary = make(node);
    return EvaluateBinary(binary, *a, *b, binary.to_bool ? DType::kBool : a->dtype());
  };
}

void AddBinary(RefTable& table, const char* op, Binary binary) {
  AddBinary(table, op, [binary](const Node&) { return binary; });
}

bool UnsignedLess(int64_t a, int64_t b, bool u64) {
  return u64 ? static_cast<uint64_t>(a) < static_cast<uint64_t>(b) : a < b;
}

// Integer power by repeated multiplication (wrapping like the narrow type would).
int64_t IntegerPower(int64_t base, int64_t exponent) {
  if (exponent < 0) return base == 1 ? 1 : base == -1 ? (exponent % 2 == 0 ? 1 : -1) : 0;
  uint64_t result = 1;
  for (int64_t i = 0; i < exponent && i < 128; ++i) result *= static_cast<uint64_t>(base);
  return static_cast<int64_t>(result);
}

int64_t IntegerDivide(int64_t a, int64_t b, bool u64) {
  if (b == 0) return 0;  // undefined by the specification; kept deterministic
  if (u64) return static_cast<int64_t>(static_cast<uint64_t>(a) / static_cast<uint64_t>(b));
  if (a == INT64_MIN && b == -1) return a;
  return a / b;  // truncates toward zero, like C
}

void AddArithmeticOps(RefTable& table) {
  AddBinary(table, "Add",
            Binary{[](double a, double b) { return a + b; },
                   [](int64_t a, int64_t b, bool) {
                     return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
                   }});
  AddBinary(table, "Sub",
            Binary{[](double a, double b) { return a - b; },
                   [](int64_t a, int64_t b, bool) {
                     return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
                   }});
  AddBinary(table, "Mul",
            Binary{[](double a, double b) { return a * b; },
                   [](int64_t a, int64_t b, bool) {
                     return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
                   }});
  AddBinary(table, "Div", Binary{[](double a, double b) { return a / b; }, IntegerDivide});
  // Pow's exponent may have another type than its base; the result has the base's type.
  table["Pow"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(a, in, 0);
    KILN_REF_INPUT(b, in, 1);
    Binary pow{[](double x, double y) { return std::pow(x, y); }, nullptr};
    if (!IsFloatType(a->dtype()) && !IsFloatType(b->dtype())) {
      pow.integer = [](int64_t x, int64_t y, bool) { return IntegerPower(x, y); };
    }
    return EvaluateBinary(pow, *a, *b, a->dtype());
  };
  AddBinary(table, "Mod", [](const Node& node) {
    if (node.GetInt("fmod", 0) != 0) {
      return Binary{[](double a, double b) { return std::fmod(a, b); },
                    [](int64_t a, int64_t b, bool u64) {
                      if (b == 0) return int64_t{0};
                      if (u64) return static_cast<int64_t>(static_cast<uint64_t>(a) % static_cast<uint64_t>(b));
                      return b == -1 ? 0 : a % b;  // the sign of the dividend
                    }};
    }
    // Integer Mod takes the sign of the divisor (Python's %).
    return Binary{[](double a, double b) {
                    const double r = std::fmod(a, b);
                    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
                  },
                  [](int64_t a, int64_t b, bool u64) {
                    if (b == 0) return int64_t{0};
                    if (u64) return static_cast<int64_t>(static_cast<uint64_t>(a) % static_cast<uint64_t>(b));
                    const int64_t r = b == -1 ? 0 : a % b;
                    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
                  }};
  });
  // Max and Min propagate NaN, as numpy's maximum/minimum do.
  AddBinary(table, "Max",
            Binary{[](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); },
                   [](int64_t a, int64_t b, bool u64) { return UnsignedLess(a, b, u64) ? b : a; }});
  AddBinary(table, "Min",
            Binary{[](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); },
                   [](int64_t a, int64_t b, bool u64) { return UnsignedLess(b, a, u64) ? b : a; }});
  AddBinary(table, "PRelu",
            Binary{[](double x, double slope) { return x < 0 ? slope * x : x; },
                   [](int64_t x, int64_t slope, bool) { return x < 0 ? slope * x : x; }});
  AddBinary(table, "BitShift", [](const Node& node) {
    const bool left = node.GetString("direction", "") == "LEFT";
    return Binary{nullptr, [left](int64_t x, int64_t s, bool) {
                    const uint64_t v = static_cast<uint64_t>(x), amount = static_cast<uint64_t>(s);
                    if (amount >= 64) return int64_t{0};
                    return static_cast<int64_t>(left ? v << amount : v >> amount);
                  }};
  });
}

Binary Comparison(bool (*real)(double, double), bool (*integer)(int64_t, int64_t, bool)) {
  return Binary{[real](double a, double b) { return real(a, b) ? 1.0 : 0.0; },
                [integer](int64_t a, int64_t b, bool u64) -> int64_t { return integer(a, b, u64) ? 1 : 0; }, true};
}

void AddComparisonOps(RefTable& table) {
  AddBinary(table, "Equal",
            Comparison([](double a, double b) { return a == b; }, [](int64_t a, int64_t b, bool) { return a == b; }));
  AddBinary(table, "Less", Comparison([](double a, double b) { return a < b; }, UnsignedLess));
  AddBinary(table, "Greater",
            Comparison([](double a, double b) { return a > b; },
                       [](int64_t a, int64_t b, bool u64) { return UnsignedLess(b, a, u64); }));
  AddBinary(table, "LessOrEqual",
            Comparison([](double a, double b) { return a <= b; },
                       [](int64_t a, int64_t b, bool u64) { return !UnsignedLess(b, a, u64); }));
  AddBinary(table, "GreaterOrEqual",
            Comparison([](double a, double b) { return a >= b; },
                       [](int64_t a, int64_t b, bool u64) { return !UnsignedLess(a, b, u64); }));
  AddBinary(table, "And",
            Comparison([](double a, double b) { return a != 0 && b != 0; },
                       [](int64_t a, int64_t b, bool) { return a != 0 && b != 0; }));
  AddBinary(table, "Or",
            Comparison([](double a, double b) { return a != 0 || b != 0; },
                       [](int64_t a, int64_t b, bool) { return a != 0 || b != 0; }));
  AddBinary(table, "Xor",
            Comparison([](double a, double b) { return (a != 0) != (b != 0); },
                       [](int64_t a, int64_t b, bool) { return (a != 0) != (b != 0); }));
}

Outputs Where(const Node&, const Inputs& in) {
  KILN_REF_INPUT(condition, in, 0);
  KILN_REF_INPUT(x, in, 1);
  KILN_REF_INPUT(y, in, 2);
  std::vector<std::pair<bool, int64_t>> picks;
  absl::StatusOr<std::vector<int64_t>> dims = ForEachBroadcast({condition, x, y}, [&](int64_t, const int64_t* at) {
    const bool take_x = LoadInt(*condition, at[0]) != 0;
    picks.emplace_back(take_x, take_x ? at[1] : at[2]);
  });
  if (!dims.ok()) return dims.status();
  Tensor out(x->dtype(), *dims);
  for (int64_t i = 0; i < static_cast<int64_t>(picks.size()); ++i) {
    CopyElement(picks[i].first ? *x : *y, picks[i].second, out, i);
  }
  return std::vector<Tensor>{std::move(out)};
}

// Clip's bounds are attributes before opset 11 and optional scalar inputs from then on.
Outputs Clip(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const Tensor* min_input = OptionalInput(in, 1);
  const Tensor* max_input = OptionalInput(in, 2);
  Tensor out(x->dtype(), x->dims());
  if (IsFloatType(x->dtype())) {
    const double lo = min_input ? LoadDouble(*min_input, 0) : node.GetFloat("min", -INFINITY);
    const double hi = max_input ? LoadDouble(*max_input, 0) : node.GetFloat("max", INFINITY);
    for (int64_t i = 0; i < x->num_elements(); ++i) {
      const double v = LoadDouble(*x, i);
      StoreDouble(out, i, std::isnan(v) ? v : std::min(std::max(v, lo), hi));
    }
  } else {
    const bool u64 = x->dtype() == DType::kUInt64;
    for (int64_t i = 0; i < x->num_elements(); ++i) {
      int64_t v = LoadInt(*x, i);
      if (min_input && UnsignedLess(v, LoadInt(*min_input, 0), u64)) v = LoadInt(*min_input, 0);
      if (max_input && UnsignedLess(LoadInt(*max_input, 0), v, u64)) v = LoadInt(*max_input, 0);
      StoreInt(out, i, v);
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

Tensor CastTo(const Tensor& x, DType to) {
  Tensor out(to, x.dims());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (IsFloatType(x.dtype()) || IsFloatType(to)) {
      StoreDouble(out, i, LoadDouble(x, i));
    } else {
      StoreInt(out, i, LoadInt(x, i));
    }
  }
  return out;
}

void AddSelectionOps(RefTable& table) {
  table["Where"] = Where;
  table["Clip"] = Clip;
  table["Identity"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    return std::vector<Tensor>{*x};
  };
  table["Cast"] = [](const Node& node, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    const DType to = static_cast<DType>(node.GetInt("to", 0));
    if (DTypeSize(to) == 0) return Invalid(absl::StrCat("Cast to element type ", node.GetInt("to", 0)));
    return std::vector<Tensor>{CastTo(*x, to)};
  };
  table["CastLike"] = [](const Node&, const Inputs& in) -> Outputs {
    KILN_REF_INPUT(x, in, 0);
    KILN_REF_INPUT(like, in, 1);
    return std::vector<Tensor>{CastTo(*x, like->dtype())};
  };
}

}  // namespace

void AddElementwiseOps(RefTable& table) {
  AddUnaryOps(table);
  AddActivationOps(table);
  AddArithmeticOps(table);
  AddComparisonOps(table);
  AddSelectionOps(table);
}

}  // namespace kiln::ref
