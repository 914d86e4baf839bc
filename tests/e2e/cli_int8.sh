#!/usr/bin/env bash
# End to end through the kiln CLI: post-training int8 quantization of the sample model with
# a calibration directory, the compile report's quantization section, the int8 artifact's
# output against the fp32 one, and the errors a user gets for missing or bad calibration.
source "$(dirname "$0")/cli_common.sh"
# Calibration: 8 samples in the ONNX test-data layout (one directory each, input_0.pb).
/usr/bin/python3 - "$work" <<'PY'
import os, sys
import numpy as np
from onnx import numpy_helper
work = sys.argv[1]
rng = np.random.default_rng(11)
for k in range(8):
    os.makedirs(f"{work}/cal/sample_{k}")
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    open(f"{work}/cal/sample_{k}/input_0.pb", "wb").write(numpy_helper.from_array(x, "input").SerializeToString())
os.makedirs(f"{work}/badcal/s0")
x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
open(f"{work}/badcal/s0/input_0.pb", "wb").write(numpy_helper.from_array(x, "input").SerializeToString())
PY
"$kiln" compile "$work/sample.onnx" -o "$work/fp32.so"
"$kiln" compile "$work/sample.onnx" -o "$work/int8.so" --precision int8 --calibration "$work/cal" \
  --calibration-method percentile --report "$work/report.json" 2> "$work/compile.txt"
grep -q "kiln: int8: 3 Conv/MatMul quantized (percentile calibration, 8 samples), 0 kept in f32" "$work/compile.txt"
# (The Gemm classifier is quantized as a MatMul plus its bias.)
grep -Eq "kiln: int8: lowest SNR against f32 \(first sample\): (conv[12] \(Conv\)|fc \(MatMul\)) [0-9.]+ dB, " "$work/compile.txt"
/usr/bin/python3 - "$work/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["schema"] == "kiln.compile-report" and report["schema_version"] == 2, report["schema"]
q = report["quantization"]
assert (q["precision"], q["method"], q["calibration_samples"], q["quantized_nodes"], q["kept_float"]) == \
    ("int8", "percentile", 8, 3, []), q
layers = q["layers_by_error"]
assert sorted(l["node"] for l in layers) == ["conv1", "conv2", "fc"], layers
assert layers[0]["snr_db"] <= layers[1]["snr_db"] <= layers[2]["snr_db"] and all(20 < l["snr_db"] < 80 for l in layers), layers
PY
"$kiln" inspect "$work/int8.so" | grep -q '"precision": "int8"'
# --keep-float leaves a node in f32.
"$kiln" compile "$work/sample.onnx" -o "$work/keep.so" --precision int8 --calibration "$work/cal" --keep-float conv2 \
  2> "$work/compile.txt"
grep -q "int8: 2 Conv/MatMul quantized .*1 kept in f32: conv2 (--keep-float)" "$work/compile.txt"

# kiln quantize --emit-qdq: a QDQ model other runtimes can run; Kiln compiles it as it is
# (fold-qdq turns it into integer ops).
"$kiln" quantize "$work/sample.onnx" --emit-qdq "$work/qdq.onnx" --calibration "$work/cal" 2> "$work/quantize.txt"
grep -q "QDQ around 3 Conv/MatMul (minmax calibration, 8 samples)" "$work/quantize.txt"
/usr/bin/python3 - "$work/qdq.onnx" <<'PY'
import sys
import onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m)
ops = [n.op_type for n in m.graph.node]
assert ops.count("QuantizeLinear") == 6 and "BatchNormalization" not in ops and "Gemm" not in ops, ops
PY
"$kiln" compile "$work/qdq.onnx" -o "$work/qdq.so" --report "$work/qdq_report.json"
/usr/bin/python3 -c "
import json, sys
passes = json.load(open(sys.argv[1]))['passes']
assert any(p['name'] == 'fold-qdq' and p['changed'] for p in passes), passes" "$work/qdq_report.json"
# The int8 artifact and the compiled QDQ model against fp32: close, and the same class.
for so in fp32 int8 qdq; do
  "$kiln" run "$work/$so.so" --input input="$work/sample.input.pb" --output-dir "$work/out_$so"
done
/usr/bin/python3 - "$work/out_fp32/output_0.pb" "$work/out_int8/output_0.pb" "$work/out_qdq/output_0.pb" <<'PY'
import sys
import numpy as np
from onnx import TensorProto, numpy_helper
def load(path):
    t = TensorProto()
    t.ParseFromString(open(path, "rb").read())
    return numpy_helper.to_array(t)
fp32 = load(sys.argv[1])
assert fp32.max() < 0.999, "degenerate output"
for path in sys.argv[2:]:
    got = load(path)
    assert np.abs(fp32 - got).max() < 0.02, (path, np.abs(fp32 - got).max())
    assert fp32.argmax() == got.argmax(), (path, fp32, got)
PY

# Errors name the problem and exit non-zero.
status=0; "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --precision int8 2> "$work/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "\-\-precision int8 needs --calibration" "$work/err.txt"
status=0; "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --calibration "$work/cal" 2> "$work/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "\-\-calibration goes with --precision int8" "$work/err.txt"
status=0; "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --precision int8 --calibration "$work/cal" --calibration-method mean \
  2> "$work/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "\-\-calibration-method 'mean' is not one of minmax, percentile, entropy" "$work/err.txt"
if "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --precision int8 --calibration "$work/nowhere" 2> "$work/err.txt"; then exit 1; fi
grep -q "calibration directory '$work/nowhere' does not exist" "$work/err.txt"
if "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --precision int8 --calibration "$work/badcal" 2> "$work/err.txt"; then exit 1; fi
grep -q "calibration sample 0: input set tensor 0 (input: f32\[1,3,16,16\]) does not match model input 'input' (f32\[1,3,32,32\])" "$work/err.txt"
if "$kiln" compile "$work/sample.onnx" -o "$work/x.so" --precision int8 --calibration "$work/cal" --keep-float convX 2> "$work/err.txt"; then exit 1; fi
grep -q "the graph has no node 'convX'" "$work/err.txt"
status=0; "$kiln" quantize "$work/sample.onnx" --calibration "$work/cal" 2> "$work/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "needs --emit-qdq OUT.onnx" "$work/err.txt"
echo "e2e_cli_int8: ok"
