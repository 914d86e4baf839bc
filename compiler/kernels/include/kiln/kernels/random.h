/* Kiln's random number generator and the parameters of its random kernel (RandomUniform,
 * RandomNormal, their *Like forms, Bernoulli, Multinomial).
 *
 * ONNX leaves the generator to the implementation; this header is Kiln's definition, the
 * one both the kernel library and the reference (compiler/reference/ref_random.cc) use, so
 * that a seeded node gives the same numbers compiled, interpreted and in the reference.
 *
 * Counter-based: draw i of a node is the (i + 1)-th output of SplitMix64 started at the
 * node's key, kiln_random_bits(key, i) = mix(key + (i + 1) * 0x9E3779B97F4A7C15), with
 * SplitMix64's finaliser as mix. A draw depends only on the key and its index, so outputs
 * are the same whatever the thread count or the order elements are computed in.
 *   key: with a `seed` attribute, mix(the seed's IEEE-754 double bits); without one, a
 *        fresh key per kernel call (kiln_random_unseeded_key: a process-wide call counter
 *        mixed with the addresses of that counter and of the stack), so unseeded outputs
 *        differ from call to call and run to run, and from process to process under ASLR.
 *        Not a source of secure randomness.
 *   uniform u(i) = (bits(i) >> 11) * 2^-53, in [0, 1).
 *   normal n(i) = sqrt(-2 ln(1 - u(2i))) * cos(2 pi u(2i + 1))  (Box-Muller, one of the pair).
 *   RandomUniform: low + (high - low) u(i);  RandomNormal: mean + scale n(i);
 *   Bernoulli: 1 if u(i) < p[i] else 0;
 *   Multinomial: sample s of batch b is the first class c whose cumulative
 *     exp(x[b, c] - max_c x[b, c]) exceeds u(b * sample_size + s) times the row's total. */
#ifndef KILN_KERNELS_RANDOM_H_
#define KILN_KERNELS_RANDOM_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kiln/kernels/params.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kiln_random_kind {
  KILN_RANDOM_UNIFORM = 0,     /* RandomUniform, RandomUniformLike: low = a, high = b */
  KILN_RANDOM_NORMAL = 1,      /* RandomNormal, RandomNormalLike: mean = a, scale = b */
  KILN_RANDOM_BERNOULLI = 2,   /* input 0: the probabilities */
  KILN_RANDOM_MULTINOMIAL = 3, /* input 0: [batch, classes] unnormalised log-probabilities */
};

typedef struct kiln_random_params {
  int64_t kind;     /* kiln_random_kind */
  int64_t has_seed; /* 1: `seed` keys the draws; 0: a fresh key per call */
  double seed;
  double a;
  double b;
} kiln_random_params;
KILN_PARAMS_LAYOUT(kiln_random_params, 5);

static inline uint64_t kiln_random_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline uint64_t kiln_random_seed_key(double seed) {
  uint64_t bits;
  memcpy(&bits, &seed, sizeof(bits));
  return kiln_random_mix(bits);
}

static inline uint64_t kiln_random_bits(uint64_t key, uint64_t i) {
  return kiln_random_mix(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

static inline double kiln_random_uniform(uint64_t key, uint64_t i) {
  return (double)(kiln_random_bits(key, i) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double kiln_random_normal(uint64_t key, uint64_t i) {
  const double u1 = 1.0 - kiln_random_uniform(key, 2 * i), u2 = kiln_random_uniform(key, 2 * i + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925286766559 * u2);
}

/* A key for an unseeded call: each call (process-wide) gets the next count, mixed with
 * where the counter and the caller's stack lie (ASLR moves both per process). No
 * target-specific instruction: the kernel library's bitcode is built once and compiled for
 * every target (x86-64 and AArch64). */
static inline uint64_t kiln_random_unseeded_key(void) {
  static uint64_t calls;
  volatile char here = 0;
  const uint64_t n = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  return kiln_random_mix(kiln_random_mix(n ^ (uint64_t)(uintptr_t)&calls) ^ (uint64_t)(uintptr_t)&here);
}

static inline uint64_t kiln_random_key(const kiln_random_params* p) {
  return p->has_seed ? kiln_random_seed_key(p->seed) : kiln_random_unseeded_key();
}

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_RANDOM_H_ */
