# Sourced by the kiln CLI's end-to-end scripts (SCRIPT KILN ROOT): sets $kiln and $root,
# makes a scratch directory $work (removed on exit) and the sample model $work/sample.onnx.
set -euo pipefail
kiln=$1
root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$root/clients/examples/make_sample_model.py" "$work/sample.onnx"
