#!/usr/bin/env bash
# The pipeline bubble measured against the ideal (P-1)/(M+P-1): herd bench pipeline
# with 4 sleeping stages (forward 20 ms, backward 40 ms per micro-batch) on 4 ranks,
# M = 4, 8, 16, both schedules, `repeats` times.
#
#   bench/pipeline_bubble.sh [HERD] [--repeats 3]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${1:-$root/build/herd}")
[ $# -gt 0 ] && shift
repeats=3
[ "${1:-}" = --repeats ] && repeats=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# $(date -u '+%F %T UTC'), $(nproc --all) cores; $("$herd" --version | head -1)"
echo "# command: $herd run -np 4 -- bench pipeline --micro-batches M --stage-ms 20 --schedule S"
for ((r = 1; r <= repeats; r++)); do
  for sched in 1f1b gpipe; do
    for m in 4 8 16; do
      "$herd" run -np 4 -- bench pipeline --micro-batches $m --stage-ms 20 --schedule $sched 2>/dev/null |
        tail -1
    done
  done
done
