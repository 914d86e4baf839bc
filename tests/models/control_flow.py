#!/usr/bin/env python3
"""Control flow end to end: a torch model scripted with a data-dependent python loop and
ifs (torch.jit.script + torch.onnx.export, opset 17) becomes a Loop whose body holds an If
(nested) and reads values of the main graph (outer-scope references, one of them two
levels up, in the nested If's branch), and an If after the loop. Compiled ONCE with
`kiln compile` (the bodies become native functions) and run by `kiln run` at several trip
counts, 0 included, each compared with torch (max abs error <= 1e-4 * max(1, max |ref|)).
A second model grows its loop-carried value every iteration (its shape known only at run
time) in a while loop whose condition is data, decided by an If in the body.

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


class Grow(torch.nn.Module):
    def forward(self, x, n: torch.Tensor):
        total = x.sum(0, keepdim=True)
        k = 0
        while k < int(n) and float(x.sum()) < 1000.0:
            x = torch.cat([x, x[-1:] * 1.5 + 1.0], 0)
            k += 1
        return x, total * 2.0


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return nh.to_array(t)


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(nh.from_array(array, name).SerializeToString())


def check(name, model, example, cases, kiln, work):
    """Exports `model` (scripted), compiles it once and runs each case against torch."""
    path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, example, path, input_names=["x", "n"], output_names=["y", "z"], opset_version=17)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert "Loop" in ops, f"{name}: the export has no Loop: {sorted(ops)}"
    artifact = os.path.join(work, name + ".so")
    subprocess.run([kiln, "compile", path, "-o", artifact], check=True)
    failures = 0
    for trips, seed in cases:
        torch.manual_seed(seed)
        x = torch.randn(*example[0].shape)
        n = torch.tensor(trips)
        with torch.no_grad():
            want = [t.numpy() for t in model(x, n)]
        tag = f"{name}_n{trips}_s{seed}"
        x_path, n_path = os.path.join(work, f"x_{tag}.pb"), os.path.join(work, f"n_{tag}.pb")
        write_tensor(x_path, x.numpy(), "x")
        write_tensor(n_path, n.numpy(), "n")
        out_dir = os.path.join(work, f"out_{tag}")
        subprocess.run([kiln, "run", artifact, "--input", f"x={x_path}", "--input", f"n={n_path}", "--output-dir",
                        out_dir], check=True)
        for k, expected in enumerate(want):
            got = read_tensor(os.path.join(out_dir, f"output_{k}.pb"))
            if got.shape != expected.shape:
                print(f"FAIL {name} n={trips} seed={seed} output {k}: shape {got.shape}, torch {expected.shape}")
                failures += 1
                continue
            err = float(np.abs(got - expected).max())
            ok = err <= 1e-4 * max(1.0, float(np.abs(expected).max()))
            print(f"{'ok  ' if ok else 'FAIL'} {name} n={trips} seed={seed} output {k}: shape {got.shape} "
                  f"max error {err:.3g}")
            failures += 0 if ok else 1
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("work")
    parser.add_argument("--kiln", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    loop_if = torch.jit.script(LoopIf().eval())
    failures = check("loop_if", loop_if, (torch.randn(3, 4), torch.tensor(5)),
                     ((0, 1), (1, 2), (3, 3), (7, 4), (7, 5), (20, 6)), args.kiln, args.work)
    failures += check("grow", torch.jit.script(Grow()), (torch.randn(2, 3), torch.tensor(3)),
                      ((0, 1), (1, 2), (4, 3), (30, 4)), args.kiln, args.work)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
