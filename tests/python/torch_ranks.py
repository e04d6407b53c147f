"""Run by test_torch.py on every rank (under the launcher) or alone: OUT MODE [ARGS]
[+ MODE [ARGS] ...], the modes one after another in one process (each launch imports
PyTorch, 1.5 to 2 CPU-s a rank on the project's machine).
train PASSES COMPRESSION [DEVICE]: a PyTorch CNN trained 20 steps with herd.torch on
  global batches of 24 (each rank its shard), on the CPU or (DEVICE cuda) the GPU of the
  rank's local rank; rank 0 saves the weights to OUT/weights-N-PASSES-COMPRESSION[-cuda].pt.
syncbn SYNC [DEVICE]: a CNN with batch norm trained 10 steps on global batches of 24 (each
  rank its shard), its batch norms turned into hvd.SyncBatchNorm (SYNC 1) or left torch's
  (0: each rank normalises its own shard), on the CPU or (DEVICE cuda) the rank's GPU;
  rank 0 saves OUT/weights-syncbn-N-SYNC[-cuda].pt.
contrastive GRAD: a contrastive loss over every rank's features (hvd.allgather) trained 10
  steps on global batches of 24, the gradient through the allgather (GRAD 1) or not (0:
  the gathered features detached); rank 0 saves OUT/weights-contrastive-N-GRAD.pt.
sampler PHASE: hvd.elastic.ElasticSampler over 50 indices (batches of 4, a commit every 2
  batches) under hvd.elastic.run with TorchState(train_sampler=...): PHASE first stops
  after 5 batches (the last commit after 4); PHASE resume (relaunched, on any number of
  ranks) goes through what is left of the epoch; rank 0 writes what the commit held and
  what every rank processed to OUT/sampler-PHASE.json.
sparse DENSE: an nn.Embedding with sparse gradients and a linear head trained 10 steps on
  global batches of 24 with SGD, DistributedOptimizer(sparse_as_dense=DENSE: the table in
  a bucket; 0: its rows allgathered from the second step on); rank 0 saves
  OUT/weights-sparse-N-DENSE.pt; then one step of SparseAdam (DENSE 0), which takes only
  sparse gradients.
collectives: Horovod's collectives checked exactly on every rank; prints "ok: <check>".
process_sets: Horovod's process sets (the even ranks, the odd ones): every collective,
  its gradient and DistributedOptimizer within a set checked exactly, the two sets side
  by side; bad calls refused on every rank; prints "ok: <check>".
join K: uneven data: rank r trains 6 - r steps of 8 samples (the CNN, SGD with momentum),
  allreducing its loss, allgathering a row and running a SyncBatchNorm (statistics of the
  ranks still training, checked) each step, then calls hvd.join(), which must
  name rank 0 (the last to join), whose parameters it then broadcasts; one process (N 1)
  simulates K ranks: each step the mean over K of the gradients of the ranks still
  training. Rank 0 saves OUT/weights-join-of-K.pt.
join_timeline: the last rank joins early while rank 0's DistributedOptimizer writes the
  timeline (every 100 steps, a collective): the joined rank takes part.
unjoined: hvd.join() in a job started without join: refused on every rank, saying how.
join_refused: the last rank joins at once; the others' broadcast raises on them and in the
  joined rank's join(), naming the reason; then every rank sums once more, in step.
adasum: Horovod's Adasum (allreduce and DistributedOptimizer) against the tree folded here.
cuda_collectives: the same on CUDA tensors (float32 summed in GPU memory by herd, the
  rest through host memory).
mismatch: ranks starting different allreduces, broadcasts, allgathers: each raises on every
  rank (a job without join).
rewrap: a DistributedOptimizer built twice over one model (the second takes over).
shutdown: hvd.shutdown(), then herd's calls raise (the last mode of a job).
raise: rank 1 raises before a collective the others are in.
stall: rank 1 sleeps outside any collective (HERD_COMM_TIMEOUT ends the job).
elastic KILL: the CNN trained 20 steps under hvd.elastic.run, committing every 5 to
  OUT/state; with KILL 1 rank 1 kills itself at step 7 of the first attempt (herd run
  --max-restarts relaunches the job); rank 0 saves the weights to OUT/elastic.pt."""
import os
import signal
import sys
import time

import torch

import herd
import herd.torch as hvd

out = sys.argv[1]
tasks = [task.split() for task in " ".join(sys.argv[2:]).split(" + ")]
# A job with a join mode announces its collectives (hvd.init(join=True)): every mode of it then
# runs with the announcements.
hvd.init(comm_timeout=None if tasks[0][0] == "stall" else 120, join=any(t[0].startswith("join") for t in tasks))
torch.set_num_threads(1)
N, R = hvd.size(), hvd.rank()


def model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(8 * 3 * 3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))


def ok(what):
    print(f"ok: {what}", flush=True)


def raises_each(cases):
    """Each (call, message): the call raises herd's error, carrying message."""
    for call, message in cases:
        try:
            call()
            raise AssertionError(f"no error: {message}")
        except hvd.HerdError as e:
            assert message in str(e), (message, str(e))


def gpu():
    """This rank's GPU (ranks beyond the GPUs share them), made PyTorch's current one."""
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    torch.backends.cudnn.deterministic = True  # one summation order: only the sums differ
    return dev


def train(passes, compression, device="cpu"):
    dev = gpu() if device == "cuda" else torch.device("cpu")
    torch.manual_seed(100 + R)  # different on every rank: broadcast_parameters makes them one
    net = model().to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters(),
                                   compression=compression, backward_passes_per_step=passes,
                                   bucket_mb=0.001)  # several buckets for a small model
    torch.manual_seed(100)
    reference = model().to(dev)
    net.load_state_dict(reference.state_dict()) if R == 0 else None
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    data = torch.Generator().manual_seed(7)
    for step in range(20):
        x = torch.randn(24, 1, 12, 12, generator=data).to(dev)
        y = torch.randint(0, 5, (24,), generator=data).to(dev)
        per = 24 // N
        xs, ys = x[R * per:(R + 1) * per], y[R * per:(R + 1) * per]
        opt.zero_grad()
        micro = per // passes
        for k in range(passes):
            part = slice(k * micro, (k + 1) * micro)
            loss = torch.nn.functional.cross_entropy(net(xs[part]), ys[part]) / passes
            loss.backward()
        opt.step()
    if R == 0:
        suffix = "-cuda" if device == "cuda" else ""
        torch.save({k: v.cpu() for k, v in net.state_dict().items()},
                   f"{out}/weights-{N}-{passes}-{compression}{suffix}.pt")
    print(f"rank {R}: trained {N} ranks on {dev}")


def syncbn(sync, device="cpu"):
    dev = gpu() if device == "cuda" else torch.device("cpu")
    torch.manual_seed(100)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.BatchNorm2d(8, momentum=None), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
        torch.nn.Linear(16, 5)).to(dev)
    if sync:
        net = hvd.SyncBatchNorm.convert_sync_batchnorm(net)
        assert sum(isinstance(m, hvd.SyncBatchNorm) for m in net.modules()) == 3
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=net.named_parameters())
    data = torch.Generator().manual_seed(11)
    for step in range(10):
        x = (torch.randn(24, 1, 12, 12, generator=data) * 2 + 0.5).to(dev)
        y = torch.randint(0, 5, (24,), generator=data).to(dev)
        per = 24 // N
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[R * per:(R + 1) * per]), y[R * per:(R + 1) * per]).backward()
        opt.step()
    net.eval()  # the running statistics, the same on every rank when synchronised
    logits = net(torch.randn(4, 1, 12, 12, generator=data).to(dev))
    if sync:
        assert torch.equal(hvd.broadcast(logits, root_rank=0), logits), "ranks disagree in eval"
    if R == 0:
        suffix = "-cuda" if device == "cuda" else ""
        torch.save({k: v.cpu() for k, v in net.state_dict().items()},
                   f"{out}/weights-syncbn-{N}-{sync}{suffix}.pt")
    print(f"rank {R}: syncbn {sync} on {N} ranks, {dev}")


def contrastive(through):
    torch.manual_seed(100)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(36, 16), torch.nn.Tanh(),
                              torch.nn.Linear(16, 8))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=net.named_parameters())
    data = torch.Generator().manual_seed(5)
    for step in range(10):
        x = torch.randn(24, 1, 6, 6, generator=data)
        per = 24 // N
        opt.zero_grad()
        f = net(x[R * per:(R + 1) * per])
        every = hvd.allgather(f if through else f.detach())  # all 24 rows, in rank order
        logits = f @ every.t()  # this rank's rows of the 24 x 24 similarities
        torch.nn.functional.cross_entropy(logits, torch.arange(R * per, (R + 1) * per)).backward()
        opt.step()
    if R == 0:
        torch.save(net.state_dict(), f"{out}/weights-contrastive-{N}-{through}.pt")
    print(f"rank {R}: contrastive {through} on {N} ranks")


def sampler(phase):
    import json
    data = torch.utils.data.TensorDataset(torch.arange(50))
    share = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=share)
    state = hvd.elastic.TorchState(checkpoint_dir=f"{out}/sampler-state", train_sampler=share, batch=0)
    seen = []

    @hvd.elastic.run
    def loop(state):
        committed = sorted(share.processed_indices)  # after the resume: what the commit held
        for batch, (idx,) in enumerate(loader):
            seen.extend(idx.tolist())
            share.record_batch(batch, 4)
            state.batch += 1
            if state.batch % 2 == 0:
                state.commit()
            if phase == "first" and state.batch == 5:
                break
        return committed

    committed = loop(state)
    every = hvd.allgather_object(seen)
    if R == 0:
        with open(f"{out}/sampler-{phase}.json", "w") as f:
            json.dump({"committed": committed, "seen": every, "ranks": N}, f)


def sparse(dense):
    torch.manual_seed(100)
    emb, head = torch.nn.Embedding(20, 4, sparse=True), torch.nn.Linear(4, 3)
    net = torch.nn.ModuleDict({"emb": emb, "head": head})
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.5),
                                   named_parameters=net.named_parameters(), sparse_as_dense=bool(dense))
    data = torch.Generator().manual_seed(9)
    for step in range(10):
        tokens = torch.randint(0, 20, (24, 5), generator=data)
        y = torch.randint(0, 3, (24,), generator=data)
        per = 24 // N
        opt.zero_grad()
        logits = head(emb(tokens[R * per:(R + 1) * per]).mean(1))
        torch.nn.functional.cross_entropy(logits, y[R * per:(R + 1) * per]).backward()
        opt.step()
        assert N == 1 or emb.weight.grad.is_sparse == (not dense), emb.weight.grad.layout
        # The first step found the sparse gradient: from the next on its rows travel by
        # allgather (sparse_as_dense: the table in a bucket).
        assert N == 1 or ([id(p) for p in opt._gathered] == [id(emb.weight)]) == (not dense), step
    if R == 0:
        torch.save(net.state_dict(), f"{out}/weights-sparse-{N}-{dense}.pt")
    if not dense:
        adam = hvd.DistributedOptimizer(torch.optim.SparseAdam([emb.weight], lr=0.01),
                                        named_parameters=[("emb.weight", emb.weight)])
        adam.zero_grad()
        emb(tokens[R * per:(R + 1) * per]).sum().backward()
        adam.step()
        if N > 1:  # the embedding made dense after its rows were gathered: refused, named
            opt.step()  # takes in the gradient SparseAdam's backward gave it too
            emb.sparse = False
            opt.zero_grad()
            head(emb(tokens[R * per:(R + 1) * per]).mean(1)).sum().backward()
            try:
                opt.step()
                raise AssertionError("a dense gradient went where rows were gathered")
            except hvd.HerdError as e:
                assert "gradient of emb.weight is dense on rank" in str(e), str(e)
    print(f"rank {R}: sparse {dense} on {N} ranks")


def collectives():
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        t = torch.full((5,), float(R + 1), dtype=dtype)
        s = hvd.allreduce(t, op=hvd.Sum)
        assert torch.equal(s, torch.full((5,), float(N * (N + 1) // 2), dtype=dtype)), (dtype, s)
        a = hvd.allreduce(t)  # Average
        assert torch.allclose(a.double(), torch.full((5,), (N + 1) / 2, dtype=torch.float64)), (dtype, a)
        assert torch.equal(t, torch.full((5,), float(R + 1), dtype=dtype))  # a copy
    ok("allreduce sum and average, 4 dtypes")
    for dtype in (torch.int32, torch.int64):  # counts: summed exactly, as float64 under a bound
        big = 2 ** 28 if dtype == torch.int32 else 2 ** 50
        s = hvd.allreduce(torch.tensor([R + 1, -3 * R, big + R], dtype=dtype), op=hvd.Sum)
        assert s.dtype == dtype and s.tolist() == [N * (N + 1) // 2, -3 * N * (N - 1) // 2,
                                                   N * big + N * (N - 1) // 2], (dtype, s)
    ok("allreduce of int32 and int64 counts")
    handles = [hvd.allreduce_async(torch.full((1000,), float(R * 10 + i))) for i in range(4)]
    for i, h in enumerate(handles):
        got = hvd.synchronize(h)
        assert torch.allclose(got, torch.full((1000,), sum(r * 10 + i for r in range(N)) / N)), i
    ok("async handles in order")
    t = torch.full((3,), 1.0 + R)
    hvd.allreduce_(t, op=hvd.Sum)
    assert torch.equal(t, torch.full((3,), float(N * (N + 1) // 2)))
    ok("allreduce in place")
    c = hvd.allreduce(torch.full((64,), 0.1 * (R + 1)), compression=hvd.Compression.fp16)
    assert torch.allclose(c, torch.full((64,), 0.1 * (N + 1) / 2), rtol=1e-3), c
    ok("fp16 compression")
    g = hvd.allgather(torch.full((R + 1, 2), float(R)))
    assert g.shape == (N * (N + 1) // 2, 2)
    assert g[:, 0].tolist() == [float(r) for r in range(N) for _ in range(r + 1)]
    h = hvd.allgather_async(torch.full((R + 1, 3), R, dtype=torch.int8), name="async rows")  # 3-byte rows
    big = hvd.allgather_async(torch.full((R + 1, 50000), float(R)), name="queued rows")  # past 256 KiB: queued
    behind = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)  # queued after them, waited for first
    assert torch.equal(hvd.synchronize(behind), torch.full((2,), float(N)))
    got = hvd.synchronize(h)
    assert got.dtype == torch.int8 and got[:, 2].tolist() == [r for r in range(N) for _ in range(r + 1)], got
    got = hvd.synchronize(big)
    assert torch.equal(got, torch.cat([torch.full((r + 1, 50000), float(r)) for r in range(N)]))
    none_here = hvd.synchronize(hvd.allgather_async(torch.ones(0 if R == 0 else 2, dtype=torch.float64)))
    assert none_here.tolist() == [1.0] * (2 * (N - 1)), none_here
    ok("allgather of different row counts")
    b = hvd.broadcast(torch.full((4,), float(R)), root_rank=N - 1)
    assert torch.equal(b, torch.full((4,), float(N - 1)))
    ok("broadcast from the last rank")
    assert hvd.broadcast_object({"from": R}, root_rank=1) == {"from": 1}
    assert hvd.allgather_object(("r", R)) == [("r", r) for r in range(N)]
    ok("objects")
    assert hvd.local_size() == N and hvd.local_rank() == R
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0 and hvd.is_homogeneous()  # one host
    ok("local size")
    group = [torch.full((3,), float(R + 1)), torch.full((2, 2), 10.0 * R, dtype=torch.float64)]
    sums = hvd.grouped_allreduce(group, op=hvd.Sum)
    assert torch.equal(sums[0], torch.full((3,), float(N * (N + 1) // 2))), sums
    assert torch.equal(sums[1], torch.full((2, 2), 10.0 * N * (N - 1) / 2, dtype=torch.float64)), sums
    assert torch.equal(group[0], torch.full((3,), float(R + 1)))  # copies
    h = hvd.grouped_allreduce_async_(group)  # Average, in place
    assert hvd.synchronize(h)[0] is group[0] and hvd.poll(h)
    assert torch.allclose(group[1], torch.full((2, 2), 10.0 * (N - 1) / 2, dtype=torch.float64)), group
    ok("grouped allreduce")
    hvd.barrier()
    ok("barrier")
    for rows in (2 * N + 1, N - 1):  # one row more for the first ranks; none for the last
        per = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
        first = sum(per[:R])
        for dtype in (torch.float32, torch.float64, torch.int64):
            base = torch.arange(rows * 3, dtype=dtype).reshape(rows, 3)
            got = hvd.reducescatter(base * (R + 1), op=hvd.Sum)
            assert torch.equal(got, (base * (N * (N + 1) // 2))[first:first + per[R]]), (rows, dtype, got)
        mean = hvd.synchronize(hvd.reducescatter_async(torch.full((rows, 2), float(R))))
        assert torch.allclose(mean, torch.full((per[R], 2), (N - 1) / 2)), mean
    h32 = hvd.reducescatter_async(torch.full((2 * N, 3), float(R + 1)), op=hvd.Sum)
    h64 = hvd.reducescatter_async(torch.full((N, 1), R + 1, dtype=torch.int64), op=hvd.Sum, name="ints")
    behind = hvd.allreduce_async(torch.ones(1), op=hvd.Sum)  # queued after them, waited for first
    assert hvd.synchronize(behind).item() == N
    assert torch.equal(hvd.synchronize(h64), torch.full((1, 1), N * (N + 1) // 2, dtype=torch.int64))
    assert torch.equal(hvd.synchronize(h32), torch.full((2, 3), float(N * (N + 1) // 2)))
    ok("reducescatter")
    sent = [d + R for d in range(N)]  # rank R sends d + R rows to rank d
    parcels = torch.cat([torch.full((sent[d], 2), float(100 * R + d)) for d in range(N)])
    out, received = hvd.alltoall(parcels, splits=sent)
    assert received.tolist() == [r + R for r in range(N)], received
    assert torch.equal(out, torch.cat([torch.full((r + R, 2), float(100 * r + R)) for r in range(N)])), out
    even = hvd.synchronize(hvd.alltoall_async(torch.arange(2 * N, dtype=torch.float64).reshape(2 * N, 1) + 10 * R))
    assert even.flatten().tolist() == [float(10 * r + 2 * R + i) for r in range(N) for i in range(2)], even
    h = hvd.alltoall_async(parcels, splits=sent)
    behind = hvd.allreduce_async(torch.ones(1), op=hvd.Sum)  # queued after it, waited for first
    assert hvd.synchronize(behind).item() == N
    again, received_again = hvd.synchronize(h)
    assert torch.equal(again, out) and torch.equal(received_again, received), (again, received_again)
    ok("alltoall")
    gathered, scattered = (hvd.grouped_allgather([torch.full((1, 2), float(R)), torch.full((R + 1,), 1.0)]),
                           hvd.grouped_reducescatter([torch.ones(N, 3), torch.ones(2 * N)], op=hvd.Sum))
    assert gathered[0][:, 0].tolist() == [float(r) for r in range(N)] and gathered[1].numel() == N * (N + 1) // 2
    assert torch.equal(scattered[0], torch.full((1, 3), float(N))) and torch.equal(scattered[1], torch.full((2,), float(N)))
    ok("grouped allgather and reducescatter")
    # Gradients through the collectives, for the sum of every rank's loss (exact values).
    w = [torch.arange(6, dtype=torch.float64).reshape(2, 3) + 10 * r for r in range(N)]
    x = torch.full((2, 3), float(R + 1), dtype=torch.float64, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * w[R]).sum().backward()
    assert torch.equal(x.grad, sum(w)), x.grad
    x.grad = None
    (hvd.allreduce(x) * w[R]).sum().backward()  # Average: the mean of the gradients
    assert torch.allclose(x.grad, sum(w) / N), x.grad
    total = N * (N + 1) // 2  # rank r gives r + 1 rows
    xg = torch.ones(R + 1, 2, requires_grad=True)
    big = [torch.arange(total * 2, dtype=torch.float32).reshape(total, 2) * (r + 1) for r in range(N)]
    (hvd.allgather(xg) * big[R]).sum().backward()
    assert torch.equal(xg.grad, sum(big)[R * (R + 1) // 2:(R + 1) * (R + 2) // 2]), xg.grad
    xb = torch.full((3,), float(R), requires_grad=True)
    (hvd.broadcast(xb, root_rank=N - 1) * (R + 1)).sum().backward()
    assert torch.equal(xb.grad, torch.full((3,), float(total)) if R == N - 1 else torch.zeros(3)), xb.grad
    rows = 2 * N + 1
    per = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    xr = torch.ones(rows, 2, requires_grad=True)
    (hvd.reducescatter(xr, op=hvd.Sum) * (R + 1)).sum().backward()
    assert torch.equal(xr.grad, torch.cat([torch.full((per[r], 2), float(r + 1)) for r in range(N)])), xr.grad
    xa = parcels.clone().requires_grad_()
    (hvd.alltoall(xa, splits=torch.tensor(sent))[0] * (R + 1)).sum().backward()
    assert torch.equal(xa.grad, torch.cat([torch.full((sent[d], 2), float(d + 1)) for d in range(N)])), xa.grad
    ok("gradients through allreduce, allgather, broadcast, reducescatter and alltoall")
    raises_each([
        (lambda: hvd.allreduce(torch.ones(3, dtype=torch.int16)), "int16 tensors are not reduced"),
        (lambda: hvd.allreduce(torch.ones(3, dtype=torch.int64)), "int64 tensors are summed (op=Sum"),
        (lambda: hvd.allreduce(torch.tensor([2 ** 53 // N + 1]), op=hvd.Sum), "sums may pass 2^53"),
        (lambda: hvd.allreduce(torch.tensor([2 ** 31 - 1], dtype=torch.int32), op=hvd.Sum),
         "does not fit torch.int32"),
        (lambda: hvd.broadcast(torch.ones(3), root_rank=N), f"broadcast from root rank {N}, but the job has ranks 0..{N - 1}"),
        (lambda: hvd.allgather(torch.ones(2, R + 1)), "only the first dimension may differ"),
        (lambda: hvd.reducescatter(torch.ones(R + 1, 2)), "every rank gives the same shape and dtype"),
        (lambda: hvd.alltoall(torch.ones(N + 1, 2)), f"{N + 1} rows do not split equally over {N} ranks"),
        (lambda: hvd.allreduce(torch.tensor([-2 ** 63 if R == 0 else 3]), op=hvd.Sum), "sums may pass 2^53"),
        (lambda: hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum), "give op= or the older average="),
        # Broadcasts that differ between ranks (described with join on too).
        (lambda: hvd.broadcast(torch.ones(3), root_rank=R), "another root rank"),
        (lambda: hvd.broadcast(torch.ones(3 if R == 0 else 5), root_rank=0), "another number of elements"),
    ])
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)))  # still in step
    ok("bad calls raise herd's message on every rank")
    min_max_product()


def min_max_product():
    """Horovod's Min, Max and Product against every rank's values stacked here."""
    def mine(r, dtype):
        v = torch.tensor([(r * 3 + i * 5) % 7 - 3 for i in range(12)], dtype=torch.float64)
        if dtype == torch.bool:
            return (v + r) % 2 == 0
        if dtype.is_floating_point:
            v = torch.ldexp(torch.sign(v) + (v == 0), (v.abs() % 3 - 1).to(torch.int64))  # exact products
            v[0] = float("nan") if r == N - 1 else v[0]
            v[1] = float("-inf") if r == 0 else v[1]
        elif dtype == torch.uint8:
            v = v + 3
        else:
            v = v.clamp(-1, 2)  # int8 products of up to 6 ranks fit
        return v.to(dtype)
    folds = {hvd.Min: lambda s: s.amin(0), hvd.Max: lambda s: s.amax(0), hvd.Product: lambda s: s.prod(0)}
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
                  torch.int16, torch.int32, torch.int64, torch.bool):
        every = torch.stack([mine(r, dtype) for r in range(N)])
        wide = every.float() if dtype in (torch.float16, torch.bfloat16) else every
        for op, fold in folds.items():
            want = (fold(wide.to(torch.uint8)) != 0) if dtype == torch.bool else fold(wide).to(dtype)
            got = hvd.allreduce(mine(R, dtype), op=op)
            assert got.dtype == dtype and torch.equal(got.isnan(), want.isnan()), (dtype, op, got, want)
            assert torch.equal(got.nan_to_num(), want.nan_to_num()), (dtype, op, got, want)
    ok("allreduce Min, Max and Product, 10 dtypes (a NaN on one rank wins)")
    t = mine(R, torch.float32)
    hvd.allreduce_(t, op=hvd.Max)
    h = hvd.allreduce_async(mine(R, torch.int32), op=hvd.Min, name="async min")
    scaled = hvd.allreduce(torch.full((3,), float(R + 1)), op=hvd.Max, prescale_factor=-1.0, postscale_factor=2.0)
    group = hvd.grouped_allreduce([torch.full((2,), float(R)), torch.full((1,), R + 2)], op=hvd.Product)
    assert torch.equal(t.nan_to_num(), hvd.allreduce(mine(R, torch.float32), op=hvd.Max).nan_to_num())
    assert torch.equal(hvd.synchronize(h), torch.stack([mine(r, torch.int32) for r in range(N)]).amin(0))
    assert torch.equal(scaled, torch.full((3,), -2.0)), scaled  # 2 x max(-1 x (r + 1))
    want = 1
    for r in range(N):
        want *= r + 2
    assert group[0].tolist() == [0.0, 0.0] and group[1].tolist() == [want], group
    ok("Min, Max and Product in place, async, scaled and grouped")
    # Gradients: each rank's loss on the result, summed, as one process's autograd of the stack.
    w = [torch.arange(4, dtype=torch.float64) + r for r in range(N)]
    values = [torch.tensor([1.0 + r, 2.0, 0.0 if r < 2 else 3.0, 0.5 * (r + 1)], dtype=torch.float64)
              for r in range(N)]
    for op, fold in folds.items():
        x = values[R].clone().requires_grad_()
        (hvd.allreduce(x, op=op, prescale_factor=2.0) * w[R]).sum().backward()
        ref = [v.clone().requires_grad_() for v in values]
        y = fold(torch.stack(ref) * 2.0)
        sum((y * w[r]).sum() for r in range(N)).backward()
        assert torch.allclose(x.grad, ref[R].grad), (op, x.grad, ref[R].grad)
    ok("gradients through Min (ties shared), Max and Product (zeros included)")
    raises_each([
        (lambda: hvd.allreduce(torch.tensor([2 ** 20], dtype=torch.int32) * (R + 2), op=hvd.Product),
         "does not fit torch.int32"),
        (lambda: hvd.allreduce(torch.tensor([2 ** 62 // (R + 1)]), op=hvd.Product), "does not fit torch.int64"),
        (lambda: hvd.allreduce(torch.ones(2), op=hvd.Max, compression=hvd.Compression.fp16),
         "compression applies to sums and means, not op=Max"),
        (lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Min, prescale_factor=2.0),
         "scale factors apply to floating-point tensors"),
        (lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64), op=hvd.Max), "have no Max in herd"),
        (lambda: hvd.reducescatter(torch.ones(N, 2), op=hvd.Max), "(Min, Max, Product and Adasum: allreduce alone)"),
    ])
    ok("Min, Max and Product: bad calls raise herd's message on every rank")


def adasum_tree(vectors, counts, rounded=None):
    """Horovod's Adasum of the ranks' flat vectors, per tensor of counts, in one process:
    ranks P + i into rank i (P the largest power of two <= N), then pairs by bit 0, pairs of
    pairs by bit 1, ...; each combination rounded to `rounded` when given, as herd keeps
    the values in their type between the tree's levels."""
    v = [x.to(torch.float64).clone() for x in vectors]
    def pair(a, b):
        out, at = [], 0
        for n in counts:
            x, y = a[at:at + n], b[at:at + n]
            dot, aa, bb = float(x @ y), float(x @ x), float(y @ y)
            ca, cb = (1 - dot / (2 * aa) if aa > 0 else 1.0), (1 - dot / (2 * bb) if bb > 0 else 1.0)
            out.append(ca * x + cb * y)
            at += n
        r = torch.cat(out)
        return r.to(rounded).to(torch.float64) if rounded is not None else r
    p = 1
    while p * 2 <= len(v):
        p *= 2
    for i in range(len(v) - p):
        v[i] = pair(v[i], v[i + p])
    bit = 1
    while bit < p:
        for r in range(p):
            if not r & bit:
                v[r] = pair(v[r], v[r | bit])
        bit *= 2
    return v[0]


def adasum():
    """Horovod's Adasum (op=hvd.Adasum) against the tree folded here over every rank's values."""
    def mine(r, n, dtype=torch.float64):
        i = torch.arange(n, dtype=torch.float64)
        return (torch.sin(0.37 * i + 1.3) + 0.6 * torch.cos(1.7 * i * (r + 1) + r)).to(dtype)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-6)):
        want = adasum_tree([mine(r, 50, dtype) for r in range(N)], [50], dtype)
        got = hvd.allreduce(mine(R, 50, dtype).reshape(5, 10), op=hvd.Adasum)
        assert got.shape == (5, 10) and got.dtype == dtype, got
        assert float((got.reshape(-1) - want).abs().max()) < tol, (dtype, got, want)
    sums = sum(mine(r, 50) for r in range(N))
    assert float((got.reshape(-1).double() - sums).abs().min()) > 0 or N == 1  # neither the sum
    assert float((got.reshape(-1).double() - sums / N).abs().max()) > 1e-3  # nor the mean
    a, b = mine(R, 7), mine(R + 10, 40).reshape(8, 5)
    group = hvd.grouped_allreduce([a, b], op=hvd.Adasum)
    want = adasum_tree([torch.cat([mine(r, 7), mine(r + 10, 40)]) for r in range(N)], [7, 40])
    assert float((torch.cat([group[0], group[1].reshape(-1)]) - want).abs().max()) < 1e-12, (group, want)
    alone = hvd.allreduce(b, op=hvd.Adasum)  # a tensor's own coefficients, grouped or not
    assert float((alone - group[1]).abs().max()) < 1e-12
    small = hvd.grouped_allreduce([a[:3], b[1]], op=hvd.Adasum)  # in the first group's staging buffer
    want = adasum_tree([torch.cat([mine(r, 3), mine(r + 10, 40).reshape(8, 5)[1]]) for r in range(N)], [3, 5])
    assert float((torch.cat(small) - want).abs().max()) < 1e-12, (small, want)
    ok("allreduce and grouped_allreduce with op=Adasum: the tree's values, per tensor")
    x = mine(R, 30, torch.float32)
    hvd.allreduce_(x, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25)
    want = adasum_tree([mine(r, 30, torch.float32) * 2.0 for r in range(N)], [30], torch.float32) * 0.25
    assert float((x.double() - want).abs().max()) < 1e-6, (x, want)
    h = hvd.allreduce_async(mine(R, 30), op=hvd.Adasum, name="async adasum")
    s = hvd.allreduce_async(torch.ones(3), op=hvd.Sum)  # queued behind it
    assert torch.equal(hvd.synchronize(s), torch.full((3,), float(N)))
    assert float((hvd.synchronize(h) - adasum_tree([mine(r, 30) for r in range(N)], [30])).abs().max()) < 1e-12
    # 16 bits: equal vectors are their own Adasum; a rank of zeros changes nothing.
    for dtype in (torch.float16, torch.bfloat16):
        v = torch.ldexp(torch.tensor([1.0, -1.5, 0.75, 3.0, -0.125]), torch.tensor([0, 1, -2, 3, 0])).to(dtype)
        assert torch.equal(hvd.allreduce(v, op=hvd.Adasum), v), dtype
        part = v if R < N - 1 else torch.zeros_like(v)
        assert torch.equal(hvd.allreduce(part, op=hvd.Adasum), v), dtype
    c = hvd.allreduce(mine(R, 40, torch.float32), op=hvd.Adasum, compression=hvd.Compression.fp16)
    want = adasum_tree([mine(r, 40, torch.float32) for r in range(N)], [40])
    assert c.dtype == torch.float32 and float((c.double() - want).abs().max()) < 1e-2, (c, want)
    ok("Adasum in place, scaled, async, in float16 and bfloat16, and compressed")
    raises_each([
        (lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum), "Adasum combines float32"),
        (lambda: hvd.allreduce(torch.ones(3, requires_grad=True), op=hvd.Adasum), "not differentiable"),
        (lambda: hvd.allreduce(torch.ones(3, dtype=torch.float64), op=hvd.Adasum, compression=hvd.Compression.fp16),
         "compression applies to float32 tensors"),
        (lambda: hvd.reducescatter(torch.ones(N, 2), op=hvd.Adasum), "Min, Max, Product and Adasum: allreduce alone"),
    ])
    ok("Adasum: bad calls raise herd's message on every rank")
    worst = adasum_training("none", 1, 8)
    ok(f"DistributedOptimizer(op=Adasum): one process's replicas within {worst:.1e}")
    worst = adasum_training("fp16", 2, 3)
    ok(f"DistributedOptimizer(op=Adasum), fp16 compression and 2 passes a step: within {worst:.1e}")


def adasum_training(compression, passes, steps):
    """DistributedOptimizer(op=Adasum): each rank steps SGD with momentum on its own shard's
    gradient (accumulated over `passes` backward passes); the parameters' changes combine
    by Adasum, per tensor. One process here does the same with N replicas, each keeping
    its own optimizer state; the largest difference of the weights after `steps` steps,
    checked (with compression the changes travel in 16 bits: within 1e-4, and not 0)."""
    torch.manual_seed(100)
    net = model()
    replicas = [model() for _ in range(N)]
    for rep in replicas:
        rep.load_state_dict(net.state_dict())
    sgd = lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)  # noqa: E731
    opt = hvd.DistributedOptimizer(sgd(net.parameters()), named_parameters=net.named_parameters(),
                                   compression=compression, backward_passes_per_step=passes,
                                   op=hvd.Adasum, bucket_mb=0.001)
    ref_opts = [sgd(rep.parameters()) for rep in replicas]
    data = torch.Generator().manual_seed(7)
    per = 24 // N
    micro = per // passes

    def backward(m, xs, ys):
        for k in range(passes):
            part = slice(k * micro, (k + 1) * micro)
            (torch.nn.functional.cross_entropy(m(xs[part]), ys[part]) / passes).backward()
    for step in range(steps):
        x = torch.randn(24, 1, 12, 12, generator=data)
        y = torch.randint(0, 5, (24,), generator=data)
        opt.zero_grad()
        backward(net, x[R * per:(R + 1) * per], y[R * per:(R + 1) * per])
        opt.step()
        deltas = []
        for r, (rep, o) in enumerate(zip(replicas, ref_opts)):
            before = [p.detach().clone() for p in rep.parameters()]
            o.zero_grad()
            backward(rep, x[r * per:(r + 1) * per], y[r * per:(r + 1) * per])
            o.step()
            deltas.append(torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(rep.parameters(), before)]))
            with torch.no_grad():
                for p, b in zip(rep.parameters(), before):
                    p.copy_(b)
        combined = adasum_tree(deltas, [p.numel() for p in net.parameters()], torch.float32)
        for rep in replicas:
            with torch.no_grad():
                at = 0
                for p in rep.parameters():
                    p.add_(combined[at:at + p.numel()].view_as(p).float())
                    at += p.numel()
    worst = max(float((p - q).abs().max()) for p, q in zip(net.parameters(), replicas[0].parameters()))
    # 16 bits on the wire round the changes: a trace of them, not more.
    assert worst < 1e-5 if compression == "none" else 0 < worst < 1e-4, (compression, worst)
    try:
        with opt.skip_synchronize():
            pass
        raise AssertionError("skip_synchronize with Adasum")
    except hvd.HerdError as e:
        assert "with op=Adasum" in str(e), e
    return worst


def process_sets():
    """Collectives within the even ranks and within the odd ones (a set of one on 2
    ranks), side by side; the sets' ranks count in increasing order."""
    evens = [r for r in range(N) if r % 2 == 0]
    odds = [r for r in range(N) if r % 2]
    even_set = hvd.add_process_set(evens)
    odd_set = hvd.add_process_set(hvd.ProcessSet(odds))
    mine, other = (even_set, odd_set) if R % 2 == 0 else (odd_set, even_set)
    ranks = evens if R % 2 == 0 else odds
    n, me = len(ranks), ranks.index(R)
    assert mine.included() and not other.included() and mine.size() == n and mine.rank() == me
    assert other.rank() is None and hvd.global_process_set.size() == N
    assert hvd.global_process_set.rank() == R
    ok("process sets: sets made: included, size, rank")
    t = torch.full((5,), float(R + 1))
    s = hvd.allreduce(t, op=hvd.Sum, process_set=mine)
    assert torch.equal(s, torch.full((5,), float(sum(r + 1 for r in ranks)))), s
    a = hvd.allreduce(t, process_set=mine)  # the mean over the set
    assert torch.allclose(a, torch.full((5,), sum(r + 1 for r in ranks) / n)), a
    counts = hvd.allreduce(torch.tensor([R, 2 ** 40], dtype=torch.int64), op=hvd.Sum, process_set=mine)
    assert counts.tolist() == [sum(ranks), n * 2 ** 40], counts
    # The set's queue and the job's at once: a set's handles, then the job's sum, then them.
    handles = [hvd.allreduce_async(torch.full((100,), float(R * 10 + i)), op=hvd.Sum, process_set=mine)
               for i in range(3)]
    whole = hvd.allreduce(torch.ones(2), op=hvd.Sum)
    for i, h in enumerate(handles):
        assert torch.equal(hvd.synchronize(h), torch.full((100,), float(sum(r * 10 + i for r in ranks))))
    assert torch.equal(whole, torch.full((2,), float(N)))
    sums = hvd.grouped_allreduce([torch.full((2,), float(R)), torch.ones(3, dtype=torch.float64)],
                                 op=hvd.Sum, process_set=mine)
    assert sums[0].tolist() == [float(sum(ranks))] * 2 and sums[1].tolist() == [float(n)] * 3, sums
    top = hvd.allreduce(torch.tensor([R, -R], dtype=torch.int16), op=hvd.Max, process_set=mine)
    assert top.tolist() == [ranks[-1], -ranks[0]], top
    v = [torch.sin(torch.arange(9.0, dtype=torch.float64) * (r + 1)) for r in ranks]
    ada = hvd.allreduce(v[me], op=hvd.Adasum, process_set=mine)
    assert float((ada - adasum_tree(v, [9])).abs().max()) < 1e-12, (ada, v)
    ok("process sets: allreduce within a set, beside the job's")
    g = hvd.allgather(torch.full((R + 1, 2), float(R)), process_set=mine)
    assert g[:, 0].tolist() == [float(r) for r in ranks for _ in range(r + 1)], g
    b = hvd.broadcast(torch.full((3,), float(R)), root_rank=ranks[-1], process_set=mine)
    assert torch.equal(b, torch.full((3,), float(ranks[-1]))), b
    assert hvd.allgather_object(R, process_set=mine) == ranks
    assert hvd.broadcast_object({"r": R}, root_rank=ranks[0], process_set=mine) == {"r": ranks[0]}
    ok("process sets: allgather, broadcast (root_rank a rank of the job) and objects within a set")
    rows = 2 * n + 1
    per = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    base = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2)
    got = hvd.reducescatter(base * (R + 1), op=hvd.Sum, process_set=mine)
    first = sum(per[:me])
    assert torch.equal(got, (base * sum(r + 1 for r in ranks))[first:first + per[me]]), got
    sent = [k + me for k in range(n)]  # set rank me sends k + me rows to set rank k
    parcels = torch.cat([torch.full((sent[k], 1), float(100 * R + k)) for k in range(n)])
    out_rows, received = hvd.alltoall(parcels, splits=sent, process_set=mine)
    assert received.tolist() == [k + me for k in range(n)], received
    assert out_rows.flatten().tolist() == [float(100 * r + me) for k, r in enumerate(ranks) for _ in range(k + me)]
    hvd.barrier(process_set=mine)
    ok("process sets: reducescatter, alltoall and barrier within a set")
    w = [torch.arange(3, dtype=torch.float64) + 10 * r for r in range(N)]
    x = torch.full((3,), float(R), dtype=torch.float64, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum, process_set=mine) * w[R]).sum().backward()
    assert torch.equal(x.grad, sum(w[r] for r in ranks)), x.grad
    xg = torch.ones(R + 1, 1, requires_grad=True)
    (hvd.allgather(xg, process_set=mine) * (R + 1)).sum().backward()
    assert torch.equal(xg.grad, torch.full((R + 1, 1), float(sum(r + 1 for r in ranks)))), xg.grad
    ok("process sets: gradients within a set")
    # DistributedOptimizer over the set: the mean of its ranks' gradients, nobody else's.
    torch.manual_seed(7)
    net = torch.nn.Linear(4, 2)
    start = {k: v.clone() for k, v in net.state_dict().items()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.5),
                                   named_parameters=net.named_parameters(), process_set=mine)
    data = torch.Generator().manual_seed(50)
    xs, ys = torch.randn(N, 3, 4, generator=data), torch.randn(N, 3, 2, generator=data)
    torch.nn.functional.mse_loss(net(xs[R]), ys[R]).backward()
    opt.step()
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict(start)
    grads = []
    for r in ranks:  # each set rank's gradient, in one process
        ref.zero_grad()
        torch.nn.functional.mse_loss(ref(xs[r]), ys[r]).backward()
        grads.append({k: p.grad.clone() for k, p in ref.named_parameters()})
    for k, p in net.named_parameters():
        want = start[k] - 0.5 * sum(gr[k] for gr in grads) / n
        assert torch.allclose(p.detach(), want, atol=1e-6), (k, p, want)
    ok("process sets: DistributedOptimizer within a set: its ranks' mean gradient")
    raises_each([
        (lambda: hvd.allreduce(torch.ones(2), process_set=other), f"this rank ({R}) is not in ProcessSet"),
        (lambda: hvd.broadcast(torch.ones(2), root_rank=[r for r in range(N) if r not in ranks][0],
                               process_set=mine), "is not in ProcessSet"),
        (lambda: hvd.add_process_set([R]), "rank 1 lists other ranks than rank 0"),
        (lambda: hvd.add_process_set([0, N]), f"give 1 to {N} distinct ranks of the job"),
        (lambda: hvd.add_process_set([0, N if R == 1 else 1]),
         "in increasing order" if R == 1 else "rank 1 lists ranks no group can have"),
        (lambda: hvd.ProcessSet([0, 0]), "named twice"),
        (lambda: hvd.init(comm=[0]), "comm= is not offered"),
    ])
    assert hvd.remove_process_set(odd_set) and hvd.remove_process_set(even_set)
    assert not hvd.remove_process_set(hvd.global_process_set)
    try:
        hvd.allreduce(torch.ones(1), process_set=mine)
        raise AssertionError("a removed set took a collective")
    except hvd.HerdError as e:
        assert "is not registered" in str(e), str(e)
    late = hvd.ProcessSet(list(range(N)))
    hvd.init(process_sets=[late])  # Horovod's way: sets given to init
    assert late.process_set_id is not None and late.size() == N
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=late), torch.full((1,), float(N)))
    hvd.remove_process_set(late)
    ok("process sets: bad calls about sets raise on every rank; sets removed")


def join_uneven(k):
    torch.manual_seed(100)
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=net.named_parameters())

    def shard(step, r):
        g = torch.Generator().manual_seed(1000 * step + r)
        return torch.randn(8, 1, 12, 12, generator=g), torch.randint(0, 5, (8,), generator=g)

    def steps(r):
        return 6 - r
    bn = hvd.SyncBatchNorm(3, affine=False, track_running_stats=False)
    if N == 1:  # k ranks in one process: the joined ones' gradients count as zero
        for step in range(steps(0)):
            opt.zero_grad()
            for r in range(k):
                if step < steps(r):
                    x, y = shard(step, r)
                    (torch.nn.functional.cross_entropy(net(x), y) / k).backward()
            opt.step()
    else:
        assert k == N, (k, N)
        for step in range(steps(R)):
            x, y = shard(step, R)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            hvd.allreduce(loss.detach(), name="loss")  # a joined rank gives zero
            rows = hvd.allgather(torch.full((1, 2), float(R)))  # and no rows
            active = [r for r in range(N) if step < steps(r)]
            assert rows.shape[0] == len(active), (step, rows)
            worst = hvd.allreduce(torch.tensor([float(R), -float(R)]), op=hvd.Max)  # the identity
            assert worst.tolist() == [float(max(active)), -float(min(active))], (step, worst)
            odd = hvd.allreduce(torch.tensor([R + 2]), op=hvd.Product)  # and its float64 check
            assert odd.item() == torch.tensor([r + 2 for r in active]).prod().item(), (step, odd)
            # SyncBatchNorm: the statistics of the ranks still training (a joined rank's count is 0).
            xb = (torch.arange(6, dtype=torch.float32).reshape(2, 3) * (R + 1) + step).requires_grad_()
            yb = bn(xb)
            every = torch.cat([torch.arange(6, dtype=torch.float32).reshape(2, 3) * (r + 1) + step for r in active])
            want = (every - every.mean(0)) / torch.sqrt(every.var(0, unbiased=False) + bn.eps)
            me = active.index(R)
            assert torch.allclose(yb, want[2 * me:2 * me + 2], atol=1e-5), (step, yb, want)
            (yb * yb).sum().backward()  # its backward's sums: zeros from a joined rank
            assert xb.grad is not None and torch.isfinite(xb.grad).all()
        last = hvd.join()
        assert last == 0, last
        hvd.broadcast_parameters(net.state_dict(), root_rank=last)
    if R == 0:
        torch.save(net.state_dict(), f"{out}/weights-join-of-{k}.pt")
    ok("join: uneven steps")


def join_timeline():
    """The last rank joins after 10 steps while rank 0 takes 101 with a timeline on, whose
    DistributedOptimizer writes it at step 100 (a collective of every rank, announced): the
    joined rank takes part, and the file holds both ranks' steps."""
    path = f"{out}/join-timeline-{N}.json"
    hvd.start_timeline(path)
    torch.manual_seed(5)
    net = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.01),
                                   named_parameters=net.named_parameters())
    for _ in range(101 if R == 0 else 10 if R == N - 1 else 50):
        opt.zero_grad()
        net(torch.ones(2, 4)).sum().backward()
        opt.step()
    assert hvd.join() == 0
    hvd.stop_timeline()
    if R == 0:
        import json
        events = json.load(open(path))["traceEvents"]
        steps = {r: sum(1 for e in events if e.get("pid") == r and e.get("name") == "step") for r in range(N)}
        assert steps[0] == 101 and steps[N - 1] == 10, steps
    ok("join: a timeline written while a rank has joined")


def unjoined():
    try:
        hvd.join()
        raise AssertionError("join without announcements went ahead")
    except hvd.HerdError as e:
        assert "launch with HERD_TORCH_JOIN=1" in str(e), str(e)
    ok("join refused without announcements")


def join_refused():
    for name, call in (("broadcast", lambda: hvd.broadcast(torch.ones(2), root_rank=0)),
                       ("Adasum", lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum))):
        if R == N - 1:
            try:
                hvd.join()
                raise AssertionError("join returned")
            except hvd.HerdError as e:
                assert "has joined, and the others started a collective a joined rank takes no part in" in str(e), str(e)
        else:
            try:
                call()
                raise AssertionError(f"{name} with a joined rank went ahead")
            except hvd.HerdError as e:
                assert "1 rank(s) have called hvd.join()" in str(e), str(e)
        assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)))
    ok("join: a broadcast or an Adasum with a joined rank raises on every rank")


def cuda_collectives():
    dev = gpu()
    for dtype in (torch.float32, torch.float16, torch.float64):  # float32 on the GPU, the rest through host memory
        t = torch.full((5,), float(R + 1), dtype=dtype, device=dev)
        s = hvd.allreduce(t, op=hvd.Sum)
        assert s.device == dev and torch.equal(s.cpu(), torch.full((5,), float(N * (N + 1) // 2), dtype=dtype)), (dtype, s)
        a = hvd.allreduce(t)  # Average
        assert torch.allclose(a.double().cpu(), torch.full((5,), (N + 1) / 2, dtype=torch.float64)), (dtype, a)
        assert torch.equal(t.cpu(), torch.full((5,), float(R + 1), dtype=dtype))  # a copy
    ok("cuda: allreduce sum and average, 3 dtypes")
    big = torch.arange(1 << 20, dtype=torch.float32, device=dev) % 97 * (R + 1)  # written by a kernel just queued
    hvd.allreduce_(big, op=hvd.Sum)
    want = (torch.arange(1 << 20, dtype=torch.float32) % 97) * (N * (N + 1) // 2)
    assert torch.equal(big.cpu(), want), "a million values summed in place"
    ok("cuda: allreduce in place of a tensor a kernel had just written")
    handles = [hvd.allreduce_async(torch.full((1000,), float(R * 10 + i), device=dev)) for i in range(4)]
    for i, h in reversed(list(enumerate(handles))):
        got = hvd.synchronize(h)
        assert torch.allclose(got.cpu(), torch.full((1000,), sum(r * 10 + i for r in range(N)) / N)), i
    ok("cuda: async handles waited for out of order")
    c = hvd.allreduce(torch.full((64,), 0.1 * (R + 1), device=dev), compression=hvd.Compression.fp16)
    assert c.device == dev and torch.allclose(c.cpu(), torch.full((64,), 0.1 * (N + 1) / 2), rtol=1e-3), c
    ok("cuda: fp16 compression (through host memory)")
    g = hvd.allgather(torch.full((R + 1, 2), float(R), device=dev))
    assert g.device == dev and g[:, 0].tolist() == [float(r) for r in range(N) for _ in range(r + 1)]
    ok("cuda: allgather")
    b = torch.full((4,), float(R), device=dev)
    hvd.broadcast_(b, root_rank=N - 1)
    assert torch.equal(b.cpu(), torch.full((4,), float(N - 1)))
    ok("cuda: broadcast in place")
    # The queued forms through host memory, back on the GPU at synchronize.
    small = hvd.synchronize(hvd.allgather_async(torch.full((R + 1, 2), float(R), device=dev)))  # at once
    assert small.device == dev and small[:, 1].tolist() == [float(r) for r in range(N) for _ in range(r + 1)]
    h = hvd.allgather_async(torch.full((R + 1, 50000), float(R), device=dev))  # past 256 KiB: queued
    rs = hvd.reducescatter_async(torch.full((2 * N, 3), float(R + 1), device=dev), op=hvd.Sum)
    sent = [d + 1 for d in range(N)]
    ta = hvd.alltoall_async(torch.cat([torch.full((sent[d], 2), float(100 * R + d)) for d in range(N)]).to(dev),
                            splits=sent)
    top = hvd.allreduce(torch.tensor([float(R), -float(R)], device=dev), op=hvd.Max)
    got = hvd.synchronize(h)
    assert got.device == dev and torch.equal(got.cpu(), torch.cat([torch.full((r + 1, 50000), float(r)) for r in range(N)]))
    mine = hvd.synchronize(rs)
    assert mine.device == dev and torch.equal(mine.cpu(), torch.full((2, 3), float(N * (N + 1) // 2))), mine
    rows, received = hvd.synchronize(ta)
    assert rows.device == dev and received.tolist() == [R + 1] * N, received
    assert torch.equal(rows.cpu(), torch.cat([torch.full((R + 1, 2), float(100 * r + R)) for r in range(N)])), rows
    assert top.device == dev and top.tolist() == [float(N - 1), 0.0], top
    ok("cuda: allgather_async, reducescatter_async, alltoall_async and a max")
    v = [torch.sin(torch.arange(40.0) * (r + 1)) for r in range(N)]
    ada = hvd.allreduce(v[R].to(dev), op=hvd.Adasum)  # through host memory
    assert ada.device == dev and torch.equal(ada.cpu(), hvd.allreduce(v[R], op=hvd.Adasum)), ada
    ok("cuda: Adasum, the CPU's bits")
    if torch.cuda.device_count() > 1 and "cuda: not built" not in herd.build_info()["build"]:
        other = torch.device("cuda", (dev.index + 1) % torch.cuda.device_count())
        try:
            hvd.allreduce(torch.ones(3, device=other))
            raise AssertionError("no error for a tensor on another GPU")
        except hvd.HerdError as e:
            assert "one GPU a process" in str(e), str(e)
        ok("cuda: a tensor on another GPU refused")


def mismatch():
    """Ranks that start different collectives (a job without join: with it a joined rank
    sums along undescribed): refused on every rank, naming the difference; then in step."""
    raises_each([
        (lambda: hvd.allreduce(torch.ones(4), op=hvd.Sum if R == 0 else hvd.Max),
         "the same kind with another op, scale factors or compression"),
        (lambda: hvd.allreduce(torch.ones(4), average=R == 0), "another op"),
        (lambda: hvd.allreduce(torch.ones(4, dtype=torch.float32 if R == 0 else torch.float64), op=hvd.Sum),
         "the same kind with another dtype"),
        (lambda: hvd.allreduce(torch.ones(4 if R == 0 else 3)), "another number of elements, shape"),
        (lambda: hvd.allreduce(torch.ones(2)) if R == 0 else hvd.broadcast(torch.ones(2), root_rank=0),
         "the ranks disagree on this collective"),
        (lambda: hvd.allgather(torch.ones(2, 2)) if R == 0 else hvd.allreduce(torch.ones(4)),
         "the ranks disagree on this collective"),
        (lambda: hvd.broadcast_parameters({"a": torch.ones(2), **({"b": torch.ones(3)} if R == 0 else {})},
                                          root_rank=0), "broadcast_parameters: the ranks disagree"),
    ])
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)))
    ok("collectives that differ between ranks raise on every rank")


def rewrap():
    """A second DistributedOptimizer over the same model takes its gradients over; the
    first one's hooks (PyTorch 1.13's accumulators keep them) stay inert."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    x = torch.randn(8, 4) + R
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters())
    for _ in range(2):
        opt.zero_grad()
        m(x).pow(2).sum().backward()
        opt.step()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01), named_parameters=m.named_parameters())
    for _ in range(3):
        opt.zero_grad()
        m(x).pow(2).sum().backward()
        opt.step()
    every = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in m.parameters()]).unsqueeze(0))
    assert all(torch.equal(every[0], every[r]) for r in range(N)), every
    ok("a second DistributedOptimizer over the same model")


def shutdown():
    """After hvd.shutdown(), herd raises instead of MPI's abort (MPI cannot be joined twice)."""
    hvd.shutdown()
    raises_each([(hvd.rank, "herd was shut down"), (lambda: hvd.allreduce(torch.ones(2)), "herd was shut down")])
    ok("calls after shutdown raise")


def raise_on_one():
    start = time.time()
    if R == 1:
        raise RuntimeError("a bug on rank 1")
    try:
        hvd.allreduce(torch.ones(4))  # waits for rank 1, which the abort ends
    finally:
        print(f"rank {R}: left after {time.time() - start:.1f} s", flush=True)


def stall_on_one():
    if R == 1:
        time.sleep(60)  # stuck outside any collective: the stall inspector names it
    hvd.allreduce(torch.ones(4))


def elastic(kill):
    torch.manual_seed(100)
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=net.named_parameters())
    state = hvd.elastic.TorchState(net, opt, checkpoint_dir=f"{out}/state", step=0)
    attempt = int(os.environ.get("HERD_RUN_RESTARTS", "0"))

    @hvd.elastic.run
    def loop(state):
        print(f"rank {R}: attempt {attempt} starts at step {state.step}", flush=True)
        while state.step < 20:
            data = torch.Generator().manual_seed(1000 + state.step)  # the step's batch, whatever the attempt
            x = torch.randn(24, 1, 12, 12, generator=data)
            y = torch.randint(0, 5, (24,), generator=data)
            per = 24 // N
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[R * per:(R + 1) * per]), y[R * per:(R + 1) * per]).backward()
            opt.step()
            state.step += 1
            if state.step % 5 == 0:
                state.commit()
            if kill and attempt == 0 and R == 1 and state.step == 7:
                os.kill(os.getpid(), signal.SIGKILL)

    loop(state)
    if R == 0:
        torch.save(net.state_dict(), f"{out}/elastic.pt")


for mode, *args in tasks:
    {"train": lambda: train(int(args[0]), args[1], *args[2:3]), "collectives": collectives, "process_sets": process_sets,
     "join": lambda: join_uneven(int(args[0])), "join_refused": join_refused, "unjoined": unjoined,
     "join_timeline": join_timeline,
     "syncbn": lambda: syncbn(int(args[0]), *args[1:2]), "contrastive": lambda: contrastive(int(args[0])),
     "sampler": lambda: sampler(args[0]), "sparse": lambda: sparse(int(args[0])),
     "cuda_collectives": cuda_collectives, "adasum": adasum,
     "raise": raise_on_one, "stall": stall_on_one, "elastic": lambda: elastic(args[0] == "1"),
     "rewrap": rewrap, "shutdown": shutdown, "mismatch": mismatch}[mode]()
