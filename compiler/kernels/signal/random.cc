// The random ops' kernel: RandomUniform(Like), RandomNormal(Like), Bernoulli and
// Multinomial, drawing with Kiln's counter-based generator (kiln/kernels/random.h), so a
// seeded node's output does not depend on the thread count.
#include "kiln/kernels/random.h"
#include "kernel_common.h"

using namespace kiln_kernels;

namespace {

bool Storable(int32_t dtype) {
  switch (dtype) {
    case kF32:
    case kF64:
    case kI8:
    case kU8:
    case kI16:
    case kU16:
    case kI32:
    case kU32:
    case kI64:
    case kU64:
    case kBool: return true;
    default: return false;
  }
}

int32_t Store(const kiln_ktensor& t, int64_t i, double v) {
  switch (t.dtype) {
    case kF32: static_cast<float*>(t.data)[i] = static_cast<float>(v); break;
    case kF64: static_cast<double*>(t.data)[i] = v; break;
    case kI8: static_cast<int8_t*>(t.data)[i] = static_cast<int8_t>(v); break;
    case kU8: static_cast<uint8_t*>(t.data)[i] = static_cast<uint8_t>(v); break;
    case kI16: static_cast<int16_t*>(t.data)[i] = static_cast<int16_t>(v); break;
    case kU16: static_cast<uint16_t*>(t.data)[i] = static_cast<uint16_t>(v); break;
    case kI32: static_cast<int32_t*>(t.data)[i] = static_cast<int32_t>(v); break;
    case kU32: static_cast<uint32_t*>(t.data)[i] = static_cast<uint32_t>(v); break;
    case kI64: static_cast<int64_t*>(t.data)[i] = static_cast<int64_t>(v); break;
    case kU64: static_cast<uint64_t*>(t.data)[i] = static_cast<uint64_t>(v); break;
    case kBool: static_cast<bool*>(t.data)[i] = v != 0; break;
    default: return KILN_KERR_DTYPE;
  }
  return KILN_KERR_OK;
}

// Multinomial: output [batch, samples] of class indices drawn from input 0's rows.
int32_t Multinomial(const kiln_kcall* call, uint64_t key) {
  const kiln_ktensor &x = call->inputs[0], &y = call->outputs[0];
  if (x.rank != 2 || y.rank != 2 || y.dims[0] != x.dims[0]) return KILN_KERR_SHAPE;
  const int64_t classes = x.dims[1], samples = y.dims[1];
  for (int64_t b = 0; b < x.dims[0]; ++b) {
    double peak = -HUGE_VAL, total = 0;
    for (int64_t c = 0; c < classes; ++c) peak = fmax(peak, LoadAsDouble(x.data, x.dtype, b * classes + c));
    for (int64_t c = 0; c < classes; ++c) total += exp(LoadAsDouble(x.data, x.dtype, b * classes + c) - peak);
    for (int64_t s = 0; s < samples; ++s) {
      const double target = kiln_random_uniform(key, static_cast<uint64_t>(b * samples + s)) * total;
      double cumulative = 0;
      int64_t chosen = classes - 1;
      for (int64_t c = 0; c < classes; ++c) {
        cumulative += exp(LoadAsDouble(x.data, x.dtype, b * classes + c) - peak);
        if (cumulative > target) {
          chosen = c;
          break;
        }
      }
      if (int32_t rc = Store(y, b * samples + s, static_cast<double>(chosen)); rc != KILN_KERR_OK) return rc;
    }
  }
  return KILN_KERR_OK;
}

}  // namespace

// Element i is draw i whatever the split across threads: the generator is counter-based.
KILN_KERNEL(random) {
  KILN_PARAMS(kiln_random_params, p, call);
  const uint64_t key = kiln_random_key(&p);
  if (p.kind == KILN_RANDOM_MULTINOMIAL) return Multinomial(call, key);
  if (p.kind != KILN_RANDOM_UNIFORM && p.kind != KILN_RANDOM_NORMAL && p.kind != KILN_RANDOM_BERNOULLI) {
    return KILN_KERR_UNSUPPORTED;
  }
  const kiln_ktensor y = call->outputs[0];
  const kiln_ktensor probabilities = p.kind == KILN_RANDOM_BERNOULLI ? call->inputs[0] : kiln_ktensor{};
  if (!Storable(y.dtype)) return KILN_KERR_DTYPE;
  int64_t n = 1;
  for (int32_t i = 0; i < y.rank; ++i) n *= y.dims[i];
  const kiln_random_params params = p;
  auto body = [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t at = static_cast<uint64_t>(i);
      double v;
      if (params.kind == KILN_RANDOM_UNIFORM) {
        v = params.a + (params.b - params.a) * kiln_random_uniform(key, at);
      } else if (params.kind == KILN_RANDOM_NORMAL) {
        v = params.a + params.b * kiln_random_normal(key, at);
      } else {
        v = kiln_random_uniform(key, at) < LoadAsDouble(probabilities.data, probabilities.dtype, i) ? 1.0 : 0.0;
      }
      Store(y, i, v);
    }
  };
  ParallelFor(call, n, 1024, body);
  return KILN_KERR_OK;
}
