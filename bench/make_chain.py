#!/usr/bin/python3
"""Writes an ONNX model that is a chain of N nodes, for measuring how compile time grows
with graph size (bench/compile_time.sh).

    make_chain.py --nodes N OUT.onnx [--width W] [--seed S]

The chain repeats MatMul, Add, Relu, Mul, Sigmoid, Sub over a [4, W] activation, each
MatMul with its own weight and each Add/Mul/Sub with its own [W] constant, so every pass
has work (fusion folds the elementwise runs into loops, epilogues into the MatMuls) and
the compiled graph keeps about N/3 nodes.
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPS = ["MatMul", "Add", "Relu", "Mul", "Sigmoid", "Sub"]


def chain(nodes, width, seed):
    rng = np.random.default_rng(seed)
    graph_nodes, inits = [], []
    x = "x"
    for i in range(nodes):
        op = OPS[i % len(OPS)]
        y = f"v{i}"
        if op == "MatMul":
            w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            graph_nodes.append(helper.make_node(op, [x, f"w{i}"], [y], name=f"n{i}"))
        elif op in ("Add", "Mul", "Sub"):
            c = rng.standard_normal(width).astype(np.float32)
            inits.append(numpy_helper.from_array(c, f"c{i}"))
            graph_nodes.append(helper.make_node(op, [x, f"c{i}"], [y], name=f"n{i}"))
        else:
            graph_nodes.append(helper.make_node(op, [x], [y], name=f"n{i}"))
        x = y
    graph = helper.make_graph(graph_nodes, f"chain{nodes}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    model = chain(args.nodes, args.width, args.seed)
    onnx.checker.check_model(model)
    onnx.save(model, args.out)


if __name__ == "__main__":
    main()
