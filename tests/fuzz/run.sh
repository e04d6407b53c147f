#!/usr/bin/env bash
# Runs every fuzz target of a build for SECONDS each, one after another, and prints per
# target its executions, coverage (libFuzzer's cov: edges and ft: features at the end)
# and result, then "N passed, N failed". A target fails on any crash, leak, sanitizer
# report, timeout (-timeout) or memory limit (-rss_limit_mb, -malloc_limit_mb): each
# makes libFuzzer exit non-zero and leaves the input in BUILD/fuzz/artifacts/TARGET/.
# Usage: run.sh BUILD_DIR SECONDS [libFuzzer flags...]; FUZZ_TARGETS="idx cifar" picks
# targets. The corpus grows in BUILD/fuzz/corpus/TARGET (seeded from make_seeds.py's
# files and tests/fuzz/regressions/TARGET).
set -u
build=${1:?usage: run.sh BUILD_DIR SECONDS [libFuzzer flags...]}
secs=${2:?usage: run.sh BUILD_DIR SECONDS [libFuzzer flags...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$build" && pwd)
targets=${FUZZ_TARGETS:-$(cat "$here/targets")}
work=$build/fuzz
mkdir -p "$work/logs" "$work/seeds"
if [ ! -x "$build/fuzz_idx" ]; then
  echo "run.sh: no fuzz targets in $build: configure it with clang, HERD_SANITIZE=ON (make fuzz does)" >&2
  exit 2
fi
python3 "$here/make_seeds.py" "$work/seeds" "$build/fuzz_checkpoint" || exit 2

dict_of() {
  case $1 in
    modelfile|predict) echo "-dict=$here/json.dict" ;;
    safetensors|checkpoint) echo "-dict=$here/safetensors.dict" ;;
  esac
}

pass=0 fail=0
printf '%-12s %12s %8s %8s %8s  %s\n' target executions cov ft exec/s result
for t in $targets; do
  corpus=$work/corpus/$t art=$work/artifacts/$t/ log=$work/logs/$t.log
  mkdir -p "$corpus" "$art"
  regs=()
  [ -d "$here/regressions/$t" ] && regs=("$here/regressions/$t")
  # shellcheck disable=SC2046
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$build/fuzz_$t" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$art" $(dict_of "$t") "$@" "$corpus" "$work/seeds/$t" "${regs[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [ $rc -eq 0 ] && ! grep -q -E '^(==[0-9]+==ERROR|SUMMARY: |.*runtime error:|fuzz invariant broken)' "$log"; then
    result=ok; pass=$((pass + 1))
  else
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR|runtime error|invariant broken|SUMMARY' "$log" | cut -c1-160); log $log"
    fail=$((fail + 1))
  fi
  printf '%-12s %12s %8s %8s %8s  %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${rate:-?}" "$result"
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
