#!/usr/bin/env bash
# Writes the kiln.v1 Python stubs into kiln_client/_generated (needs protobuf-compiler
# and protobuf-compiler-grpc's grpc_python_plugin).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$here/kiln_client/_generated
mkdir -p "$out"
protoc -I"$root/proto" --python_out="$out" --grpc_out="$out" --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" \
  "$root/proto/kiln/v1/spec.proto" "$root/proto/kiln/v1/report.proto" "$root/proto/kiln/v1/kiln.proto" \
  "$root/proto/kiln/v1/worker.proto"
touch "$out/kiln/__init__.py" "$out/kiln/v1/__init__.py"
echo "generated $out/kiln/v1"
