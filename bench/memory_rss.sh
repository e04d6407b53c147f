#!/usr/bin/env bash
# herd's own memory count on one rank against the process's peak resident set: for
# mlp, lenet5 and resnet20 at the default batch (128) on Fashion-MNIST, the summary's
# memory_peak_mib and its breakdown next to the peak RSS (VmHWM: getrusage's ru_maxrss
# as /usr/bin/time reports it), after two baselines: the program started and nothing
# else, and the data set loaded with no model (a model name that does not exist);
# resnet20 again with plain-layout convolutions (HERD_CONV_LAYOUT=plain: no reorder
# buffers). Then widemlp at batch 64 under --memory-limit 300M (refused) and 500M.
#
#   bench/memory_rss.sh [HERD]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${1:-$root/build/herd}")
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
echo "# $(date -u '+%F %T UTC'); $("$herd" --version | head -1)"
echo "## baselines: the program started; the data set loaded (the model name is unknown)"
bench_rss train --help
bench_rss train --model no-such-model
for model in mlp lenet5 resnet20; do
  echo "## $model, fashion-mnist, batch 128, 20 steps, 1 thread, then the test set"
  bench_rss train --model "$model" --max-steps 20 --threads 1
done
echo "## resnet20 as above with plain NCHW convolutions (no reorder buffers; slower)"
HERD_CONV_LAYOUT=plain bench_rss train --model resnet20 --max-steps 20 --threads 1
echo "## widemlp, fashion-mnist, batch 64, 5 steps, 1 thread, under 300M and 500M"
for limit in 300M 500M; do
  bench_rss train --model widemlp --batch-size 64 --max-steps 5 --threads 1 --memory-limit $limit
done
