#!/usr/bin/env bash
# Remakes the lists of tests/repeat_passes.txt (not run by make test; docs in that file).
# Builds herd with clang's source coverage in DIR, runs every test once as a repeat pass
# does (HERD_SANITIZED=1, two at a time), keeps the lines of herd's own code (src/, cli/)
# each test reached, and prints, for the sanitizer and the MPICH pass, the tests whose
# lines the pass's other tests all reach (tests/repeat_select.py).
# usage: tests/repeat_select.sh [--processes] SANITIZER_COSTS MPICH_COSTS [DIR]
#   *_COSTS: "NAME SECONDS" for each test of that pass, e.g. from a tree that ran its
#   whole pass: awk '!/^---/ {print $1, $3}' build-asan/Testing/Temporary/CTestCostData.txt
#   --processes: also list, for each sanitizer-pass test of 10 s or more, which of its
#   commands reach lines of their own (tests/repeat_processes.py). herd then runs through a
#   wrapper that logs its command lines; the tests that find herd's binary or its processes
#   by path (cli_run, check_exports, cli_mpi_train, the elastic, restart and cluster tests)
#   fail checks under it, so use the lists this mode prints, and remake repeat_passes.txt's
#   without it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
processes=0
[ "${1:-}" = --processes ] && { processes=1; shift; }
asan_costs=$(realpath "$1") mpich_costs=$(realpath "$2")
dir=$(realpath -m "${3:-build-coverage}")
cov="-fprofile-instr-generate -fcoverage-mapping"
cmake -S "$src" -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-O1 \
  -DCMAKE_C_FLAGS="$cov -Wno-pass-failed" -DCMAKE_EXE_LINKER_FLAGS="$cov" \
  -DCMAKE_SHARED_LINKER_FLAGS="$cov" -DHERD_CUDA=OFF >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
profdata=$(command -v llvm-profdata || command -v llvm-profdata-14)
llvmcov=$(command -v llvm-cov || command -v llvm-cov-14)
rm -rf "$dir/coverage" && mkdir -p "$dir/coverage/raw" "$dir/coverage/lines"
herd_bin="$dir/herd"
if [ $processes = 1 ]; then # each herd process's command line, by pid (exec keeps it)
  mv "$dir/herd" "$dir/herd.bin"
  herd_bin="$dir/herd.bin"
  printf '#!/bin/sh\necho "$HERD_SELECT_TEST $$ $*" >>"%s"\nexec "%s" "$@"\n' \
    "$dir/coverage/argv.log" "$herd_bin" >"$dir/herd"
  chmod +x "$dir/herd"
fi

run_one() { # the test's processes write their profiles under raw/NAME
  mkdir -p "$dir/coverage/raw/$1"
  (cd "$dir" && HERD_SANITIZED=1 CI=true LLVM_PROFILE_FILE="$dir/coverage/raw/$1/%p.profraw" HERD_SELECT_TEST="$1" \
    ctest -R "^$1\$" >"$dir/coverage/raw/$1.log" 2>&1) || echo "repeat_select: $1 failed (see $dir/coverage/raw/$1.log)" >&2
}
export -f run_one
export dir
(cd "$dir" && ctest -N | awk '/Test +#/ {print $3}') | xargs -P 2 -I{} bash -c 'run_one {}'

objects=() object_files=()
[ $processes = 1 ] && mv "$dir/herd.bin" "$dir/herd" && herd_bin="$dir/herd"
for f in "$herd_bin" "$dir"/libherd.so "$dir"/tests/test_* "$dir"/tests/mpi_*; do
  [ -f "$f" ] && [ -x "$f" ] && objects+=(-object "$f") && object_files+=("$f")
done
for raw in "$dir"/coverage/raw/*/; do
  name=$(basename "$raw")
  ls "$raw"/*.profraw >/dev/null 2>&1 || continue
  "$profdata" merge -sparse "$raw"/*.profraw -o "$dir/coverage/$name.profdata"
  "$llvmcov" export -format=lcov -instr-profile "$dir/coverage/$name.profdata" "${objects[@]}" 2>/dev/null |
    awk -v src="$src/" '/^SF:/ { f = substr($0, 4); keep = index(f, src "src/") == 1 || index(f, src "cli/") == 1
                                  sub("^" src, "", f) }
                        keep && /^DA:/ { split(substr($0, 4), d, ","); if (d[2] > 0) print f, d[1] }' |
    sort -u >"$dir/coverage/lines/$name.txt"
done

# The sanitizer pass: herd's whole code; the tests whose ranks check for leaks (label
# leak_checked) and the fuzz targets (not in this build) stay.
leak_checked=$(cd "$dir" && ctest -N -L leak_checked | awk '/Test +#/ {print $3}')
python3 "$here/repeat_select.py" sanitizer "$dir/coverage/lines" "$asan_costs" '^(src|cli)/' \
  $leak_checked fuzz_smoke fuzz_regressions
# The MPICH pass: the code that talks to MPI or its launchers; and the tests whose point is
# what the MPI itself does (exact sums whatever its reduction order, its faults).
python3 "$here/repeat_select.py" mpich "$dir/coverage/lines" "$mpich_costs" \
  '^(src/dist/|src/tools/(run_|doctor|shm_probe|bench_allreduce)|cli/(run|bench_allreduce)|src/core/build_info)' \
  cli_deterministic mpi_faults
[ $processes = 1 ] || exit 0
# The sanitizer pass's costly tests, command by command (the tests this run left out stay out).
left_out=$(python3 "$here/repeat_select.py" sanitizer "$dir/coverage/lines" "$asan_costs" '^(src|cli)/' \
  $leak_checked fuzz_smoke fuzz_regressions | awk '/^sanitizer / {print $2}')
python3 "$here/repeat_processes.py" "$dir/coverage/lines" "$dir/coverage/raw" "$dir/coverage/argv.log" \
  "$asan_costs" '^(src|cli)/' 10 "$profdata" "$llvmcov" "$src" "${object_files[@]}" -- $left_out
