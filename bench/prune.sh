#!/usr/bin/env bash
# Pruning on the bench models, Kiln fp32 builds against the unpruned build, same machine
# and inputs. Two tables:
#   --prune-channels R (structured): parameters, FLOPs and latency (--models, --ratios).
#   --prune-weights R (1x16 blocks of MatMul/Gemm weights, run by the block-sparse kernel
#   below its crossover): time of the Linear layers (MatMul/Gemm by a constant weight, from
#   `kiln bench --profile`) and end to end, and the pruned artifact's error against the
#   unpruned one on the model's bench input (--weight-models, --weight-ratios; a ratio
#   ending in "e" prunes single elements instead, prune{weight-unit=element}).
#   bench/prune.sh [--models a,b] [--ratios "0.25 0.5"] [--weight-models bert_base]
#                  [--weight-ratios "0.5 0.8 0.9"] [--threads "1"] [--rounds R] [--iters N]
#                  [--no-channels] [--no-weights]
# Expects bench/run.sh's setup (build/, bench/models/*.onnx; it runs make_models.py for a
# missing model). The bench models have random weights, so the channel table measures size
# and speed only; accuracy after channel pruning is measured on a trained model by
# tests/e2e/digits_int8.py --prune-channels. Alternates the builds R rounds (default 3) of
# N-run medians; prints Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
models=resnet50,mobilenet_v2,squeezenet1_1
ratios="0.25 0.5"
threads="1"
rounds=3
iters=20
weight_models=bert_base
weight_ratios="0.5 0.8 0.9"
channels=1
weights=1
source bench/lib.sh
bench_args "$0" 18 "$@"
bench_setup "$models,$weight_models"
ms() { "$kiln" bench "$1" --threads "$2" --iters "$iters" 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['median_ms'])"; }
channel_table() {
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
}

# The Linear layers' ms per run in a `kiln bench --profile` listing (stdin): the nodes named
# in $tmp/$1.linear (MatMul/Gemm nodes of the model with a constant weight).
linear_ms() {
  /usr/bin/python3 -c "
import re, sys
names = set(open(sys.argv[1]).read().split())
total = 0.0
for line in sys.stdin:
    m = re.match(r'\s*\d+\s+([\d.]+)\s+\S+\s+\S+\s+#\d+ (\S+) \(', line)
    if m and m.group(2) in names: total += float(m.group(1))
print(total)" "$tmp/$1.linear"
}

# bench_profiled ARTIFACT THREADS MODEL: "end-to-end-median-ms linear-ms".
bench_profiled() {
  local out
  out=$("$kiln" bench "$1" --threads "$2" --iters "$iters" --profile 2> "$tmp/profile.txt")
  echo "$(echo "$out" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['median_ms'])") $(linear_ms "$3" < "$tmp/profile.txt")"
}

# error MODEL DIR_UNPRUNED DIR_PRUNED: the worst output's relative L2 error and SNR.
output_error() {
  /usr/bin/python3 -c "
import glob, math, os, sys
import numpy as np
from onnx import numpy_helper, load_tensor
worst = 0.0
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'output_*.pb'))):
    want = numpy_helper.to_array(load_tensor(f)).astype(np.float64)
    got = numpy_helper.to_array(load_tensor(os.path.join(sys.argv[2], os.path.basename(f)))).astype(np.float64)
    worst = max(worst, float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)))
print(f'{worst:.3f} ({-20 * math.log10(max(worst, 1e-12)):.1f} dB)')" "$1" "$2"
}

weight_table() {
  echo "| model | --prune-weights | weights run sparse (1x16 blocks nonzero) | error vs unpruned: rel. L2 (SNR) | threads | Linear ms unpruned | Linear ms pruned | Linear speedup | per round | end-to-end ms unpruned | pruned | speedup | per round |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for m in ${weight_models//,/ }; do
    /usr/bin/python3 -c "
import onnx, sys
g = onnx.load(sys.argv[1], load_external_data=False).graph
const = {i.name for i in g.initializer} | {o for n in g.node if n.op_type == 'Constant' for o in n.output}
print('\n'.join(n.name for n in g.node if n.op_type in ('MatMul', 'Gemm') and len(n.input) > 1 and n.input[1] in const))" \
      "bench/models/$m.onnx" > "$tmp/$m.linear"
    inputs=()
    for f in bench/models/"$m".input_*.pb; do inputs+=(--input "$(input_shape "$f" | cut -d= -f1)=$f"); done
    "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.so" 2> /dev/null
    "$kiln" run "$tmp/$m.so" "${inputs[@]}" --output-dir "$tmp/$m.out" > /dev/null
    for r in $weight_ratios; do
      local ratio=${r%e} pipeline=()
      if [ "$ratio" != "$r" ]; then
        pipeline=(--pipeline "fold-qdq,fold-constants,simplify,cse,dce,fold-batchnorm,prune{weight-unit=element},fuse,dce,layout,plan-memory")
      fi
      "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.$r.so" --prune-weights "$ratio" "${pipeline[@]}" --report "$tmp/$m.$r.json" 2> /dev/null
      "$kiln" run "$tmp/$m.$r.so" "${inputs[@]}" --output-dir "$tmp/$m.$r.out" > /dev/null
      summary=$(/usr/bin/python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))['pruning']
print(f\"{p.get('sparse_layers', 0)} ({100 * p.get('block_density', 1):.1f} %)\")" "$tmp/$m.$r.json")
      error=$(output_error "$tmp/$m.out" "$tmp/$m.$r.out")
      label=$ratio
      [ "$ratio" != "$r" ] && label="$ratio (elements)"
      for t in $threads; do
        local e_base=() e_pruned=() e_per=() l_base=() l_pruned=() l_per=()
        for ((k = 0; k < rounds; ++k)); do
          read -r eb lb <<< "$(bench_profiled "$tmp/$m.so" "$t" "$m")"
          read -r ep lp <<< "$(bench_profiled "$tmp/$m.$r.so" "$t" "$m")"
          e_base+=("$eb"); e_pruned+=("$ep"); e_per+=("$(awk -v b="$eb" -v p="$ep" 'BEGIN {printf "%.2f", b / p}')")
          l_base+=("$lb"); l_pruned+=("$lp"); l_per+=("$(awk -v b="$lb" -v p="$lp" 'BEGIN {printf "%.2f", b / p}')")
        done
        ebm=$(printf '%s\n' "${e_base[@]}" | median); epm=$(printf '%s\n' "${e_pruned[@]}" | median)
        lbm=$(printf '%s\n' "${l_base[@]}" | median); lpm=$(printf '%s\n' "${l_pruned[@]}" | median)
        echo "| $m | $label | $summary | $error | $t | $(printf '%.1f' "$lbm") | $(printf '%.1f' "$lpm") | $(awk -v b="$lbm" -v p="$lpm" 'BEGIN {printf "%.2fx", b / p}') | $(IFS=,; echo "${l_per[*]}" | sed 's/,/, /g') | $(printf '%.1f' "$ebm") | $(printf '%.1f' "$epm") | $(awk -v b="$ebm" -v p="$epm" 'BEGIN {printf "%.2fx", b / p}') | $(IFS=,; echo "${e_per[*]}" | sed 's/,/, /g') |"
      done
    done
  done
}

[ "$channels" = 0 ] || channel_table
[ "$channels" = 0 ] || [ "$weights" = 0 ] || echo
[ "$weights" = 0 ] || weight_table
