#!/usr/bin/env bash
# resnet50 at 3x224x224, batch 32, one training step on 2 threads: herd's own count
# (memory_peak_mib and its breakdown) and the process's peak RSS, for each herd binary
# given (e.g. an older build beside the current one), fp32 and bf16; then PyTorch 1.13
# doing the same step (SGD with momentum; autocast for bf16) under the same measure.
#
#   bench/memory_resnet50.sh [HERD...]      (default: build/herd)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
[ $# -gt 0 ] || set -- "$root/build/herd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u '+%F %T UTC'), 2 threads"
for herd in "$@"; do # bench_rss runs $herd
  echo "## $herd: $("$herd" --version | head -n 1)"
  for p in fp32 bf16; do
    bench_rss train --model resnet50 --data synthetic:3,224,224,1000,64 --batch-size 32 --max-steps 1 \
      --threads 2 --eval-every 0 --precision "$p"
  done
done
bench_reference_setup || exit 1
echo "## PyTorch $("$python" -c 'import torch; print(torch.__version__)')"
for p in fp32 bf16; do
  echo "\$ torch_reference.py --models resnet50 --shape 3,224,224,1000 --batch-size 32 --steps 1 --warmup 1 --threads 2 --precision $p"
  OMP_NUM_THREADS=2 /usr/bin/time -o "$tmp/rss" -f "%M" "$python" "$root/bench/torch_reference.py" --models resnet50 \
    --shape 3,224,224,1000 --batch-size 32 --steps 1 --warmup 1 --threads 2 --precision "$p" >"$tmp/out" 2>"$tmp/err"
  echo "exit=$?"
  tail -n 1 "$tmp/out"
  awk '/^[0-9]+$/ { printf "peak_rss_mib=%.1f\n", $1 / 1024 }' "$tmp/rss"
done
