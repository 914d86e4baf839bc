// Internal to compiler/reference: the table each op family adds its evaluations to. The
// code here is written from the ONNX operator specification and includes nothing from
// compiler/kernels or compiler/ops: it is the second opinion.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/compiler/ir.h"

namespace kiln::ref {

using Inputs = std::vector<const Tensor*>;  // nullptr for omitted optional inputs
using RefFn = std::function<absl::StatusOr<std::vector<Tensor>>(const Node&, const Inputs&)>;
using RefTable = std::map<std::string, RefFn, std::less<>>;

// One function per family file (ref_<family>.cc); reference.cc calls each once.
void AddElementwiseOps(RefTable& table);  // ref_elementwise.cc
void AddReduceOps(RefTable& table);       // ref_reduce.cc
void AddMovementOps(RefTable& table);     // ref_movement.cc
void AddIndexingOps(RefTable& table);     // ref_indexing.cc
void AddConvOps(RefTable& table);         // ref_conv.cc
void AddMatMulOps(RefTable& table);       // ref_matmul.cc
void AddPoolOps(RefTable& table);         // ref_pool.cc
void AddNormOps(RefTable& table);         // ref_norm.cc
void AddQuantOps(RefTable& table);        // ref_quant.cc
void AddBitwiseOps(RefTable& table);      // ref_bitwise.cc
void AddControlOps(RefTable& table);      // ref_control.cc
void AddRnnOps(RefTable& table);
void AddDynamicOps(RefTable& table);
void AddResizeOps(RefTable& table);
void AddLossOps(RefTable& table);
void AddSamplingOps(RefTable& table);
void AddLinalgOps(RefTable& table);
void AddNnExtraOps(RefTable& table);
void AddRandomOps(RefTable& table);    // ref_random.cc
void AddSignalOps(RefTable& table);    // ref_signal.cc
void AddSpatialOps(RefTable& table);   // ref_spatial.cc
void AddSequenceOps(RefTable& table);  // ref_sequence.cc
// Last: it extends Cast, CastLike and the movement ops of the others to strings.
void AddStringOps(RefTable& table);  // ref_strings.cc
// After AddStringOps: Equal on strings, StringConcat, StringSplit, RegexFullMatch.
void AddTextOps(RefTable& table);  // ref_text.cc, ref_regex.cc
// After it: Cast, CastLike, QuantizeLinear, DequantizeLinear extended to float8 and int4.
void AddLowBitOps(RefTable& table);  // ref_lowbit.cc

}  // namespace kiln::ref
