"""hvd.allgather of rows that differ by rank (rank r gives ROWS + r rows of 64 floats), and
hvd.allgather_async behind a stretch of computation. Run under herd run -np N; rank 0
prints one line: the blocking allgather's time, the computation's alone, and the two
overlapped (allgather_async, the computation, synchronize), medians of 5 repeats of 100
(20 for the overlap) after 20 warm-up calls (bench/herd_torch_allgather.sh)."""
import argparse

import torch

import herd.torch as hvd
from bench_timing import median_ms  # bench/, the script's folder

p = argparse.ArgumentParser()
p.add_argument("--rows", type=int, default=1000)
p.add_argument("--overlap-rows", type=int, default=8192)  # 2 MiB a rank for the overlap
a = p.parse_args()
hvd.init()
torch.set_num_threads(1)
R, N = hvd.rank(), hvd.size()


t = torch.ones(a.rows + R, 64)
for _ in range(20):
    hvd.allgather(t)
blocking = median_ms(lambda: hvd.allgather(t), 100)
big, x = torch.ones(a.overlap_rows + R, 64), torch.randn(256, 256)


def compute():
    for _ in range(8):
        torch.mm(x, x)


gather_big = median_ms(lambda: hvd.allgather(big), 20)
alone = median_ms(compute, 20)


def overlapped():
    h = hvd.allgather_async(big)
    compute()
    hvd.synchronize(h)


both = median_ms(overlapped, 20)
if R == 0:
    print(f"ranks={N} rows={a.rows} allgather_ms={blocking:.4f} big_allgather_ms={gather_big:.4f} "
          f"compute_ms={alone:.4f} async_plus_compute_ms={both:.4f}", flush=True)
