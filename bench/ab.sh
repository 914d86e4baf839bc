#!/usr/bin/env bash
# Two Kiln builds on the same machine in the same minutes: this checkout's against an
# older revision's, to tell a change in the code from a change in the machine.
#   bench/ab.sh --base REV [--base-kiln PATH] [--models a,b,...] [--threads "1 2"]
#               [--rounds R] [--iters N]
# Builds REV's `kiln` in build-ab/REV (a git worktree, kept for the next run) unless
# --base-kiln names one, builds this checkout's (build/), compiles each model by both, then
# times the two artifacts in turn R rounds (default 5), each `kiln bench` by its own build
# (median of N runs, default 30). Prints Markdown: each build's round medians, the median of
# each, and tip / base (above 1: this checkout is slower).
set -euo pipefail
cd "$(dirname "$0")/.."
base=""
base_kiln=""
models=squeezenet1_1,mobilenet_v2,resnet50,efficientnet_b0,bert_base
threads="1 2"
rounds=5
iters=30
source bench/lib.sh
bench_args "$0" 10 "$@"
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
# One timed run: the median in ms of KILN's `bench` of ARTIFACT at THREADS.
time_once() { "$1" bench "$2" --threads "$3" --iters "$iters" | field median_ms; }
echo "| model | threads | base runs (ms) | tip runs (ms) | base median | tip median | tip / base |"
echo "|---|---|---|---|---|---|---|"
for m in ${models//,/ }; do
  for side in base tip; do
    compiler=$kiln
    [ $side = base ] && compiler=$base_kiln
    if ! "$compiler" compile "bench/models/$m.onnx" -o "$tmp/$m.$side.so" > "$tmp/compile.log" 2>&1; then
      cat "$tmp/compile.log" >&2
      exit 1
    fi
  done
  for t in $threads; do
    b=() n=()
    for ((r = 1; r <= rounds; ++r)); do
      b+=("$(time_once "$base_kiln" "$tmp/$m.base.so" "$t")")
      n+=("$(time_once "$kiln" "$tmp/$m.tip.so" "$t")")
    done
    bm=$(printf '%s\n' "${b[@]}" | median)
    nm=$(printf '%s\n' "${n[@]}" | median)
    printf '| %s | %s | %s | %s | %.2f | %.2f | %.3f |\n' "$m" "$t" \
      "$(printf '%.2f ' "${b[@]}")" "$(printf '%.2f ' "${n[@]}")" "$bm" "$nm" \
      "$(awk -v a="$nm" -v b="$bm" 'BEGIN {print a / b}')"
  done
done
