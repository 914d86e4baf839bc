/* The core's measured FMA peak (single thread, f32): 12 independent accumulator chains of
 * vector FMAs, enough to cover the FMA latency on two pipes, timed over ~0.6 s. Uses the
 * widest vectors the CPU has (AVX-512 when present, else AVX2+FMA); detected at run time.
 * Prints one JSON line: gflops, isa, vector_lanes, fma_per_ns. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define CHAINS(T, SET, FMA)                                                               \
  T a[12];                                                                                \
  _Pragma("GCC unroll 12") for (int k = 0; k < 12; ++k) a[k] = SET((float)k);             \
  const T x = SET(1.0000001f), y = SET(0.9999999f);                                       \
  double start = now_s();                                                                 \
  for (long i = 0; i < iters; ++i) {                                                      \
    /* fully unrolled: 12 accumulators in registers, independent chains */                \
    _Pragma("GCC unroll 12") for (int k = 0; k < 12; ++k) a[k] = FMA(a[k], x, y);         \
  }                                                                                       \
  double seconds = now_s() - start;                                                       \
  volatile float sink = 0;                                                                \
  _Pragma("GCC unroll 12") for (int k = 0; k < 12; ++k) sink = sink + ((float*)&a[k])[0]; \
  (void)sink;                                                                             \
  return seconds;

__attribute__((target("avx2,fma"))) static double run_avx2(long iters) {
  CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps)
}
__attribute__((target("avx512f"))) static double run_avx512(long iters) {
  CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps)
}

int main(void) {
  const long iters = 300000000;
  const int avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) {
    printf("{\"error\": \"no FMA on this CPU\"}\n");
    return 1;
  }
  const int lanes = avx512 ? 16 : 8;
  const double seconds = avx512 ? run_avx512(iters) : run_avx2(iters);
  const double fma_per_ns = iters * 12.0 / seconds / 1e9;
  printf("{\"gflops\": %.1f, \"isa\": \"%s\", \"vector_lanes\": %d, \"fma_per_ns\": %.2f}\n", fma_per_ns * lanes * 2,
         avx512 ? "avx512f" : "avx2+fma", lanes, fma_per_ns);
  return 0;
}
