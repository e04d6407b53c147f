#!/usr/bin/env bash
# Failure on one rank at every failure-injection site of herd train (HERD_TEST_FAIL_AT,
# src/core/testhook.h), under mpirun -np 2: the job must end non-zero within 30 s and
# its output must name the failing rank. Every mpirun runs under timeout.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# Every site the training loop has, in the order a run meets them.
sites="signature setup step replicas stats epoch_end evaluate checkpoint final"
run() { # run FAIL_AT: trains 2 epochs on 2 ranks with every collective path switched on
  local start=$(date +%s)
  HERD_TEST_FAIL_AT="$1" timeout 60 "${mpiexec[@]}" -np 2 \
    "$herd" train --model mlp --data synthetic:1,12,12,4,500 --threads 1 --epochs 2 \
    --batch-size 64 --check-replicas --checkpoint-dir "$tmp/ckpt" --quiet \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  took=$(( $(date +%s) - start ))
  rm -rf "$tmp/ckpt"
}

run nosuch:1
check "an unknown site changes nothing (exit $rc)" test $rc -eq 0

for site in $sites; do
  for rank in 1 0; do
    run "$site:$rank"
    check "$site:$rank: non-zero exit, not the timeout (exit $rc)" test $rc -ne 0 -a $rc -ne 124
    check "$site:$rank: ended within 30 s (took ${took}s)" test "$took" -le 30
    check "$site:$rank: the output names rank $rank" \
      grep -q "injected failure at $site on rank $rank\|rank $rank failed" "$tmp/err"
  done
done
finish
