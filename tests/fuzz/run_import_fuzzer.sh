#!/usr/bin/env bash
# Fuzzes the ONNX importer for RUNS inputs (at most 120 s), seeded with a sample of the ONNX
# node-test models. A fixed seed and a count rather than a time: the same binary explores
# the same inputs on every machine, so a CI failure reproduces with this command (a timed
# run reached different inputs on a slower machine). Longer runs for finding bugs:
#   import_fuzzer -max_total_time=600 -artifact_prefix=DIR/ CORPUS_DIR
# (crash reports from the importer's child processes, which it survives, appear in the log
# and as artifacts; only a report that stops the fuzzer is a bug).
# Any crash or sanitizer report fails the test (libFuzzer exits non-zero).
set -euo pipefail
fuzzer=$1
runs=${2:-6000}
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
i=0
for model in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
  i=$((i + 1))
  (( i % 8 == 0 )) && cp "$model" "$corpus/seed_$i.onnx"
done
"$fuzzer" -seed=1 -runs="$runs" -max_total_time=120 -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$corpus/" "$corpus" 2>&1 | tail -15
