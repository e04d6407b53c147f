#!/usr/bin/python3
"""herd.torch's training throughput, the PyTorch side of bench/herd_torch.sh: the very
step of bench/torch_reference.py's DDP run (same models, data, shards, SGD, batch),
with herd.torch.DistributedOptimizer in place of DistributedDataParallel. Run on every
rank: herd run -np 2 -- python3 bench/herd_torch.py [--models mlp,lenet5,resnet20]
[--threads 1] [--batch-size 128] [--steps 50] [--warmup 5] [--op Adasum]. Rank 0 prints,
per model:

    model=lenet5 framework=herd.torch ranks=2 threads=1 batch=128 samples_per_s=... step_ms=...
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402 (pins BLAS threads from --threads first)
import herd_torch_models  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import herd.torch as hvd  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,lenet5,resnet20")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)  # torch_reference.py's
    p.add_argument("--data-dir", default=ref.DATA_DIR)
    p.add_argument("--op", default="Average", choices=["Average", "Adasum"])  # DistributedOptimizer's
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    rank, world = hvd.rank(), hvd.size()
    x_train, y_train = ref.load_fashion_mnist(args.data_dir, "train")
    for model in args.models.split(","):
        torch.manual_seed(args.seed)
        net = herd_torch_models.build(model)
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
        opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters(), op=args.op)
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)  # DDP does this at wrap
        gen = torch.Generator().manual_seed(args.seed)  # the same permutation on every rank
        n = len(x_train)

        def shard_batches():
            while True:
                mine = torch.randperm(n, generator=gen)[rank::world]
                for i in range(0, len(mine) - args.batch_size + 1, args.batch_size):
                    yield mine[i:i + args.batch_size]

        def step(idx):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x_train[idx]), y_train[idx])
            loss.backward()  # buckets reduce on herd's thread from here
            opt.step()  # waits for them, then updates
            return loss

        it = shard_batches()
        for _ in range(args.warmup):
            step(next(it))
        hvd.allreduce(torch.zeros(1))  # a barrier
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step(next(it))
        loss = loss.item()
        hvd.allreduce(torch.zeros(1))
        dt = max(hvd.allgather_object(time.perf_counter() - t0))  # the slowest rank's
        if rank == 0:
            op = "" if args.op == "Average" else f" op={args.op}"
            print(f"model={model} framework=herd.torch{op} ranks={world} threads={args.threads} "
                  f"precision=fp32 batch={args.batch_size} "
                  f"samples_per_s={world * args.steps * args.batch_size / dt:.1f} "
                  f"step_ms={1000 * dt / args.steps:.3f} steps={args.steps} warmup={args.warmup} "
                  f"loss={loss:.4f} torch={torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
