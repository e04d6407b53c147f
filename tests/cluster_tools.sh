#!/usr/bin/env bash
# Across the hosts of the test cluster (tests/netcluster.sh, Open MPI over TCP only):
# herd bench allreduce (#wrong 0, herd against MPI_Allreduce) and bench p2p on 2 and
# 3 hosts, herd run with a hostfile placing one rank on each host, and the cluster's
# ssh agent under MPICH's hydra launcher.
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

# herd run with a hostfile of 3 hosts, 1 slot each; the cluster's launch settings as --mca.
mca=()
for ((k = 0; k < ${#NC_MPI_FLAGS[@]}; k += 3)); do mca+=(--mca "${NC_MPI_FLAGS[k + 1]}" "${NC_MPI_FLAGS[k + 2]}"); done
nc_hostfile "$tmp/hosts" 1
nc_exec node1 timeout -k 5 120 "$herd" run -np 3 --hostfile "$tmp/hosts" --threads-per-rank 1 \
  --report-bindings "${mca[@]}" -- train --model mlp --data synthetic:1,12,12,4,480 --epochs 1 \
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
  NC_TIMEOUT=30 nc_hydra -n 3 hostname >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "hydra through the agent: exits 0 ($rc)" test $rc -eq 0
  check "hydra through the agent: ran on node1, node2, node3" \
    bash -c "[ \"\$(sort '$tmp/out' | tr '\n' ' ')\" = 'node1 node2 node3 ' ]"
else
  skipped_part "MPICH's hydra through the agent (no mpiexec.hydra)"
fi

finish
