#!/usr/bin/env python3
"""Models of opsets 18 to 21 built with onnx.helper (libonnx 1.12 has no schemas past 17, so
no checker), with numpy's expected outputs, in the node-test layout (model.onnx,
test_data_set_0/{input,output}_N.pb), run by kiln-conformance with every case on the pass
list: each must compile and match.

  make_opset_models.py KILN_CONFORMANCE [--keep DIR]
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(21)


def save_case(root, name, opset, nodes, inputs, outputs, initializers=(), ir_version=8):
    """inputs/outputs: [(name, array)]; the arrays are the test data. ir_version 3 is that of
    opset 1 to 6 exporters (constants as Constant nodes, no initializers)."""
    def info(n, a):
        return helper.make_tensor_value_info(n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype], a.shape)

    graph = helper.make_graph(nodes, name, [info(n, a) for n, a in inputs], [info(n, a) for n, a in outputs],
                              [numpy_helper.from_array(a, n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    case = os.path.join(root, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for i, (n, a) in enumerate(tensors):
            with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(a, n).SerializeToString())
    return name


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv(x, w):  # NCHW, no padding, stride 1
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    y = np.zeros((n, o, h - kh + 1, wd - kw + 1), np.float32)
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,oc->nohw", x[:, :, i:i + y.shape[2], j:j + y.shape[3]], w[:, :, i, j])
    return y


def group_norm(x, scale, bias, groups, eps, per_channel):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    norm = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    if not per_channel:  # opset 18: scale and bias per group
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return (norm * scale.reshape(shape) + bias.reshape(shape)).astype(np.float32)


def make_cases(root):
    cases = []
    x = randn(1, 3, 7, 6)
    w = randn(4, 3, 3, 3)
    for opset in (18, 19, 20, 21):
        cases.append(save_case(root, f"opset{opset}_conv", opset, [helper.make_node("Conv", ["x", "w"], ["y"])],
                               [("x", x)], [("y", conv(x, w))], [("w", w)]))
    a = randn(2, 3, 4)
    axes = np.array([0, 2], np.int64)
    cases.append(save_case(root, "opset18_reduce_mean_axes_input", 18,
                           [helper.make_node("ReduceMean", ["a", "axes"], ["y"], keepdims=0)], [("a", a)],
                           [("y", a.mean(axis=(0, 2)))], [("axes", axes)]))
    cases.append(save_case(root, "opset18_reduce_max_no_axes", 18, [helper.make_node("ReduceMax", ["a"], ["y"])],
                           [("a", a)], [("y", a.max(keepdims=True))]))
    cases.append(save_case(root, "opset18_reduce_l2_noop_empty_axes", 18,
                           [helper.make_node("ReduceL2", ["a"], ["y"], noop_with_empty_axes=1)], [("a", a)],
                           [("y", np.abs(a))]))
    s = randn(2, 7)
    cases.append(save_case(root, "opset18_split_num_outputs", 18,
                           [helper.make_node("Split", ["s"], ["p", "q", "r"], axis=1, num_outputs=3)], [("s", s)],
                           [("p", s[:, :3]), ("q", s[:, 3:6]), ("r", s[:, 6:])]))
    p = randn(2, 3, 4)
    pads = np.array([1, 0, 2, 1], np.int64)  # axes 2 and 0: begin 1, 0; end 2, 1
    cases.append(save_case(root, "opset18_pad_axes", 18,
                           [helper.make_node("Pad", ["p", "pads", "", "axes"], ["y"])], [("p", p)],
                           [("y", np.pad(p, [(0, 1), (0, 0), (1, 2)]))],
                           [("pads", pads), ("axes", np.array([2, 0], np.int64))]))
    cases.append(save_case(root, "opset19_pad_wrap", 19,
                           [helper.make_node("Pad", ["p", "pads"], ["y"], mode="wrap")], [("p", p)],
                           [("y", np.pad(p, [(0, 0), (1, 1), (2, 3)], mode="wrap"))],
                           [("pads", np.array([0, 1, 2, 0, 1, 3], np.int64))]))
    g = randn(2, 5)
    cases.append(save_case(root, "opset20_gelu", 20, [helper.make_node("Gelu", ["g"], ["y"])], [("g", g)],
                           [("y", (0.5 * g * (1 + np.vectorize(math.erf)(g / math.sqrt(2)))).astype(np.float32))]))
    tanh_gelu = 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
    cases.append(save_case(root, "opset20_gelu_tanh", 20, [helper.make_node("Gelu", ["g"], ["y"], approximate="tanh")],
                           [("g", g)], [("y", tanh_gelu.astype(np.float32))]))
    cases.append(save_case(root, "opset18_mish", 18, [helper.make_node("Mish", ["g"], ["y"])], [("g", g)],
                           [("y", (g * np.tanh(np.log1p(np.exp(g)))).astype(np.float32))]))
    gx = randn(2, 6, 3, 2)
    for opset, per_channel in ((18, False), (21, True)):
        n = 6 if per_channel else 3
        scale, bias = randn(n), randn(n)
        cases.append(save_case(root, f"opset{opset}_group_normalization", opset,
                               [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=3,
                                                 epsilon=1e-4)], [("x", gx)],
                               [("y", group_norm(gx, scale, bias, 3, 1e-4, per_channel))],
                               [("scale", scale), ("bias", bias)]))
    i, j = RNG.integers(-100, 100, (3, 4), dtype=np.int32), RNG.integers(-100, 100, (4,), dtype=np.int32)
    for op, fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
        cases.append(save_case(root, f"opset18_{op.lower()}", 18, [helper.make_node(op, ["i", "j"], ["y"])],
                               [("i", i), ("j", j)], [("y", fn(i, j))]))
    u = RNG.integers(0, 255, (5,), dtype=np.uint8)
    cases.append(save_case(root, "opset18_bitwisenot", 18, [helper.make_node("BitwiseNot", ["u"], ["y"])],
                           [("u", u)], [("y", np.invert(u))]))
    c = randn(3, 5, 4)
    cases.append(save_case(root, "opset18_center_crop_pad", 18,
                           [helper.make_node("CenterCropPad", ["c", "shape"], ["y"], axes=[1, 2])], [("c", c)],
                           [("y", np.pad(c, [(0, 0), (0, 0), (1, 2)])[:, 1:4, :])],
                           [("shape", np.array([3, 7], np.int64))]))
    q = randn(1, 1, 7, 7)
    pooled = np.array([[q[0, 0, r:r + 3:2, s:s + 3:2].mean() for s in range(5)] for r in range(5)], np.float32)
    cases.append(save_case(root, "opset19_average_pool_dilations", 19,
                           [helper.make_node("AveragePool", ["q"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])],
                           [("q", q)], [("y", pooled.reshape(1, 1, 5, 5))]))
    flags = RNG.integers(0, 2, (3, 4)).astype(bool)
    cases.append(save_case(root, "opset20_reduce_max_bool", 20,
                           [helper.make_node("ReduceMax", ["b", "axes"], ["y"], keepdims=0)], [("b", flags)],
                           [("y", flags.max(axis=1))], [("axes", np.array([1], np.int64))]))
    data, updates = randn(3, 4), randn(2, 4)
    indices = np.array([[0, 1, 2, 0], [0, 1, 2, 0]], np.int64)
    scattered = data.copy()
    for r in range(2):
        for col in range(4):
            scattered[indices[r, col], col] = max(scattered[indices[r, col], col], updates[r, col])
    cases.append(save_case(root, "opset18_scatter_elements_max", 18,
                           [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction="max")],
                           [("d", data), ("i", indices), ("u", updates)], [("y", scattered)]))
    scale = np.array(0.05, np.float32)
    cases.append(save_case(root, "opset21_quantize_output_dtype", 21,
                           [helper.make_node("QuantizeLinear", ["v", "scale"], ["y"], output_dtype=TensorProto.INT8)],
                           [("v", data)],
                           [("y", np.clip(np.rint(data / scale), -128, 127).astype(np.int8))], [("scale", scale)]))
    lp_in = randn(1, 2, 5, 5)
    lp = np.array([[[np.sqrt((lp_in[0, c, r:r + 2, t:t + 2] ** 2).sum()) for t in range(0, 5, 2)]
                    for r in range(0, 5, 2)] for c in range(2)], np.float32)
    cases.append(save_case(root, "opset18_lp_pool_ceil_mode", 18,
                           [helper.make_node("LpPool", ["l"], ["y"], kernel_shape=[2, 2], strides=[2, 2], p=2,
                                             ceil_mode=1)], [("l", lp_in)], [("y", lp.reshape(1, 2, 3, 3))]))
    m = randn(2, 3)
    cases.append(save_case(root, "opset21_mix", 21,
                           [helper.make_node("ReduceSum", ["m", "axes"], ["r"], keepdims=1),
                            helper.make_node("Cast", ["r"], ["d"], to=TensorProto.DOUBLE, saturate=1),
                            helper.make_node("Gelu", ["d"], ["y"])], [("m", m)],
                           [("y", (lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2))))(
                               m.sum(1, keepdims=True).astype(np.float64)))],
                           [("axes", np.array([1], np.int64))]))
    return cases


def expect_ort_outputs(ort_run, root, cases):
    """Runs every case with ONNX Runtime (ort_run.js --cases), whose outputs replace numpy's;
    returns the cases that have expected outputs: those ONNX Runtime ran, and those it refuses
    that numpy answered."""
    wrong = {}  # case -> why ONNX Runtime's answer is wrong (CASE/ort_wrong.txt): numpy's stands
    for case in cases:
        if os.path.exists(os.path.join(root, case, "ort_wrong.txt")):
            with open(os.path.join(root, case, "ort_wrong.txt")) as f:
                wrong[case] = f.read().strip()
    skips = [a for case in wrong for a in ("--skip", case)]
    run = subprocess.run(["node", ort_run, "--cases", root, *skips], stdout=subprocess.PIPE, text=True, timeout=300,
                         check=True)
    refused = {}
    for line in run.stdout.splitlines():
        name, _, why = line.removeprefix("ORT refuses ").partition(": ")
        refused[name] = why
    kept = []
    for case, why in wrong.items():
        print(f"numpy's outputs stand for {case}: {why}")
    for case in cases:
        has_numpy = os.path.exists(os.path.join(root, case, "test_data_set_0", "output_0.pb"))
        if case in refused:
            print(f"ONNX Runtime refuses {case} ({'numpy answers instead' if has_numpy else 'dropped'}): "
                  f"{refused[case]}")
        if case not in refused or has_numpy:
            kept.append(case)
        else:
            shutil.rmtree(os.path.join(root, case))
    return kept


def run_cases(make_cases, prefix, modes=([],), ort=False):
    """The command line these scripts share (CONFORMANCE [--keep DIR], and --ort-run ORT_RUN_JS
    where ort): writes the cases that make_cases(root) names into a scratch directory, with
    ort takes their expected outputs from ONNX Runtime (expect_ort_outputs), and runs
    kiln-conformance on them in each mode ([] compiled, ["--reference"]), each case on the
    pass list; returns the exit status."""
    parser = argparse.ArgumentParser()
    parser.add_argument("conformance", help="the kiln-conformance binary")
    parser.add_argument("--keep", help="write the cases here and keep them")
    if ort:
        parser.add_argument("--ort-run", required=True, help="bench/ort_run.js (ONNX Runtime from npm)")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix=prefix)
    if args.keep:
        shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    try:
        cases = make_cases(root)
        if ort:
            cases = expect_ort_outputs(args.ort_run, root, cases)
        pass_list = os.path.join(root, "pass_list.txt")
        with open(pass_list, "w") as f:
            f.write("\n".join(cases) + "\n")
        status = 0
        for mode in modes:
            run = subprocess.run([args.conformance, *mode, "--data", root, "--pass-list", pass_list, "--verbose"],
                                 timeout=300)
            status = status or run.returncode
        return status
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def main():
    return run_cases(make_cases, "kiln-opset-models-")


if __name__ == "__main__":
    sys.exit(main())
