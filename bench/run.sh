#!/usr/bin/env bash
# Kiln against ONNX Runtime (the CPU library onnxruntime-node ships) on the bench set.
#   bench/run.sh [--models a,b,...] [--threads "1 2"] [--iters N] [--iters-b8 N] [--rounds R]
#                [--rounds-b8 R] [--min-ms M] [--skip-install] [--no-check-b8]
# The default set (issue 22's): the five first bench models and BERT-tiny; ConvNeXt-T,
# GoogLeNet, RegNetY-400MF, ViT-S/16, a GPT-style decoder, VGG-11, ResNeXt-50,
# MobileNetV3-small, EfficientNetV2-S, Swin-T, the two segmentation models, R3D-18, the two
# detectors, an LSTM, a GRU and a TransformerEncoder with run-time shapes; every one also at
# batch 8 (NAME_b8; a detector's export unrolls its per-image postprocessing, 17,705 nodes
# for SSDlite). After the tables, the geometric mean of the ratios per batch and thread
# count and the models slower than ORT.
# Builds `kiln` (build/), installs onnxruntime-node (bench/node_modules), exports the models
# (bench/models, bench/make_models.py; NAME_b8 is NAME at batch 8, same weights), compiles
# each for the host (cold: every run recompiles, timed), then runs `kiln bench` and
# bench/ort_bench.js with the same inputs and thread count. Each model is first checked by
# kiln-model-check (artifact vs reference interpreter, <= 1e-4 x output scale, and vs
# PyTorch's outputs, <= 1e-3 x scale). Timing alternates the two runtimes R rounds (default
# 3 at batch 1, 1 at batch 8), each a median of N runs (default 20 at batch 1, 5 at batch 8),
# more where N runs of Kiln's artifact would take under M ms (default 500; at most 200
# runs), so small models are not timed by a handful of runs; the table gives the median of the
# rounds' medians and each round's ratio, so a neighbour taking the machine during one
# runtime's turn shows as one outlying round. --no-check-b8 skips the check at batch 8 (the
# reference interpreter's plain loops take minutes on VGG-11 or BERT-base at batch 8; the
# same weights are checked at batch 1). Prints Markdown: the latency table (ratio =
# Kiln / ORT, below 1 is Kiln faster), compile time per phase and pass, and peak memory
# (max RSS) of a timed run of each runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
batched=squeezenet1_1,mobilenet_v2,resnet50,efficientnet_b0,bert_base,convnext_tiny,googlenet,regnet_y_400mf
batched=$batched,vit_s16,gpt_decoder,vgg11,resnext50_32x4d,mobilenet_v3_small,efficientnet_v2_s,swin_t
batched=$batched,lraspp_mobilenet_v3,deeplabv3_mobilenet_v3,r3d_18,bert_tiny,lstm2,gru2_bidirectional,transformer_dyn
batched=$batched,ssdlite320_mobilenet_v3_large,fasterrcnn_mobilenet_v3_large_320_fpn
models=$batched,$(echo "$batched" | sed 's/,/_b8,/g')_b8
threads="1 2"
iters=20
iters_b8=5
rounds=3
rounds_b8=1
min_ms=500
install=1
check_b8=1
source bench/lib.sh
bench_args "$0" 25 "$@"
[ $install = 1 ] && bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build kiln kiln-model-check >&2
ort_setup
bench_models "$models"
kiln=build/clients/kiln
# Runs a command and prints its peak resident memory in MiB (its stdout goes to $1).
peak_rss() {
  local out=$1; shift
  /usr/bin/python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    subprocess.run(sys.argv[2:], stdout=out, check=True)
print(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f}")' "$out" "$@"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ratios=$tmp/ratios.txt
: > "$ratios"
echo "| model | batch | threads | Kiln median ms | ORT median ms | ratio (Kiln/ORT) | ratio per round | error vs interpreter |"
echo "|---|---|---|---|---|---|---|---|"
compile_rows=()
memory_rows=()
for m in ${models//,/ }; do
  so=bench/models/$m.so
  batch=1; base_n=$iters; r=$rounds
  case $m in *_b8) batch=8; base_n=$iters_b8; r=$rounds_b8 ;; esac
  "$kiln" compile "bench/models/$m.onnx" -o "$so" --report "$tmp/$m.report.json" >&2
  compile_rows+=("$(/usr/bin/python3 - "$m" "$tmp/$m.report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
t = r["timings_ms"]
phases = r.get("codegen_phases_ms", {})
passes = {}
for p in r["passes"]:
    passes[p["name"]] = passes.get(p["name"], 0) + p["time_ms"]
total = t["import"] + t["passes"] + t["codegen"]
print(f"| {sys.argv[1]} | {total / 1000:.1f} | {t['import'] / 1000:.2f} | {t['passes'] / 1000:.2f} ("
      + ", ".join(f"{k} {v / 1000:.2f}" for k, v in passes.items()) + ") | "
      + " | ".join(f"{phases.get(k, 0) / 1000:.2f}" for k in ("plan", "glue", "kernel-library", "link")) + " |")
EOF
)")
  inputs=()
  for f in bench/models/"$m".input_*.pb; do inputs+=(--input "$f"); done
  # kiln bench draws random inputs of the sample's sizes (what a dim known only at run time takes).
  shapes=()
  for f in bench/models/"$m".input_*.pb; do shapes+=(--input-shape "$(input_shape "$f")"); done
  # Accuracy: every output within 1e-4 x its scale of the reference interpreter.
  expected=()
  for f in bench/models/"$m".output_*.pb; do expected+=(--expected "$f"); done
  # A detector at 8 images: thousands of near-equal scores from random weights, which
  # PyTorch's NMS orders otherwise than ONNX's TopK among ties; checked against the
  # reference interpreter alone (the same weights at one image are held to PyTorch's too).
  case $m in fasterrcnn_*_b8 | ssdlite*_b8) expected=() ;; esac
  # A detector's rows whose sorted scores tie within the tolerance may come in either order
  # (kiln-model-check --ranked-by; tests/models/run_models.sh does the same).
  case $m in fasterrcnn_* | ssdlite*) expected+=(--ranked-by 1) ;; esac
  err="not checked"
  if [ $batch = 1 ] || [ $check_b8 = 1 ]; then
    if ! check=$(build/tests/kiln-model-check "bench/models/$m.onnx" "${inputs[@]}" "${expected[@]}"); then
      echo "bench/run.sh: $m: the artifact does not match the reference interpreter:" >&2
      echo "$check" >&2
      exit 1
    fi
    err=$(echo "$check" | /usr/bin/python3 -c "import json,sys; print(f\"{max(json.loads(l)['relative_to_scale'] for l in sys.stdin if l.strip()):.1e}\")")
  fi
  for t in $threads; do
    ks=() os=()
    # Each median over at least min_ms of runs: a 4 ms model's few runs at batch 8 gave
    # ratios from 0.75 to 2 on this shared machine (probed by 3 runs of Kiln's artifact).
    probe=$("$kiln" bench "$so" "${shapes[@]}" --threads "$t" --iters 3 --warmup 1 | field median_ms)
    n=$(/usr/bin/python3 -c "import math; print(max($base_n, min(200, math.ceil($min_ms / max($probe, 1e-3)))))")
    for ((round = 1; round <= r; ++round)); do
      rss=$(peak_rss "$tmp/k.json" "$kiln" bench "$so" "${shapes[@]}" --threads "$t" --iters "$n")
      [ $round = 1 ] && kiln_rss=$rss
      rss=$(peak_rss "$tmp/o.json" node bench/ort_bench.js "bench/models/$m.onnx" "${inputs[@]}" --threads "$t" --iters "$n")
      [ $round = 1 ] && ort_rss=$rss
      ks+=("$(field median_ms < "$tmp/k.json")")
      os+=("$(field median_ms < "$tmp/o.json")")
    done
    /usr/bin/python3 - "$m" "$batch" "$t" "$err" "${ks[*]}" "${os[*]}" <<'EOF'
import statistics, sys
m, batch, t, err = sys.argv[1:5]
ks, os_ = [float(v) for v in sys.argv[5].split()], [float(v) for v in sys.argv[6].split()]
k, o = statistics.median(ks), statistics.median(os_)
rounds = ", ".join(f"{a / b:.2f}" for a, b in zip(ks, os_))
print(f"| {m} | {batch} | {t} | {k:.2f} | {o:.2f} | {k / o:.2f} | {rounds} | {err} |")
EOF
    echo "$m $batch $t $(IFS=,; echo "${ks[*]}") $(IFS=,; echo "${os[*]}")" >> "$ratios"
    [ "$t" = "$(echo $threads | cut -d' ' -f1)" ] && memory_rows+=("| $m | $t | $kiln_rss | $ort_rss |")
  done
done
# What each process costs before it loads a model: kiln's CLI, node with onnxruntime loaded.
kiln_base=$(peak_rss "$tmp/h.txt" "$kiln" help)
ort_base=$(peak_rss "$tmp/n.txt" node -e "require('./bench/node_modules/onnxruntime-node')")
echo
echo "Geometric mean of the ratios (Kiln / ORT, each the ratio of the rounds' medians) and the" \
     "models slower than ORT, per batch and thread count"
echo
echo "| batch | threads | models | geometric mean | slower than ORT (ratio) |"
echo "|---|---|---|---|---|"
/usr/bin/python3 - "$ratios" <<'EOF'
import math, statistics, sys
rows = []
for line in open(sys.argv[1]):
    m, b, t, ks, os_ = line.split()
    k = statistics.median(float(v) for v in ks.split(","))
    o = statistics.median(float(v) for v in os_.split(","))
    rows.append((m, int(b), int(t), k / o))
for key in sorted({(b, t) for _, b, t, _ in rows}):
    sel = [(m, r) for m, b, t, r in rows if (b, t) == key]
    geo = math.exp(sum(math.log(r) for _, r in sel) / len(sel))
    slow = ", ".join(f"{m} {r:.2f}" for m, r in sel if r > 1.0) or "none"
    print(f"| {key[0]} | {key[1]} | {len(sel)} | {geo:.2f} | {slow} |")
EOF
echo
echo "Cold compile (kiln compile, seconds): total, import, passes, then codegen's phases"
echo
echo "| model | total s | import | passes (per pass) | plan | glue | kernel library | link |"
echo "|---|---|---|---|---|---|---|---|"
printf "%s\n" "${compile_rows[@]}"
echo
echo "Peak memory (max RSS of the timed run, MiB; the process alone, before loading a model:" \
     "kiln $kiln_base MiB, node + onnxruntime $ort_base MiB)"
echo
echo "| model | threads | Kiln (kiln bench) | ORT (node ort_bench.js) |"
echo "|---|---|---|---|"
printf "%s\n" "${memory_rows[@]}"
