#!/usr/bin/env bash
# End to end through the kiln CLI: make the sample model, compile it, inspect the
# artifact (manifest and report JSON, the action key), run it on the sample input and check
# the output is a probability vector, bench it, check every subcommand's --help, and that
# bad input gets a clear error and a non-zero exit.
source "$(dirname "$0")/cli_common.sh"
"$kiln" compile "$work/sample.onnx" -o "$work/sample.so" --report "$work/report.json" 2> "$work/compile.txt"
"$kiln" inspect "$work/sample.so" > "$work/manifest.json"
grep -q '"name": "probabilities"' "$work/manifest.json"
grep -q '"compiler_version"' "$work/manifest.json"
grep -q '"arena_bytes"' "$work/report.json"
# Manifest and report are protos printed as JSON (numbers as numbers); the target keeps its
# preset beside its resolution, and the action key kiln printed is in both.
/usr/bin/python3 - "$work/manifest.json" "$work/report.json" "$work/compile.txt" "$work/sample.onnx" <<'PY'
import hashlib, json, re, sys
manifest, report = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
key = re.search(r"^kiln: action key ([0-9a-f]{64})$", open(sys.argv[3]).read(), re.M).group(1)
assert (manifest["schema"], manifest["schema_version"]) == ("kiln.manifest", 2), manifest["schema"]
assert (report["schema"], report["schema_version"]) == ("kiln.compile-report", 2), report["schema"]
assert manifest["action_key"] == key and report["action_key"] == key, (key, manifest["action_key"])
spec = manifest["spec"]
assert spec["model"]["sha256"] == hashlib.sha256(open(sys.argv[4], "rb").read()).hexdigest(), spec["model"]
target = spec["target"]
assert target["preset"] == "host" and target["triple"].startswith(("x86_64-", "aarch64-")) and target["cpu"], target
assert target["features"] == sorted(target["features"]) and all(f[0] in "+-" for f in target["features"]), target
assert spec["accuracy"]["atol"] == 1e-3 and spec["quantization"]["precision"] == "fp32", spec
assert manifest["outputs"][0]["shape"] == [1, 10] and isinstance(manifest["workspace_bytes"], (int, float)), manifest
assert isinstance(report["memory_plan"]["arena_bytes"], (int, float)) and report["passes"], report["memory_plan"]
assert report["target"] == target and report["artifact_bytes"] > 0, report["target"]
PY
# What the artifact is made of: the report's parts sum to its size; kiln prints them in a line.
grep -q '^kiln: artifact [0-9.]* MB (ONNX file [0-9.]* MB): weights [0-9.]* MB as given' "$work/compile.txt"
/usr/bin/python3 - "$work/report.json" "$work/sample.so" <<'PY'
import json, os, sys
report = json.load(open(sys.argv[1]))
size = report["artifact_size"]
assert sum(size.values()) == report["artifact_bytes"] == os.path.getsize(sys.argv[2]), (size, report["artifact_bytes"])
assert size["weights_given"] > 0 and size["code"] > 0 and 0 < size["elf_overhead"] < 65536, size
PY
# The same spec compiles to the same bytes (nothing in the artifact depends on when or where).
"$kiln" compile "$work/sample.onnx" -o "$work/again.so" 2> /dev/null
cmp "$work/sample.so" "$work/again.so"
# Another option is another action.
"$kiln" compile "$work/sample.onnx" -o "$work/x.so" --seed 7 2> "$work/compile7.txt"
! diff <(grep "action key" "$work/compile.txt") <(grep "action key" "$work/compile7.txt") > /dev/null
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
# ... and for an artifact whose batch is known only at run time (the shaped API's profile).
/usr/bin/python3 "$root/tests/e2e/make_test_models.py" dynamic "$work/dynamic.onnx"
"$kiln" compile "$work/dynamic.onnx" -o "$work/dynamic.so" > /dev/null 2>&1
"$kiln" bench "$work/dynamic.so" --iters 5 --input-shape input=3x32 --profile 2> "$work/profile.txt" |
  grep -q '"median_ms"'
grep -q '^profile: 4 kernels, 5 runs' "$work/profile.txt"  # bias and ReLU in the MatMuls' epilogues
grep -q '#3 softmax (Softmax)' "$work/profile.txt"
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
grep -q "^Targets: host, x86-64" "$work/help.txt"
# Every subcommand has a true --help of its own (exit 0); usage errors exit 2.
for command in compile quantize run bench inspect kernels submit job jobs watch cancel fetch; do
  "$kiln" "$command" --help > "$work/help.txt"
  grep -q "^Usage: kiln $command " "$work/help.txt"
done
"$kiln" help compile > "$work/help.txt"
grep -q -- "--prune-channels" "$work/help.txt"
status=0; "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --no-such-flag 2> "$work/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "Run 'kiln compile --help' for usage" "$work/err.txt"
status=0; "$kiln" frobnicate 2> "$work/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "unknown subcommand 'frobnicate'" "$work/err.txt"
# kiln kernels: the cache is searched last; a target already built compiles nothing.
KILN_KERNEL_DIR="$work/prebuilt" "$kiln" kernels --list > "$work/dirs.txt"
[ "$(head -1 "$work/dirs.txt")" = "$work/prebuilt" ] && grep -q "(cache: missing kernels compiled here)" "$work/dirs.txt"
status=0; "$kiln" kernels --target nonsense 2> "$work/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "unknown target 'nonsense'" "$work/err.txt"
echo "e2e_cli_sample: ok"
