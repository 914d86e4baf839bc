#!/usr/bin/env python3
"""Sequence op cases beyond the ONNX node suite's, in its layout (for kiln-conformance --data OUT).

Each case is a model built with onnx.helper over SplitToSequence, ConcatFromSequence,
SequenceAt, SequenceErase, SequenceInsert, SequenceLength, SequenceConstruct and the
optional ops, with negative positions and axes, keepdims and new_axis, split given or not;
its expected outputs are computed here with numpy from the ONNX specification.
"""
import argparse
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def seq_type(elem_type):
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem_type, None))


def seq_proto(name, arrays):
    return helper.make_sequence(name, onnx.SequenceProto.TENSOR, [numpy_helper.from_array(a) for a in arrays])


def write_case(out, name, nodes, inputs, outputs, initializers, feeds, expected):
    """inputs/outputs: ValueInfoProtos; feeds/expected: arrays, or lists of arrays for sequences."""
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    case = os.path.join(out, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for prefix, infos, values in (("input", inputs, feeds), ("output", outputs, expected)):
        for i, (info, value) in enumerate(zip(infos, values)):
            proto = (seq_proto(info.name, value) if isinstance(value, list) else
                     numpy_helper.from_array(np.asarray(value), info.name))
            with open(os.path.join(data, f"{prefix}_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())


def split_erase_at_concat(out):
    """Pieces of 1 along axis -1 without keepdims; erase -2, at -1, length, stack along a new
    axis -1, insert at -4 and join along axis 0."""
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5) * 0.5 - 7
    pieces = [x[..., k] for k in range(5)]
    erased = pieces[:3] + pieces[4:]
    inserted = erased[:0] + [erased[-1]] + erased[0:]
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=-1, keepdims=0),
        helper.make_node("SequenceErase", ["s", "minus2"], ["e"]),
        helper.make_node("SequenceLength", ["e"], ["n"]),
        helper.make_node("SequenceAt", ["e", "minus1"], ["last"]),
        helper.make_node("ConcatFromSequence", ["e"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("SequenceInsert", ["e", "last", "minus4"], ["ins"]),
        helper.make_node("ConcatFromSequence", ["ins"], ["joined"], axis=0),
    ]
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), n)
             for n, v in (("minus1", -1), ("minus2", -2), ("minus4", -4))]
    write_case(out, "test_seq_split_erase_at_concat", nodes,
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
               [helper.make_value_info("e", seq_type(TensorProto.FLOAT)),
                helper.make_tensor_value_info("n", TensorProto.INT64, []),
                helper.make_tensor_value_info("last", TensorProto.FLOAT, [3, 4]),
                helper.make_tensor_value_info("stacked", TensorProto.FLOAT, [3, 4, 4]),
                helper.make_tensor_value_info("joined", TensorProto.FLOAT, [15, 4])],
               inits, [x],
               [erased, np.array(len(erased), dtype=np.int64), erased[-1], np.stack(erased, axis=-1),
                np.concatenate(inserted, axis=0)])


def split_sizes(out):
    """A scalar split (the last piece shorter) on axis -2, a 1-D split on axis 1 (keepdims is
    then ignored), both joined again; the position an int32 graph input."""
    x = np.arange(7 * 6, dtype=np.int64).reshape(7, 6) - 20
    by3 = [x[0:3], x[3:6], x[6:7]]
    uneven = [x[:, 0:1], x[:, 1:4], x[:, 4:6]]
    nodes = [
        helper.make_node("SplitToSequence", ["x", "three"], ["s3"], axis=-2),
        helper.make_node("ConcatFromSequence", ["s3"], ["back"], axis=-2),
        helper.make_node("SplitToSequence", ["x", "sizes"], ["su"], axis=1, keepdims=0),
        helper.make_node("SequenceAt", ["su", "pos"], ["piece"]),
        helper.make_node("SequenceErase", ["su"], ["su_erased"]),
    ]
    inits = [numpy_helper.from_array(np.array(3, dtype=np.int64), "three"),
             numpy_helper.from_array(np.array([1, 3, 2], dtype=np.int64), "sizes")]
    write_case(out, "test_seq_split_sizes", nodes,
               [helper.make_tensor_value_info("x", TensorProto.INT64, [7, 6]),
                helper.make_tensor_value_info("pos", TensorProto.INT32, [])],
               [helper.make_value_info("s3", seq_type(TensorProto.INT64)),
                helper.make_tensor_value_info("back", TensorProto.INT64, [7, 6]),
                helper.make_tensor_value_info("piece", TensorProto.INT64, [7, 3]),
                helper.make_value_info("su_erased", seq_type(TensorProto.INT64))],
               inits, [x, np.array(-2, dtype=np.int32)],
               [by3, x, uneven[-2], uneven[:-1]])


def construct_keepdims_optional(out):
    """SequenceConstruct, SplitToSequence keeping the axis, an empty sequence grown by
    SequenceInsert, and Optional / OptionalHasElement / OptionalGetElement over a sequence."""
    a = np.array([[1.5, -2.0, 3.25]], dtype=np.float32)
    b = np.array([[4.0, 5.0, -6.5]], dtype=np.float32)
    pieces = [a[:, k:k + 1] for k in range(3)]
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["ab"]),
        helper.make_node("ConcatFromSequence", ["ab"], ["rows"], axis=-2),
        helper.make_node("SplitToSequence", ["a"], ["cols"], axis=-1),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
        helper.make_node("SequenceInsert", ["empty", "b"], ["one"]),
        helper.make_node("SequenceLength", ["one"], ["one_length"]),
        helper.make_node("Optional", ["cols"], ["opt"]),
        helper.make_node("OptionalHasElement", ["opt"], ["has"]),
        helper.make_node("OptionalGetElement", ["opt"], ["got"]),
    ]
    write_case(out, "test_seq_construct_keepdims_optional", nodes,
               [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3])],
               [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [2, 3]),
                helper.make_value_info("cols", seq_type(TensorProto.FLOAT)),
                helper.make_value_info("one", seq_type(TensorProto.FLOAT)),
                helper.make_tensor_value_info("one_length", TensorProto.INT64, []),
                helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                helper.make_value_info("got", seq_type(TensorProto.FLOAT))],
               [], [a, b],
               [np.concatenate([a, b], axis=0), pieces, [b], np.array(1, dtype=np.int64), np.array(True), pieces])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    split_erase_at_concat(args.out)
    split_sizes(args.out)
    construct_keepdims_optional(args.out)


if __name__ == "__main__":
    main()
