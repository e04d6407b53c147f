"""What one blocking herd.torch collective on a small tensor costs, in µs a call: allreduce
of 4 floats, broadcast of 1000, allgather of a row of 4 (medians of 7 repeats of 1000
calls after 200 warm-up calls). Run under herd run -np N; rank 0 prints one line
(bench/herd_torch_agree.sh)."""

import torch

import herd.torch as hvd
from bench_timing import median_ms  # bench/, the script's folder

hvd.init()
torch.set_num_threads(1)
four, thousand, row = torch.ones(4), torch.ones(1000), torch.ones(1, 4)
kinds = [("allreduce_4", lambda: hvd.allreduce(four, op=hvd.Sum)),
         ("broadcast_1000", lambda: hvd.broadcast(thousand, root_rank=0)),
         ("allgather_4", lambda: hvd.allgather(row))]
result = {name: 1e3 * median_ms(fn, calls=1000, repeats=7, warmup=200) for name, fn in kinds}
if hvd.rank() == 0:
    print(f"ranks={hvd.size()} us_a_call: " + " ".join(f"{k}={v:.1f}" for k, v in result.items()),
          flush=True)
