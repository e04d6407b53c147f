#!/usr/bin/env bash
# Across the hosts of the test cluster (tests/netcluster.sh, Open MPI over TCP only):
# herd bench allreduce (#wrong 0, herd against MPI_Allreduce) and bench p2p on 2 and
# 3 hosts, herd run with a hostfile placing one rank on each host, and the cluster's
# ssh agent under MPICH's hydra launcher, with an MPICH program talking TCP only.
set -u
. "$(dirname "$0")/testlib.sh"
. "$here/netcluster.sh"
have_mpi || skip_all "no mpirun (apt-get install openmpi-bin), or herd built without MPI"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# hosts_are FILE H...: bench p2p's rank list names these hosts, rank by rank.
hosts_are() {
  local f=$1 r=0 h
  shift
  for h in "$@"; do grep -q "^#   rank $r: $h\$" "$f" || return 1; r=$((r + 1)); done
}

for np in 2 3; do
  nc_up $np
  nc_mpirun -np $np "$herd" bench allreduce -b 8 -e 1M -f 8 -n 3 -w 1 --compare-mpi \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$np hosts: bench allreduce exits 0 ($rc)" test $rc -eq 0
  [ $rc -eq 0 ] || cat "$tmp/err"
  check "$np hosts: bench allreduce #wrong: 0" grep -q "^# #wrong: 0 element" "$tmp/out"
  check "$np hosts: bench allreduce ran on $np ranks" grep -q "$np rank" "$tmp/out"
  nc_mpirun -np $np "$herd" bench p2p -b 64K -n 3 --lat-iters 20 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$np hosts: bench p2p exits 0 ($rc)" test $rc -eq 0
  [ $rc -eq 0 ] || cat "$tmp/err"
  check "$np hosts: bench p2p's ranks are on ${NC_HOSTS[*]}" hosts_are "$tmp/out" "${NC_HOSTS[@]}"
  check "$np hosts: bench p2p latency matrix is ${np}x${np}" bash -c "grep -A$((np + 1)) '^Latency between ranks' '$tmp/out' | \
    tail -n $np | awk -v n=$np 'NF != n + 1 { bad = 1 } END { exit bad || NR != n }'"
  [ $np -eq 3 ] || nc_down
done

# herd run with a hostfile of 3 hosts, 1 slot each; the cluster's launch settings are
# all --mca KEY VALUE, which herd run passes on.
nc_hostfile "$tmp/hosts" 1
nc_exec node1 timeout -k 5 120 "$herd" run -np 3 --hostfile "$tmp/hosts" --threads-per-rank 1 \
  --report-bindings "${NC_MPI_FLAGS[@]}" -- train --model mlp --data synthetic:1,12,12,4,480 --epochs 1 \
  --batch-size 32 --quiet >"$tmp/out" 2>"$tmp/err"
rc=$?
check "herd run --hostfile, 3 hosts: exits 0 ($rc)" test $rc -eq 0
[ $rc -eq 0 ] || cat "$tmp/err"
check "herd run: printed the launch line with the hostfile" grep -q "^herd: launching: .*--hostfile $tmp/hosts " "$tmp/err"
check "herd run: one summary, ranks=3" bash -c "[ \$(grep -c 'ranks=3' '$tmp/out') -eq 1 ]"
for h in "${NC_HOSTS[@]}"; do
  check "herd run: a rank bound on $h" grep -q "^\[$h:[0-9]*\] MCW rank [0-9]* bound to" "$tmp/err"
done

# The agent under MPICH's launcher (hydra): one process per host, each with its hostname.
if command -v "${NC_HYDRA:-mpiexec.hydra}" >/dev/null; then
  # hydra itself ended on SIGPIPE (exit 141) once, under the sanitizer pass's load: it
  # wrote to a proxy that `hostname` had already let exit (a race in MPICH's launcher,
  # not in the agent), so that one exit is tried again once, and said so.
  for attempt in 1 2; do
    NC_TIMEOUT=30 nc_hydra -n 3 hostname >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 141 ] && [ $attempt -eq 1 ] || break
    echo "note: mpiexec.hydra ended on SIGPIPE (exit 141); running it again once"
  done
  check "hydra through the agent: exits 0 ($rc)" test $rc -eq 0
  check "hydra through the agent: ran on node1, node2, node3" \
    bash -c "[ \"\$(sort '$tmp/out' | tr '\n' ' ')\" = 'node1 node2 node3 ' ]"
  # An MPICH program across the hosts: UCX on TCP over eth0, no shared memory.
  if command -v mpicc.mpich >/dev/null; then
    cat >"$tmp/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    int rank, one = 1, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d sum %d\n", rank, sum);
    MPI_Finalize();
    return 0;
}
C
    mpicc.mpich -o "$tmp/hello" "$tmp/hello.c"
    # MPICH 4.0.2 on UCX 1.13 over TCP between hosts hangs in MPI_Finalize in about 1
    # run of 5 here (one rank flushing its TCP endpoints while the others wait in the PMI
    # barrier; openucx/ucx#8738): not the agent's doing, so a run that finished its work
    # and then hung is ended by the timeout and said so, not failed.
    NC_TIMEOUT=10 nc_hydra -n 3 -genv UCX_LOG_LEVEL info "$tmp/hello" >"$tmp/out" 2>&1
    rc=$?
    check "MPICH program on 3 hosts: every rank sums 3" test "$(grep -c '^rank [0-2] sum 3$' "$tmp/out")" -eq 3
    check "MPICH program on 3 hosts: exits 0, or hung in MPI_Finalize only ($rc)" test $rc -eq 0 -o $rc -eq 124
    [ $rc -eq 124 ] && echo "note: the MPICH program hung in MPI_Finalize after its work (openucx/ucx#8738); ended by the timeout"
    check "MPICH program on 3 hosts: UCX endpoints on tcp/eth0 only" \
      bash -c "grep -q 'ep_cfg.*tcp/eth0' '$tmp/out' && ! grep -E 'ep_cfg' '$tmp/out' | grep -qE 'sysv|posix|cma|xpmem'"
    [ $fails -eq 0 ] || cat "$tmp/out"
  else
    skipped_part "an MPICH program across the hosts (no mpicc.mpich)"
  fi
else
  skipped_part "MPICH's hydra through the agent (no mpiexec.hydra)"
fi

finish
