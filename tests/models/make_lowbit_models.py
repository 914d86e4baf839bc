#!/usr/bin/env python3
"""Float8 (opset 19) and int4 / uint4 (opset 21) cases: Cast, CastLike, QuantizeLinear,
DequantizeLinear and the data movement ops on them, in the node-test layout, with ONNX
Runtime's outputs (bench/ort_run.js) as the expected ones, run by kiln-conformance compiled
and with --reference, every case on the pass list.

onnxruntime-node has no float8 tensors and crashes on int4 ones, so the ORT cases keep those
types inside the graph: float32 / int32 in, Cast to the narrow type, the op, Cast back out
(every float8 and 4-bit value is exact in float32). The `native_*` cases then run the same
ops with float8 / int4 graph inputs and outputs (TensorProto files: float8 one byte each,
int4 packed two per byte), their data taken from an ORT case's. A model using float8 in an
op that does not take it must be refused naming node, op and type (checked with `kiln`).

python 3's onnx here is 1.12: element types 17 to 22 are set by number and float8 / int4
data written as raw bytes made with numpy.

  make_lowbit_models.py KILN_CONFORMANCE --ort-run bench/ort_run.js --kiln KILN [--keep DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(1921)

E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, UINT4, INT4 = 17, 18, 19, 20, 21, 22
FLOAT8 = {E4M3FN: "e4m3fn", E4M3FNUZ: "e4m3fnuz", E5M2: "e5m2", E5M2FNUZ: "e5m2fnuz"}
INT4S = {UINT4: "u4", INT4: "i4"}
NP_TYPE = {np.dtype(k): v for k, v in onnx.mapping.NP_TYPE_TO_TENSOR_TYPE.items()}


# ---- float8 and int4 data as ONNX stores it (numpy: no such types) ----

def float8_values(fmt):
    """The value of each code 0..255 (NaN where it is NaN), per ONNX's float8.md."""
    mbits, bias = (3, 7 if fmt == E4M3FN else 8) if fmt in (E4M3FN, E4M3FNUZ) else (2, 15 if fmt == E5M2 else 16)
    values = np.zeros(256)
    for code in range(256):
        mag = code & 0x7F
        e, m = mag >> mbits, mag & ((1 << mbits) - 1)
        v = m * 2.0 ** (1 - bias - mbits) if e == 0 else (m + (1 << mbits)) * 2.0 ** (e - bias - mbits)
        if fmt == E4M3FN and mag == 0x7F:
            v = np.nan
        if fmt == E5M2 and e == 31:
            v = np.inf if m == 0 else np.nan
        if fmt in (E4M3FNUZ, E5M2FNUZ) and code == 0x80:
            v = np.nan
        values[code] = -v if code & 0x80 else v
    return values


def float8_bits(array, fmt):
    """Bits of float32 values that are exactly float8 (NaN: the format's NaN)."""
    table = float8_values(fmt)
    out = np.zeros(array.shape, np.uint8)
    for idx, v in np.ndenumerate(array.astype(np.float64)):
        if np.isnan(v):
            out[idx] = 0x80 if fmt in (E4M3FNUZ, E5M2FNUZ) else 0x7F
            continue
        hits = [c for c in range(256) if table[c] == v and (np.signbit(table[c]) == np.signbit(v) or v != 0)]
        if not hits:
            raise ValueError(f"{v} is not a float8 {FLOAT8[fmt]} value")
        out[idx] = hits[0]
    return out


def raw_tensor(name, elem_type, dims, raw):
    t = TensorProto()
    t.name, t.data_type = name, elem_type
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def float8_tensor(name, fmt, values):
    values = np.asarray(values, np.float32)
    return raw_tensor(name, fmt, values.shape, float8_bits(values, fmt).tobytes())


def int4_tensor(name, elem_type, values):
    """Two per byte, low nibble first (an odd count leaves the last high nibble 0)."""
    values = np.asarray(values, np.int64).ravel()
    nibbles = (values & 0xF).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, 0)
    packed = (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)
    return raw_tensor(name, elem_type, np.asarray(values).shape if values.ndim else [], packed.tobytes())


def int4_tensor_shaped(name, elem_type, values):
    t = int4_tensor(name, elem_type, np.asarray(values).ravel())
    del t.dims[:]
    t.dims.extend(np.asarray(values).shape)
    return t


# ---- cases ----

class Case:
    """A graph with numpy inputs (ORT-readable types) or raw TensorProto inputs (native)."""

    def __init__(self, name, opset, nodes, inputs, outputs, initializers=(), equivalent=None, ort_wrong=None,
                 fixup=None):
        self.name, self.opset, self.nodes = name, opset, nodes
        self.inputs = inputs          # [(name, np.ndarray | TensorProto)]
        self.outputs = outputs        # [(name, elem_type, dims)]
        self.initializers = list(initializers)
        # Nodes computing the same outputs without the float8 / 4-bit step ONNX Runtime lacks
        # (or gets wrong: ort_wrong says how): its outputs are then taken from these.
        self.equivalent, self.ort_wrong = equivalent, ort_wrong
        # fixup(inputs, outputs) -> count: corrects ONNX Runtime's outputs where it departs
        # from the specification (documented at each use).
        self.fixup = fixup
        # ONNX Runtime's graph optimisation level for this case, and why it is not 'all'
        self.ort_optimization, self.ort_optimization_why = "all", None
        self.input_dims = {}  # a graph input's declared dims where they are not its data's

    def save(self, root, nodes=None, model_name="model.onnx"):
        def info(n, a):
            if isinstance(a, TensorProto):
                return helper.make_tensor_value_info(n, a.data_type, list(a.dims))
            return helper.make_tensor_value_info(n, NP_TYPE[a.dtype], self.input_dims.get(n, a.shape))
        graph = helper.make_graph(nodes or self.nodes, self.name, [info(n, a) for n, a in self.inputs],
                                  [helper.make_tensor_value_info(n, t, d) for n, t, d in self.outputs],
                                  self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10 if self.opset >= 21 else 9
        case = os.path.join(root, self.name)
        data = os.path.join(case, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        onnx.save(model, os.path.join(case, model_name))
        for i, (n, a) in enumerate(self.inputs):
            proto = a if isinstance(a, TensorProto) else numpy_helper.from_array(a, n)
            proto.name = n
            with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())
        return case


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=f"{op.lower()}_{outs[0]}", **attrs)


def ort_overflow_fixup(fmt):
    """ONNX Runtime 1.30 (as ONNX's numpy helper) departs from the Cast table without
    saturate just past the largest finite value: E4M3FN makes [480, 496) 448, not NaN; E5M2
    makes [61440, 65536) NaN (0x7B | 0x7C), not infinity. Those expected values are set to the
    table's."""
    lo, hi, value = (480, 496, np.nan) if fmt == E4M3FN else (61440, 65536, np.inf)

    def fix(inputs, outputs):
        with np.errstate(invalid="ignore"):
            x = inputs[0].astype(np.float64)
        hit = (np.abs(x) >= lo) & (np.abs(x) < hi)
        outputs[0][hit] = np.copysign(value, x[hit]) if value == np.inf else value
        return int(hit.sum())
    return fix if fmt in (E4M3FN, E5M2) else None


def ort_tie_fixup(is_signed):
    """ONNX Runtime 1.30 rounds a float's .5 ties away from zero on its way to int4 / uint4;
    ONNX's int4.md rounds to nearest even, then keeps the low 4 bits: those expected values
    are set to the specification's."""
    def fix(inputs, outputs):
        x = inputs[0].astype(np.float64)
        tie = np.abs(x - np.trunc(x)) == 0.5
        nibble = np.rint(x[tie]).astype(np.int64) & 0xF
        outputs[0][tie] = np.where(is_signed & (nibble >= 8), nibble - 16, nibble)
        return int(tie.sum())
    return fix


def special_floats(fmt, saturate):
    """Values around each format's edges: NaN, infinities, overflow, ties, subnormals."""
    v = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e6, -1e6, 448, 449, 464, 465, 470, 500, 512, -464, -465,
         240, 241, 247, 248, 250, 256, 57344, 57345, 61439, 61440, 61441, 65536, -61440,
         2.0 ** -6, 2.0 ** -7, 2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -10, 2.0 ** -11, 2.0 ** -14, 2.0 ** -16,
         2.0 ** -17, 1.5 * 2.0 ** -17, 2.0 ** -18, 3 * 2.0 ** -18, -2.0 ** -20,
         0.1, 0.3, -2.5, 3.25, 3.75, 1.0625, 1.125, 1.1875, 17, 18, 19, 20, 21, 22, 23, 24, 26, 28, 30]
    v = np.concatenate([np.array(v), [481, 490, -495, 62000, -65535], RNG.standard_normal(40) * 4,
                        RNG.standard_normal(20) * 300])
    return v.astype(np.float32)


def float8_exact(fmt, n):
    """n random finite values of the format, in float32."""
    table = float8_values(fmt)
    finite = table[np.isfinite(table)]
    return RNG.choice(finite, n).astype(np.float32)


def cast_cases():
    cases = []
    for fmt, tag in FLOAT8.items():
        for sat in (1, 0):
            x = special_floats(fmt, sat)
            cases.append(Case(f"cast_f32_to_{tag}_sat{sat}", 19,
                              [node("Cast", ["x"], ["q"], to=fmt, saturate=sat), node("Cast", ["q"], ["y"], to=1)],
                              [("x", x)], [("y", 1, list(x.shape))],
                              fixup=None if sat else ort_overflow_fixup(fmt)))
        x16 = special_floats(fmt, 1)
        x16 = x16[np.abs(x16) < 60000].astype(np.float16)
        cases.append(Case(f"cast_f16_to_{tag}", 19,
                          [node("Cast", ["x"], ["q"], to=fmt), node("Cast", ["q"], ["y"], to=10)],
                          [("x", x16)], [("y", 10, list(x16.shape))]))
        e = float8_exact(fmt, 30)
        cases.append(Case(f"cast_{tag}_to_i32_f64", 19,
                          [node("Cast", ["x"], ["q"], to=fmt), node("Cast", ["q"], ["i"], to=6),
                           node("Cast", ["q"], ["d"], to=11)],
                          [("x", e)], [("i", 6, [30]), ("d", 11, [30])]))
    # float64 in: through float32 (ORT, ONNX's numpy_helper), so 1.0625 + 1e-12 is a tie
    x64 = np.array([1.0625 + 1e-12, 1.0625 - 1e-12, 1.1875 + 1e-9, 3.0e5, -1e300, 2.0 ** -10 + 1e-15, np.nan],
                   np.float64)
    for fmt, tag in ((E4M3FN, "e4m3fn"), (E5M2, "e5m2")):
        cases.append(Case(f"cast_f64_to_{tag}", 19,
                          [node("Cast", ["x"], ["q"], to=fmt), node("Cast", ["q"], ["y"], to=11)],
                          [("x", x64)], [("y", 11, [7])]))
    for a, b, sat in ((E4M3FN, E5M2, 1), (E5M2, E4M3FN, 1), (E5M2, E4M3FN, 0), (E5M2, E4M3FNUZ, 0),
                      (E4M3FNUZ, E5M2FNUZ, 1)):
        x = float8_exact(a, 40)
        cases.append(Case(f"cast_{FLOAT8[a]}_to_{FLOAT8[b]}_sat{sat}", 19,
                          [node("Cast", ["x"], ["p"], to=a), node("Cast", ["p"], ["q"], to=b, saturate=sat),
                           node("Cast", ["q"], ["y"], to=1)], [("x", x)], [("y", 1, [40])]))
    # every float16 bit pattern and random float32 ones into each format; every code out
    all16 = np.arange(65536, dtype=np.uint16).view(np.float16)
    bits32 = RNG.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    for fmt, tag in FLOAT8.items():
        for sat in (1, 0):
            for src, x, out_type in (("f16", all16, 10), ("f32_bits", bits32, 1)):
                cases.append(Case(f"cast_all_{src}_to_{tag}_sat{sat}", 19,
                                  [node("Cast", ["x"], ["q"], to=fmt, saturate=sat),
                                   node("Cast", ["q"], ["y"], to=out_type)],
                                  [("x", x)], [("y", out_type, list(x.shape))],
                                  fixup=None if sat else ort_overflow_fixup(fmt)))
        codes = raw_tensor("codes", fmt, [256], bytes(range(256)))
        cases.append(Case(f"cast_every_{tag}_code", 19,
                          [node("Cast", ["codes"], ["c"], to=1), node("Mul", ["c", "one"], ["y"])],
                          [("one", np.ones(256, np.float32))], [("y", 1, [256])], [codes]))
    # a batch known only at run time
    x = special_floats(E5M2, 1)[:24].reshape(4, 6)
    dyn = Case("cast_e5m2_dynamic_batch", 19, [node("Cast", ["x"], ["q"], to=E5M2), node("Cast", ["q"], ["y"], to=1)],
               [("x", x)], [("y", 1, ["n", 6])])
    dyn.input_dims = {"x": ["n", 6]}
    cases.append(dyn)
    like = float8_tensor("like", E5M2, [0.0])
    x = special_floats(E5M2, 0)
    cases.append(Case("castlike_f32_to_e5m2_sat0", 19,
                      [node("CastLike", ["x", "like"], ["q"], saturate=0), node("Cast", ["q"], ["y"], to=1)],
                      [("x", x)], [("y", 1, list(x.shape))], [like], fixup=ort_overflow_fixup(E5M2)))
    # 4-bit: from floats (no .5 ties: ONNX Runtime rounds them away from zero where the
    # specification rounds to even), and integers wrapped to their low 4 bits
    xf = np.array([-100, -9, -8.4, -7.6, -2.7, -0.4, 0, 0.6, 1.4, 2.2, 7.3, 8.2, 15.1, 15.7, 16, 100, 3.9, -3.9,
                   -8.5, -7.5, -2.5, -0.5, 0.5, 1.5, 2.5, 7.5, 14.5, 15.5], np.float32)
    xi = np.array([-100, -17, -9, -8, -1, 0, 7, 8, 15, 16, 17, 100, 255, -255, 3, 4, 5], np.int32)
    for t, tag in INT4S.items():
        cases.append(Case(f"cast_f32_to_{tag}", 21,
                          [node("Cast", ["x"], ["q"], to=t), node("Cast", ["q"], ["y"], to=1)],
                          [("x", xf)], [("y", 1, list(xf.shape))], fixup=ort_tie_fixup(t == INT4)))
        cases.append(Case(f"cast_i32_to_{tag}", 21,
                          [node("Cast", ["x"], ["q"], to=t), node("Cast", ["q"], ["y"], to=6),
                           node("Cast", ["q"], ["u8"], to=2), node("Cast", ["q"], ["f"], to=10)],
                          [("x", xi)], [("y", 6, list(xi.shape)), ("u8", 2, list(xi.shape)),
                                        ("f", 10, list(xi.shape))]))
        cases.append(Case(f"cast_i8_to_{tag}_to_e4m3fn", 21,
                          [node("Cast", ["x"], ["q"], to=t), node("Cast", ["q"], ["p"], to=E4M3FN),
                           node("Cast", ["p"], ["y"], to=1)],
                          [("x", np.arange(-20, 20, dtype=np.int8))], [("y", 1, [40])],
                          equivalent=[node("Cast", ["x"], ["q"], to=t), node("Cast", ["q"], ["y"], to=1)],
                          ort_wrong="writes values unrelated to the input in its Cast from 4-bit to float8"))
        w = int4_tensor_shaped("w", t, np.arange(15).reshape(3, 5) - (8 if t == INT4 else 0))
        cases.append(Case(f"initializer_{tag}_odd_count", 21,
                          [node("Cast", ["w"], ["wf"], to=1), node("Add", ["wf", "x"], ["y"])],
                          [("x", np.ones((3, 5), np.float32))], [("y", 1, [3, 5])], [w]))
        like4 = int4_tensor("like", t, [1])
        cases.append(Case(f"castlike_i32_to_{tag}", 21,
                          [node("CastLike", ["x", "like"], ["q"]), node("Cast", ["q"], ["y"], to=6)],
                          [("x", xi)], [("y", 6, list(xi.shape))], [like4]))
    w8 = float8_tensor("w", E4M3FN, float8_exact(E4M3FN, 7).reshape(7))
    cases.append(Case("initializer_e4m3fn", 19, [node("Cast", ["w"], ["wf"], to=1), node("Mul", ["wf", "x"], ["y"])],
                      [("x", np.full(7, 2, np.float32))], [("y", 1, [7])], [w8]))
    const = float8_tensor("c", E5M2, [1.5, -0.25, 57344, -3])
    cases.append(Case("constant_e5m2", 19, [node("Constant", [], ["c"], value=const), node("Cast", ["c"], ["y"], to=1)],
                      [], [("y", 1, [4])]))
    return cases


def quantize_cases():
    cases = []
    x = (RNG.standard_normal((2, 6, 5)) * 3).astype(np.float32)
    x.ravel()[:6] = [0.5, 1.5, 2.5, -2.5, 1e6, -1e6]  # ties to even, saturation
    # float8 outputs: per tensor and per axis, saturate on and off
    for fmt, tag in FLOAT8.items():
        for sat in (1, 0):
            scale = np.array(0.02, np.float32)
            zp = float8_tensor("zp", fmt, 0.0)
            cases.append(Case(f"quantize_{tag}_sat{sat}", 19,
                              [node("QuantizeLinear", ["x", "scale", "zp"], ["q"], saturate=sat),
                               node("Cast", ["q"], ["y"], to=1)],
                              [("x", x)], [("y", 1, list(x.shape))],
                              [numpy_helper.from_array(scale, "scale"), zp]))
        scale = np.linspace(0.01, 0.5, 6).astype(np.float32)
        cases.append(Case(f"quantize_dequantize_{tag}_axis", 19,
                          [node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=1),
                           node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=1)],
                          [("x", x)], [("y", 1, list(x.shape))],
                          [numpy_helper.from_array(scale, "scale"), float8_tensor("zp", fmt, np.zeros(6))]))
        e = float8_exact(fmt, 24).reshape(4, 6)
        cases.append(Case(f"dequantize_{tag}", 19,
                          [node("Cast", ["x"], ["q"], to=fmt),
                           node("DequantizeLinear", ["q", "scale"], ["y"])],
                          [("x", e)], [("y", 1, [4, 6])], [numpy_helper.from_array(np.array(0.75, np.float32), "scale")]))
    # integer outputs of opset 21: int4, uint4, int16, uint16; per tensor with a zero point,
    # per axis, blocked with several block sizes (dividing the axis or not) and negative axes
    int_types = {INT4: ("i4", -8, 7), UINT4: ("u4", 0, 15), TensorProto.INT16: ("i16", -32768, 32767),
                 TensorProto.UINT16: ("u16", 0, 65535), TensorProto.INT8: ("i8", -128, 127),
                 TensorProto.UINT8: ("u8", 0, 255)}

    def zero_point(t, shape, values):
        if t in INT4S:
            return int4_tensor_shaped("zp", t, values)
        return numpy_helper.from_array(np.asarray(values).astype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t]).reshape(shape),
                                       "zp")

    for t, (tag, lo, hi) in int_types.items():
        width = hi - lo
        xs = (RNG.standard_normal((4, 6, 5)) * width / 4).astype(np.float32)
        xs.ravel()[:4] = [0.5 * 0.1, 1.5 * 0.1, 2.5 * 0.1, -2.5 * 0.1]
        mid = (lo + hi) // 2 if lo == 0 else 1
        if t not in (TensorProto.INT8, TensorProto.UINT8):
            cases.append(Case(f"quantize_{tag}_per_tensor", 21,
                              [node("QuantizeLinear", ["x", "scale", "zp"], ["q"]), node("Cast", ["q"], ["y"], to=6)],
                              [("x", xs)], [("y", 6, list(xs.shape))],
                              [numpy_helper.from_array(np.array(0.1, np.float32), "scale"), zero_point(t, (), mid)]))
            cases.append(Case(f"quantize_{tag}_output_dtype", 21,
                              [node("QuantizeLinear", ["x", "scale"], ["q"], output_dtype=t),
                               node("Cast", ["q"], ["y"], to=6)],
                              [("x", xs)], [("y", 6, list(xs.shape))],
                              [numpy_helper.from_array(np.array(0.37, np.float32), "scale")]))
            zps = RNG.integers(lo, hi + 1, 6) if lo == 0 else RNG.integers(-2, 3, 6)
            cases.append(Case(f"quantize_dequantize_{tag}_axis", 21,
                              [node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=-2),
                               node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=-2),
                               node("Cast", ["q"], ["qi"], to=6)],
                              [("x", xs)], [("y", 1, list(xs.shape)), ("qi", 6, list(xs.shape))],
                              [numpy_helper.from_array(np.linspace(0.05, 0.3, 6).astype(np.float32) * width / 16,
                                                       "scale"), zero_point(t, (6,), zps)]))
        for axis, block in ((1, 2), (1, 4), (-1, 2), (-1, 3), (0, 3), (-3, 1)):
            dims = list(xs.shape)
            a = axis % 3
            sdims = dims[:a] + [(dims[a] + block - 1) // block] + dims[a + 1:]
            scale = (RNG.uniform(0.5, 2.0, sdims) * width / 16).astype(np.float32)
            zps = RNG.integers(lo, hi + 1, sdims) if lo == 0 else RNG.integers(-2, 3, sdims)
            name = f"blocked_{tag}_axis{axis}_block{block}".replace("-", "m")
            cases.append(Case(name, 21,
                              [node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=axis, block_size=block),
                               node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=axis, block_size=block),
                               node("Cast", ["q"], ["qi"], to=6)],
                              [("x", xs)], [("y", 1, dims), ("qi", 6, dims)],
                              [numpy_helper.from_array(scale, "scale"), zero_point(t, sdims, zps)]))
    # float16 X and scale: Kiln computes them in float32 (legalize-float16)
    x16 = (RNG.standard_normal((3, 8)) * 2).astype(np.float16)
    s16 = numpy_helper.from_array(np.array([0.05, 0.11, 0.3], np.float16), "scale")
    cases.append(Case("quantize_dequantize_f16_e4m3fn_axis0", 19,
                      [node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=0),
                       node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=0), node("Cast", ["q"], ["qf"], to=1)],
                      [("x", x16)], [("y", 10, [3, 8]), ("qf", 1, [3, 8])],
                      [s16, float8_tensor("zp", E4M3FN, np.zeros(3))]))
    cases.append(Case("quantize_dequantize_f16_i4_blocked", 21,
                      [node("QuantizeLinear", ["x", "scale"], ["q"], axis=1, block_size=4, output_dtype=INT4),
                       node("DequantizeLinear", ["q", "scale"], ["y"], axis=1, block_size=4),
                       node("Cast", ["q"], ["qi"], to=6)],
                      [("x", x16)], [("y", 10, [3, 8]), ("qi", 6, [3, 8])],
                      [numpy_helper.from_array(RNG.uniform(0.2, 0.6, (3, 2)).astype(np.float16), "scale")]))
    # the int8 product patterns fold-qdq rewrites (DequantizeLinear -> MatMul / Conv ->
    # QuantizeLinear) with a blocked uint8 weight or an int4 result: not theirs to fold
    a = RNG.integers(0, 256, (2, 8)).astype(np.uint8)
    wq = numpy_helper.from_array(RNG.integers(0, 256, (8, 3)).astype(np.uint8), "wq")
    wscale = numpy_helper.from_array(RNG.uniform(0.01, 0.05, (2, 3)).astype(np.float32), "ws")
    common = [numpy_helper.from_array(np.array(0.02, np.float32), "as"),
              numpy_helper.from_array(np.array(128, np.uint8), "az"), wq]
    blocked = Case("matmul_blocked_u8_weight", 21,
                   [node("DequantizeLinear", ["a", "as", "az"], ["af"]),
                    node("DequantizeLinear", ["wq", "ws"], ["wf"], axis=0, block_size=4),
                    node("MatMul", ["af", "wf"], ["y"])],
                   [("a", a)], [("y", 1, [2, 3])], common + [wscale])
    blocked.ort_optimization = "basic"
    blocked.ort_optimization_why = "ONNX Runtime's extended graph optimisations miscompute it (values unlike its own " \
                                   "unoptimised run's and numpy's): expected outputs with basic optimisations"
    cases.append(blocked)
    cases.append(Case("matmul_quantized_to_i4", 21,
                      [node("DequantizeLinear", ["a", "as", "az"], ["af"]),
                       node("DequantizeLinear", ["wq", "ws1"], ["wf"]), node("MatMul", ["af", "wf"], ["m"]),
                       node("QuantizeLinear", ["m", "ys"], ["q"], output_dtype=INT4), node("Cast", ["q"], ["y"], to=6)],
                      [("a", a)], [("y", 6, [2, 3])],
                      common + [numpy_helper.from_array(np.array(0.03, np.float32), "ws1"),
                                numpy_helper.from_array(np.array(0.5, np.float32), "ys")]))
    # DequantizeLinear of a 4-bit initializer (packed weights), blocked along the last axis
    for t, tag in INT4S.items():
        w = RNG.integers(-8, 8, (3, 8)) if t == INT4 else RNG.integers(0, 16, (3, 8))
        cases.append(Case(f"dequantize_{tag}_weights_blocked", 21,
                          [node("DequantizeLinear", ["w", "scale"], ["wf"], axis=-1, block_size=4),
                           node("MatMul", ["x", "wf"], ["y"])],
                          [("x", RNG.standard_normal((2, 3)).astype(np.float32))], [("y", 1, [2, 8])],
                          [int4_tensor_shaped("w", t, w),
                           numpy_helper.from_array(RNG.uniform(0.1, 1, (3, 2)).astype(np.float32), "scale")]))
    return cases


def movement_cases():
    """Each data movement op on float8 and 4-bit values; where ONNX Runtime does not take the
    type, its outputs come from the same op on the float32 values (the casts are exact)."""
    cases = []
    ops = {
        "transpose": ([node("Transpose", ["q"], ["m"], perm=[2, 0, 1])], [4, 2, 3], {}),
        "reshape": ([node("Reshape", ["q", "shape"], ["m"])], [4, 6],
                    {"shape": np.array([4, -1], np.int64)}),
        "flatten": ([node("Flatten", ["q"], ["m"], axis=2)], [6, 4], {}),
        "squeeze": ([node("Unsqueeze", ["q", "axes"], ["u"]), node("Squeeze", ["u", "axes"], ["m"])], [2, 3, 4],
                    {"axes": np.array([-1], np.int64)}),
        "identity": ([node("Identity", ["q"], ["m"])], [2, 3, 4], {}),
    }
    for t, tag, opset in ((E4M3FN, "e4m3fn", 19), (E5M2FNUZ, "e5m2fnuz", 19), (INT4, "i4", 21), (UINT4, "u4", 21)):
        x = float8_exact(t, 2 * 3 * 4).reshape(2, 3, 4) if t in FLOAT8 else \
            (RNG.integers(-8, 8, (2, 3, 4)) if t == INT4 else RNG.integers(0, 16, (2, 3, 4))).astype(np.float32)
        for op, (op_nodes, dims, inits) in ops.items():
            nodes = [node("Cast", ["x"], ["q"], to=t), *op_nodes, node("Cast", ["m"], ["y"], to=1)]
            # the same op on the float32 values
            same = [helper.make_node(n.op_type, ["x" if i == "q" else i for i in n.input], list(n.output),
                                     name=n.name, **{a.name: helper.get_attribute_value(a) for a in n.attribute})
                    for n in op_nodes] + [node("Identity", ["m"], ["y"])]
            cases.append(Case(f"{op}_{tag}", opset, nodes, [("x", x)], [("y", 1, dims)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()], equivalent=same))
        cases.append(Case(f"shape_size_{tag}", opset,
                          [node("Cast", ["x"], ["q"], to=t), node("Shape", ["q"], ["s"]), node("Size", ["q"], ["n"])],
                          [("x", x)], [("s", 7, [3]), ("n", 7, [])],
                          equivalent=[node("Shape", ["x"], ["s"]), node("Size", ["x"], ["n"])]))
    return cases


def native_cases(root):
    """Float8 and int4 graph inputs and outputs, with an ORT case's data: (case, source case,
    how to make its data from the source's input and output files)."""
    def load(case, kind, i):
        t = TensorProto()
        with open(os.path.join(root, case, "test_data_set_0", f"{kind}_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)

    cases = []
    # Cast f32 -> float8 with a float8 output
    for fmt, tag in FLOAT8.items():
        src = f"cast_f32_to_{tag}_sat1"
        x, y = load(src, "input", 0), load(src, "output", 0)
        c = Case(f"native_cast_f32_to_{tag}", 19, [node("Cast", ["x"], ["y"], to=fmt)], [("x", x)],
                 [("y", fmt, list(x.shape))])
        cases.append((c, [float8_tensor("y", fmt, y)]))
        # float8 in: DequantizeLinear and a movement chain, float8 out
        e = load(f"dequantize_{tag}", "input", 0)
        c = Case(f"native_dequantize_{tag}", 19, [node("DequantizeLinear", ["q", "scale"], ["y"]),
                                                  node("Transpose", ["q"], ["t"])],
                 [("q", float8_tensor("q", fmt, e))], [("y", 1, list(e.shape)), ("t", fmt, list(e.shape[::-1]))],
                 [numpy_helper.from_array(np.array(0.75, np.float32), "scale")])
        cases.append((c, [numpy_helper.from_array(load(f"dequantize_{tag}", "output", 0), "y"),
                          float8_tensor("t", fmt, e.T)]))
    # QuantizeLinear to int4 / uint4 with an int4 output (odd element count: packing), and back
    for t, tag in INT4S.items():
        src = f"quantize_{tag}_per_tensor"
        x, q = load(src, "input", 0), load(src, "output", 0)
        x, q = x[:, :, :3], q[:, :, :3]  # 4 x 6 x 3: 72 elements; then one odd slice
        x, q = x[:1, :1, :], q[:1, :1, :]
        model = onnx.load(os.path.join(root, src, "model.onnx"))
        zp = next(i for i in model.graph.initializer if i.name == "zp")
        c = Case(f"native_quantize_{tag}", 21, [node("QuantizeLinear", ["x", "scale", "zp"], ["q"]),
                                                node("DequantizeLinear", ["q", "scale", "zp"], ["y"])],
                 [("x", x)], [("q", t, list(x.shape)), ("y", 1, list(x.shape))],
                 [numpy_helper.from_array(np.array(0.1, np.float32), "scale"), zp])
        nibble = zp.raw_data[0] & 0xF
        zpv = nibble - 16 if t == INT4 and nibble >= 8 else nibble
        cases.append((c, [int4_tensor_shaped("q", t, q), numpy_helper.from_array(
            ((q.astype(np.float32) - zpv) * np.float32(0.1)).astype(np.float32), "y")]))
    # int4 / uint4 graph inputs (odd element count), dequantized per axis
    for t, tag in INT4S.items():
        src = f"quantize_dequantize_{tag}_axis"
        y, q = load(src, "output", 0)[:1, :, :3], load(src, "output", 1)[:1, :, :3]
        model = onnx.load(os.path.join(root, src, "model.onnx"))
        inits = [i for i in model.graph.initializer if i.name in ("scale", "zp")]
        c = Case(f"native_dequantize_{tag}_input", 21,
                 [node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=-2), node("Identity", ["q"], ["same"])],
                 [("q", int4_tensor_shaped("q", t, q))], [("y", 1, list(q.shape)), ("same", t, list(q.shape))], inits)
        cases.append((c, [numpy_helper.from_array(y, "y"), int4_tensor_shaped("same", t, q)]))
    return cases


def refusal_check(kiln, root):
    """Float8 / int4 in an op that does not take them must be refused naming node, op and type:
    a float8 Add, and an int4 Relu whose batch is known only at run time (`--check` too)."""
    add = Case("refused_add_e4m3fn", 19, [node("Cast", ["x"], ["q"], to=E4M3FN), node("Add", ["q", "q"], ["s"]),
                                          node("Cast", ["s"], ["y"], to=1)],
               [("x", np.ones(3, np.float32))], [("y", 1, [3])])
    relu = Case("refused_relu_i4", 21, [node("Cast", ["x"], ["q"], to=INT4), node("Relu", ["q"], ["r"]),
                                        node("Cast", ["r"], ["y"], to=1)],
                [("x", np.ones((2, 3), np.float32))], [("y", 1, ["n", 3])])
    relu.input_dims = {"x": ["n", 3]}
    ok = True
    for case, want in ((add, ["node 'add_s' (Add, opset 19)", "f8e4m3fn"]),
                       (relu, ["node 'relu_r' (Relu, opset 21)", "i4"])):
        model = os.path.join(case.save(root), "model.onnx")
        for flags in (["-o", os.path.join(root, "m.so")], ["--check"]):
            run = subprocess.run([kiln, "compile", model, *flags], capture_output=True, text=True)
            message = run.stderr + run.stdout
            if run.returncode == 0 or not all(w in message for w in want):
                print(f"FAIL refusal of {case.name} ({' '.join(flags)}): exit {run.returncode}, want {want}:\n{message}")
                ok = False
            else:
                print(f"ok   refusal of {case.name} ({flags[0]}): {message.strip().splitlines()[0]}")
    return ok


def ort_outputs(ort_run, case, path, model_name):
    data = os.path.join(path, "test_data_set_0")
    inputs = sum((["--input", os.path.join(data, f"input_{i}.pb")] for i in range(len(case.inputs))), [])
    run = subprocess.run(["node", ort_run, os.path.join(path, model_name), *inputs, "--output-dir", data,
                          "--optimization", case.ort_optimization], capture_output=True, text=True)
    return None if run.returncode == 0 else (run.stderr.strip().splitlines() or ["?"])[-1]


def run_ort(ort_run, case, root):
    """Writes the case with ONNX Runtime's outputs as the expected ones; returns None, or a
    note on where they came from (an equivalent graph, fixed-up values), or 'dropped: why'."""
    path = case.save(root)
    note = case.ort_optimization_why
    error = None if case.ort_wrong else ort_outputs(ort_run, case, path, "model.onnx")
    if case.ort_wrong or error:
        if case.equivalent is None:
            return f"dropped: ONNX Runtime refuses it ({error})"
        case.save(root, case.equivalent, "ort_equivalent.onnx")
        again = ort_outputs(ort_run, case, path, "ort_equivalent.onnx")
        if again:
            return f"dropped: ONNX Runtime refuses it ({error}) and its equivalent ({again})"
        why = f"ONNX Runtime {case.ort_wrong}" if case.ort_wrong else f"ONNX Runtime refuses it ({error})"
        note = f"{why}; expected outputs from ONNX Runtime on the same ops without the narrow type"
    if case.fixup:
        data = os.path.join(path, "test_data_set_0")
        load = lambda f: numpy_helper.to_array(onnx.load_tensor(os.path.join(data, f)))  # noqa: E731
        inputs = [load(f"input_{i}.pb") for i in range(len(case.inputs))]
        outputs = [load(f"output_{i}.pb").copy() for i in range(len(case.outputs))]
        fixed = case.fixup(inputs, outputs)
        for i, (name, _, _) in enumerate(case.outputs):
            onnx.save_tensor(numpy_helper.from_array(outputs[i], name), os.path.join(data, f"output_{i}.pb"))
        note = f"{fixed} of ONNX Runtime's values set to the specification's (see {case.fixup.__qualname__})"
    return note


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("conformance", help="the kiln-conformance binary")
    parser.add_argument("--ort-run", required=True, help="bench/ort_run.js (onnxruntime-node)")
    parser.add_argument("--kiln", help="the kiln binary: also check that an unsupported use is refused")
    parser.add_argument("--keep", help="write the cases here and keep them")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="kiln-lowbit-models-")
    if args.keep:
        shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    try:
        names, refused, notes = [], [], []
        for case in cast_cases() + quantize_cases() + movement_cases():
            note = run_ort(args.ort_run, case, root)
            if note is None:
                names.append(case.name)
            elif note.startswith("dropped"):
                refused.append((case.name, note))
                shutil.rmtree(os.path.join(root, case.name))
            else:
                names.append(case.name)
                notes.append((case.name, note))
        for case, outputs in native_cases(root):
            path = case.save(root)
            for i, proto in enumerate(outputs):
                with open(os.path.join(path, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
                    f.write(proto.SerializeToString())
            names.append(case.name)
        for name, why in notes + refused:
            print(f"{name}: {why}")
        pass_list = os.path.join(root, "pass_list.txt")
        with open(pass_list, "w") as f:
            f.write("\n".join(sorted(names)) + "\n")
        print(f"{len(names)} cases with ONNX Runtime's outputs ({len(refused)} refused by it)", flush=True)
        status = 0
        for mode in ([], ["--reference"]):
            run = subprocess.run([args.conformance, *mode, "--data", root, "--pass-list", pass_list, "--verbose"],
                                 timeout=600)
            status = status or run.returncode
        if args.kiln:
            scratch = tempfile.mkdtemp(prefix="kiln-lowbit-refused-")
            if not refusal_check(args.kiln, scratch):
                status = 1
            shutil.rmtree(scratch, ignore_errors=True)
        return status
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
