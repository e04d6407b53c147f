#!/usr/bin/env bash
# What --deterministic costs (issue 27): herd train with and without it, side by side and
# interleaved (REPS rounds, the median kept), at 1 rank and at 2 ranks, for MODELS (mlp,
# lenet5 and resnet20) on synthetic data (1x28x28; resnet20 3x32x32), THREADS threads per
# rank (default 1) at RANKS ranks (default "1 2");
# the same global batch of micro-batches of B (--deterministic cuts them into slices of 8).
# Prints each run's samples/s and the ratio; raw lines appended to OUT (default bench/results/DATE-deterministic-bB.txt).
# BASE=OTHER_BUILD: each round also runs OTHER_BUILD/herd's two runs (interleaved), and the
# line adds its medians, its ratio and this build's --deterministic over its.
# FLAGS go to both runs (FLAGS=--sync-bn: batch norm over the ranks' batches, and under
# --deterministic over the global batch). TP=T: each of RANKS replicas is T tensor-parallel
# ranks (--tensor-parallel T); PP=P: P pipeline stages (--pipeline-stages P, a micro-batch
# of B each). A language model (gpt-nano) reads Debian's license texts
# tokenised byte-level, sequences of SEQ (default 64).
#   usage: [B=8] [STEPS=100] [REPS=5] [MODELS="mlp lenet5 resnet20"] [THREADS=1] [RANKS="1 2"]
#          [TP=1] [PP=1] [SEQ=64] [FLAGS=...] [OUT=file] [BASE=OTHER_BUILD] bench/deterministic.sh [BUILD]
set -u
herd=${1:-build}/herd
B=${B:-8} STEPS=${STEPS:-100} REPS=${REPS:-5} MODELS=${MODELS:-mlp lenet5 resnet20} FLAGS=${FLAGS:-}
THREADS=${THREADS:-1} RANKS=${RANKS:-1 2} BASE=${BASE:-} TP=${TP:-1} PP=${PP:-1} SEQ=${SEQ:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=${OUT:-bench/results/$(date +%F)-deterministic-b$B.txt}
exec > >(tee -a "$out") 2>&1
echo "# $(date -u)  $("$herd" --version | head -n1)${BASE:+; against $BASE/herd}"
echo "# $(nproc --all) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# micro-batch $B, global batch $((B * 12)) (1 replica x 12 or 2 replicas x 6), $THREADS thread(s) a rank, $TP tensor part(s) x $PP stage(s) a replica, $STEPS steps, median of $REPS${FLAGS:+, flags $FLAGS}"
tokens=""
case " $MODELS " in *" gpt"*)
  tokens=$(mktemp -d)
  cat /usr/share/common-licenses/* >"$tokens/text"
  python3 "$(dirname "$0")/../scripts/tokenize_bytes.py" "$tokens/text" "$tokens/t_train.bin" \
    "$tokens/t_val.bin" >/dev/null
  trap 'rm -rf "$tokens"' EXIT
esac
one() { # one REPLICAS MODEL ACCUM [--deterministic]: samples/s of the run (of $bin: herd)
  local np=$(($1 * TP * PP)) model=$2 accum=$3 flags=(${4:-}) cmd=("${bin:-$herd}") shape=1,28,28
  [ "$np" -gt 1 ] && cmd=(mpirun -np "$np" --bind-to none "${bin:-$herd}")
  [ "$TP" -gt 1 ] && flags+=(--tensor-parallel "$TP")
  [ "$PP" -gt 1 ] && flags+=(--pipeline-stages "$PP")
  [ "$model" = resnet20 ] && shape=3,32,32
  local data=(--data "synthetic:$shape,10,$((B * 12 * STEPS))")
  case $model in gpt*) # whole global batches of sequences, as --deterministic asks
    data=(--data "tokens:$tokens/t_train.bin,256" --seq-len "$SEQ" --test-samples 64
          --train-samples $((B * 12 * STEPS)))
  esac
  "${cmd[@]}" train --model "$model" "${data[@]}" --epochs 1 \
    --batch-size "$B" --grad-accum "$accum" --threads "$THREADS" --seed 1 --quiet $FLAGS "${flags[@]}" 2>&1 |
    sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a / b}'; }
for model in $MODELS; do
  for np in $RANKS; do
    accum=$((12 / np))
    plain=() det=() base_plain=() base_det=()
    for ((i = 0; i < REPS; i++)); do
      plain+=("$(one $np $model $accum)")
      det+=("$(one $np $model $accum --deterministic)")
      if [ -n "$BASE" ]; then
        base_plain+=("$(bin=$BASE/herd one $np $model $accum)")
        base_det+=("$(bin=$BASE/herd one $np $model $accum --deterministic)")
      fi
    done
    p=$(printf '%s\n' "${plain[@]}" | median) d=$(printf '%s\n' "${det[@]}" | median)
    line="model=$model ranks=$((np * TP * PP)) tensor_parallel=$TP pipeline_stages=$PP threads=$THREADS accum=$accum plain=[${plain[*]}] deterministic=[${det[*]}]"
    line+=" median_plain=$p median_deterministic=$d ratio=$(ratio "$d" "$p")"
    if [ -n "$BASE" ]; then
      bp=$(printf '%s\n' "${base_plain[@]}" | median) bd=$(printf '%s\n' "${base_det[@]}" | median)
      line+=" base_plain=[${base_plain[*]}] base_deterministic=[${base_det[*]}] base_median_plain=$bp"
      line+=" base_median_deterministic=$bd base_ratio=$(ratio "$bd" "$bp") deterministic_over_base=$(ratio "$d" "$bd")"
    fi
    echo "$line"
  done
done
