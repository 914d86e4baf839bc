#!/usr/bin/env bash
# Quick start: installs the Debian packages, builds Kiln, makes the bundled sample model,
# then (1) compiles and runs it locally with the kiln CLI, and (2) starts kilnd with its
# embedded default (SQLite job store and cache under build/quickstart-data, one local
# worker per CPU), submits the sample model through the client, and prints the accuracy
# report and the artifact digest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build kiln kilnd kiln-worker
mkdir -p build/sample
/usr/bin/python3 clients/examples/make_sample_model.py build/sample/sample.onnx

echo "== local: kiln compile / run / bench"
./build/clients/kiln compile build/sample/sample.onnx -o build/sample/sample.so --report build/sample/report.json
./build/clients/kiln inspect build/sample/sample.so
./build/clients/kiln run build/sample/sample.so --input input=build/sample/sample.input.pb --output-dir build/sample/out
/usr/bin/python3 -c "
from onnx import TensorProto, numpy_helper
t = TensorProto(); t.ParseFromString(open('build/sample/out/output_0.pb', 'rb').read())
print(t.name, numpy_helper.to_array(t).round(4).tolist())"
./build/clients/kiln bench build/sample/sample.so

echo "== service: kilnd + kiln submit"
data=build/quickstart-data
rm -f "$data/kilnd.addr"
./build/server/kilnd --listen 127.0.0.1:0 --data-dir "$data" --metrics-listen 127.0.0.1:0 2> build/quickstart-kilnd.log &
kilnd_pid=$!
trap 'kill $kilnd_pid 2>/dev/null; wait $kilnd_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$data/kilnd.addr" ] && break; sleep 0.1; done
server=$(cat "$data/kilnd.addr")
echo "kilnd on $server (log: build/quickstart-kilnd.log, metrics: http://$(cat "$data/metrics.addr")/metrics)"
mkdir -p build/sample/inputs
cp build/sample/sample.input.pb build/sample/inputs/input.pb
./build/clients/kiln submit build/sample/sample.onnx --server "$server" --inputs build/sample/inputs \
  --wait --output build/sample/service-out --fail-on-accuracy
echo "== the accuracy report (build/sample/service-out/report.json)"
cat build/sample/service-out/report.json
