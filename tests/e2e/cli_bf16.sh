#!/usr/bin/env bash
# End to end through the kiln CLI: --precision bf16 on the sample model (two Convs and a
# Gemm). On a host with avx512bf16 the artifact runs its products in bf16 and its output
# stays within the bf16 tolerance of the fp32 artifact's; for targets without the feature
# (x86-64-v3, aarch64) the build is fp32 and `kiln compile` and the report say why.
source "$(dirname "$0")/cli_common.sh"
/usr/bin/python3 - "$work/sample.input.pb" <<'PY'
import sys
import numpy as np
from onnx import numpy_helper
x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
open(sys.argv[1], "wb").write(numpy_helper.from_array(x, "input").SerializeToString())
PY
# Targets without avx512bf16 compile as fp32, with the reason on stderr and in the report.
for target in x86-64-v3 aarch64; do
  "$kiln" compile "$work/sample.onnx" -o "$work/$target.so" --precision bf16 --target "$target" \
    --report "$work/$target.json" 2> "$work/$target.txt"
  grep -q "kiln: bf16: compiled as fp32: target $target .*avx512bf16" "$work/$target.txt"
  /usr/bin/python3 - "$work/$target.json" "$target" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
bf16 = report["bf16"]
assert bf16["ran"] == "fp32" and sys.argv[2] in bf16["reason"] and bf16["bf16_nodes"] == 0, bf16
assert "bf16" not in report["pipeline"].split(","), report["pipeline"]
PY
done
# The bf16 pass goes with precision bf16 only.
if "$kiln" compile "$work/sample.onnx" -o "$work/bad.so" --pipeline fold-constants,bf16 2> "$work/bad.txt"; then
  echo "a bf16 pipeline without --precision bf16 compiled" >&2
  exit 1
fi
grep -q "pipeline: bf16 goes with --precision bf16" "$work/bad.txt"
if ! grep -q avx512_bf16 /proc/cpuinfo; then
  echo "this CPU has no avx512_bf16: the bf16 kernels were not run"
  exit 0
fi
"$kiln" compile "$work/sample.onnx" -o "$work/fp32.so"
"$kiln" compile "$work/sample.onnx" -o "$work/bf16.so" --precision bf16 --report "$work/bf16.json" 2> "$work/bf16.txt"
grep -q "kiln: bf16: 3 Conv/Gemm/MatMul run with bf16 weights and activations, f32 sums" "$work/bf16.txt"
"$kiln" inspect "$work/bf16.so" | grep -q '"precision": "bf16"'
for so in fp32 bf16; do
  for threads in 1 2; do
    "$kiln" run "$work/$so.so" --input input="$work/sample.input.pb" --output-dir "$work/out_${so}_$threads" \
      --threads $threads
  done
done
# bf16 keeps 8 significant bits: through two Convs and a Gemm the logits stay within 2 % of
# their scale (measured 0.4 %), and the arg-max is the fp32 one.
/usr/bin/python3 - "$work" <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
def load(path):
    t = onnx.TensorProto()
    t.ParseFromString(open(path, "rb").read())
    return numpy_helper.to_array(t).astype(np.float64)
work = sys.argv[1]
fp32 = load(f"{work}/out_fp32_1/output_0.pb")
for threads in (1, 2):
    bf16 = load(f"{work}/out_bf16_{threads}/output_0.pb")
    error = np.abs(bf16 - fp32).max() / np.abs(fp32).max()
    print(f"bf16 vs fp32, {threads} thread(s): max abs error / scale {error:.2e}")
    assert 0 < error < 2e-2, error
    assert (bf16.argmax(-1) == fp32.argmax(-1)).all()
PY
