#!/usr/bin/env python3
"""Resize, Upsample and TopK cases that Kiln can compile today (static shapes only).

1. The ONNX node suite's test_resize_*, test_upsample_* and test_top_k* models feed scales,
   sizes, roi and k as graph inputs; this rewrites each such input into an initializer
   holding its test_data_set_0 value and writes the case, with its expected outputs, in
   the node-test layout under OUT (for kiln-conformance --data OUT).
2. Opset-18 Resize features that libonnx 1.12 cannot import (antialias,
   half_pixel_symmetric, keep_aspect_ratio_policy, axes) as cases for resize_test: a
   directory per case with input_0.pb, output_0.pb and attributes.txt, the expected
   output computed by the numpy reference below, written from the ONNX specification.
   Before writing them the script checks that reference against every suite case.
"""
import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper

SUITE_PREFIXES = ("test_resize_", "test_upsample_", "test_top_k")


def rewrite_suite_case(test_dir, out_dir):
    """Graph inputs after the first become initializers with test_data_set_0's values."""
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    data_set = os.path.join(test_dir, "test_data_set_0")
    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initialized]
    for index, value_info in enumerate(inputs):
        if index == 0:
            continue
        tensor = onnx.load_tensor(os.path.join(data_set, "input_%d.pb" % index))
        tensor.name = value_info.name
        graph.initializer.append(tensor)
        graph.input.remove(value_info)
    case_set = os.path.join(out_dir, "test_data_set_0")
    os.makedirs(case_set, exist_ok=True)
    onnx.save(model, os.path.join(out_dir, "model.onnx"))
    shutil.copy(os.path.join(data_set, "input_0.pb"), case_set)
    for name in os.listdir(data_set):
        if name.startswith("output_"):
            shutil.copy(os.path.join(data_set, name), case_set)


# ---- The numpy reference: the ONNX specification's interpolation (Resize-18), per point. ----


def cubic_coeffs(ratio, scale, antialias, a):
    scale = min(scale, 1.0) if antialias else 1.0

    def kernel(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    start = int(np.floor(-2 / scale) + 1)
    coeffs = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
    return coeffs / coeffs.sum() if antialias else coeffs


def linear_coeffs(ratio, scale, antialias):
    if not antialias:
        return np.array([1 - ratio, ratio])
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    args = (np.arange(start, 2 - start) - ratio) * scale
    coeffs = np.clip(1 - np.abs(args), 0, 1)
    return coeffs / coeffs.sum()


def nearest_coeffs(ratio, mode):
    if float(ratio).is_integer():
        return np.array([0, 1])
    return {
        "round_prefer_floor": np.array([ratio <= 0.5, ratio > 0.5]),
        "round_prefer_ceil": np.array([ratio < 0.5, ratio >= 0.5]),
        "floor": np.array([1, 0]),
        "ceil": np.array([0, 1]),
    }[mode].astype(float)


def neighbours(x, n, data):
    """The n elements nearest x (ties to the lower index), the data padded by its edges."""
    pad = int(np.ceil(n / 2))
    padded = np.pad(data, pad, mode="edge")
    x = x + pad
    chosen = sorted(sorted(range(len(padded)), key=lambda i: (abs(x - i), i))[:n])
    return np.array(chosen) - pad, padded[chosen]


def source_coordinate(x, scale, out_len, in_len, mode, roi_start, roi_end):
    """As the reference of the specification computes it: align_corners, pytorch_half_pixel
    and tf_crop_and_resize take the resized length as scale * in_len, not out_len."""
    out_exact = scale * in_len
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / out_exact
        return in_len / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_exact != 1 else -0.5
    if mode == "align_corners":
        return 0.0 if out_exact == 1 else x * (in_len - 1) / (out_exact - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "tf_crop_and_resize":
        if out_exact != 1:
            return roi_start * (in_len - 1) + x * (roi_end - roi_start) * (in_len - 1) / (out_exact - 1)
        return 0.5 * (roi_start + roi_end) * (in_len - 1)
    raise ValueError(mode)


def interpolate_1d(data, scale, out_len, x, attrs, roi_start, roi_end):
    in_len = len(data)
    coordinate_mode = attrs.get("coordinate_transformation_mode", "half_pixel")
    x_ori = source_coordinate(x, scale, out_len, in_len, coordinate_mode, roi_start, roi_end)
    if coordinate_mode == "tf_crop_and_resize" and (x_ori < 0 or x_ori > in_len - 1):
        return attrs.get("extrapolation_value", 0.0)
    ratio = 1.0 if float(x_ori).is_integer() else x_ori - np.floor(x_ori)
    mode = attrs.get("mode", "nearest")
    antialias = attrs.get("antialias", 0) != 0
    if mode == "nearest":
        coeffs = nearest_coeffs(ratio, attrs.get("nearest_mode", "round_prefer_floor"))
    elif mode == "linear":
        coeffs = linear_coeffs(ratio, scale, antialias)
    else:
        coeffs = cubic_coeffs(ratio, scale, antialias, attrs.get("cubic_coeff_a", -0.75))
    indices, points = neighbours(x_ori, len(coeffs), data)
    if attrs.get("exclude_outside", 0):
        coeffs = np.where((indices < 0) | (indices >= in_len), 0.0, coeffs)
        coeffs = coeffs / coeffs.sum()
    return float(np.dot(coeffs, points))


def interpolate_nd(data, scales, out_dims, x, attrs, roi):
    rank = data.ndim
    if rank == 1:
        return interpolate_1d(data, scales[0], out_dims[0], x[0], attrs, roi[0], roi[rank])
    inner_roi = list(roi[1:rank]) + list(roi[rank + 1 :])
    line = [interpolate_nd(data[i], scales[1:], out_dims[1:], x[1:], attrs, inner_roi) for i in range(data.shape[0])]
    return interpolate_1d(np.array(line), scales[0], out_dims[0], x[0], attrs, roi[0], roi[rank])


def resize_reference(data, attrs, scales=None, sizes=None, roi=None):
    """Resize-18 on `data`; scales, sizes and roi list the axes in attrs['axes'] (default all)."""
    rank = data.ndim
    axes = list(attrs.get("axes", range(rank)))
    # roi and scales are float32 tensors in a model: their values here too.
    roi = None if roi is None else [float(np.float32(v)) for v in roi]
    scales = None if scales is None else [float(np.float32(v)) for v in scales]
    full_roi = [0.0] * rank + [1.0] * rank
    if roi is not None:
        for i, axis in enumerate(axes):
            full_roi[axis], full_roi[rank + axis] = roi[i], roi[len(axes) + i]
    full_scales = [1.0] * rank
    out_dims = list(data.shape)
    if scales is not None:
        for i, axis in enumerate(axes):
            full_scales[axis] = float(scales[i])
            out_dims[axis] = int(np.floor(data.shape[axis] * scales[i]))
    else:
        ratios = [sizes[i] / data.shape[axis] for i, axis in enumerate(axes)]
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        for i, axis in enumerate(axes):
            if policy == "stretch":
                full_scales[axis], out_dims[axis] = ratios[i], int(sizes[i])
            else:
                scale = min(ratios) if policy == "not_larger" else max(ratios)
                full_scales[axis], out_dims[axis] = scale, int(scale * data.shape[axis] + 0.5)
    out = np.zeros(out_dims)
    for x in np.ndindex(*out_dims):
        out[x] = interpolate_nd(data, full_scales, out_dims, x, attrs, full_roi)
    return out.astype(data.dtype)


def check_reference_on_suite(node_data):
    """The numpy reference must reproduce every Resize case of the suite (opset 11 on)."""
    checked = 0
    for name in sorted(os.listdir(node_data)):
        if not name.startswith("test_resize_"):
            continue
        model = onnx.load(os.path.join(node_data, name, "model.onnx"))
        node = [n for n in model.graph.node if n.op_type == "Resize"][0]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        data_set = os.path.join(node_data, name, "test_data_set_0")
        feeds = {}
        for index, value_info in enumerate(model.graph.input):
            feeds[value_info.name] = numpy_helper.to_array(
                onnx.load_tensor(os.path.join(data_set, "input_%d.pb" % index)))
        def given(i):
            if i >= len(node.input) or not node.input[i] or node.input[i] not in feeds:
                return None
            value = feeds[node.input[i]]
            return value if value.size else None
        got = resize_reference(feeds[node.input[0]], attrs, scales=given(2), sizes=given(3), roi=given(1))
        want = numpy_helper.to_array(onnx.load_tensor(os.path.join(data_set, "output_0.pb")))
        if got.shape != want.shape or not np.allclose(got, want, atol=1e-5):
            sys.exit("make_resize_cases: the numpy reference disagrees with %s:\n%s\n%s" % (name, got, want))
        checked += 1
    return checked


def check_antialias_against_torch():
    """PyTorch's antialiased interpolation drops the taps outside the input (exclude_outside)
    and its bicubic takes a = -0.5: with those, the reference must agree with it."""
    try:
        import torch
    except ImportError:
        return False
    data = np.random.default_rng(7).standard_normal((1, 2, 17, 13)).astype(np.float32)
    for mode, torch_mode in (("linear", "bilinear"), ("cubic", "bicubic")):
        attrs = {"mode": mode, "antialias": 1, "exclude_outside": 1, "cubic_coeff_a": -0.5}
        ours = resize_reference(data, attrs, sizes=[1, 2, 5, 4])
        theirs = torch.nn.functional.interpolate(torch.tensor(data), size=(5, 4), mode=torch_mode, antialias=True,
                                                 align_corners=False).numpy()
        if not np.allclose(ours, theirs, atol=1e-5):
            sys.exit("make_resize_cases: the antialiased %s reference disagrees with PyTorch" % mode)
    return True


# Opset-18 cases for resize_test: (name, attributes, input dims, scales, sizes, roi).
OPSET18_CASES = [
    ("antialias_linear_down_scales", {"mode": "linear", "antialias": 1}, (1, 2, 9, 11), [1, 1, 0.5, 0.6], None, None),
    ("antialias_linear_down_sizes", {"mode": "linear", "antialias": 1}, (1, 1, 16, 13), None, [1, 1, 5, 4], None),
    ("antialias_linear_up", {"mode": "linear", "antialias": 1}, (1, 1, 4, 5), [1, 1, 2, 1.5], None, None),
    ("antialias_linear_align_corners",
     {"mode": "linear", "antialias": 1, "coordinate_transformation_mode": "align_corners"},
     (2, 1, 12, 7), [1, 1, 0.34, 0.5], None, None),
    ("antialias_cubic_down_scales", {"mode": "cubic", "antialias": 1}, (1, 1, 16, 16), [1, 1, 0.25, 0.5], None, None),
    ("antialias_cubic_exclude_outside",
     {"mode": "cubic", "antialias": 1, "exclude_outside": 1, "cubic_coeff_a": -0.5},
     (1, 3, 10, 9), [1, 1, 0.4, 0.7], None, None),
    ("antialias_cubic_asymmetric",
     {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "asymmetric"},
     (1, 1, 7, 15), None, [1, 1, 3, 4], None),
    ("antialias_nearest_is_plain", {"mode": "nearest", "antialias": 1}, (1, 1, 8, 8), [1, 1, 0.5, 0.5], None, None),
    ("half_pixel_symmetric_linear", {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
     (1, 1, 5, 7), [1, 1, 1.7, 0.7], None, None),
    ("half_pixel_symmetric_cubic", {"mode": "cubic", "coordinate_transformation_mode": "half_pixel_symmetric"},
     (1, 1, 6, 4), [1, 1, 0.55, 2.3], None, None),
    ("keep_aspect_not_larger", {"mode": "linear", "keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]},
     (1, 1, 6, 8), None, [9, 9], None),
    ("keep_aspect_not_smaller", {"mode": "nearest", "keep_aspect_ratio_policy": "not_smaller", "axes": [2, 3]},
     (1, 1, 6, 8), None, [9, 9], None),
    ("axes_scales_last", {"mode": "cubic", "axes": [3]}, (1, 2, 3, 5), [2.2], None, None),
    ("tf_crop_and_resize_axes",
     {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "axes": [2, 3],
      "extrapolation_value": -1.5},
     (1, 1, 6, 6), None, [4, 5], [0.2, -0.1, 0.9, 0.8]),
    ("nearest_ceil_tf_crop", {"mode": "nearest", "nearest_mode": "ceil",
                              "coordinate_transformation_mode": "tf_crop_and_resize"},
     (1, 1, 5, 5), None, [1, 1, 3, 7], [0, 0, 0.1, 0.3, 1, 1, 0.7, 1.2]),
    # 40 x 40 taps on the outer axes: past the kernel's 1024 per row, summed element by element.
    ("antialias_linear_wide_outer_axes", {"mode": "linear", "antialias": 1}, (1, 1, 40, 40, 6), [1, 1, 0.05, 0.05, 0.5],
     None, None),
    ("linear_3d_pytorch_half_pixel", {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
     (1, 1, 3, 4, 5), None, [1, 1, 1, 7, 2], None),
]


# Node-test-style cases of Kiln's own for what the suite leaves out: Upsample-7 (scales as
# an attribute), Resize-10, uint8 (nearest; linear, whose results the reference truncates
# as it casts), a 5-D linear one. (name, opset, op,
# attributes, input dims, dtype, scales, sizes, roi, the reference's attributes: Resize-10
# and Upsample resample asymmetrically, nearest rounding down when upsampling and up when
# downsampling.)
OWN_CASES = [
    ("kiln_upsample7_nearest", 7, "Upsample", {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]}, (1, 2, 3, 3),
     np.float32, None, None, None, {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    ("kiln_upsample7_linear", 7, "Upsample", {"mode": "linear", "scales": [1.0, 1.0, 2.0, 2.5]}, (1, 1, 3, 4),
     np.float32, None, None, None, {"coordinate_transformation_mode": "asymmetric"}),
    ("kiln_resize10_nearest_down", 10, "Resize", {"mode": "nearest"}, (1, 1, 5, 6), np.float32,
     [1.0, 1.0, 0.6, 0.5], None, None, {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "ceil"}),
    ("kiln_resize10_linear", 10, "Resize", {"mode": "linear"}, (1, 2, 3, 4), np.float32, [1.0, 1.0, 1.5, 0.5],
     None, None, {"coordinate_transformation_mode": "asymmetric"}),
    ("kiln_resize13_nearest_uint8", 13, "Resize", {"mode": "nearest", "nearest_mode": "round_prefer_ceil"},
     (1, 3, 4, 5), np.uint8, None, [1, 3, 7, 3], None, {"nearest_mode": "round_prefer_ceil"}),
    ("kiln_resize13_linear_uint8", 13, "Resize", {"mode": "linear"}, (1, 2, 3, 5), np.uint8, None, [1, 2, 7, 8],
     None, {}),
    ("kiln_resize13_linear_5d", 13, "Resize", {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
     (1, 2, 3, 4, 5), np.float32, [1.0, 1.0, 1.5, 0.5, 2.0], None, None,
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
]


def write_own_cases(out_dir):
    rng = np.random.default_rng(13)
    for name, opset, op, attrs, dims, dtype, scales, sizes, roi, reference_attrs in OWN_CASES:
        if dtype == np.uint8:
            data = rng.integers(0, 256, dims).astype(dtype)
        else:
            data = rng.standard_normal(dims).astype(dtype)
        reference = dict(attrs, **reference_attrs)
        reference.pop("scales", None)
        expected = resize_reference(data, reference, scales=attrs.get("scales", scales), sizes=sizes, roi=roi)
        elem = onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)]
        given = {"roi": (roi, np.float32), "scales": (scales, np.float32), "sizes": (sizes, np.int64)}
        slots = ["roi", "scales", "sizes"] if opset >= 11 else ["scales"] if scales is not None else []
        inputs = ["X"] + [key if given[key][0] is not None else "" for key in slots]
        initializers = [numpy_helper.from_array(np.array(given[key][0], dtype=given[key][1]), key)
                        for key in slots if given[key][0] is not None]
        node = onnx.helper.make_node(op, inputs, ["Y"], **attrs)
        graph = onnx.helper.make_graph(
            [node], name, [onnx.helper.make_tensor_value_info("X", elem, dims)],
            [onnx.helper.make_tensor_value_info("Y", elem, expected.shape)], initializer=initializers)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        onnx.checker.check_model(model)
        case_set = os.path.join(out_dir, name, "test_data_set_0")
        os.makedirs(case_set, exist_ok=True)
        onnx.save(model, os.path.join(out_dir, name, "model.onnx"))
        onnx.save_tensor(numpy_helper.from_array(data, "X"), os.path.join(case_set, "input_0.pb"))
        onnx.save_tensor(numpy_helper.from_array(expected, "Y"), os.path.join(case_set, "output_0.pb"))


def write_opset18_cases(out_dir):
    rng = np.random.default_rng(21)
    for name, attrs, dims, scales, sizes, roi in OPSET18_CASES:
        case = os.path.join(out_dir, name)
        os.makedirs(case, exist_ok=True)
        data = rng.standard_normal(dims).astype(np.float32)
        expected = resize_reference(data, attrs, scales=scales, sizes=sizes, roi=roi)
        onnx.save_tensor(numpy_helper.from_array(data, "X"), os.path.join(case, "input_0.pb"))
        onnx.save_tensor(numpy_helper.from_array(expected, "Y"), os.path.join(case, "output_0.pb"))
        lines = ["%s %s" % (k, " ".join(map(str, v)) if isinstance(v, list) else v) for k, v in attrs.items()]
        for key, values in (("scales", scales), ("sizes", sizes), ("roi", roi)):
            if values is not None:
                lines.append("%s %s" % (key, " ".join(map(str, values))))
        with open(os.path.join(case, "attributes.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node-data", default="/usr/share/libonnx-testdata/data/node")
    parser.add_argument("--out", required=True, help="the rewritten suite cases (kiln-conformance --data)")
    parser.add_argument("--opset18-out", help="the opset-18 cases for resize_test")
    args = parser.parse_args()
    written = 0
    for name in sorted(os.listdir(args.node_data)):
        if name.startswith(SUITE_PREFIXES):
            rewrite_suite_case(os.path.join(args.node_data, name), os.path.join(args.out, name))
            written += 1
    checked = check_reference_on_suite(args.node_data)
    write_own_cases(args.out)
    print("make_resize_cases: %d suite cases and %d of Kiln's own in %s; the numpy reference matches %d suite cases"
          % (written, len(OWN_CASES), args.out, checked))
    if args.opset18_out:
        if check_antialias_against_torch():
            print("make_resize_cases: the antialiased linear and cubic reference matches PyTorch's")
        write_opset18_cases(args.opset18_out)
        print("make_resize_cases: %d opset-18 cases in %s" % (len(OPSET18_CASES), args.opset18_out))


if __name__ == "__main__":
    main()
