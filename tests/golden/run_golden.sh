#!/bin/bash
# One golden IR test: IR text in, expected IR text out.
#   run_golden.sh KILN_OPT FILECHECK FILE.kir
# FILE.kir holds the input graph and, in comment lines, what to do and what to expect:
#   // PIPELINE: simplify,dce      passes to run (kiln-opt --pipeline)
#   // OPT-ARGS: --synthetic-calibration 4   more kiln-opt flags (word-split)
#   // EXPECT-ERROR                kiln-opt must fail; its error message is checked instead
#   // CHECK: ..., CHECK-NEXT: ..., CHECK-NOT: ...   FileCheck directives on the output
set -euo pipefail
opt=$1 filecheck=$2 file=$3
pipeline=$(sed -n 's|^// PIPELINE: *||p' "$file" | head -1)
args=("$file")
[ -n "$pipeline" ] && args+=(--pipeline "$pipeline")
read -r -a extra <<< "$(sed -n 's|^// OPT-ARGS: *||p' "$file" | head -1)"
args+=("${extra[@]}")
if grep -q '^// EXPECT-ERROR' "$file"; then
  if out=$("$opt" "${args[@]}" 2>&1); then
    echo "kiln-opt succeeded but $file expects an error; output:" >&2
    echo "$out" >&2
    exit 1
  fi
else
  out=$("$opt" "${args[@]}")
fi
echo "$out" | "$filecheck" --dump-input=fail "$file"
