#!/usr/bin/env bash
# gpt2 training speed against llm.c's CPU trainer (train_gpt2.c), side by side with herd
# in one run, 1 thread, fp32 (issue 28). llm.c is not part of herd: give a checkout of
# https://github.com/karpathy/llm.c as LLMC_DIR. Its own main() trains at a fixed batch 4
# x 64 tokens and needs OpenAI's weights, so this builds a small driver of our own that
# includes train_gpt2.c (with TESTING defined, which leaves its main out) and times
# gpt2_forward + gpt2_zero_grad + gpt2_backward + gpt2_update (AdamW) at the shape asked,
# on a checkpoint in llm.c's format with GPT-2's initialisation (random weights: speed
# does not depend on them). herd runs the same shape with `herd bench train` (SGD with
# momentum: the optimizer is about 1% of a gpt2 step in both).
#
#   LLMC_DIR=~/llm.c bench/llmc.sh [--seq-len 256] [--batch-size 4] [--steps 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
python=${PYTHON:-/usr/bin/python3}
t=256 b=4 steps=3
while [ $# -gt 0 ]; do
  case $1 in
    --seq-len) t=$2; shift 2 ;;
    --batch-size) b=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "llmc.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "${LLMC_DIR:-}" ] && [ -f "$LLMC_DIR/train_gpt2.c" ] ||
  { echo "llmc.sh: set LLMC_DIR to a checkout of karpathy/llm.c (train_gpt2.c not found)" >&2; exit 1; }
[ -x "$herd" ] || { echo "llmc.sh: $herd not found: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/driver.c" <<'EOF'
#define TESTING
#include "train_gpt2.c"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: driver CHECKPOINT B T STEPS WARMUP\n");
        return 2;
    }
    int B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]), warmup = atoi(argv[5]);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    int *inputs = malloc((size_t)B * T * sizeof *inputs), *targets = malloc((size_t)B * T * sizeof *targets);
    for (int i = 0; i < B * T; i++)
        inputs[i] = (i * 7919) % 256, targets[i] = (i * 7919 + 1) % 256;
    double timed = 0;
    for (int s = 0; s < warmup + steps; s++) {
        struct timespec a, z;
        clock_gettime(CLOCK_MONOTONIC, &a);
        gpt2_forward(&model, inputs, targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, s + 1);
        clock_gettime(CLOCK_MONOTONIC, &z);
        if (s >= warmup)
            timed += (z.tv_sec - a.tv_sec) + (z.tv_nsec - a.tv_nsec) / 1e9;
    }
    printf("model=gpt2 framework=llm.c batch=%d seq_len=%d steps=%d step_ms=%.1f tokens_per_s=%.1f loss=%.4f\n",
           B, T, steps, 1e3 * timed / steps, (double)B * T * steps / timed, model.mean_loss);
    gpt2_free(&model);
    return 0;
}
EOF
# llm.c's own flags (its Makefile): -Ofast -march=native -fopenmp.
cc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$LLMC_DIR" "$tmp/driver.c" -lm \
  -o "$tmp/driver"
# A checkpoint in llm.c's format (header of 256 int32: magic 20240326, version 3, maxT, V,
# L, NH, C, padded V; then the parameters in its order), GPT-2's initialisation.
"$python" - "$tmp/gpt2.bin" <<'EOF'
import sys
import numpy as np
maxT, V, L, NH, C, Vp = 1024, 50257, 12, 12, 768, 50304
rng = np.random.default_rng(1)
header = np.zeros(256, dtype=np.int32)
header[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
normal = lambda n, std: (rng.standard_normal(n, dtype=np.float32) * std)
proj = 0.02 / (2 * L) ** 0.5
parts = [normal(Vp * C, 0.02), normal(maxT * C, 0.02),
         np.ones(L * C, np.float32), np.zeros(L * C, np.float32),       # ln1
         normal(L * 3 * C * C, 0.02), np.zeros(L * 3 * C, np.float32),    # qkv
         normal(L * C * C, proj), np.zeros(L * C, np.float32),            # attention projection
         np.ones(L * C, np.float32), np.zeros(L * C, np.float32),       # ln2
         normal(L * 4 * C * C, 0.02), np.zeros(L * 4 * C, np.float32),    # fc
         normal(L * C * 4 * C, proj), np.zeros(L * C, np.float32),        # fc projection
         np.ones(C, np.float32), np.zeros(C, np.float32)]                 # final layer norm
with open(sys.argv[1], "wb") as f:
    header.tofile(f)
    for p in parts:
        p.astype(np.float32).tofile(f)
EOF
cat /usr/share/common-licenses/* | "$python" "$root/scripts/tokenize_bytes.py" - \
  "$tmp/lic_train.bin" "$tmp/lic_val.bin" >/dev/null
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores," \
     "$(date -u '+%Y-%m-%d %H:%M UTC'); llm.c at $(git -C "$LLMC_DIR" log -1 --format=%h 2>/dev/null || echo '(not a git checkout)')"
"$herd" --version | tail -n 1
for r in 1 2; do # interleaved, twice: drift in the machine's load hits both alike
  echo "herd:  $(OMP_NUM_THREADS=1 "$herd" bench train --model gpt2 --data "tokens:$tmp/lic_train.bin" \
    --seq-len "$t" --batch-size "$b" --steps "$steps" --warmup 1 --threads 1 2>/dev/null | tail -n 1)"
  echo "llm.c: $(OMP_NUM_THREADS=1 "$tmp/driver" "$tmp/gpt2.bin" "$b" "$t" "$steps" 1 | tail -n 1)"
done
