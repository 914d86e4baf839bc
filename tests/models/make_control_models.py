#!/usr/bin/env python3
"""Control-flow cases beyond the node tests, built with onnx.helper with numpy's expected
outputs in the node-test layout, run by kiln-conformance compiled and with --reference:
  test_cf_scan_axes   Scan (opset 11) with two scan inputs on different axes, one read in
                      reverse, scan outputs on axes 1 and -1 (one stacked in reverse) and a
                      main-graph value read in the body;
  test_cf_loop_while  Loop (opset 13) with no trip count (a while loop ended by its
                      condition), a scan output, and an If in the body reading loop inputs;
  test_cf_loop_zero   the same loop run no time: an empty scan output;
  test_cf_loop_seq_zero  Loop carrying a sequence run no time: the sequence given back;
  test_cf_seq_map_capture  SequenceMap with two outputs, a tensor input taken whole and a
                      main-graph value read in the body.

  make_control_models.py KILN_CONFORMANCE [--keep DIR]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

CASES = ["test_cf_loop_seq_zero", "test_cf_loop_while", "test_cf_loop_zero", "test_cf_scan_axes",
         "test_cf_seq_map_capture"]


def save(root, dirname, model, inputs, outputs):
    data = os.path.join(root, dirname, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(root, dirname, "model.onnx"))
    for kind, items in (("input", inputs), ("output", outputs)):
        for i, (n, a) in enumerate(items):
            proto = nh.from_list(a, n) if isinstance(a, list) else nh.from_array(a, n)
            with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())


def make_cases(root):
    rng = np.random.default_rng(0)
    # Scan: state s[2]; a [2,4] scanned along axis 1 in reverse, b [4,2] along axis 0; w, a
    # main-graph value, read in the body.
    body = h.make_graph([
        h.make_node("Mul", ["a_t", "w"], ["aw"]),
        h.make_node("Add", ["s_in", "aw"], ["t"]),
        h.make_node("Add", ["t", "b_t"], ["s_out"]),
        h.make_node("Identity", ["s_out"], ["y_t"]),
        h.make_node("Concat", ["s_out", "a_t"], ["z_t"], axis=0),
    ], "body",
        [h.make_tensor_value_info("s_in", T.FLOAT, [2]), h.make_tensor_value_info("a_t", T.FLOAT, [2]), h.make_tensor_value_info("b_t", T.FLOAT, [2])],
        [h.make_tensor_value_info("s_out", T.FLOAT, [2]), h.make_tensor_value_info("y_t", T.FLOAT, [2]), h.make_tensor_value_info("z_t", T.FLOAT, [4])])
    g = h.make_graph([
        h.make_node("Neg", ["v"], ["w"]),
        h.make_node("Scan", ["s0", "a", "b"], ["s", "y", "z"], body=body, num_scan_inputs=2,
                    scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[1, -1], scan_output_directions=[1, 0])],
        "scan_case",
        [h.make_tensor_value_info("s0", T.FLOAT, [2]), h.make_tensor_value_info("a", T.FLOAT, [2, 4]),
         h.make_tensor_value_info("b", T.FLOAT, [4, 2]), h.make_tensor_value_info("v", T.FLOAT, [2])],
        [h.make_tensor_value_info("s", T.FLOAT, [2]), h.make_tensor_value_info("y", T.FLOAT, [2, 4]), h.make_tensor_value_info("z", T.FLOAT, [4, 4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 11)])
    s0, a, b, v = [rng.standard_normal(sh).astype(np.float32) for sh in ([2], [2, 4], [4, 2], [2])]
    w = -v; s = s0.copy(); ys = []; zs = []
    for t in range(4):
        at = a[:, 3 - t]; bt = b[t]
        s = s + at * w + bt
        ys.append(s.copy()); zs.append(np.concatenate([s, at]))
    y = np.stack(ys[::-1], axis=1); z = np.stack(zs, axis=1)
    save(root, "test_cf_scan_axes", m, [("s0", s0), ("a", a), ("b", b), ("v", v)], [("s", s), ("y", y), ("z", z)])
    # Loop without a trip count (a while on its condition), a scan output, and an If in the
    # body reading a body input and a main-graph input (two levels up).
    then_g = h.make_graph([h.make_node("Add", ["x_in", "step"], ["x_then"])], "then", [], [h.make_tensor_value_info("x_then", T.FLOAT, [3])])
    else_g = h.make_graph([h.make_node("Sub", ["x_in", "step"], ["x_else"])], "else", [], [h.make_tensor_value_info("x_else", T.FLOAT, [3])])
    lbody = h.make_graph([
        h.make_node("Cast", ["i"], ["i_f"], to=T.FLOAT),
        h.make_node("Less", ["i_f", "half"], ["early"]),
        h.make_node("If", ["early"], ["x_out"], then_branch=then_g, else_branch=else_g),
        h.make_node("ReduceSum", ["x_out"], ["tot"], keepdims=0),
        h.make_node("Less", ["tot", "limit"], ["c_out"]),
        h.make_node("Mul", ["x_out", "x_out"], ["sq"]),
    ], "lbody",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []), h.make_tensor_value_info("x_in", T.FLOAT, [3])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [3]), h.make_tensor_value_info("sq", T.FLOAT, [3])])
    lg = h.make_graph([h.make_node("Loop", ["", "c0", "x0"], ["xf", "sqs"], body=lbody)], "loop_case",
        [h.make_tensor_value_info("c0", T.BOOL, []), h.make_tensor_value_info("x0", T.FLOAT, [3]), h.make_tensor_value_info("step", T.FLOAT, [3]),
         h.make_tensor_value_info("half", T.FLOAT, []), h.make_tensor_value_info("limit", T.FLOAT, [])],
        [h.make_tensor_value_info("xf", T.FLOAT, [3]), h.make_tensor_value_info("sqs", T.FLOAT, ["N", 3])])
    lm = h.make_model(lg, opset_imports=[h.make_opsetid("", 13)])
    x0 = np.array([0.5, -1.0, 2.0], np.float32); step = np.array([1.0, 0.5, 0.25], np.float32)
    half = np.array(3.0, np.float32); limit = np.array(6.0, np.float32)
    x = x0.copy(); sq = []; i = 0; c = True
    while c:
        x = x + step if i < half else x - step
        c = bool(x.sum() < limit); sq.append(x * x); i += 1
        if i > 100: break
    save(root, "test_cf_loop_while", lm, [("c0", np.array(True)), ("x0", x0), ("step", step), ("half", half), ("limit", limit)],
         [("xf", x), ("sqs", np.stack(sq))])
    # The same loop with a false condition: no iteration, the carried value as given and an
    # empty scan output of shape [0, 3].
    save(root, "test_cf_loop_zero", lm, [("c0", np.array(False)), ("x0", x0), ("step", step), ("half", half),
                                         ("limit", limit)], [("xf", x0), ("sqs", np.zeros((0, 3), np.float32))])
    make_sequence_cases(root, rng)


def make_sequence_cases(root, rng):
    seq_f = h.make_tensor_sequence_value_info  # (name, elem_type, shape)
    # Loop carrying a sequence, run no time (trip count 0): the given sequence comes back.
    body = h.make_graph([
        h.make_node("Identity", ["c"], ["c_out"]),
        h.make_node("SequenceInsert", ["s_in", "x"], ["s_out"]),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                seq_f("s_in", T.FLOAT, None)], [h.make_tensor_value_info("c_out", T.BOOL, []), seq_f("s_out", T.FLOAT, None)])
    g = h.make_graph([h.make_node("Loop", ["n", "", "s0"], ["s"], body=body)], "loop_seq",
                     [h.make_tensor_value_info("n", T.INT64, []), seq_f("s0", T.FLOAT, None),
                      h.make_tensor_value_info("x", T.FLOAT, [2])], [seq_f("s", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    s0 = [rng.standard_normal([3]).astype(np.float32), rng.standard_normal([1, 2]).astype(np.float32)]
    x = rng.standard_normal([2]).astype(np.float32)
    save(root, "test_cf_loop_seq_zero", m, [("n", np.array(0, np.int64)), ("s0", s0), ("x", x)], [("s", s0)])
    # SequenceMap: y = e * t + w and the shape of e, per element e of a; t taken whole, w a
    # main-graph value.
    body = h.make_graph([
        h.make_node("Mul", ["e", "t_in"], ["et"]),
        h.make_node("Add", ["et", "w"], ["y"]),
        h.make_node("Shape", ["e"], ["shape"]),
    ], "body", [h.make_tensor_value_info("e", T.FLOAT, ["N"]), h.make_tensor_value_info("t_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N"]), h.make_tensor_value_info("shape", T.INT64, [1])])
    g = h.make_graph([h.make_node("Neg", ["v"], ["w"]), h.make_node("SequenceMap", ["a", "t"], ["ys", "shapes"], body=body)],
                     "seq_map", [seq_f("a", T.FLOAT, ["N"]), h.make_tensor_value_info("t", T.FLOAT, [1]),
                                 h.make_tensor_value_info("v", T.FLOAT, [1])],
                     [seq_f("ys", T.FLOAT, ["N"]), seq_f("shapes", T.INT64, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    a = [rng.standard_normal([n]).astype(np.float32) for n in (3, 1, 4)]
    t = rng.standard_normal([1]).astype(np.float32); v = rng.standard_normal([1]).astype(np.float32)
    save(root, "test_cf_seq_map_capture", m, [("a", a), ("t", t), ("v", v)],
         [("ys", [e * t - v for e in a]), ("shapes", [np.array([len(e)], np.int64) for e in a])])


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_opset_models import run_cases

    def cases(root):
        make_cases(root)
        return CASES
    return run_cases(cases, "kiln-control-models-", modes=([], ["--reference"]))


if __name__ == "__main__":
    sys.exit(main())
