#!/usr/bin/env bash
# The Dockerfile's build stage: configures and builds kilnd, kiln-worker and kiln, copies
# them to OUT/bin, compiles the kernel library for every target preset into
# OUT/lib/kiln/kernels (the install tree's prebuilt kernels, searched before the cache;
# --no-kernels skips it) and lists the Debian packages they need at run time in
# OUT/runtime-packages.txt.
#   build-service.sh [--no-kernels] BUILD_DIR OUT_DIR
set -euo pipefail
kernels=1
if [ "${1:-}" = "--no-kernels" ]; then
  kernels=0
  shift
fi
if [ "$#" != 2 ]; then
  echo "usage: build-service.sh [--no-kernels] BUILD_DIR OUT_DIR" >&2
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
if [ "$kernels" = 1 ]; then
  "$out/bin/kiln" kernels --presets --dir "$out/lib/kiln/kernels"
fi
bash deploy/runtime-packages.sh "$out/bin/kilnd" "$out/bin/kiln-worker" "$out/bin/kiln" > "$out/runtime-packages.txt"
echo "build-service: $(ls "$out/bin" | tr '\n' ' ')-> $out/bin; runtime packages: $(wc -l < "$out/runtime-packages.txt")"
