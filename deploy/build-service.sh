#!/usr/bin/env bash
# The Dockerfile's build stage: configures and builds kilnd, kiln-worker and kiln, then
# copies them to OUT/bin and lists the Debian packages they need at run time in
# OUT/runtime-packages.txt.
#   build-service.sh BUILD_DIR OUT_DIR
set -euo pipefail
if [ "$#" != 2 ]; then
  echo "usage: build-service.sh BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$1
out=$2
cd "$(dirname "$0")/.."
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C "$build" kilnd kiln-worker kiln
mkdir -p "$out/bin"
cp "$build/server/kilnd" "$build/worker/kiln-worker" "$build/clients/kiln" "$out/bin/"
strip --strip-debug "$out/bin/"*
bash deploy/runtime-packages.sh "$out/bin/kilnd" "$out/bin/kiln-worker" "$out/bin/kiln" > "$out/runtime-packages.txt"
echo "build-service: $(ls "$out/bin" | tr '\n' ' ')-> $out/bin; runtime packages: $(wc -l < "$out/runtime-packages.txt")"
