#!/usr/bin/env bash
# Layer by layer, two variants of one training run side by side (by default fp32 against
# bf16): `herd train ARGS --timeline` for A and B, interleaved ROUNDS times, and
# bench/layer_times.py's medians of each layer's forward and backward, the step and its
# phases, with A over B. Where bf16 pays and where it does not, per layer (issues 28, 31).
#
#   bench/layer_times.sh [herd train options]      (give --max-steps; --threads, --quiet ...)
#   A="--precision fp32" B="--precision bf16" ROUNDS=3 bench/layer_times.sh ...
#
# Example (gpt-nano, 1 thread):
#   bench/layer_times.sh --model gpt-nano --data tokens:FILE,256 --seq-len 64 \
#     --batch-size 16 --max-steps 300 --epochs 1 --threads 1 --eval-every 0
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
python=${PYTHON:-/usr/bin/python3}
a=${A:---precision fp32} b=${B:---precision bf16} rounds=${ROUNDS:-3}
[ $# -gt 0 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ -x "$herd" ] || { echo "layer_times.sh: $herd not found: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
label() { sed 's/--precision //; s/[^A-Za-z0-9._=-]/_/g' <<<"$1"; }
la=$(label "$a") lb=$(label "$b")
[ "$la" != "$lb" ] || lb="$lb.b"
echo "# herd $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
for ((r = 1; r <= rounds; r++)); do
  for v in a b; do
    flags=${!v} lab=la
    [ $v = b ] && lab=lb
    read -r -a extra <<<"$flags"
    echo "\$ herd train $* $flags --timeline ... (round $r)"
    "$herd" train "$@" "${extra[@]}" --timeline "$tmp/${!lab}.$r.json" 2>&1 | grep -E '^model=' |
      tr ' ' '\n' | grep -E '^(steps|tokens_per_s|samples_per_s|wall_s)=' | paste -sd' '
  done
done
"$python" "$root/bench/layer_times.py" "$la" "$lb" "$tmp"
