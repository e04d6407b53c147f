#!/usr/bin/env bash
# What --recompute (or other memory flags) costs and saves (docs/memory.md), side by side
# in one run: for each model, herd's peak memory (its own accounting: `herd train`'s "peak
# memory" line, the activations part, and the process's peak resident set from
# /usr/bin/time) and the training speed (`herd bench train`'s step time, forward and
# backward), for each set of flags in --variants ('|' between sets; default: none, then
# --recompute), alternating REPS times. The same binary; THREADS threads, one process.
#
#   bench/recompute.sh [--models gpt-nano,resnet20,resnet50,gpt2] [--reps 2] [--threads 2]
#                      [--variants '|--recompute|--recompute --loss-chunk 1']
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
models=gpt-nano,resnet20,resnet50,gpt2
reps=2
threads=2
variants='|--recompute'
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "recompute.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "recompute.sh: $herd not found: make build" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh" # kv, python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat /usr/share/common-licenses/* | "$python" "$root/scripts/tokenize_bytes.py" - \
  "$tmp/lic_train.bin" "$tmp/lic_val.bin" >/dev/null
echo "# $(date -u +%F' '%H:%M' UTC'), $(git -C "$root" rev-parse --short HEAD), $(nproc) cores, threads $threads"
"$herd" --version | tail -n 1

# model -> data, batch, train steps (memory), bench steps, warmup, sequence (0: images)
shape() {
  case $1 in
    gpt-nano) echo "tokens:$tmp/lic_train.bin,256" 16 4 60 5 64 ;;
    gpt2) echo "tokens:$tmp/lic_train.bin,50257" 4 1 2 1 1024 ;;
    resnet20) echo "synthetic:3,32,32,10,2560" 128 4 20 3 0 ;;
    resnet50) echo "synthetic:3,224,224,1000,64" 32 1 3 1 0 ;;
    *) echo "recompute.sh: no shape for $1" >&2; exit 2 ;;
  esac
}

IFS=, read -r -a list <<<"$models"
IFS='|' read -r -a flag_sets <<<"$variants"
[[ $variants == *'|' ]] && flag_sets+=("") # a trailing empty set
for m in "${list[@]}"; do
  read -r data batch train_steps steps warmup seq <<<"$(shape "$m")"
  seq_args=(); [ "$seq" = 0 ] || seq_args=(--seq-len "$seq")
  for ((r = 1; r <= reps; r++)); do
    for flag in "${flag_sets[@]}"; do
      read -r -a flags <<<"$flag"
      out=$(OMP_NUM_THREADS=$threads /usr/bin/time -f "maxrss_kib=%M" "$herd" train --model "$m" \
              --data "$data" "${seq_args[@]}" --batch-size "$batch" --max-steps "$train_steps" --epochs 1 \
              --eval-every 0 --test-samples "$batch" --threads "$threads" "${flags[@]}" 2>&1)
      peak=$(grep -o "peak memory [0-9.]* MiB" <<<"$out" | grep -o "[0-9.]*")
      acts=$(grep -o "activations [0-9][0-9.]*" <<<"$out" | grep -o "[0-9.]*$")
      rss=$(kv maxrss_kib "$out")
      line=$(OMP_NUM_THREADS=$threads "$herd" bench train --model "$m" --data "$data" "${seq_args[@]}" \
               --batch-size "$batch" --steps "$steps" --warmup "$warmup" --threads "$threads" \
               "${flags[@]}" 2>/dev/null | tail -n 1)
      printf '%-9s round %d %-28s peak %8s MiB (activations %8s)  maxrss %6.0f MiB  step_ms %9s  forward_ms %9s  backward_ms %9s\n' \
        "$m" "$r" "${flag:-held}" "$peak" "$acts" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" \
        "$(kv step_ms "$line")" "$(kv forward_ms "$line")" "$(kv backward_ms "$line")"
    done
  done
done
