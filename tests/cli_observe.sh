#!/usr/bin/env bash
# herd train --logdir/--metrics/--histograms and herd plot through the CLI: the
# files appear, the plots are PNGs of the asked size, and usage errors exit 2.
set -u
. "$(dirname "$0")/testlib.sh"
png_size() { # width x height from the IHDR chunk
  od -An -tu1 -j16 -N8 "$1" | awk '{ printf "%dx%d", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8 }'
}
data="synthetic:1,12,12,4,256"

"$herd" train --model mlp --data "$data" --epochs 2 --batch-size 32 --threads 1 --quiet \
  --logdir "$tmp/tb" --metrics "$tmp/m.jsonl" --histograms 4 --log-every 2 >"$tmp/out" 2>&1
check "train with --logdir --metrics exits 0" test $? -eq 0
check "one event file in --logdir" test "$(ls "$tmp/tb" | grep -c '^events\.out\.tfevents\.[0-9]*\.')" -eq 1
check "8 step lines and 2 epoch lines" test "$(grep -c '"kind":"step"' "$tmp/m.jsonl") $(grep -c '"kind":"epoch"' "$tmp/m.jsonl")" = "8 2"
check "epoch lines carry test_acc" test "$(grep '"kind":"epoch"' "$tmp/m.jsonl" | grep -c '"test_acc"')" -eq 2

"$herd" plot "$tmp/m.jsonl" -o "$tmp/curves.png" --metric loss,acc --width 700 --height 500 2>"$tmp/err"
check "plot exits 0" test $? -eq 0
check "plot is 700x500" test "$(png_size "$tmp/curves.png")" = "700x500"
"$herd" plot --timeline "$here/fixtures/timeline_2ranks.json" -o "$tmp/steps.png" 2>"$tmp/err"
check "plot --timeline exits 0" test $? -eq 0
check "timeline plot is 1000x330" test "$(png_size "$tmp/steps.png")" = "1000x330"

"$herd" plot "$tmp/m.jsonl" 2>"$tmp/err"
check "plot without -o exits 2" test $? -eq 2
"$herd" plot "$tmp/m.jsonl" --timeline "$here/fixtures/timeline_2ranks.json" -o "$tmp/x.png" 2>"$tmp/err"
check "plot with both inputs exits 2" test $? -eq 2
"$herd" plot "$tmp/m.jsonl" -o "$tmp/x.png" --metric speed 2>"$tmp/err"
check "unknown --metric exits 1 and names it" bash -c "test $? -eq 1 && grep -q speed '$tmp/err'"
"$herd" train --model mlp --data "$data" --epochs 1 --histograms 5 2>"$tmp/err"
check "--histograms without --logdir exits 2" bash -c "test $? -eq 2 && grep -q -- --logdir '$tmp/err'"

finish
