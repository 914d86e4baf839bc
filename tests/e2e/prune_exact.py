#!/usr/bin/python3
"""Structured pruning removes the right channels: a CNN whose lowest-L1 channels are dead
(zero weights, negative bias, so ReLU outputs exactly 0) must compute the same outputs
after `kiln compile --prune-channels` as the unpruned model, with fewer parameters and
FLOPs. The network has a depthwise conv, a two-branch Concat, Flatten into a Linear
layer, and a residual block whose convs must stay whole.

  prune_exact.py KILN

Dead channels per layer are exactly what the ratio removes (12 -> 9, 20 -> 15, 10 -> 8,
12 -> 9, 26 -> 20 at 0.25), so a wrong index anywhere (weights, bias, a consumer's slice, the
Concat offset, the Flatten expansion) changes the outputs."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import numpy_helper

RATIO = 0.25


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.conv2 = torch.nn.Conv2d(12, 20, 1)
        self.branch = torch.nn.Conv2d(3, 10, 3, stride=2, padding=1)
        self.conv3 = torch.nn.Conv2d(30, 18, 3, padding=1)  # the two below feed a residual Add:
        self.residual = torch.nn.Conv2d(18, 18, 3, padding=1)  # both stay whole
        self.conv4 = torch.nn.Conv2d(18, 12, 3, padding=1)
        self.fc1 = torch.nn.Linear(12 * 4 * 4, 26)
        self.fc2 = torch.nn.Linear(26, 7)

    def forward(self, x):
        a = torch.relu(self.conv1(x))
        a = torch.relu(self.depthwise(a))
        a = torch.nn.functional.max_pool2d(torch.relu(self.conv2(a)), 2)
        b = torch.relu(self.branch(x))
        c = torch.relu(self.conv3(torch.cat([a, b], 1)))
        c = torch.relu(c + self.residual(c))
        c = torch.nn.functional.avg_pool2d(torch.relu(self.conv4(c)), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(c, 1))))


def kill(layer, channels, rng):
    """Output channels `channels` of `layer` compute ReLU(-1 - ...) = 0 for any input."""
    with torch.no_grad():
        layer.weight[channels] = 0
        layer.bias[channels] = -1.0 - torch.from_numpy(rng.random(len(channels)).astype(np.float32))


def main():
    kiln = sys.argv[1]
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    model = Net().eval()
    dead = {"conv1": [1, 5, 10], "conv2": [0, 7, 8, 13, 19], "branch": [3, 6], "conv4": [0, 4, 11], "fc1": [2, 3, 11, 17, 20, 25]}
    for name, channels in dead.items():
        kill(getattr(model, name), channels, rng)
    with torch.no_grad():
        # The depthwise filters of conv1's dead channels read zeros; their bias must not
        # revive them either.
        model.depthwise.bias[dead["conv1"]] = -1.0
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    assert np.abs(expected).max() > 1e-2, f"degenerate reference output (max {np.abs(expected).max()})"

    with tempfile.TemporaryDirectory() as work:
        onnx_path = os.path.join(work, "net.onnx")
        torch.onnx.export(model, torch.from_numpy(x), onnx_path, input_names=["input"], output_names=["logits"], opset_version=13)
        input_path = os.path.join(work, "input.pb")
        with open(input_path, "wb") as f:
            f.write(numpy_helper.from_array(x, "input").SerializeToString())
        outputs = {}
        reports = {}
        # --calibration: samples for the per-layer breakdown (here the input itself).
        os.makedirs(os.path.join(work, "samples"))
        with open(os.path.join(work, "samples", "x.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "input").SerializeToString())
        pruned_flags = ["--prune-channels", str(RATIO), "--calibration", os.path.join(work, "samples")]
        for label, flags in {"dense": [], "pruned": pruned_flags}.items():
            artifact = os.path.join(work, f"{label}.so")
            report = os.path.join(work, f"{label}.json")
            subprocess.run([kiln, "compile", onnx_path, "-o", artifact, "--report", report] + flags, check=True)
            out_dir = os.path.join(work, f"out_{label}")
            subprocess.run([kiln, "run", artifact, "--input", f"input={input_path}", "--output-dir", out_dir], check=True)
            t = onnx.TensorProto()
            with open(os.path.join(out_dir, "output_0.pb"), "rb") as f:
                t.ParseFromString(f.read())
            outputs[label] = numpy_helper.to_array(t)
            with open(report) as f:
                reports[label] = json.load(f)

    pruning = reports["pruned"]["pruning"]
    dense_error = float(np.abs(outputs["dense"] - expected).max())
    pruned_error = float(np.abs(outputs["pruned"] - expected).max())
    removed = sum(len(c) for c in dead.values())
    # Parameters removed: each dead channel's weights and bias, plus what read it (layers
    # are pruned in order, so conv2 has 9 input channels left when its turn comes).
    expected_removed = (3 * (3 * 9 + 1) + 3 * (9 + 1) + 20 * 3) + (5 * (9 + 1) + 18 * 5 * 9) + (2 * (3 * 9 + 1) + 18 * 2 * 9) \
        + (3 * (18 * 9 + 1) + 26 * 3 * 16) + (6 * (9 * 16 + 1) + 7 * 6)
    result = {"max_abs_error_dense": dense_error, "max_abs_error_pruned": pruned_error, "reference_scale": float(np.abs(expected).max()),
              "pruned_layers": pruning["pruned_layers"], "channels_removed": pruning["channels_removed"],
              "parameters": [pruning["before"]["parameters"], pruning["after"]["parameters"]],
              "flops": [pruning["before"]["flops"], pruning["after"]["flops"]], "kept_whole": pruning["kept_whole"]}
    print(json.dumps(result))
    assert dense_error < 1e-4, result
    assert pruned_error < 1e-4, result
    assert pruning["pruned_layers"] == 5 and pruning["channels_removed"] == removed, result
    assert pruning["before"]["parameters"] - pruning["after"]["parameters"] == expected_removed, (result, expected_removed)
    assert pruning["after"]["flops"] < pruning["before"]["flops"], result
    kept = " ".join(pruning["kept_whole"])
    assert kept.count("read by Add") == 2 and "graph output" in kept, result
    # Per-layer breakdown: layers whose output kept its shape (conv3, residual, fc2), each
    # unchanged by removing dead channels.
    layers = pruning["layers_by_error"]
    assert sorted(l["node"] for l in layers) == ["/conv3/Conv", "/fc2/Gemm", "/residual/Conv"], layers
    assert all(l["snr_db"] >= 100 and l["max_abs_error"] < 1e-5 for l in layers), layers
    return 0


if __name__ == "__main__":
    sys.exit(main())
