#!/usr/bin/env bash
# Quick start: installs the Debian packages, builds Kiln, makes the bundled sample model,
# compiles it with `kiln compile`, runs it with `kiln run` and prints the result.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build kiln
mkdir -p build/sample
/usr/bin/python3 clients/examples/make_sample_model.py build/sample/sample.onnx
./build/clients/kiln compile build/sample/sample.onnx -o build/sample/sample.so --report build/sample/report.json
./build/clients/kiln inspect build/sample/sample.so
./build/clients/kiln run build/sample/sample.so --input input=build/sample/sample.input.pb --output-dir build/sample/out
/usr/bin/python3 -c "
from onnx import TensorProto, numpy_helper
t = TensorProto(); t.ParseFromString(open('build/sample/out/output_0.pb', 'rb').read())
print(t.name, numpy_helper.to_array(t).round(4).tolist())"
./build/clients/kiln bench build/sample/sample.so
