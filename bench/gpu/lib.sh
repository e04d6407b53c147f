# Sourced by bench/gpu's scripts (after `set -u`): a temporary folder $tmp removed on
# exit, `check NAME COMMAND...` printing ok/FAIL and counting both, `summary NAME`
# ("NAME: N passed, N failed"; non-zero after a failure), `maxdiff A B` (the largest
# |a - b| / max(1, |b|) over two weight files, as tests/testlib.sh measures it), `within D T`,
# `field NAME FILE` (the last NAME=value of a summary line) and `bench_pair VAR ARGS...`
# (herd bench train at fp32 and tf32 with VAR=0 and VAR=1, one line each).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 fails=0
check() {
  local name=$1 t0=$SECONDS; shift
  if "$@"; then echo "ok: $name ($((SECONDS - t0)) s)"; passed=$((passed + 1))
  else echo "FAIL: $name ($((SECONDS - t0)) s)"; fails=$((fails + 1)); fi
}
summary() { echo "$1: $passed passed, $fails failed"; [ "$fails" -eq 0 ]; }
# python3 keeps its own libraries: not the bundle's LD_LIBRARY_PATH.
maxdiff() { env -u LD_LIBRARY_PATH python3 "$here/bench/gpu/compare.py" --maxdiff "$1" "$2"; }
within() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d <= t) }'; }
field() { sed -n "s/.*\<$1=\([^ ]*\).*/\1/p" "$2" | tail -n 1; }
bench_pair() { # bench_pair VAR HERD BENCH-ARGS...
  local var=$1 herd=$2 v p; shift 2
  for v in 0 1; do
    for p in fp32 tf32; do
      echo "$* --precision $p, $var=$v: $(env "$var=$v" "$herd" bench train "$@" --precision $p 2>&1 | tail -n1)"
    done
  done
}
