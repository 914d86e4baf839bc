#!/usr/bin/env python3
"""Models for the service's end-to-end tests, written with onnx.helper (no torch).

  make_test_models.py chain OUT.onnx --layers N --width W --seed S
      N x (MatMul + Add + Relu) over [1, W] with random weights: compile time grows with
      N (a slow job for cancel, kill and limit tests); different seeds give different
      bytes, so different action keys.
  make_test_models.py classifier OUT.onnx --seed S
      a small MLP ending in Softmax over 10 classes.
  make_test_models.py unsupported OUT.onnx
      an opset 21 model with four constructs Kiln cannot compile, each on its own path
      (UNSUPPORTED_NODES): kiln compile --check and a failed job must list them all.
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def chain(layers, width, seed, classes=None, batch=1):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "input"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        b = (rng.standard_normal(width) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"], name=f"matmul_{i}"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"add_{i}"),
            helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"relu_{i}"),
        ]
        x = f"relu{i}"
    out_width = width
    if classes:
        w = (rng.standard_normal((width, classes)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "head"))
        nodes += [helper.make_node("MatMul", [x, "head"], ["logits"], name="head"),
                  helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1, name="softmax")]
        x, out_width = "probabilities", classes
    else:
        nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
        x = "output"
    graph = helper.make_graph(nodes, "e2e", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, out_width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-e2e")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# The nodes of `unsupported` Kiln cannot compile, and a word of each one's reason.
UNSUPPORTED_NODES = {
    "decode_image": "op 'ImageDecoder' is not supported",
    "cast_to_complex": "cast to element type complex64",
    "reshape_by_input": "static length",
    "vendor_op": "domain 'com.example' is not supported",
}


def unsupported():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    # A shape of unknown length: the output's rank is not known even at compile time.
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, ["n"])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="fine_relu"),
        helper.make_node("ImageDecoder", ["r"], ["u"], name="decode_image"),
        helper.make_node("Relu", ["u"], ["after_decode"], name="after_decode"),
        helper.make_node("Cast", ["x"], ["c"], name="cast_to_complex", to=TensorProto.COMPLEX64),
        helper.make_node("Reshape", ["x", "shape"], ["s"], name="reshape_by_input"),
        helper.make_node("Gelu", ["r"], ["g"], name="fine_gelu"),
        helper.make_node("VendorOp", ["x"], ["v"], name="vendor_op", domain="com.example"),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("after_decode", "s", "g", "v")]
    graph = helper.make_graph(nodes, "unsupported", [x, shape], outputs)
    # Opset 21: libonnx 1.12's checker knows opsets to 17, so none runs here.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="kiln-e2e")
    model.ir_version = 10
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["chain", "classifier", "unsupported", "dynamic"])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.kind == "chain":
        model = chain(args.layers, args.width, args.seed)
    elif args.kind == "dynamic":  # the classifier with a batch known only at run time
        model = chain(2, 32, args.seed, classes=10, batch="batch")
    elif args.kind == "unsupported":
        model = unsupported()
    else:
        model = chain(2, 32, args.seed, classes=10)
    onnx.save(model, args.out)


if __name__ == "__main__":
    main()
