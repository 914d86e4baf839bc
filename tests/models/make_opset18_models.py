#!/usr/bin/env python3
"""Every default-domain op that opsets 18 to 21 added or changed and ONNX Runtime's CPU
provider runs, one small model per op and attribute combination, held to ONNX Runtime's
outputs (bench/ort_run.js --cases writes them), compiled and in the reference. A case ONNX
Runtime refuses keeps numpy's expected outputs where it has them and is dropped (and named)
where it has none.

  make_opset18_models.py KILN_CONFORMANCE --ort-run bench/ort_run.js [--keep DIR]

libonnx 1.12 has no schemas past opset 17, so the models are built with onnx.helper and
never checked.
"""
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import make_opset_models

RNG = np.random.default_rng(1821)
F, F16, D, I64 = np.float32, np.float16, np.float64, np.int64


def randn(*shape, dtype=F):
    return RNG.standard_normal(shape).astype(dtype)


def ints(*shape, dtype=np.int32, low=-100, high=100):
    return RNG.integers(low, high, shape).astype(dtype)


def distinct(*shape):
    """Floats with no ties (max/min reductions and scatters pick one value each)."""
    return (RNG.permutation(int(np.prod(shape))).reshape(shape) * 0.37 - 3.1).astype(F)


class Cases:
    """Writes each case (model.onnx, test_data_set_0/input_N.pb and, where numpy knows them,
    output_N.pb) under root and keeps their names. From opset 18 each case with a tensor input
    has a twin, CASE_dynamic, whose inputs' first dims are named (n0, n1, ...) and whose
    outputs have no shape: Kiln compiles it for shapes known at run time."""

    # Ops Kiln compiles with static shapes only: their cases have no dynamic twin.
    STATIC_ONLY = {"QLinearMatMul"}

    def __init__(self, root):
        self.root = root
        self.names = []

    def add(self, name, opset, nodes, inputs, outputs, initializers=(), ort_wrong=None):
        """inputs: [(name, array)]; outputs: [(name, dtype or expected array[, shape])] (a shape
        for onnx 1.12's checker, which Kiln runs below opset 18); ort_wrong: why ONNX Runtime's
        answer is wrong, numpy's expected outputs stand."""
        def info(n, dtype, shape=None):
            return helper.make_tensor_value_info(n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)], shape)

        outs = [info(n, v.dtype, v.shape) if isinstance(v, np.ndarray) else info(n, v, *shape)
                for n, v, *shape in outputs]
        ins = [info(n, a.dtype, a.shape) for n, a in inputs]
        self._write(f"opset{opset}_{name}", opset, nodes, ins, outs, inputs, outputs, initializers, ort_wrong)
        if opset >= 18 and any(a.ndim for _, a in inputs) and not {n.op_type for n in nodes} & self.STATIC_ONLY:
            ins = [info(n, a.dtype, [f"n{i}", *a.shape[1:]] if a.ndim else []) for i, (n, a) in enumerate(inputs)]
            outs = [info(n, v.dtype if isinstance(v, np.ndarray) else v) for n, v, *_ in outputs]
            self._write(f"opset{opset}_{name}_dynamic", opset, nodes, ins, outs, inputs, outputs, initializers,
                        ort_wrong)

    def _write(self, case, opset, nodes, ins, outs, inputs, outputs, initializers, ort_wrong):
        graph = helper.make_graph(nodes, case, ins, outs,
                                  [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 3 if opset < 7 else 8 if opset < 18 else 9 if opset < 21 else 10  # 8: onnx 1.12's checker
        data = f"{self.root}/{case}/test_data_set_0"
        make_opset_models.os.makedirs(data)
        onnx.save(model, f"{self.root}/{case}/model.onnx")
        if ort_wrong:
            with open(f"{self.root}/{case}/ort_wrong.txt", "w") as f:
                f.write(ort_wrong + "\n")
        expected = [(n, v) for n, v, *_ in outputs if isinstance(v, np.ndarray)]
        for kind, tensors in (("input", inputs), ("output", expected if len(expected) == len(outputs) else [])):
            for i, (n, a) in enumerate(tensors):
                with open(f"{data}/{kind}_{i}.pb", "wb") as f:
                    f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())
        self.names.append(case)

    def unary(self, name, opset, op, x, out_dtype=None, extra_inputs=(), expected=None, ort_wrong=None, **attrs):
        """One node op(x, *extra_inputs) -> y; extra_inputs are initializers ('' for omitted)."""
        names = ["x"] + [n for n, _ in extra_inputs]
        self.add(name, opset, [helper.make_node(op, names, ["y"], **attrs)], [("x", x)],
                 [("y", out_dtype or x.dtype) if expected is None else ("y", expected)],
                 [(n, a) for n, a in extra_inputs if n], ort_wrong)


def new_ops(c):
    g = randn(3, 5)
    c.unary("mish", 18, "Mish", g * 3)
    c.unary("gelu", 20, "Gelu", g * 3)
    c.unary("gelu_tanh", 20, "Gelu", g * 3, approximate="tanh")
    # MatMul then Gelu: the fuse pass folds the activation into the MatMul's epilogue.
    for approximate in ("none", "tanh"):
        c.add(f"matmul_gelu_{approximate}", 20,
              [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["mb"]),
               helper.make_node("Gelu", ["mb"], ["y"], approximate=approximate)],
              [("a", randn(4, 6))], [("y", F)], [("w", randn(6, 5)), ("bias", randn(5))])
    for dtype in (D, F16):
        c.unary(f"mish_{np.dtype(dtype).name}", 18, "Mish", (g * 3).astype(dtype))
        erf_gelu = 0.5 * g * 3 * (1 + np.vectorize(math.erf)(g * 3 / math.sqrt(2)))  # ORT has no double Erf
        c.unary(f"gelu_{np.dtype(dtype).name}", 20, "Gelu", (g * 3).astype(dtype),
                expected=erf_gelu.astype(D) if dtype == D else None)
        c.unary(f"gelu_tanh_{np.dtype(dtype).name}", 20, "Gelu", (g * 3).astype(dtype), approximate="tanh")
    gx = randn(2, 6, 3, 4)
    for opset, n in ((18, 3), (21, 6)):
        for groups in (3, 1, 6):
            per = n if opset == 21 else groups
            c.unary(f"group_normalization_g{groups}", opset, "GroupNormalization", gx,
                    extra_inputs=[("scale", randn(per)), ("bias", randn(per))], num_groups=groups, epsilon=1e-3)
    c.unary("group_normalization_3d_stash", 21, "GroupNormalization", randn(2, 4, 5),
            extra_inputs=[("scale", randn(4)), ("bias", randn(4))], num_groups=2, stash_type=1)
    for dtype in (np.int32, np.int64, np.uint8, np.int8, np.uint16):
        i, j = ints(3, 4, dtype=dtype, low=0, high=100), ints(4, dtype=dtype, low=0, high=100)
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
            c.add(f"{op.lower()}_{np.dtype(dtype).name}", 18, [helper.make_node(op, ["i", "j"], ["y"])],
                  [("i", i), ("j", j)], [("y", dtype)])
        c.unary(f"bitwisenot_{np.dtype(dtype).name}", 18, "BitwiseNot", i)
    cc = randn(3, 5, 4)
    for tag, shape, axes in (("all", [2, 7, 4], None), ("axes", [3, 7], [1, 2]), ("neg_axes", [1], [-3]),
                             ("odd", [4, 2], [-1, 1])):
        c.unary(f"center_crop_pad_{tag}", 18, "CenterCropPad", cc, extra_inputs=[("shape", np.array(shape, I64))],
                **({"axes": axes} if axes else {}))
    im = randn(1, 2 * 2 * 3, 12)  # C=2, kernel 2x3, 12 blocks
    for tag, image, attrs in (("basic", [4, 6], {}), ("strides", [4, 9], {"strides": [1, 2]}),
                              ("pads_dilations", [3, 5], {"pads": [1, 0, 1, 1], "dilations": [2, 1]})):
        c.unary(f"col2im_{tag}", 18, "Col2Im", im,
                extra_inputs=[("image_shape", np.array(image, I64)), ("block_shape", np.array([2, 3], I64))], **attrs)
    c.unary("col2im_3d", 18, "Col2Im", randn(1, 2 * 2 * 2 * 2, 2 * 3 * 2),
            extra_inputs=[("image_shape", np.array([3, 4, 3], I64)), ("block_shape", np.array([2, 2, 2], I64))])
    c.unary("group_normalization_double", 21, "GroupNormalization", gx.astype(D),
            extra_inputs=[("scale", randn(6, dtype=D)), ("bias", randn(6, dtype=D))], num_groups=2)
    affine(c)
    deform(c)
    subgraphs(c)


def affine(c):
    theta2 = randn(2, 2, 3) * 0.5 + np.array([[1, 0, 0], [0, 1, 0]], F)
    theta3 = randn(1, 3, 4) * 0.3 + np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], F)
    for align in (0, 1):
        c.unary(f"affine_grid_2d_align{align}", 20, "AffineGrid", theta2,
                extra_inputs=[("size", np.array([2, 3, 4, 5], I64))], align_corners=align)
        c.unary(f"affine_grid_3d_align{align}", 20, "AffineGrid", theta3,
                extra_inputs=[("size", np.array([1, 2, 3, 4, 2], I64))], align_corners=align)


def deform(c):
    x = randn(1, 4, 5, 6)
    w = randn(2, 2, 3, 3)  # group 2
    off = randn(1, 2 * 2 * 9, 3, 4) * 0.7  # offset_group 2
    mask = RNG.random((1, 2 * 9, 3, 4)).astype(F)
    c.add("deform_conv_groups_mask", 19,
          [helper.make_node("DeformConv", ["x", "w", "off", "b", "mask"], ["y"], group=2, offset_group=2)],
          [("x", x), ("off", off), ("mask", mask)], [("y", F)], [("w", w), ("b", randn(2))])
    c.add("deform_conv_strides_pads", 19,
          [helper.make_node("DeformConv", ["x", "w", "off"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                            dilations=[1, 2])],
          [("x", x), ("off", randn(1, 18, 3, 2))], [("y", F)], [("w", randn(3, 4, 3, 3))])
    v = randn(1, 2, 4, 4, 3)
    c.add("deform_conv_3d", 19, [helper.make_node("DeformConv", ["x", "w", "off"], ["y"])],
          [("x", v), ("off", randn(1, 3 * 8, 3, 3, 2) * 0.5)], [("y", F)], [("w", randn(2, 2, 2, 2, 2))])


def subgraphs(c):
    """If, Loop and Scan at opsets 19 and 21 (their type lists grew), Constant and QLinearMatMul."""
    x = randn(2, 3)
    for opset in (19, 21):
        c.add("if", opset, [helper.make_node("If", ["cond"], ["y"], then_branch=branch("t", x, 2.0),
                                                 else_branch=branch("e", x, -1.0))],
              [("cond", np.array(False))], [("y", F)])
        # Loop: 3 trips of acc = acc * 2 + x, and the scan output of each acc.
        body = helper.make_graph(
            [helper.make_node("Mul", ["acc_in", "two"], ["twice"]), helper.make_node("Add", ["twice", "x"], ["acc_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Identity", ["acc_out"], ["scan_out"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 3]),
             helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2, 3])],
            [numpy_helper.from_array(np.array(2, F), "two")])
        c.add("loop", opset, [helper.make_node("Loop", ["trips", "", "x"], ["acc", "scans"], body=body)],
              [("x", x)], [("acc", F), ("scans", F)], [("trips", np.array(3, I64))])
        # Scan: running sum over the rows of s.
        scan_body = helper.make_graph(
            [helper.make_node("Add", ["sum_in", "row"], ["sum_out"]),
             helper.make_node("Identity", ["sum_out"], ["partial"])], "scan_body",
            [helper.make_tensor_value_info("sum_in", TensorProto.FLOAT, [3]),
             helper.make_tensor_value_info("row", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info("sum_out", TensorProto.FLOAT, [3]),
             helper.make_tensor_value_info("partial", TensorProto.FLOAT, [3])])
        c.add("scan", opset, [helper.make_node("Scan", ["init", "s"], ["total", "partials"], body=scan_body,
                                               num_scan_inputs=1)],
              [("init", randn(3)), ("s", randn(4, 3))], [("total", F), ("partials", F)])
        c.add("constant", opset, [helper.make_node("Constant", [], ["k"], value_floats=[1.5, -2.0]),
                                  helper.make_node("Add", ["x", "k"], ["y"])], [("x", randn(3, 2))], [("y", F)])
    a, b = ints(2, 3, dtype=np.uint8, low=0, high=255), ints(3, 4, dtype=np.uint8, low=0, high=255)
    c.add("qlinear_matmul", 21,
          [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
          [("a", a), ("b", b)], [("y", np.uint8)],
          [("as", np.array(0.02, F)), ("az", np.array(120, np.uint8)), ("bs", np.array(0.03, F)),
           ("bz", np.array(130, np.uint8)), ("ys", np.array(0.5, F)), ("yz", np.array(128, np.uint8))])


def reductions(c):
    a = distinct(3, 4, 5)
    pos = np.abs(a) + 0.5
    for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
               "ReduceProd", "ReduceSum", "ReduceSumSquare"):
        x = pos if op == "ReduceLogSum" else a * 0.3 if op == "ReduceProd" else a
        short = op[6:].lower()
        c.unary(f"reduce_{short}_axes", 18, op, x, extra_inputs=[("axes", np.array([0, -1], I64))])
        c.unary(f"reduce_{short}_axes_nokeep", 18, op, x, extra_inputs=[("axes", np.array([1], I64))], keepdims=0)
        c.unary(f"reduce_{short}_all", 18, op, x, keepdims=0)
        c.unary(f"reduce_{short}_noop", 18, op, x, noop_with_empty_axes=1)
        c.unary(f"reduce_{short}_empty_axes", 18, op, x, extra_inputs=[("axes", np.zeros(0, I64))])
    flags = RNG.integers(0, 2, (3, 4)).astype(bool)
    flags[0] = True
    flags[1] = False
    for op in ("ReduceMax", "ReduceMin"):
        c.unary(f"{op.lower()}_bool", 20, op, flags, extra_inputs=[("axes", np.array([1], I64))], keepdims=0)
        c.unary(f"{op.lower()}_bool_all", 20, op, flags)
        for dtype in (np.int8, np.uint8):
            c.unary(f"{op.lower()}_{np.dtype(dtype).name}", 18, op, ints(3, 4, dtype=dtype, low=0, high=100),
                    extra_inputs=[("axes", np.array([0], I64))])


def movement(c):
    p = randn(2, 3, 4)
    for mode in ("constant", "reflect", "edge"):
        c.unary(f"pad_axes_{mode}", 18, "Pad", p, mode=mode,
                extra_inputs=[("pads", np.array([1, 0, 2, 1], I64)), ("", None), ("axes", np.array([2, 0], I64))])
    c.unary("pad_neg_axes_value", 18, "Pad", p,
            extra_inputs=[("pads", np.array([2, -1], I64)), ("value", np.array(1.5, F)), ("axes", np.array([-1], I64))])
    c.unary("pad_wrap", 19, "Pad", p, mode="wrap", extra_inputs=[("pads", np.array([0, 1, 2, 0, 1, 3], I64))])
    # Pads wider than the axis wrap round it again: y[i] = x[(i - begin) mod n] on each axis
    # (numpy 1.24's np.pad wraps a padded axis again on the next and differs).
    large, wrapped = [1, 4, 5, 0, 2, 6], p
    for axis in range(3):
        n = p.shape[axis]
        wrapped = np.take(wrapped, np.arange(-large[axis], n + large[axis + 3]), axis=axis, mode="wrap")
    c.unary("pad_wrap_large", 19, "Pad", p, mode="wrap", extra_inputs=[("pads", np.array(large, I64))],
            expected=wrapped,
            ort_wrong="ONNX Runtime 1.30 reads outside the input where a wrap pad is wider than its axis")
    c.unary("pad_wrap_axes", 19, "Pad", p, mode="wrap",
            extra_inputs=[("pads", np.array([3, 2], I64)), ("", None), ("axes", np.array([1], I64))])
    c.unary("pad", 21, "Pad", p, extra_inputs=[("pads", np.array([0, 1, 0, 1, 0, 2], I64))])
    s = randn(2, 7, 3)
    for n in (3, 7, 4):
        outs = [f"y{i}" for i in range(n)]
        c.add(f"split_num_outputs_{n}", 18, [helper.make_node("Split", ["s"], outs, axis=1, num_outputs=n)],
              [("s", s)], [(o, F) for o in outs])
    c.add("split_num_outputs_neg_axis", 18, [helper.make_node("Split", ["s"], ["a", "b"], axis=-1, num_outputs=2)],
          [("s", s)], [("a", F), ("b", F)])
    c.add("split_sizes", 18, [helper.make_node("Split", ["s", "sizes"], ["a", "b"], axis=1)], [("s", s)],
          [("a", F), ("b", F)], [("sizes", np.array([5, 2], I64))])
    shape_ops(c)


def shape_ops(c):
    x = randn(2, 3, 4)
    for opset in (19, 21):
        c.unary("identity", opset, "Identity", x)
        c.unary("shape_start_end", opset, "Shape", x, out_dtype=I64, start=1, end=-1)
        c.unary("shape_neg_start", opset, "Shape", x, out_dtype=I64, start=-2)
        c.unary("size", opset, "Size", x, out_dtype=I64)
        c.unary("reshape_allowzero_empty", opset, "Reshape", np.zeros((0, 3), F),
                extra_inputs=[("shape", np.array([3, 0], I64))], allowzero=1)
        c.unary("reshape_zero_copies", opset, "Reshape", x, extra_inputs=[("shape", np.array([0, -1], I64))])
    c.unary("flatten", 21, "Flatten", x, axis=2)
    c.unary("squeeze", 21, "Squeeze", randn(2, 1, 3, 1), extra_inputs=[("axes", np.array([-1], I64))])
    c.unary("unsqueeze", 21, "Unsqueeze", x, extra_inputs=[("axes", np.array([0, 4], I64))])
    c.unary("transpose", 21, "Transpose", x, perm=[2, 0, 1])
    for opset in (20, 21):
        for dtype, code in ((F16, TensorProto.FLOAT16), (np.int8, TensorProto.INT8), (D, TensorProto.DOUBLE),
                            (np.uint16, TensorProto.UINT16), (bool, TensorProto.BOOL)):
            value = helper.make_tensor("value", code, [1], [1 if dtype is bool else 3])
            c.add(f"constant_of_shape_{np.dtype(dtype).name}", opset,
                  [helper.make_node("ConstantOfShape", ["shape"], ["y"], value=value)], [],
                  [("y", dtype)], [("shape", np.array([2, 3], I64))])
    for opset in (18, 21):
        c.add("optional_has_element_tensor", opset, [helper.make_node("OptionalHasElement", ["x"], ["y"])],
              [("x", x)], [("y", bool)])
        c.add("optional_get_element_tensor", opset, [helper.make_node("OptionalGetElement", ["x"], ["y"])],
              [("x", x)], [("y", F)])
        c.add("optional_roundtrip", opset,
              [helper.make_node("Optional", ["x"], ["o"]), helper.make_node("OptionalHasElement", ["o"], ["h"]),
               helper.make_node("OptionalGetElement", ["o"], ["y"])], [("x", x)], [("h", bool), ("y", F)])


def branch(name, x, scale):
    """A subgraph that yields the constant x * scale."""
    node = helper.make_node("Constant", [], [f"{name}_c"], value=numpy_helper.from_array(x * scale, f"{name}_v"))
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_c", TensorProto.FLOAT, x.shape)])


def scatters(c):
    data = distinct(4, 5)
    idx = np.array([[0, 1, 3, 0, 2], [0, 1, 1, 0, 3], [2, 1, 3, 0, 2]], I64)
    updates = distinct(3, 5)
    for red in ("max", "min", "add", "mul", "none"):
        c.add(f"scatter_elements_{red}", 18,
              [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0, reduction=red)],
              [("d", data), ("i", idx), ("u", updates)], [("y", F)])
        nd_idx = np.array([[1], [3], [1]] if red != "none" else [[1], [3], [0]], I64)
        c.add(f"scatter_nd_{red}", 18, [helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=red)],
              [("d", data), ("i", nd_idx), ("u", distinct(3, 5))], [("y", F)])
    c.add("scatter_nd_max_int", 18, [helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction="max")],
          [("d", ints(4, 3, dtype=I64)), ("i", np.array([[0, 1], [0, 1], [3, 2]], I64)), ("u", ints(3, dtype=I64))],
          [("y", I64)])


def pools(c):
    q = randn(1, 2, 7, 8)
    c.unary("average_pool_dilations", 19, "AveragePool", q, kernel_shape=[2, 3], dilations=[2, 2])
    c.unary("average_pool_dilations_pads", 19, "AveragePool", q, kernel_shape=[3, 2], dilations=[2, 1],
            pads=[1, 1, 2, 0], strides=[2, 1])
    c.unary("average_pool_dilations_count_pad", 19, "AveragePool", q, kernel_shape=[3, 2], dilations=[2, 2],
            pads=[2, 1, 2, 1], count_include_pad=1)
    c.unary("average_pool_dilations_ceil", 19, "AveragePool", q, kernel_shape=[2, 2], dilations=[2, 2],
            strides=[2, 2], ceil_mode=1)
    c.unary("average_pool_1d_dilations", 19, "AveragePool", randn(1, 3, 11), kernel_shape=[3], dilations=[3])
    for p in (1, 2, 3):
        c.unary(f"lp_pool_p{p}_ceil", 18, "LpPool", q, kernel_shape=[2, 3], strides=[2, 2], p=p, ceil_mode=1)
    c.unary("lp_pool_dilations", 18, "LpPool", q, kernel_shape=[2, 2], dilations=[2, 3], p=2)
    c.unary("lp_pool_pads_dilations", 18, "LpPool", q, kernel_shape=[3, 3], dilations=[1, 2], pads=[1, 1, 1, 1], p=2)
    c.unary("lp_pool_auto_pad", 18, "LpPool", q, kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", p=2)
    c.unary("global_lp_pool", 18, "GlobalLpPool", q, p=3)
    # Opset 1: p was a float (numpy's answer stands in where ORT has no opset-1 kernel).
    glp = (np.abs(q) ** 2).sum(axis=(2, 3), keepdims=True) ** 0.5
    c.add("global_lp_pool_float_p", 1, [helper.make_node("GlobalLpPool", ["x"], ["y"], p=2.0)], [("x", q)],
          [("y", glp.astype(F))])


def resizes(c):
    x = randn(1, 2, 8, 9)
    down = np.array([1, 1, 0.5, 0.6], F)
    for mode in ("linear", "cubic"):
        c.unary(f"resize_antialias_{mode}", 18, "Resize", x, mode=mode, antialias=1,
                extra_inputs=[("", None), ("scales", down)])
        c.unary(f"resize_antialias_{mode}_sizes", 18, "Resize", x, mode=mode, antialias=1,
                extra_inputs=[("", None), ("", None), ("sizes", np.array([1, 2, 3, 5], I64))])
    c.unary("resize_antialias_cubic_a_exclude", 18, "Resize", x, mode="cubic", antialias=1, cubic_coeff_a=-0.5,
            exclude_outside=1, extra_inputs=[("", None), ("scales", down)])
    c.unary("resize_antialias_align_corners", 18, "Resize", x, mode="linear", antialias=1,
            coordinate_transformation_mode="align_corners", extra_inputs=[("", None), ("scales", down)],
            expected=antialias_align_corners(x, down),
            ort_wrong="ONNX Runtime 1.30 centres the antialias filter apart from the specification's "
                      "align_corners position")
    c.unary("resize_antialias_upscale", 18, "Resize", x, mode="linear", antialias=1,
            extra_inputs=[("", None), ("scales", np.array([1, 1, 1.5, 2], F))])
    c.unary("resize_axes_scales", 18, "Resize", x, mode="linear", axes=[3, 2],
            extra_inputs=[("", None), ("scales", np.array([0.7, 1.5], F))])
    c.unary("resize_axes_sizes_nearest", 18, "Resize", x, mode="nearest", axes=[-1],
            extra_inputs=[("", None), ("", None), ("sizes", np.array([4], I64))])
    for policy in ("stretch", "not_larger", "not_smaller"):
        c.unary(f"resize_keep_aspect_{policy}", 18, "Resize", x, mode="linear", keep_aspect_ratio_policy=policy,
                axes=[2, 3], extra_inputs=[("", None), ("", None), ("sizes", np.array([5, 7], I64))])
    c.unary("resize_keep_aspect_nearest_all_axes", 18, "Resize", x, mode="nearest",
            keep_aspect_ratio_policy="not_smaller",
            extra_inputs=[("", None), ("", None), ("sizes", np.array([1, 2, 12, 12], I64))])
    for mode in ("nearest", "linear", "cubic"):
        c.unary(f"resize_half_pixel_symmetric_{mode}", 19, "Resize", x, mode=mode,
                coordinate_transformation_mode="half_pixel_symmetric",
                extra_inputs=[("", None), ("scales", np.array([1, 1, 1.7, 0.7], F))])
    c.unary("resize_tf_crop_and_resize_axes", 18, "Resize", x, mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize", axes=[2, 3],
            extra_inputs=[("roi", np.array([0.1, 0.2, 0.8, 0.9], F)), ("", None), ("sizes", np.array([4, 4], I64))])


def antialias_align_corners(x, scales):
    """Resize linear, antialias, align_corners, as the specification defines it: on each axis
    the triangle filter stretched by 1 / scale (scale < 1) at x_o = i (in - 1) / (scale in - 1),
    its taps k - ratio from floor(x_o) (ratio in (0, 1]), edge-clamped, weights normalized."""
    y = x.astype(np.float64)
    for axis, scale in enumerate(scales):
        n = y.shape[axis]
        out_n = int(np.floor(n * scale))
        if scale == 1:
            continue
        s = min(scale, 1.0)
        first = int(np.floor(-1 / s)) + 1
        rows = np.zeros((out_n, n))
        for i in range(out_n):
            x_o = 0.0 if n * scale == 1 else i * (n - 1) / (n * scale - 1)
            base = int(np.ceil(x_o)) - 1
            ratio = x_o - base
            ks = np.arange(first, 2 - first)
            w = np.clip(1 - np.abs((ks - ratio) * s), 0, 1)
            for k, wk in zip(ks, w / w.sum()):
                rows[i, min(max(base + k, 0), n - 1)] += wk
        y = np.moveaxis(np.tensordot(rows, np.moveaxis(y, axis, 0), axes=1), 0, axis)
    return y.astype(x.dtype)


def grid_samples(c):
    x4 = randn(1, 2, 5, 6)
    grid4 = (RNG.random((1, 4, 3, 2)) * 2.4 - 1.2).astype(F)
    for mode in ("linear", "nearest", "cubic"):
        for pad in ("zeros", "border", "reflection"):
            for align in (0, 1):
                c.add(f"grid_sample_{mode}_{pad}_align{align}", 20,
                      [helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad,
                                        align_corners=align)], [("x", x4), ("g", grid4)], [("y", F)])
    x5 = randn(1, 2, 3, 4, 5)
    grid5 = (RNG.random((1, 2, 3, 4, 3)) * 2.4 - 1.2).astype(F)
    for mode in ("linear", "nearest"):
        for pad in ("zeros", "border", "reflection"):
            c.add(f"grid_sample_3d_{mode}_{pad}", 20,
                  [helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad)],
                  [("x", x5), ("g", grid5)], [("y", F)])
    c.add("grid_sample_bilinear_16", 16, [helper.make_node("GridSample", ["x", "g"], ["y"], mode="bilinear")],
          [("x", x4), ("g", grid4)], [("y", F, (1, 2, 4, 3))])


def signals(c):
    real = randn(2, 8, 1)
    cplx = randn(2, 8, 2)
    c.unary("dft_axis_input", 20, "DFT", cplx, extra_inputs=[("", None), ("axis", np.array(1, I64))])
    c.unary("dft_default_axis", 20, "DFT", randn(3, 6, 2))
    c.unary("dft_real_onesided", 20, "DFT", real, onesided=1, extra_inputs=[("", None), ("axis", np.array(1, I64))])
    c.unary("dft_inverse", 20, "DFT", cplx, inverse=1, extra_inputs=[("", None), ("axis", np.array(-2, I64))])
    c.unary("dft_length_pad", 20, "DFT", cplx, extra_inputs=[("len", np.array(10, I64)), ("axis", np.array(1, I64))])
    c.unary("dft_length_crop", 20, "DFT", real, extra_inputs=[("len", np.array(5, I64)), ("axis", np.array(1, I64))])
    c.unary("dft_axis0", 20, "DFT", randn(5, 3, 2), extra_inputs=[("", None), ("axis", np.array(0, I64))])
    c.unary("dft_double", 20, "DFT", cplx.astype(D), extra_inputs=[("", None), ("axis", np.array(1, I64))])
    c.unary("dft_onesided_length", 20, "DFT", real, onesided=1,
            extra_inputs=[("len", np.array(6, I64)), ("axis", np.array(1, I64))])
    c.add("dft_17", 17, [helper.make_node("DFT", ["x"], ["y"], axis=1)], [("x", cplx)], [("y", F, (2, 8, 2))])


def predicates(c):
    v = np.array([1.0, np.inf, -np.inf, np.nan, 0.0, -2.5], F)
    for dtype in (F, D, F16):
        name = np.dtype(dtype).name
        c.unary(f"isinf_{name}", 20, "IsInf", v.astype(dtype), out_dtype=bool)
        c.unary(f"isinf_pos_{name}", 20, "IsInf", v.astype(dtype), out_dtype=bool, detect_negative=0)
        c.unary(f"isinf_neg_{name}", 20, "IsInf", v.astype(dtype), out_dtype=bool, detect_positive=0)
        c.unary(f"isnan_{name}", 20, "IsNaN", v.astype(dtype), out_dtype=bool)


def more_types_and_edges(c):
    """Other element types, ranks and edge values of the same ops."""
    x = randn(2, 3, 4)
    seq = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"])]
    for opset in (18, 21):
        c.add("optional_has_element_sequence", opset, seq + [helper.make_node("OptionalHasElement", ["s"], ["y"])],
              [("x", x)], [("y", bool)])
        c.add("optional_get_element_sequence", opset,
              seq + [helper.make_node("OptionalGetElement", ["s"], ["e"]),
                     helper.make_node("ConcatFromSequence", ["e"], ["y"], axis=0)], [("x", x)], [("y", F)])
        c.add("optional_empty", opset,
              [helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(TensorProto.FLOAT, None)),
               helper.make_node("OptionalHasElement", ["o"], ["y"])], [], [("y", bool)])
        c.add("identity_sequence", opset,
              seq + [helper.make_node("Identity", ["s"], ["t"]),
                     helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=1, new_axis=1)], [("x", x)],
              [("y", F)])
    c.unary("mish_extremes", 18, "Mish", np.array([-100, -20, -1e-3, 0, 1e-3, 15, 25, 100], F))
    i64 = ints(3, 4, 5, dtype=I64, low=-9, high=9)
    for op in ("ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceL1", "ReduceSumSquare"):
        c.unary(f"{op[6:].lower()}_int64", 18, op, i64 if op != "ReduceProd" else i64 % 3,
                extra_inputs=[("axes", np.array([-1, 0], I64))], keepdims=0)
    c.unary("reduce_sum_int32_noop", 18, "ReduceSum", i64.astype(np.int32), noop_with_empty_axes=1)
    c.unary("reduce_log_sum_exp_double", 18, "ReduceLogSumExp", x.astype(D) * 30,
            extra_inputs=[("axes", np.array([1], I64))])
    c.unary("pad_reflect_neg_axes_int", 18, "Pad", i64, mode="reflect",
            extra_inputs=[("pads", np.array([2, 1, 3, 0], I64)), ("", None), ("axes", np.array([-1, -3], I64))])
    c.unary("pad_wrap_int64", 19, "Pad", i64, mode="wrap", extra_inputs=[("pads", np.array([1, 0, 2, 0, 3, 1], I64))])
    c.unary("pad_edge_axes_double", 18, "Pad", x.astype(D), mode="edge",
            extra_inputs=[("pads", np.array([3, 2], I64)), ("", None), ("axes", np.array([1], I64))])
    c.unary("center_crop_pad_int", 18, "CenterCropPad", i64, extra_inputs=[("shape", np.array([2, 7], I64))],
            axes=[0, 2])
    for dtype in (np.int16, np.uint32, np.uint64):
        c.unary(f"bitwisenot_{np.dtype(dtype).name}", 18, "BitwiseNot", ints(7, dtype=dtype, low=0, high=1000))
    c.unary("shape_start_after_end", 19, "Shape", x, out_dtype=I64, start=2, end=1)
    c.unary("shape_clamped", 19, "Shape", x, out_dtype=I64, start=-10, end=10)
    c.add("constant_of_shape_scalar", 20,
          [helper.make_node("ConstantOfShape", ["shape"], ["y"], value=helper.make_tensor("v", TensorProto.INT32,
                                                                                         [1], [7]))],
          [], [("y", np.int32)], [("shape", np.zeros(0, I64))])
    c.add("constant_of_shape_empty", 20, [helper.make_node("ConstantOfShape", ["shape"], ["y"])], [], [("y", F)],
          [("shape", np.array([2, 0], I64))])
    data, idx = ints(3, 5, dtype=np.int32), np.array([[-1, 0, 4], [2, -5, 1]], I64)
    for red in ("max", "min"):
        c.add(f"scatter_elements_{red}_axis1_neg_indices", 18,
              [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction=red)],
              [("d", data), ("i", idx), ("u", ints(2, 3, dtype=np.int32))], [("y", np.int32)])
    q3 = randn(1, 2, 6, 7, 5)
    c.unary("average_pool_3d_dilations", 19, "AveragePool", q3, kernel_shape=[2, 2, 2], dilations=[2, 1, 2])
    same_in = randn(1, 2, 7, 8)
    c.unary("average_pool_dilations_same_upper", 19, "AveragePool", same_in, kernel_shape=[3, 3], dilations=[2, 2],
            auto_pad="SAME_UPPER", expected=dilated_same_average(same_in, 3, 2),
            ort_wrong="ONNX Runtime 1.30 sizes SAME padding for the undilated kernel (its output is 5x6, not 7x8)")
    c.unary("lp_pool_1d_dilations", 18, "LpPool", randn(1, 3, 12), kernel_shape=[3], dilations=[2], p=2, ceil_mode=1,
            strides=[2])
    c.unary("lp_pool_3d", 18, "LpPool", q3, kernel_shape=[2, 2, 2], p=1)
    c.unary("group_normalization_1d_groups_c", 21, "GroupNormalization", randn(3, 4, 7),
            extra_inputs=[("scale", randn(4)), ("bias", randn(4))], num_groups=4)
    c.unary("col2im_batch", 18, "Col2Im", randn(2, 3 * 4, 6),
            extra_inputs=[("image_shape", np.array([3, 4], I64)), ("block_shape", np.array([2, 2], I64))])
    c.add("grid_sample_double", 20, [helper.make_node("GridSample", ["x", "g"], ["y"], mode="linear")],
          [("x", randn(1, 2, 5, 6, dtype=D)), ("g", (RNG.random((1, 3, 4, 2)) * 2 - 1).astype(D))], [("y", D)])
    c.unary("affine_grid_double", 20, "AffineGrid", randn(2, 2, 3, dtype=D),
            extra_inputs=[("size", np.array([2, 1, 3, 4], I64))])
    c.unary("deform_conv_bias_only", 19, "DeformConv", randn(2, 3, 5, 5),
            extra_inputs=[("w", randn(4, 3, 2, 2)), ("off", randn(2, 8, 4, 4)), ("b", randn(4))])
    c.add("split_num_outputs_int", 18, [helper.make_node("Split", ["s"], ["a", "b"], axis=0, num_outputs=2)],
          [("s", ints(4, 6, dtype=I64))], [("a", I64), ("b", I64)])


def dilated_same_average(x, k, d):
    """AveragePool, stride 1, SAME_UPPER, square kernel k dilated by d, padding not counted: the
    output keeps the input's extent and the (k - 1) d pad is split evenly (odd: more at the end)."""
    total = (k - 1) * d
    begin = total // 2
    h, w = x.shape[2:]
    y = np.zeros_like(x)
    for r in range(h):
        for col in range(w):
            rows = [r - begin + i * d for i in range(k) if 0 <= r - begin + i * d < h]
            cols = [col - begin + j * d for j in range(k) if 0 <= col - begin + j * d < w]
            y[:, :, r, col] = x[:, :, rows][:, :, :, cols].mean(axis=(2, 3))
    return y


def make_cases(root):
    c = Cases(root)
    for family in (new_ops, reductions, movement, scatters, pools, resizes, grid_samples, signals, predicates,
                   more_types_and_edges):
        family(c)
    return c.names


def main():
    return make_opset_models.run_cases(make_cases, "kiln-opset18-models-", modes=([], ["--reference"]), ort=True)


if __name__ == "__main__":
    sys.exit(main())
