"""hvd.allreduce with op=hvd.Adasum against op=hvd.Sum of the same float32 tensor (MIB MiB,
split into tensors of 1 MiB: Adasum's coefficients are per tensor), and the same through
grouped_allreduce. Run under herd run -np N; rank 0 prints one line of medians of 5
repeats of CALLS calls, after 3 warm-up calls, in ms (bench/herd_torch_adasum.sh)."""
import argparse

import torch

import herd.torch as hvd
from bench_timing import median_ms  # bench/, the script's folder

p = argparse.ArgumentParser()
p.add_argument("--mib", type=float, default=16)
p.add_argument("--calls", type=int, default=10)
a = p.parse_args()
hvd.init()
torch.set_num_threads(1)
R, N = hvd.rank(), hvd.size()
n = int(a.mib * 2 ** 18)
whole = torch.randn(n, generator=torch.Generator().manual_seed(R))
parts = list(whole.split(2 ** 18))


sum_ms = median_ms(lambda: hvd.allreduce_(whole, op=hvd.Sum), a.calls, warmup=3)
adasum_ms = median_ms(lambda: hvd.grouped_allreduce_(parts, op=hvd.Adasum), a.calls, warmup=3)
one_ms = median_ms(lambda: hvd.allreduce_(whole, op=hvd.Adasum), a.calls, warmup=3)
if R == 0:
    print(f"ranks={N} mib={a.mib:g} sum_ms={sum_ms:.3f} adasum_grouped_ms={adasum_ms:.3f} "
          f"adasum_one_tensor_ms={one_ms:.3f} adasum/sum={adasum_ms / sum_ms:.2f}", flush=True)
