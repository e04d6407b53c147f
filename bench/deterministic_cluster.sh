#!/usr/bin/env bash
# What --deterministic costs across hosts (issue 27): 2 hosts of the test cluster
# (tests/netcluster.sh: network namespaces joined by a bridge, Open MPI over TCP, a core
# each), herd train with and without it, side by side and interleaved (REPS rounds, the
# median kept), for MODELS on synthetic data (1x28x28; resnet20 3x32x32), one thread per
# rank, micro-batches of B and 6 of them per rank (a global batch of 12 x B). FLAGS go to
# both runs; DELAY_MS puts that one-way delay on every link (tests/netrelay).
# Raw lines appended to OUT (default bench/results/DATE-deterministic-cluster-bB.txt).
#   usage: [B=8] [STEPS=30] [REPS=3] [MODELS="mlp lenet5 resnet20"] [FLAGS=...] [DELAY_MS=0] bench/deterministic_cluster.sh [BUILD]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${1:-build}/herd")
B=${B:-8} STEPS=${STEPS:-30} REPS=${REPS:-3} MODELS=${MODELS:-mlp lenet5 resnet20}
FLAGS=${FLAGS:-} DELAY_MS=${DELAY_MS:-0}
out=${OUT:-$root/bench/results/$(date +%F)-deterministic-cluster-b$B.txt}
. "$root/tests/testlib.sh" "$herd"
. "$root/tests/netcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
if [ "$DELAY_MS" != 0 ]; then nc_up 2 --delay-ms "$DELAY_MS"; else nc_up 2; fi
exec > >(tee -a "$out") 2>&1
echo "# $(date -u)  $("$herd" --version | head -n1)"
echo "# $(nproc --all) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# 2 hosts (nc_up 2, one-way delay ${DELAY_MS} ms), micro-batch $B, 6 per rank (global batch $((B * 12))), $STEPS steps, median of $REPS${FLAGS:+, flags $FLAGS}"
one() { # one MODEL [--deterministic]: samples/s of the run
  local model=$1 det=${2:-} shape=1,28,28
  [ "$model" = resnet20 ] && shape=3,32,32
  nc_mpirun -np 2 "$herd" train --model "$model" --data "synthetic:$shape,10,$((B * 12 * STEPS))" \
    --epochs 1 --batch-size "$B" --grad-accum 6 --threads 1 --seed 1 --quiet $FLAGS $det 2>&1 |
    sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for model in $MODELS; do
  plain=() det=()
  for ((i = 0; i < REPS; i++)); do
    plain+=("$(one "$model")")
    det+=("$(one "$model" --deterministic)")
  done
  p=$(printf '%s\n' "${plain[@]}" | median) d=$(printf '%s\n' "${det[@]}" | median)
  echo "model=$model hosts=2 accum=6 delay_ms=$DELAY_MS plain=[${plain[*]}] deterministic=[${det[*]}]" \
    "median_plain=$p median_deterministic=$d ratio=$(awk -v a="$d" -v b="$p" 'BEGIN{printf "%.3f", a / b}')"
done
