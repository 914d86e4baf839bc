// Winograd F(4x4, 3x3) convolution (2-D, stride 1, dilation 1, group 1): each 4x4 tile
// of output comes from a 6x6 tile of input with 36 multiplies per (input, output) channel
// pair instead of 144 (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks").
//   V[xi][t][ic] = (B^T d B)[xi]    d: the 6x6 input tile t of channel ic (zero outside)
//   M[xi][t][oc] = sum_ic V[xi][t][ic] * U[xi][ic][oc]   36 GEMMs
//   Y tile       = A^T M A + bias (+ a residual R), then the fused activation
// The transforms in f32, shared by conv_winograd (winograd.cc: the GEMMs in f32) and
// conv_winograd_bf16 (bf16/bf16.cc: the GEMMs in bf16 with f32 sums). Tiles are done in
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

// d[r * 6 + q] = the 8 channels' x[ih0 + r][iw0 + q] (zero outside the H x W plane);
// x: the first channel's plane, the others H * W floats apart.
inline void LoadInputTile(const float* x, int64_t H, int64_t W, int64_t ih0, int64_t iw0, v8f* d) {
  for (int r = 0; r < 6; ++r) {
    const int64_t ih = ih0 + r;
    for (int q = 0; q < 6; ++q) {
      const int64_t iw = iw0 + q;
      float lanes[kLanes];
      if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
        const float* src = x + ih * W + iw;
        for (int l = 0; l < kLanes; ++l) lanes[l] = src[l * H * W];
      } else {
        for (int l = 0; l < kLanes; ++l) lanes[l] = 0.f;
      }
      memcpy(&d[r * 6 + q], lanes, sizeof(v8f));
    }
  }
}

// vals[(i * 4 + q) * kLanes + l] += r[l * plane + i * row + q] for the tile's rows x cols.
inline void AddResidualTile(const float* r, int64_t plane, int64_t row, int64_t rows, int64_t cols, float* vals) {
  for (int l = 0; l < kLanes; ++l) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t q = 0; q < cols; ++q) vals[(i * 4 + q) * kLanes + l] += r[l * plane + i * row + q];
    }
  }
}

// Tiles per job: a job's first tile starts a 12-row A panel of the bf16 GEMM and a wide
// tile of the f32 one.
constexpr int64_t kTileGroup = 12;
// V and M of one block of tiles (bytes): a job runs its tiles through the three stages a
// block at a time, so what stage 1 writes stage 2 reads from this core's L2, and stage 2's
// M stage 3. SqueezeNet-1.1 batch 8 on two threads, medians of 4 alternated rounds: 42.5 ms
// with 1 MiB blocks, 40.8 with 512 KiB, 39.9 with 256 KiB (12 to 24 tiles there).
constexpr int64_t kBlockBytes = int64_t{1} << 18;
// U's bytes (as f32) above which stage 2 is split over U instead (below).
constexpr int64_t kSplitUBytes = int64_t{2} << 20;

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
template <typename StoreV, typename Multiply>
int32_t WinogradRun(const kiln_kcall* call, const kiln_conv_params& params, int64_t job_cols, int64_t v_floats,
                    int64_t v_tile_bytes, const StoreV& store_v, const Multiply& multiply) {
  const kiln_ktensor& X = call->inputs[0];
  const kiln_ktensor& Y = call->outputs[0];
  const int64_t batch = X.dims[0], C = X.dims[1], H = X.dims[2], W = X.dims[3];
  const int64_t OC = Y.dims[1], OH = Y.dims[2], OW = Y.dims[3];
  if (C % kLanes != 0 || OC % gemm::kNr != 0) return KILN_KERR_UNSUPPORTED;
  const int64_t chunk = params.tiles_per_chunk, pad_top = params.window.pads_begin[0];
  const int64_t pad_left = params.window.pads_begin[1], activation = params.activation.code;
  const double alpha = params.activation.alpha, beta = params.activation.beta;
  const float* px = static_cast<const float*>(X.data);
  const float* pbias = OptionalInputData<float>(call, 2);
  const float* pres = OptionalInputData<float>(call, 3);
  float* py = static_cast<float*>(Y.data);
  float* v = OutputData<float>(call, 1);
  float* m = v + v_floats;
  const int64_t tiles_h = (OH + 3) / 4, tiles_w = (OW + 3) / 4, per_image = tiles_h * tiles_w;
  const int64_t tile_bytes = 36 * (v_tile_bytes + OC * static_cast<int64_t>(sizeof(float)));
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
                       36 * C * OC * static_cast<int64_t>(sizeof(float)) > kSplitUBytes;
  const int64_t chunk_width = chunk / batch > 0 ? chunk / batch : 1;
  for (int64_t s = 0; s < per_image; s += chunk_width) {
    const int64_t width = per_image - s < chunk_width ? per_image - s : chunk_width, tc = batch * width;
    auto tile_at = [=](int64_t t, int64_t* n, int64_t* th, int64_t* tw) {
      const int64_t local = s + t % width;
      *n = t / width;
      *th = local / tiles_w;
      *tw = local % tiles_w;
    };
    // 1. Input transform of tiles b0..b1 (all input channels).
    const int64_t cblocks = C / kLanes;
    auto input = [=](int64_t b0, int64_t b1) {
      for (int64_t job = b0 * cblocks; job < b1 * cblocks; ++job) {
        const int64_t t = job / cblocks, c0 = job % cblocks * kLanes;
        int64_t n, th, tw;
        tile_at(t, &n, &th, &tw);
        const int64_t ih0 = th * 4 - pad_top, iw0 = tw * 4 - pad_left;
        v8f d[36], tmp[36];
        LoadInputTile(px + (n * C + c0) * H * W, H, W, ih0, iw0, d);
        for (int q = 0; q < 6; ++q) InputTransform6(d + q, 6, tmp + q, 6);          // columns: B^T d
        for (int r = 0; r < 6; ++r) InputTransform6(tmp + r * 6, 1, d + r * 6, 1);  // rows: (B^T d) B
        for (int xi = 0; xi < 36; ++xi) store_v(v, xi, tc, t, c0, d[xi]);
      }
    };
    // 3. Output transform, bias and activation of tiles b0..b1 (all output channels).
    const int64_t oblocks = OC / kLanes;
    auto output = [=](int64_t b0, int64_t b1) {
      for (int64_t job = b0 * oblocks; job < b1 * oblocks; ++job) {
        const int64_t t = job / oblocks, o0 = job % oblocks * kLanes;
        int64_t n, th, tw;
        tile_at(t, &n, &th, &tw);
        v8f s[36], tmp[24], out[16];
        for (int xi = 0; xi < 36; ++xi) KILN_LOAD8(s[xi], m + (xi * tc + t) * OC + o0);
        for (int q = 0; q < 6; ++q) OutputTransform6(s + q, 6, tmp + q, 6);            // A^T M: 4 x 6
        for (int r = 0; r < 4; ++r) OutputTransform6(tmp + r * 6, 1, out + r * 4, 1);  // (A^T M) A: 4 x 4
        if (pbias != nullptr) {
          v8f b;
          KILN_LOAD8(b, pbias + o0);
          for (int i = 0; i < 16; ++i) out[i] += b;
        }
        alignas(32) float vals[16 * kLanes];
        memcpy(vals, out, sizeof(vals));
        const int64_t rows = OH - th * 4 < 4 ? OH - th * 4 : 4, cols = OW - tw * 4 < 4 ? OW - tw * 4 : 4;
        if (pres != nullptr)
          AddResidualTile(pres + ((n * OC + o0) * OH + th * 4) * OW + tw * 4, OH * OW, OW, rows, cols, vals);
        ApplyActivation(vals, 16 * kLanes, activation, alpha, beta);
        for (int l = 0; l < kLanes; ++l) {
          float* y = py + ((n * OC + o0 + l) * OH + th * 4) * OW + tw * 4;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t q = 0; q < cols; ++q) y[r * OW + q] = vals[(r * 4 + q) * kLanes + l];
          }
        }
      }
    };
    // Jobs: groups of kTileGroup tiles, each through the stages a block at a time, with
    // 2. the 36 GEMMs of [block x C] · [C x OC] in between.
    auto jobs = [=](int64_t begin, int64_t end) {
      const int64_t last = end * kTileGroup < tc ? end * kTileGroup : tc;
      for (int64_t b0 = begin * kTileGroup; b0 < last; b0 += block) {
        const int64_t b1 = last - b0 < block ? last : b0 + block;
        input(b0, b1);
        for (int64_t xi = 0; xi < 36; ++xi) {
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
    ParallelFor(call, groups, 1,
                [=](int64_t b, int64_t e) { input(b * kTileGroup, e * kTileGroup < tc ? e * kTileGroup : tc); });
    const int64_t nchunks = (OC + job_cols - 1) / job_cols;
    ParallelFor(call, 36 * nchunks, 1, [=](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t xi = job / nchunks, n0 = job % nchunks * job_cols;
        multiply(v, xi, tc, 0, tc, n0, n0 + job_cols < OC ? n0 + job_cols : OC, m + xi * tc * OC);
      }
    });
    ParallelFor(call, groups, 1,
                [=](int64_t b, int64_t e) { output(b * kTileGroup, e * kTileGroup < tc ? e * kTileGroup : tc); });
  }
  return KILN_KERR_OK;
}

}  // namespace kiln_kernels::winograd
