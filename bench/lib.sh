# Shared by the bench scripts (source it after `cd` to the repository root).

# bench_args SCRIPT HELP_LAST_LINE "$@": each `--some-name VALUE` sets the script's variable
# some_name, which the script must have given a default; `--no-X` and `--skip-X` set X=0.
# `--help` prints the script's header comment (lines 2..HELP_LAST_LINE) and exits.
bench_args() {
  local script=$1 help_last=$2 arg var
  shift 2
  while [ $# -gt 0 ]; do
    arg=${1#--}
    var=${arg//-/_}
    case $1 in
      -h | --help)
        sed -n "2,${help_last}p" "$script" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
      --no-* | --skip-*)
        var=${var#no_}
        var=${var#skip_}
        if [ -n "${!var+set}" ]; then
          printf -v "$var" 0
          shift
          continue
        fi
        ;;
      --*)
        if [ -n "${!var+set}" ] && [ $# -ge 2 ]; then
          printf -v "$var" '%s' "$2"
          shift 2
          continue
        fi
        ;;
    esac
    echo "$(basename "$script"): unknown argument '$1' (see --help)" >&2
    exit 2
  done
}

# bench_models a,b,...: exports the bench models not yet in bench/models (make_models.py).
bench_models() {
  local missing=() m
  mkdir -p bench/models
  for m in ${1//,/ }; do [ -f "bench/models/$m.onnx" ] || missing+=("$m"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  if ! /usr/bin/python3 bench/make_models.py bench/models --only "$(IFS=,; echo "${missing[*]}")" \
    > bench/models/export.log 2>&1; then
    cat bench/models/export.log >&2
    echo "bench: exporting ${missing[*]} failed" >&2
    exit 1
  fi
}

# bench_setup MODELS: builds kiln (build/) and sets $kiln, exports MODELS, and makes a
# scratch directory $tmp removed on exit.
bench_setup() {
  ninja -C build kiln >&2
  kiln=build/clients/kiln
  bench_models "$1"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
}

# ort_setup: installs onnxruntime-node into bench/node_modules unless it is there.
ort_setup() {
  [ -f bench/node_modules/onnxruntime-node/package.json ] && return 0
  # The CPU library is bundled in the package; skip the optional CUDA download.
  (cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund >&2)
}

# input_shape FILE.pb: NAME=AxBxC of the TensorProto in FILE (for kiln bench --input-shape).
input_shape() {
  /usr/bin/python3 -c '
import sys
import onnx
t = onnx.load_tensor(sys.argv[1])
print(t.name + "=" + "x".join(str(d) for d in t.dims))' "$1"
}

# The median of the numbers on stdin, one a line.
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# field NAME: the JSON object's field NAME, from stdin.
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
