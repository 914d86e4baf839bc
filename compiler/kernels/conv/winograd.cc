// Winograd F(4x4, 3x3) convolution in f32 (2-D, stride 1, dilation 1, group 1), and in 3-D
// F(2, 3) along depth times F(4x4, 3x3): the transforms of winograd_core.h with their 36 or
// 144 GEMMs on the shared micro-kernel. U = G g G^T is computed at compile time
// (ops/nn_ops.cc) and stored as 16-column panels: U[xi][oc / 16][ic][oc % 16], which is
// exactly what the micro-kernel streams. Artifacts only: the reference interpreter runs the
// plain Conv.
#include "winograd_core.h"

using namespace kiln_kernels;

namespace {

struct WinogradConvKernel {
  // inputs: X [N, C, H, W] or [N, C, D, H, W], U [P, OC/16, C, 16] (P points: 36 in 2-D, 144
  // in 3-D), B [OC] (may be omitted), R (as Y) optional: a residual added before the
  // activation (the fuse pass's Conv -> Add)
  // outputs: Y [N, OC, OH, OW] or [N, OC, OD, OH, OW], scratch (u8, P * tiles_per_chunk *
  // (C + OC) floats)
  // Parameters: kiln_conv_params' tiles_per_chunk, window.pads_begin (2 or 3) and activation.
  __attribute__((noinline)) static int32_t RunF32(const kiln_kcall* call, const kiln_conv_params& params);
};

int32_t WinogradConvKernel::RunF32(const kiln_kcall* call, const kiln_conv_params& params) {
  const float* pu = InputData<float>(call, 1);
  const int64_t C = call->inputs[0].dims[1], OC = call->outputs[0].dims[1];
  // V as [P][tc][C] f32.
  auto store_v = [=](float* v, int64_t xi, int64_t tc, int64_t t, int64_t c0, const gemm::v8f& values) {
    KILN_STORE8(v + (xi * tc + t) * C + c0, values);
  };
  auto multiply = [=](const float* v, int64_t xi, int64_t tc, int64_t t0, int64_t t1, int64_t n0, int64_t n1,
                      float* m) { gemm::PanelBlock(t0, t1, n0, n1, C, v + xi * tc * C, C, pu + xi * OC * C, m, OC); };
  const int64_t tile_bytes = C * int64_t{sizeof(float)};
  if (call->inputs[0].rank == 5) {
    return winograd::WinogradRun<3>(call, params, gemm::kNc, winograd::kPoints<3> * params.tiles_per_chunk * C,
                                    tile_bytes, store_v, multiply);
  }
  return winograd::WinogradRun(call, params, gemm::kNc, 36 * params.tiles_per_chunk * C, tile_bytes, store_v, multiply);
}

}  // namespace

KILN_F32_KERNEL(conv_winograd, WinogradConvKernel, outputs[0].dtype)
