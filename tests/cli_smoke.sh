#!/usr/bin/env bash
# Drives the herd CLI end to end on small synthetic data: every subcommand, the
# summary line, --json, checkpoints and eval, and the error paths' exit codes.
set -u
. "$(dirname "$0")/testlib.sh"
data="synthetic:1,12,12,4,512"

"$herd" --version >"$tmp/version" 2>&1
check "--version names the backend" grep -q "oneDNN" "$tmp/version"
"$herd" --help >/dev/null; check "--help exits 0" test $? -eq 0
for sub in train eval models "bench train"; do
  $herd $sub --help >"$tmp/help" 2>&1
  check "$sub --help exits 0 with a usage text" bash -c "test $? -eq 0 && grep -q '^usage: herd $sub' '$tmp/help'"
done

# --train-samples and --test-samples keep the first N of each split: both counts named.
"$herd" train --model mlp --data "$data" --epochs 1 --batch-size 32 --threads 1 --train-samples 64 \
  --test-samples 40 >"$tmp/sub.out" 2>"$tmp/sub.err"
check "--train-samples 64 --test-samples 40: 64 train / 40 test samples" \
  bash -c "test $? -eq 0 && grep -q ': 64 train / 40 test samples$' '$tmp/sub.err'"
"$herd" train --model mlp --data "$data" --test-samples 0 >/dev/null 2>"$tmp/sub.err"
check "--test-samples 0: exit 2 naming the option" bash -c "test $? -eq 2 && grep -q -- '--test-samples' '$tmp/sub.err'"

"$herd" models >"$tmp/models"
check "models lists the zoo" bash -c "grep -q '^mlp' '$tmp/models' && grep -q '^lenet5' '$tmp/models' && grep -q '^resnet20' '$tmp/models'"
check "models shows lenet5's parameter count" grep -q "61706" "$tmp/models"

"$herd" train --model mlp --data "$data" --epochs 2 --batch-size 32 --threads 1 \
  --checkpoint-dir "$tmp/ckpt" --save "$tmp/final.safetensors" >"$tmp/train.out" 2>"$tmp/train.err"
check "train exits 0" test $? -eq 0
last=$(tail -n 1 "$tmp/train.out")
check "summary has test_acc= and samples_per_s=" bash -c "[[ '$last' == *test_acc=* && '$last' == *samples_per_s=* ]]"
acc=$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' <<<"$last")
check "mlp learns the synthetic classes (test_acc=$acc)" awk -v a="$acc" 'BEGIN { exit !(a > 0.9) }'
check "progress lines go to stderr" grep -q "epoch 2/2" "$tmp/train.err"
check "checkpoint written" test -s "$tmp/ckpt/latest"
check "final weights written" test -s "$tmp/final.safetensors"

"$herd" train --model mlp --data "$data" --epochs 1 --quiet --json --threads 1 >"$tmp/json.out" 2>&1
check "--json exits 0 and prints one JSON object" \
  bash -c "test $? -eq 0 && test \$(wc -l <'$tmp/json.out') -eq 1 && grep -q '^{\"model\": \"mlp\".*\"test_acc\": ' '$tmp/json.out'"

"$herd" eval --model mlp --data "$data" --checkpoint "$tmp/final.safetensors" >"$tmp/eval.out" 2>&1
check "eval reproduces the final test accuracy ($acc)" grep -qE "^model=mlp split=test .* acc=$acc\$" "$tmp/eval.out"

"$herd" bench train --model lenet5 --data synthetic:1,28,28,10,512 --steps 3 --warmup 1 >"$tmp/bench.out" 2>&1
check "bench train exits 0 and prints samples_per_s=" bash -c "test $? -eq 0 && grep -q 'samples_per_s=' '$tmp/bench.out'"

# A diverging benchmark names its step (not 0) and its own option.
"$herd" bench train --model mlp --data synthetic:1,28,28,10,64 --batch-size 8 --steps 4 --warmup 1 \
  --lr 1000 >/dev/null 2>"$tmp/err"
check "bench train --lr 1000 stops naming the step and --lr" \
  bash -c "test $? -ne 0 && grep -qE 'diverged at step [2-5]: .*--lr 1000: lower it' '$tmp/err'"

"$herd" train --model nosuchmodel --data "$data" >/dev/null 2>"$tmp/err"
rc=$?
check "unknown model exits 1" test $rc -eq 1
check "errors start with 'herd: error:'" grep -q "^herd: error:" "$tmp/err"
"$herd" train --model mlp --epochs zero >/dev/null 2>"$tmp/err"
check "bad flag value exits 2" test $? -eq 2
check "bad flag value says what is wrong" grep -q -- "--epochs must be" "$tmp/err"
# One strict number parser for every flag: no spaces, hex, inf or nan; a negative size
# is not 2^64-1; and stage flags need stages (exit 2, naming the flag and the value).
for arg in "--memory-limit= -1" "--memory-limit=-1" "--checkpoint-every-seconds=0x10" "--lr= 0.1" \
           "--lr=0.1 " "--lr=inf" "--clip-grad-norm=nan" "--epochs=0x10" "--epochs=+3"; do
  "$herd" train --model mlp --data "$data" --checkpoint-dir "$tmp/strict" "$arg" >/dev/null 2>"$tmp/err"
  rc=$?; flag=${arg%%=*}; value=${arg#*=}
  check "'$arg' is refused (exit 2) naming the flag and the value" \
    test $rc -eq 2 -a "$(grep -cF -e "$flag" "$tmp/err")" -eq 1 -a "$(grep -cF -e "'$value'" "$tmp/err")" -eq 1
done
exited_saying() { test "$rc" -eq "$1" && grep -qF -e "$2" "$tmp/err"; } # CODE TEXT: the last run's
# Flags that would be ignored, outputs that would overwrite each other, and a --save
# that could not be written after the run: refused before training, naming them.
while IFS='|' read -r code flags needle; do
  # shellcheck disable=SC2086
  "$herd" train --model mlp --data "$data" --max-steps 1 $flags >/dev/null 2>"$tmp/err"
  rc=$?
  check "$flags: refused (exit $code, got $rc) saying '$needle'" exited_saying "$code" "$needle"
done <<EOF_CASES
2|--milestones 1 --schedule cosine|--milestones are the epochs where --schedule step
2|--optimizer adamw --nesterov|--nesterov is SGD's momentum
2|--keep-checkpoints 5|--keep-checkpoints 5 needs --checkpoint-dir
2|--metrics $tmp/same --timeline $tmp/same|--metrics and --timeline name one file
2|--metrics $tmp/same2 --save $tmp/same2|--save and --metrics name one file
1|--save $tmp/no/such/dir/w.st|--save '$tmp/no/such/dir/w.st': cannot create a file next to it
1|--save $tmp|--save '$tmp' is a directory
EOF_CASES
# An epoch's last batch of one sample through a batch norm over 1x1: the error names the
# layer and the cause (65 samples in batches of 8).
printf '{"layers":[{"type":"conv2d","out":4,"kernel":3},{"type":"global_avgpool"},{"type":"batchnorm","name":"bn"},{"type":"linear","out":"classes"}]}' >"$tmp/bn.json"
"$herd" train --model "$tmp/bn.json" --data "$data" --threads 1 --batch-size 8 --epochs 1 \
  --train-samples 65 --quiet >/dev/null 2>"$tmp/err"
rc=$?
check "a last batch of 1 through batch norm: exit 1 naming the layer and the last partial batch" \
  exited_saying 1 "batch norm 'bn' gets 1 value per channel in training (1 sample of 1x1)"
check "... and the cause" grep -q "an epoch's last, partial one" "$tmp/err"
for arg in "--pp-schedule=gpipe" "--stage-split=2"; do
  "$herd" train --model mlp --data "$data" "$arg" >/dev/null 2>"$tmp/err"
  check "'$arg' without --pipeline-stages is refused (exit 2)" \
    bash -c "test $? -eq 2 && grep -q -- '${arg%%=*} needs --pipeline-stages' '$tmp/err'"
done
# One parser (herd_pp_schedule_parse) behind every schedule flag: a name it does not
# know is a usage error naming the flag, the value and the names it takes.
for cmd in "train --model mlp --data $data --pipeline-stages 2 --pp-schedule" \
           "predict --model mlp --workers 2 --pp-schedule" "bench pipeline --schedule"; do
  for bad in zb GPipe ""; do
    $herd $cmd "$bad" >/dev/null 2>"$tmp/err"
    check "herd ${cmd%% --*} ${cmd##* } '$bad' is refused (exit 2) naming the flag, the value and 1f1b or gpipe" \
      bash -c "test $? -eq 2 && grep -qF -- \"${cmd##* } is 1f1b or gpipe, got '$bad'\" '$tmp/err'"
  done
done
"$herd" train --model mlp --data idx:/nonexistent >/dev/null 2>"$tmp/err"
check "missing data exits 1 naming the path" bash -c "test $? -eq 1 && grep -q '^herd: error: .*/nonexistent' '$tmp/err'"
head -c 100 "$tmp/final.safetensors" >"$tmp/trunc.safetensors"
"$herd" eval --model mlp --data "$data" --checkpoint "$tmp/trunc.safetensors" >/dev/null 2>"$tmp/err"
check "truncated weights: exit 1 naming the file" bash -c "test $? -eq 1 && grep -q trunc.safetensors '$tmp/err'"
"$herd" frobnicate >/dev/null 2>&1
check "unknown command exits 2" test $? -eq 2
# Options by their whole names only (cli_getopt): glibc would take a prefix that several
# of train's options share as the first of them, --checkpoint-every 5 as 5 steps.
"$herd" train --model mlp --data "$data" --checkpoint-every 5 --max-steps 1 >"$tmp/out" 2>"$tmp/err"
check "train --checkpoint-every: exit 2 naming both options it could be" bash -c "test $? -eq 2 && grep -qF \
  \"train: option '--checkpoint-every' is abbreviated: write --checkpoint-every-steps or --checkpoint-every-seconds\" '$tmp/err'"
check "... before training" test ! -s "$tmp/out"
"$herd" train --mod mlp --data "$data" --max-steps 1 >/dev/null 2>"$tmp/err"
check "train --mod (one option's prefix): exit 2 naming --model" \
  bash -c "test $? -eq 2 && grep -qF \"option '--mod' is abbreviated: write --model\" '$tmp/err'"
"$herd" bench train --model mlp --st=3 >/dev/null 2>"$tmp/err"
check "bench train --st=3: exit 2 naming --steps" \
  bash -c "test $? -eq 2 && grep -qF \"option '--st' is abbreviated: write --steps\" '$tmp/err'"
"$herd" train --model=mlp --data="$data" --epochs=1 --max-steps 2 --quiet >/dev/null 2>&1
check "whole names with =VALUE still parse (exit $?)" test $? -eq 0
# herd's environment knobs take their listed values only (herd_env_choice).
HERD_CONV_ALGO=Winograd "$herd" train --model lenet5 --data "$data" --max-steps 1 >/dev/null 2>"$tmp/err"
check "HERD_CONV_ALGO=Winograd: exit 1 naming the variable, the value and the choices" bash -c \
  "test $? -eq 1 && grep -qF \"HERD_CONV_ALGO='Winograd' is not one of direct, auto, winograd\" '$tmp/err'"
HERD_BF16_ACTIVATIONS=fp16 "$herd" train --model mlp --data "$data" --max-steps 1 >/dev/null 2>"$tmp/err"
check "HERD_BF16_ACTIVATIONS=fp16: exit 1 naming it" bash -c \
  "test $? -eq 1 && grep -qF \"HERD_BF16_ACTIVATIONS='fp16' is not one of bf16, fp32\" '$tmp/err'"

finish
