// Linear algebra: Einsum (any equation, one kernel: kernels/linalg/linalg.cc) and Det.
#include <algorithm>
#include <map>

#include "absl/strings/str_split.h"
#include "kiln/kernels/linalg.h"
#include "op_helpers.h"

namespace kiln::ops {
namespace {

// An equation as label ids (0-25 'a'-'z', 26-51 'A'-'Z', KILN_EINSUM_ELLIPSIS for "..."):
// one term per operand and the output's, explicit or implicit (the ellipsis if any operand
// has one, then the labels seen once, in the order of their letters in ASCII, as numpy).
struct EinsumEquation {
  std::vector<std::vector<int64_t>> inputs;
  std::vector<int64_t> output;
};

absl::StatusOr<std::vector<int64_t>> ParseTerm(const Node& node, const std::string& term) {
  std::vector<int64_t> labels;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (term.compare(i, 3, "...") == 0) {
      if (std::count(labels.begin(), labels.end(), KILN_EINSUM_ELLIPSIS) != 0) {
        return NodeError(node, absl::StrCat("term '", term, "' has '...' twice"));
      }
      labels.push_back(KILN_EINSUM_ELLIPSIS);
      i += 2;
    } else if (c >= 'a' && c <= 'z') {
      labels.push_back(c - 'a');
    } else if (c >= 'A' && c <= 'Z') {
      labels.push_back(26 + (c - 'A'));
    } else {
      return NodeError(node, absl::StrCat("equation term '", term, "' has '", std::string(1, c), "', not a letter"));
    }
  }
  return labels;
}

absl::StatusOr<EinsumEquation> ParseEquation(const Node& node) {
  std::string text = node.GetString("equation", "");
  text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
  const size_t arrow = text.find("->");
  const std::string lhs = text.substr(0, arrow);
  EinsumEquation eq;
  for (const std::string& term : std::vector<std::string>(absl::StrSplit(lhs, ','))) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> labels, ParseTerm(node, term));
    eq.inputs.push_back(std::move(labels));
  }
  if (arrow != std::string::npos) {
    KILN_ASSIGN_OR_RETURN(eq.output, ParseTerm(node, text.substr(arrow + 2)));
    return eq;
  }
  int counts[KILN_EINSUM_LETTERS] = {};
  bool ellipsis = false;
  for (const auto& term : eq.inputs) {
    for (int64_t label : term) {
      if (label == KILN_EINSUM_ELLIPSIS) {
        ellipsis = true;
      } else {
        ++counts[label];
      }
    }
  }
  if (ellipsis) eq.output.push_back(KILN_EINSUM_ELLIPSIS);
  for (int64_t label = 26; label < KILN_EINSUM_LETTERS; ++label) {  // 'A'-'Z' sort before 'a'-'z'
    if (counts[label] == 1) eq.output.push_back(label);
  }
  for (int64_t label = 0; label < 26; ++label) {
    if (counts[label] == 1) eq.output.push_back(label);
  }
  return eq;
}

// The output dims of `eq` over static operand dims: each label's extent (1 broadcasts),
// the dims '...' stands for broadcast right-aligned; errors name the node.
absl::StatusOr<std::vector<int64_t>> EinsumOutputDims(const Node& node, const EinsumEquation& eq,
                                                      const std::vector<std::vector<int64_t>>& dims) {
  if (eq.inputs.size() != dims.size()) {
    return NodeError(node, absl::StrCat("equation has ", eq.inputs.size(), " terms for ", dims.size(), " inputs"));
  }
  std::map<int64_t, int64_t> extent;
  std::vector<int64_t> ellipsis;
  auto merge = [&](int64_t& into, int64_t d) -> absl::Status {
    if (into != d && into != 1 && d != 1) return NodeError(node, "operand dims of one label differ");
    if (into == 1) into = d;
    return absl::OkStatus();
  };
  for (size_t k = 0; k < dims.size(); ++k) {
    const auto& term = eq.inputs[k];
    const bool has = std::count(term.begin(), term.end(), KILN_EINSUM_ELLIPSIS) != 0;
    const int64_t covered = static_cast<int64_t>(dims[k].size()) - static_cast<int64_t>(term.size()) + (has ? 1 : 0);
    if (covered < 0 || (!has && covered != 0)) {
      return NodeError(node, absl::StrCat("term ", k, " does not match its input's rank ", dims[k].size()));
    }
    size_t axis = 0;
    for (int64_t label : term) {
      if (label != KILN_EINSUM_ELLIPSIS) {
        auto [it, fresh] = extent.emplace(label, dims[k][axis]);
        if (!fresh) KILN_RETURN_IF_ERROR(merge(it->second, dims[k][axis]));
        ++axis;
        continue;
      }
      if (static_cast<int64_t>(ellipsis.size()) < covered)
        ellipsis.insert(ellipsis.begin(), covered - ellipsis.size(), 1);
      for (int64_t j = 0; j < covered; ++j) {
        KILN_RETURN_IF_ERROR(merge(ellipsis[ellipsis.size() - covered + j], dims[k][axis++]));
      }
    }
  }
  std::vector<int64_t> out;
  for (int64_t label : eq.output) {
    if (label == KILN_EINSUM_ELLIPSIS) {
      out.insert(out.end(), ellipsis.begin(), ellipsis.end());
    } else if (extent.count(label) == 0) {
      return NodeError(node, "an output label is in no input term");
    } else {
      out.push_back(extent[label]);
    }
  }
  return out;
}

absl::Status InferEinsum(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  std::vector<std::vector<int64_t>> dims;
  for (size_t i = 0; i < ctx.input_types.size(); ++i) {
    if (auto st = RequireStatic(ctx, i); !st.ok()) return st;
    if (ctx.type(i).dtype != ctx.type(0).dtype) return NodeError(ctx.node, "operands have different element types");
    dims.push_back(ctx.type(i).StaticDims());
  }
  KILN_ASSIGN_OR_RETURN(const EinsumEquation eq, ParseEquation(ctx.node));
  KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> out, EinsumOutputDims(ctx.node, eq, dims));
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, out);
  return absl::OkStatus();
}

absl::StatusOr<KernelCall> LowerEinsum(const Node& node) {
  KILN_ASSIGN_OR_RETURN(const EinsumEquation eq, ParseEquation(node));
  if (eq.inputs.size() > KILN_EINSUM_MAX_OPERANDS) {
    return NodeError(node, absl::StrCat(eq.inputs.size(), " operands; the kernel takes at most ",
                                        static_cast<int>(KILN_EINSUM_MAX_OPERANDS)));
  }
  kiln_einsum_params params{};
  params.num_operands = static_cast<int64_t>(eq.inputs.size());
  auto fill = [&](const std::vector<int64_t>& term, int64_t* into) -> absl::Status {
    if (term.size() >= KILN_EINSUM_MAX_TERM) return NodeError(node, "an equation term has too many labels");
    std::copy(term.begin(), term.end(), into);
    into[term.size()] = KILN_EINSUM_END;
    return absl::OkStatus();
  };
  for (size_t k = 0; k < eq.inputs.size(); ++k) KILN_RETURN_IF_ERROR(fill(eq.inputs[k], params.terms[k]));
  KILN_RETURN_IF_ERROR(fill(eq.output, params.terms[eq.inputs.size()]));
  // The kernel reads the output term after the operands' (index num_operands).
  return CallWithParams<kernel::einsum>(PassAllInputs(node), params);
}

absl::Status InferDet(InferContext& ctx) {
  if (auto st = RequireFloat(ctx); !st.ok()) return st;
  if (auto st = RequireStatic(ctx, 0); !st.ok()) return st;
  std::vector<int64_t> x = ctx.type(0).StaticDims();
  if (x.size() < 2 || x[x.size() - 1] != x[x.size() - 2]) {
    return NodeError(ctx.node, absl::StrCat("input [", absl::StrJoin(x, ","), "] must be [*, M, M]"));
  }
  x.resize(x.size() - 2);
  ctx.output_types[0] = TensorType::Static(ctx.type(0).dtype, x);
  return absl::OkStatus();
}

// The kernel factors each matrix in double in its scratch.
absl::StatusOr<KernelCall> LowerDet(const Node& node) {
  const int64_t m = StaticDims(node.input(0)).back();
  KernelCall call = Call<kernel::det>(PassInputs(node, 1));
  call.scratch_bytes = std::max<int64_t>(1, m * m) * static_cast<int64_t>(sizeof(double));
  return call;
}

}  // namespace

void RegisterLinalgOps(Registry& registry) {
  // {name, min_inputs, max_inputs, constant_inputs (bitmask), infer, lower}
  const OpSchema ops[] = {
      {"Einsum", 1, KILN_EINSUM_MAX_OPERANDS, 0, InferEinsum, LowerEinsum},
      {"Det", 1, 1, 0, InferDet, LowerDet},
  };
  for (const OpSchema& schema : ops) registry.Add(schema);
}

}  // namespace kiln::ops
