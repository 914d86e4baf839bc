#!/usr/bin/env bash
# Two Kiln builds on the same machine in the same minutes: this checkout's against an
# older revision's, to tell a change in the code from a change in the machine.
#   bench/ab.sh --base REV [--base-kiln PATH] [--models a,b,...] [--threads "1 2"]
#               [--rounds R] [--iters N] [--no-ort]
# Builds REV's `kiln` in build-ab/REV (a git worktree, kept for the next run) unless
# --base-kiln names one, builds this checkout's (build/), compiles each model by both, then
# times the two artifacts and ONNX Runtime (bench/ort_bench.js, same inputs and threads) in
# turn R rounds (default 5), each `kiln bench` by its own build (median of N runs, default
# 30). Prints Markdown: the medians of the rounds, each build's ratio to ORT (below 1:
# faster than ORT), and tip / base with its value per round (above 1: this checkout is
# slower).
set -euo pipefail
cd "$(dirname "$0")/.."
base=""
base_kiln=""
models=squeezenet1_1,mobilenet_v2,resnet50,efficientnet_b0,bert_base
threads="1 2"
rounds=5
iters=30
ort=1
source bench/lib.sh
bench_args "$0" 13 "$@"
if [ -z "$base_kiln" ]; then
  [ -n "$base" ] || { echo "ab.sh: give --base REV or --base-kiln PATH (see --help)" >&2; exit 2; }
  rev=$(git rev-parse --short "$base")
  dir=build-ab/$rev
  [ -d "$dir" ] || git worktree add --detach "$dir" "$rev" >&2
  cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  ninja -C "$dir/build" kiln >&2
  base_kiln=$dir/build/clients/kiln
fi
bench_setup "$models"
[ $ort = 1 ] && ort_setup
# One timed run: the median in ms of KILN's `bench` of ARTIFACT at THREADS.
time_once() { "$1" bench "$2" --threads "$3" --iters "$iters" | field median_ms; }
# The same for ONNX Runtime: MODEL at THREADS with the model's bench inputs.
time_ort() {
  local inputs=() f
  for f in bench/models/"$1".input_*.pb; do inputs+=(--input "$f"); done
  node bench/ort_bench.js "bench/models/$1.onnx" "${inputs[@]}" --threads "$2" --iters "$iters" | field median_ms
}
echo "| model | threads | base ms | tip ms | ORT ms | base / ORT | tip / ORT | tip / base | tip / base per round |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in ${models//,/ }; do
  for side in base tip; do
    compiler=$kiln
    [ $side = base ] && compiler=$base_kiln
    if ! "$compiler" compile "bench/models/$m.onnx" -o "$tmp/$m.$side.so" > "$tmp/compile.log" 2>&1; then
      cat "$tmp/compile.log" >&2
      exit 1
    fi
    # The same page-cache state for both: how a file came to be cached (written through a
    # mapping, one write, read back after eviction) decides whether its weights are mapped
    # in 2 MiB pages, which moved a DRAM-bound classifier head by 20 % (bench/RESULTS.md).
    # A fresh copy written in small pieces is what both get.
    cat "$tmp/$m.$side.so" > "$tmp/$m.$side.copy.so"
    mv "$tmp/$m.$side.copy.so" "$tmp/$m.$side.so"
  done
  for t in $threads; do
    b=() n=() o=()
    for ((r = 1; r <= rounds; ++r)); do
      b+=("$(time_once "$base_kiln" "$tmp/$m.base.so" "$t")")
      n+=("$(time_once "$kiln" "$tmp/$m.tip.so" "$t")")
      [ $ort = 1 ] && o+=("$(time_ort "$m" "$t")")
    done
    /usr/bin/python3 - "$m" "$t" "${b[*]}" "${n[*]}" "${o[*]}" <<'EOF'
import statistics, sys
m, t = sys.argv[1:3]
b, n = [[float(v) for v in a.split()] for a in sys.argv[3:5]]
o = [float(v) for v in sys.argv[5].split()]
bm, nm = statistics.median(b), statistics.median(n)
ort = [f"{v:.2f}" for v in (statistics.median(o), bm / statistics.median(o), nm / statistics.median(o))] if o else ["-"] * 3
rounds = ", ".join(f"{y / x:.3f}" for x, y in zip(b, n))
print(f"| {m} | {t} | {bm:.2f} | {nm:.2f} | {' | '.join(ort)} | {nm / bm:.3f} | {rounds} |")
EOF
  done
done
