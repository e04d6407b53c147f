#!/usr/bin/env bash
# Token data end to end: scripts/tokenize_bytes.py turns Debian's license texts into
# llm.c .bin files, gpt-nano trains on them (the loss falls, the summary has
# tokens_per_s), herd eval reports the validation loss and its perplexity, 2 ranks give
# one process's weights at the same global batch (AdamW under --deterministic: its
# bytes), and bad input is refused before
# training, naming the value. Under the sanitizers: one step, its evaluation and the
# refusals; the 40-step runs and the ranks reach no line of herd's code that the pass's
# other tests do not (clang's coverage of each process, 2026-12-07: tests/repeat_passes.txt).
source "$(dirname "$0")/testlib.sh"
corpus=/usr/share/common-licenses
[ -d "$corpus" ] || skip_all "$corpus (Debian's base-files) is not here"
key() { grep -o "$1=[0-9.e+-]*" "$2" | head -n1 | cut -d= -f2; }

cat "$corpus"/* | head -c 40000 >"$tmp/text"
python3 "$here/../scripts/tokenize_bytes.py" "$tmp/text" "$tmp/lic_train.bin" "$tmp/lic_val.bin" \
  >"$tmp/tok.out"
check "the tokenizer writes 36000 + 4000 tokens" grep -q "36000 train + 4000 validation" "$tmp/tok.out"
check "... in llm.c's format (header 1024 bytes, 2 per token)" \
  test "$(stat -c %s "$tmp/lic_train.bin")" = $((1024 + 2 * 36000))

data="tokens:$tmp/lic_train.bin,256"
common=(--model gpt-nano --data "$data" --seq-len 32 --optimizer adamw --lr 0.003 --weight-decay 0
        --threads 1 --test-samples 32 --quiet)
"$herd" train "${common[@]}" --batch-size 8 --max-steps 1 --save "$tmp/w1.st" >"$tmp/t1.out" 2>&1
"$herd" eval --model gpt-nano --checkpoint "$tmp/w1.st" --data "$data" --seq-len 32 --threads 1 \
  >"$tmp/e1.out" 2>&1
check "eval reads the _val sibling: 124 sequences of 32" test "$(key samples "$tmp/e1.out")" = 124
if ! sanitizer_pass; then
"$herd" train "${common[@]}" --batch-size 8 --max-steps 40 --save "$tmp/w40.st" >"$tmp/t40.out" 2>&1
check "gpt-nano trains on token data" test -s "$tmp/w40.st"
sps=$(key samples_per_s "$tmp/t40.out")
tps=$(key tokens_per_s "$tmp/t40.out")
check "the summary has tokens_per_s = samples_per_s x 32 ($sps, $tps)" \
  awk -v s="$sps" -v t="$tps" 'BEGIN { exit !(t > 0 && (t - 32 * s) ^ 2 < 10) }'
"$herd" eval --model gpt-nano --checkpoint "$tmp/w40.st" --data "$data" --seq-len 32 --threads 1 \
  >"$tmp/e40.out" 2>&1
l1=$(key loss "$tmp/e1.out")
l40=$(key loss "$tmp/e40.out")
ppl=$(key perplexity "$tmp/e40.out")
check "the validation loss falls by 1 nat over 40 steps ($l1 -> $l40)" \
  awk -v a="$l1" -v b="$l40" 'BEGIN { exit !(b > 0 && b < a - 1) }'
check "perplexity is exp(loss) ($ppl, $l40)" \
  awk -v p="$ppl" -v l="$l40" 'BEGIN { d = p - exp(l); exit !(p > 1 && d * d < 1e-2 * p) }'
fi

# Bad input, refused before training and naming the values.
refused() { # refused PATTERN ARGS...: herd exits 1 and stderr has PATTERN
  local pattern=$1; shift
  "$herd" "$@" >"$tmp/bad.out" 2>&1
  [ $? -eq 1 ] && grep -q -- "$pattern" "$tmp/bad.out" && ! grep -q "^epoch" "$tmp/bad.out"
}
check "a sequence longer than the context is refused naming both" \
  refused "sequence length 65 is longer than model 'gpt-nano' reads (context 64)" \
  train --model gpt-nano --data "$data" --seq-len 65
check "a token at or above the vocabulary is refused naming place and value" \
  refused "lic_train.bin: token 0 (byte 1024) is [0-9]*, not below the vocabulary 2" \
  train --model gpt-nano --data "tokens:$tmp/lic_train.bin,2"
printf 'not a token file' >"$tmp/foreign_train.bin"
check "a foreign file is refused" refused "foreign_train.bin: byte 16: the file ends inside the header" \
  train --model gpt-nano --data "tokens:$tmp/foreign_train.bin,256"
check "a language model without token data is refused" \
  refused "is a language model" train --model gpt-nano --data synthetic:1,8,8,4,16
check "a classifier on token data is refused" \
  refused "model 'mlp' reads no token sequences" train --model mlp --data "$data"
check "--augment with token data is refused" \
  refused "does not apply to token data" train --model gpt-nano --data "$data" --augment

# Two ranks of 4 sequences are one process of 8: the same weights. SGD: Adam's first
# steps divide gradients by their own size, so summation-order noise in a tiny one
# would move a weight by lr (AdamW here: 2e-5 after 1 step, 1.2e-4 after 40).
if sanitizer_pass; then
  : # the ranks' lines are other tests' (above)
elif have_mpi; then
  sgd=(--model gpt-nano --data "$data" --seq-len 32 --lr 0.1 --weight-decay 0 --threads 1
       --test-samples 32 --quiet --max-steps 40)
  "$herd" train "${sgd[@]}" --batch-size 8 --save "$tmp/sgd1.st" >"$tmp/sgd1.out" 2>&1
  "${mpiexec[@]}" -np 2 "$herd" train "${sgd[@]}" --batch-size 4 --save "$tmp/sgd2.st" \
    >"$tmp/sgd2.out" 2>&1
  d=$(maxdiff "$tmp/sgd2.st" "$tmp/sgd1.st" 2>/dev/null || echo missing)
  check "2 ranks give one process's weights within 1e-5 after 40 steps ($d)" within "$d" 1e-5
  # AdamW with --deterministic: the sums have no order, so 2 ranks are the same bytes.
  det=(--model gpt-nano --data "$data" --seq-len 32 --optimizer adamw --lr 0.003 --weight-decay 0.1
       --threads 1 --test-samples 32 --quiet --max-steps 40 --deterministic --slice-size 4
       --train-samples 1120)
  "$herd" train "${det[@]}" --batch-size 8 --save "$tmp/adam1.st" >"$tmp/adam1.out" 2>&1
  "${mpiexec[@]}" -np 2 "$herd" train "${det[@]}" --batch-size 4 --save "$tmp/adam2.st" \
    >"$tmp/adam2.out" 2>&1 || tail -n 3 "$tmp/adam2.out"
  check "AdamW, --deterministic: 2 ranks x 4 sequences give one process's bytes after 40 steps" \
    cmp "$tmp/adam1.st" "$tmp/adam2.st"
else
  skipped_part "2 ranks against one process (no MPI launcher)"
fi
finish
