#!/usr/bin/env bash
# --recompute (docs/memory.md): the layers inside each run between cuts are computed
# again in backward instead of held, so the saved bytes are those of the run that held
# them, and the peak memory's activations fall. gpt-nano (attention's scores in the
# pooled stash) and resnet20 (batch norm, whose running statistics the re-run must not
# move twice; --grad-accum 2; the simulated device's memory); lenet5, a chain, has
# nothing to re-run and says so; the timeline shows the re-runs; a run refused under
# --memory-limit (its message naming --recompute) trains under it with the flag;
# --deterministic's bytes with it on 2 threads and 3 ranks, with --sync-bn too (slices
# re-run layer by layer together). Under the launcher: 2
# tensor-parallel parts (their sums inside the re-run), 2 pipeline stages x 2 replicas
# with ZeRO-1 (its per-layer wait for parameters skipped in the re-run) and 2 stages under
# GPipe (4 micro-batches in flight, one pool), each the bytes of the same job without the
# flag. Refused with --cuda-graphs, naming it.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
corpus=/usr/share/common-licenses
# The activations part of herd's peak memory (rank 0's with several ranks).
activations() { grep "peak memory [0-9]" "$1" | grep -o "activations [0-9][0-9.]*" | cut -d' ' -f2; }
# same NAME CMD...: the command without and with --recompute; the saved bytes equal (the
# outputs NAME.held.out and NAME.rc.out kept for the memory checks).
same() {
  local name=$1; shift
  "$@" --save "$tmp/$name.held" >"$tmp/$name.held.out" 2>&1
  "$@" --save "$tmp/$name.rc" --recompute >"$tmp/$name.rc.out" 2>&1
  check "$name: exit 0 with --recompute" test -s "$tmp/$name.rc"
  check "$name: the bytes of the run that held every activation" cmp "$tmp/$name.held" "$tmp/$name.rc"
}

# A repeat pass (the sanitizers: the same code, for memory errors) trains fewer steps and
# leaves out the timeline and the memory limit (other tests' code). Under the sanitizers,
# only --sync-bn's slices re-run, 2 stages x 2 replicas with ZeRO-1, the chain and the
# refusal: the other runs reach no line of herd's code that the pass's other tests do not
# (clang's coverage of each process, 2026-12-07: tests/repeat_passes.txt).
rn_samples=320 det_samples=480
repeat_pass && rn_samples=96 det_samples=144
rn=("$herd" train --model resnet20 --data "synthetic:3,16,16,10,$rn_samples" --test-samples 32 --epochs 1
    --batch-size 16 --grad-accum 2 --threads 1 --eval-every 0 --seed 3)
if ! sanitizer_pass; then
same resnet20 "${rn[@]}"
check "resnet20: said 9 runs re-run" grep -q -- "--recompute: 9 runs of layers of 'resnet20'" "$tmp/resnet20.rc.out"
a=$(activations "$tmp/resnet20.held.out") b=$(activations "$tmp/resnet20.rc.out")
check "resnet20: activations $b MiB, under 0.6 x $a" awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 0 && b < 0.6 * a) }'
fi
if ! repeat_pass; then
  "${rn[@]}" --recompute --max-steps 2 --timeline "$tmp/trace.json" >/dev/null 2>&1
  check "the timeline shows the re-runs (recompute layer1.0.conv1)" grep -q '"recompute layer1.0.conv1"' "$tmp/trace.json"
  same resnet20-sim "${rn[@]}" --device sim
fi

if sanitizer_pass; then
  : # gpt-nano's re-runs: the pass's other tests' lines
elif [ -d "$corpus" ]; then
  cat "$corpus"/* | head -c 40000 >"$tmp/text"
  python3 "$here/../scripts/tokenize_bytes.py" "$tmp/text" "$tmp/t_train.bin" "$tmp/t_val.bin" >/dev/null
  gpt=("$herd" train --model gpt-nano --data "tokens:$tmp/t_train.bin,256" --seq-len 64 --batch-size 8
       --max-steps 20 --epochs 1 --eval-every 0 --test-samples 8 --threads 1)
  same gpt-nano "${gpt[@]}"
  a=$(activations "$tmp/gpt-nano.held.out") b=$(activations "$tmp/gpt-nano.rc.out")
  check "gpt-nano: activations $b MiB, under $a" awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 0 && b < a) }'
  if have_mpi && ! repeat_pass; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    same gpt-nano-tp2 timeout 300 "${mpiexec[@]}" -np 2 "${gpt[@]}" --tensor-parallel 2
  fi
else
  skipped_part "gpt-nano: $corpus (Debian's base-files) is not here"
fi
# --deterministic (ghost batch norm: each slice its own batch): re-run slices give the
# one-process bytes at 2 threads (each thread's slices their own pool) and on 3 ranks.
det=("$herd" train --model resnet20 --data "synthetic:3,8,8,10,$det_samples" --test-samples 32 --epochs 1 --seed 5
     --threads 1 --deterministic --slice-size 4 --quiet)
if ! sanitizer_pass; then
"${det[@]}" --batch-size 16 --grad-accum 3 --save "$tmp/det.held" >/dev/null 2>&1
"${det[@]}" --batch-size 24 --grad-accum 2 --threads 2 --recompute --save "$tmp/det.t2" >/dev/null 2>&1
check "--deterministic, 1 x 24 x 2 on 2 threads with --recompute: the bytes of 1 x 16 x 3 held" \
  cmp "$tmp/det.held" "$tmp/det.t2"
fi
# --sync-bn: the slices run layer by layer together (nn/slices.c), and re-run so, batch
# norm's statistics summed over every slice (and rank) again.
"${det[@]}" --sync-bn --batch-size 16 --grad-accum 3 --save "$tmp/sbn.held" >/dev/null 2>&1
if have_mpi && ! repeat_pass; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  timeout 300 "${mpiexec[@]}" -np 3 "${det[@]}" --batch-size 8 --grad-accum 2 --recompute \
    --save "$tmp/det.n3" >/dev/null 2>&1
  check "--deterministic, 3 ranks x 8 x 2 with --recompute: the same bytes" cmp "$tmp/det.held" "$tmp/det.n3"
  timeout 300 "${mpiexec[@]}" -np 3 "${det[@]}" --sync-bn --batch-size 8 --grad-accum 2 --recompute \
    --save "$tmp/sbn.n3" >/dev/null 2>&1
  check "--deterministic --sync-bn, 3 ranks x 8 x 2 with --recompute: the one-process bytes held" \
    cmp "$tmp/sbn.held" "$tmp/sbn.n3"
else
  "${det[@]}" --sync-bn --batch-size 24 --grad-accum 2 --recompute --save "$tmp/sbn.rc" >/dev/null 2>&1
  check "--deterministic --sync-bn, 1 x 24 x 2 with --recompute: the bytes of 1 x 16 x 3 held" \
    cmp "$tmp/sbn.held" "$tmp/sbn.rc"
fi
if have_mpi && sanitizer_pass; then
  timeout 300 "${mpiexec[@]}" -np 4 "${rn[@]}" --pipeline-stages 2 --micro-batches 2 \
    --stage-split layer2.0.conv1 --zero 1 --recompute --save "$tmp/pp.rc" >"$tmp/pp.rc.out" 2>&1
  check "2 stages x 2 replicas, ZeRO-1, --recompute: exit 0" test -s "$tmp/pp.rc"
elif have_mpi; then
  same resnet20-pp2-dp2-zero1 timeout 300 "${mpiexec[@]}" -np 4 "${rn[@]}" --pipeline-stages 2 \
    --micro-batches 2 --stage-split layer2.0.conv1 --zero 1
  # GPipe: all 4 micro-batches in flight, their slots sharing one pool, each re-run in turn.
  same resnet20-gpipe timeout 300 "${mpiexec[@]}" -np 2 "${rn[@]}" --pipeline-stages 2 \
    --micro-batches 4 --stage-split layer2.0.conv1 --pp-schedule gpipe
  a=$(activations "$tmp/resnet20-gpipe.held.out") b=$(activations "$tmp/resnet20-gpipe.rc.out")
  check "GPipe: activations $b MiB, under 0.6 x $a" awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 0 && b < 0.6 * a) }'
fi

# Under a memory limit: refused, the message naming --recompute, which then fits.
if ! repeat_pass; then
  lim=("$herd" train --model resnet20 --data synthetic:3,16,16,10,256 --batch-size 128 --max-steps 1
       --epochs 1 --eval-every 0 --test-samples 128 --threads 1 --memory-limit 110M)
  "${lim[@]}" >"$tmp/lim.out" 2>&1
  check "resnet20 at batch 128 over --memory-limit 110M: refused, naming --recompute" \
    grep -q "memory limit reached: .*hold fewer activations with --recompute" "$tmp/lim.out"
  "${lim[@]}" --recompute >"$tmp/lim.rc.out" 2>&1
  check "... and trains under it with --recompute" grep -q "^model=resnet20 .*steps=1 " "$tmp/lim.rc.out"
fi

"$herd" train --model lenet5 --data synthetic:1,28,28,10,64 --epochs 1 --batch-size 32 --threads 1 \
  --recompute >"$tmp/lenet.out" 2>&1
check "lenet5 (a chain): trains, saying there is nothing to re-run" \
  grep -q -- "--recompute: nothing to re-run in 'lenet5'" "$tmp/lenet.out"
"$herd" train --model lenet5 --data synthetic:1,28,28,10,64 --epochs 1 --batch-size 32 \
  --recompute --cuda-graphs >"$tmp/bad.out" 2>&1
check "--recompute with --cuda-graphs: refused, naming it" \
  grep -q -- "--recompute does not work with --cuda-graphs yet" "$tmp/bad.out"
finish
