#!/usr/bin/env bash
# herd run: the command it builds (--dry-run) for each launcher kind (Open MPI's mpirun,
# MPICH's Hydra, Slurm's srun) for local, oversubscribed and multi-host jobs, thread
# counts, binding, root flags, passed-through flags, usage errors, how the kind is
# chosen; then real launches through herd's own MPI's launcher.
set -u
. "$(dirname "$0")/testlib.sh"
has() { grep -q -e "$1" "$tmp/err"; }  # the launch line contains $1
hasnt() { ! grep -q -e "$1" "$tmp/err"; }
dry() { "$herd" run --dry-run --launcher openmpi "$@" >"$tmp/out" 2>"$tmp/err"; } # Open MPI's flags
# Cores as hwloc counts them (not hardware threads): what herd run shares among ranks.
cores=$("$herd" topo | sed -n 's/.* \([0-9][0-9]*\) core(s).*/\1/p')
[ -n "$cores" ] || cores=$(getconf _NPROCESSORS_ONLN)
self=$(readlink -f "$herd")

"$herd" run --help >"$tmp/help"; check "run --help exits 0" test $? -eq 0
check "herd --help lists run" bash -c "'$herd' --help | grep -q '^  run '"

# Inside a Slurm allocation herd run picks srun by itself (a fake srun in PATH), unless
# --launcher says otherwise, and says so when srun is missing.
mkdir -p "$tmp/slurmbin"
printf '#!/bin/sh\necho "slurm 22.05.8"\n' >"$tmp/slurmbin/srun"
chmod +x "$tmp/slurmbin/srun"
SLURM_JOB_ID=77 PATH="$tmp/slurmbin:$PATH" "$herd" run --dry-run -np 2 -- models >"$tmp/out" 2>"$tmp/err"
check "inside Slurm job 77: srun chosen, saying why" has "^herd: launcher: srun (inside Slurm job 77; --launcher "
check "inside Slurm job 77: srun's command" has "^herd: launching: [^ ]*srun -n 2 "
SLURM_JOB_ID=77 PATH="$tmp/slurmbin:$PATH" "$herd" run --dry-run --launcher openmpi -np 2 -- models >"$tmp/out" 2>"$tmp/err"
check "inside Slurm job 77 with --launcher openmpi: mpirun" has "^herd: launcher: openmpi (--launcher)"
SLURM_JOB_ID=77 PATH="/usr/bin:/bin" "$herd" run --dry-run -np 2 -- models >"$tmp/out" 2>"$tmp/err"
if ! PATH=/usr/bin:/bin command -v srun >/dev/null; then
  check "inside Slurm job 77 without srun: herd's MPI, saying so" has "inside Slurm job 77, but srun is not in PATH)"
fi

dry -np 1 -- train --model mlp
check "dry run exits 0" test $? -eq 0
check "prints 'herd: launching: mpirun ...'" grep -q "^herd: launching: [^ ]*mpirun[^ ]* " "$tmp/err"
check "runs this binary by absolute path" has " $self train --model mlp"
check "1 rank gets every core" has "slot:PE=$cores .*--threads $cores\$"
check "dry run starts nothing" test ! -s "$tmp/out"

# Two ranks sharing this machine's cores (tests run on >= 2 cores; 1 core oversubscribes).
dry -np 2 -- train --model lenet5
t=$((cores / 2)); [ $t -lt 1 ] && t=1
if [ "$cores" -ge 2 ]; then
  check "np 2: bound to cores, PE=$t" has "-np 2 --bind-to core --map-by slot:PE=$t "
  check "np 2: no --oversubscribe" hasnt "oversubscribe"
fi
check "np 2: OMP_NUM_THREADS exported" has "-x OMP_NUM_THREADS=$t "
check "np 2: OPENBLAS_NUM_THREADS exported" has "-x OPENBLAS_NUM_THREADS=$t "
check "np 2: --threads added to train" has "train --model lenet5 --threads $t\$"

np=$((cores * 2))
dry -np $np -- bench train --model mlp
check "np $np on $cores cores: --oversubscribe --bind-to none" has "--oversubscribe --bind-to none"
check "oversubscribed: no core binding" hasnt "PE="
check "oversubscribed: a note says so" grep -q "^herd: note: .*oversubscribed" "$tmp/err"
check "bench train gets --threads 1" has "bench train --model mlp --threads 1\$"

dry -np 8 -H a:4,b:4 --threads-per-rank 3 -- train --model mlp
check "-H passed through" has "-np 8 -H a:4,b:4 "
check "--threads-per-rank 3: PE=3" has "--bind-to core --map-by slot:PE=3 "
check "--threads-per-rank 3: train --threads 3" has "--threads 3\$"
check "hosts: never --oversubscribe" hasnt "oversubscribe"

printf 'a slots=2\n# comment\nb slots=2\n' >"$tmp/hosts"
dry -np 4 --hostfile "$tmp/hosts" -- train --model mlp
check "--hostfile passed through" has "--hostfile $tmp/hosts "

dry -np 2 -- train --model mlp --threads 1 --epochs 1
check "user's --threads kept" has "train --model mlp --threads 1 --epochs 1\$"
check "user's --threads not added twice" test "$(grep -o -- '--threads' "$tmp/err" | wc -l)" -eq 1
dry -np 1 -- train --model mlp --threads=1
check "user's --threads=N kept, binding follows it" bash -c "grep -q 'PE=1 ' '$tmp/err' && ! grep -q -- '--threads 1' '$tmp/err'"

dry -np 2 -x FOO -x 'BAR=a b' -x OMP_NUM_THREADS=7 --mca btl_tcp_if_include eth0 -- models
check "-x passthrough" has "-x FOO -x 'BAR=a b' "
check "user's OMP_NUM_THREADS wins" bash -c "grep -q 'OMP_NUM_THREADS=7' '$tmp/err' && ! grep -q 'x OMP_NUM_THREADS=[0-9]* .*OMP_NUM_THREADS=7' '$tmp/err'"
check "--mca passthrough" has "--mca btl_tcp_if_include eth0 "
check "models gets no --threads" hasnt "models --threads"

# Open MPI's shared-memory single copy is left to Open MPI (no probe herd can run
# predicts the faster transport for a job's messages); the user's own setting is passed on.
dry -np 2 -- models
check "two local ranks: single copy left to Open MPI" bash -c "! grep -q 'single_copy_mechanism' '$tmp/err' && ! grep -q 'note:' '$tmp/err'"
dry -np 2 --mca btl_vader_single_copy_mechanism cma -- models
check "user's single-copy setting kept, not overridden" bash -c "[ \$(grep -o 'single_copy_mechanism' '$tmp/err' | wc -l) -eq 1 ] && grep -q 'single_copy_mechanism cma ' '$tmp/err'"
OMPI_MCA_btl_vader_single_copy_mechanism=cma dry -np 2 -- models
check "single-copy from the environment: nothing added" hasnt "single_copy_mechanism"

# Keepalive on mpirun's daemon connections, so that a vanished host ends the job.
dry -np 2 -- models
check "keepalive defaults added" has "--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 5 "
check "mpirun's kill grace left alone when not supervised" hasnt "odls_base_sigkill_timeout"
dry -np 2 --mca oob_tcp_keepalive_time 60 -- models
check "user's keepalive time kept, the others added" bash -c "[ \$(grep -o 'oob_tcp_keepalive_time' '$tmp/err' | wc -l) -eq 1 ] && grep -q 'keepalive_time 60 .*keepalive_intvl 2 ' '$tmp/err'"
OMPI_MCA_oob_tcp_keepalive_probes=3 dry -np 2 -- models
check "keepalive probes from the environment: not added" hasnt "keepalive_probes"
dry -np 2 --mpirun-args "--mca oob_tcp_keepalive_time 60 -x OMPI_MCA_oob_tcp_keepalive_intvl=9" -- models
check "keepalive settings in --mpirun-args: not given twice" bash -c "[ \$(grep -o 'oob_tcp_keepalive_time' '$tmp/err' | wc -l) -eq 1 ] && [ \$(grep -o 'keepalive_intvl' '$tmp/err' | wc -l) -eq 1 ] && grep -q 'keepalive_probes 5' '$tmp/err'"

dry -np 2 --mpirun /opt/mpi/bin/mpirun -- models
check "--mpirun chooses the launcher" grep -q "^herd: launching: /opt/mpi/bin/mpirun " "$tmp/err"

dry -np 2 -- models
if [ "$(id -u)" = 0 ]; then
  check "root: --allow-run-as-root" has "mpirun[^ ]* --allow-run-as-root "
else
  check "not root: no --allow-run-as-root" hasnt "allow-run-as-root"
fi

# Commands herd run starts: topo and doctor too (each rank's place, every host's checks).
for c in topo doctor; do
  dry -np 2 -- $c
  check "-- $c accepted" has " $self $c\$"
done

# Binding: --bind-to, core (T cores each) by default.
dry -np 2 --bind-to socket -- models
check "openmpi --bind-to socket" bash -c "grep -q -- '--bind-to socket ' '$tmp/err' && ! grep -q 'PE=' '$tmp/err'"
dry -np 2 --bind-to none -- models
check "openmpi --bind-to none" has "--bind-to none "

# --mpirun-args: split as a shell splits words, before the binary; strict quotes.
dry -np 2 --mpirun-args "--mca a 'b c' \"d \\\"e\\\"\" f\\ g" --mpirun-args "--tag-output" -- models
check "--mpirun-args split and quoted" has "--mca a 'b c' 'd \"e\"' 'f g' --tag-output $self models\$"
usage() { # usage NAME ARGS...: exit 2 with 'herd: error:'
  local name=$1; shift
  "$herd" run "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  check "$name: exit 2 ($rc)" test $rc -eq 2
  check "$name: herd: error:" grep -q "^herd: error:" "$tmp/err"
}
usage "--mpirun-args unbalanced quote" -np 2 --dry-run --mpirun-args "a 'b" -- models
check "unbalanced quote: says where" grep -q "unbalanced ' quote at character 3" "$tmp/err"
usage "--mpirun-args trailing backslash" -np 2 --dry-run --mpirun-args 'a\' -- models
usage "--bind-to l3" -np 2 --dry-run --bind-to l3 -- models

# MPICH's Hydra: -n, -hosts / -f, -bind-to core:T, -genv; no root flags.
hydra() { "$herd" run --dry-run --launcher hydra "$@" >"$tmp/out" 2>"$tmp/err"; }
hydra -np 8 -H a:4,b:4 --threads-per-rank 3 -x FOO=1 -x 'BAR=a b' -- train --model mlp
check "hydra: -n, -hosts, -bind-to core:3" has "mpiexec[^ ]* -n 8 -hosts a:4,b:4 -bind-to core:3 "
check "hydra: variables through -genv" has "-genv OMP_NUM_THREADS 3 -genv OPENBLAS_NUM_THREADS 3 -genv FOO 1 -genv BAR 'a b' "
check "hydra: no Open MPI flags" bash -c "! grep -qE -- '--allow-run-as-root|--map-by|-x |--oversubscribe' '$tmp/err'"
check "hydra: train --threads 3" has "train --model mlp --threads 3\$"
hydra -np 2 -H a,b -- models
check "hydra: -H as given" has " -n 2 -hosts a,b "
printf 'a:2\nb:2\n' >"$tmp/hosts.hydra"
hydra -np 4 --hostfile "$tmp/hosts.hydra" -- models
check "hydra: its own hostfile form with -f" has "-n 4 -f $tmp/hosts.hydra "
hydra -np 4 --hostfile "$tmp/hosts" -- models
check "hydra: an Open MPI hostfile as -hosts" has "-n 4 -hosts a:2,b:2 "
dry -np 4 --hostfile "$tmp/hosts.hydra" -- models
check "openmpi: a Hydra hostfile as -H" has "-np 4 -H a:2,b:2 "
hydra -np $((cores * 2)) -- models
check "hydra oversubscribed: -bind-to none" has "-n $((cores * 2)) -bind-to none "
hydra -np 2 --bind-to numa -- models
check "hydra --bind-to numa" has "-bind-to numa "
usage "hydra --report-bindings" -np 2 --dry-run --launcher hydra --report-bindings -- models
usage "hydra --mca" -np 2 --dry-run --launcher hydra --mca a b -- models
check "hydra --mca: says it is Open MPI's" grep -q "mca is Open MPI's" "$tmp/err"
unset HERD_TEST_UNSET_VAR
usage "hydra -x of an unset variable" -np 2 --dry-run --launcher hydra -x HERD_TEST_UNSET_VAR -- models

# Slurm's srun: -n, -w + --ntasks-per-node, --cpus-per-task, --cpu-bind, --mpi, --export.
# Without MPI herd has no PMI plugin to ask for: srun gets no --mpi= at all.
version=$("$herd" --version) # once: it loads cuBLAS to name its version
plugin=pmix; grep -q "MPI: MPICH" <<<"$version" && plugin=pmi2
mpiflag="--mpi=$plugin "; grep -q "MPI: none" <<<"$version" && { plugin="(none)"; mpiflag=""; }
srun() { "$herd" run --dry-run --launcher srun "$@" >"$tmp/out" 2>"$tmp/err"; }
srun -np 8 -H a:4,b:4 --threads-per-rank 2 -x FOO=1 -- train --model mlp
check "srun: -n, -w, --ntasks-per-node" has "srun -n 8 -w a,b --ntasks-per-node=4 "
check "srun: --cpus-per-task, --cpu-bind=cores, --mpi=$plugin (herd's MPI)" has "--cpus-per-task=2 --cpu-bind=cores $mpiflag--export"
check "srun: --export=ALL and the variables" has "--export=ALL,OMP_NUM_THREADS=2,OPENBLAS_NUM_THREADS=2,FOO=1 $self train --model mlp --threads 2\$"
srun -np 2 --bind-to socket --report-bindings --mpirun-args "--mpi=none" -- models
check "srun: --cpu-bind=verbose,sockets" has "--cpu-bind=verbose,sockets "
check "srun: the user's --mpi wins" bash -c "grep -q -- '--mpi=none' '$tmp/err' && ! grep -q -- '--mpi=$plugin' '$tmp/err'"
usage "srun with unequal slots" -np 6 --dry-run --launcher srun -H a:4,b:2 -- models
usage "srun -x with a comma" -np 2 --dry-run --launcher srun -x A=1,2 -- models

# How the kind is chosen: --launcher, else --mpirun's --version, else herd's MPI.
fake() { printf '#!/bin/sh\necho "%s"\n' "$2" >"$tmp/$1"; chmod +x "$tmp/$1"; }
fake launcher-a "mpirun (Open MPI) 4.1.4"
fake launcher-b "HYDRA build details:"
fake launcher-c "slurm 22.05.8"
fake launcher-d "some other program 1.0"
for want in "a openmpi -np 2 --bind-to" "b hydra -n 2 -bind-to" "c srun -n 2 --cpus-per-task"; do
  set -- $want
  "$herd" run --dry-run -np 2 --mpirun "$tmp/launcher-$1" -- models >/dev/null 2>"$tmp/err"
  check "--mpirun whose --version says $2: $2's flags" bash -c \
    "grep -q '^herd: launcher: $2 (its --version)' '$tmp/err' && grep -q '^herd: launching: $tmp/launcher-$1 .*$3 ' '$tmp/err'"
done
"$herd" run -np 2 --mpirun "$tmp/launcher-d" -- models >/dev/null 2>"$tmp/err"
check "unknown launcher: exit 1, asks for --launcher" bash -c "test $? -eq 1 && grep -q 'name its kind with --launcher' '$tmp/err'"
"$herd" run --dry-run -np 2 --launcher hydra --mpirun "$tmp/launcher-a" -- models >/dev/null 2>"$tmp/err"
check "--launcher wins over --version" grep -q "^herd: launcher: hydra (--launcher)" "$tmp/err"
"$herd" run --dry-run -np 2 --mpirun /nowhere/srun -- models >/dev/null 2>"$tmp/err"
check "dry run, srun not installed: the kind from its name, said so" bash -c \
  "grep -q '^herd: launcher: srun (a dry run: from its name)' '$tmp/err' && grep -q '^herd: launching: /nowhere/srun -n 2 ' '$tmp/err'"
own=openmpi; grep -q "MPI: MPICH" <<<"$version" && own=hydra
"$herd" run --dry-run -np 2 -- models >/dev/null 2>"$tmp/err"
check "by default herd's MPI's kind ($own)" grep -q "^herd: launcher: $own (herd's MPI)" "$tmp/err"
if have_mpi; then
  check "by default herd's MPI's launcher ($HERD_MPIEXEC), not PATH's" grep -q "^herd: launching: $HERD_MPIEXEC " "$tmp/err"
fi

# Without -np: a rank per NUMA node (per GPU for --device cuda), per slot of -H or a
# hostfile, or per Slurm task under srun; what a command needs at least; said at start.
# HWLOC_SYNTHETIC stands in for a bigger machine: 2 packages of 2 NUMA nodes of 4 cores
# of 2 hardware threads each.
big="pack:2 numa:2 core:4 pu:2"
HWLOC_SYNTHETIC=$big dry -- train --model lenet5
check "no -np, 4 NUMA nodes: 4 ranks of 4 cores (not hardware threads)" \
  has "-np 4 --bind-to core --map-by slot:PE=4 .*train --model lenet5 --threads 4\$"
check "... said at start" has "^herd: -np not given: 4 rank(s), a rank per NUMA node of this host: 4 node(s), 16 core(s)"
HWLOC_SYNTHETIC=$big dry -np 2 -- train --model lenet5
check "-np 2 on 16 cores of 32 hardware threads: 8 threads each" has "PE=8 .*--threads 8\$"
check "... and nothing said of -np" hasnt "np not given"
HWLOC_SYNTHETIC=$big dry -- train --model lenet5 --pipeline-stages 3 --zero 1
check "no -np, 4 nodes, 3 stages x 2 replicas: raised to 6, said" \
  has "^herd: -np not given: 6 rank(s), .*; 4 raised to 6, the fewest the command runs with"
dry -- models
check "no -np on this machine: a rank per NUMA node" has "^herd: -np not given: [0-9]* rank(s), a rank per NUMA node"
dry -H a:3,b:2 -- models
check "no -np, -H a:3,b:2: 5 ranks" has "-np 5 -H a:3,b:2 "
printf 'a slots=2\nb\n' >"$tmp/noslots"
usage "no -np, a hostfile host without slots" --dry-run --hostfile "$tmp/noslots" -- models
check "... names the host and asks for -np or slots" grep -q "host 'b' says no slot count.*give -np N" "$tmp/err"
SLURM_JOB_ID=77 SLURM_NTASKS=6 PATH="$tmp/slurmbin:$PATH" "$herd" run --dry-run -- models >"$tmp/out" 2>"$tmp/err"
check "no -np inside a Slurm allocation of 6 tasks: srun -n 6" has "srun -n 6 "
if ! "$herd" topo 2>/dev/null | grep -q "^GPUs ([1-9]"; then
  usage "no -np, --device cuda and no GPU" --dry-run -- train --model lenet5 --device cuda
  check "... says no GPU is seen" grep -q "asks for --device cuda where herd sees no GPU" "$tmp/err"
fi
usage "no -np with --host-discovery" --dry-run --max-restarts 1 --host-discovery 'echo a:2' -- train \
  --model mlp --checkpoint-dir "$tmp/ck"
usage "-np 0" -np 0 --dry-run -- models
usage "-np abc" -np abc --dry-run -- models
usage "no command" -np 2 --dry-run --
usage "neither a herd command nor a program" -np 2 --dry-run -- no-such-program-herd train.py
check "neither: says so" grep -q "'no-such-program-herd' is neither a herd command" "$tmp/err"
# Another program (python3 for import herd) runs as given: no herd binary, no --threads.
"$herd" run --dry-run -np 2 -- sh -c true >/dev/null 2>"$tmp/err"
check "another program: launched as given" grep -q "^herd: launching: .* sh -c true$" "$tmp/err"
check "another program: threads through the environment only" grep -q "OMP_NUM_THREADS[= ]1 .* sh -c true$" "$tmp/err"
usage "unknown option" -np 2 --frobnicate -- models
usage "bad host list" -np 2 -H a:x --dry-run -- models
usage "-H and --hostfile" -np 2 -H a:2 --hostfile "$tmp/hosts" --dry-run -- models
# A hostfile line's words past the host: slots=N and Open MPI's max_slots=N, nothing else.
printf 'a slots=2 max_slots=4\nb slots=2 extra junk\n' >"$tmp/hosts.junk"
"$herd" run -np 2 --hostfile "$tmp/hosts.junk" --dry-run -- models >/dev/null 2>"$tmp/err"
check "hostfile with unknown words: exit 1 ($?)" test $? -eq 1
check "hostfile with unknown words: names line 2 and the word" \
  grep -q "hosts.junk:2: 'extra' after host 'b' is not slots=N or max_slots=N" "$tmp/err"
usage "--threads-per-rank 0" -np 2 --threads-per-rank 0 --dry-run -- models

"$herd" run -np 2 --mpirun "$tmp/no-such-mpirun" -- models >/dev/null 2>"$tmp/err"
check "missing mpirun: exit 1" test $? -eq 1
check "missing mpirun: names openmpi-bin" grep -q "openmpi-bin" "$tmp/err"

"$herd" run -np 2 --launcher openmpi --mpirun "$tmp/no-such-mpirun" -- models >/dev/null 2>"$tmp/err"
check "missing Open MPI launcher: names openmpi-bin" grep -q "apt-get install openmpi-bin" "$tmp/err"

if have_mpi; then
  timeout 60 "$herd" run -np 2 -- models >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "real launch: herd run -np 2 -- models exits 0 ($rc)" test $rc -eq 0
  check "real launch: both ranks printed the zoo" test "$(grep -c '^lenet5 ' "$tmp/out")" -eq 2
  [ $rc -ne 0 ] && cat "$tmp/err"
  nodes=$("$herd" topo | sed -n 's/.* \([0-9][0-9]*\) NUMA node(s).*/\1/p')
  timeout 60 "$herd" run -- models >"$tmp/out" 2>"$tmp/err"
  check "real launch without -np: a rank per NUMA node ($nodes), each printed the zoo" \
    test "$(grep -c '^lenet5 ' "$tmp/out")" -eq "${nodes:-0}"
  timeout 60 "$herd" run -np 2 -- topo >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "real launch: herd run -np 2 -- topo exits 0 ($rc)" test $rc -eq 0
  check "real launch: topo lists both ranks, one job" grep -q "^ranks (2):" "$tmp/out"
  [ $rc -ne 0 ] && cat "$tmp/err"
else
  skipped_part "the real 2-rank launches (herd built without MPI, or its launcher missing)"
fi

finish
