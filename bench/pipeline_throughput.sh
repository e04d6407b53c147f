#!/usr/bin/env bash
# Pipeline stages against data parallelism and one process, side by side in one run:
# the same model and global batch trained by 1 process (1 thread), by 2 data-parallel
# ranks, and by 2 pipeline stages with M micro-batches (1F1B and GPipe), `repeats`
# times interleaved. Throughput is measured in steady state: samples between the
# metrics file's step points 10 and the last, over the wall time between them. Each
# 2-rank figure is also given as a fraction of its limit measured in the same run,
# twice the one-process throughput (2 cores, 1 thread per rank).
#
#   bench/pipeline_throughput.sh [HERD] [--repeats 3] [--models "lenet5 resnet20"]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${1:-$root/build/herd}")
[ $# -gt 0 ] && shift
repeats=3 models="lenet5 resnet20"
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    *) echo "pipeline_throughput.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u '+%F %T UTC'), $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# herd: $("$herd" --version | head -1)"

# steady MODEL LABEL NP ARGS...: prints "MODEL LABEL samples_per_s"
steady() {
  local model=$1 label=$2 np=$3; shift 3
  rm -f "$tmp/m.jsonl"
  if [ "$np" = 1 ]; then
    "$herd" train --model "$model" "$@" --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err"
  else
    "$herd" run -np "$np" -- train --model "$model" "$@" --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err"
  fi || { echo "$model $label FAILED"; sed -n 1,5p "$tmp/err"; return; }
  python3 - "$model" "$label" "$tmp/m.jsonl" <<'PY'
import json, sys
model, label, path = sys.argv[1:4]
pts = [r for r in map(json.loads, open(path)) if r["kind"] == "step"]
a, b = pts[0], pts[-1]  # step 10 and the last logged step
# samples_per_s of a point is over the run so far: samples = rate x time
sa, sb = a["samples_per_s"] * a["time_s"], b["samples_per_s"] * b["time_s"]
print(f"{model} {label} {(sb - sa) / (b['time_s'] - a['time_s']):.1f}")
PY
}

for model in $models; do
  case $model in
    lenet5) data=synthetic:1,28,28,10,40000 steps=200 ;;
    resnet20) data=synthetic:3,32,32,10,8000 steps=60 ;;
    *) data=synthetic:1,28,28,10,40000 steps=100 ;;
  esac
  common=(--data "$data" --epochs 1 --max-steps "$steps" --threads 1 --log-every 10 --quiet
          --eval-every 0)
  echo "# $model: global batch 64, $steps steps, throughput from step 10 on"
  for ((r = 1; r <= repeats; r++)); do
    steady "$model" one 1 "${common[@]}" --batch-size 64
    steady "$model" dp2 2 "${common[@]}" --batch-size 32
    for m in 4 8 16; do
      steady "$model" "pp2_1f1b_m$m" 2 "${common[@]}" --batch-size 64 --pipeline-stages 2 --micro-batches $m
    done
    steady "$model" pp2_gpipe_m8 2 "${common[@]}" --batch-size 64 --pipeline-stages 2 --micro-batches 8 \
      --pp-schedule gpipe
  done
done
