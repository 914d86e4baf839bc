#!/usr/bin/env python3
"""Control flow end to end: a torch model scripted with a data-dependent python loop and
ifs (torch.jit.script + torch.onnx.export, opset 17) becomes a Loop whose body holds an If
(nested) and reads values of the main graph (outer-scope references, one of them two
levels up, in the nested If's branch), and an If after the loop. Compiled ONCE with
`kiln compile` (the bodies become native functions) and run by `kiln run` at several trip
counts, 0 included, each compared with torch (max abs error <= 1e-4 * max(1, max |ref|)).

  control_flow.py WORK_DIR --kiln PATH/TO/kiln
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper as nh
import torch


class LoopIf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.5)

    def forward(self, x, n: torch.Tensor):
        scale = x.abs().mean() + 1.0  # read in the loop body
        bias = x.mean(0) * 0.1  # read in the If inside the loop body: two levels up
        acc = torch.zeros_like(x)
        for i in range(int(n)):  # the trip count is an input
            y = torch.tanh(x @ self.w) / scale
            if float(y.sum()) > 0.0:  # decided by data, per iteration
                acc = acc + y + bias
            else:
                acc = acc - y * 0.5
            x = y + float(i)
        if float(acc.mean()) > 0:
            out = acc * 2.0
        else:
            out = acc - 1.0
        return out, x


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return nh.to_array(t)


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(nh.from_array(array, name).SerializeToString())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("work")
    parser.add_argument("--kiln", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    model = torch.jit.script(LoopIf().eval())
    path = os.path.join(args.work, "loop_if.onnx")
    torch.onnx.export(model, (torch.randn(3, 4), torch.tensor(5)), path, input_names=["x", "n"],
                      output_names=["out", "x_last"], opset_version=17)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"Loop", "If"} <= ops, f"the export has no Loop and If: {sorted(ops)}"
    artifact = os.path.join(args.work, "loop_if.so")
    subprocess.run([args.kiln, "compile", path, "-o", artifact], check=True)
    failures = 0
    for trips, seed in ((0, 1), (1, 2), (3, 3), (7, 4), (7, 5), (20, 6)):
        torch.manual_seed(seed)
        x = torch.randn(3, 4)
        n = torch.tensor(trips)
        with torch.no_grad():
            want = [t.numpy() for t in model(x, n)]
        tag = f"n{trips}_s{seed}"
        x_path, n_path = os.path.join(args.work, f"x_{tag}.pb"), os.path.join(args.work, f"n_{tag}.pb")
        write_tensor(x_path, x.numpy(), "x")
        write_tensor(n_path, n.numpy(), "n")
        out_dir = os.path.join(args.work, f"out_{tag}")
        subprocess.run([args.kiln, "run", artifact, "--input", f"x={x_path}", "--input", f"n={n_path}",
                        "--output-dir", out_dir], check=True)
        for k, expected in enumerate(want):
            got = read_tensor(os.path.join(out_dir, f"output_{k}.pb"))
            if got.shape != expected.shape:
                print(f"FAIL n={trips} seed={seed} output {k}: shape {got.shape}, torch {expected.shape}")
                failures += 1
                continue
            err = float(np.abs(got - expected).max())
            ok = err <= 1e-4 * max(1.0, float(np.abs(expected).max()))
            print(f"{'ok  ' if ok else 'FAIL'} n={trips} seed={seed} output {k}: max error {err:.3g}")
            failures += 0 if ok else 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
