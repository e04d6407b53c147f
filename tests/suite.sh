#!/usr/bin/env bash
# make test's passes, overlapped (the optimised build is already built):
#   1. the optimised build's tests, while the sanitizer, MPICH and no-MPI builds compile
#      at low priority: the tests leave about a quarter of two cores idle (waiting on
#      peers, timeouts and launchers), which the compilers fill;
#   2. the sanitizer pass, with the MPICH pass (one test at a time) and the no-MPI pass
#      beside it: each alone keeps 1.5 to 1.7 cores busy.
# The first and the sanitizer pass run 3 tests at a time on the 2 cores: many tests
# spend much of their time waiting (on a stopped or killed rank's timeout, a launcher, a
# namespace cluster's partition), and with 2 at a time the passes kept about 1.6-1.7 of
# the 2 cores busy (each test's CPU time measured alone, against the passes' wall time).
# The passes themselves are the Makefile's targets (asan, mpich, nompi), so that each can
# also run alone. Each concurrent pass writes its own log, printed whole when it ends;
# the suite fails if any pass or build does.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${HERD_SUITE_LOGS:-${BUILD:-build}/suite-logs}
mkdir -p "$logs"
have_mpich() { command -v mpicc.mpich >/dev/null; }
stamp() { date -u +%H:%M:%S; }

builds=(asan-build nompi-build)
have_mpich && builds+=(mpich-build)
echo "suite $(stamp): the optimised build's tests; building ${builds[*]} at low priority (log: $logs/builds.log)"
nice -n 19 make --no-print-directory "${builds[@]}" >"$logs/builds.log" 2>&1 &
builds_pid=$!

failed=()
make --no-print-directory test-fast CTEST_JOBS=3 || failed+=("optimised build's tests")

wait "$builds_pid" || { cat "$logs/builds.log"; failed+=("builds: ${builds[*]}"); }
if [ ${#failed[@]} -gt 0 ]; then
  echo "make test: FAILED: ${failed[*]}" >&2
  exit 1
fi

echo "suite $(stamp): the sanitizer pass, with the MPICH and no-MPI passes beside it"
declare -A pid
for pass in asan mpich nompi; do
  jobs=2
  [ "$pass" = asan ] && jobs=3
  [ "$pass" = mpich ] && jobs=1 # more ranks than cores slow MPICH most under load (a 3-rank
                                 # run: 1 s alone, 5 s beside other tests)
  make --no-print-directory "$pass" CTEST_JOBS=$jobs >"$logs/$pass.log" 2>&1 &
  pid[$pass]=$!
done
for pass in nompi mpich asan; do
  wait "${pid[$pass]}" || failed+=("$pass")
  echo "suite $(stamp): the $pass pass ended; its log:"
  cat "$logs/$pass.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "make test: FAILED: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
echo "suite $(stamp): all passes passed"
