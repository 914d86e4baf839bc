// Einsum and Det, from the ONNX specification (numpy.einsum's conventions; the
// determinant by cofactor-free Gaussian elimination in double).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "ref_nn_util.h"
#include "ref_ops.h"

namespace kiln::ref {
namespace {

using Result = absl::StatusOr<std::vector<Tensor>>;

// The terms of an equation with each "..." spelled out as digits, one per broadcast dim
// ('0' the outermost of `rank` of them, right-aligned against each operand's own).
std::string SpellEllipsis(const std::string& term, int64_t operand_rank, int64_t ellipsis_rank) {
  const size_t at = term.find("...");
  if (at == std::string::npos) return term;
  const int64_t covered = operand_rank < 0 ? ellipsis_rank : operand_rank - static_cast<int64_t>(term.size() - 3);
  std::string digits;
  for (int64_t j = ellipsis_rank - covered; j < ellipsis_rank; ++j) digits.push_back(static_cast<char>('0' + j));
  return term.substr(0, at) + digits + term.substr(at + 3);
}

Result Einsum(const Node& node, const Inputs& in) {
  std::string eq;
  for (char c : node.GetString("equation", "")) {
    if (c != ' ') eq.push_back(c);
  }
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = eq.find(',', start);
    const size_t end = std::min(comma, arrow);
    terms.push_back(eq.substr(start, end - start));
    if (comma == std::string::npos || comma > arrow) break;
    start = comma + 1;
  }
  if (terms.size() != in.size()) return absl::InvalidArgumentError("the equation's terms do not match the inputs");
  int64_t ellipsis_rank = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    if (terms[k].find("...") != std::string::npos) {
      ellipsis_rank = std::max<int64_t>(ellipsis_rank, in[k]->rank() - static_cast<int64_t>(terms[k].size() - 3));
    }
  }
  std::map<char, int64_t> size, seen;
  for (size_t k = 0; k < terms.size(); ++k) {
    terms[k] = SpellEllipsis(terms[k], in[k]->rank(), ellipsis_rank);
    for (size_t a = 0; a < terms[k].size(); ++a) {
      const char c = terms[k][a];
      size[c] = std::max(size.count(c) ? size[c] : 1, in[k]->dims()[a]);
      ++seen[c];
    }
  }
  std::string out_term;
  if (arrow != std::string::npos) {
    out_term = SpellEllipsis(eq.substr(arrow + 2), -1, ellipsis_rank);
  } else {
    for (const auto& [c, count] : seen) {  // digits ('...') sort first, then 'A'-'Z', 'a'-'z'
      if ((c >= '0' && c <= '9') || count == 1) out_term.push_back(c);
    }
  }
  std::vector<int64_t> out_dims;
  for (char c : out_term) out_dims.push_back(size[c]);
  std::vector<double> out(static_cast<size_t>(NumElements(out_dims)), 0.0);
  std::vector<std::vector<double>> values;
  for (const Tensor* t : in) values.push_back(Doubles(*t));
  std::vector<char> labels;
  for (const auto& [c, s] : size) labels.push_back(c);
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  auto index_of = [&](const std::string& term, const std::vector<int64_t>& dims) {
    std::vector<int64_t> index;
    for (size_t a = 0; a < term.size(); ++a) index.push_back(dims[a] == 1 ? 0 : at[term[a]]);
    return Flatten(dims, index);
  };
  bool done = false;  // also when a label has extent 0
  for (const auto& [c, s] : size) done |= s == 0;
  while (!done) {  // every assignment of the labels, the last label fastest
    double product = 1;
    for (size_t k = 0; k < in.size(); ++k) product *= values[k][index_of(terms[k], in[k]->dims())];
    out[index_of(out_term, out_dims)] += product;
    size_t d = labels.size();
    while (d-- > 0) {
      if (++at[labels[d]] < size[labels[d]]) break;
      at[labels[d]] = 0;
    }
    done = d == static_cast<size_t>(-1);
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), out_dims, out)};
}

Result Det(const Node&, const Inputs& in) {
  std::vector<int64_t> dims = in[0]->dims();
  const int64_t m = dims.back();
  dims.resize(dims.size() - 2);
  const std::vector<double> x = Doubles(*in[0]);
  std::vector<double> out;
  for (int64_t b = 0; b < NumElements(dims); ++b) {
    std::vector<std::vector<double>> a(m, std::vector<double>(m));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < m; ++j) a[i][j] = x[(b * m + i) * m + j];
    }
    double det = 1;
    for (int64_t j = 0; j < m; ++j) {
      int64_t best = j;
      for (int64_t i = j + 1; i < m; ++i) best = std::fabs(a[i][j]) > std::fabs(a[best][j]) ? i : best;
      if (a[best][j] == 0) {
        det = 0;
        break;
      }
      if (best != j) {
        std::swap(a[best], a[j]);
        det = -det;
      }
      det *= a[j][j];
      for (int64_t i = j + 1; i < m; ++i) {
        const double f = a[i][j] / a[j][j];
        for (int64_t k = j; k < m; ++k) a[i][k] -= f * a[j][k];
      }
    }
    out.push_back(det);
  }
  return std::vector<Tensor>{FloatTensor(in[0]->dtype(), dims, out)};
}

}  // namespace

void AddLinalgOps(RefTable& table) {
  table["Einsum"] = Einsum;
  table["Det"] = Det;
}

}  // namespace kiln::ref
