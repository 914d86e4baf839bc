// Signal processing and friends: DFT and STFT (a direct O(n^2) transform in double, the
// output [..., 2] of real and imaginary parts), MelWeightMatrix, MaxUnpool and
// TfIdfVectorizer, with the shape functions of the ops whose inputs decide their shapes.
#include "kiln/kernels/signal.h"
#include "kernel_common.h"

using namespace kiln_kernels;

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

int64_t Count(const int64_t* dims, int32_t begin, int32_t end) {
  int64_t n = 1;
  for (int32_t i = begin; i < end; ++i) n *= dims[i];
  return n;
}

bool IsFloatTensor(const kiln_ktensor& t) { return t.dtype == kF32 || t.dtype == kF64; }

// Stores into an f32 or f64 tensor (IsFloatTensor checked by the caller).
void StoreFloat(const kiln_ktensor& t, int64_t i, double v) {
  if (t.dtype == kF32) {
    static_cast<float*>(t.data)[i] = static_cast<float>(v);
  } else {
    static_cast<double*>(t.data)[i] = v;
  }
}

// One transform: out[k] (k < count) = sum_n value(n) e^(-+2 pi i k n / length), the
// signal read for n < min(available, length) (zero beyond: dft_length pads or cuts).
// `value(n, re, im)` reads sample n; out gets re, im pairs at stride `out_stride` (in
// pairs). The angle takes k n mod length, so it stays exact for long transforms.
template <typename Value>
void Transform(const Value& value, int64_t available, int64_t length, int64_t count, bool inverse,
               const kiln_ktensor& out, int64_t out_base, int64_t out_stride) {
  const int64_t n_max = available < length ? available : length;
  const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / static_cast<double>(length) : 1.0;
  for (int64_t k = 0; k < count; ++k) {
    double re = 0, im = 0;
    for (int64_t n = 0; n < n_max; ++n) {
      double xr, xi;
      value(n, xr, xi);
      const double angle = sign * kTwoPi * static_cast<double>((k * n) % length) / static_cast<double>(length);
      const double c = cos(angle), s = sin(angle);
      re += xr * c - xi * s;
      im += xr * s + xi * c;
    }
    const int64_t at = (out_base + k * out_stride) * 2;
    StoreFloat(out, at, re * scale);
    StoreFloat(out, at + 1, im * scale);
  }
}

int64_t ReadScalar(const kiln_ktensor& t) { return LoadAsInt64(t.data, t.dtype, 0); }

}  // namespace

// DFT: input 0 [..., N, ..., c] (c = 1 real, 2 complex), the transform along `axis`;
// output [..., K, ..., 2] with K = length (length / 2 + 1 onesided). One line per task.
KILN_KERNEL(dft) {
  KILN_PARAMS(kiln_signal_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &y = call->outputs[0];
  if (x.rank < 2 || p.axis < 0 || p.axis >= x.rank - 1) return KILN_KERR_SHAPE;
  if (!IsFloatTensor(x) || !IsFloatTensor(y)) return KILN_KERR_DTYPE;
  const int32_t axis = static_cast<int32_t>(p.axis);
  const int64_t available = x.dims[axis], parts = x.dims[x.rank - 1];
  const int64_t length = p.has_length ? ReadScalar(call->inputs[1]) : available;
  if (length <= 0 || (parts != 1 && parts != 2)) return KILN_KERR_SHAPE;
  const int64_t inner = Count(x.dims, axis + 1, x.rank - 1), count = y.dims[axis];
  const bool inverse = p.inverse != 0;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line) {
      const int64_t o = line / inner, j = line % inner;
      auto value = [&](int64_t n, double& re, double& im) {
        const int64_t at = ((o * available + n) * inner + j) * parts;
        re = LoadAsDouble(x.data, x.dtype, at);
        im = parts == 2 ? LoadAsDouble(x.data, x.dtype, at + 1) : 0.0;
      };
      Transform(value, available, length, count, inverse, y, o * count * inner + j, inner);
    }
  };
  ParallelFor(call, Count(x.dims, 0, axis) * inner, 1, body);
  return KILN_KERR_OK;
}

// STFT: signal [B, S, c], frame_step (input 1), window (input 2, optional) and
// frame_length (input 3, optional; else the window's length); output [B, frames, K, 2].
// One frame per task.
KILN_KERNEL(stft) {
  KILN_PARAMS(kiln_signal_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &y = call->outputs[0];
  if (x.rank != 3 || (x.dims[2] != 1 && x.dims[2] != 2)) return KILN_KERR_SHAPE;
  if (!IsFloatTensor(x) || !IsFloatTensor(y)) return KILN_KERR_DTYPE;
  const int64_t step = ReadScalar(call->inputs[1]);
  const bool has_window = p.has_window != 0;
  const kiln_ktensor window = has_window ? call->inputs[2] : kiln_ktensor{};
  const int64_t length = p.has_length ? ReadScalar(call->inputs[3]) : has_window ? window.dims[0] : -1;
  if (length <= 0 || step <= 0 || (has_window && window.dims[0] != length)) return KILN_KERR_SHAPE;
  const int64_t signal = x.dims[1], parts = x.dims[2], frames = y.dims[1], count = y.dims[2];
  if (frames > 0 && (frames - 1) * step + length > signal) return KILN_KERR_SHAPE;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / frames, f = t % frames;
      auto value = [&](int64_t n, double& re, double& im) {
        const int64_t at = (b * signal + f * step + n) * parts;
        const double w = has_window ? LoadAsDouble(window.data, window.dtype, n) : 1.0;
        re = w * LoadAsDouble(x.data, x.dtype, at);
        im = parts == 2 ? w * LoadAsDouble(x.data, x.dtype, at + 1) : 0.0;
      };
      Transform(value, length, length, count, false, y, t * count, 1);
    }
  };
  ParallelFor(call, x.dims[0] * frames, 1, body);
  return KILN_KERR_OK;
}

namespace {

// MelWeightMatrix's frequency bin i of num_mel_bins + 2 edges, as the specification
// computes it: evenly spaced on the mel scale, mapped to DFT bins (floor).
int64_t MelEdge(int64_t i, int64_t mel_bins, int64_t dft_length, double sample_rate, double low_hz, double high_hz) {
  const double low_mel = 2595.0 * log10(1.0 + low_hz / 700.0), high_mel = 2595.0 * log10(1.0 + high_hz / 700.0);
  const double step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
  const double hz = 700.0 * (pow(10.0, (static_cast<double>(i) * step + low_mel) / 2595.0) - 1.0);
  return static_cast<int64_t>(floor(static_cast<double>(dft_length + 1) * hz / sample_rate));
}

}  // namespace

// MelWeightMatrix: inputs num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
// upper_edge_hertz; output [dft_length / 2 + 1, num_mel_bins] of triangular filters.
KILN_KERNEL(mel_weight_matrix) {
  const kiln_ktensor& y = call->outputs[0];
  const int64_t mel_bins = ReadScalar(call->inputs[0]), dft_length = ReadScalar(call->inputs[1]);
  const double rate = LoadAsDouble(call->inputs[2].data, call->inputs[2].dtype, 0);
  const double low = LoadAsDouble(call->inputs[3].data, call->inputs[3].dtype, 0);
  const double high = LoadAsDouble(call->inputs[4].data, call->inputs[4].dtype, 0);
  const int64_t rows = y.dims[0];
  if (y.dims[1] != mel_bins || rows != dft_length / 2 + 1) return KILN_KERR_SHAPE;
  if (!IsFloatTensor(y)) return KILN_KERR_DTYPE;
  for (int64_t i = 0; i < rows * mel_bins; ++i) StoreFloat(y, i, 0.0);
  auto set = [&](int64_t row, int64_t column, double v) {
    if (row >= 0 && row < rows) StoreFloat(y, row * mel_bins + column, v);
  };
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t left = MelEdge(i, mel_bins, dft_length, rate, low, high);
    const int64_t center = MelEdge(i + 1, mel_bins, dft_length, rate, low, high);
    const int64_t right = MelEdge(i + 2, mel_bins, dft_length, rate, low, high);
    if (center == left) {
      set(center, i, 1.0);
    } else {
      for (int64_t j = left; j <= center; ++j) {
        set(j, i, static_cast<double>(j - left) / static_cast<double>(center - left));
      }
    }
    for (int64_t j = center; right > center && j < right; ++j) {
      set(j, i, static_cast<double>(right - j) / static_cast<double>(right - center));
    }
  }
  return KILN_KERR_OK;
}

namespace {

int64_t ElementBytes(int32_t dtype) {
  switch (dtype) {
    case kU8:
    case kI8:
    case kBool: return 1;
    case kU16:
    case kI16:
    case kF16:
    case kBF16: return 2;
    case kF32:
    case kI32:
    case kU32: return 4;
    default: return 8;
  }
}

}  // namespace

// MaxUnpool: Y zero but for X.flat[i] at I[i], an offset (from MaxPool) into the whole
// unpooled tensor of the default shape, which Y holds at its origin.
KILN_KERNEL(max_unpool) {
  KILN_PARAMS(kiln_unpool_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &indices = call->inputs[1], &y = call->outputs[0];
  const int64_t n = Count(x.dims, 0, x.rank), total = Count(y.dims, 0, y.rank), size = ElementBytes(y.dtype);
  if (Count(indices.dims, 0, indices.rank) != n || x.dtype != y.dtype || x.rank != y.rank ||
      x.rank != p.num_spatial + 2 || x.rank > kMaxRank) {
    return KILN_KERR_SHAPE;
  }
  int64_t unpooled[kMaxRank] = {x.dims[0], x.dims[1]};
  for (int64_t i = 0; i < p.num_spatial; ++i) {
    unpooled[2 + i] = (x.dims[2 + i] - 1) * p.strides[i] + p.kernel[i] - p.pads[i] - p.pads[p.num_spatial + i];
  }
  memset(y.data, 0, static_cast<size_t>(total * size));
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = LoadAsInt64(indices.data, indices.dtype, i), offset = 0, stride = 1;
    if (at < 0 || at >= Count(unpooled, 0, x.rank)) return KILN_KERR_INDEX;
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      const int64_t coordinate = at % unpooled[d];
      at /= unpooled[d];
      if (coordinate >= y.dims[d]) return KILN_KERR_INDEX;
      offset += coordinate * stride;
      stride *= y.dims[d];
    }
    memcpy(static_cast<char*>(y.data) + offset * size, static_cast<const char*>(x.data) + i * size,
           static_cast<size_t>(size));
  }
  return KILN_KERR_OK;
}

namespace {

// The pool's n-grams of one length: `first` (the index among all the pool's n-grams of
// its first one), `count` of them at pool[offset ...].
struct NgramGroup {
  int64_t first, count, offset;
};

NgramGroup GroupOf(const kiln_kcall* call, int64_t n) {
  const kiln_ktensor &pool = call->inputs[1], &counts = call->inputs[2];
  const int64_t groups = counts.dims[0], pool_size = pool.dims[0];
  if (n < 1 || n > groups) return {0, 0, 0};
  const int64_t* starts = static_cast<const int64_t*>(counts.data);
  int64_t first = 0;
  for (int64_t g = 0; g + 1 < n; ++g) first += ((g + 1 < groups ? starts[g + 1] : pool_size) - starts[g]) / (g + 1);
  const int64_t end = n < groups ? starts[n] : pool_size;
  return {first, (end - starts[n - 1]) / n, starts[n - 1]};
}

}  // namespace

// TfIdfVectorizer: per row of X, the count of each pool n-gram (lengths min to max, items
// max_skip_count apart at most; unigrams once), scattered by ngram_indexes and weighted
// by mode.
KILN_KERNEL(tfidf_vectorizer) {
  KILN_PARAMS(kiln_tfidf_params, p, call);
  const kiln_ktensor &x = call->inputs[0], &y = call->outputs[0];
  const int64_t* pool = static_cast<const int64_t*>(call->inputs[1].data);
  const int64_t* indexes = static_cast<const int64_t*>(call->inputs[3].data);
  const kiln_ktensor& weights = call->inputs[4];
  const int64_t rows = x.rank == 2 ? x.dims[0] : 1, columns = x.dims[x.rank - 1], width = y.dims[y.rank - 1];
  float* out = static_cast<float*>(y.data);
  if (y.dtype != kF32) return KILN_KERR_DTYPE;
  for (int64_t i = 0; i < rows * width; ++i) out[i] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    auto item = [&](int64_t c) { return LoadAsInt64(x.data, x.dtype, r * columns + c); };
    for (int64_t skip = 0; skip <= p.max_skip_count; ++skip) {
      const int64_t min_n = skip > 0 && p.min_gram_length < 2 ? 2 : p.min_gram_length;
      for (int64_t start = 0; start < columns; ++start) {
        for (int64_t n = min_n; n <= p.max_gram_length && start + (n - 1) * (skip + 1) < columns; ++n) {
          const NgramGroup group = GroupOf(call, n);
          for (int64_t g = 0; g < group.count; ++g) {
            bool match = true;
            for (int64_t k = 0; k < n && match; ++k)
              match = pool[group.offset + g * n + k] == item(start + k * (skip + 1));
            if (!match) continue;
            const int64_t at = indexes[group.first + g];
            if (at < 0 || at >= width) return KILN_KERR_INDEX;
            out[r * width + at] += 1;
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < rows * width; ++i) {
    const int64_t column = i % width;
    const double w = column < weights.dims[0] ? LoadAsDouble(weights.data, weights.dtype, column) : 1.0;
    if (p.mode == KILN_TFIDF_IDF) out[i] = out[i] > 0 ? static_cast<float>(w) : 0.0f;
    if (p.mode == KILN_TFIDF_TFIDF) out[i] = static_cast<float>(out[i] * w);
  }
  return KILN_KERR_OK;
}

// Shape functions (kiln/kernels/shape.h's contract): negative dims and NULL data are
// unknowns at compile time; a dim computed from an unknown is -1.
namespace {

int64_t* OutDims(const kiln_kcall* call, int32_t i) { return const_cast<int64_t*>(call->outputs[i].dims); }

// Scalar input i's value, or -1 while its data is unknown.
int64_t KnownScalar(const kiln_kcall* call, int32_t i) {
  return call->inputs[i].data == nullptr ? -1 : ReadScalar(call->inputs[i]);
}

int64_t Spectrum(int64_t length, bool onesided) { return length < 0 ? -1 : onesided ? length / 2 + 1 : length; }

}  // namespace

// DFT: input 0's dims, `axis` the transform's length (onesided: half of it plus one),
// the last 2.
KILN_KERNEL(shape_dft) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  int64_t* out = OutDims(call, 0);
  for (int32_t i = 0; i < x.rank; ++i) out[i] = x.dims[i];
  if (x.dims[x.rank - 1] >= 0 && x.dims[x.rank - 1] != 1 && x.dims[x.rank - 1] != 2) return KILN_KERR_SHAPE;
  const int64_t length = (p.flags & KILN_SIGNAL_HAS_LENGTH) ? KnownScalar(call, 1) : x.dims[p.axis];
  if (call->inputs[1].data != nullptr && (p.flags & KILN_SIGNAL_HAS_LENGTH) && length <= 0) return KILN_KERR_SHAPE;
  out[p.axis] = Spectrum(length, p.flags & KILN_SIGNAL_ONESIDED);
  out[x.rank - 1] = 2;
  return KILN_KERR_OK;
}

// STFT: [batch, (signal - frame_length) / frame_step + 1, spectrum, 2].
KILN_KERNEL(shape_stft) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  int64_t* out = OutDims(call, 0);
  if (x.rank != 3) return KILN_KERR_SHAPE;
  const int64_t step = KnownScalar(call, 1);
  const int64_t length = (p.flags & KILN_SIGNAL_HAS_LENGTH)   ? KnownScalar(call, 3)
                         : (p.flags & KILN_SIGNAL_HAS_WINDOW) ? call->inputs[2].dims[0]
                                                              : -1;
  if (!(p.flags & (KILN_SIGNAL_HAS_LENGTH | KILN_SIGNAL_HAS_WINDOW))) return KILN_KERR_SHAPE;
  if ((call->inputs[1].data != nullptr && step <= 0) || length == 0) return KILN_KERR_SHAPE;
  out[0] = x.dims[0];
  out[1] = step > 0 && length > 0 && x.dims[1] >= 0 ? (x.dims[1] - length) / step + 1 : -1;
  if (out[1] == 0 || out[1] < -1) return KILN_KERR_SHAPE;
  out[2] = Spectrum(length, p.flags & KILN_SIGNAL_ONESIDED);
  out[3] = 2;
  return KILN_KERR_OK;
}

// MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins].
KILN_KERNEL(shape_mel_weight_matrix) {
  int64_t* out = OutDims(call, 0);
  const int64_t bins = KnownScalar(call, 0), length = KnownScalar(call, 1);
  if ((call->inputs[0].data != nullptr && bins <= 0) || (call->inputs[1].data != nullptr && length <= 0)) {
    return KILN_KERR_SHAPE;
  }
  out[0] = Spectrum(length, true);
  out[1] = bins;
  return KILN_KERR_OK;
}

// MaxUnpool: input 2's data (KILN_SIGNAL_FROM_INPUT), else N, C and per spatial dim
// (in - 1) * stride + kernel - pad_begin - pad_end (`ints`: kernel, strides, pad begins,
// pad ends, num_ints spatial dims each).
KILN_KERNEL(shape_max_unpool) {
  KILN_PARAMS(kiln_shape_params, p, call);
  const kiln_ktensor& x = call->inputs[0];
  int64_t* out = OutDims(call, 0);
  const int32_t rank = call->outputs[0].rank;
  if (p.flags & KILN_SIGNAL_FROM_INPUT) {
    const kiln_ktensor& shape = call->inputs[2];
    for (int32_t i = 0; i < rank; ++i) out[i] = shape.data == nullptr ? -1 : LoadAsInt64(shape.data, shape.dtype, i);
    return KILN_KERR_OK;
  }
  const int64_t r = p.num_ints;
  if (x.rank != r + 2 || rank != x.rank) return KILN_KERR_SHAPE;
  out[0] = x.dims[0];
  out[1] = x.dims[1];
  for (int64_t i = 0; i < r; ++i) {
    const int64_t in = x.dims[2 + i];
    out[2 + i] = in < 0 ? -1 : (in - 1) * p.ints[r + i] + p.ints[i] - p.ints[2 * r + i] - p.ints[3 * r + i];
  }
  return KILN_KERR_OK;
}
