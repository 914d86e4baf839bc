// What codegen and the kernel library ask of LLVM about a target: the TargetMachine for a
// TargetSpec, and the two questions the kernel library's code depends on (its vector tile
// and its int8 dot product). Private to compiler/codegen.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kiln/compiler/target.h"
#include "llvm/IR/Function.h"
#include "llvm/Target/TargetMachine.h"

namespace kiln::codegen {

// Registers every LLVM target once per process.
void InitializeLlvmTargets();

// A PIC TargetMachine at -O3 for the spec; function and data sections when `sections`
// (the kernel library, so the linker keeps only the kernels a model calls).
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> MakeTargetMachine(const TargetSpec& target, bool sections);

// Replaces a function's CPU and feature attributes by the target's: bitcode compiled for a
// generic CPU would otherwise cap the vector width.
void SetTargetAttributes(llvm::Function& function, const TargetSpec& target);

// LLVM's -O3 module pipeline for the target, loop and SLP vectorisation on; first a global
// DCE when `drop_unused` (internal functions no entry point reaches).
void OptimizeO3(llvm::Module& module, llvm::TargetMachine& machine, bool drop_unused = false);

// The kernel library's questions about the target (kernel_common.h): 16-lane vectors and
// 32 registers (AVX-512F: the GEMM core's 12x32 tile, else 6x16), and which int8 dot
// product the int8 kernels take (vpdpbusd on AVX-512 VNNI, on AVX-VNNI, or plain i32).
struct TargetTraits {
  bool wide_vectors = false;
  int32_t int8_dot = 0;       // kInt8DotPlain / kInt8DotAvx512Vnni / kInt8DotAvxVnni
  std::string gemm_tile;      // "12x32" or "6x16"
  std::string int8_dot_name;  // "avx512-vnni", "avx-vnni" or "plain"
  bool bf16_dot = false;      // vdpbf16ps (AVX512-BF16): the bf16 products (kernels/bf16)
  bool byte_permute = false;  // vpermt2b (AVX512-VBMI): the int8 conv stem's column gather
};
TargetTraits TraitsOf(const llvm::TargetMachine& machine);

}  // namespace kiln::codegen
