#!/usr/bin/env bash
# Kiln against ONNX Runtime (the CPU library onnxruntime-node ships) on the real-model set.
#   bench/run.sh [--models a,b,...] [--threads "1 2"] [--iters N] [--skip-install]
# Builds `kiln` (build/), installs onnxruntime-node (bench/node_modules), exports the models
# (bench/models, bench/make_models.py), compiles each for the host, then runs `kiln bench`
# and bench/ort_bench.js with the same inputs and thread count. Each model is also checked
# by kiln-model-check (artifact vs reference interpreter, <= 1e-4 x output scale, and vs
# PyTorch's outputs, <= 1e-3 x scale; the big models are checked here, not in the tests). Prints a Markdown table: model,
# threads, Kiln median ms, ORT median ms, ratio (Kiln / ORT: below 1 is Kiln faster), and
# the worst output's max |artifact - interpreter| / output scale.
set -euo pipefail
cd "$(dirname "$0")/.."
models=squeezenet1_1,mobilenet_v2,resnet50,bert_tiny,bert_base
threads="1 2"
iters=20
install=1
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --skip-install) install=0; shift ;;
    -h|--help) sed -n 2,10p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ $install = 1 ] && bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build kiln kiln-model-check >&2
if [ ! -f bench/node_modules/onnxruntime-node/package.json ]; then
  # The CPU library is bundled in the package; skip the optional CUDA download.
  (cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund >&2)
fi
mkdir -p bench/models
missing=()
for m in ${models//,/ }; do [ -f "bench/models/$m.onnx" ] || missing+=("$m"); done
if [ ${#missing[@]} -gt 0 ]; then
  if ! /usr/bin/python3 bench/make_models.py bench/models --only "$(IFS=,; echo "${missing[*]}")" > bench/models/export.log 2>&1; then
    cat bench/models/export.log >&2
    echo "bench/run.sh: exporting the models failed" >&2
    exit 1
  fi
fi
kiln=build/clients/kiln
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
echo "| model | threads | Kiln median ms | ORT median ms | ratio (Kiln/ORT) | error vs interpreter |"
echo "|---|---|---|---|---|---|"
for m in ${models//,/ }; do
  so=bench/models/$m.so
  if [ ! -f "$so" ] || [ "$so" -ot "$kiln" ] || [ "$so" -ot "bench/models/$m.onnx" ]; then
    "$kiln" compile "bench/models/$m.onnx" -o "$so" >&2
  fi
  inputs=()
  for f in bench/models/"$m".input_*.pb; do inputs+=(--input "$f"); done
  # Accuracy: every output within 1e-4 x its scale of the reference interpreter.
  expected=()
  for f in bench/models/"$m".output_*.pb; do expected+=(--expected "$f"); done
  if ! check=$(build/tests/kiln-model-check "bench/models/$m.onnx" "${inputs[@]}" "${expected[@]}"); then
    echo "bench/run.sh: $m: the artifact does not match the reference interpreter:" >&2
    echo "$check" >&2
    exit 1
  fi
  err=$(echo "$check" | /usr/bin/python3 -c "import json,sys; print(f\"{max(json.loads(l)['relative_to_scale'] for l in sys.stdin if l.strip()):.1e}\")")
  for t in $threads; do
    k=$("$kiln" bench "$so" --threads "$t" --iters "$iters" | field median_ms)
    o=$(node bench/ort_bench.js "bench/models/$m.onnx" "${inputs[@]}" --threads "$t" --iters "$iters" | field median_ms)
    ratio=$(/usr/bin/python3 -c "print(f'{$k / $o:.2f}')")
    printf "| %s | %s | %.2f | %.2f | %s | %s |\n" "$m" "$t" "$k" "$o" "$ratio" "$err"
  done
done
