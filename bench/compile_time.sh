#!/usr/bin/env bash
# Cold compile times per phase: the sample CNN, ResNet-50, BERT-base and chains of 1k, 2k,
# 4k and 8k nodes, each compiled for the host by `kiln compile` with empty compile caches
# except the per-target kernel library (built first by an untimed compile of each model,
# as `kiln kernels` or an install would).
#   bench/compile_time.sh [--models sample,resnet50,bert_base] [--chains "1000 2000 4000 8000"] [--runs N]
# Prints a Markdown table: the median of N runs (default 3) per model, in seconds, of the
# whole compile and of each phase (import, passes, codegen's plan, glue, kernel library,
# link), and the node count after the passes.
set -euo pipefail
cd "$(dirname "$0")/.."
models=sample,resnet50,bert_base
chains="1000 2000 4000 8000"
runs=3
source bench/lib.sh
bench_args "$0" 9 "$@"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build kiln >&2
kiln=build/clients/kiln
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
paths=()
for m in ${models//,/ }; do
  case $m in
    sample) /usr/bin/python3 clients/examples/make_sample_model.py "$work/sample.onnx" > /dev/null
            paths+=("$work/sample.onnx") ;;
    *) bench_models "$m"
       paths+=("bench/models/$m.onnx") ;;
  esac
done
for n in $chains; do
  /usr/bin/python3 bench/make_chain.py --nodes "$n" "$work/chain_$n.onnx"
  paths+=("$work/chain_$n.onnx")
done
echo "| model | nodes | total s | import | passes | plan | glue | kernel library | link |"
echo "|---|---|---|---|---|---|---|---|---|"
for path in "${paths[@]}"; do
  name=$(basename "$path" .onnx)
  "$kiln" compile "$path" -o "$work/warm.so" > /dev/null 2>&1  # builds the kernels it needs
  for ((run = 1; run <= runs; ++run)); do
    "$kiln" compile "$path" -o "$work/$name.so" --report "$work/$name.$run.json" > /dev/null 2>&1
  done
  /usr/bin/python3 - "$name" "$work" "$runs" <<'PY'
import json, statistics, sys
name, work, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
reports = [json.load(open(f"{work}/{name}.{r}.json")) for r in range(1, runs + 1)]
def median(f):
    return statistics.median(f(r) for r in reports) / 1000
total = median(lambda r: sum(r["timings_ms"].values()))
cells = [median(lambda r: r["timings_ms"]["import"]), median(lambda r: r["timings_ms"]["passes"])]
cells += [median(lambda r, k=k: r["codegen_phases_ms"].get(k, 0)) for k in ("plan", "glue", "kernel-library", "link")]
print(f"| {name} | {reports[0]['nodes']} | {total:.2f} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
PY
done
