#!/usr/bin/env bash
# make test's builds and passes, all at once (what building needs is already installed:
# install-deps.sh build). What only the tests need (install-deps.sh test: PyTorch and its
# libraries, Slurm, the data set, MPICH: on a new machine 98 s alone against 16 s for the
# build packages, measured in a fresh Debian 12 tree, bench/results/2026-12-06-install.txt)
# installs while the optimised build compiles, and then the sanitizer and no-MPI builds;
# every pass's tests wait for it (MPICH's build too). Then the optimised build's tests in
# the foreground; beside them the sanitizer, MPICH and no-MPI passes, each starting as soon
# as its own build is done (through ccache most of the MPICH and no-MPI builds' objects
# are the optimised build's). Many tests wait on a stopped or
# killed rank's timeout, a launcher or a namespace cluster, and MPICH's pass is one test
# at a time: run in two stages, make test took 1,040 s (1,015 s with 3 tests at a time in
# the first and sanitizer passes); all at once 973 s, the three passes ending within two
# minutes of each other (bench/results/2026-11-27-suite-times-ci.txt).
# Tests at a time: 2 in the first pass, 3 under the sanitizers (979 s with 2), 1 for
# MPICH (more ranks than cores slow MPICH most under load: a 3-rank run took 1 s alone
# and 5 s beside other tests).
# Tried and left: the background passes at nice 19, so that the first pass's hand-overs
# between ranks wait on no time slice (bench/results/2026-12-05-suite-priority.txt): the
# first pass then took 10-11 minutes instead of 18, but the whole suite 17 min 28 s to
# 19 min 41 s in three runs, within the spread of runs without, and MPICH's ranks, starved,
# outlasted the tests' own waits.
# Also tried (bench/results/2026-12-06-suite-jobs-yield.txt, the first and sanitizer passes
# side by side without builds): 3 tests at a time in the first pass ended it in 655 and
# 693 s against 694 and 680 with 2 (the sanitizer pass 25-80 s later); Open MPI's
# mpi_yield_when_idle off, 702 s (though beside 4 busy loops a 3-stage pipeline took 3.8 s
# with it off and 13.4 s with it on). Neither kept.
# Where the CPU goes (2026-12-07, each test alone, bench/results/2026-12-07-suite-cpu-per-test.txt):
# the first pass's tests 592 CPU-s, the sanitizer pass's 365, MPICH's 110, the no-MPI
# pass's 17, the four builds 320 from an empty ccache. The largest, cli_deterministic_syncbn
# (74), spends it on its 3- to 6-rank runs' collectives (a batch norm's statistics per slice)
# more than on arithmetic: its images at 4x4 instead of 8x8 saved 14% of it; not kept.
# The passes themselves are the Makefile's targets (asan, mpich, nompi), so that each can
# also run alone. Each background pass writes its own log, printed whole when it ends;
# the suite fails if any pass or build does.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${HERD_SUITE_LOGS:-${BUILD:-build}/suite-logs}
mkdir -p "$logs"
stamp() { date -u +%H:%M:%S; }

# The tests' packages (MPICH among them), beside the builds: one apt at a time, and no other
# install runs now.
echo "suite $(stamp): installing what the tests need (install-deps.sh test), beside the builds"
rm -f "$logs/deps.rc"
(bash scripts/install-deps.sh test >"$logs/deps.log" 2>&1; echo $? >"$logs/deps.rc") &
deps_ready() { # waits for the install; fails, naming its log, if it failed
  while [ ! -s "$logs/deps.rc" ]; do sleep 1; done
  [ "$(cat "$logs/deps.rc")" = 0 ] || { echo "suite: installing the tests' packages failed:" >&2; cat "$logs/deps.log" >&2; return 1; }
}
make --no-print-directory build || { echo "make test: FAILED: the optimised build" >&2; exit 1; }

declare -A pid jobs=([asan]=3 [mpich]=1 [nompi]=2)
# MPICH installs with the tests' packages: its pass (make mpich) skips, saying so, without it.
passes=(asan nompi mpich)
echo "suite $(stamp): the optimised build's tests; beside them ${passes[*]}, each after its build (logs: $logs)"
for pass in "${passes[@]}"; do
  (
    # The sanitizer and no-MPI builds need only the build packages: on a new machine they
    # compile while the tests' packages still install (dpkg keeps one core; the optimised
    # build is done), and their passes rebuild nothing (1.4 and 0.5 s).
    { [ "$pass" = mpich ] || make --no-print-directory "$pass-build"; } &&
      deps_ready && make --no-print-directory "$pass" CTEST_JOBS=${jobs[$pass]}
    rc=$?
    echo "suite $(stamp): the $pass pass (and its build) ended, exit $rc"
    exit $rc
  ) >"$logs/$pass.log" 2>&1 &
  pid[$pass]=$!
done

failed=()
if deps_ready; then
  make --no-print-directory test-fast CTEST_JOBS=2 || failed+=("optimised build's tests")
else
  failed+=("installing the tests' packages")
fi
echo "suite $(stamp): the optimised build's tests ended"
for pass in nompi mpich asan; do
  [ -n "${pid[$pass]:-}" ] || continue
  wait "${pid[$pass]}" || failed+=("$pass")
  echo "suite $(stamp): the $pass pass's log:"
  cat "$logs/$pass.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "make test: FAILED: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
echo "suite $(stamp): all passes passed"
