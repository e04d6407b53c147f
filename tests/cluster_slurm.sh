#!/usr/bin/env bash
# herd under Slurm on a one-node cluster of its own: srun --mpi=pmix starts the ranks
# (bench allreduce, topo), sbatch runs a training job with a checkpoint, a rank killed
# with kill -9 ends the step non-zero, and herd run works inside an allocation (salloc),
# with the launcher it chooses by itself and with --launcher srun, and restarts a job
# whose rank was killed (--max-restarts 1).
#
#   bash tests/cluster_slurm.sh build/herd      # ctest runs it as cluster_slurm
#
# Nothing global changes: munged, slurmctld and slurmd run as root with a private
# config (SLURM_CONF), key, socket, ports, spool, state, log and pid files, all under
# this test's temporary directory; the test stops exactly the daemons it started (by
# PID, on failure too), and every process that carries its SLURM_CONF (slurmstepd,
# ranks). A guard outside the test's process tree does the same if the test itself is
# killed (a ctest timeout). It skips (77) without root, without the Debian packages
# slurmctld, slurmd, slurm-client and munge (scripts/install-deps.sh), with a herd built
# without MPI, and when a slurmctld or slurmd already runs here: it does not share a
# machine with a Slurm it did not start.
set -u
source "$(dirname "$0")/testlib.sh"
herd=$(readlink -f "$herd")

[ "$(id -u)" = 0 ] || skip_all "needs root to start munged, slurmctld and slurmd"
for b in munged slurmctld slurmd srun sbatch salloc scancel sinfo; do
  command -v "$b" >/dev/null ||
    skip_all "$b not found (Debian: slurmctld slurmd slurm-client munge, which scripts/install-deps.sh installs)"
done
have_mpi || skip_all "herd built without MPI, or its launcher missing"
running=$(pgrep -x slurmctld; pgrep -x slurmd)
running=$(echo $running)
[ -z "$running" ] || skip_all "a Slurm daemon already runs here (pid $running): this test starts its own and leaves others alone"
# Inside a job of another Slurm, its variables would reach ours.
for v in $(compgen -e | grep '^SLURM_'); do unset "$v"; done

S=$tmp/slurm
mkdir -p "$S"/{etc,state,spool,log,run,tmpfs,munge,shm}
chmod 700 "$S/munge"
export SLURM_CONF=$S/etc/slurm.conf
# Open MPI's session directories (mpirun's) and shared-memory segments (those of ranks
# started by srun have no orted to remove them after a kill) go here too, not to /tmp
# and /dev/shm.
mkdir -p "$S/ompi"
export OMPI_MCA_orte_tmpdir_base=$S/ompi OMPI_MCA_btl_vader_backing_directory=$S/shm
node=$(hostname -s)
cpus=$(getconf _NPROCESSORS_ONLN)
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("", 0))
print(*[x.getsockname()[1] for x in s])')
# linuxproc/none: no cgroups needed, so it runs in containers too (no CPU binding).
# Addresses on loopback: the host name need not resolve.
cat >"$SLURM_CONF" <<EOF
ClusterName=herdtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.pid
SlurmdSpoolDir=$S/spool
StateSaveLocation=$S/state
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
TmpFS=$S/tmpfs
PlugStackConfig=$S/etc/plugstack.conf
MpiDefault=none
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
: >"$S/etc/plugstack.conf"
head -c 1024 /dev/urandom >"$S/munge/key"
chmod 400 "$S/munge/key"

# stop.sh: ends what this test started, by PID. The daemons are named in daemons (PID
# and name, checked before each signal); every other process that carries this test's
# SLURM_CONF (slurmstepd, srun, the ranks) was started by it too.
cat >"$S/stop.sh" <<EOF
#!/bin/bash
conf='SLURM_CONF=$SLURM_CONF'
ours() { # PIDs of processes named \$1... whose environment has conf
  local name p
  for name in "\$@"; do
    for p in \$(pgrep -x "\$name"); do
      tr '\0' '\n' 2>/dev/null <"/proc/\$p/environ" | grep -qxF "\$conf" && echo "\$p"
    done
  done
}
end() { # end SIG PID NAME...: signals the PIDs still named NAME
  local sig=\$1 pid name; shift
  while [ \$# -ge 2 ]; do
    pid=\$1 name=\$2; shift 2
    [ "\$(cat "/proc/\$pid/comm" 2>/dev/null)" = "\$name" ] && kill "-\$sig" "\$pid" 2>/dev/null
  done
}
alive() { # alive PID...: one of them still runs (a zombie waiting for its parent does not)
  local pid
  for pid in "\$@"; do grep -qs '^State:[[:space:]]*[^Z]' "/proc/\$pid/status" && return 0; done
  return 1
}
timeout 5 scancel --quiet --user=root >/dev/null 2>&1
jobs=\$(ours slurmstepd srun salloc sbatch herd mpirun orterun orted timeout)
kill -KILL \$jobs 2>/dev/null
d=(\$(cat "$S/daemons" 2>/dev/null))
end TERM "\${d[@]}"
pids=(\$(printf '%s %s\n' "\${d[@]}" | awk '{ print \$1 }'))
for _ in \$(seq 50); do alive "\${pids[@]}" || break; sleep 0.2; done
end KILL "\${d[@]}"
# Their children (slurmctld's slurmscriptd), should a daemon have died without them.
kill -KILL \$(ours slurmctld slurmscriptd slurmd slurmstepd munged) 2>/dev/null
# The OpenMP runtime of the sanitizer build (LLVM's) registers each process in
# /dev/shm/__KMP_REGISTERED_LIB_<pid>_0; a rank killed leaves its file behind.
for p in \$(cat "$S/rank.pids" 2>/dev/null); do
  [ -e "/proc/\$p" ] || rm -f "/dev/shm/__KMP_REGISTERED_LIB_\${p}_0"
done
exit 0
EOF
: >"$S/daemons"
daemon() { # daemon NAME ARG...: starts NAME in the foreground, in the background
  "$@" >"$S/log/$1.out" 2>&1 &
  echo "$! $1" >>"$S/daemons"
}
cleanup() {
  kill -- "-$(cat "$S/guard.pid")" 2>/dev/null # the guard and its sleep (its own process group)
  bash "$S/stop.sh"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' INT TERM
# The guard: when the test is gone without its trap (SIGKILL), it stops what it started.
# Started in a subshell that exits at once, it is no child of the test's, so whatever
# kills the test's process tree (ctest's timeout) leaves it to clean up.
(setsid bash -c 'while kill -0 '$$' 2>/dev/null; do sleep 1; done; bash "$1/stop.sh"; rm -rf "$2"' \
  guard "$S" "$tmp" </dev/null >/dev/null 2>&1 & echo $! >"$S/guard.pid")

daemon munged --foreground --force --key-file="$S/munge/key" --socket="$S/munge/socket" \
  --pid-file="$S/run/munged.pid" --log-file="$S/log/munged.log" --seed-file="$S/munge/seed"
for _ in $(seq 50); do [ -S "$S/munge/socket" ] && break; sleep 0.1; done
daemon slurmctld -D -c -f "$SLURM_CONF"
daemon slurmd -D -f "$SLURM_CONF"
for _ in $(seq 60); do timeout 5 sinfo -h -o %t 2>/dev/null | grep -qE 'idle|mix' && break; sleep 0.5; done
if ! timeout 5 sinfo -h -o %t 2>/dev/null | grep -qE 'idle|mix'; then
  echo "FAIL: one-node Slurm is up"
  tail -n 5 "$S"/log/*
  exit 1
fi
check "one-node Slurm is up (munged, slurmctld, slurmd: $(cat "$S/daemons"))" true
check "srun has the pmix plugin" bash -c "timeout 10 srun --mpi=list 2>&1 | grep -q pmix"

cd "$tmp" || exit 1
timeout 60 srun --mpi=pmix -n 2 "$herd" bench allreduce -b 8 -e 1M -f 16 >ar.out 2>&1
check "srun: bench allreduce joins one 2-rank MPI job" grep -q "2 rank(s) on 1 host(s), communicator mpi" ar.out
check "srun: #wrong = 0" grep -q "^# #wrong: 0 " ar.out
timeout 60 srun --mpi=pmix -n 2 "$herd" topo >topo.out 2>&1
check "srun: topo lists both ranks" grep -qE "^ranks \(2\)" topo.out

# Small synthetic data: each job takes seconds (longer under the sanitizers).
data=(--model lenet5 --data synthetic:1,28,28,10,2000 --batch-size 32 --threads 1)
cat >job.sh <<EOF
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:05:00
export OMP_NUM_THREADS=\$SLURM_CPUS_PER_TASK OPENBLAS_NUM_THREADS=\$SLURM_CPUS_PER_TASK
srun --mpi=pmix "$herd" train ${data[*]} --epochs 1 --checkpoint-dir "\$SLURM_SUBMIT_DIR/ckpt"
EOF
job=$(timeout 120 sbatch --parsable --wait job.sh)
check "sbatch: the training job ends 0" test $? -eq 0
check "sbatch: 2 ranks, one summary, rank 0's checkpoint" bash -c \
  "grep -q 'ranks=2' slurm-$job.out && [ \$(grep -c '^model=lenet5' slurm-$job.out) -eq 1 ] && test -e ckpt/latest"

# A seed no other herd on the host uses marks this step's ranks; the pattern wants the
# herd binary first, so it matches neither srun nor timeout.
# --comm-timeout: if the survivor is never told of the kill (Open MPI hears of it through
# PMIx, and srun itself waits for the other tasks), herd's own stall limit ends it.
train=(train "${data[@]}" --epochs 50 --seed 90417 --comm-timeout 60)
ranks="^$herd ${train[*]}\$"
# No hang is what is checked, not how fast: the step's end after a kill took 2-30 s
# alone and over 58 s beside another sanitizer test on 2 cores (the time is printed).
timeout 240 srun --mpi=pmix -n 2 "$herd" "${train[@]}" >kill.out 2>&1 &
for _ in $(seq 100); do [ "$(pgrep -cf "$ranks")" -ge 2 ] && break; sleep 0.2; done
sleep 2
pgrep -f "$ranks" >>"$S/rank.pids"
start=$(date +%s)
kill -9 "$(pgrep -f "$ranks" | tail -n 1)"
step=$!
# Seen twice in full suites (not alone): the step still there minutes after the kill.
# What was left 90 s on is kept for the failure's report.
( sleep 90; kill -0 $step 2>/dev/null && { ps -eo pid,stat,etime,args | grep -E "herd|srun|slurmstepd" |
  grep -v grep; tail -n 20 kill.out; } >stuck.txt 2>&1 ) >/dev/null 2>&1 &
watch=$!
wait $step
rc=$?
pkill -P $watch sleep 2>/dev/null
kill $watch 2>/dev/null
took=$(($(date +%s) - start))
check "srun: a killed rank ends the step non-zero ($rc, not the timeout's 124; after $took s)" \
  test "$rc" -ne 0 -a "$rc" -ne 124
[ -s stuck.txt ] && { echo "left 90 s after the kill:"; cat stuck.txt; }
check "srun: the message names the killed task" grep -q "task 1: Killed" kill.out

# herd run inside an allocation: the launcher it chooses by itself, then srun.
bench=(bench train --model lenet5 --steps 5)
timeout 120 salloc -n 2 --cpus-per-task=1 "$herd" run -np 2 -- "${bench[@]}" >run.out 2>&1
check "salloc + herd run: one 2-rank summary" grep -q "ranks=2 .*samples_per_s=" run.out
check "salloc + herd run: srun chosen by itself inside the allocation, with --mpi=pmix" \
  bash -c "grep -q '^herd: launcher: srun (inside Slurm job [0-9]*; --launcher openmpi' run.out &&
    grep -q '^herd: launching: srun .*--mpi=pmix' run.out"
timeout 120 salloc -n 2 --cpus-per-task=1 "$herd" run --launcher openmpi -np 2 -- "${bench[@]}" >mpirun.out 2>&1
check "salloc + herd run --launcher openmpi: one 2-rank summary" grep -q "ranks=2 .*samples_per_s=" mpirun.out
check "salloc + herd run --launcher openmpi: mpirun (which reads the allocation)" \
  grep -q '^herd: launcher: openmpi (--launcher)' mpirun.out

# --max-restarts inside an allocation: a rank killed with kill -9 once the job has a
# checkpoint; herd run relaunches the job from it and it ends 0. Under the launcher
# herd run chooses by itself (srun) and mpirun (which starts its daemons with srun).
job=(train --model lenet5 --data synthetic:1,28,28,10,4000 --epochs 3 --batch-size 32 --quiet
     --checkpoint-every-steps 20)
ranks_of() { pgrep -f "^$herd train .*$1" || true; } # the ranks of the job using dir $1
# Each step first sleeps 20 ms (no CPU): beside make test's other passes a job once
# trained to its end between the poll below finding a checkpoint and its kill.
restart() { # restart NAME DIR HERD-RUN-FLAG...
  local name=$1 dir=$2 pid="" rc=0; shift 2
  HERD_TEST_STEP_DELAY_MS=20 timeout 240 salloc -n 2 --cpus-per-task=1 "$herd" run -np 2 "$@" \
    -x HERD_TEST_STEP_DELAY_MS --max-restarts 1 -- "${job[@]}" --checkpoint-dir "$dir" >"$dir.out" 2>&1 &
  local run=$!
  for _ in $(seq 1200); do
    pid=$(ranks_of "$dir" | tail -n 1)
    [ -n "$pid" ] && [ -e "$dir/latest" ] && break
    pid=""
    sleep 0.1
  done
  ranks_of "$dir" >>"$S/rank.pids"
  [ -n "$pid" ] && kill -9 "$pid"
  wait $run || rc=$?
  check "$name: a rank killed ($pid), the job restarted and ended 0 ($rc)" test -n "$pid" -a "$rc" -eq 0
  check "$name: one restart, then training to the end" bash -c "[ \$(grep -c '^herd: restart 1/1 after ' '$dir.out') -eq 1 ] &&
    grep -q '^model=lenet5 .*ranks=2' '$dir.out'"
  check "$name: the restart names the killed rank, this node and SIGKILL" \
    grep -q "^herd: restart 1/1 after rank [01] on $node (killed by SIGKILL)" "$dir.out"
  grep '^herd: restart ' "$dir.out"
  [ "$rc" -eq 0 ] || tail -n 20 "$dir.out"
}
restart "salloc + herd run --max-restarts 1 (srun)" "$tmp/restart-srun"
restart "salloc + herd run --launcher openmpi --max-restarts 1" "$tmp/restart-mpirun" --launcher openmpi

finish
