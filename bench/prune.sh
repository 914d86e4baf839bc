#!/usr/bin/env bash
# Structured pruning on the bench models: parameters, FLOPs and latency of Kiln fp32
# builds with `--prune-channels R` against the unpruned build, same machine and inputs.
#   bench/prune.sh [--models a,b] [--ratios "0.25 0.5"] [--threads "1"] [--rounds R] [--iters N]
# Expects bench/run.sh's setup (build/, bench/models/*.onnx; it runs make_models.py for a
# missing model). The bench models have random weights, so this measures size and speed
# only; accuracy after pruning is measured on a trained model by tests/e2e/digits_int8.py
# --prune-channels. Alternates the builds R rounds (default 3) of N-run medians; prints
# Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
models=resnet50,mobilenet_v2,squeezenet1_1
ratios="0.25 0.5"
threads="1"
rounds=3
iters=20
source bench/lib.sh
bench_args "$0" 9 "$@"
bench_setup "$models"
ms() { "$kiln" bench "$1" --threads "$2" --iters "$iters" 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['median_ms'])"; }
echo "| model | --prune-channels | layers pruned (kept whole) | parameters M | GFLOPs | threads | unpruned ms | pruned ms | speedup | per round |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for m in ${models//,/ }; do
  "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.so" 2> /dev/null
  for r in $ratios; do
    "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.$r.so" --prune-channels "$r" --report "$tmp/$m.$r.json" 2> /dev/null
    summary=$(/usr/bin/python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))['pruning']
b, a = p['before'], p['after']
print(f\"{p['pruned_layers']} ({len(p['kept_whole'])}) | {b['parameters']/1e6:.2f} -> {a['parameters']/1e6:.2f} | {b['flops']/1e9:.3f} -> {a['flops']/1e9:.3f}\")" "$tmp/$m.$r.json")
    for t in $threads; do
      base=() pruned=() per=()
      for ((k = 0; k < rounds; ++k)); do
        b=$(ms "$tmp/$m.so" "$t"); p=$(ms "$tmp/$m.$r.so" "$t")
        base+=("$b"); pruned+=("$p"); per+=("$(awk -v b="$b" -v p="$p" 'BEGIN {printf "%.2f", b / p}')")
      done
      bm=$(printf '%s\n' "${base[@]}" | median); pm=$(printf '%s\n' "${pruned[@]}" | median)
      echo "| $m | $r | $summary | $t | $(printf '%.2f' "$bm") | $(printf '%.2f' "$pm") | $(awk -v b="$bm" -v p="$pm" 'BEGIN {printf "%.2fx", b / p}') | $(IFS=,; echo "${per[*]}" | sed 's/,/, /g') |"
    done
  done
done
