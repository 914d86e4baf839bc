#!/usr/bin/env bash
# End to end through the kiln CLI: make the sample model, compile it, inspect the
# artifact, run it on the sample input and check the output is a probability vector,
# bench it, and check that bad input gets a clear error and a non-zero exit.
set -euo pipefail
kiln=$1
root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 "$root/clients/examples/make_sample_model.py" "$work/sample.onnx"
"$kiln" compile "$work/sample.onnx" -o "$work/sample.so" --report "$work/report.json"
"$kiln" inspect "$work/sample.so" > "$work/manifest.json"
grep -q '"name": "probabilities"' "$work/manifest.json"
grep -q '"compiler_version"' "$work/manifest.json"
grep -q '"arena_bytes"' "$work/report.json"
"$kiln" run "$work/sample.so" --input input="$work/sample.input.pb" --output-dir "$work/out" --threads 2
/usr/bin/python3 - "$work/out/output_0.pb" <<'PY'
import sys
import numpy as np
from onnx import TensorProto, numpy_helper
t = TensorProto()
t.ParseFromString(open(sys.argv[1], "rb").read())
assert t.name == "probabilities", t.name
p = numpy_helper.to_array(t)
assert p.shape == (1, 10), p.shape
assert abs(p.sum() - 1.0) < 1e-4 and (p >= 0).all(), p
assert p.max() < 0.999, "degenerate output"
PY
"$kiln" bench "$work/sample.so" --iters 5 | grep -q '"median_ms"'
# --profile: a line per kernel, named by node and op, slowest first; shares add to 100 %.
"$kiln" bench "$work/sample.so" --iters 5 --profile 2> "$work/profile.txt" | grep -q '"median_ms"'
grep -q '^profile: 7 kernels, 5 runs' "$work/profile.txt"
grep -q '#0 conv1 (Conv)' "$work/profile.txt"
grep -q '#6 softmax (Softmax)' "$work/profile.txt"
awk '/%  #/ {cum = $4} END {exit !(cum == "100.0%")}' "$work/profile.txt"

# Errors name the problem and exit non-zero.
echo "not a model" > "$work/bad.onnx"
if "$kiln" compile "$work/bad.onnx" -o "$work/bad.so" 2> "$work/err.txt"; then exit 1; fi
grep -q "bad.onnx: not a valid ONNX model" "$work/err.txt"
if "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --target nonsense 2> "$work/err.txt"; then exit 1; fi
grep -q "unknown target 'nonsense'" "$work/err.txt"
if "$kiln" run "$work/sample.so" --output-dir "$work/o2" 2> "$work/err.txt"; then exit 1; fi
grep -q "missing --input input" "$work/err.txt"
"$kiln" help > "$work/help.txt"  # (not piped into grep -q: that would end kiln early by SIGPIPE)
grep -q "kiln compile MODEL.onnx" "$work/help.txt"
echo "e2e_cli_sample: ok"
