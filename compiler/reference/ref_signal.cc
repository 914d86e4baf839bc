// DFT, STFT, MelWeightMatrix, MaxUnpool and TfIdfVectorizer, from the ONNX specification:
// the transforms as the textbook sum over std::complex<double>, the mel filters as the
// specification's reference code computes them, the n-gram counts over a map of the pool.
#include <complex>
#include <map>

#include "ref_nn_util.h"
#include "ref_ops.h"
#include "ref_util.h"

namespace kiln::ref {
namespace {

using Complex = std::complex<double>;
const double kPi = 3.14159265358979323846;

// X[k] = sum_n x[n] exp(-+ 2 pi i k n / length) for k < count; x zero-padded or cut to
// `length`; the inverse divides by length.
std::vector<Complex> Dft(std::vector<Complex> x, int64_t length, int64_t count, bool inverse) {
  x.resize(static_cast<size_t>(length));
  std::vector<Complex> out(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    Complex sum = 0;
    for (int64_t n = 0; n < length; ++n) {
      const double angle = (inverse ? 2 : -2) * kPi * static_cast<double>((k * n) % length) / length;
      sum += x[n] * std::polar(1.0, angle);
    }
    out[k] = inverse ? sum / static_cast<double>(length) : sum;
  }
  return out;
}

int64_t ScalarInt(const Tensor& t) { return IntsOf(t).at(0); }

Outputs DftOp(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  const std::vector<int64_t>& dims = x->dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t axis = node.GetInt("axis", 1);
  if (node.opset() >= 20) axis = OptionalInput(in, 2) ? ScalarInt(*in[2]) : -2;
  if (axis < 0) axis += rank;
  if (rank < 2 || axis < 0 || axis >= rank - 1) return Invalid("axis out of range");
  const int64_t parts = dims.back();
  if (parts != 1 && parts != 2) return Invalid("the last dim must be 1 (real) or 2 (complex)");
  const int64_t n = dims[axis];
  const int64_t length = OptionalInput(in, 1) ? ScalarInt(*in[1]) : n;
  if (length <= 0) return Invalid("dft_length must be positive");
  const bool onesided = node.GetInt("onesided", 0) != 0, inverse = node.GetInt("inverse", 0) != 0;
  const int64_t count = onesided ? length / 2 + 1 : length;
  std::vector<int64_t> out_dims = dims;
  out_dims[axis] = count;
  out_dims.back() = 2;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dims[i];
  for (int64_t i = axis + 1; i < rank - 1; ++i) inner *= dims[i];
  const std::vector<double> values = Doubles(*x);
  std::vector<double> result(static_cast<size_t>(outer * count * inner * 2));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      std::vector<Complex> line(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = ((o * n + k) * inner + j) * parts;
        line[k] = Complex(values[at], parts == 2 ? values[at + 1] : 0.0);
      }
      const std::vector<Complex> spectrum = Dft(line, length, count, inverse);
      for (int64_t k = 0; k < count; ++k) {
        const int64_t at = ((o * count + k) * inner + j) * 2;
        result[at] = spectrum[k].real();
        result[at + 1] = spectrum[k].imag();
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(x->dtype(), out_dims, result)};
}

Outputs StftOp(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(signal, in, 0);
  KILN_REF_INPUT(frame_step, in, 1);
  const Tensor* window = OptionalInput(in, 2);
  const Tensor* frame_length = OptionalInput(in, 3);
  if (signal->dims().size() != 3) return Invalid("signal must be [batch, length, 1 or 2]");
  const int64_t batch = signal->dims()[0], samples = signal->dims()[1], parts = signal->dims()[2];
  const int64_t step = ScalarInt(*frame_step);
  const int64_t length = frame_length ? ScalarInt(*frame_length) : window ? window->num_elements() : 0;
  if (length <= 0 || step <= 0 || length > samples) return Invalid("bad frame_step, window or frame_length");
  if (window && window->num_elements() != length) return Invalid("the window's length is not frame_length");
  const bool onesided = node.GetInt("onesided", 1) != 0;
  const int64_t frames = (samples - length) / step + 1, count = onesided ? length / 2 + 1 : length;
  const std::vector<double> x = Doubles(*signal);
  const std::vector<double> w = window ? Doubles(*window) : std::vector<double>(static_cast<size_t>(length), 1.0);
  std::vector<double> result;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<Complex> frame(static_cast<size_t>(length));
      for (int64_t k = 0; k < length; ++k) {
        const int64_t at = (b * samples + f * step + k) * parts;
        frame[k] = w[k] * Complex(x[at], parts == 2 ? x[at + 1] : 0.0);
      }
      for (const Complex& c : Dft(frame, length, count, false)) {
        result.push_back(c.real());
        result.push_back(c.imag());
      }
    }
  }
  return std::vector<Tensor>{FloatTensor(signal->dtype(), {batch, frames, count, 2}, result)};
}

// The specification's reference code, step by step.
Outputs MelWeightMatrixOp(const Node& node, const Inputs& in) {
  for (size_t i = 0; i < 5; ++i) {
    if (OptionalInput(in, i) == nullptr) return Invalid("all five inputs are required");
  }
  const int64_t mel_bins = ScalarInt(*in[0]), dft_length = ScalarInt(*in[1]);
  const double sample_rate = in[2]->GetAsDouble(0), low = in[3]->GetAsDouble(0), high = in[4]->GetAsDouble(0);
  if (mel_bins <= 0 || dft_length <= 0 || sample_rate <= 0) return Invalid("sizes and rate must be positive");
  const int64_t spectrogram_bins = dft_length / 2 + 1;
  const double low_mel = 2595 * std::log10(1 + low / 700), high_mel = 2595 * std::log10(1 + high / 700);
  const double mel_step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> bins(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700 * (std::pow(10.0, (i * mel_step + low_mel) / 2595) - 1);
    bins[i] = static_cast<int64_t>(std::floor((dft_length + 1) * hz / sample_rate));
  }
  std::vector<double> out(static_cast<size_t>(spectrogram_bins * mel_bins), 0.0);
  auto at = [&](int64_t row, int64_t column) -> double* {
    static double sink;
    return row >= 0 && row < spectrogram_bins ? &out[row * mel_bins + column] : &sink;
  };
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t left = bins[i], center = bins[i + 1], right = bins[i + 2];
    if (center - left == 0) {
      *at(center, i) = 1;
    } else {
      for (int64_t j = left; j <= center; ++j) *at(j, i) = double(j - left) / double(center - left);
    }
    if (right - center > 0) {
      for (int64_t j = center; j < right; ++j) *at(j, i) = double(right - j) / double(right - center);
    }
  }
  const auto dtype = static_cast<DType>(node.GetInt("output_datatype", static_cast<int64_t>(DType::kFloat32)));
  return std::vector<Tensor>{FloatTensor(dtype, {spectrogram_bins, mel_bins}, out)};
}

Outputs MaxUnpoolOp(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  KILN_REF_INPUT(indices, in, 1);
  // The indices address the unpooled tensor of the default shape; output_shape, when
  // given, holds it at its origin (padding after it).
  const std::vector<int64_t>& dims = x->dims();
  if (dims.size() < 3) return Invalid("X must be [N, C, spatial...]");
  const size_t r = dims.size() - 2;
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape");
  const std::vector<int64_t> strides = node.GetInts("strides", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * r, 0));
  if (kernel.size() != r || strides.size() != r || pads.size() != 2 * r) return Invalid("bad window attributes");
  std::vector<int64_t> unpooled = {dims[0], dims[1]};
  for (size_t i = 0; i < r; ++i) unpooled.push_back((dims[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[r + i]);
  const Tensor* shape = OptionalInput(in, 2);
  const std::vector<int64_t> out_dims = shape ? IntsOf(*shape) : unpooled;
  if (out_dims.size() != dims.size()) return Invalid("output_shape has the wrong length");
  Tensor out(x->dtype(), out_dims);
  std::memset(out.data(), 0, static_cast<size_t>(out.size_bytes()));
  const std::vector<int64_t> at = IntsOf(*indices);
  if (static_cast<int64_t>(at.size()) != x->num_elements()) return Invalid("I and X differ in size");
  int64_t unpooled_count = 1;
  for (int64_t d : unpooled) unpooled_count *= d;
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i] < 0 || at[i] >= unpooled_count) return Invalid("an index is out of range");
    const std::vector<int64_t> index = Unflatten(unpooled, at[i]);
    for (size_t d = 0; d < index.size(); ++d) {
      if (index[d] >= out_dims[d]) return Invalid("output_shape is smaller than the unpooled tensor");
    }
    CopyElement(*x, static_cast<int64_t>(i), out, Flatten(out_dims, index));
  }
  return std::vector<Tensor>{std::move(out)};
}

// TfIdfVectorizer: each pool n-gram (grouped by length via ngram_counts) goes to output
// column ngram_indexes[its position among the pool's n-grams].
Outputs TfIdfVectorizerOp(const Node& node, const Inputs& in) {
  KILN_REF_INPUT(x, in, 0);
  if (node.has_attr("pool_strings")) return Invalid("string pools are not supported");
  const std::vector<int64_t> pool = node.GetInts("pool_int64s"), counts = node.GetInts("ngram_counts");
  const std::vector<int64_t> indexes = node.GetInts("ngram_indexes");
  const std::vector<double> weights = node.GetFloats("weights");
  std::map<std::vector<int64_t>, int64_t> column_of;
  size_t position = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    const size_t end = g + 1 < counts.size() ? static_cast<size_t>(counts[g + 1]) : pool.size();
    for (size_t s = static_cast<size_t>(counts[g]); s + g < end; s += g + 1) {
      if (position >= indexes.size()) return Invalid("fewer ngram_indexes than n-grams");
      column_of[std::vector<int64_t>(pool.begin() + s, pool.begin() + s + g + 1)] = indexes[position++];
    }
  }
  int64_t width = 0;
  for (int64_t i : indexes) width = std::max(width, i + 1);
  const int64_t min_n = node.GetInt("min_gram_length", 1), max_n = node.GetInt("max_gram_length", 1);
  const int64_t max_skip = node.GetInt("max_skip_count", 0);
  const std::vector<int64_t> items = IntsOf(*x);
  const bool batched = x->dims().size() == 2;
  const int64_t rows = batched ? x->dims()[0] : 1, columns = x->dims().back();
  std::vector<double> tf(static_cast<size_t>(rows * width), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t skip = 0; skip <= max_skip; ++skip) {
      // A unigram has no gaps: it is counted with skip 0 only.
      for (int64_t n = std::max(min_n, skip > 0 ? int64_t{2} : int64_t{1}); n <= max_n; ++n) {
        for (int64_t start = 0; start + (n - 1) * (skip + 1) < columns; ++start) {
          std::vector<int64_t> gram;
          for (int64_t k = 0; k < n; ++k) gram.push_back(items[r * columns + start + k * (skip + 1)]);
          if (auto it = column_of.find(gram); it != column_of.end()) tf[r * width + it->second] += 1;
        }
      }
    }
  }
  const std::string mode = node.GetString("mode", "TF");
  for (size_t i = 0; i < tf.size(); ++i) {
    const size_t column = i % static_cast<size_t>(width);
    const double w = column < weights.size() ? weights[column] : 1.0;
    if (mode == "IDF") tf[i] = tf[i] > 0 ? w : 0.0;
    if (mode == "TFIDF") tf[i] *= w;
  }
  return std::vector<Tensor>{
      FloatTensor(DType::kFloat32, batched ? std::vector<int64_t>{rows, width} : std::vector<int64_t>{width}, tf)};
}

}  // namespace

void AddSignalOps(RefTable& table) {
  table["DFT"] = DftOp;
  table["STFT"] = StftOp;
  table["MelWeightMatrix"] = MelWeightMatrixOp;
  table["MaxUnpool"] = MaxUnpoolOp;
  table["TfIdfVectorizer"] = TfIdfVectorizerOp;
}

}  // namespace kiln::ref
