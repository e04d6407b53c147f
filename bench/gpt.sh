#!/usr/bin/env bash
# GPT training speed on the CPU, herd against PyTorch 1.13 side by side in one run
# (issue 28): tokens/s of gpt-nano (sequence 64, its context, batch 16) and gpt2 (GPT-2
# small, sequence 256, batch 4) at 1 thread, fp32 and bf16, on Debian's license texts
# tokenised byte-level. PyTorch runs the same model file (bench/herd_torch_models.py),
# the same optimizer as `herd bench train` (SGD, momentum 0.9, weight decay 5e-4) and, for
# bf16, CPU autocast. Each throughput is also given as a fraction of the 1-thread GEMM
# limit of its precision measured in this run (training FLOPs = 3 x forward).
#
#   bench/gpt.sh [--models gpt-nano,gpt2] [--repeats 1]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
models=gpt-nano,gpt2
repeats=1
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpt.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "gpt.sh: $herd not found: make build" >&2; exit 1; }
"$herd" --version | tail -n 1
precs=(fp32 bf16)
if ! "$herd" --version | grep -q 'bf16: native'; then
  echo "gpt.sh: no native bf16 on this CPU (herd refuses bf16 here): fp32 only"
  precs=(fp32)
fi
bench_reference_setup
bench_gemm_limits
GEMM_BF16=0
[ ${#precs[@]} -gt 1 ] && bench_gemm_bf16_limit
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat /usr/share/common-licenses/* | "$python" "$root/scripts/tokenize_bytes.py" - \
  "$tmp/lic_train.bin" "$tmp/lic_val.bin" >/dev/null

shape() { # model -> "T B STEPS WARMUP VOCAB"
  case $1 in
    gpt-nano) echo 64 16 30 3 256 ;;
    gpt2) echo 256 4 3 1 50257 ;;
    *) echo "gpt.sh: no shape for $1" >&2; exit 2 ;;
  esac
}

torch_tokens() { # model T B steps warmup precision -> a summary line
  OMP_NUM_THREADS=1 "$python" - "$@" <<'PY'
import sys, time, torch
import torch.nn.functional as F
sys.path.insert(0, "bench")  # run from the project root
import herd_torch_models as htm
model, t, b, steps, warmup, prec = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
torch.set_num_threads(1)
torch.manual_seed(1)
spec = htm.load_spec(model)
vocab = next(l for l in spec["layers"] if l["type"] == "embedding")["vocab"]
net = htm.HerdNet(spec, (1, t, 1), vocab)
net.train()
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
x = torch.randint(0, 256, (b, 1, t, 1)).to(torch.float32)
y = torch.randint(0, 256, (b * t,))
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
        logits = net(x)
    loss = F.cross_entropy(logits.float().reshape(-1, vocab), y)
    loss.backward()
    opt.step()
for _ in range(warmup):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
print("model=%s framework=torch precision=%s batch=%d seq_len=%d step_ms=%.1f tokens_per_s=%.1f torch=%s"
      % (model, prec, b, t, dt * 1e3, b * t / dt, torch.__version__))
PY
}

declare -A tps fpt
IFS=, read -r -a model_list <<<"$models"
for m in "${model_list[@]}"; do for p in fp32 bf16; do tps[herd,$m,$p]=-; tps[torch,$m,$p]=-; done; done
for ((r = 1; r <= repeats; r++)); do
  for m in "${model_list[@]}"; do
    read -r t b steps warmup vocab <<<"$(shape "$m")"
    for p in "${precs[@]}"; do
      line=$(OMP_NUM_THREADS=1 "$herd" bench train --model "$m" --data "tokens:$tmp/lic_train.bin,$vocab" \
               --seq-len "$t" --batch-size "$b" --steps "$steps" --warmup "$warmup" --precision "$p" \
               --threads 1 2>/dev/null | tail -n 1) || line=
      echo "herd  $m $p: $line"
      v=$(kv tokens_per_s "$line"); [ -n "$v" ] && tps[herd,$m,$p]=$(best "${tps[herd,$m,$p]}" "$v")
      # Training FLOPs per token at this sequence length: herd's gflops= over its tokens/s.
      [ -n "$v" ] && fpt[$m]=$(awk -v g="$(kv gflops "$line")" -v s="$v" 'BEGIN { print g * 1e9 / s }')
      line=$(cd "$root" && torch_tokens "$m" "$t" "$b" "$steps" "$warmup" "$p" 2>&1 | tail -n 1) || line=
      echo "torch $m $p: $line"
      v=$(kv tokens_per_s "$line"); [ -n "$v" ] && tps[torch,$m,$p]=$(best "${tps[torch,$m,$p]}" "$v")
    done
  done
done

# fraction TOKENS_PER_S MODEL PRECISION: training FLOPs per token x tokens/s over the
# limit of the precision (1 core).
fraction() {
  local lim=$GEMM_LIMIT; [ "$3" = bf16 ] && lim=$GEMM_BF16
  awk -v s="$1" -v f="${fpt[$2]:-}" -v l="$lim" \
    'BEGIN { if (s == "-" || f == "") print "-"; else printf "%.2f", f * s / (l * 1e9) }'
}
echo
echo "### GPT training, tokens/s at 1 thread (best of $repeats; $(date -u +%Y-%m-%d))"
echo
echo "Limits in this run: fp32 GEMM $GEMM_LIMIT GFLOP/s, bf16 GEMM $GEMM_BF16 GFLOP/s (1 core); in"
echo "brackets each throughput's training FLOPs (3 x forward at that sequence length) as a fraction"
echo "of its precision's limit."
echo
echo "| model | herd fp32 | PyTorch fp32 | herd / PyTorch | herd bf16 | PyTorch bf16 | herd / PyTorch | herd bf16 / fp32 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for m in "${model_list[@]}"; do
  hf=${tps[herd,$m,fp32]} hb=${tps[herd,$m,bf16]} tf=${tps[torch,$m,fp32]} tb=${tps[torch,$m,bf16]}
  echo "| $m | $hf ($(fraction "$hf" "$m" fp32)) | $tf ($(fraction "$tf" "$m" fp32)) | $(ratio "$hf" "$tf")" \
       "| $hb ($(fraction "$hb" "$m" bf16)) | $tb ($(fraction "$tb" "$m" bf16)) | $(ratio "$hb" "$tb") | $(ratio "$hb" "$hf") |"
done
