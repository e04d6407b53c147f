#!/usr/bin/env bash
# herd train across 2 and 3 hosts of the test cluster (tests/netcluster.sh: network
# namespaces, Open MPI over TCP only), and across 2 hosts through a link with 5 ms
# one-way delay and 1% loss. The final weights must be bit for bit those of the same
# ranks on this machine over shared memory (the same arithmetic: only the transport
# differs), and within 1e-5 of one process with the same global batch (the order of
# the sums differs there, as tests/mpi_equivalence.c explains). 480 samples are 5 whole
# steps of 96 for 1, 2 and 3 ranks: a short last step would be split differently.
set -u
. "$(dirname "$0")/testlib.sh"
. "$here/netcluster.sh"
have_mpi || skip_all "no mpirun (apt-get install openmpi-bin), or herd built without MPI"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(--model lenet5 --data synthetic:1,28,28,10,480 --epochs 1 --threads 1
        --check-replicas --quiet)

for np in 2 3; do
  batch=$((96 / np))
  "$herd" train "${common[@]}" --batch-size 96 --save "$tmp/one.st" >/dev/null 2>"$tmp/err" \
    || { cat "$tmp/err"; check "1 process x 96 trains" false; }
  timeout 120 mpirun --oversubscribe --bind-to none -np $np "$herd" train "${common[@]}" \
    --batch-size $batch --save "$tmp/local$np.st" >/dev/null 2>"$tmp/err" \
    || { cat "$tmp/err"; check "$np local ranks x $batch train" false; }
  nc_up $np
  nc_mpirun -np $np "$herd" train "${common[@]}" --batch-size $batch --save "$tmp/hosts$np.st" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$np hosts x $batch: exits 0 ($rc)" test $rc -eq 0
  [ $rc -eq 0 ] || cat "$tmp/err"
  check "$np hosts: summary says ranks=$np" grep -q "ranks=$np" "$tmp/out"
  check "$np hosts: the weights of $np local ranks, bit for bit" cmp "$tmp/local$np.st" "$tmp/hosts$np.st"
  d=$(maxdiff "$tmp/hosts$np.st" "$tmp/one.st")
  check "$np hosts: within 1e-5 of 1 process x 96 ($d)" within "$d" 1e-5
  nc_down
done

# 5 ms one way between the hosts and 1% of frames lost: TCP retransmits, same weights.
nc_up 2 --delay-ms 5 --loss-pct 1
nc_mpirun -np 2 "$herd" train "${common[@]}" --batch-size 48 --save "$tmp/slow2.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "2 hosts, 5 ms delay, 1% loss: exits 0 ($rc)" test $rc -eq 0
[ $rc -eq 0 ] || cat "$tmp/err"
check "2 hosts, 5 ms delay, 1% loss: the weights of 2 local ranks, bit for bit" cmp "$tmp/local2.st" "$tmp/slow2.st"

finish
