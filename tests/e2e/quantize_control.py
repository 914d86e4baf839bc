#!/usr/bin/env python3
"""int8 calibration and pruning through control flow and run-time shapes: `kiln compile
--precision int8` and `--prune-weights` / `--prune-channels` on
  control:  Conv -> If(mean > 0: Conv in the branch, else Relu) -> Loop(3 x Conv, a weight
            captured from the main graph, a scan output) -> Conv -> Flatten -> MatMul
  dynamic:  the same main-graph Convs and MatMul with a symbolic batch axis, calibrated
            with samples of two batch sizes
The calibration run goes through the interpreter's If/Loop and run-time shapes; the int8
and pruned artifacts, and the control model's `kiln quantize --emit-qdq` QDQ model
(its bodies exported as ONNX subgraphs) compiled, must run (`kiln run`) and stay close to
the fp32 one.

  quantize_control.py PATH/TO/kiln [--work DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)


def weight(name, *dims):
    fan_in = int(np.prod(dims[1:]))
    return numpy_helper.from_array((RNG.standard_normal(dims) / np.sqrt(fan_in)).astype(np.float32), name)


def control_model():
    inits = [weight("w1", 8, 3, 3, 3), weight("w2", 8, 8, 3, 3), weight("w3", 8, 8, 3, 3), weight("w4", 8, 8, 3, 3),
             weight("fc", 8 * 8 * 8, 10), numpy_helper.from_array(np.array(3, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "yes"), numpy_helper.from_array(np.float32(0.0), "zero")]
    pads = [1, 1, 1, 1]
    then_graph = helper.make_graph(
        [helper.make_node("Conv", ["h1", "w2"], ["t"], name="then_conv", pads=pads)], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 8, 8, 8])])
    else_graph = helper.make_graph([helper.make_node("Relu", ["h1"], ["e"], name="else_relu")], "else", [],
                                   [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 8, 8, 8])])
    body = helper.make_graph(
        [helper.make_node("Conv", ["h", "w3"], ["hc"], name="body_conv", pads=pads),
         helper.make_node("Relu", ["hc"], ["hn"], name="body_relu"),
         helper.make_node("Identity", ["c"], ["c_out"], name="body_cond"),
         helper.make_node("ReduceMean", ["hn"], ["m"], name="body_mean", keepdims=0)], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("hn", TensorProto.FLOAT, [1, 8, 8, 8]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, [])])
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=pads),
        helper.make_node("Relu", ["c1"], ["h1"], name="relu1"),
        helper.make_node("ReduceMean", ["h1"], ["mean"], name="mean", keepdims=0),
        helper.make_node("Greater", ["mean", "zero"], ["up"], name="up"),
        helper.make_node("If", ["up"], ["branched"], name="branch", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Loop", ["trips", "yes", "branched"], ["looped", "means"], name="loop", body=body),
        helper.make_node("Conv", ["looped", "w4"], ["c4"], name="conv4", pads=pads),
        helper.make_node("Flatten", ["c4"], ["flat"], name="flatten"),
        helper.make_node("MatMul", ["flat", "fc"], ["logits"], name="fc"),
    ]
    graph = helper.make_graph(nodes, "control", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
                               helper.make_tensor_value_info("means", TensorProto.FLOAT, [None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def dynamic_model():
    inits = [weight("w1", 8, 3, 3, 3), weight("w2", 16, 8, 3, 3), weight("fc", 16, 10)]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["h1"], name="relu1"),
        helper.make_node("Conv", ["h1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["h2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["h2"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        helper.make_node("MatMul", ["flat", "fc"], ["logits"], name="fc"),
    ]
    graph = helper.make_graph(nodes, "dynamic",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def write_samples(directory, shapes):
    for k, shape in enumerate(shapes):
        os.makedirs(f"{directory}/sample_{k}")
        x = RNG.standard_normal(shape).astype(np.float32)
        with open(f"{directory}/sample_{k}/input_0.pb", "wb") as f:
            f.write(numpy_helper.from_array(x, "x").SerializeToString())


def load(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAILED ({result.returncode}): {' '.join(cmd)}\n{result.stdout}\n{result.stderr}")
    return result.stderr


def check(kiln, work, name, model, cal_shapes, run_shape, quantized):
    """`quantized`: whether int8 quantizes its Conv/MatMuls (a symbolic batch keeps them in
    f32, the compile saying why for each node)."""
    path = f"{work}/{name}.onnx"
    onnx.save(model, path)
    write_samples(f"{work}/{name}_cal", cal_shapes)
    x = RNG.standard_normal(run_shape).astype(np.float32)
    with open(f"{work}/{name}_x.pb", "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    builds = {
        "fp32": [],
        "int8": ["--precision", "int8", "--calibration", f"{work}/{name}_cal"],
        "sparse": ["--prune-weights", "0.3", "--calibration", f"{work}/{name}_cal"],
        "pruned": ["--prune-channels", "0.25", "--calibration", f"{work}/{name}_cal"],
    }
    outputs = {}
    for build, flags in builds.items():
        so = f"{work}/{name}_{build}.so"
        log = run([kiln, "compile", path, "-o", so, "--skip-latency", *flags])
        print(f"{name} {build}: " + " | ".join(l for l in log.splitlines() if "int8" in l or "prun" in l))
        if build == "int8" and quantized:
            assert "Conv/MatMul quantized" in log and " 0 Conv/MatMul quantized" not in log, log
            assert "then_conv (inside subgraph 'then_branch' of If 'branch': bodies stay f32)" in log, log
            assert "body_conv (inside subgraph 'body' of Loop 'loop': bodies stay f32)" in log, log
        if build == "int8" and not quantized:
            assert " 0 Conv/MatMul quantized" in log and "conv1 (its input's shape f32[batch,3,8,8] is known only " \
                "at run time" in log, log
        out_dir = f"{work}/{name}_{build}_out"
        run([kiln, "run", so, "--input", f"x={work}/{name}_x.pb", "--output-dir", out_dir])
        outputs[build] = load(f"{out_dir}/output_0.pb")
    if quantized:
        # kiln quantize --emit-qdq writes the bodies back as ONNX subgraphs reading the
        # enclosing values by name; the QDQ model checks and compiles.
        qdq = f"{work}/{name}_qdq.onnx"
        run([kiln, "quantize", path, "--emit-qdq", qdq, "--calibration", f"{work}/{name}_cal"])
        onnx.checker.check_model(onnx.load(qdq), full_check=True)
        run([kiln, "compile", qdq, "-o", f"{work}/{name}_qdq.so"])
        run([kiln, "run", f"{work}/{name}_qdq.so", "--input", f"x={work}/{name}_x.pb", "--output-dir",
             f"{work}/{name}_qdq_out"])
        outputs["qdq"] = load(f"{work}/{name}_qdq_out/output_0.pb")
    want = outputs["fp32"]
    scale = max(1.0, float(np.abs(want).max()))
    for build in [b for b in ("int8", "sparse", "pruned", "qdq") if b in outputs]:
        err = float(np.abs(outputs[build] - want).max()) / scale
        print(f"{name} {build}: max error {err:.4f} (relative to {scale:.2f})")
        assert outputs[build].shape == want.shape, (build, outputs[build].shape, want.shape)
        assert err < 0.5, (name, build, err)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kiln")
    parser.add_argument("--work")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="kiln_quantize_control_")
    os.makedirs(work, exist_ok=True)
    check(args.kiln, work, "control", control_model(), [(1, 3, 8, 8)] * 4, (1, 3, 8, 8), True)
    check(args.kiln, work, "dynamic", dynamic_model(), [(2, 3, 8, 8), (3, 3, 8, 8)], (5, 3, 8, 8), False)
    print("ok")


if __name__ == "__main__":
    main()
