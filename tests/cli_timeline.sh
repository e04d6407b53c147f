#!/usr/bin/env bash
# --timeline: the trace of one process (also on the simulated device) and of a 2-rank
# job (herd train and herd bench train) is the documented Chrome trace, with every rank's events nested as they
# happened (checked by tests/check_timeline.py); an unwritable path fails on every rank.
set -u
. "$(dirname "$0")/testlib.sh"
command -v python3 >/dev/null || skip_all "no python3 to run tests/check_timeline.py"
export OMP_NUM_THREADS=1
timeline() { python3 "$here/check_timeline.py" "$@"; }
# 500 samples: batch 128 on one rank or 64 on two gives 4 steps per epoch, so
# --max-steps 5 ends inside epoch 2 and the trace is merged twice.
common=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --eval-every 1 --max-steps 5 --quiet)

"$herd" train "${common[@]}" --batch-size 128 --checkpoint-dir "$tmp/ck1" \
  --timeline "$tmp/one.json" >"$tmp/out" 2>"$tmp/err"
check "one process: training with --timeline exits 0" test $? -eq 0
check "one process: the trace nests and has evaluation and checkpoints" \
  timeline "$tmp/one.json" --ranks 1 --steps 5 --eval --checkpoint

# The simulated device: phases from its timer (marks read at each step's end) still
# hold their layers and sit inside their steps.
"$herd" train "${common[@]}" --batch-size 128 --device sim --timeline "$tmp/sim.json" \
  >"$tmp/out" 2>"$tmp/err"
check "sim: training with --timeline exits 0" test $? -eq 0
check "sim: the device-timed phases nest with the layers" \
  timeline "$tmp/sim.json" --ranks 1 --steps 5 --eval

"$herd" train "${common[@]}" --timeline "$tmp/missing/dir/t.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "unwritable --timeline: exit 1" test $rc -eq 1
check "unwritable --timeline: the message names the file" grep -q "missing/dir/t.json" "$tmp/err"

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpirun=(timeout 120 "${mpiexec[@]}")

  "${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --batch-size 64 --checkpoint-dir "$tmp/ck2" \
    --timeline "$tmp/two.json" >"$tmp/out" 2>"$tmp/err"
  check "2 ranks: training with --timeline exits 0" test $? -eq 0
  check "2 ranks: both ranks' events nest, buckets overlap across ranks" \
    timeline "$tmp/two.json" --ranks 2 --steps 5 --comm --eval --checkpoint

  "${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --batch-size 32 --grad-accum 2 \
    --bucket-mb 0.05 --timeline "$tmp/accum.json" >"$tmp/out" 2>"$tmp/err"
  check "2 ranks, 2 micro-batches and small buckets: the trace nests" \
    timeline "$tmp/accum.json" --ranks 2 --steps 5 --comm --eval

  "${mpirun[@]}" -np 2 "$herd" bench train --model mlp --data synthetic:1,12,12,4,500 \
    --batch-size 32 --steps 3 --warmup 1 --timeline "$tmp/bench.json" >"$tmp/out" 2>"$tmp/err"
  check "2-rank bench with --timeline exits 0" test $? -eq 0
  check "2-rank bench: warm-up and timed steps traced" \
    timeline "$tmp/bench.json" --ranks 2 --steps 4 --comm

  start=$(date +%s)
  "${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --timeline "$tmp/missing/dir/t.json" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "2 ranks, unwritable --timeline: non-zero exit, no hang (rc=$rc)" \
    test $rc -ne 0 -a $rc -ne 124 -a $(( $(date +%s) - start )) -le 30
  check "2 ranks, unwritable --timeline: the message names the file" \
    grep -q "missing/dir/t.json" "$tmp/err"
else
  skipped_part "the 2-rank traces (no mpirun, or herd built without MPI)"
fi

finish
