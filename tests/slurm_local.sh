#!/usr/bin/env bash
# herd under Slurm on a one-node test cluster set up here: srun --mpi=pmix starts the
# ranks (bench allreduce, training with a checkpoint, topo), a killed rank ends the
# step non-zero, and herd run works inside an allocation. Not run by ctest: it
# installs Slurm and starts munged, slurmctld and slurmd as root.
#
#   bash tests/slurm_local.sh build/herd
#
# Debian packages: slurmctld slurmd slurm-client munge (installed when missing).
set -u
source "$(dirname "$0")/testlib.sh"
herd=$(readlink -f "$herd")

if [ "$(id -u)" != 0 ]; then
  echo "skipped: needs root to start the Slurm daemons"
  exit 0
fi
if ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null || exit 1
fi

node=$(hostname -s)
cpus=$(getconf _NPROCESSORS_ONLN)
if ! pgrep -x slurmctld >/dev/null; then
  mkdir -p /var/spool/slurmd /var/spool/slurmctld /var/log/slurm /run/munge
  chown munge:munge /run/munge
  # linuxproc/none: no cgroups needed, so it runs in containers too (no CPU binding).
  cat >/etc/slurm/slurm.conf <<EOF
ClusterName=herdtest
SlurmctldHost=$node
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
MpiDefault=none
ReturnToService=2
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  pgrep -x munged >/dev/null || munged --force 2>/dev/null
  slurmctld && sleep 1 && slurmd
  for _ in $(seq 1 20); do sinfo -h -o %t 2>/dev/null | grep -qE 'idle|mix' && break; sleep 1; done
fi
check "one-node Slurm is up" bash -c "sinfo -h -o %t | grep -qE 'idle|mix'"
check "srun has the pmix plugin" bash -c "srun --mpi=list 2>&1 | grep -q pmix"

cd "$tmp" || exit 1
timeout 120 srun --mpi=pmix -n 2 "$herd" bench allreduce -b 8 -e 1M -f 16 >ar.out 2>&1
check "srun: bench allreduce joins one 2-rank MPI job" grep -q "2 rank(s) on 1 host(s), communicator mpi" ar.out
check "srun: #wrong = 0" grep -q "^# #wrong: 0 " ar.out

cat >job.sh <<EOF
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:05:00
export OMP_NUM_THREADS=\$SLURM_CPUS_PER_TASK OPENBLAS_NUM_THREADS=\$SLURM_CPUS_PER_TASK
srun --mpi=pmix "$herd" train --model lenet5 --epochs 1 --threads "\$SLURM_CPUS_PER_TASK" \
     --checkpoint-dir "\$SLURM_SUBMIT_DIR/ckpt"
EOF
job=$(timeout 600 sbatch --parsable --wait job.sh)
check "sbatch: the training job ends 0" test $? -eq 0
check "sbatch: 2 ranks, one summary, rank 0's checkpoint" bash -c \
  "grep -q 'ranks=2' slurm-$job.out && [ \$(grep -c '^model=lenet5' slurm-$job.out) -eq 1 ] && test -e ckpt/latest"

# A seed no other herd on the host uses marks this step's ranks; the pattern wants the
# herd binary first, so it matches neither srun nor timeout.
train=(train --model lenet5 --epochs 5 --threads 1 --seed 90417)
ranks="^$herd ${train[*]}\$"
timeout 120 srun --mpi=pmix -n 2 "$herd" "${train[@]}" >kill.out 2>&1 &
for _ in $(seq 1 50); do [ "$(pgrep -cf "$ranks")" -ge 2 ] && break; sleep 0.2; done
sleep 2
start=$(date +%s)
kill -9 "$(pgrep -f "$ranks" | tail -n 1)"
wait $!
rc=$?
took=$(($(date +%s) - start))
check "srun: a killed rank ends the step non-zero ($rc) within 30 s ($took s)" \
  test "$rc" -ne 0 -a "$took" -le 30
check "srun: the message names the killed task" grep -q "task 1: Killed" kill.out

timeout 120 salloc -n 2 --cpus-per-task=1 "$herd" run -np 2 -- bench train --model lenet5 --steps 10 >run.out 2>&1
check "salloc + herd run: one 2-rank summary" grep -q "ranks=2 .*samples_per_s=" run.out
timeout 60 srun --mpi=pmix -n 2 "$herd" topo >topo.out 2>&1
check "srun: topo lists both ranks" grep -qE "^ranks \(2\)" topo.out
finish
