"""A sparse embedding's gradient across ranks (bench/herd_torch_sparse.sh): an
nn.Embedding(VOCAB, 64, sparse=True), the mean of each sample's tokens, a linear head;
each rank BATCH samples of 20 random tokens a step, SGD.
  herd run -np 2 -- python3 bench/herd_torch_sparse.py --dense 0|1   (herd.torch: the rows
      allgathered, Horovod's default; or the table summed in a bucket, sparse_as_dense)
  python3 bench/herd_torch_sparse.py --ddp 2                         (PyTorch DDP over gloo,
      which sums sparse gradients itself)
Prints one line: framework=... vocab=... step_ms=... samples_per_s=..."""
import argparse
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--vocab", type=int, default=200000)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--dense", type=int, default=0)
parser.add_argument("--ddp", type=int, default=0)
args = parser.parse_args()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = torch.nn.Embedding(args.vocab, 64, sparse=True), torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


def run(net, opt, rank, framework, ranks):
    data = torch.Generator().manual_seed(1 + rank)
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            start = time.perf_counter()
        x = torch.randint(0, args.vocab, (args.batch, 20), generator=data)
        y = torch.randint(0, 10, (args.batch,), generator=data)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    step = (time.perf_counter() - start) / args.steps
    if rank == 0:
        print(f"framework={framework} ranks={ranks} vocab={args.vocab} batch={args.batch} "
              f"step_ms={step * 1e3:.3f} samples_per_s={ranks * args.batch / step:.1f}", flush=True)


def ddp_rank(rank, world, port):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    net = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    run(net, opt, rank, "torch-ddp", world)
    dist.destroy_process_group()


if __name__ == "__main__":  # spawn imports this file again in each DDP rank
    if args.ddp:
        import socket
        import torch.multiprocessing as mp
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(ddp_rank, args=(args.ddp, port), nprocs=args.ddp, join=True)
    else:
        import herd.torch as hvd
        hvd.init()
        torch.set_num_threads(1)
        net = Net()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                       named_parameters=net.named_parameters(), sparse_as_dense=bool(args.dense))
        run(net, opt, hvd.rank(), "herd.torch-" + ("dense" if args.dense else "rows"), hvd.size())
