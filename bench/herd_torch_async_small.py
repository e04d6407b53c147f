"""herd.torch's _async collectives on small tensors (4 N x 8 floats: 1 KiB on 8 ranks) in
Horovod's pattern: 100 started, then each synchronized; medians of 7 after 2 warm-ups. Run
under herd run -np N; rank 0 prints one line (bench/herd_torch_allgather.sh)."""

import torch

import herd.torch as hvd
from bench_timing import median_ms  # bench/, the script's folder

hvd.init()
torch.set_num_threads(1)
N = hvd.size()
small = torch.ones(4 * N, 8)


def many(start):
    def run():
        for h in [start() for _ in range(100)]:
            hvd.synchronize(h)
    return run


kinds = [("allgather_async", lambda: hvd.allgather_async(small)),
         ("reducescatter_async", lambda: hvd.reducescatter_async(small, op=hvd.Sum)),
         ("alltoall_async", lambda: hvd.alltoall_async(small))]
result = {name: median_ms(many(start), repeats=7, warmup=2) for name, start in kinds}
if hvd.rank() == 0:
    print(f"ranks={N} small_async_x100_ms: " + " ".join(f"{k}={v:.3f}" for k, v in result.items()), flush=True)
