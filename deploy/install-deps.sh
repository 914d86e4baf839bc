#!/usr/bin/env bash
# Installs every Debian 12 package that Kiln's build, tests and benchmarks need.
# Idempotent: safe to run on a machine that already has them. Needs root (or sudo).
#
#   install-deps.sh            everything (build, tests, bench)
#   install-deps.sh --build    only what building kiln, kilnd and kiln-worker needs (the
#                              Dockerfile's build stage)
set -euo pipefail

build_packages=(
  cmake ninja-build ccache g++ pkg-config
  llvm-19-dev llvm-19-tools lld-19 liblld-19-dev clang-19
  libonnx-dev libprotobuf-dev protobuf-compiler libabsl-dev zlib1g-dev libzstd-dev libedit-dev
  libxml2-dev libcurl4-openssl-dev
  libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev libssl-dev prometheus-cpp-dev libgtest-dev
  libspdlog-dev libfmt-dev libcli11-dev
)

packages=(
  # build, and the formatter CI checks with (deploy/check-format.sh)
  cmake ninja-build ccache g++ pkg-config git clang-format-19
  # compiler core
  llvm-19-dev llvm-19-tools lld-19 liblld-19-dev clang-19 libclang-rt-14-dev clang-14
  libonnx-dev libprotobuf-dev protobuf-compiler libabsl-dev zlib1g-dev libzstd-dev libedit-dev
  libxml2-dev libcurl4-openssl-dev
  # the base layer (common/): logging, and the command-line library
  libspdlog-dev libfmt-dev libcli11-dev
  # service
  libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev libssl-dev prometheus-cpp-dev
  # service tests: the Python client (grpcio) and a real Prometheus server
  python3-grpcio python3-protobuf python3-yaml prometheus curl
  # tests
  libgtest-dev libgmock-dev libbenchmark-dev libonnx-testdata
  # model export and the conformance helpers
  python3 python3-onnx python3-numpy python3-torch python3-torchvision
  # int8 accuracy test: the digits dataset
  python3-sklearn
)

only_build=0
if [ "${1:-}" = "--build" ]; then
  only_build=1
  packages=("${build_packages[@]}")
elif [ -n "${1:-}" ]; then
  echo "install-deps: unknown option '$1' (use --build or nothing)" >&2
  exit 2
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#packages[@]} packages present"
fi

# bench: ONNX Runtime comes from npm (onnxruntime-node). Some images ship Node.js from
# another repository whose nodejs package bundles npm and conflicts with Debian's npm.
if [ "$only_build" = 0 ] && ! command -v npm >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
# The model tests hold Kiln's outputs to ONNX Runtime's (bench/ort_run.js): its CPU library
# ships in the npm package (the install script, which fetches GPU builds, is skipped).
if [ "$only_build" = 0 ] && [ ! -d "$(dirname "$0")/../bench/node_modules/onnxruntime-node" ]; then
  (cd "$(dirname "$0")/../bench" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --loglevel=error)
fi
