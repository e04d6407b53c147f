#!/usr/bin/env bash
# TensorBoard compatibility checked from outside herd: the event files of herd train
# --logdir are read with TensorBoard's own .proto schema (tests/tensorboard_proto,
# compiled by protoc) and Debian's python3-protobuf, not herd's reader. Checked by
# tests/check_tensorboard.py: the TFRecord framing and its CRCs, every Event decoded,
# file_version first, times and steps in order, scalars equal to the --metrics file,
# histograms well formed. Then that the checker catches a flipped bit, a cut file and
# a changed value.
set -u
. "$(dirname "$0")/testlib.sh"
# Debian's python, where python3-protobuf lives (a pyenv python may come first on PATH).
py=/usr/bin/python3
[ -x "$py" ] || skip_all "no $py (apt-get install python3)"
command -v protoc >/dev/null || skip_all "no protoc (apt-get install protobuf-compiler)"
"$py" -c "import google.protobuf" 2>/dev/null || skip_all "no protobuf for $py (apt-get install python3-protobuf)"
tb_check() { "$py" "$here/check_tensorboard.py" "$here/tensorboard_proto" "$@"; }
events() { ls "$1"/events.out.tfevents.* 2>/dev/null; }

check "the checker's CRC-32C gives the standard check value" \
  "$py" -c "import sys; sys.path.insert(0, '$here'); import check_tensorboard as c; sys.exit(c.crc32c(b'123456789') != 0xE3069283)"

# mlp: 16 steps, a point every 2 steps, histograms every 4.
"$herd" train --model mlp --data synthetic:1,12,12,4,256 --epochs 2 --batch-size 32 --threads 1 \
  --quiet --logdir "$tmp/mlp" --metrics "$tmp/mlp.jsonl" --histograms 4 --log-every 2 >/dev/null 2>"$tmp/err"
check "mlp: train with --logdir exits 0" test $? -eq 0
check "mlp: one file named as TensorBoard looks for it" test "$(events "$tmp/mlp" | wc -l)" -eq 1
ev=$(events "$tmp/mlp")
check "mlp: TensorBoard's schema reads every event; scalars equal the metrics; histograms well formed" \
  tb_check "$ev" "$tmp/mlp.jsonl" --histograms 4

# lenet5 (convolutions) with dynamic loss scaling: the loss_scale scalar too.
"$herd" train --model lenet5 --data synthetic:1,28,28,10,192 --epochs 1 --batch-size 32 --threads 1 \
  --quiet --loss-scale dynamic --logdir "$tmp/lenet" --metrics "$tmp/lenet.jsonl" --histograms 3 \
  --log-every 3 >/dev/null 2>"$tmp/err"
check "lenet5 --loss-scale dynamic: train exits 0" test $? -eq 0
check "lenet5: the metrics carry loss_scale" grep -q '"loss_scale":' "$tmp/lenet.jsonl"
check "lenet5: TensorBoard's schema reads it all, loss_scale included" \
  tb_check "$(events "$tmp/lenet")" "$tmp/lenet.jsonl" --histograms 3

# The checker can fail: a flipped bit, a cut file, a changed value, a missing histogram.
"$py" - "$ev" "$tmp/flipped" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x10
open(sys.argv[2], "wb").write(b)
PY
tb_check "$tmp/flipped" "$tmp/mlp.jsonl" --histograms 4 >/dev/null 2>"$tmp/err"
check "a flipped bit: exit 1 naming the CRC" bash -c "test $? -eq 1 && grep -q 'CRC' '$tmp/err'"
head -c $(( $(stat -c %s "$ev") - 5 )) "$ev" >"$tmp/cut"
tb_check "$tmp/cut" "$tmp/mlp.jsonl" --histograms 4 >/dev/null 2>"$tmp/err"
check "a cut file: exit 1 saying the file ends first" bash -c "test $? -eq 1 && grep -q 'the file ends' '$tmp/err'"
sed '3s/"lr":[0-9.e-]*/"lr":0.25/' "$tmp/mlp.jsonl" >"$tmp/changed.jsonl"
check "(the metrics copy differs)" bash -c "! cmp -s '$tmp/mlp.jsonl' '$tmp/changed.jsonl'"
tb_check "$ev" "$tmp/changed.jsonl" --histograms 4 >/dev/null 2>"$tmp/err"
check "a changed metric: exit 1 naming the line" bash -c "test $? -eq 1 && grep -q 'metrics line 3 ' '$tmp/err'"
tb_check "$ev" "$tmp/mlp.jsonl" --histograms 2 >/dev/null 2>"$tmp/err"
check "histograms missing at the expected steps: exit 1" bash -c "test $? -eq 1 && grep -q 'histograms at steps' '$tmp/err'"

finish
