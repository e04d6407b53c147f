#!/usr/bin/env bash
# A rank on another host of the test cluster (tests/netcluster.sh) killed with SIGKILL
# mid-training ends the whole job, non-zero, within 30 s, and the launcher names the
# rank and its host. 3 hosts: the ranks on node1 and node3 must both be stopped.
set -u
. "$(dirname "$0")/testlib.sh"
. "$here/netcluster.sh"
have_mpi || skip_all "no mpirun (apt-get install openmpi-bin), or herd built without MPI"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
nc_up 3
NC_TIMEOUT=150 nc_mpirun -np 3 "$herd" train --model lenet5 --data synthetic:1,28,28,10,20000 \
  --epochs 100 --threads 1 --quiet >"$tmp/out" 2>"$tmp/err" &
job=$!
# rank 1 is node2's herd process; wait until it has trained a little.
victim=""
for _ in $(seq 1 300); do
  victim=$(for p in $(nc_pids node2); do
             [ "$(cat /proc/$p/comm 2>/dev/null)" = herd ] && echo "$p"; done | head -n 1)
  [ -n "$victim" ] && break
  sleep 0.1
done
check "rank 1's herd process found on node2" test -n "$victim"
sleep 3
kill -9 $victim 2>/dev/null
start=$(date +%s)
# The issue's bound: the job must be gone 30 s after the kill.
for _ in $(seq 1 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
took=$(($(date +%s) - start))
check "job ended within 30 s of the kill (took ${took}s)" bash -c "! kill -0 $job 2>/dev/null"
kill -0 $job 2>/dev/null && kill $job
wait $job
rc=$?
check "job exits non-zero, not by timeout ($rc)" test $rc -ne 0 -a $rc -ne 124
check "the launcher names rank 1 on node2 and the signal" \
  grep -q "process rank 1 with PID [0-9]* on node node2 exited on signal 9" "$tmp/err"
[ $fails -eq 0 ] || cat "$tmp/err"
left=$(for h in node1 node3; do for p in $(nc_pids $h); do cat /proc/$p/comm 2>/dev/null; done; done | grep -c '^herd$')
check "no herd process left on node1 or node3 ($left)" test "$left" -eq 0
finish
