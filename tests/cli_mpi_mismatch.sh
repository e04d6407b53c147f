#!/usr/bin/env bash
# A herd started by another MPI's launcher (Open MPI's mpirun for an MPICH build, MPICH's
# Hydra for an Open MPI build; HERD_OTHER_MPIEXEC from CMake) refuses to run, naming both,
# instead of training one model per rank and exiting 0; herd doctor fails its mpi check
# there. make test runs this in both builds, so both directions. Under timeout.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
other=${HERD_OTHER_MPIEXEC:-}
[ -n "$other" ] && [ -x "$other" ] ||
  skip_all "the other MPI's launcher is not installed (Debian: mpich for an Open MPI build, openmpi-bin for an MPICH one)"
read -r -a launch <<<"${HERD_OTHER_MPIEXEC_PREFLAGS:-}"
launch=(timeout 60 "$other" "${launch[@]}" -np 2)
lib=$("$herd" --version | sed -n 's/.*; MPI: \([^;]*\);.*/\1/p')
if "$other" --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then found="Open MPI's mpirun"; else found="a PMI launcher (MPICH's Hydra"; fi
echo "herd's MPI: $lib; launcher: $other ($found)"

"${launch[@]}" "$herd" train --model mlp --data synthetic:1,12,12,4,500 --threads 1 --epochs 1 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "train under $other: non-zero exit ($rc)" test $rc -ne 0 -a $rc -ne 124
check "train: names herd's MPI and the launcher" grep -qF "herd: error: cannot join the distributed job: unsupported: herd uses $lib, but $found" "$tmp/err"
check "train: says what to do" grep -q "Start herd with its own MPI's launcher" "$tmp/err"
check "train: no rank trained alone" bash -c "! grep -q 'model=mlp' '$tmp/out'"
[ $rc -eq 0 ] && cat "$tmp/out" "$tmp/err"

"${launch[@]}" "$herd" doctor >"$tmp/out" 2>"$tmp/err"
rc=$?
check "doctor under $other: exit 1 ($rc)" test $rc -eq 1
check "doctor: the mpi check fails, naming both" \
  bash -c "grep '^fail  *mpi ' '$tmp/out' | grep -qF \"herd uses $lib, but $found\""
finish
