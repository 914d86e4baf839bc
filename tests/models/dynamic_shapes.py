#!/usr/bin/env python3
"""Run-time shapes end to end: models exported from torch with dynamic axes are compiled
ONCE with `kiln compile` (no --input-shape) and the one artifact is run by `kiln run` at
several sizes, each compared with torch and with ONNX Runtime running the same file
(bench/ort_run.js) (max abs error <= 1e-3 * max(1, max |ref|), cosine >= 0.9999): a CNN and
an MLP at batch 1, 3 and 8, and a 2-layer TransformerEncoder with dynamic batch AND sequence
at (1, 16), (3, 77) and (8, 128).

  dynamic_shapes.py WORK_DIR --kiln PATH/TO/kiln --ort-run PATH/TO/bench/ort_run.js
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper as nh
import torch
import torch.nn as nn


class Cnn(nn.Module):
    """Conv, BatchNorm (folded), MaxPool, a strided Conv, a residual block (the Add fuses into
    the Conv only because both sides share the symbolic batch), GlobalAveragePool, Flatten,
    Gemm, Softmax."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = torch.max_pool2d(y, 2)
        y = torch.relu(self.c2(y))
        y = torch.relu(self.c3(y) + y)
        y = nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return torch.softmax(self.fc(y), -1)


class Mlp(nn.Module):
    """x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat and Reshape at run time."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(48, 64)
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x):
        y = x.view(x.size(0), -1)
        return self.fc2(torch.tanh(self.fc1(y))) * 2.0


def randomize_batchnorm(model, shape):
    # Random affine parameters and running statistics gathered in train mode: realistic,
    # non-vanishing activations.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(*shape))
    model.eval()


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return nh.to_array(t)


def compare(label, got, want):
    """One line; True when got matches want (shape, error bound, cosine)."""
    if got.shape != want.shape:
        print(f"FAIL {label}: shape {got.shape}, want {want.shape}")
        return False
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max())
    cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    ok = err <= 1e-3 * max(1.0, scale) and cos >= 0.9999
    print(f"{'ok  ' if ok else 'FAIL'} {label}: shape {got.shape} max error {err:.3g} cosine {cos:.7f}")
    return ok


def check(name, model, sample_shape, args, sizes=((1,), (3,), (8,))):
    """Exports with the leading len(sizes[0]) axes dynamic, compiles once, runs each size."""
    kiln, work = args.kiln, args.work
    path = os.path.join(work, name + ".onnx")
    axes = {i: ("batch", "seq")[i] for i in range(len(sizes[0]))}
    torch.onnx.export(model, torch.randn(*sample_shape), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": axes, "y": axes}, opset_version=14)
    artifact = os.path.join(work, name + ".so")
    subprocess.run([kiln, "compile", path, "-o", artifact], check=True)
    failures = 0
    for size in sizes:
        batch = "x".join(map(str, size))
        x = torch.randn(*size, *sample_shape[len(size):])
        with torch.no_grad():
            want = model(x).numpy()
        scale = float(np.abs(want).max())
        assert scale > 1e-2, f"{name}: reference output scale {scale} is vanishing"
        x_path = os.path.join(work, f"{name}_x{batch}.pb")
        with open(x_path, "wb") as f:
            f.write(nh.from_array(x.numpy(), "x").SerializeToString())
        out_dir = os.path.join(work, f"{name}_out{batch}")
        subprocess.run([kiln, "run", artifact, "--input", f"x={x_path}", "--output-dir", out_dir], check=True)
        got = read_tensor(os.path.join(out_dir, "output_0.pb"))
        ort_dir = os.path.join(work, f"{name}_ort{batch}")
        subprocess.run(["node", args.ort_run, path, "--input", x_path, "--output-dir", ort_dir], check=True)
        ort = read_tensor(os.path.join(ort_dir, "output_0.pb"))
        failures += 0 if compare(f"{name} at {batch} vs torch", got, want) else 1
        failures += 0 if compare(f"{name} at {batch} vs ONNX Runtime", got, ort) else 1
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("work")
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--ort-run", required=True, help="bench/ort_run.js (ONNX Runtime from npm)")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    cnn = Cnn()
    randomize_batchnorm(cnn, (8, 3, 24, 24))
    failures = check("cnn", cnn, (2, 3, 24, 24), args)
    failures += check("mlp", Mlp().eval(), (2, 3, 4, 4), args)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    failures += check("transformer", encoder, (2, 16, 64), args, sizes=((1, 16), (3, 77), (8, 128)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
