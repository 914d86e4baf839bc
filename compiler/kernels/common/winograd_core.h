// Winograd F(4x4, 3x3) convolution (2-D, stride 1, dilation 1, group 1): each 4x4 tile
// of output comes from a 6x6 tile of input with 36 multiplies per (input, output) channel
// pair instead of 144 (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks").
//   V[xi][t][ic] = (B^T d B)[xi]    d: the 6x6 input tile t of channel ic (zero outside)
//   M[xi][t][oc] = sum_ic V[xi][t][ic] * U[xi][ic][oc]   36 GEMMs
//   Y tile       = A^T M A + bias (+ a residual R), then the fused activation
// 3-D (conv_winograd over [N, C, D, H, W], f32 only): F(2, 3) along depth times the same
// F(4x4, 3x3) across each plane, 4 x 6 x 6 = 144 points for a 2 x 4 x 4 tile of output,
// 4.5 multiplies per output and channel pair instead of 27 (R3D-18's 3x3x3 convs).
// The transforms in f32, shared by conv_winograd (winograd.cc: the GEMMs in f32) and
// conv_winograd_bf16 (bf16/bf16.cc: the GEMMs in bf16 with f32 sums, 2-D). Tiles are done in
// chunks (at most tiles_per_chunk at a time, the same tiles of every image) so V and M, which
// live in the call's scratch output, stay within a few MiB.
#pragma once

#include "gemm_core.h"
#include "kernel_common.h"
#include "kiln/kernels/conv.h"
#include "unary_math.h"

namespace kiln_kernels::winograd {

using gemm::v8f;

constexpr int kLanes = 8;  // channels per vector

// out[i * os] = (B^T in)[i] for the six points of one column (or row) of a tile.
inline void InputTransform6(const v8f* in, int64_t is, v8f* out, int64_t os) {
  const v8f d0 = in[0], d1 = in[is], d2 = in[2 * is], d3 = in[3 * is], d4 = in[4 * is], d5 = in[5 * is];
  const v8f four = KILN_SPLAT8(4.f), five = KILN_SPLAT8(5.f), two = KILN_SPLAT8(2.f);
  out[0] = four * d0 - five * d2 + d4;
  out[os] = d3 + d4 - four * (d1 + d2);
  out[2 * os] = d4 - d3 + four * (d1 - d2);
  out[3 * os] = d4 - d2 + two * (d3 - d1);
  out[4 * os] = d4 - d2 - two * (d3 - d1);
  out[5 * os] = four * d1 - five * d3 + d5;
}

// out[i * os] = (A^T in)[i], i < 4, on f32 vectors V (v8f here; v16f in the integer
// kernel, quant/qwinograd.cc, whose sums come back to f32 for this step).
template <typename V>
KILN_ALWAYS_INLINE void OutputTransform6(const V* in, int64_t is, V* out, int64_t os) {
  const V m0 = in[0], m1 = in[is], m2 = in[2 * is], m3 = in[3 * is], m4 = in[4 * is], m5 = in[5 * is];
  const V s12 = m1 + m2, d12 = m1 - m2, s34 = m3 + m4, d34 = m3 - m4;
  out[0] = m0 + s12 + s34;
  out[os] = d12 + 2.f * d34;
  out[2 * os] = s12 + 4.f * s34;
  out[3 * os] = d12 + 8.f * d34 + m5;
}

// out[i * os] = (B^T in)[i] of F(2, 3) for the four depth points: 0, 1, -1, infinity.
inline void DepthInputTransform4(const v8f* in, int64_t is, v8f* out, int64_t os) {
  const v8f d0 = in[0], d1 = in[is], d2 = in[2 * is], d3 = in[3 * is];
  out[0] = d0 - d2;
  out[os] = d1 + d2;
  out[2 * os] = d2 - d1;
  out[3 * os] = d1 - d3;
}

// d[r * 6 + q] = the 8 channels' x[ih0 + r][iw0 + q] (zero outside the H x W plane);
// x: the first channel's plane, the others channel_stride floats apart.
inline void LoadInputTile(const float* x, int64_t H, int64_t W, int64_t ih0, int64_t iw0, int64_t channel_stride,
                          v8f* d) {
  for (int r = 0; r < 6; ++r) {
    const int64_t ih = ih0 + r;
    for (int q = 0; q < 6; ++q) {
      const int64_t iw = iw0 + q;
      float lanes[kLanes];
      if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
        const float* src = x + ih * W + iw;
        for (int l = 0; l < kLanes; ++l) lanes[l] = src[l * channel_stride];
      } else {
        for (int l = 0; l < kLanes; ++l) lanes[l] = 0.f;
      }
      memcpy(&d[r * 6 + q], lanes, sizeof(v8f));
    }
  }
}

// vals[(i * 4 + q) * kLanes + l] += r[l * channel + i * row + q] for the tile's rows x cols.
inline void AddResidualTile(const float* r, int64_t channel, int64_t row, int64_t rows, int64_t cols, float* vals) {
  for (int l = 0; l < kLanes; ++l) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t q = 0; q < cols; ++q) vals[(i * 4 + q) * kLanes + l] += r[l * channel + i * row + q];
    }
  }
}

// A tile's points: 36 in 2-D (6 x 6), 144 in 3-D (4 x 6 x 6).
template <int kDims>
inline constexpr int kPoints = kDims == 3 ? 144 : 36;

// Tiles per job: a job's first tile starts a 12-row A panel of the bf16 GEMM and a wide
// tile of the f32 one.
constexpr int64_t kTileGroup = 12;
// V and M of one block of tiles (bytes): a job runs its tiles through the three stages a
// block at a time, so what stage 1 writes stage 2 reads from this core's L2, and stage 2's
// M stage 3. SqueezeNet-1.1 batch 8 on two threads, medians of 4 alternated rounds: 42.5 ms
// with 1 MiB blocks, 40.8 with 512 KiB, 39.9 with 256 KiB (12 to 24 tiles there).
constexpr int64_t kBlockBytes = int64_t{1} << 18;
// Groups of kTileGroup tiles below which the transforms of a split U go by channels (below).
constexpr int64_t kFewTileGroups = 4;
// U's bytes (as f32) above which stage 2 is split over U instead (below).
constexpr int64_t kSplitUBytes = int64_t{2} << 20;

// A call's shapes and operands, and the transforms of one tile of 8 channels. kDims 3: X and
// Y are [N, C, D, H, W], the tiles 2 x 4 x 4 of output, the points kPoints<3>.
template <int kDims>
struct WinogradTiles {
  static constexpr int kP = kPoints<kDims>;
  static constexpr int kDepth = kDims == 3 ? 2 : 1;  // output planes per tile
  int64_t batch, C, D, H, W, OC, OD, OH, OW, pad_front, pad_top, pad_left, tiles_d, tiles_h, tiles_w;
  int64_t activation;
  double alpha, beta;
  const float *px, *pbias, *pres;
  float* py;

  // False: shapes the kernel does not take.
  bool Init(const kiln_kcall* call, const kiln_conv_params& params) {
    const kiln_ktensor& X = call->inputs[0];
    const kiln_ktensor& Y = call->outputs[0];
    if (X.rank != kDims + 2) return false;
    batch = X.dims[0], C = X.dims[1], D = kDims == 3 ? X.dims[2] : 1, H = X.dims[kDims], W = X.dims[kDims + 1];
    OC = Y.dims[1], OD = kDims == 3 ? Y.dims[2] : 1, OH = Y.dims[kDims], OW = Y.dims[kDims + 1];
    pad_front = kDims == 3 ? params.window.pads_begin[0] : 0;
    pad_top = params.window.pads_begin[kDims - 2], pad_left = params.window.pads_begin[kDims - 1];
    tiles_d = (OD + kDepth - 1) / kDepth, tiles_h = (OH + 3) / 4, tiles_w = (OW + 3) / 4;
    activation = params.activation.code, alpha = params.activation.alpha, beta = params.activation.beta;
    px = static_cast<const float*>(X.data);
    pbias = OptionalInputData<float>(call, 2);
    pres = OptionalInputData<float>(call, 3);
    py = static_cast<float*>(Y.data);
    return C % kLanes == 0 && OC % gemm::kNr == 0;
  }
  int64_t PerImage() const { return tiles_d * tiles_h * tiles_w; }

  // d[0..kP) = B^T x B of tile (td, th, tw) of image n, channels c0..c0+8 (along depth too in 3-D).
  void Input(int64_t n, int64_t td, int64_t th, int64_t tw, int64_t c0, v8f* d) const {
    const int64_t plane = H * W, ih0 = th * 4 - pad_top, iw0 = tw * 4 - pad_left;
    const float* x = px + (n * C + c0) * D * plane;
    for (int z = 0; z < kP / 36; ++z) {  // the depth planes of the input tile
      const int64_t id = td * 2 - pad_front + z;
      if (kDims == 3 && (id < 0 || id >= D)) {
        for (int xi = 0; xi < 36; ++xi) d[z * 36 + xi] = KILN_SPLAT8(0.f);
      } else {
        LoadInputTile(x + id * plane, H, W, ih0, iw0, D * plane, d + z * 36);
      }
    }
    if constexpr (kDims == 3) {
      for (int xi = 0; xi < 36; ++xi) DepthInputTransform4(d + xi, 36, d + xi, 36);  // along depth: B^T d
    }
    v8f tmp[36];
    for (int z = 0; z < kP / 36; ++z) {
      v8f* dz = d + z * 36;
      for (int q = 0; q < 6; ++q) InputTransform6(dz + q, 6, tmp + q, 6);          // columns: B^T d
      for (int r = 0; r < 6; ++r) InputTransform6(tmp + r * 6, 1, dz + r * 6, 1);  // rows: (B^T d) B
    }
  }

  // Y's tile (td, th, tw) of image n, channels o0..o0+8 = A^T s A (s: its kP points of M,
  // overwritten) + bias (+ the residual), then the activation.
  void Output(int64_t n, int64_t td, int64_t th, int64_t tw, int64_t o0, v8f* s) const {
    v8f tmp[24], out[16 * kDepth];
    for (int z = 0; z < kP / 36; ++z) {  // A^T M A of each depth point, into s[z * 16..]
      for (int q = 0; q < 6; ++q) OutputTransform6(s + z * 36 + q, 6, tmp + q, 6);          // A^T M: 4 x 6
      for (int r = 0; r < 4; ++r) OutputTransform6(tmp + r * 6, 1, s + z * 16 + r * 4, 1);  // 4 x 4
    }
    for (int i = 0; i < 16; ++i) {
      if constexpr (kDims == 3) {  // along depth: A^T of F(2, 3)
        out[i] = s[i] + s[16 + i] + s[32 + i];
        out[16 + i] = s[16 + i] - s[32 + i] - s[48 + i];
      } else {
        out[i] = s[i];
      }
    }
    if (pbias != nullptr) {
      v8f b;
      KILN_LOAD8(b, pbias + o0);
      for (int i = 0; i < 16 * kDepth; ++i) out[i] += b;
    }
    alignas(32) float vals[16 * kDepth * kLanes];
    memcpy(vals, out, sizeof(vals));
    const int64_t out_plane = OH * OW, depth = OD - td * kDepth < kDepth ? OD - td * kDepth : kDepth;
    const int64_t rows = OH - th * 4 < 4 ? OH - th * 4 : 4, cols = OW - tw * 4 < 4 ? OW - tw * 4 : 4;
    const int64_t at = ((n * OC + o0) * OD + td * kDepth) * out_plane + th * 4 * OW + tw * 4;
    if (pres != nullptr) {
      for (int64_t z = 0; z < depth; ++z)
        AddResidualTile(pres + at + z * out_plane, OD * out_plane, OW, rows, cols, vals + z * 16 * kLanes);
    }
    ApplyActivation(vals, 16 * kDepth * kLanes, activation, alpha, beta);
    for (int l = 0; l < kLanes; ++l) {
      for (int64_t z = 0; z < depth; ++z) {
        float* y = py + at + l * OD * out_plane + z * out_plane;
        const float* from = vals + z * 16 * kLanes + l;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t q = 0; q < cols; ++q) y[r * OW + q] = from[(r * 4 + q) * kLanes];
        }
      }
    }
  }
};

// The three stages for the call. The GEMM's side decides how V is stored: the scratch
// holds v_floats of it (then M); store_v(v, xi, tc, t, c0, values) stores the 8 channels
// c0.. of point xi of tile t (of tc in the chunk); multiply(v, xi, tc, t0, t1, n0, n1, m_xi)
// computes rows t0..t1 (t0 a multiple of kTileGroup) and output channels n0..n1 (at most
// job_cols of them, n0 a multiple of job_cols) of M[xi] (tc x OC, row stride OC) = V[xi]
// (tc x C) · U[xi], on the f32 core (winograd.cc) or the bf16 one (bf16/bf16.cc).
// v_tile_bytes: the bytes of V per tile and point (C floats for the f32 GEMM).
// Jobs are groups of tiles, each taken through all three stages by the thread that runs it
// (a block at a time): with stage 2 split over (xi, channels) instead, each thread read the
// V and wrote the M of tiles the other one had transformed, through L3, and SqueezeNet's
// 3x3 convs ran only 1.0-1.3x faster on two threads than on one.
template <int kDims = 2, typename StoreV, typename Multiply>
int32_t WinogradRun(const kiln_kcall* call, const kiln_conv_params& params, int64_t job_cols, int64_t v_floats,
                    int64_t v_tile_bytes, const StoreV& store_v, const Multiply& multiply) {
  static_assert(kDims == 2 || kDims == 3);
  constexpr int kP = kPoints<kDims>;
  WinogradTiles<kDims> g;
  if (!g.Init(call, params)) return KILN_KERR_UNSUPPORTED;
  const int64_t batch = g.batch, C = g.C, OC = g.OC, chunk = params.tiles_per_chunk, per_image = g.PerImage();
  float* v = OutputData<float>(call, 1);
  float* m = v + v_floats;
  const int64_t tile_bytes = kP * (v_tile_bytes + OC * static_cast<int64_t>(sizeof(float)));
  int64_t block = kBlockBytes / tile_bytes / kTileGroup * kTileGroup;
  if (block < kTileGroup) block = kTileGroup;
  // A chunk is the tiles s.. s + width - 1 of every image (tile t of the chunk: image
  // t / width), so that threads splitting it into equal ranges each get the same images in
  // every chunk, as they do in the convs and pools before and after (jobs image-major): on
  // two threads, each core then reads the activations it wrote itself, where the VM's two
  // cores each have an L3 of their own and reading the other's costs more than the work.
  // With U over kSplitUBytes, every block of a job streaming all of it cost more than
  // splitting stage 2 over U (each thread a half of it): SqueezeNet's 64 -> 256 channel convs
  // (U 2.3 MiB) ran 15-25 % slower fused on two threads; those up to 1.3 MiB ran as fast or
  // faster (the 16 -> 64 ones 5-25 %).
  const bool split_u = call->exec != nullptr && call->exec->parallel_for != nullptr &&
                       kP * C * OC * static_cast<int64_t>(sizeof(float)) > kSplitUBytes;
  const int64_t chunk_width = chunk / batch > 0 ? chunk / batch : 1;
  for (int64_t s = 0; s < per_image; s += chunk_width) {
    const int64_t width = per_image - s < chunk_width ? per_image - s : chunk_width, tc = batch * width;
    // Tile t of the chunk: image n, tile (td, th, tw) of its output.
    auto tile_at = [=, &g](int64_t t, int64_t* n, int64_t* td, int64_t* th, int64_t* tw) {
      const int64_t local = s + t % width;
      *n = t / width;
      *td = local / (g.tiles_h * g.tiles_w);
      *th = local / g.tiles_w % g.tiles_h;
      *tw = local % g.tiles_w;
    };
    // 1. Input transform of tiles b0..b1 (all input channels).
    const int64_t cblocks = C / kLanes;
    auto input_tile = [=, &g](int64_t t, int64_t c0) {  // tile t, channels c0..c0+8
      int64_t n, td, th, tw;
      tile_at(t, &n, &td, &th, &tw);
      v8f d[kP];
      g.Input(n, td, th, tw, c0, d);
      for (int xi = 0; xi < kP; ++xi) store_v(v, xi, tc, t, c0, d[xi]);
    };
    auto input = [=](int64_t b0, int64_t b1) {
      for (int64_t job = b0 * cblocks; job < b1 * cblocks; ++job) input_tile(job / cblocks, job % cblocks * kLanes);
    };
    // 3. Output transform, bias and activation of tiles b0..b1 (all output channels).
    const int64_t oblocks = OC / kLanes;
    auto output_tile = [=, &g](int64_t t, int64_t o0) {  // tile t, channels o0..o0+8
      int64_t n, td, th, tw;
      tile_at(t, &n, &td, &th, &tw);
      v8f s[kP];
      for (int xi = 0; xi < kP; ++xi) KILN_LOAD8(s[xi], m + (xi * tc + t) * OC + o0);
      g.Output(n, td, th, tw, o0, s);
    };
    auto output = [=](int64_t b0, int64_t b1) {
      for (int64_t job = b0 * oblocks; job < b1 * oblocks; ++job) output_tile(job / oblocks, job % oblocks * kLanes);
    };
    // Jobs: groups of kTileGroup tiles, each through the stages a block at a time, with
    // 2. the kP GEMMs (36, or 144 in 3-D) of [block x C] · [C x OC] in between.
    auto jobs = [=](int64_t begin, int64_t end) {
      const int64_t last = end * kTileGroup < tc ? end * kTileGroup : tc;
      for (int64_t b0 = begin * kTileGroup; b0 < last; b0 += block) {
        const int64_t b1 = last - b0 < block ? last : b0 + block;
        input(b0, b1);
        for (int64_t xi = 0; xi < kP; ++xi) {
          for (int64_t n0 = 0; n0 < OC; n0 += job_cols) {
            multiply(v, xi, tc, b0, b1, n0, n0 + job_cols < OC ? n0 + job_cols : OC, m + xi * tc * OC);
          }
        }
        output(b0, b1);
      }
    };
    const int64_t groups = (tc + kTileGroup - 1) / kTileGroup;
    if (!split_u) {
      ParallelFor(call, groups, 1, jobs);
      continue;
    }
    // A large U: the stages one after the other, stage 2's jobs over (xi, job_cols channels).
    // Stages 1 and 3 go by groups of kTileGroup tiles, each thread its own images and
    // regions as in the ops around (across the VM's two L3s, reading what the other core
    // wrote costs more than the work), except over a few groups, whose split is too uneven:
    // a 14x14 map's 16 tiles went 12 + 4 to two threads (ResNet-50's 256-channel convs there
    // ran 1.35x faster on two threads than on one), so those take jobs of (8 channels, tile),
    // channels outer (tiles split within a group would share the cache lines of V's panels,
    // whose rows interleave word by word: 2.6x slower). Channels outer over a batch's many
    // tiles cost ResNet-50 at batch 8 3 % on two threads.
    // One transform stage: by_groups(t0, t1) over tiles, or by_tile(t, c0) for `blocks`
    // blocks of 8 channels.
    auto transforms = [=](const auto& by_groups, const auto& by_tile, int64_t blocks) {
      if (groups >= kFewTileGroups) {
        ParallelFor(call, groups, 1, [=](int64_t b, int64_t e) {
          by_groups(b * kTileGroup, e * kTileGroup < tc ? e * kTileGroup : tc);
        });
      } else {
        ParallelFor(call, blocks * tc, 1, [=](int64_t b, int64_t e) {
          for (int64_t job = b; job < e; ++job) by_tile(job % tc, job / tc * kLanes);
        });
      }
    };
    transforms(input, input_tile, cblocks);
    const int64_t nchunks = (OC + job_cols - 1) / job_cols;
    ParallelFor(call, kP * nchunks, 1, [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t xi = job / nchunks, n0 = job % nchunks * job_cols;
        multiply(v, xi, tc, 0, tc, n0, n0 + job_cols < OC ? n0 + job_cols : OC, m + xi * tc * OC);
      }
    });
    transforms(output, output_tile, oblocks);
  }
  return KILN_KERR_OK;
}

}  // namespace kiln_kernels::winograd
