#!/usr/bin/env bash
# herd run: the mpirun command it builds (--dry-run) for local, oversubscribed and
# multi-host jobs, thread counts, root flags, usage errors; then one real launch
# when mpirun is installed.
set -u
. "$(dirname "$0")/testlib.sh"
has() { grep -q -e "$1" "$tmp/err"; }  # the launch line contains $1
hasnt() { ! grep -q -e "$1" "$tmp/err"; }
dry() { "$herd" run --dry-run "$@" >"$tmp/out" 2>"$tmp/err"; }
cores=$(getconf _NPROCESSORS_ONLN)
self=$(readlink -f "$herd")

"$herd" run --help >"$tmp/help"; check "run --help exits 0" test $? -eq 0
check "herd --help lists run" bash -c "'$herd' --help | grep -q '^  run '"

dry -np 1 -- train --model mlp
check "dry run exits 0" test $? -eq 0
check "prints 'herd: launching: mpirun ...'" grep -q "^herd: launching: mpirun " "$tmp/err"
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

# The shared-memory single-copy choice is probed per host; the user's own setting wins.
dry -np 2 --mca btl_vader_single_copy_mechanism cma -- models
check "user's single-copy setting kept, not overridden" bash -c "[ \$(grep -o 'single_copy_mechanism' '$tmp/err' | wc -l) -eq 1 ] && grep -q 'single_copy_mechanism cma ' '$tmp/err'"
OMPI_MCA_btl_vader_single_copy_mechanism=cma dry -np 2 -- models
check "single-copy from the environment: nothing added" hasnt "single_copy_mechanism"
dry -np 1 -- models
check "one rank: no single-copy choice" hasnt "single_copy_mechanism"

# Keepalive on mpirun's daemon connections, so that a vanished host ends the job.
dry -np 2 -- models
check "keepalive defaults added" has "--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 5 "
dry -np 2 --mca oob_tcp_keepalive_time 60 -- models
check "user's keepalive time kept, the others added" bash -c "[ \$(grep -o 'oob_tcp_keepalive_time' '$tmp/err' | wc -l) -eq 1 ] && grep -q 'keepalive_time 60 .*keepalive_intvl 2 ' '$tmp/err'"
OMPI_MCA_oob_tcp_keepalive_probes=3 dry -np 2 -- models
check "keepalive probes from the environment: not added" hasnt "keepalive_probes"

dry -np 2 --mpirun /opt/mpi/bin/mpirun -- models
check "--mpirun chooses the launcher" grep -q "^herd: launching: /opt/mpi/bin/mpirun " "$tmp/err"

dry -np 2 -- models
if [ "$(id -u)" = 0 ]; then
  check "root: --allow-run-as-root" has "mpirun --allow-run-as-root "
else
  check "not root: no --allow-run-as-root" hasnt "allow-run-as-root"
fi

usage() { # usage NAME ARGS...: exit 2 with 'herd: error:'
  local name=$1; shift
  "$herd" run "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  check "$name: exit 2 ($rc)" test $rc -eq 2
  check "$name: herd: error:" grep -q "^herd: error:" "$tmp/err"
}
usage "no -np" --dry-run -- models
usage "-np 0" -np 0 --dry-run -- models
usage "-np abc" -np abc --dry-run -- models
usage "no command" -np 2 --dry-run --
usage "not a herd command" -np 2 --dry-run -- python train.py
usage "unknown option" -np 2 --frobnicate -- models
usage "bad host list" -np 2 -H a:x --dry-run -- models
usage "-H and --hostfile" -np 2 -H a:2 --hostfile "$tmp/hosts" --dry-run -- models
usage "--threads-per-rank 0" -np 2 --threads-per-rank 0 --dry-run -- models

"$herd" run -np 2 --mpirun "$tmp/no-such-mpirun" -- models >/dev/null 2>"$tmp/err"
check "missing mpirun: exit 1" test $? -eq 1
check "missing mpirun: names openmpi-bin" grep -q "openmpi-bin" "$tmp/err"

if command -v mpirun >/dev/null; then
  timeout 60 "$herd" run -np 2 -- models >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "real launch: herd run -np 2 -- models exits 0 ($rc)" test $rc -eq 0
  check "real launch: both ranks printed the zoo" test "$(grep -c '^lenet5 ' "$tmp/out")" -eq 2
  [ $rc -ne 0 ] && cat "$tmp/err"
else
  skipped_part "the real 2-rank launch (mpirun not installed)"
fi

finish
