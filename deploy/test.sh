#!/usr/bin/env bash
# Runs every test: installs the Debian packages, checks the formatting (clang-format-19),
# builds the importer fuzzer (clang-14, sanitizers) and Kiln, and runs CTest (unit, e2e,
# fuzz and the ONNX conformance suite), ending with CTest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/check-format.sh
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DKILN_BUILD_FUZZERS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build-fuzz import_fuzzer
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_IMPORT_FUZZER="$PWD/build-fuzz/tests/import_fuzzer" > /dev/null
ninja -C build
cd build && ctest --output-on-failure "$@"
