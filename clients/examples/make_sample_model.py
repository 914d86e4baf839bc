#!/usr/bin/python3
"""Writes the bundled sample model: a small CNN classifier (Conv-BN-Relu x2, pool, Gemm,
Softmax) with seeded random weights, opset 13. Usage: make_sample_model.py OUT.onnx"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def weight(name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def batchnorm(prefix, channels):
    return [
        numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32), prefix + "_scale"),
        numpy_helper.from_array(rng.uniform(-0.2, 0.2, channels).astype(np.float32), prefix + "_bias"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, channels).astype(np.float32), prefix + "_mean"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32), prefix + "_var"),
    ]


def main(path):
    inits = [weight("w1", [8, 3, 3, 3]), weight("b1", [8], 0.1), *batchnorm("bn1", 8),
             weight("w2", [16, 8, 3, 3], 0.15), *batchnorm("bn2", 16),
             weight("fc_w", [10, 16], 0.3), weight("fc_b", [10], 0.1)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1_scale", "bn1_bias", "bn1_mean", "bn1_var"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn2_scale", "bn2_bias", "bn2_mean", "bn2_var"], ["n2"], name="bn2"),
        helper.make_node("Relu", ["n2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "sample_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-sample")
    onnx.checker.check_model(model)
    onnx.save(model, path)
    # A matching input, so `kiln run` has something to read.
    sample = rng.standard_normal([1, 3, 32, 32]).astype(np.float32)
    with open(path[:-5] + ".input.pb", "wb") as f:
        f.write(numpy_helper.from_array(sample, "input").SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sample.onnx")
