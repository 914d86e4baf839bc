// Integer Winograd F(4x4, 3x3) for QLinearConv in artifacts (lowering: ops/quant_ops.cc,
// LowerIntegerConvWinograd): 2-D, stride 1, dilation 1, one group, input channels a
// multiple of 16, output channels a multiple of 16. The transforms of conv/winograd.cc's
// f32 kernel (winograd_core.h), on integers:
//   V[xi][t][ic] = (B^T d B)[xi], d the 6x6 tile of x - zx (0 in the padding), in i16: B^T's
//                  entries are whole and its rows' absolute sums at most 10, so |V| <= 25500
//   M[xi][t][oc] = sum_ic V[xi][t][ic] * U[xi][ic][oc], 36 products of i16 pairs into i32
//                  (vpdpwssd where the target has AVX-512 VNNI: 32 multiply-adds an
//                  instruction against vpdpbusd's 64, for 36 products per 16 outputs
//                  against 144)
//   Y tile       = requantize(A^T (M * F) A + bias), F [36][OC] the factors below
// U is computed at compile time from w - zw: with G's rows scaled to whole numbers (by
// c = 4, 6, 6, 24, 24, 1) U[i][j] = Gi' w Gj'^T is exact and at most 49 * 128 in size, and
// F = 1 / (c_i * c_j). Where the worst case of an i32 sum (the largest |V[i][j]| the
// input's range allows, times sum_ic |U|) could pass 2^31, lowering scales that (point,
// output channel)'s U down by s < 1 (rounded, each channel's error carried to the next)
// and F up by 1 / s. The sums are otherwise exact; the f32 output transform may move a
// requantized value by one step against the direct kernel's where the f32 value lands
// within its rounding of a tie. V and M are stored tile-major: [tile][point][channel].
#include "kernel_common.h"
#include "kiln/kernels/quant.h"
#include "winograd_core.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln_kernels {
namespace {

typedef int16_t v16s __attribute__((vector_size(32)));
typedef uint8_t v16b __attribute__((vector_size(16)));
typedef int8_t v16c __attribute__((vector_size(16)));

constexpr int64_t kLanes = 16;                       // channels per vector in the transforms
constexpr int kRows = 6;                             // tiles per register tile of the products
constexpr int kPanels = 4;                           // 16-channel panels of U per register tile
constexpr int64_t kBlockBytes = int64_t{512} << 10;  // V and M of a job's block of tiles
constexpr int64_t kSplitUBytes = int64_t{2} << 20;   // U above which the products split over U

struct QWinograd {
  const uint8_t* xp;         // X - as bytes - padded and in 16-channel blocks: [N][C/16][Hp][Wp][16]
  const int16_t* u;          // [36][OC/64][C/2][4][16][2] (the last group may have fewer panels)
  const float* factors;      // [36][OC]
  const float* bias;         // [OC]
  const float* multipliers;  // [OC]: x_scale * w_scale / y_scale
  void* y;
  int64_t batch, C, OC, H, W, OH, OW, PT, PL, Hp, Wp, tiles_w, per_image;
  int16_t zx;
  bool x_signed;
  float y_zero, lo, hi;  // Y's zero point and range, relu folded in
};

// The 16 x 16 bytes r[l][p] as r[p][l]: four rounds of interleaving vectors i and i + 8.
inline void Transpose16(v16b* r) {
  for (int round = 0; round < 4; ++round) {
    v16b t[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      t[2 * i + 1] =
          __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
  }
}

// out[i * os] = (B^T in)[i] for the six points of a column or row of a tile, in whole
// numbers (the f32 kernel's InputTransform6).
template <typename V>
KILN_ALWAYS_INLINE void InputTransform(const V* in, int64_t is, V* out, int64_t os) {
  const V d0 = in[0], d1 = in[is], d2 = in[2 * is], d3 = in[3 * is], d4 = in[4 * is], d5 = in[5 * is];
  out[0] = (d0 << 2) - (d2 << 2) - d2 + d4;
  out[os] = d3 + d4 - ((d1 + d2) << 2);
  out[2 * os] = d4 - d3 + ((d1 - d2) << 2);
  out[3 * os] = d4 - d2 + ((d3 - d1) << 1);
  out[4 * os] = d4 - d2 - ((d3 - d1) << 1);
  out[5 * os] = (d1 << 2) - (d3 << 2) - d3 + d5;
}

// X into q.xp: one job per (image, block of 16 channels); the padding (and the rows and
// columns past the last tile's reach) hold X's zero point.
void PadAndBlock(const kiln_kcall* call, const QWinograd& q) {
  const uint8_t* px = static_cast<const uint8_t*>(call->inputs[0].data);
  uint8_t* xp = const_cast<uint8_t*>(q.xp);
  const int64_t blocks = q.C / kLanes, jobs = q.batch * blocks;
  ParallelFor(call, jobs, 1, [=](int64_t begin, int64_t end) {
    const uint8_t fill = static_cast<uint8_t>(q.zx);
    for (int64_t job = begin; job < end; ++job) {
      uint8_t* dst = xp + job * q.Hp * q.Wp * kLanes;
      const uint8_t* src = px + job * kLanes * q.H * q.W;  // (image, block) is channel job * 16 of the batch
      for (int64_t r = 0; r < q.Hp; ++r) {
        uint8_t* row = dst + r * q.Wp * kLanes;
        const int64_t ih = r - q.PT;
        if (ih < 0 || ih >= q.H) {
          memset(row, fill, q.Wp * kLanes);
          continue;
        }
        memset(row, fill, q.PL * kLanes);
        memset(row + (q.PL + q.W) * kLanes, fill, (q.Wp - q.PL - q.W) * kLanes);
        uint8_t* out = row + q.PL * kLanes;
        const uint8_t* in = src + ih * q.W;
        int64_t iw = 0;
        // The last (W % 16) pixels as well, reading past the row into the plane's next row or
        // the next plane, except at the end of X (the last row of the last job): 14 x 14 maps
        // were byte by byte.
        const int64_t end_w = job + 1 == jobs && ih + 1 == q.H ? q.W / 16 * 16 : q.W;
        for (; iw < end_w; iw += 16) {
          v16b v[16];
          for (int l = 0; l < 16; ++l) memcpy(&v[l], in + l * q.H * q.W + iw, 16);
          Transpose16(v);
          const int64_t pixels = q.W - iw < 16 ? q.W - iw : 16;
          for (int p = 0; p < pixels; ++p) memcpy(out + (iw + p) * kLanes, &v[p], 16);
        }
        for (; iw < q.W; ++iw) {
          for (int l = 0; l < 16; ++l) out[iw * kLanes + l] = in[l * q.H * q.W + iw];
        }
      }
    }
  });
}

// V of one tile for the NB 16-channel blocks (1 or 2) from block cb: B^T d a column at a
// time, then the rows, on vectors of 16 * NB i16 (two blocks fill a 512-bit vector).
typedef int16_t v32s __attribute__((vector_size(64)));
typedef uint8_t v32b __attribute__((vector_size(32)));
typedef int8_t v32c __attribute__((vector_size(32)));
template <int NB>
struct BlockVectors {  // NB 16-channel blocks as i16, u8 and s8 vectors
  typedef v16s VS;
  typedef v16b VB;
  typedef v16c VC;
};
template <>
struct BlockVectors<2> {
  typedef v32s VS;
  typedef v32b VB;
  typedef v32c VC;
};

template <bool kSigned, int NB>
KILN_ALWAYS_INLINE void TileV(const QWinograd& q, const uint8_t* base, int64_t block_bytes, int16_t* out) {
  typedef typename BlockVectors<NB>::VS VS;
  typedef typename BlockVectors<NB>::VB VB;
  typedef typename BlockVectors<NB>::VC VC;
  VS tmp[36];
  for (int c = 0; c < 6; ++c) {
    VS column[6];
    for (int r = 0; r < 6; ++r) {
      VB bytes;
      for (int b = 0; b < NB; ++b)
        memcpy(reinterpret_cast<uint8_t*>(&bytes) + 16 * b, base + b * block_bytes + (r * q.Wp + c) * kLanes, 16);
      if constexpr (kSigned) {
        column[r] = __builtin_convertvector((VC)bytes, VS) - q.zx;
      } else {
        column[r] = __builtin_convertvector(bytes, VS) - q.zx;
      }
    }
    InputTransform(column, 1, tmp + c, 6);  // B^T d
  }
  for (int r = 0; r < 6; ++r) {
    VS row[6];
    InputTransform(tmp + r * 6, 1, row, 1);  // (B^T d) B
    for (int c = 0; c < 6; ++c) memcpy(out + (r * 6 + c) * q.C, &row[c], sizeof(VS));
  }
}

// Stage 1: V of tiles [b0, b1) of the chunk, every input channel. tile(t) gives the tile's
// image, tile row and tile column. Two blocks at a time (one 16-channel block's transforms
// on 256-bit vectors took 7 % of a 64-channel 56 x 56 conv).
template <bool kSigned, typename TileAt>
KILN_ALWAYS_INLINE void InputStage(const QWinograd& q, int64_t b0, int64_t b1, const TileAt& tile, int16_t* v) {
  const int64_t blocks = q.C / kLanes, block_bytes = q.Hp * q.Wp * kLanes;
  for (int64_t t = b0; t < b1; ++t) {
    int64_t n, th, tw;
    tile(t, &n, &th, &tw);
    int64_t cb = 0;
    for (; cb + 2 <= blocks; cb += 2) {
      const uint8_t* base = q.xp + (n * blocks + cb) * block_bytes + (th * 4 * q.Wp + tw * 4) * kLanes;
      TileV<kSigned, 2>(q, base, block_bytes, v + t * 36 * q.C + cb * kLanes);
    }
    if (cb < blocks) {
      const uint8_t* base = q.xp + (n * blocks + cb) * block_bytes + (th * 4 * q.Wp + tw * 4) * kLanes;
      TileV<kSigned, 1>(q, base, block_bytes, v + t * 36 * q.C + cb * kLanes);
    }
  }
}

// Output channels [o0, o0 + 16) of one tile, requantized: bytes[l] is channel o0 + l's
// 4 x 4 values, row by row. mt: the tile's M.
KILN_ALWAYS_INLINE void TileBytes(const QWinograd& q, const int32_t* mt, int64_t o0, v16b* bytes) {
  const v16f lo = KILN_SPLAT16(q.lo - q.y_zero), hi = KILN_SPLAT16(q.hi - q.y_zero);
  const v16f round = KILN_SPLAT16(12582912.f), zero = KILN_SPLAT16(q.y_zero);
  // A^T (M * F), a column of six points at a time (all 36 at once spilled to the stack).
  v16f tmp[24], out[16];
  for (int c = 0; c < 6; ++c) {
    v16f column[6];
    for (int r = 0; r < 6; ++r) {
      v16i sums;
      v16f factor;
      memcpy(&sums, mt + (r * 6 + c) * q.OC + o0, sizeof(sums));
      memcpy(&factor, q.factors + (r * 6 + c) * q.OC + o0, sizeof(factor));
      column[r] = __builtin_convertvector(sums, v16f) * factor;
    }
    winograd::OutputTransform6(column, 1, tmp + c, 6);  // 4 x 6
  }
  for (int r = 0; r < 4; ++r) winograd::OutputTransform6(tmp + r * 6, 1, out + r * 4, 1);  // (A^T M) A: 4 x 4
  v16f bias, multiplier;
  memcpy(&bias, q.bias + o0, sizeof(bias));
  memcpy(&multiplier, q.multipliers + o0, sizeof(multiplier));
  for (int i = 0; i < 16; ++i) {
    // rint((S + bias) * m) + zero point, clamped: the value clamped to the range less the
    // zero point first (whole bounds, so the rounding is the same), then rounded to
    // nearest even by adding and taking away 1.5 * 2^23. (NaN goes to the low bound.)
    v16f f = (out[i] + bias) * multiplier;
    f = f > lo ? f : lo;
    f = f < hi ? f : hi;
    f = (f + round) - round + zero;
    bytes[i] = (v16b) __builtin_convertvector(__builtin_convertvector(f, v16i), v16c);
  }
  Transpose16(bytes);
}

// Stage 3: Y of tiles [b0, b1), every output channel. Up to four tiles side by side in a
// row go together, so that a channel's row of them is one 16-byte store rather than four
// of 4 bytes (the stores had taken 5 % of a 64-channel 56 x 56 conv).
template <typename TileAt>
KILN_ALWAYS_INLINE void OutputStage(const QWinograd& q, int64_t b0, int64_t b1, const TileAt& tile, const int32_t* m) {
  typedef uint32_t v4w __attribute__((vector_size(16)));
  uint8_t* py = static_cast<uint8_t*>(q.y);
  for (int64_t t = b0; t < b1;) {
    int64_t n, th, tw;
    tile(t, &n, &th, &tw);
    int g = 1;  // tiles in the group
    for (; g < 4 && t + g < b1; ++g) {
      int64_t n2, th2, tw2;
      tile(t + g, &n2, &th2, &tw2);
      if (n2 != n || th2 != th || tw2 != tw + g) break;
    }
    const int64_t rows = q.OH - th * 4 < 4 ? q.OH - th * 4 : 4;
    const int64_t width = q.OW - tw * 4 < 4 * g ? q.OW - tw * 4 : 4 * g;  // Y's columns the group covers
    for (int64_t o0 = 0; o0 < q.OC; o0 += kLanes) {
      v16b bytes[4][16];
      for (int i = 0; i < g; ++i) TileBytes(q, m + (t + i) * 36 * q.OC, o0, bytes[i]);
      for (int l = 0; l < 16; ++l) {
        uint8_t* y = py + ((n * q.OC + o0 + l) * q.OH + th * 4) * q.OW + tw * 4;
        if (width == 16) {  // rows of the four tiles' 4-byte words: a 4 x 4 transpose of words
          const v4w w0 = (v4w)bytes[0][l], w1 = (v4w)bytes[1][l], w2 = (v4w)bytes[2][l], w3 = (v4w)bytes[3][l];
          const v4w a = __builtin_shufflevector(w0, w1, 0, 4, 1, 5), b = __builtin_shufflevector(w0, w1, 2, 6, 3, 7);
          const v4w c = __builtin_shufflevector(w2, w3, 0, 4, 1, 5), d = __builtin_shufflevector(w2, w3, 2, 6, 3, 7);
          const v4w row[4] = {__builtin_shufflevector(a, c, 0, 1, 4, 5), __builtin_shufflevector(a, c, 2, 3, 6, 7),
                              __builtin_shufflevector(b, d, 0, 1, 4, 5), __builtin_shufflevector(b, d, 2, 3, 6, 7)};
          for (int64_t r = 0; r < rows; ++r) memcpy(y + r * q.OW, &row[r], 16);
          continue;
        }
        for (int i = 0; i < g; ++i) {
          const uint8_t* src = reinterpret_cast<const uint8_t*>(&bytes[i][l]);
          const int64_t cols = width - 4 * i < 4 ? width - 4 * i : 4;
          if (cols == 4) {
            for (int64_t r = 0; r < rows; ++r) memcpy(y + r * q.OW + 4 * i, src + r * 4, 4);
            continue;
          }
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) y[r * q.OW + 4 * i + c] = src[r * 4 + c];
          }
        }
      }
    }
    t += g;
  }
}

// One register tile of stage 2: NR rows (tiles of V[xi], C i16 each) against NV panels of
// U[xi] (16 output channels each; a step's vectors side by side, `ustep` i16 from one
// step's to the next), into M from m (row stride ldm).
template <int NR, int NV>
KILN_ALWAYS_INLINE void ProductTileGeneric(const int16_t* const* rows, const int16_t* u, int64_t ustep, int64_t pairs,
                                           int32_t* m, int64_t ldm) {
  v16i acc[NR][NV] = {};
  for (int64_t k = 0; k < pairs; ++k) {
    v16i lo[NV], hi[NV];
    for (int j = 0; j < NV; ++j) {
      v16i b;
      memcpy(&b, u + k * ustep + j * 32, sizeof(b));
      lo[j] = (b << 16) >> 16;
      hi[j] = b >> 16;
    }
    for (int r = 0; r < NR; ++r) {
      int16_t a[2];
      memcpy(a, rows[r] + 2 * k, sizeof(a));
      for (int j = 0; j < NV; ++j) acc[r][j] += lo[j] * a[0] + hi[j] * a[1];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int j = 0; j < NV; ++j) memcpy(m + r * ldm + j * 16, &acc[r][j], sizeof(v16i));
  }
}

#if defined(__x86_64__)
template <int NR, int NV>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void ProductTileVnni(const int16_t* const* rows,
                                                                                   const int16_t* u, int64_t ustep,
                                                                                   int64_t pairs, int32_t* m,
                                                                                   int64_t ldm) {
  __m512i acc[NR][NV];
  for (int r = 0; r < NR; ++r) {
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  for (int64_t k = 0; k < pairs; ++k) {
    __m512i b[NV];
    for (int j = 0; j < NV; ++j) b[j] = _mm512_loadu_si512(u + k * ustep + j * 32);
    for (int r = 0; r < NR; ++r) {
      int32_t word;
      memcpy(&word, rows[r] + 2 * k, sizeof(word));
      const __m512i a = _mm512_set1_epi32(word);
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpwssd_epi32(acc[r][j], a, b[j]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int j = 0; j < NV; ++j) _mm512_storeu_si512(m + r * ldm + j * 16, acc[r][j]);
  }
}
#endif

// The register tile for `count` rows (1 to kRows): a tile of exactly that many, so that a
// last short group of tiles (ResNet-50's 14 x 14 maps have 16 tiles: 6 + 6 + 4) computes
// no rows it does not store.
template <bool kVnni, int NV, int NR = kRows>
KILN_ALWAYS_INLINE void ProductTile(int count, const int16_t* const* rows, const int16_t* u, int64_t ustep,
                                    int64_t pairs, int32_t* m, int64_t ldm) {
  if constexpr (NR > 1) {
    if (count < NR) {
      ProductTile<kVnni, NV, NR - 1>(count, rows, u, ustep, pairs, m, ldm);
      return;
    }
  }
#if defined(__x86_64__)
  if constexpr (kVnni) {
    ProductTileVnni<NR, NV>(rows, u, ustep, pairs, m, ldm);
    return;
  }
#endif
  ProductTileGeneric<NR, NV>(rows, u, ustep, pairs, m, ldm);
}

// Stage 2 for point xi: M[xi] rows [t0, t1) and output channels [n0, n1) (n0 a multiple
// of 64): a group of panels at a time against every row tile, so the group's U (at most
// 64 KiB) is read from memory once.
template <bool kVnni>
KILN_ALWAYS_INLINE void ProductStage(const QWinograd& q, int64_t xi, int64_t t0, int64_t t1, int64_t n0, int64_t n1,
                                     const int16_t* v, int32_t* m) {
  const int16_t* vx = v + xi * q.C;
  int32_t* mx = m + xi * q.OC;
  const int64_t pairs = q.C / 2;
  for (int64_t n = n0; n < n1; n += 16 * kPanels) {
    const int64_t panels = (q.OC - n) / 16 < kPanels ? (q.OC - n) / 16 : kPanels;
    const int16_t* u = q.u + xi * q.OC * q.C + n * q.C;
    for (int64_t t = t0; t < t1; t += kRows) {
      const int count = t1 - t < kRows ? static_cast<int>(t1 - t) : kRows;
      const int16_t* rows[kRows];
      for (int r = 0; r < count; ++r) rows[r] = vx + (t + r) * 36 * q.C;
      int32_t* out = mx + t * 36 * q.OC + n;
      if (panels == kPanels) {  // a full group; a last one of fewer panels, one panel at a time
        ProductTile<kVnni, kPanels>(count, rows, u, 32 * kPanels, pairs, out, 36 * q.OC);
        continue;
      }
      for (int64_t p = 0; p < panels; ++p) {
        ProductTile<kVnni, 1>(count, rows, u + p * 32, 32 * panels, pairs, out + p * 16, 36 * q.OC);
      }
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) void ProductStageVnni(const QWinograd& q, int64_t xi,
                                                                                       int64_t t0, int64_t t1,
                                                                                       int64_t n0, int64_t n1,
                                                                                       const int16_t* v, int32_t* m) {
  ProductStage<true>(q, xi, t0, t1, n0, n1, v, m);
}
#endif
__attribute__((noinline)) void ProductStageGeneric(const QWinograd& q, int64_t xi, int64_t t0, int64_t t1, int64_t n0,
                                                   int64_t n1, const int16_t* v, int32_t* m) {
  ProductStage<false>(q, xi, t0, t1, n0, n1, v, m);
}

void Products(const QWinograd& q, int64_t xi, int64_t t0, int64_t t1, int64_t n0, int64_t n1, const int16_t* v,
              int32_t* m) {
#if defined(__x86_64__)
  if (Int8DotProduct() == kInt8DotAvx512Vnni) {
    ProductStageVnni(q, xi, t0, t1, n0, n1, v, m);
    return;
  }
#endif
  ProductStageGeneric(q, xi, t0, t1, n0, n1, v, m);
}

// inputs: X (u8 or s8 [N, C, H, W]), U, F, bias (f32 [OC]), multipliers (f32 [OC]).
// outputs: Y (u8 or s8 [N, OC, OH, OW]), scratch: X padded and blocked (its bytes rounded
// up to 64), then V (i16 [chunk][36][C]) and M (i32 [chunk][36][OC]) of a chunk of tiles.
// Parameters: kiln_quant_params' window (pads), x_zero_point, x_signed, y_zero_point,
// clamp_lo and clamp_hi. Like the f32 kernel (winograd_core.h), a chunk is the same tiles
// of every image, jobs are groups of tiles that a thread takes through the three stages a
// block at a time, and a large U splits stage 2 over (point, output channels) instead.
int32_t RunQWinograd(const kiln_kcall* call) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  KILN_PARAMS(kiln_quant_params, params, call);
  QWinograd q;
  q.batch = X.dims[0], q.C = X.dims[1], q.H = X.dims[2], q.W = X.dims[3];
  q.OC = Y.dims[1], q.OH = Y.dims[2], q.OW = Y.dims[3];
  if (q.C % kLanes != 0 || q.OC % kLanes != 0) return KILN_KERR_UNSUPPORTED;
  q.PT = params.window.pads_begin[0], q.PL = params.window.pads_begin[1];
  const int64_t tiles_h = (q.OH + 3) / 4;
  q.tiles_w = (q.OW + 3) / 4;
  q.per_image = tiles_h * q.tiles_w;
  q.Hp = tiles_h * 4 + 2, q.Wp = q.tiles_w * 4 + 2;
  q.zx = static_cast<int16_t>(params.x_zero_point);
  q.x_signed = params.x_signed != 0;
  q.y_zero = static_cast<float>(params.y_zero_point);
  q.lo = static_cast<float>(params.clamp_lo);
  q.hi = static_cast<float>(params.clamp_hi);
  q.u = InputData<int16_t>(call, 1);
  q.factors = InputData<float>(call, 2);
  q.bias = InputData<float>(call, 3);
  q.multipliers = InputData<float>(call, 4);
  q.y = Y.data;
  uint8_t* scratch = OutputData<uint8_t>(call, 1);
  const int64_t xp_bytes = (q.batch * q.C * q.Hp * q.Wp + 63) / 64 * 64;
  const int64_t tile_bytes = 36 * (q.C * 2 + q.OC * 4);
  const int64_t chunk = (Numel(call->outputs[1]) - xp_bytes) / tile_bytes;
  if (chunk < 1) return KILN_KERR_UNSUPPORTED;
  q.xp = scratch;
  int16_t* v = reinterpret_cast<int16_t*>(scratch + xp_bytes);
  int32_t* m = reinterpret_cast<int32_t*>(v + 36 * chunk * q.C);
  PadAndBlock(call, q);

  // A job's tiles go through the stages a block at a time (what stage 1 writes, stage 2
  // reads from this core's L2), except where U is larger than a block: then in one block,
  // so that U is read once.
  int64_t block = kBlockBytes / tile_bytes / kRows * kRows;
  if (block < kRows) block = kRows;
  if (36 * q.C * q.OC * int64_t{2} > kBlockBytes) block = chunk;
  const bool split_u =
      call->exec != nullptr && call->exec->parallel_for != nullptr && 36 * q.C * q.OC * int64_t{2} > kSplitUBytes;
  const int64_t chunk_width = chunk / q.batch > 0 ? chunk / q.batch : 1;
  for (int64_t s = 0; s < q.per_image; s += chunk_width) {
    const int64_t width = q.per_image - s < chunk_width ? q.per_image - s : chunk_width, tc = q.batch * width;
    const int64_t tiles_w = q.tiles_w;
    auto tile_at = [=](int64_t t, int64_t* n, int64_t* th, int64_t* tw) {
      const int64_t local = s + t % width;
      *n = t / width;
      *th = local / tiles_w;
      *tw = local % tiles_w;
    };
    auto input = [=](int64_t b0, int64_t b1) {
      if (q.x_signed) {
        InputStage<true>(q, b0, b1, tile_at, v);
      } else {
        InputStage<false>(q, b0, b1, tile_at, v);
      }
    };
    auto output = [=](int64_t b0, int64_t b1) { OutputStage(q, b0, b1, tile_at, m); };
    const int64_t groups = (tc + kRows - 1) / kRows;
    auto group_range = [=](int64_t begin, int64_t end, int64_t* b0, int64_t* b1) {
      *b0 = begin * kRows;
      *b1 = end * kRows < tc ? end * kRows : tc;
    };
    if (!split_u) {
      ParallelFor(call, groups, 1, [=](int64_t begin, int64_t end) {
        int64_t first, last;
        group_range(begin, end, &first, &last);
        for (int64_t b0 = first; b0 < last; b0 += block) {
          const int64_t b1 = last - b0 < block ? last : b0 + block;
          input(b0, b1);
          for (int64_t xi = 0; xi < 36; ++xi) Products(q, xi, b0, b1, 0, q.OC, v, m);
          output(b0, b1);
        }
      });
      continue;
    }
    ParallelFor(call, groups, 1, [=](int64_t begin, int64_t end) {
      int64_t b0, b1;
      group_range(begin, end, &b0, &b1);
      input(b0, b1);
    });
    const int64_t cols = 16 * kPanels, nchunks = (q.OC + cols - 1) / cols;
    ParallelFor(call, 36 * nchunks, 1, [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t xi = job / nchunks, n0 = job % nchunks * cols;
        Products(q, xi, 0, tc, n0, n0 + cols < q.OC ? n0 + cols : q.OC, v, m);
      }
    });
    ParallelFor(call, groups, 1, [=](int64_t begin, int64_t end) {
      int64_t b0, b1;
      group_range(begin, end, &b0, &b1);
      output(b0, b1);
    });
  }
  return KILN_KERR_OK;
}

}  // namespace

KILN_KERNEL(qconv_winograd) {
  if constexpr (!kFastKernels) return KILN_KERR_UNSUPPORTED;
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  if ((X.dtype != kU8 && X.dtype != kI8) || (Y.dtype != kU8 && Y.dtype != kI8)) return KILN_KERR_DTYPE;
  return RunQWinograd(call);
}

}  // namespace kiln_kernels
