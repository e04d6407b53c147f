"""hvd.broadcast_parameters of a model of many tensors (50 blocks of a 3x3 convolution of 64
channels and a batch norm: 350 tensors, 1.9 M parameters, most of them small), from rank
0, and the same tensors as Horovod's own broadcast_parameters sends them: every
broadcast_async_ started, then each synchronized. Run under herd run -np N; rank 0 prints
the medians of 10 calls after 2 warm-up calls (bench/herd_torch_broadcast.sh)."""

import torch

import herd.torch as hvd
from bench_timing import median_ms  # bench/, the script's folder

hvd.init()
torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3), torch.nn.BatchNorm2d(64))
                              for _ in range(50)])
state = model.state_dict()


def queued():
    for h in [hvd.broadcast_async_(t, root_rank=0) for t in state.values()]:
        hvd.synchronize(h)


blocking = median_ms(lambda: hvd.broadcast_parameters(state, root_rank=0), repeats=10, warmup=2)
started = median_ms(queued, repeats=10, warmup=2)
if hvd.rank() == 0:
    print(f"ranks={hvd.size()} tensors={len(state)} parameters={sum(t.numel() for t in state.values())} "
          f"broadcast_parameters_ms={blocking:.3f} broadcast_async_all_ms={started:.3f}", flush=True)
