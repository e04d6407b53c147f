#!/usr/bin/env bash
# --recompute on the GPU (docs/memory.md): resnet20 (cuDNN convolutions, batch norm) and
# gpt-nano (attention's stash in the pool) trained with and without the flag on --device
# $dev: byte for byte the same weights (cuDNN's deterministic algorithms, herd's default),
# and less peak memory; gpt-nano with --loss-chunk within 1e-5 of the whole batch. Prints
# ok/FAIL per check and "recompute: N passed, N failed".
#   here:  bench/gpu/pack.sh        there: bench/gpu/recompute.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp}}
dev=${DEV:-cuda} # DEV=sim checks the script itself on a machine without a GPU
mkdir -p "$out"
exec > >(tee "$out/gpu-recompute.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
. bench/gpu/lib.sh
herd() { LD_LIBRARY_PATH=$HL timeout 300 .dev/herd "$@"; }
peak() { grep -o "peak memory [0-9.]*" "$1" | grep -o "[0-9.]*$"; }
pair() { # pair NAME FLAGS...: with and without --recompute, the same bytes and less memory
  local name=$1; shift
  herd train "$@" --device "$dev" --save "$tmp/$name.held" >"$tmp/$name.held.out" 2>&1 &&
    herd train "$@" --device "$dev" --recompute --save "$tmp/$name.rc" >"$tmp/$name.rc.out" 2>&1 ||
    { tail -n 3 "$tmp/$name.held.out" "$tmp/$name.rc.out"; return 1; }
  echo "$name: peak memory $(peak "$tmp/$name.held.out") -> $(peak "$tmp/$name.rc.out") MiB"
  cmp "$tmp/$name.held" "$tmp/$name.rc" &&
    awk -v a="$(peak "$tmp/$name.held.out")" -v b="$(peak "$tmp/$name.rc.out")" 'BEGIN { exit !(b < a) }'
}
check "resnet20 on $dev, batch 128: the same bytes, less memory" pair rn --model resnet20 \
  --data synthetic:3,32,32,10,2560 --batch-size 128 --epochs 1 --eval-every 0 --test-samples 128
text=/usr/share/common-licenses
if [ -d "$text" ]; then cat "$text"/*; else for i in $(seq 2000); do echo "line $i of a text to learn"; done; fi |
  head -c 200000 | python3 scripts/tokenize_bytes.py - "$tmp/t_train.bin" "$tmp/t_val.bin" >/dev/null
check "gpt-nano on $dev, 32 x 64 tokens: the same bytes, less memory" pair gpt --model gpt-nano \
  --data "tokens:$tmp/t_train.bin,256" --seq-len 64 --batch-size 32 --max-steps 30 --epochs 1 \
  --eval-every 0 --test-samples 32
# --loss-chunk: the head and the loss in chunks of 5 of 32 sequences (device memory cut by
# samples, each chunk's loss gradient weighted), within 1e-5 of the whole batch's weights.
chunks() {
  herd train "$@" --device "$dev" --loss-chunk 5 --save "$tmp/gpt.lc" >"$tmp/gpt.lc.out" 2>&1 ||
    { tail -n 3 "$tmp/gpt.lc.out"; return 1; }
  local d
  d=$(maxdiff "$tmp/gpt.lc" "$tmp/gpt.held")
  echo "gpt-nano --loss-chunk 5: peak memory $(peak "$tmp/gpt.lc.out") MiB, $d from the whole batch's"
  within "$d" 1e-5
}
check "gpt-nano on $dev in loss chunks of 5: within 1e-5 of the whole batch" chunks --model gpt-nano \
  --data "tokens:$tmp/t_train.bin,256" --seq-len 64 --batch-size 32 --max-steps 30 --epochs 1 \
  --eval-every 0 --test-samples 32
summary recompute
