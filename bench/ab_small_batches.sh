#!/usr/bin/env bash
# Two herd binaries side by side on small-batch runs (one thread), where per-call overheads
# show: resnet20 --deterministic --sync-bn in slices of 4, resnet20, lenet5 (plain and
# --deterministic), mlp and gpt-nano. Interleaved, REPS rounds; each run's CPU-s (user +
# system) and, per case, the mean of each binary and new/old. For a change measured against
# the commit before it (bench/ab_lenet5.sh says how to build one):
#   bash bench/ab_small_batches.sh /tmp/old/build/herd build/herd
set -u
old=$1 new=$2 REPS=${REPS:-3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat /usr/share/common-licenses/* | head -c 40000 >"$tmp/text"
/usr/bin/python3 "$here/../scripts/tokenize_bytes.py" "$tmp/text" "$tmp/lic_train.bin" "$tmp/lic_val.bin" >/dev/null
echo "# $(date -u); $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# old: $old ($($old --version | head -1 | cut -c1-60)); new: $new"
common="--epochs 1 --seed 5 --lr 0.05 --momentum 0.9 --threads 1 --quiet"
cases=(
  "resnet20-det-syncbn|--model resnet20 --data synthetic:3,8,8,10,4800 --test-samples 32 --batch-size 16 --grad-accum 3 --deterministic --slice-size 4 --sync-bn $common"
  "resnet20-b16|--model resnet20 --data synthetic:3,8,8,10,4800 --test-samples 32 --batch-size 16 $common"
  "lenet5-b8|--model lenet5 --data synthetic:1,28,28,10,9600 --test-samples 480 --batch-size 8 $common"
  "lenet5-det|--model lenet5 --data synthetic:1,28,28,10,9600 --test-samples 480 --batch-size 8 --grad-accum 12 --deterministic $common"
  "mlp-b8|--model mlp --data synthetic:1,28,28,10,9600 --test-samples 480 --batch-size 8 $common"
  "gpt-nano|--model gpt-nano --data tokens:$tmp/lic_train.bin,256 --seq-len 32 --optimizer adamw --lr 0.003 --threads 1 --test-samples 32 --quiet --epochs 1 --batch-size 8 --max-steps 200 --seed 5"
)
for c in "${cases[@]}"; do
  name=${c%%|*} args=${c#*|}
  for ((r = 0; r < REPS; r++)); do
    for side in old new; do
      bin=$old; [ $side = new ] && bin=$new
      # shellcheck disable=SC2086
      /usr/bin/time -f "%U %S" -o "$tmp/t" "$bin" train $args >/dev/null 2>&1 || echo "# $name $side: exit $?"
      echo "$name $side $(awk '{printf "%.2f", $1 + $2}' "$tmp/t")"
    done
  done
done | tee "$tmp/runs"
awk '{s[$1 " " $2] += $3; n[$1 " " $2]++; names[$1] = 1}
     END { for (c in names) printf "%s: old %.2f CPU-s, new %.2f, new/old %.2f\n", c,
           s[c " old"] / n[c " old"], s[c " new"] / n[c " new"], s[c " new"] / s[c " old"] }' "$tmp/runs" | sort
