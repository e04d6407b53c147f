#!/usr/bin/env bash
# ZeRO (--zero 1|2) against plain data parallelism, side by side in one run:
#  1. memory: resnet50 with AdamW (synthetic 3x224x224, 1000 classes, batch 2 per rank,
#     2 steps) on 1, 2 and 4 ranks: the summary's per-rank bytes of parameters, gradients
#     and optimizer state next to what they should be (4 bytes x parameters, divided by N
#     where sharded), herd's own peak count by category (rank 0), and every rank's peak
#     resident set (getrusage's ru_maxrss through /usr/bin/time; the largest rank's).
#  2. traffic: lenet5 and resnet20 on 2 and 3 hosts of the test cluster
#     (tests/netcluster.sh: one rank per network namespace, TCP over veth pairs): bytes
#     sent per step, from the hosts' eth0 tx_bytes counters around runs of S1 and S2
#     steps, (bytes(S2) - bytes(S1)) / (S2 - S1), so set-up and the end cancel out.
#  3. step time: lenet5 and resnet20 on 2 ranks here (shared memory), 1 thread each,
#     Fashion-MNIST: the mean step_ms of the --metrics file's points after 20 warm-up steps,
#     plain, --zero 1 and --zero 2 interleaved, --repeats times each; the median.
#
#   bench/zero.sh [--repeats 3] [--parts memory,traffic,time]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${HERD:-$root/build/herd}")
repeats=3 parts=memory,traffic,time
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "zero.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
. "$root/tests/testlib.sh" "$herd"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe --bind-to none)
echo "# $(date -u '+%F %T UTC'); $("$herd" --version | head -1); $(getconf _NPROCESSORS_ONLN) cores"
key() { grep -o "$1=[0-9.]*" "$2" | head -n 1 | cut -d= -f2; }

if [[ $parts == *memory* ]]; then
  echo "## 1. memory: resnet50, AdamW, synthetic 3x224x224/1000, batch 2 per rank, 2 steps"
  args=(train --model resnet50 --data synthetic:3,224,224,1000,16 --batch-size 2 --max-steps 2
        --epochs 1 --eval-every 0 --optimizer adamw --lr 0.001 --threads 1)
  echo "command: mpirun -np N sh -c '/usr/bin/time -f %M HERD ${args[*]} [--zero Z]'"
  printf "%-3s %-5s %12s %12s %12s %12s %12s %12s %10s %s\n" N zero param_bytes "(computed)" \
    grad_bytes "(computed)" opt_bytes "(computed)" rss_mib "herd's count, rank 0 (MiB)"
  for v in "1 0" "2 0" "2 1" "2 2" "4 0" "4 1" "4 2"; do
    set -- $v
    n=$1 z=$2
    extra=()
    [ "$z" != 0 ] && extra=(--zero "$z")
    rm -f "$tmp"/rss.*
    "${mpirun[@]}" -np "$n" sh -c '/usr/bin/time -f %M -o "$0/rss.${OMPI_COMM_WORLD_RANK:-0}" "$@"' \
      "$tmp" "$herd" "${args[@]}" "${extra[@]}" >"$tmp/out" 2>"$tmp/err" \
      || { echo "N=$n zero=$z failed:"; tail -5 "$tmp/err"; continue; }
    p=$(key param_bytes "$tmp/out")
    floats=$((p / 4))
    gc=$p oc=$((8 * floats))
    [ "$z" = 2 ] && gc=$((p / n))
    [ "$z" != 0 ] && oc=$((8 * floats / n))
    rss=$(cat "$tmp"/rss.* | sort -n | tail -n 1)
    count=$(sed -n 's/^herd: peak memory [0-9.]* MiB: //p' "$tmp/err" | head -n 1)
    printf "%-3s %-5s %12s %12s %12s %12s %12s %12s %10.1f %s\n" "$n" "$z" "$p" "$p" \
      "$(key grad_bytes "$tmp/out")" "$gc" "$(key optimizer_state_bytes "$tmp/out")" "$oc" \
      "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" "$count"
  done
fi

if [[ $parts == *traffic* ]]; then
  . "$root/tests/netcluster.sh"
  echo "## 2. traffic: bytes sent per step over the test cluster's links (TCP), 1 rank per host"
  for hosts in 2 3; do
    nc_up "$hosts"
    tx() { local h sum=0 b; for h in "${NC_HOSTS[@]}"; do
             b=$(nc_exec "$h" cat /sys/class/net/eth0/statistics/tx_bytes); sum=$((sum + b)); done
           echo "$sum"; }
    for model in lenet5 resnet20; do
      shape=1,28,28,10; [ $model = resnet20 ] && shape=3,32,32,10
      args=(train --model $model --data synthetic:$shape,4096 --batch-size 8 --epochs 1
            --eval-every 0 --threads 1 --quiet)
      echo "command: nc_up $hosts; nc_mpirun -np $hosts HERD ${args[*]} --max-steps S [--zero Z], S = 20 and 120"
      for z in 0 1 2; do
        extra=()
        [ "$z" != 0 ] && extra=(--zero "$z")
        per=()
        for s in 20 120; do
          b0=$(tx)
          nc_mpirun -np "$hosts" "$herd" "${args[@]}" --max-steps $s "${extra[@]}" >"$tmp/out" 2>"$tmp/err" \
            || { echo "failed:"; tail -3 "$tmp/err"; }
          per+=($(( $(tx) - b0 )))
        done
        p=$(key param_bytes "$tmp/out")
        awk -v n="$hosts" -v m=$model -v z="$z" -v a="${per[0]}" -v b="${per[1]}" -v p="$p" 'BEGIN {
          step = (b - a) / 100
          printf "%d hosts %-8s zero=%s: %10.0f bytes sent per step (all hosts) = %.3f x N x param_bytes; " \
                 "a ring allreduce sends 2(N-1)/N = %.3f\n", n, m, z, step, step / (n * p), 2 * (n - 1) / n }'
      done
    done
    nc_down
  done
fi

if [[ $parts == *time* ]]; then
  echo "## 3. step time: 2 ranks, 1 thread each, Fashion-MNIST, mean step_ms after 20 steps"
  for model in lenet5 resnet20; do
    steps=300 batch=64
    [ $model = resnet20 ] && steps=80 batch=32
    args=(train --model $model --batch-size $batch --epochs 1 --max-steps $steps --eval-every 0
          --threads 1 --log-every 10 --quiet)
    echo "command: mpirun -np 2 HERD ${args[*]} --metrics FILE [--zero Z]"
    for ((r = 1; r <= repeats; r++)); do
      for z in 0 1 2; do
        extra=()
        [ "$z" != 0 ] && extra=(--zero "$z")
        rm -f "$tmp/m.jsonl"
        "${mpirun[@]}" -np 2 "$herd" "${args[@]}" "${extra[@]}" --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err" \
          || { echo "failed:"; tail -3 "$tmp/err"; continue; }
        python3 - "$model" "$z" "$r" "$tmp/m.jsonl" <<'PY' | tee -a "$tmp/times"
import json, sys
model, z, run, path = sys.argv[1:5]
pts = [r for r in map(json.loads, open(path)) if r["kind"] == "step" and r["step"] > 20]
mean = lambda k: sum(p[k] for p in pts) / len(pts)
print("%-8s zero=%s run %s: step_ms %.3f  comm_wait_ms %.3f  optimizer_ms %.3f  forward %.3f backward %.3f"
      % (model, z, run, mean("step_ms"), mean("comm_wait_ms"), mean("optimizer_ms"),
         mean("forward_ms"), mean("backward_ms")))
PY
      done
    done
  done
  python3 - "$tmp/times" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+zero=(\d) run \d+: step_ms ([0-9.]+)", line)
    runs.setdefault((m.group(1), m.group(2)), []).append(float(m.group(3)))
for model in sorted({k[0] for k in runs}):
    base = statistics.median(runs[(model, "0")])
    for z in "012":
        med = statistics.median(runs[(model, z)])
        print("median %-8s zero=%s: step_ms %.3f = %.3f x plain" % (model, z, med, med / base))
PY
fi
