#!/usr/bin/env python3
"""kiln-model-check --ranked-by: a detector's outputs (boxes, scores sorted best first,
labels) whose "framework" outputs have two rows in the other order.

Faster R-CNN's detections 98 and 99 score 7.8e-7 apart (1.1e-5 of the score), so any
other summation order in one of its convs may swap them: compared in place, that read as
boxes 190 pixels off and a wrong label. Checks that
  - rows swapped within near-tied scores pass with --ranked-by and fail without it;
  - rows swapped whose scores differ by more than the tolerance still fail with it;
  - a wrong box inside a tied run still fails with it.
  ranked_outputs.py KILN_MODEL_CHECK WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def main():
    check, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    n = 8
    # The graph passes its inputs through (Identity): compiled and reference agree exactly,
    # so only the --expected files differ from them.
    nodes = [helper.make_node("Identity", [i], [o]) for i, o in
             (("b", "boxes"), ("s", "scores"), ("l", "labels"))]
    graph = helper.make_graph(nodes, "detector", [
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, 4]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [n]),
        helper.make_tensor_value_info("l", TensorProto.INT64, [n])], [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [n, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [n]),
        helper.make_tensor_value_info("labels", TensorProto.INT64, [n])])
    model = os.path.join(work, "detector.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    rng = np.random.default_rng(7)
    boxes = (rng.random((n, 4)) * 300).astype(np.float32)
    scores = np.array([0.9, 0.8, 0.5, 0.3, 0.0719288, 0.0719281, 0.05, 0.01], np.float32)
    labels = np.array([3, 1, 7, 2, 1, 39, 5, 5], np.int64)
    inputs = []
    for array, name in ((boxes, "b"), (scores, "s"), (labels, "l")):
        inputs += ["--input", os.path.join(work, name + ".pb")]
        write(inputs[-1], array, name)

    def run(case, order, ranked, want_ok, box_error=0.0):
        expected = []
        for i, (array, name) in enumerate(((boxes, "boxes"), (scores, "scores"), (labels, "labels"))):
            array = array[order].copy()
            if name == "boxes":
                array[4, 0] += box_error
            expected += ["--expected", os.path.join(work, "%s_%d.pb" % (case, i))]
            write(expected[-1], array, name)
        cmd = [check, model] + inputs + expected + (["--ranked-by", "1"] if ranked else [])
        done = subprocess.run(cmd, capture_output=True, text=True)
        ok = done.returncode == 0
        print("%-40s %s (expected %s)" % (case, "pass" if ok else "fail", "pass" if want_ok else "fail"))
        if ok != want_ok:
            print(done.stdout + done.stderr)
            return False
        return True

    tied = [0, 1, 2, 3, 5, 4, 6, 7]  # 4 and 5: 7e-7 apart
    apart = [0, 2, 1, 3, 4, 5, 6, 7]  # 1 and 2: 0.3 apart
    good = all([
        run("tied_rows_swapped_ranked", tied, True, True),
        run("tied_rows_swapped_in_place", tied, False, False),
        run("distinct_rows_swapped_ranked", apart, True, False),
        run("tied_rows_swapped_wrong_box_ranked", tied, True, False, box_error=5.0),
        run("in_order_ranked", list(range(n)), True, True),
    ])
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
