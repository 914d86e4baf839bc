#!/usr/bin/env python3
"""float16 and bfloat16 end to end: a small CNN (Conv, ReLU, BatchNormalization, MaxPool, a
residual Add, Gemm, Softmax) and a transformer block (LayerNormalization, MatMul, Softmax,
GELU) are exported from torch in float32, converted to float16 and to bfloat16 (weights,
constants, inputs and outputs in the narrow type, rounded to nearest even), compiled with
`kiln compile` and run with `kiln run`; each is compared with torch's float32 run of the same
weights. The tolerances are those of the narrow type's rounding (float16: 11 significant
bits, bfloat16: 8) over a few layers: max abs error <= TOL * max(1, max |ref|), cosine >= COS.

With --check, each artifact is also held to the independent reference evaluator running the
imported graph (kiln-model-check: the same per-op rounding, so within REFERENCE_TOLERANCE of
the output's scale), and the transformer block exported with dynamic batch and sequence is
compiled once and run at two sizes.

  half_precision_models.py WORK_DIR --kiln PATH/TO/kiln [--check PATH/TO/kiln-model-check]
                           [--only cnn_float16 ...]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import TensorProto, numpy_helper

# (max error relative to max(1, |ref|), cosine) per narrow type.
TOLERANCES = {"float16": (1e-2, 0.9999), "bfloat16": (6e-2, 0.999)}
# Ops that ONNX gives bfloat16 only from opset 22 (which Kiln does not read yet): libonnx's
# checker refuses them up to 17, so such bfloat16 models are declared opset 18 (the CNN's ops
# mean the same there).
BFLOAT16_FROM_OPSET22 = {"Conv", "MaxPool"}
# Compiled against the reference, relative to the output's scale: a few units in the last
# place of the narrow type (f32 sums in another order can flip a rounding).
REFERENCE_TOLERANCE = {"float16": 4e-3, "bfloat16": 3e-2}
ELEM_TYPES = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


class Cnn(nn.Module):
    """BatchNormalization after the ReLU, where torch's export cannot fold it into the Conv."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        y = self.bn(torch.relu(self.c1(x)))
        y = torch.max_pool2d(y, 2)
        y = torch.relu(self.c2(y) + y)
        return torch.softmax(self.fc(y.flatten(1)), -1)


class TransformerBlock(nn.Module):
    """Pre-norm self-attention and a GELU feed-forward, written out (no fused attention op)."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads)**0.5, -1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def bfloat16_bits(a):
    """float32 to bfloat16 bits, rounded to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(0x7FC0), rounded)


def narrow_tensor(t, dtype):
    """A float32 TensorProto as `dtype` (the same name and dims)."""
    a = numpy_helper.to_array(t).astype(np.float32)
    if dtype == "float16":
        out = numpy_helper.from_array(a.astype(np.float16), t.name)
    else:
        out = TensorProto(name=t.name, data_type=TensorProto.BFLOAT16, dims=a.shape)
        out.raw_data = bfloat16_bits(a).tobytes()
    return out


def narrow_model(model, dtype):
    """Every float32 weight, constant, cast, input and output of `model` in `dtype`."""
    elem = ELEM_TYPES[dtype]
    graph = model.graph
    for i, init in enumerate(graph.initializer):
        if init.data_type == TensorProto.FLOAT:
            graph.initializer[i].CopyFrom(narrow_tensor(init, dtype))
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT:
                attr.t.CopyFrom(narrow_tensor(attr.t, dtype))
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = elem
    for value in list(graph.input) + list(graph.output):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = elem
    del graph.value_info[:]
    return model


def write_input(path, x, dtype):
    t = narrow_tensor(numpy_helper.from_array(x, "x"), dtype)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def read_output(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    if t.data_type == TensorProto.BFLOAT16:
        bits = np.frombuffer(t.raw_data, np.uint16) if t.raw_data else np.array(t.int32_data, np.uint16)
        return (bits.astype(np.uint32) << 16).view(np.float32).reshape(tuple(t.dims)), "bfloat16"
    return numpy_helper.to_array(t).astype(np.float32), TensorProto.DataType.Name(t.data_type).lower()


def compare(label, got, got_type, want, dtype):
    if got.shape != want.shape or got_type != dtype:
        print(f"FAIL {label}: output {got_type} {got.shape}, want {dtype} {want.shape}")
        return 1
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    tol, min_cos = TOLERANCES[dtype]
    ok = err <= tol * scale and cos >= min_cos and np.isfinite(got).all()
    print(f"{'ok  ' if ok else 'FAIL'} {label}: max error {err:.3g} (limit {tol * scale:.3g}), "
          f"cosine {cos:.6f} (limit {min_cos})")
    return 0 if ok else 1


def run_artifact(kiln, artifact, x, dtype, base):
    write_input(base + "_x.pb", x, dtype)
    ran = subprocess.run([kiln, "run", artifact, "--input", f"x={base}_x.pb", "--output-dir", base + "_out"],
                         capture_output=True, text=True)
    if ran.returncode != 0:
        return None, ran.stderr.strip()
    return read_output(os.path.join(base + "_out", "output_0.pb")), None


def check_dynamic(model, dtype, kiln, work):
    """The transformer block with dynamic batch and sequence: compiled once, run at two sizes."""
    base = os.path.join(work, f"transformer_dynamic_{dtype}")
    axes = {0: "batch", 1: "sequence"}
    torch.onnx.export(model, torch.zeros(2, 10, 32), base + "_f32.onnx", input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": axes, "y": axes}, opset_version=17)
    onnx.save(narrow_model(onnx.load(base + "_f32.onnx"), dtype), base + ".onnx")
    compiled = subprocess.run([kiln, "compile", base + ".onnx", "-o", base + ".so"], capture_output=True, text=True)
    if compiled.returncode != 0:
        print(f"FAIL transformer_dynamic {dtype}: kiln compile: {compiled.stderr.strip()}")
        return 1
    failures = 0
    for batch, sequence in ((1, 7), (3, 12)):
        x = np.random.default_rng(batch).standard_normal((batch, sequence, 32)).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        result, error = run_artifact(kiln, base + ".so", x, dtype, f"{base}_{batch}x{sequence}")
        if error:
            print(f"FAIL transformer_dynamic {dtype} at {batch}x{sequence}: kiln run: {error}")
            failures += 1
            continue
        failures += compare(f"transformer_dynamic {dtype} at {batch}x{sequence}", *result, want, dtype)
    return failures


def check_reference(model_check, base, dtype):
    """The artifact against the independent reference on the imported graph."""
    run = subprocess.run([model_check, base + ".onnx", "--input", base + "_x.pb", "--tolerance",
                          str(REFERENCE_TOLERANCE[dtype])], capture_output=True, text=True)
    print(f"{'ok  ' if run.returncode == 0 else 'FAIL'} {os.path.basename(base)} against the reference: "
          f"{(run.stdout + run.stderr).strip()}")
    return 0 if run.returncode == 0 else 1


def check(name, model, x, opset, dtype, kiln, work, model_check=None):
    base = os.path.join(work, f"{name}_{dtype}")
    torch.onnx.export(model, torch.from_numpy(x), base + "_f32.onnx", input_names=["x"], output_names=["y"],
                      opset_version=opset)
    narrow = narrow_model(onnx.load(base + "_f32.onnx"), dtype)
    if dtype == "bfloat16" and any(n.op_type in BFLOAT16_FROM_OPSET22 for n in narrow.graph.node):
        narrow.opset_import[0].version = 18  # past libonnx's checker (opset 17): Kiln's own checks
    onnx.save(narrow, base + ".onnx")
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    compiled = subprocess.run([kiln, "compile", base + ".onnx", "-o", base + ".so"], capture_output=True, text=True)
    if compiled.returncode != 0:
        print(f"FAIL {name} {dtype}: kiln compile: {compiled.stderr.strip()}")
        return 1
    result, error = run_artifact(kiln, base + ".so", x, dtype, base)
    if error:
        print(f"FAIL {name} {dtype}: kiln run: {error}")
        return 1
    failures = compare(f"{name} {dtype}", *result, want, dtype)
    return failures + (check_reference(model_check, base, dtype) if model_check else 0)


def randomize_batchnorm(model, shape):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(*shape))
    model.eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("work")
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--check", help="kiln-model-check: also hold each artifact to the reference")
    parser.add_argument("--only", nargs="*", help="cases NAME_DTYPE to run (all by default)")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    cnn = Cnn()
    randomize_batchnorm(cnn, (8, 3, 16, 16))
    block = TransformerBlock().eval()
    rng = np.random.default_rng(16)
    cases = [("cnn", cnn, rng.standard_normal((2, 3, 16, 16)).astype(np.float32), 17),
             ("transformer", block, rng.standard_normal((2, 10, 32)).astype(np.float32), 17)]
    failures = 0
    for name, model, x, opset in cases:
        for dtype in ("float16", "bfloat16"):
            if args.only and f"{name}_{dtype}" not in args.only:
                continue
            failures += check(name, model, x, opset, dtype, args.kiln, args.work, args.check)
    if args.check:
        for dtype in ("float16", "bfloat16"):
            failures += check_dynamic(block, dtype, args.kiln, args.work)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
