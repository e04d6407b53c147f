# Sourced by every tests/cli_*.sh script: the herd binary from $1, a temporary
# directory removed on exit, `check NAME COMMAND...` counting failures, JSON helpers,
# the skips, and `finish`, which reports and exits non-zero when any check failed.
# A script that cannot test its point here calls `skip_all WHY` (exit 77, ctest's
# SKIP_RETURN_CODE); one that can test only part calls `skipped_part WHAT` for the rest,
# and finish names it.
herd="$1"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# python3 is Debian's (with numpy and torch, as CMake chooses), not whatever comes first
# on PATH: a pyenv shim there runs a shell script and pyenv on every call, 0.6 CPU-s
# against 0.06, and the scripts call python3 hundreds of times.
if [ -x /usr/bin/python3 ]; then
  mkdir "$tmp/.python" && ln -s /usr/bin/python3 "$tmp/.python/python3" && PATH="$tmp/.python:$PATH"
fi
fails=0
skips=()
check() { # check NAME COMMAND...: the check passes when COMMAND succeeds
  local name=$1; shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
json_ok() { python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }
skip_all() { # skip_all WHY: nothing this script is for can run here
  echo "SKIPPED: $(basename "$0" .sh): $1"
  exit 77
}
skipped_part() { # skipped_part WHAT: a part not run here, named again by finish
  echo "skipped: $1"
  skips+=("$1")
}
# The launcher of herd's own MPI and its flags for more ranks than cores, as CMake found
# them (HERD_MPIEXEC, HERD_MPIEXEC_PREFLAGS in ctest's environment), never the mpirun
# first on PATH, which may be another MPI's: "${mpiexec[@]}" -np 2 "$herd" ... Variables
# for the ranks go in the launcher's environment (local ranks inherit it, under Open
# MPI and Hydra alike).
# herd run starts srun inside a Slurm allocation: a suite run inside one keeps the
# launchers the tests name (cluster_slurm makes allocations of its own).
unset SLURM_JOB_ID SLURM_JOBID
mpiexec=()
if [ -n "${HERD_MPIEXEC:-}" ]; then
  read -r -a mpiexec <<<"${HERD_MPIEXEC_PREFLAGS:-}"
  mpiexec=("$HERD_MPIEXEC" "${mpiexec[@]}")
fi
# A repeat pass: make test's sanitizer and MPICH passes run the scripts again, for memory
# errors and for the other MPI, not for more configurations of one code path. There a
# script keeps one of each path (`repeat_pass && nps=(2)`); the first pass runs them all.
repeat_pass() { [ "${HERD_SANITIZED:-0}" = 1 ] || [ "${HERD_TEST_REPEAT:-0}" = 1 ]; }
# The sanitizer pass alone: a script leaves out there the parts whose lines of herd's code
# the pass's other tests reach (clang's coverage of each process: tests/repeat_passes.txt).
sanitizer_pass() { [ "${HERD_SANITIZED:-0}" = 1 ]; }
# seed_random: seeds $RANDOM from HERD_TEST_SEED, or a fresh seed, and prints it so a
# failing run can be repeated.
seed_random() {
  seed=${HERD_TEST_SEED:-$RANDOM}
  RANDOM=$seed
  echo "random seed $seed (HERD_TEST_SEED=$seed repeats it)"
}
# Whether herd can launch MPI jobs here: herd built with MPI, and its launcher installed.
# ctest sets HERD_MPIEXEC only in a build with MPI (tests/CMakeLists.txt), so the
# environment answers; asking herd --version would load cuBLAS to name its version, 0.4 s
# of CPU in each of some fifty scripts.
have_mpi() { [ -n "${HERD_MPIEXEC:-}" ] && [ -x "$HERD_MPIEXEC" ]; }
# Whether the NVIDIA driver lists a GPU the CUDA runtime should see (when
# CUDA_VISIBLE_DEVICES is set, the user chose what is visible).
gpu_present() {
  [ -z "${CUDA_VISIBLE_DEVICES+set}" ] && [ -n "$(ls -A /proc/driver/nvidia/gpus 2>/dev/null)" ]
}
# no_gpu_refusal RC STDERR: a GPU command failed with exit 1 and herd's exact refusal
# for a build without CUDA or NCCL, or for no visible GPU on a machine that has none.
# Any other failure (a GPU present, a crash, another message) is not a refusal.
no_gpu_refusal() {
  [ "$1" -eq 1 ] || return 1
  grep -qE '^herd: error: .*herd was built without (CUDA|NCCL);' "$2" && return 0
  grep -qE '^herd: error: .*cuda backend: no CUDA device is visible \(' "$2" && ! gpu_present
}
# Jobs under herd run --max-restarts with --checkpoint-dir DIR: ranks_of DIR lists the
# training ranks' pids (not herd run itself); progress DIR ATTEMPT prints the step attempt
# ATTEMPT last recorded in DIR/progress (empty before its first step).
ranks_of() {
  local p
  for p in $(pgrep -f -- "--checkpoint-dir $1"); do
    tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -q -- ' run ' && continue
    [ "$(cat 2>/dev/null "/proc/$p/comm")" = herd ] && echo "$p"
  done
}
# kill_rank SIGNAL DIR SUP: sends SIGNAL to one of the job's ranks at random while its
# supervisor SUP (herd run's pid) runs, asking again for up to 10 s when none is found or
# the one picked is gone (a relaunch, or a rank on its way out, leaves such moments); false,
# naming the job's processes, if no signal landed.
kill_rank() {
  local t pids
  for t in $(seq 1 200); do
    mapfile -t pids < <(ranks_of "$2")
    [ ${#pids[@]} -gt 0 ] && kill "-$1" "${pids[$((RANDOM % ${#pids[@]}))]}" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.05
  done
  echo "kill_rank: no rank of the job in $2 took SIGNAL $1; its processes:" >&2
  ps -eo pid,stat,etime,args | grep -F -- "$2" | grep -v grep >&2
  return 1
}
progress() {
  sed -n "s/^herd-progress step=\([0-9]*\) time=[0-9.]* restarts=$(($2 - 1)) .*/\1/p" "$1/progress" 2>/dev/null
}
# The Python that reads two safetensors files' float32 tensors (argv 1 and 2) into a, b and
# their metadata into ma, mb: maxdiff's and tensors_differ's.
safetensors_pair_py='
import json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__" and v.get("dtype") == "F32"}, head.get("__metadata__")
(a, ma), (b, mb) = load(sys.argv[1]), load(sys.argv[2])
'
# maxdiff A B: the largest |a - b| / max(1, |b|) over two safetensors files' tensors.
maxdiff() {
  python3 -c "$safetensors_pair_py"'
assert a.keys() == b.keys()
print("%.3g" % max(abs(x - y) / max(1.0, abs(y)) for k in a for x, y in zip(a[k], b[k])))' "$1" "$2"
}
# same_bytes WHAT A B [NOTE]: the check that files A and B hold the same bytes; when they do
# not, its name says which tensors of the two safetensors files differ and by how much,
# and NOTE, so that a rare failure can be read from the log alone.
same_bytes() {
  if cmp -s "$2" "$3"; then
    check "$1" true
  else
    check "$1 (differ: $(tensors_differ "$2" "$3")${4:+; $4})" false
  fi
}
# tensors_differ A B: the tensors of two safetensors files whose values differ, each with its
# largest difference and how many values differ (at most 5 named), or what else differs.
tensors_differ() {
  python3 -c "$safetensors_pair_py"'
if a.keys() != b.keys():
    print("other tensors: %s" % sorted(set(a) ^ set(b)))
else:
    bad = [(k, max(abs(x - y) for x, y in zip(a[k], b[k])), sum(x != y for x, y in zip(a[k], b[k])))
           for k in sorted(a) if a[k] != b[k]]
    print("; ".join("%s: %.3g, %d values" % t for t in bad[:5]) if bad else
          "the same tensors, other metadata: %s against %s" % (ma, mb))' "$1" "$2" 2>&1 | tail -n 1
}
# key NAME FILE: the value of NAME=... in FILE (a summary line's figure).
key() { grep -o "$1=[0-9.]*" "$2" | cut -d= -f2; }
# bf16_as_one WHAT ONE OTHER: the last loss in OTHER's summary (a bf16 run split some way)
# within 1e-3 of ONE's (one process, bf16); skipped, named, on a CPU without bf16.
bf16_as_one() {
  local l1 l2
  l1=$(key train_loss "$2")
  l2=$(key train_loss "$3")
  if grep -q "bf16.*not\|AVX512_BF16" "$2"; then
    skipped_part "bf16 (this CPU has no bf16 arithmetic)"
  else
    check "bf16 $1 trains as one process ($l2, $l1)" \
      awk -v a="$l2" -v b="$l1" 'BEGIN { exit !(b > 0 && (a - b) ^ 2 < 1e-6 * b * b) }'
  fi
}
# within D T: D <= T (numbers as maxdiff prints them).
# token_corpus: 40,000 bytes of Debian's license texts (base-files), tokenised byte-level
# into $tmp/t_train.bin and $tmp/t_val.bin; the whole script is skipped without them.
token_corpus() {
  local corpus=/usr/share/common-licenses
  [ -d "$corpus" ] || skip_all "$corpus (Debian's base-files) is not here"
  cat "$corpus"/* | head -c 40000 >"$tmp/text"
  python3 "$here/../scripts/tokenize_bytes.py" "$tmp/text" "$tmp/t_train.bin" "$tmp/t_val.bin" >/dev/null
}
# step_losses A B N: the largest relative difference of two --metrics files' step losses,
# each file holding N steps.
step_losses() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def steps(p):
    return [json.loads(l)["train_loss"] for l in open(p) if '"kind":"step"' in l]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert len(a) == len(b) == int(sys.argv[3]), (len(a), len(b))
print("%.3g" % max(abs(x - y) / abs(y) for x, y in zip(a, b)))
PY
}
# within D T: D is a number no larger than T (an empty or non-numeric D, from a helper that
# failed, is not within anything).
within() { [[ $1 =~ ^[0-9.eE+-]+$ ]] && awk -v d="$1" -v t="$2" 'BEGIN { exit !(d <= t) }'; }
finish() {
  local name part
  name=$(basename "$0" .sh)
  for part in "${skips[@]}"; do echo "$name: skipped part: $part"; done
  if [ "$fails" -eq 0 ]; then
    echo "$name: all checks passed${skips[*]:+ (${#skips[@]} part(s) skipped, named above)}"
  else
    echo "$name: $fails check(s) failed"
  fi
  exit $((fails > 0))
}
