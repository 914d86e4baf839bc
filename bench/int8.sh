#!/usr/bin/env bash
# Int8 post-training quantization on the bench models: Kiln int8 against Kiln fp32, ONNX
# Runtime fp32, and ONNX Runtime int8 running the QDQ model `kiln quantize --emit-qdq`
# writes from the same calibration; same machine, same inputs, same thread count.
#   bench/int8.sh [--models a,b] [--samples N] [--method M] [--threads "1 2"] [--rounds R]
#                 [--iters N] [--no-trained]
# Expects bench/run.sh's setup (build/, bench/node_modules, bench/models/*.onnx; it runs
# make_models.py for a missing model). Calibration: N (default 4) seeded random samples
# shaped like each model's bench input (the bench models have random weights, so no image
# set is more representative; integer inputs such as token ids are drawn uniformly from the
# bench input's range). Per model: compiles fp32 and int8 (cold, timed), reports
# the int8 output's SNR and top-1/top-5 agreement against fp32 on the bench input, then
# alternates the four runs R rounds (default 3) of N-run medians. Last (unless
# --no-trained, about 3 minutes) the accuracy of a trained ResNet-50: torchvision's
# architecture trained at run time on scikit-learn's digits (tests/e2e/digits_int8.py
# --arch resnet50), int8 against fp32 on its 600 test images. Prints Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
models=resnet50,squeezenet1_1,mobilenet_v2,bert_base
samples=4
method=minmax
threads="1 2"
rounds=3
iters=20
trained=1
source bench/lib.sh
bench_args "$0" 16 "$@"
bench_setup "$models"
accuracy_rows=()
echo "| model | threads | Kiln int8 ms | ORT int8 (QDQ) ms | Kiln fp32 ms | ORT fp32 ms | ORT fp32 / Kiln int8 | per round | ORT int8 / Kiln int8 | Kiln int8 / ORT int8 per round |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for m in ${models//,/ }; do
  inputs=() run_inputs=()
  for f in bench/models/"$m".input_*.pb; do
    inputs+=(--input "$f")
    run_inputs+=(--input "$(/usr/bin/python3 -c "import onnx,sys; t=onnx.TensorProto(); t.ParseFromString(open(sys.argv[1],'rb').read()); print(t.name)" "$f")=$f")
  done
  /usr/bin/python3 - "$tmp/cal_$m" "$samples" bench/models/"$m".input_*.pb <<'PY'
import os, sys
import numpy as np
from onnx import TensorProto, numpy_helper
rng = np.random.default_rng(1234)
for i, path in enumerate(sys.argv[3:]):
    t = TensorProto()
    t.ParseFromString(open(path, "rb").read())
    x = numpy_helper.to_array(t)
    for k in range(int(sys.argv[2])):
        os.makedirs(f"{sys.argv[1]}/sample_{k}", exist_ok=True)
        if np.issubdtype(x.dtype, np.integer):
            y = rng.integers(x.min(), x.max() + 1, x.shape).astype(x.dtype)
        else:
            y = (rng.standard_normal(x.shape) * x.std() + x.mean()).astype(x.dtype)
        open(f"{sys.argv[1]}/sample_{k}/input_{i}.pb", "wb").write(numpy_helper.from_array(y, t.name).SerializeToString())
PY
  start=$(date +%s.%N)
  "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.fp32.so" 2> "$tmp/log"
  mid=$(date +%s.%N)
  "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.int8.so" --precision int8 --calibration "$tmp/cal_$m" \
    --calibration-method "$method" --report "$tmp/$m.report.json" 2> "$tmp/log"
  end=$(date +%s.%N)
  "$kiln" quantize "bench/models/$m.onnx" --emit-qdq "$tmp/$m.qdq.onnx" --calibration "$tmp/cal_$m" \
    --calibration-method "$method" 2> "$tmp/log"
  for p in fp32 int8; do "$kiln" run "$tmp/$m.$p.so" "${run_inputs[@]}" --output-dir "$tmp/out_$m.$p" > /dev/null; done
  accuracy_rows+=("$(/usr/bin/python3 - "$m" "$tmp/out_$m.fp32/output_0.pb" "$tmp/out_$m.int8/output_0.pb" "$tmp/$m.report.json" \
    "$start" "$mid" "$end" "$samples" "$method" <<'PY'
import json, sys
import numpy as np
from onnx import TensorProto, numpy_helper
def load(path):
    t = TensorProto()
    t.ParseFromString(open(path, "rb").read())
    return numpy_helper.to_array(t).astype(np.float64)
m, a, b = sys.argv[1], load(sys.argv[2]), load(sys.argv[3])
classifier = a.ndim <= 2 and a.size == a.shape[-1]  # one row of class scores
a, b = a.ravel(), b.ravel()
q = json.load(open(sys.argv[4]))["quantization"]
start, mid, end = map(float, sys.argv[5:8])
snr = 10 * np.log10((a ** 2).sum() / ((a - b) ** 2).sum())
top5 = len(set(np.argsort(-a)[:5]) & set(np.argsort(-b)[:5]))
same, overlap = ("yes" if a.argmax() == b.argmax() else "no", f"{top5}/5") if classifier else ("n/a", "n/a")
print(f"| {m} | {sys.argv[9]}, {sys.argv[8]} samples | {q['quantized_nodes']} | {len(q['kept_float'])} | {snr:.1f} | "
      f"{same} | {overlap} | {mid - start:.1f} | {end - mid:.1f} |")
PY
)")
  for t in $threads; do
    ki=(); oi=(); kf=(); o=(); per=(); per8=()
    for r in $(seq "$rounds"); do
      a=$("$kiln" bench "$tmp/$m.int8.so" --threads "$t" --iters "$iters" | field median_ms)
      q=$(node bench/ort_bench.js "$tmp/$m.qdq.onnx" "${inputs[@]}" --threads "$t" --iters "$iters" | field median_ms)
      b=$("$kiln" bench "$tmp/$m.fp32.so" --threads "$t" --iters "$iters" | field median_ms)
      c=$(node bench/ort_bench.js "bench/models/$m.onnx" "${inputs[@]}" --threads "$t" --iters "$iters" | field median_ms)
      ki+=("$a"); oi+=("$q"); kf+=("$b"); o+=("$c"); per+=("$(/usr/bin/python3 -c "print(f'{$c / $a:.2f}')")")
      per8+=("$(/usr/bin/python3 -c "print(f'{$a / $q:.2f}')")")  # the bar's ratio, within one round
    done
    /usr/bin/python3 - "$m" "$t" "${ki[*]}" "${oi[*]}" "${kf[*]}" "${o[*]}" "${per[*]}" "${per8[*]}" <<'PY'
import statistics, sys
m, t = sys.argv[1], sys.argv[2]
ki, oi, kf, o = (statistics.median(map(float, s.split())) for s in sys.argv[3:7])
print(f"| {m} | {t} | {ki:.2f} | {oi:.2f} | {kf:.2f} | {o:.2f} | {o / ki:.2f} | {', '.join(sys.argv[7].split())} | "
      f"{oi / ki:.2f} | {', '.join(sys.argv[8].split())} |")
PY
  done
done
echo
echo "Accuracy of the int8 artifact against the fp32 one on the bench input, and cold compile seconds"
echo
echo "| model | calibration | quantized Conv/MatMul | kept f32 | SNR dB | same top-1 | top-5 overlap | compile fp32 s | compile int8 s |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${accuracy_rows[@]}"
if [ $trained = 1 ]; then
  /usr/bin/python3 tests/e2e/digits_int8.py "$kiln" --arch resnet50 --method "$method" --json "$tmp/trained.json" > "$tmp/trained.log" 2>&1 ||
    { cat "$tmp/trained.log" >&2; echo "bench/int8.sh: the trained ResNet-50 run failed" >&2; exit 1; }
  echo
  echo "A trained ResNet-50 (torchvision's, 10 classes, trained on scikit-learn's digits at 32 x 32), int8 against fp32 on 600 test images"
  echo
  echo "| calibration | quantized Conv/MatMul | fp32 test accuracy | int8 test accuracy | top-1 agreement | logit SNR dB | PyTorch: 1 % input noise, s8 weights alone (SNR dB) |"
  echo "|---|---|---|---|---|---|---|"
  /usr/bin/python3 - "$tmp/trained.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"| {r['method']}, {r['calibration_images']} images | {r['quantized_nodes']} | {100 * r['fp32_test_accuracy']:.2f} % | "
      f"{100 * r['int8_test_accuracy']:.2f} % | {100 * r['top1_agreement']:.1f} % | {r['logit_snr_db']:.1f} | "
      f"{r['torch_input_noise_1pct_snr_db']:.1f}, {r['torch_s8_weights_snr_db']:.1f} |")
PY
fi
