#!/bin/bash
# Exports the real models the test suite checks (bench/make_models.py, fixed seed) and runs
# kiln-model-check on each: compiled artifact vs the independent reference (<= 1e-4 x output
# scale), and vs PyTorch's own outputs and ONNX Runtime's (bench/ort_run.js), each within
# 1e-3 x max(1, scale) with cosine >= 0.9999. BERT-base runs only in bench/.
#   run_models.sh KILN_MODEL_CHECK SOURCE_DIR WORK_DIR
set -euo pipefail
check=$1 src=$2 work=$3
ort_run=$src/bench/ort_run.js
models=(squeezenet1_1 resnet18_tiny mobilenet_v2 resnet50 bert_tiny lraspp_mobilenet_v3 deeplabv3_mobilenet_v3
  mobilenet_v3_small resnext50_32x4d efficientnet_v2_s r3d_18 swin_t vgg11 ssdlite320_mobilenet_v3_large
  fasterrcnn_mobilenet_v3_large_320_fpn convnext_tiny googlenet vit_s16 gpt_decoder)
mkdir -p "$work"
# PyTorch's exporter is chatty (TracerWarnings): keep its log, show it only on failure.
if ! /usr/bin/python3 "$src/bench/make_models.py" "$work" --only "$(IFS=,; echo "${models[*]}")" > "$work/export.log" 2>&1; then
  cat "$work/export.log" >&2
  echo "FAILED: exporting the models" >&2
  exit 1
fi
grep -v -i -E "warning|^ *warnings.warn|^$" "$work/export.log" || true
failed=0
for m in "${models[@]}"; do
  inputs=()
  for f in "$work/$m".input_*.pb; do inputs+=(--input "$f"); done
  args=("${inputs[@]}")
  for f in "$work/$m".output_*.pb; do args+=(--expected "$f"); done
  if ! node "$ort_run" "$work/$m.onnx" "${inputs[@]}" --output-dir "$work/$m.ort" 2> "$work/$m.ort.log"; then
    cat "$work/$m.ort.log" >&2
    echo "FAILED: $m under ONNX Runtime" >&2
    failed=1
    continue
  fi
  for f in "$work/$m.ort"/output_*.pb; do args+=(--ort-expected "$f"); done
  args+=(--expected-min-cosine 0.9999)
  # Detectors: boxes, scores (sorted best first), labels; detections whose scores tie within
  # the tolerance may come in either order (kiln-model-check --ranked-by).
  case $m in fasterrcnn_* | ssdlite*) args+=(--ranked-by 1) ;; esac
  if ! "$check" "$work/$m.onnx" "${args[@]}"; then
    echo "FAILED: $m" >&2
    failed=1
  fi
done
exit $failed
