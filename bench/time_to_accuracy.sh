#!/usr/bin/env bash
# Time to accuracy, side by side in one run: `make run`'s data-parallel lenet5
# (herd run -np RANKS) against PyTorch 1.13 in one process, both until the test
# accuracy first reaches the target (evaluated after every epoch, evaluation
# included in the wall time).
#
#   bench/time_to_accuracy.sh [--target 0.89] [--ranks N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
python=${PYTHON:-/usr/bin/python3}
target=0.89
ranks=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --target) target=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    *) echo "time_to_accuracy.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
flags=$(make -s -C "$root" --no-print-directory print-run-flags)

# herd: the first epoch line whose test accuracy reaches the target.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# shellcheck disable=SC2086
"$herd" run -np "$ranks" -- train $flags --log-every 1000000000 2>"$log" >/dev/null
herd_line=$(awk -v t="$target" '/^epoch [0-9]+\/[0-9]+  .*test_acc/ {
    for (i = 1; i <= NF; i++) if ($i == "test_acc") { a = $(i + 1); sub("%", "", a) }
    if (a / 100 >= t) { print; exit } }' "$log")
herd_s=$(sed -n 's/.*elapsed \([0-9.]*\)s$/\1/p' <<<"$herd_line")
herd_epoch=$(sed -n 's/^epoch \([0-9]*\)\/.*/\1/p' <<<"$herd_line")

torch_line=$("$python" "$root/bench/torch_reference.py" --time-to-acc --models lenet5 --threads 1 \
             --target "$target" 2>/dev/null | tail -n 1)
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
torch_s=$(kv wall_s "$torch_line")
torch_epoch=$(kv epochs "$torch_line")

echo "target test accuracy $target"
echo "herd  (make run: $ranks ranks x 1 thread): ${herd_s:-not reached}s at epoch ${herd_epoch:--}"
echo "torch (1 process, 1 thread):               ${torch_s:-?}s at epoch ${torch_epoch:--} ($(kv reached "$torch_line"))"
if [ -n "$herd_s" ] && [ -n "$torch_s" ]; then
  awk -v h="$herd_s" -v t="$torch_s" 'BEGIN { printf "herd is %.2fx faster to the target\n", t / h }'
fi
