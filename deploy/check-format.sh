#!/usr/bin/env bash
# Fails when a tracked C/C++ file is not formatted as .clang-format says (clang-format-19).
#   check-format.sh          check (CI)
#   check-format.sh --fix    rewrite the files in place
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=$(command -v clang-format-19 || echo /usr/lib/llvm-19/bin/clang-format)
if [ ! -x "$clang_format" ]; then
  echo "check-format: clang-format-19 is not installed (deploy/install-deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.c')
if [ "${1:-}" = "--fix" ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
if ! "$clang_format" --dry-run -Werror "${files[@]}" 2> /tmp/kiln-format.$$; then
  grep -E '^[^ ].*: (error|warning):' /tmp/kiln-format.$$ | cut -d: -f1 | sort -u | sed 's/^/  not formatted: /' >&2
  rm -f /tmp/kiln-format.$$
  echo "check-format: run deploy/check-format.sh --fix (clang-format-19)" >&2
  exit 1
fi
rm -f /tmp/kiln-format.$$
echo "check-format: ${#files[@]} files formatted"
