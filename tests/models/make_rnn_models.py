#!/usr/bin/python3
"""Exports recurrent torch models to ONNX at test time and checks Kiln's compiled artifacts.

    make_rnn_models.py OUT_DIR [--check KILN_MODEL_CHECK [--ort-run bench/ort_run.js]]

Models (random weights, fixed seed): lstm2, a 2-layer torch.nn.LSTM (sequence-major), and
gru2_bidirectional, a 2-layer bidirectional torch.nn.GRU (batch_first). For each it writes
OUT_DIR/NAME.onnx with NAME.input_0.pb and NAME.output_K.pb (PyTorch's outputs). With
--check it runs kiln-model-check on each: the artifact against the reference interpreter
and against PyTorch, and with --ort-run against ONNX Runtime too (max |error| <= 1e-3 *
max(1, max |torch|), cosine >= 0.9999).

Weights are drawn from U(-0.3, 0.3), about twice PyTorch's default for these sizes, so
the gates are not all near their linear range and the outputs are not small; the script
refuses to write a model whose outputs are degenerate (max |y| < 0.1 or not finite).
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
from onnx import numpy_helper

SEED = 20261125
SEQ, BATCH, INPUT = 12, 3, 20


class Lstm2(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(INPUT, 48, num_layers=2)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class Gru2Bidirectional(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(INPUT, 40, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x):
        y, h = self.rnn(x)
        return y, h


# name: (module, input shape, output names)
MODELS = {
    "lstm2": (Lstm2, (SEQ, BATCH, INPUT), ["y", "h_n", "c_n"]),
    "gru2_bidirectional": (Gru2Bidirectional, (BATCH, SEQ, INPUT), ["y", "h_n"]),
}


def save_tensor(array, name, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(array), name).SerializeToString())


def export(name, out_dir):
    factory, input_shape, output_names = MODELS[name]
    gen = torch.Generator().manual_seed(SEED)
    model = factory().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=gen) * 0.6 - 0.3)
        x = torch.randn(input_shape, generator=gen)
        outputs = model(x)
    for out_name, out in zip(output_names, outputs):
        scale = float(out.abs().max())
        if not np.isfinite(scale) or scale < 0.1:
            sys.exit(f"{name}: torch output {out_name} is degenerate (max |y| = {scale:g})")
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=output_names, opset_version=14)
    save_tensor(x.numpy(), "x", os.path.join(out_dir, f"{name}.input_0.pb"))
    for i, (out_name, out) in enumerate(zip(output_names, outputs)):
        save_tensor(out.numpy(), out_name, os.path.join(out_dir, f"{name}.output_{i}.pb"))
    scales = ", ".join(f"{n} max|y|={float(t.abs().max()):.3g}" for n, t in zip(output_names, outputs))
    print(f"{name}: {path} ({scales})", flush=True)
    return path


def check(kiln_model_check, ort_run, out_dir, name):
    """The artifact against the reference, torch's outputs and ONNX Runtime's (ort_run.js)."""
    x = os.path.join(out_dir, f"{name}.input_0.pb")
    ort_dir = os.path.join(out_dir, f"{name}.ort")
    if ort_run:
        subprocess.run(["node", ort_run, os.path.join(out_dir, name + ".onnx"), "--input", x, "--output-dir", ort_dir],
                       check=True)
    args = [kiln_model_check, os.path.join(out_dir, name + ".onnx"), "--input",
            os.path.join(out_dir, f"{name}.input_0.pb"), "--expected-tolerance", "1e-3",
            "--expected-min-cosine", "0.9999"]
    for i in range(len(MODELS[name][2])):
        args += ["--expected", os.path.join(out_dir, f"{name}.output_{i}.pb")]
        if ort_run:
            args += ["--ort-expected", os.path.join(ort_dir, f"output_{i}.pb")]
    return subprocess.run(args).returncode == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--check", metavar="KILN_MODEL_CHECK", help="check each model with kiln-model-check")
    parser.add_argument("--ort-run", metavar="ORT_RUN_JS", help="bench/ort_run.js: also hold each to ONNX Runtime")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_num_threads(2)
    failed = []
    for name in MODELS:
        export(name, args.out_dir)
        if args.check and not check(args.check, args.ort_run, args.out_dir, name):
            failed.append(name)
    if failed:
        sys.exit("FAILED: " + ", ".join(failed))


if __name__ == "__main__":
    main()
