#!/usr/bin/env bash
# The training metrics' round trip on a slow link: lenet5 on 2 hosts of the test
# cluster (tests/netcluster.sh) with D ms one-way delay, for each herd binary given,
# `repeats` times, interleaved. Per run: the wall time per step between the metrics
# file's step points 10 and 100 (every step's whole cost, whatever phase it is in),
# herd's own mean step time and exposed communication over those steps (rank 0), and
# the time per step outside herd's step phases (the blocking metrics allreduce lived
# there before it travelled with the next step's gradients).
#
#   bench/metrics_delay.sh HERD_BEFORE HERD_AFTER [--delay-ms 5] [--repeats 3]
set -u
[ $# -ge 2 ] || { echo "usage: metrics_delay.sh HERD_BEFORE HERD_AFTER [--delay-ms D] [--repeats N]" >&2; exit 2; }
before=$(readlink -f "$1") after=$(readlink -f "$2"); shift 2
delay=5 repeats=3
while [ $# -gt 0 ]; do
  case $1 in
    --delay-ms) delay=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) echo "metrics_delay.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$after # netcluster finds its relay next to this binary
. "$root/tests/testlib.sh" "$after"
. "$root/tests/netcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
nc_up 2 --delay-ms "$delay"
args=(train --model lenet5 --data synthetic:1,28,28,10,12800 --batch-size 64 --epochs 1
      --max-steps 100 --threads 1 --log-every 10 --quiet)
echo "command: nc_up 2 --delay-ms $delay; nc_mpirun -np 2 HERD ${args[*]} --metrics FILE"
for ((r = 1; r <= repeats; r++)); do
  for which in before after; do
    bin=$before; [ $which = after ] && bin=$after
    rm -f "$tmp/m.jsonl"
    nc_mpirun -np 2 "$bin" "${args[@]}" --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err" \
      || { echo "$which run $r failed:"; cat "$tmp/err"; continue; }
    python3 - "$which" "$r" "$tmp/m.jsonl" <<'PY'
import json, sys
which, run, path = sys.argv[1:4]
pts = {r["step"]: r for r in map(json.loads, open(path)) if r["kind"] == "step"}
a, b = pts[10], pts[100]
n = 90
wall = (b["time_s"] - a["time_s"]) / n * 1e3
later = [pts[s] for s in range(20, 101, 10)] # each point: means over its 10 steps
mean = lambda k: sum(p[k] for p in later) / len(later)
step, comm = mean("step_ms"), mean("comm_wait_ms")
print("%-6s run %s: wall/step %.2f ms  herd step_ms %.2f  comm_wait_ms %.2f  "
      "forward %.2f backward %.2f optimizer %.2f data_wait %.2f  outside the step %.2f ms"
      % (which, run, wall, step, comm, mean("forward_ms"), mean("backward_ms"),
         mean("optimizer_ms"), mean("data_wait_ms"), wall - step))
PY
  done
done
