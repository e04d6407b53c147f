#!/usr/bin/env bash
# Time to accuracy, side by side in one run, the same recipe on the same cores:
# `make run`'s data-parallel lenet5 (herd run -np RANKS -- train $(make print-run-flags))
# against PyTorch DDP with RANKS processes and exactly that recipe (lr scaled to the
# global batch, warmup, cosine, Nesterov, weight decay on weights only, batch per rank;
# bench/torch_reference.py --time-to-acc --ddp). Both evaluate the test split after every
# epoch, evaluation included in the wall time. Prints the epoch and time at which each
# first reaches the target, and the final accuracy and time after all epochs.
#
#   bench/time_to_accuracy.sh [--target 0.89] [--ranks N] [--precision fp32|bf16]
#
# --precision bf16: both in bf16 (herd --precision bf16; PyTorch CPU autocast bf16).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
target=0.89
ranks=$(nproc)
precision=fp32
while [ $# -gt 0 ]; do
  case $1 in
    --target) target=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "time_to_accuracy.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "time_to_accuracy.sh: $herd not found: make build" >&2; exit 1; }
bench_reference_setup
bench_gemm_limits
flags="$(make -s -C "$root" --no-print-directory print-run-flags) --precision $precision"
echo "recipe: $flags; $ranks ranks x 1 thread"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# shellcheck disable=SC2086
summary=$("$herd" run -np "$ranks" -- train $flags --log-every 1000000000 2>"$log")
grep -E '^epoch [0-9]+/[0-9]+ .*test_acc' "$log" | sed 's/^/herd: /'
echo "herd: $summary"
# The first epoch line whose test accuracy reaches the target.
herd_line=$(awk -v t="$target" '/^epoch [0-9]+\/[0-9]+  .*test_acc/ {
    for (i = 1; i <= NF; i++) if ($i == "test_acc") { a = $(i + 1); sub("%", "", a) }
    if (a / 100 >= t) { print; exit } }' "$log")
herd_s=$(sed -n 's/.*elapsed \([0-9.]*\)s$/\1/p' <<<"$herd_line")
herd_epoch=$(sed -n 's/^epoch \([0-9]*\)\/.*/\1/p' <<<"$herd_line")

# shellcheck disable=SC2086
torch_line=$(OMP_NUM_THREADS=1 "$python" "$root/bench/torch_reference.py" --time-to-acc --ddp "$ranks" \
             --threads 1 --target "$target" $flags 2>"$log" | tail -n 1)
sed 's/^/torch: /' "$log"
echo "torch: $torch_line"
torch_s=$(kv wall_s "$torch_line")
torch_epoch=$(kv epochs "$torch_line")
[ "$(kv reached "$torch_line")" = true ] || torch_s=

echo
echo "target test accuracy $target"
echo "herd  (make run, $ranks ranks x 1 thread): ${herd_s:-not reached}s at epoch ${herd_epoch:--};" \
     "final test_acc $(kv test_acc "$summary") after $(kv wall_s "$summary") s"
echo "torch (DDP, $ranks processes x 1 thread):  ${torch_s:-not reached}s at epoch ${torch_epoch:--};" \
     "final test_acc $(kv final_test_acc "$torch_line") after $(kv final_wall_s "$torch_line") s"
if [ -n "$herd_s" ] && [ -n "$torch_s" ]; then
  awk -v h="$herd_s" -v t="$torch_s" 'BEGIN { printf "herd reaches the target %.2fx sooner\n", t / h }'
fi
