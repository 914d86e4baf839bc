#!/usr/bin/env bash
# Fuzzes the ONNX importer for SECONDS, seeded with a sample of the ONNX node-test models.
# Any crash or sanitizer report fails the test (libFuzzer exits non-zero).
set -euo pipefail
fuzzer=$1
seconds=${2:-30}
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
i=0
for model in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
  i=$((i + 1))
  (( i % 8 == 0 )) && cp "$model" "$corpus/seed_$i.onnx"
done
"$fuzzer" -seed=1 -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 "$corpus" 2>&1 | tail -15
