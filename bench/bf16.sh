#!/usr/bin/env bash
# `--precision bf16` against Kiln fp32 on the bench models: same build, same machine, same
# inputs and thread count, the two artifacts timed in turn.
#   bench/bf16.sh [--models a,b] [--threads "1 2"] [--rounds R] [--iters N]
# Expects bench/run.sh's setup (build/, bench/models/*.onnx; it runs make_models.py for a
# missing model) and a CPU with AVX512-BF16 (elsewhere `kiln compile --precision bf16`
# keeps fp32 and says why, and this script stops). Per model: compiles fp32 and bf16
# (timed), reports each bf16 output's error against fp32 on the bench input (the
# largest difference over the output's largest magnitude, the SNR, and for one row of
# class scores whether the top-1 agrees), then alternates the two runs R rounds (default
# 5) of N-run medians (default 20). The speed-up is fp32 / bf16 (above 1: bf16 faster),
# from the medians of the rounds, with its value per round. Prints Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
models=resnet50,bert_base
threads="1 2"
rounds=5
iters=20
source bench/lib.sh
bench_args "$0" 12 "$@"
bench_setup "$models"
accuracy_rows=()
timing_rows=()
for m in ${models//,/ }; do
  run_inputs=()
  for f in bench/models/"$m".input_*.pb; do
    run_inputs+=(--input "$(/usr/bin/python3 -c "import onnx,sys; t=onnx.TensorProto(); t.ParseFromString(open(sys.argv[1],'rb').read()); print(t.name)" "$f")=$f")
  done
  start=$(date +%s.%N)
  "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.fp32.so" 2> "$tmp/log"
  mid=$(date +%s.%N)
  "$kiln" compile "bench/models/$m.onnx" -o "$tmp/$m.bf16.so" --precision bf16 2> "$tmp/log"
  end=$(date +%s.%N)
  if ! grep -q "run with bf16 weights" "$tmp/log"; then
    cat "$tmp/log" >&2
    echo "bench/bf16.sh: $m did not compile to bf16 (see above)" >&2
    exit 1
  fi
  for p in fp32 bf16; do "$kiln" run "$tmp/$m.$p.so" "${run_inputs[@]}" --output-dir "$tmp/out_$m.$p" > /dev/null; done
  accuracy_rows+=("$(/usr/bin/python3 - "$m" "$tmp/out_$m.fp32" "$tmp/out_$m.bf16" "$start" "$mid" "$end" <<'PY'
import glob, os, sys
import numpy as np
from onnx import TensorProto, numpy_helper
def load(path):
    t = TensorProto()
    t.ParseFromString(open(path, "rb").read())
    return numpy_helper.to_array(t).astype(np.float64)
m, fp32_dir, bf16_dir = sys.argv[1:4]
start, mid, end = map(float, sys.argv[4:7])
cells = []
for path in sorted(glob.glob(f"{fp32_dir}/*.pb")):
    a, b = load(path), load(os.path.join(bf16_dir, os.path.basename(path)))
    scale = np.abs(a).max()
    snr = 10 * np.log10((a ** 2).sum() / ((a - b) ** 2).sum())
    top1 = ""
    if a.ndim <= 2 and a.size == a.shape[-1]:  # one row of class scores
        top1 = ", same top-1" if a.argmax() == b.argmax() else ", top-1 differs"
    cells.append(f"{os.path.basename(path)[:-3]}: {100 * np.abs(a - b).max() / scale:.2f} % of {scale:.3g}, {snr:.1f} dB{top1}")
print(f"| {m} | {'; '.join(cells)} | {mid - start:.1f} | {end - mid:.1f} |")
PY
)")
  for t in $threads; do
    kb=(); kf=(); per=()
    for r in $(seq "$rounds"); do
      a=$("$kiln" bench "$tmp/$m.bf16.so" --threads "$t" --iters "$iters" | field median_ms)
      b=$("$kiln" bench "$tmp/$m.fp32.so" --threads "$t" --iters "$iters" | field median_ms)
      kb+=("$a"); kf+=("$b"); per+=("$(/usr/bin/python3 -c "print(f'{$b / $a:.2f}')")")
    done
    timing_rows+=("$(/usr/bin/python3 - "$m" "$t" "${kb[*]}" "${kf[*]}" "${per[*]}" <<'PY'
import statistics, sys
m, t = sys.argv[1], sys.argv[2]
kb, kf = (statistics.median(map(float, s.split())) for s in sys.argv[3:5])
print(f"| {m} | {t} | {kb:.2f} | {kf:.2f} | {kf / kb:.2f} | {', '.join(sys.argv[5].split())} |")
PY
)")
  done
done
echo "| model | threads | Kiln bf16 ms | Kiln fp32 ms | speed-up (fp32 / bf16) | per round |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${timing_rows[@]}"
echo
echo "Error of the bf16 artifact against the fp32 one on the bench input, and compile seconds"
echo
echo "| model | per output: largest difference / largest magnitude, SNR | compile fp32 s | compile bf16 s |"
echo "|---|---|---|---|"
printf '%s\n' "${accuracy_rows[@]}"
