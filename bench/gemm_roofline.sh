#!/usr/bin/env bash
# FP32 GEMM against the core's measured FMA peak, one thread.
#   bench/gemm_roofline.sh [--iters N]
# Peak: bench/fma_peak.c (12 independent vector-FMA chains on the widest ISA the CPU has;
# peak = vector FMAs per ns x lanes x 2 flops). GEMMs: one ONNX MatMul per shape (M x K by
# a constant K x N), compiled for the host with kiln, timed with kiln bench (median).
# Prints a Markdown table: shape, median ms, GFLOP/s, % of peak, and the same for the best
# run (on a shared machine the median moves with the neighbours; the best shows the kernel).
set -euo pipefail
cd "$(dirname "$0")/.."
iters=20
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) iters=$2; shift 2 ;;
    -h|--help) sed -n 2,7p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gemm_roofline.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
ninja -C build kiln > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 bench/fma_peak.c -o "$work/fma_peak"
peak_json=$("$work/fma_peak")
peak=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['gflops'])" "$peak_json")
echo "peak: $peak_json"
# 1024^3 and 256^3, then the shapes the bench models use: BERT-base's projections and
# FFN (M = 128 tokens), ResNet-50's 3x3 layer3 conv as an implicit GEMM is measured in
# bench/run.sh instead.
shapes="1024x1024x1024 256x256x256 128x768x768 128x768x3072 128x3072x768 512x512x512"
echo "| M x K x N | median ms | GFLOP/s | % of peak | best ms | best GFLOP/s | best % of peak |"
echo "|---|---|---|---|---|---|---|"
for shape in $shapes; do
  IFS=x read -r m k n <<<"$shape"
  /usr/bin/python3 - "$m" "$k" "$n" "$work/mm.onnx" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
m, k, n, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.save(model, out)
PY
  ./build/clients/kiln compile "$work/mm.onnx" -o "$work/mm.so" 2> /dev/null
  ./build/clients/kiln bench "$work/mm.so" --iters "$iters" --threads 1 > "$work/bench.json"
  /usr/bin/python3 - "$m" "$k" "$n" "$peak" "$work/bench.json" <<'PY'
import json, sys
m, k, n, peak = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
r = json.load(open(sys.argv[5]))
flops = 2 * m * k * n
row = [f"{m} x {k} x {n}"]
for ms in (r["median_ms"], r["min_ms"]):
    gflops = flops / (ms * 1e-3) / 1e9
    row += [f"{ms:.3f}", f"{gflops:.1f}", f"{100 * gflops / peak:.0f} %"]
print("| " + " | ".join(row) + " |")
PY
done
