#!/usr/bin/env bash
# One write per message line: every write(2) herd makes to stdout or stderr ends at a
# line's end, so that mpirun (which merges every rank's output) or a 2>&1 cannot put
# another line inside one (a run's log once read "herd: peak memory 31.4
# MiB:model=lenet5 ...": the stdout summary inside a stderr line printed in two calls).
# Seen with strace: training (progress, peak memory, summary), a usage error, herd
# run's launch line, and with MPI herd run's supervisor and 2 ranks' peaks.
set -u
. "$(dirname "$0")/testlib.sh"
command -v strace >/dev/null || skip_all "no strace"
strace -f -qq -o /dev/null true 2>/dev/null || skip_all "strace cannot trace here (no ptrace)"
data="synthetic:1,12,12,4,256"

# traced NAME CMD...: CMD under strace, following its children and threads; NAME.trace
# holds the writes, each with its process's name; NAME.out and NAME.err what CMD printed.
# LeakSanitizer cannot run under ptrace: off here (the other tests look for leaks).
traced() {
  local name=$1; shift
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -f -qq -Y -s 1000000 -e trace=write -e signal=none -o "$tmp/$name.trace" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
}
# whole_lines NAME: every write to fd 1 or 2 by a herd process or thread (named as the
# binary: not mpirun, not timeout) ends with a newline; prints the pieces that do not.
whole_lines() {
  python3 - "$tmp/$1.trace" "$(basename "$herd" | cut -c1-15)" <<'PY'
import re, sys
trace, comm = sys.argv[1], sys.argv[2]
bad, writes = [], 0
for line in open(trace, errors="replace"):
    w = re.match(r'\d+<(.*?)>\s+write\(([12]), "((?:[^"\\]|\\.)*)"(\.\.\.)?,', line)
    if not w or w.group(1) != comm:
        continue
    writes += 1
    if w.group(4) or not w.group(3).endswith("\\n"):
        bad.append(w.group(3))
for b in bad:
    print("  a write that ends mid-line: \"%s\"" % b)
print("  %d write(s) to stdout/stderr by herd, %d ending mid-line" % (writes, len(bad)))
sys.exit(1 if bad or writes == 0 else 0)
PY
}

traced train "$herd" train --model mlp --data "$data" --epochs 2 --batch-size 32 --threads 1 \
  --memory-limit 1G
check "train exits 0 and prints its peak memory" \
  bash -c "test $? -eq 0 && grep -q '^herd: peak memory .* MiB: parameters' '$tmp/train.err'"
check "train: progress, peak memory and summary in whole lines" whole_lines train

traced usage "$herd" train --model mlp --epochs zero
check "a usage error exits 2" test $? -eq 2
check "a usage error in whole lines" whole_lines usage

traced dry "$herd" run --dry-run -np 2 -- train --model mlp --data "$data" --epochs 1
check "herd run --dry-run exits 0 and names the command" \
  bash -c "test $? -eq 0 && grep -q '^herd: launching: .* train --model mlp' '$tmp/dry.err'"
check "herd run's launch line in whole lines" whole_lines dry

if have_mpi; then
  traced mpi timeout 300 "$herd" run -np 2 --max-restarts 1 -- train --model mlp --data "$data" \
    --epochs 1 --batch-size 32 --memory-limit 1G --checkpoint-dir "$tmp/ck"
  check "2 ranks under herd run --max-restarts exit 0 and print each rank's peak" \
    bash -c "test $? -eq 0 && grep -q '^herd: peak memory per rank (MiB): 0: ' '$tmp/mpi.err'"
  check "herd run, its supervisor and 2 ranks in whole lines" whole_lines mpi
else
  skipped_part "herd run -np 2 (no MPI launcher)"
fi
finish
