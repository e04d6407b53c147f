#!/usr/bin/env bash
# Tensor parallelism (--tensor-parallel T) through the CLI under mpirun, on a small GPT
# with 4 heads (tests/models/gpt-tp4.json, scripts/gpt_model.py): 50 steps at T = 2
# and 4, and DP 2 x TP 2, end on one process's weights within 1e-5 with every step's
# loss within 1e-5; a checkpoint saved at T = 2 holds whole tensors and resumes at
# T = 1 and T = 4 as if never stopped; ZeRO inside the data groups changes no bit;
# bf16 trains alike; herd eval reads the file; the timeline puts the tensor group's sums
# and the data group's reductions on tracks of their own; bad input is refused before
# training.
# In a repeat pass (sanitizers, MPICH) only what reaches lines of herd's code (of its
# MPI-facing part, against MPICH) that the pass's other tests do not (clang's coverage of
# each process, 2026-12-06): the timeline of the grid, AdamW with ZeRO interrupted and
# resumed, predict and bench. --deterministic and --sync-bn with it:
# cli_deterministic_tensor.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
token_corpus
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=("${mpiexec[@]}")
model="$here/models/gpt-tp4.json"
common=(--model "$model" --data "tokens:$tmp/t_train.bin,256" --seq-len 32 --threads 1
        --test-samples 32 --log-every 1 --quiet)
sgd=(--optimizer sgd --lr 0.1 --momentum 0.9)
steps=50 grids=("2 2 8" "4 4 8" "4 2 4")
half=$((steps / 2))
train() { local np=$1; shift; timeout 180 "${mpirun[@]}" -np "$np" "$herd" train "${common[@]}" "$@"; }

if ! repeat_pass; then
"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --max-steps "$steps" --metrics "$tmp/m1" \
  --save "$tmp/w1.st" >"$tmp/one.out" 2>&1
check "one process trains $steps steps" test -s "$tmp/w1.st"
for grid in "${grids[@]}"; do
  read -r np T b <<<"$grid"
  name="T=$T on $np ranks"
  train "$np" "${sgd[@]}" --batch-size "$b" --max-steps "$steps" --tensor-parallel "$T" \
    --metrics "$tmp/m$np$T" --save "$tmp/w$np$T.st" >"$tmp/tp$np$T.out" 2>&1
  d=$(maxdiff "$tmp/w$np$T.st" "$tmp/w1.st")
  l=$(step_losses "$tmp/m$np$T" "$tmp/m1" "$steps")
  check "$name: the saved weights are one process's within 1e-5 ($d)" within "$d" 1e-5
  check "$name: every step's loss is one process's within 1e-5 ($l)" within "$l" 1e-5
done
fi

timeout 180 "${mpirun[@]}" -np 4 "$herd" train --model "$model" --data "tokens:$tmp/t_train.bin,256" \
  --seq-len 32 --threads 1 --test-samples 32 --batch-size 4 --max-steps 2 --tensor-parallel 2 \
  --timeline "$tmp/grid.json" >"$tmp/grid.out" 2>&1
check "the log names the grid" grep -q "tensor parallelism: 2 parts x 2 replicas" "$tmp/grid.out"
# The tensor group's sums and the data group's reductions, each on a track of its own.
check "timeline: the tensor group's and the data group's collectives on their tracks" \
  python3 "$here/check_timeline.py" "$tmp/grid.json" --ranks 4 --steps 2 --groups "tensor group,data group"
check "timeline: 'all-gather tensor-parallel sum' on the tensor group, bucket allreduces on the data group" \
  python3 - "$tmp/grid.json" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
for r in range(4):
    tensor = {e["name"] for e in ev if e["pid"] == r and e["tid"] == 2}
    data = {e["name"] for e in ev if e["pid"] == r and e["tid"] == 3}
    assert tensor == {"all-gather tensor-parallel sum"}, (r, tensor)
    assert data and all(n.startswith("allreduce bucket") for n in data), (r, data)
PY

if ! repeat_pass; then
# A checkpoint from T = 2 holds whole tensors: it resumes at T = 1 and T = 4.
train 2 "${sgd[@]}" --batch-size 8 --max-steps "$half" --tensor-parallel 2 --checkpoint-dir "$tmp/ck" \
  >"$tmp/ck.out" 2>&1
cp -r "$tmp/ck" "$tmp/ck4"
"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --max-steps "$steps" --checkpoint-dir "$tmp/ck" \
  --resume --save "$tmp/r1.st" >"$tmp/r1.out" 2>&1
d1=$(maxdiff "$tmp/r1.st" "$tmp/w1.st")
check "saved at T = 2, resumed at T = 1: the uninterrupted weights within 1e-5 ($d1)" within "$d1" 1e-5
train 4 "${sgd[@]}" --batch-size 8 --max-steps "$steps" --tensor-parallel 4 --checkpoint-dir "$tmp/ck4" \
  --resume --save "$tmp/r4.st" >"$tmp/r4.out" 2>&1
d4=$(maxdiff "$tmp/r4.st" "$tmp/w1.st")
check "saved at T = 2, resumed at T = 4: likewise ($d4)" within "$d4" 1e-5
"$herd" eval --model "$model" --checkpoint "$tmp/w22.st" --data "tokens:$tmp/t_train.bin,256" \
  --seq-len 32 --threads 1 >"$tmp/eval.out" 2>&1
check "herd eval reads a file saved at T = 2" grep -q "perplexity=" "$tmp/eval.out"
fi

# ZeRO shards each part's optimizer state over its data group: AdamW, interrupted and
# resumed, on the bits of the same grid without ZeRO.
adamw=(--optimizer adamw --lr 0.003 --batch-size 4 --tensor-parallel 2)
train 4 "${adamw[@]}" --max-steps 20 --save "$tmp/a.st" >"$tmp/a.out" 2>&1
train 4 "${adamw[@]}" --zero 2 --max-steps 10 --checkpoint-dir "$tmp/ckz" >"$tmp/z.out" 2>&1
train 4 "${adamw[@]}" --zero 2 --max-steps 20 --checkpoint-dir "$tmp/ckz" --resume \
  --save "$tmp/z.st" >>"$tmp/z.out" 2>&1
check "--zero 2 with TP 2 x DP 2, resumed: the bits of the run without ZeRO" \
  test "$(maxdiff "$tmp/z.st" "$tmp/a.st")" = 0

if ! repeat_pass; then
# Clipping's norm adds the parts' squares over the tensor group, whole tensors once; the
# loss scaler's verdict is the job's.
clip=("${sgd[@]}" --batch-size 8 --max-steps 20 --clip-grad-norm 0.5 --loss-scale dynamic)
"$herd" train "${common[@]}" "${clip[@]}" --save "$tmp/c1.st" >"$tmp/c1.out" 2>&1
train 2 "${clip[@]}" --tensor-parallel 2 --save "$tmp/c2.st" >"$tmp/c2.out" 2>&1
train 4 "${clip[@]}" --batch-size 4 --tensor-parallel 2 --zero 1 --save "$tmp/cz.st" >"$tmp/cz.out" 2>&1
runs=(c2 cz)
n1=$(key clipped_steps "$tmp/c1.out")
for run in "${runs[@]}"; do
  d=$(maxdiff "$tmp/$run.st" "$tmp/c1.st")
  check "$run: --clip-grad-norm and --loss-scale dynamic as one process ($d; clipped $(key clipped_steps "$tmp/$run.out") of $n1)" \
    sh -c "[ '$(key clipped_steps "$tmp/$run.out")' = '$n1' ] && [ '$n1' -gt 0 ] && awk 'BEGIN { exit !($d <= 1e-5) }'"
done
"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --max-steps 20 --precision bf16 \
  >"$tmp/b1.out" 2>&1
train 2 "${sgd[@]}" --batch-size 8 --max-steps 20 --precision bf16 --tensor-parallel 2 \
  >"$tmp/b2.out" 2>&1
bf16_as_one "at T = 2" "$tmp/b1.out" "$tmp/b2.out"
fi

# herd predict and herd bench know the split: two sums forward and two backward per
# block, the embedding's and the head's, for gpt-tp4's 2 blocks 10; half the MLP and
# attention weights per rank.
"$herd" predict --model "$model" --data "tokens:$tmp/t_train.bin,256" --seq-len 32 --workers 2 \
  --link-gbps 10 --latency-us 5 --step-ms 10 --tensor-parallel 2 >"$tmp/predict.out" 2>&1
check "herd predict --tensor-parallel 2 counts 10 sums a step" grep -q "tensor_parallel=2 .* sums=10 " \
  "$tmp/predict.out"
timeout 180 "${mpirun[@]}" -np 2 "$herd" bench train --model "$model" \
  --data "tokens:$tmp/t_train.bin,256" --seq-len 32 --batch-size 8 --steps 5 --warmup 1 \
  --tensor-parallel 2 --timeline "$tmp/bench.json" >"$tmp/bench.out" 2>&1
check "herd bench train --tensor-parallel 2 reports tokens/s of the split job" \
  grep -q "ranks=2 tensor_parallel=2 seq_len=32 tokens_per_s=[1-9]" "$tmp/bench.out"
check "... and its timeline has the tensor group's sums on their track (one replica: no data group)" \
  python3 - "$tmp/bench.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc if e.get("ph") == "M" and e["name"] == "thread_name"}
sums = {e["pid"] for e in doc if e.get("ph") == "X" and e["tid"] == 2 and e["name"] == "all-gather tensor-parallel sum"}
assert names.get((0, 2)) == names.get((1, 2)) == "tensor group" and (0, 3) not in names, names
assert sums == {0, 1}, sums
PY

# Bad input, refused before training and naming the values.
refused() { # refused NP PATTERN ARGS...: herd exits non-zero and says PATTERN
  local np=$1 pattern=$2; shift 2
  timeout 60 "${mpirun[@]}" -np "$np" "$herd" train --data "tokens:$tmp/t_train.bin,256" \
    --seq-len 32 --threads 1 --max-steps 1 "$@" >"$tmp/bad.out" 2>&1
  [ $? -ne 0 ] && grep -q -- "$pattern" "$tmp/bad.out" && ! grep -q "^epoch" "$tmp/bad.out"
}
if ! repeat_pass; then
check "heads that do not split are refused, naming both" \
  refused 4 "'h0.attn' has 2 heads, which do not split evenly over --tensor-parallel 4" \
  --model gpt-nano --tensor-parallel 4
check "ranks that do not divide are refused" \
  refused 3 "3 ranks do not divide into groups of --tensor-parallel 2" --model gpt-nano \
  --tensor-parallel 2
check "stages of parts that do not fill the ranks are refused" \
  refused 2 "2 ranks do not divide into pipelines of 2 stages of --tensor-parallel parts" \
  --model gpt-nano --tensor-parallel 2 --pipeline-stages 2
fi
repeat_pass && finish
check "--zero without a second replica is refused" \
  refused 2 "groups of --tensor-parallel 2 give one" --model gpt-nano --tensor-parallel 2 --zero 1
finish
