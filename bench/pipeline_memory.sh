#!/usr/bin/env bash
# Peak memory per rank with 1, 2 and 3 pipeline stages: herd's own count (the summary's
# memory_peak and the per-rank line: parameters, gradients, SGD momentum, activations,
# workspace) next to each process's peak resident set (VmHWM, from getrusage of the
# rank, which also holds the data set, libraries, MPI and oneDNN's own buffers).
#
#   bench/pipeline_memory.sh [HERD]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${1:-$root/build/herd}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Runs herd and prints its peak resident set, with the MPI rank.
cat >"$tmp/rss.py" <<'PY'
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"rss rank {rank}: {rss:.1f} MiB", file=sys.stderr)
sys.exit(rc)
PY
echo "# $(date -u '+%F %T UTC'); $("$herd" --version | head -1)"
for model in resnet20 widemlp; do
  case $model in
    resnet20) data=synthetic:3,32,32,10,1024 ;;
    widemlp) data=synthetic:1,28,28,10,1024 ;;
  esac
  args=(train --model "$model" --data "$data" --epochs 1 --max-steps 5 --batch-size 64
        --micro-batches 4 --threads 1 --eval-every 0)
  for p in 1 2 3; do
    echo "## $model, $p stage(s), batch 64 in 4 micro-batches of 16 (1f1b), SGD momentum"
    if [ $p = 1 ]; then # one process accumulating the same micro-batches
      python3 "$tmp/rss.py" "$herd" train --model "$model" --data "$data" --epochs 1 --max-steps 5 \
        --batch-size 16 --grad-accum 4 --threads 1 --eval-every 0 2>&1 >"$tmp/out" | grep -E "peak memory|rss rank"
    else
      mpirun --oversubscribe -np $p python3 "$tmp/rss.py" "$herd" "${args[@]}" --pipeline-stages $p \
        2>&1 >"$tmp/out" | grep -E "peak memory|rss rank" | sort
    fi
    grep -o "memory_peak_mib=[0-9.]*" "$tmp/out"
  done
done
