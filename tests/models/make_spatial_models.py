#!/usr/bin/env python3
"""GlobalLpPool, LpNormalization, MaxRoiPool (opset 17, checked by libonnx), Col2Im (18),
DeformConv (19) and AffineGrid (20) as small models with expected outputs from numpy
(torchvision's deform_conv2d for DeformConv), written apart from Kiln's C++. Each numpy
reference is first held to a second opinion (Col2Im is im2col's adjoint, DeformConv with
zero or integer offsets is a (shifted) Conv, AffineGrid is theta times a meshgrid). Every
case runs through kiln-conformance twice, compiled and with --reference, and must pass.

  make_spatial_models.py KILN_CONFORMANCE [--keep DIR]
"""
import itertools
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_opset_models import run_cases, save_case  # noqa: E402

RNG = np.random.default_rng(17)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


def global_lp_pool(x, p):
    axes = tuple(range(2, x.ndim))
    return (np.abs(x.astype(np.float64)) ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)


def lp_normalization(x, axis, p):
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis=axis, keepdims=True) ** (1.0 / p)
    return np.where(norm == 0, 0.0, x / np.where(norm == 0, 1.0, norm))


def max_roi_pool(x, rois, pooled, scale):
    """Caffe's ROI pooling, as onnxruntime's MaxRoiPool: rounded, scaled ROIs split into bins."""
    def rnd(v):  # half away from zero, as C's round
        return int(np.sign(v) * np.floor(abs(v) + 0.5))

    ph_n, pw_n = pooled
    out = np.zeros((len(rois), x.shape[1], ph_n, pw_n), np.float64)
    for r, (b, x1, y1, x2, y2) in enumerate(rois):
        sx, sy, ex, ey = rnd(x1 * scale), rnd(y1 * scale), rnd(x2 * scale), rnd(y2 * scale)
        bh, bw = max(ey - sy + 1, 1) / ph_n, max(ex - sx + 1, 1) / pw_n
        for ph in range(ph_n):
            h0 = min(max(int(np.floor(ph * bh)) + sy, 0), x.shape[2])
            h1 = min(max(int(np.ceil((ph + 1) * bh)) + sy, 0), x.shape[2])
            for pw in range(pw_n):
                w0 = min(max(int(np.floor(pw * bw)) + sx, 0), x.shape[3])
                w1 = min(max(int(np.ceil((pw + 1) * bw)) + sx, 0), x.shape[3])
                if h1 > h0 and w1 > w0:
                    out[r, :, ph, pw] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def block_grid(image, block, strides, pads, dilations):
    d = len(image)
    return [(image[i] + pads[i] + pads[d + i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(d)]


def col2im(x, image, block, strides, pads, dilations):
    """An explicit loop: every column entry added at its image position."""
    d, taps = len(image), int(np.prod(block))
    grid = block_grid(image, block, strides, pads, dilations)
    n, rows, _ = x.shape
    y = np.zeros((n, rows // taps) + tuple(image), np.float64)
    for row in range(rows):
        k = np.unravel_index(row % taps, block)
        for col, l in enumerate(itertools.product(*[range(g) for g in grid])):
            pos = tuple(l[i] * strides[i] - pads[i] + k[i] * dilations[i] for i in range(d))
            if all(0 <= pos[i] < image[i] for i in range(d)):
                y[(slice(None), row // taps) + pos] += x[:, row, col]
    return y


def im2col(img, block, strides, pads, dilations):
    """The columns of every block of the zero-padded image, gathered with numpy slicing."""
    d = len(block)
    padded = np.pad(img, [(0, 0), (0, 0)] + [(pads[i], pads[d + i]) for i in range(d)])
    grid = block_grid(img.shape[2:], block, strides, pads, dilations)
    rows = []
    for c in range(img.shape[1]):
        for k in itertools.product(*[range(b) for b in block]):
            window = padded[(slice(None), c) + tuple(
                slice(k[i] * dilations[i], k[i] * dilations[i] + strides[i] * (grid[i] - 1) + 1, strides[i])
                for i in range(d))]
            rows.append(window.reshape(img.shape[0], -1))
    return np.stack(rows, axis=1)


def check_col2im_adjoint(image, block, strides, pads, dilations):
    """<im2col(a), b> == <a, col2im(b)>: col2im is im2col's adjoint, whatever its windows."""
    a = RNG.standard_normal((2, 3) + tuple(image))
    cols = im2col(a, block, strides, pads, dilations)
    b = RNG.standard_normal(cols.shape)
    lhs, rhs = (cols * b).sum(), (a * col2im(b, image, block, strides, pads, dilations)).sum()
    assert abs(lhs - rhs) < 1e-9 * max(1.0, abs(lhs)), (image, block, lhs, rhs)


def affine_grid(theta, size, align_corners):
    """theta times the base grid, built with np.linspace and np.meshgrid."""
    def axis(s):
        if align_corners:
            return np.linspace(-1.0, 1.0, s) if s > 1 else np.zeros(1)
        return np.linspace(-1.0 + 1.0 / s, 1.0 - 1.0 / s, s)

    spatial = size[2:]
    mesh = np.meshgrid(*[axis(s) for s in spatial], indexing="ij")  # outermost axis first
    points = np.stack(mesh[::-1] + [np.ones(tuple(spatial))], axis=-1)  # (x, y[, z], 1)
    return np.einsum("nrk,...k->n...r", theta.astype(np.float64), points)


def conv2d(x, w, b, strides, pads, dilations, group):
    import torch
    return torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                      None if b is None else torch.from_numpy(b).double(), strides,
                                      (pads[0], pads[1]), dilations, group).numpy()


def deform_conv(x, w, offset, b, mask, strides, pads, dilations):
    import torch
    from torchvision.ops import deform_conv2d
    t = lambda a: None if a is None else torch.from_numpy(a).double()  # noqa: E731
    return deform_conv2d(t(x), t(offset), t(w), t(b), tuple(strides), (pads[0], pads[1]), tuple(dilations),
                         t(mask)).numpy()


def check_deform_conv_against_conv():
    """Zero offsets: Conv. Integer offsets (dy, dx) everywhere: Conv of the shifted image."""
    x, w, b = randn(1, 4, 7, 6), randn(6, 2, 3, 3), randn(6)
    zero = np.zeros((1, 2 * 9, 5, 4), np.float32)
    # torchvision has no `group` argument: groups of W show as C / W.shape[1]
    assert np.allclose(deform_conv(x, w, zero, b, None, (1, 1), (0, 0), (1, 1)),
                       conv2d(x, w, b, (1, 1), (0, 0), (1, 1), 2), atol=1e-9)
    shifted = np.zeros_like(x)
    shifted[:, :, :-1, 2:] = x[:, :, 1:, :-2]  # x read at (h + 1, w - 2), zero outside
    offset = np.tile(np.array([1, -2], np.float32), 9 * 20).reshape(1, 5, 4, 18).transpose(0, 3, 1, 2)
    assert np.allclose(deform_conv(x, w, np.ascontiguousarray(offset), b, None, (1, 1), (0, 0), (1, 1)),
                       conv2d(shifted, w, b, (1, 1), (0, 0), (1, 1), 2), atol=1e-9)


def symbolic_batch(root, case, batch_inputs=None, symbol="N"):
    """The case's model with the first dim of its outputs and of its inputs (those named in
    batch_inputs, else all) named `symbol`: a run-time shape."""
    path = os.path.join(root, case, "model.onnx")
    model = onnx.load(path)
    inputs = [v for v in model.graph.input if batch_inputs is None or v.name in batch_inputs]
    for value in inputs + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = symbol
    onnx.save(model, path)
    return case


def f32(a):
    return np.asarray(a, np.float32)


def pool_cases(root):
    cases = []
    for name, shape, p in (("p2", (2, 3, 5, 7), 2), ("p1", (1, 2, 3), 1), ("p3_3d", (1, 1, 2, 3, 5), 3)):
        x = randn(*shape)
        cases.append(save_case(root, f"opset17_global_lp_pool_{name}", 17, [node("GlobalLpPool", "x", p=p)],
                               [("x", x)], [("y", f32(global_lp_pool(x, p)))]))
    x = randn(3, 5, 2)
    x[1, :, 0] = 0  # a zero line: its norm is 0
    for axis, p in ((1, 1), (-1, 2), (0, 2)):
        cases.append(save_case(root, f"opset17_lp_normalization_axis{axis}_p{p}".replace("-", "m"), 17,
                               [node("LpNormalization", "x", axis=axis, p=p)], [("x", x)],
                               [("y", f32(lp_normalization(x, axis, p)))]))
    x = randn(3, 2, 5, 1)
    for op, attrs, expected in (("GlobalLpPool", {"p": 2}, global_lp_pool(x, 2)),
                                ("LpNormalization", {"axis": 1, "p": 1}, lp_normalization(x, 1, 1))):
        cases.append(symbolic_batch(root, save_case(root, f"opset17_{op.lower()}_symbolic_batch", 17,
                                                    [node(op, "x", **attrs)], [("x", x)], [("y", f32(expected))])))
    x = randn(2, 3, 8, 7)
    rois = f32([[0, 1, 1, 5, 4], [1, 0, 2, 6, 7], [0, 3.2, 2.7, 3.3, 2.8], [1, -3, -2, 9, 12], [0, 6, 6, 2, 2]])
    for scale, pooled in ((1.0, (2, 3)), (0.5, (3, 2)), (0.75, (1, 1))):
        cases.append(save_case(root, f"opset17_max_roi_pool_{pooled[0]}x{pooled[1]}", 17,
                               [node("MaxRoiPool", ["x", "rois"], pooled_shape=list(pooled), spatial_scale=scale)],
                               [("x", x), ("rois", rois)], [("y", f32(max_roi_pool(x, rois, pooled, scale)))]))
    # the number of ROIs known only at run time
    case = save_case(root, "opset17_max_roi_pool_symbolic_rois", 17,
                     [node("MaxRoiPool", ["x", "rois"], pooled_shape=[2, 2])], [("x", x), ("rois", rois)],
                     [("y", f32(max_roi_pool(x, rois, (2, 2), 1.0)))])
    cases.append(symbolic_batch(root, case, batch_inputs=("rois",), symbol="R"))
    return cases


def col2im_cases(root):
    cases = []
    # (name, image, block, strides, pads, dilations, channels)
    shapes = [("basic", [5, 5], [1, 5], [1, 1], [0, 0, 0, 0], [1, 1], 1),
              ("strided_padded", [7, 5], [3, 2], [2, 1], [1, 0, 2, 1], [1, 1], 2),
              ("dilated", [11, 7], [2, 3], [1, 2], [0, 1, 1, 0], [3, 2], 3),
              ("1d", [13], [3], [2], [1, 1], [1], 2),
              ("3d", [3, 5, 4], [2, 1, 3], [1, 2, 1], [0, 1, 1, 1, 0, 0], [1, 1, 1], 2),
              ("unit", [1, 1], [1, 1], [1, 1], [0, 0, 0, 0], [1, 1], 1)]
    x = randn(3, 2 * 6, 15)  # image 5 x 4, block 2 x 3, pads 1 before: a 5 x 3 block grid
    case = save_case(root, "opset18_col2im_symbolic_batch", 18,
                     [node("Col2Im", ["x", "image", "block"], pads=[1, 1, 0, 0])], [("x", x)],
                     [("y", f32(col2im(x, [5, 4], [2, 3], [1, 1], [1, 1, 0, 0], [1, 1])))],
                     [("image", np.array([5, 4], np.int64)), ("block", np.array([2, 3], np.int64))])
    cases.append(symbolic_batch(root, case))
    for name, image, block, strides, pads, dilations, channels in shapes:
        check_col2im_adjoint(image, block, strides, pads, dilations)
        blocks = int(np.prod(block_grid(image, block, strides, pads, dilations)))
        x = randn(2, channels * int(np.prod(block)), blocks)
        cases.append(save_case(root, f"opset18_col2im_{name}", 18,
                               [node("Col2Im", ["x", "image", "block"], strides=strides, pads=pads,
                                     dilations=dilations)], [("x", x)],
                               [("y", f32(col2im(x, image, block, strides, pads, dilations)))],
                               [("image", np.array(image, np.int64)), ("block", np.array(block, np.int64))]))
    return cases


def affine_grid_cases(root):
    cases = []
    theta2 = np.array([[[1, 0, 0], [0, 1, 0]], [[0.8, -0.6, 0.1], [0.6, 0.8, -0.2]]], np.float32)
    theta3 = randn(1, 3, 4)
    # the identity at align_corners=1 is the linspace grid itself
    assert np.allclose(affine_grid(theta2[:1], [1, 1, 3, 4], True)[0, 2, 1], [np.linspace(-1, 1, 4)[1], 1.0])
    for align in (0, 1):
        for name, theta, size in (("2d", theta2, [2, 3, 5, 7]), ("3d", theta3, [1, 2, 3, 4, 5])):
            cases.append(save_case(root, f"opset20_affine_grid_{name}_align{align}", 20,
                                   [node("AffineGrid", ["theta", "size"], align_corners=align)],
                                   [("theta", theta)], [("y", f32(affine_grid(theta, size, align)))],
                                   [("size", np.array(size, np.int64))]))
    # size computed at run time: Shape of an input whose dims are all symbolic
    image = randn(2, 3, 4, 6)
    case = save_case(root, "opset20_affine_grid_run_time_size", 20,
                     [node("Shape", ["image"], ["size"]), node("AffineGrid", ["theta", "size"])],
                     [("theta", theta2), ("image", image)], [("y", f32(affine_grid(theta2, image.shape, False)))])
    path = os.path.join(root, case, "model.onnx")
    model = onnx.load(path)
    for value in list(model.graph.input) + list(model.graph.output):
        for i, dim in enumerate(value.type.tensor_type.shape.dim):
            if value.name != "theta" or i == 0:
                dim.dim_param = f"d{i}"
    onnx.save(model, path)
    cases.append(case)
    return cases


def deform_conv_cases(root):
    check_deform_conv_against_conv()
    cases = []
    # (name, x, weight, strides, pads, dilations, group, offset_group, bias, mask)
    configs = [("plain", (1, 2, 5, 5), (3, 2, 2, 2), [1, 1], [0, 0, 0, 0], [1, 1], 1, 1, False, False),
               ("bias_mask", (2, 4, 7, 6), (6, 2, 3, 3), [2, 1], [1, 1, 1, 0], [1, 2], 2, 2, True, True),
               ("dilated_padded", (1, 3, 6, 7), (5, 3, 2, 3), [1, 2], [2, 1, 0, 2], [2, 1], 1, 3, True, False),
               ("mask_no_bias", (1, 2, 4, 5), (2, 1, 2, 2), [1, 1], [1, 1, 1, 1], [1, 1], 2, 1, False, True)]
    for name, xs, ws, strides, pads, dilations, group, offset_group, with_bias, with_mask in configs:
        x, w = randn(*xs), randn(*ws)
        out_h = (xs[2] + pads[0] + pads[2] - dilations[0] * (ws[2] - 1) - 1) // strides[0] + 1
        out_w = (xs[3] + pads[1] + pads[3] - dilations[1] * (ws[3] - 1) - 1) // strides[1] + 1
        taps = ws[2] * ws[3]
        offset = (RNG.standard_normal((xs[0], offset_group * taps * 2, out_h, out_w)) * 1.5).astype(np.float32)
        bias = randn(ws[0]) if with_bias else None
        mask = RNG.random((xs[0], offset_group * taps, out_h, out_w)).astype(np.float32) if with_mask else None
        # torchvision takes pads per axis; ONNX's begin and end pads are equal in torch's terms only when
        # symmetric, so the asymmetric ones are padded into X first
        px = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
        # groups: torchvision reads them from C / W.shape[1]
        expected = deform_conv(px, w, offset, bias, mask, strides, (0, 0), dilations)
        inputs = [("x", x), ("w", w), ("offset", offset)]
        names = ["x", "w", "offset", "b" if with_bias else ""]
        if with_bias:
            inputs.append(("b", bias))
        if with_mask:
            names.append("mask")
            inputs.append(("mask", mask))
        case = save_case(root, f"opset19_deform_conv_{name}", 19,
                         [node("DeformConv", [n for n in names if n or with_mask], strides=strides, pads=pads,
                               dilations=dilations, group=group, offset_group=offset_group,
                               kernel_shape=list(ws[2:]))],
                         inputs, [("y", f32(expected))])
        cases.append(case)
        if xs[0] > 1:  # the same model with the batch known only at run time
            shutil.copytree(os.path.join(root, case), os.path.join(root, case + "_symbolic_batch"))
            cases.append(symbolic_batch(root, case + "_symbolic_batch", batch_inputs=("x", "offset", "mask")))
    return cases


def make_cases(root):
    cases = pool_cases(root) + col2im_cases(root) + affine_grid_cases(root) + deform_conv_cases(root)
    for case in cases:  # libonnx 1.12 knows the opset-17 ops: their models must pass its checker
        if case.startswith("opset17_"):
            onnx.checker.check_model(onnx.load(os.path.join(root, case, "model.onnx")), full_check=True)
    return cases


def main():
    return run_cases(make_cases, "kiln-spatial-models-", modes=([], ["--reference"]))


if __name__ == "__main__":
    sys.exit(main())
