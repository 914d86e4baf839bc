#!/usr/bin/env python3
"""Models of opsets 1, 3, 5 and 6 built with onnx.helper, using ops whose meaning changed
before opset 7 (legacy broadcast with axis, consumed_inputs, BatchNormalization's spatial and
is_test, Reshape's shape attribute, Concat without axis, Dropout's is_test, Pad's paddings,
Slice's attributes, Cast's string `to`, Upsample-1, PRelu's per-channel slope), with numpy's
expected outputs, in the node-test layout, run by kiln-conformance with every case on the
pass list: Kiln upgrades each to opset 7 on import (libonnx's version converter and Kiln's
legacy rewrites, compiler/frontend/onnx/legacy_opset.cc) and must match. Then a model Kiln
cannot read must be refused with an error naming its node, op and opset.

  make_old_opset_models.py KILN_CONFORMANCE [--keep DIR]
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

import make_opset_models

RNG = np.random.default_rng(6)


def save_case(root, name, opset, nodes, inputs, outputs):
    """inputs/outputs: [(name, array)], the test data; IR version 3 (that of opset 1 to 6
    exporters), so constants are Constant nodes, not initializers."""
    return make_opset_models.save_case(root, name, opset, nodes, inputs, outputs, ir_version=3)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def constant(name, array):
    return node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def broadcast_cases(root):
    a, b3, b2 = randn(2, 3, 4, 5), randn(3, 4), randn(2)
    x3, s = randn(2, 3, 4), randn(5)
    pos = np.abs(randn(2, 3, 4)) + 0.5
    yield save_case(root, "old_add_axis_opset1", 1, [node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)],
                    [("a", a), ("b", b3)], [("y", a + b3[None, :, :, None])])
    yield save_case(root, "old_sub_axis0_opset6", 6, [node("Sub", ["a", "b"], ["y"], broadcast=1, axis=0)],
                    [("a", x3), ("b", b2)], [("y", x3 - b2[:, None, None])])
    yield save_case(root, "old_mul_suffix_consumed_opset1", 1,
                    [node("Mul", ["a", "b"], ["y"], broadcast=1, consumed_inputs=[0, 0])],
                    [("a", a), ("b", s)], [("y", a * s)])
    yield save_case(root, "old_div_scalar_opset5", 5,
                    [constant("two", np.array(2.0, np.float32)), node("Div", ["a", "two"], ["y"], broadcast=1)],
                    [("a", x3)], [("y", x3 / 2)])
    yield save_case(root, "old_pow_axis_opset1", 1, [node("Pow", ["x", "e"], ["y"], broadcast=1, axis=1)],
                    [("x", pos), ("e", np.array([1.0, 2.0, 0.5], np.float32))],
                    [("y", np.power(pos, np.array([1.0, 2.0, 0.5], np.float32)[None, :, None]))])
    m, k, n = randn(2, 3), randn(3, 4), randn(4)
    yield save_case(root, "old_gemm_broadcast_opset1", 1,
                    [node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0, broadcast=1)],
                    [("a", m), ("b", k), ("c", n)], [("y", 0.5 * m @ k + 2.0 * n)])
    yield save_case(root, "old_gemm_broadcast_opset6", 6,
                    [node("Gemm", ["a", "b", "c"], ["y"], transB=1, broadcast=1)],
                    [("a", m), ("b", k.T.copy()), ("c", n)], [("y", m @ k + n)])
    p, q, r = randn(2, 3), randn(2, 3), randn(2, 3)
    yield save_case(root, "old_sum_max_consumed_opset1", 1,
                    [node("Sum", ["p", "q", "r"], ["s"], consumed_inputs=[0, 0, 0]),
                     node("Max", ["s", "q"], ["y"], consumed_inputs=[0, 0])],
                    [("p", p), ("q", q), ("r", r)], [("y", np.maximum(p + q + r, q))])


def batchnorm(x, scale, bias, mean, var, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) +
            bias.reshape(shape)).astype(np.float32)


def normalisation_cases(root):
    x = randn(2, 3, 4, 5)
    scale, bias, mean = randn(3), randn(3), randn(3)
    var = np.abs(randn(3)) + 0.5
    params = [("scale", scale), ("bias", bias), ("mean", mean), ("var", var)]
    names = ["x"] + [n for n, _ in params]
    yield save_case(root, "old_batchnorm_consumed_opset1", 1,
                    [node("BatchNormalization", names, ["y"], consumed_inputs=[0, 0, 0, 1, 1], is_test=1, spatial=1,
                          epsilon=1e-3)],
                    [("x", x)] + params, [("y", batchnorm(x, scale, bias, mean, var, 1e-3))])
    yield save_case(root, "old_batchnorm_is_test_opset6", 6,
                    [node("BatchNormalization", names, ["y"], is_test=1, epsilon=1e-5)],
                    [("x", x)] + params, [("y", batchnorm(x, scale, bias, mean, var, 1e-5))])
    # spatial=0: one mean and variance per activation, of shape [C, H, W].
    s, b, mu = randn(3, 4, 5), randn(3, 4, 5), randn(3, 4, 5)
    v = np.abs(randn(3, 4, 5)) + 0.5
    yield save_case(root, "old_batchnorm_per_activation_opset6", 6,
                    [node("BatchNormalization", names, ["y"], is_test=1, spatial=0, epsilon=1e-5)],
                    [("x", x), ("scale", s), ("bias", b), ("mean", mu), ("var", v)],
                    [("y", ((x - mu) / np.sqrt(v + 1e-5) * s + b).astype(np.float32))])
    slope = np.array([0.1, -0.2, 0.3], np.float32)
    yield save_case(root, "old_prelu_per_channel_opset1", 1, [node("PRelu", ["x", "slope"], ["y"])],
                    [("x", x), ("slope", slope)], [("y", np.where(x > 0, x, x * slope[None, :, None, None]))])
    z = randn(2, 3, 4)
    e = np.exp(z.reshape(2, 12) - z.reshape(2, 12).max(axis=1, keepdims=True))
    yield save_case(root, "old_softmax_coerced_2d_opset1", 1, [node("Softmax", ["x"], ["y"], axis=1)],
                    [("x", z)], [("y", (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4))])
    yield save_case(root, "old_dropout_is_test_opset6", 6,
                    [node("Dropout", ["x"], ["d"], is_test=1, ratio=0.3), node("Relu", ["d"], ["y"])],
                    [("x", z)], [("y", np.maximum(z, 0))])
    yield save_case(root, "old_dropout_consumed_opset1", 1,
                    [node("Dropout", ["x"], ["y"], is_test=1, consumed_inputs=[0])], [("x", z)], [("y", z)])


def shape_cases(root):
    x = randn(2, 3, 4)
    yield save_case(root, "old_reshape_attribute_opset1", 1, [node("Reshape", ["x"], ["y"], shape=[4, 0, -1])],
                    [("x", x)], [("y", x.reshape(4, 3, 2))])
    yield save_case(root, "old_reshape_int64_constant_opset5", 5,
                    [constant("shape", np.array([6, -1], np.int64)), node("Reshape", ["x", "shape"], ["y"])],
                    [("x", x)], [("y", x.reshape(6, 4))])
    u = randn(2, 5, 4)
    for opset in (1, 3):
        yield save_case(root, f"old_concat_default_axis_opset{opset}", opset, [node("Concat", ["x", "u"], ["y"])],
                        [("x", x), ("u", u)], [("y", np.concatenate([x, u], axis=1))])
    yield save_case(root, "old_pad_paddings_opset1", 1,
                    [node("Pad", ["x"], ["y"], paddings=[0, 1, 2, 0, 0, 1], value=1.5)], [("x", x)],
                    [("y", np.pad(x, [(0, 0), (1, 0), (2, 1)], constant_values=1.5))])
    yield save_case(root, "old_pad_reflect_opset1", 1,
                    [node("Pad", ["x"], ["y"], paddings=[0, 0, 1, 0, 0, 2], mode="reflect")], [("x", x)],
                    [("y", np.pad(x, [(0, 0), (0, 0), (1, 2)], mode="reflect"))])
    yield save_case(root, "old_slice_attributes_opset1", 1,
                    [node("Slice", ["x"], ["y"], axes=[1, 2], starts=[1, 0], ends=[3, -1])], [("x", x)],
                    [("y", x[:, 1:3, 0:-1])])
    image = randn(1, 2, 3, 4)
    yield save_case(root, "old_upsample_nearest_opset1", 1,
                    [node("Upsample", ["x"], ["y"], height_scale=2.0, width_scale=3.0, mode="nearest")],
                    [("x", image)], [("y", image.repeat(2, axis=2).repeat(3, axis=3))])
    # Split-1 takes the lengths as an input (from opset 2 an attribute).
    yield save_case(root, "old_split_input_opset1", 1,
                    [constant("lengths", np.array([1, 3], np.int64)),
                     node("Split", ["x", "lengths"], ["s0", "s1"], axis=2)],
                    [("x", x)], [("s0", x[:, :, :1]), ("s1", x[:, :, 1:])])
    yield save_case(root, "old_lp_pool_float_p_opset1", 1,
                    [node("LpPool", ["x"], ["y"], p=2.0, kernel_shape=[3, 4])],
                    [("x", image)], [("y", np.sqrt((image**2).sum(axis=(2, 3), keepdims=True)))])
    ints = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    for opset in (1, 5):
        yield save_case(root, f"old_cast_string_to_opset{opset}", opset, [node("Cast", ["x"], ["y"], to="FLOAT")],
                        [("x", ints)], [("y", ints.astype(np.float32))])
    yield save_case(root, "old_cast_opset6", 6, [node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE)], [("x", ints)],
                    [("y", ints.astype(np.float64))])


def make_cases(root):
    cases = []
    for family in (broadcast_cases, normalisation_cases, shape_cases):
        cases.extend(family(root))
    return cases


def refusal_models():
    """(case, model, what the error must name): models Kiln cannot upgrade."""
    # A PRelu slope per channel whose input rank nothing states cannot be rewritten.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    slope = helper.make_tensor_value_info("slope", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node("PRelu", ["x", "slope"], ["y"], name="act")], "refused", [x, slope], [y])
    yield "old_prelu_unknown_rank_opset6", graph, 6, "node 'act' (PRelu, opset 6)"
    # Tile-1 (tiles and axis inputs): no opset-7 form is written.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    tiles = helper.make_tensor_value_info("tiles", TensorProto.INT64, [])
    axis = helper.make_tensor_value_info("axis", TensorProto.INT64, [])
    graph = helper.make_graph([node("Tile", ["x", "tiles", "axis"], ["y"], name="tile")], "refused", [x, tiles, axis],
                              [y])
    yield "old_tile_axis_opset5", graph, 5, "node 'tile' (Tile, opset 5)"


def check_refusal(kiln_conformance, root):
    """Each refusal names the node, the op and the opset."""
    ok = True
    for name, graph, opset, expected in refusal_models():
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 3
        case = os.path.join(root, "refused", name)
        os.makedirs(os.path.join(case, "test_data_set_0"))
        onnx.save(model, os.path.join(case, "model.onnx"))
        run = subprocess.run([kiln_conformance, "--data", os.path.dirname(case), "--filter", name, "--verbose"],
                             capture_output=True, text=True)
        if expected not in run.stdout + run.stderr:
            print(f"{name}: the refusal does not name {expected}:\n{run.stdout}{run.stderr}")
            ok = False
        else:
            print(f"{name}: refused as expected, naming {expected}")
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("conformance", help="the kiln-conformance binary")
    parser.add_argument("--keep", help="write the cases here and keep them")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="kiln-old-opset-models-")
    if args.keep:
        shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    try:
        cases_root = os.path.join(root, "cases")
        os.makedirs(cases_root)
        cases = make_cases(cases_root)
        pass_list = os.path.join(root, "pass_list.txt")
        with open(pass_list, "w") as f:
            f.write("\n".join(sorted(cases)) + "\n")
        run = subprocess.run([args.conformance, "--data", cases_root, "--pass-list", pass_list, "--verbose"])
        refused = check_refusal(args.conformance, root)
        return run.returncode or (0 if refused else 1)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
