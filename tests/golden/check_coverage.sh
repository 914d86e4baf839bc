#!/bin/bash
# Every pass `kiln-opt --list-passes` names must be run by some golden test: a .kir file in
# this folder whose PIPELINE line names it.
#   check_coverage.sh KILN_OPT GOLDEN_DIR
set -euo pipefail
opt=$1 dir=$2
passes=$("$opt" --list-passes | sed -n 's/^  \([a-z][a-z0-9-]*\) .*/\1/p')
[ -n "$passes" ] || { echo "kiln-opt --list-passes listed no passes" >&2; exit 1; }
missing=0
for pass in $passes; do
  if ! grep -Eq "^// PIPELINE: (.*[ ,])?${pass}([{, ]|\$)" "$dir"/*.kir; then
    echo "pass '$pass' has no golden test: add $dir/<name>.kir with '// PIPELINE: $pass'" >&2
    missing=1
  fi
done
exit $missing
