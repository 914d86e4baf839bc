// Internal to compiler/reference: what every op family shares. Element access widens every
// dtype to double (floating point) or int64 (integers, bool) and narrows on store, so each
// op is written once, per element, in the wide type. Index helpers walk row-major tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/common/status.h"
#include "kiln/compiler/ir.h"
#include "ref_ops.h"

namespace kiln::ref {

using Outputs = absl::StatusOr<std::vector<Tensor>>;

// An error for an input the specification does not allow; ReferenceEvaluateNode adds the node.
absl::Status Invalid(const std::string& message);

// Element i of any numeric tensor as double (uint64 above 2^53 loses precision, as a cast would).
double LoadDouble(const Tensor& t, int64_t i);
// Element i of an integer or bool tensor as int64 (uint64 keeps its bits); floats truncate.
int64_t LoadInt(const Tensor& t, int64_t i);
// Stores `v` rounded to the tensor's dtype: floats round to nearest even, integers convert
// as C++ does (the caller clamps where the specification says to saturate).
void StoreDouble(Tensor& t, int64_t i, double v);
// Stores `v` into an integer or bool tensor, keeping the low bits (two's complement).
void StoreInt(Tensor& t, int64_t i, int64_t v);
// Copies one element, whatever its dtype: movement ops never convert.
void CopyElement(const Tensor& src, int64_t src_index, Tensor& dst, int64_t dst_index);

bool IsFloatType(DType dtype);  // float8 included

// The float8 formats (ONNX float8.md): bits -> value, and a value rounded to the nearest
// representable one (ties to the even code), past the largest finite one saturated when
// `saturate`, else infinity (E5M2) or NaN; NaN stays NaN, zero in the UZ formats is +0.
double DecodeFloat8(uint8_t bits, DType dtype);
uint8_t EncodeFloat8(double v, DType dtype, bool saturate);
// Stores float8 bits at element i of a float8 tensor.
void SetFloat8(Tensor& t, int64_t i, uint8_t bits);
bool IsUnsigned(DType dtype);  // unsigned integers and bool

// Row-major strides of `dims`.
std::vector<int64_t> Strides(const std::vector<int64_t>& dims);
// Advances a row-major multi-index over `dims`; false once every index has been visited.
bool NextIndex(std::vector<int64_t>& index, const std::vector<int64_t>& dims);
// The numpy-style broadcast of several shapes (ONNX multidirectional broadcasting).
absl::StatusOr<std::vector<int64_t>> BroadcastDims(const std::vector<std::vector<int64_t>>& shapes);
// Strides for reading a tensor of `dims` as if broadcast to `out_dims`: 0 on broadcast axes.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_dims);
int64_t Dot(const std::vector<int64_t>& index, const std::vector<int64_t>& strides);

// `axis` in [-rank, rank) made non-negative.
absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank);
// Every element of a (small) integer tensor: shapes, axes, indices given as inputs.
std::vector<int64_t> IntsOf(const Tensor& t);
// Input i, or null when it is absent (beyond the node's inputs or omitted).
const Tensor* OptionalInput(const Inputs& in, size_t i);

// Axes (or sizes) given by attribute `attr` in early opsets, by input `input` in later
// ones; empty when neither gives them (a Reduce* op then reduces over every axis).
std::vector<int64_t> AxesFromAttrOrInput(const Node& node, const Inputs& in, const char* attr, size_t input);

}  // namespace kiln::ref

namespace kiln::ref {

// Walks the broadcast of `inputs` (ONNX multidirectional broadcasting) in row-major order of
// the result, calling visit(result_index, offsets) with each input's element offset. Returns
// the result's dims.
absl::StatusOr<std::vector<int64_t>> ForEachBroadcast(const std::vector<const Tensor*>& inputs,
                                                      const std::function<void(int64_t, const int64_t*)>& visit);

}  // namespace kiln::ref

// Binds input `index` of `inputs` to `name` (a const Tensor*), returning the error when absent.
#define KILN_REF_INPUT(name, inputs, index)                       \
  const Tensor* name = ::kiln::ref::OptionalInput(inputs, index); \
  if (name == nullptr) return ::kiln::ref::Invalid("input " #index " (" #name ") is required")

namespace kiln::ref {

// A tensor's elements widened to double, for the arithmetic-heavy ops (Conv, MatMul and
// their quantized forms) that compute in double whatever the element type.
struct Dense {
  std::vector<int64_t> dims;
  std::vector<double> values;
};
Dense ToDense(const Tensor& t);
// Rounds each value to `dtype` (see StoreDouble).
Tensor FromDense(const Dense& dense, DType dtype);

// The geometry of a sliding window over the spatial dims (Conv, pools): kernel, strides,
// dilations, the padding each side and the output size, from the node's attributes
// (auto_pad, pads, strides, dilations, ceil_mode) as the specification defines them.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end, out;
};
absl::StatusOr<Window> SlidingWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                     const std::vector<int64_t>& kernel);

// Conv over x [N, C, spatial...] with w [M, C/group, kernel...] (no bias), per the node's
// window attributes and `group`.
absl::StatusOr<Dense> Convolve(const Node& node, const Dense& x, const Dense& w);
// numpy matmul: 1-D operands promoted and the promoted axis dropped, batch dims broadcast.
absl::StatusOr<Dense> MatMulDense(const Dense& a, const Dense& b);

}  // namespace kiln::ref
