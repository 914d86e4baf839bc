#!/usr/bin/env bash
# Runs every test: installs the Debian packages, builds, and runs CTest (unit, e2e and the
# ONNX conformance suite), ending with CTest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build
cd build && ctest --output-on-failure "$@"
