"""herd.torch, Horovod's API for PyTorch on herd's communicator (ctest's python_torch):
a PyTorch CNN trained on 2 and 3 ranks (and with local accumulation) ends within 1e-5
of one process taking the whole global batch, and so do one with hvd.SyncBatchNorm and
a contrastive loss through hvd.allgather; on GPUs (where PyTorch sees one) 2 ranks
within 1e-4 of one GPU process, with the collectives on CUDA tensors checked exactly;
every collective and its gradient checked exactly on 2 and 3 ranks; bad calls raise
herd's message on every rank; a rank that raises ends the
job at once, naming itself; a script under hvd.elastic.run whose rank is killed is
relaunched by herd run --max-restarts and ends on the bytes of the run never stopped."""
import os
import re
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
import herd.torch as hvd  # noqa: E402

from launch import HERD, REPEAT, launcher  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_ranks.py")


def run(tmp_path, np_, *args, env=None):
    cmd = ["timeout", "200"] + (launcher(np_) if np_ > 1 else []) + [sys.executable, SCRIPT, str(tmp_path), *args]
    # Variables for the ranks go in the launcher's environment (Open MPI's -x is not Hydra's flag).
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return r.returncode, r.stdout + r.stderr


def max_difference(a, b):
    a, b = torch.load(a), torch.load(b)
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The weights of one process taking each whole global batch (made once)."""
    where = tmp_path_factory.mktemp("one")
    rc, out = run(where, 1, *"train 1 none + syncbn 1 + contrastive 1 + sparse 0 + join 2 + join 3".split())
    assert rc == 0, out
    return where / "weights-1-1-none.pt"


@pytest.fixture(scope="module")
def two_ranks_traced(tmp_path_factory):
    """2 ranks, one pass, no compression, with HERD_TIMELINE: the job that both the first
    training case and test_timeline read (one launch of two PyTorch ranks instead of two)."""
    launcher(2)  # skips without MPI
    where = tmp_path_factory.mktemp("two")
    rc, out = run(where, 2, *"train 1 none + unjoined + adasum + mismatch".split(),
                  env={"HERD_TIMELINE": str(where / "tl.json")})
    assert rc == 0, out
    (where / "output.txt").write_text(out)
    assert out.count("ok: join refused without announcements") == 2, out
    return where


# The other cases of each rank count share a launch (torch_ranks.py runs its modes in
# turn), the collectives last: every launch imports PyTorch on every rank.
JOBS = {2: "train 2 none" + ("" if REPEAT else " + train 1 fp16 + syncbn 0 + contrastive 0 + sampler first + sparse 1")
           + " + syncbn 1 + contrastive 1 + sparse 0 + collectives + process_sets + join 2 + join_refused"
           " + join_timeline + rewrap + shutdown",
        3: "train 1 none + syncbn 1 + contrastive 1 + sparse 0 + collectives + process_sets + join 3 + join_refused"
           " + join_timeline + adasum"}


@pytest.fixture(scope="module")
def ranks_job(tmp_path_factory):
    """{N: (directory, output)} of the job of N ranks (JOBS), launched when first asked for."""
    done = {}

    def job(np_):
        if np_ not in done:
            launcher(np_)  # skips without MPI
            where = tmp_path_factory.mktemp(f"ranks{np_}")
            rc, out = run(where, np_, *JOBS[np_].split())
            assert rc == 0, out
            done[np_] = (where, out)
        return done[np_]
    return job


CASES = [(2, 1, "none", 1e-5), (2, 2, "none", 1e-5)] + ([] if REPEAT else [(3, 1, "none", 1e-5), (2, 1, "fp16", 1e-2)])


@pytest.mark.parametrize("np_, passes, compression, tolerance", CASES)
def test_training_equals_one_process(request, one_process, ranks_job, np_, passes, compression, tolerance):
    if (np_, passes, compression) == (2, 1, "none"):
        where = request.getfixturevalue("two_ranks_traced")
    else:
        where, _ = ranks_job(np_)
    assert max_difference(one_process, where / f"weights-{np_}-{passes}-{compression}.pt") <= tolerance


# Models the ranks' jobs train beside the CNN, against one process (one_process):
# model -> (the N-rank weights, a variant on 2 ranks, whether the variant stays within 1e-5).
# syncbn: three hvd.SyncBatchNorm (one with a cumulative average, one over features), each
#   rank normalising its shard with the global batch's statistics, running statistics
#   included; the variant, torch's own batch norm (each shard's statistics), parts.
# contrastive: each rank's features against all 24 (hvd.allgather), the gradient through
#   the allgather summed over the ranks that read each row; detached (the variant), parts.
# sparse: an embedding with sparse gradients (SGD), the mean handed back as sparse rows
#   (SparseAdam then steps); the variant, sparse_as_dense=True, stays.
MODELS = {"syncbn": ("syncbn-{}-1", "syncbn-2-0", False),
          "contrastive": ("contrastive-{}-1", "contrastive-2-0", False),
          "sparse": ("sparse-{}-0", "sparse-2-1", True)}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("np_", [2] if REPEAT else [2, 3])
def test_model_equals_one_process(one_process, ranks_job, np_, model):
    ranks, variant, variant_stays = MODELS[model]
    where, _ = ranks_job(np_)
    one = one_process.parent / f"weights-{ranks.format(1)}.pt"
    assert max_difference(one, where / f"weights-{ranks.format(np_)}.pt") <= 1e-5
    if np_ == 2 and not REPEAT:
        d = max_difference(one, where / f"weights-{variant}.pt")
        assert d <= 1e-5 if variant_stays else d > 1e-3, (variant, d)


@pytest.mark.parametrize("np_", [2] if REPEAT else [2, 3])
def test_join_uneven_steps_equal_one_process(one_process, ranks_job, np_):
    """hvd.join: ranks with fewer batches join early; the others' steps average their
    gradients with the joined ranks' zeros, as one process does over every rank's shard."""
    where, out = ranks_job(np_)
    assert out.count("ok: join: uneven steps") == np_, out
    assert out.count("ok: join: a broadcast or an Adasum with a joined rank raises on every rank") == np_, out
    assert out.count("ok: join: a timeline written while a rank has joined") == np_, out
    one = one_process.parent / f"weights-join-of-{np_}.pt"
    assert max_difference(one, where / f"weights-join-of-{np_}.pt") <= 1e-5


def test_timeline(two_ranks_traced):
    """HERD_TIMELINE (Horovod's HOROVOD_TIMELINE): rank 0 writes herd's trace, with every
    rank's gradient buckets on its communication track and its steps on the compute track."""
    import json
    events = json.load(open(two_ranks_traced / "tl.json"))["traceEvents"]
    def of(rank, name):
        return [e for e in events if e.get("pid") == rank and e.get("name") == name and e.get("ph") == "X"]
    for rank in (0, 1):
        assert len(of(rank, "step")) == 20, rank
        assert [e["args"]["step"] for e in of(rank, "step")] == list(range(1, 21))
        assert len(of(rank, "comm_wait")) == 20 and len(of(rank, "optimizer")) == 20
        buckets = [e for e in events if e.get("pid") == rank and e.get("name", "").startswith("allreduce gradient bucket")]
        assert len(buckets) == 20 and all(e["tid"] == 1 and e["args"]["bytes"] > 0 for e in buckets), buckets[:3]
        assert [e["args"]["step"] for e in buckets] == list(range(1, 21))  # one bucket (1 MiB) a step
        adasum = [e for e in events if e.get("pid") == rank and e.get("name", "").startswith("adasum adasum bucket")]
        assert adasum and all(e["tid"] == 1 and e["args"]["bytes"] > 0 for e in adasum), adasum[:3]


@pytest.mark.parametrize("np_", [2] if REPEAT else [2, 3])
def test_collectives(ranks_job, np_):
    _, out = ranks_job(np_)
    for check in ["allreduce sum and average, 4 dtypes", "allreduce of int32 and int64 counts", "async handles in order", "allreduce in place",
                  "fp16 compression", "allgather of different row counts", "broadcast from the last rank",
                  "objects", "local size", "grouped allreduce", "barrier", "reducescatter", "alltoall", "grouped allgather and reducescatter",
                  "gradients through allreduce, allgather, broadcast, reducescatter and alltoall",
                  "bad calls raise herd's message on every rank",
                  "allreduce Min, Max and Product, 10 dtypes (a NaN on one rank wins)",
                  "Min, Max and Product in place, async, scaled and grouped",
                  "gradients through Min (ties shared), Max and Product (zeros included)",
                  "Min, Max and Product: bad calls raise herd's message on every rank"]:
        assert len(re.findall(re.escape("ok: " + check), out)) == np_, (check, out)


def test_mismatched_collectives_raise(two_ranks_traced):
    """Ranks that start allreduces of another op, dtype or size, or different kinds, raise
    herd's message on every rank and stay in step."""
    out = (two_ranks_traced / "output.txt").read_text()
    assert out.count("ok: collectives that differ between ranks raise on every rank") == 2, out


def test_rewrap_and_shutdown(ranks_job):
    """A second DistributedOptimizer over one model trains it on 2 ranks (the first's hooks
    inert), and after hvd.shutdown() herd's calls raise rather than MPI aborting the job."""
    _, out = ranks_job(2)
    for check in ["a second DistributedOptimizer over the same model", "calls after shutdown raise"]:
        assert out.count("ok: " + check) == 2, (check, out)


@pytest.mark.parametrize("np_", [2] if REPEAT else [2, 3])
def test_adasum(request, ranks_job, np_):
    """op=hvd.Adasum: on 2 ranks in the traced job (its buckets in the timeline), on 3 in the other."""
    if np_ == 2:
        where = request.getfixturevalue("two_ranks_traced")
        out = (where / "output.txt").read_text()
    else:
        _, out = ranks_job(np_)
    for check in ["allreduce and grouped_allreduce with op=Adasum: the tree's values, per tensor",
                  "Adasum in place, scaled, async, in float16 and bfloat16, and compressed",
                  "Adasum: bad calls raise herd's message on every rank",
                  "DistributedOptimizer(op=Adasum): one process's replicas within",
                  "DistributedOptimizer(op=Adasum), fp16 compression and 2 passes a step: within"]:
        assert len(re.findall(re.escape("ok: " + check), out)) == np_, (check, out)


@pytest.mark.parametrize("np_", [2] if REPEAT else [2, 3])
def test_process_sets(ranks_job, np_):
    _, out = ranks_job(np_)
    for check in ["process sets: sets made: included, size, rank", "process sets: allreduce within a set, beside the job's",
                  "process sets: allgather, broadcast (root_rank a rank of the job) and objects within a set",
                  "process sets: reducescatter, alltoall and barrier within a set", "process sets: gradients within a set",
                  "process sets: DistributedOptimizer within a set: its ranks' mean gradient",
                  "process sets: bad calls about sets raise on every rank; sets removed"]:
        assert len(re.findall(re.escape("ok: " + check), out)) == np_, (check, out)


def test_raising_rank_ends_the_job(tmp_path):
    start = time.time()
    rc, out = run(tmp_path, 2, "raise")
    assert rc != 0, out
    assert "rank 1 raised RuntimeError: a bug on rank 1; ending the job" in out, out
    assert "left after" not in out, out  # rank 0 never came back from its allreduce
    assert time.time() - start < 100  # ended by the abort, not by the 120 s timeout


def test_one_process():
    net = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                   named_parameters=net.named_parameters())
    assert isinstance(opt, torch.optim.SGD) and hvd.size() == 1
    before = net.weight.detach().clone()
    net(torch.ones(3, 4)).sum().backward()
    opt.step()
    assert not torch.equal(before, net.weight)
    assert torch.equal(hvd.allreduce(torch.ones(3)), torch.ones(3))
    assert hvd.allgather(torch.ones(2, 3)).shape == (2, 3)
    with pytest.raises(hvd.InvalidArgument, match="not in named_parameters"):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                 named_parameters=[("weight", net.weight)])
    with pytest.raises(hvd.InvalidArgument, match="compression is Compression.none, fp16 or bf16"):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), compression="int8")
    for kwargs, message in [(dict(backward_passes_per_step=1.5), "an integer >= 1, got 1.5"),
                            (dict(bucket_mb=0), r"bucket_mb must be a number in \[0.001, 4096\], got 0"),
                            (dict(bucket_mb=-1), "got -1")]:
        with pytest.raises(hvd.InvalidArgument, match=message):
            hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), **kwargs)
    # Adasum in one process: the wrapped optimizer's step, the tensor as it is.
    ada = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), op=hvd.Adasum)
    before = net.weight.detach().clone()
    net(torch.ones(3, 4)).sum().backward()
    ada.step()
    assert torch.allclose(net.weight, before - 0.1 * net.weight.grad)
    assert torch.equal(hvd.allreduce(torch.arange(3.0), op=hvd.Adasum), torch.arange(3.0))
    with pytest.raises(hvd.InvalidArgument, match="Min, Max, Product and Adasum: allreduce alone"):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), op=hvd.Max)
    assert hvd.allreduce(torch.tensor([3, -1], dtype=torch.int8), op=hvd.Product).tolist() == [3, -1]
    with pytest.raises(TypeError, match="takes a torch.Tensor"):
        hvd.allreduce([1.0, 2.0])
    with pytest.raises(hvd.InvalidArgument, match="synchronize takes the handle an \\*_async call returned, got int"):
        hvd.synchronize(42)
    hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), num_groups=2,
                             groups=[[net.weight], [net.bias]])  # Horovod's fusion groups: accepted
    with pytest.raises(hvd.InvalidArgument, match="groups is an int or a list of lists"):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), groups=[[torch.zeros(1)]])
    assert hvd.join() == 0  # one process: nothing to wait for
    bad = subprocess.run([sys.executable, "-c", "import herd.torch as hvd; hvd.init()"], capture_output=True,
                         text=True, env={**os.environ, "HERD_TORCH_JOIN": "yes"})
    assert bad.returncode != 0 and "HERD_TORCH_JOIN='yes' is not 0 or 1" in bad.stderr, bad.stderr


def test_herd_run_starts_python_and_names_a_stalled_rank(tmp_path):
    """herd run -np 2 -- python3 ...: the ranks run the script; one that never reaches the
    collective is named by the stall inspector, and HERD_COMM_TIMEOUT ends the job."""
    launcher(2)  # skips without MPI
    cmd = ["timeout", "100", HERD, "run", "-x", "HERD_COMM_TIMEOUT=4", "-x", "HERD_STALL_WARNING=1",
           "-np", "2", "--", sys.executable, SCRIPT, str(tmp_path), "stall"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode not in (0, 124), out
    assert "did not complete within 4 s (stall timeout); ranks not yet arrived: 1 on" in out, out


@pytest.mark.skipif(REPEAT, reason="Python's own logic over herd run: the first pass runs it")
def test_elastic_restart_ends_on_the_uninterrupted_bytes(tmp_path):
    """hvd.elastic.TorchState and run: rank 1 killed at step 7 (last commit at step 5);
    herd run --max-restarts 1 relaunches the job, which resumes at step 5 and ends on the
    weights of the run never stopped, bit for bit. A new job where a commit lies is refused."""
    launcher(2)  # skips without MPI
    def herd_run(where, *flags):
        cmd = ["timeout", "200", HERD, "run", "-np", "2", *flags, "--", sys.executable, SCRIPT, str(where), "elastic"]
        r = subprocess.run(cmd + (["1"] if flags else ["0"]), capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr
    rc, out = herd_run(tmp_path / "whole")
    assert rc == 0, out
    rc, out = herd_run(tmp_path / "killed", "--max-restarts", "1")
    assert rc == 0, out
    assert re.search(r"herd: restart 1/1 after rank 1 .*", out), out
    assert "herd.torch.elastic: resumed from" in out and "(committed on 2 rank(s); 2 now)" in out, out
    assert out.count("attempt 1 starts at step 5") == 2, out
    whole, killed = torch.load(tmp_path / "whole" / "elastic.pt"), torch.load(tmp_path / "killed" / "elastic.pt")
    assert all(torch.equal(whole[k], killed[k]) for k in whole), "the resumed run's weights differ"
    rc, out = run(tmp_path / "whole", 1, "elastic", "0")
    assert rc != 0 and "holds the state an earlier job committed; remove it to start afresh" in out, out


@pytest.mark.skipif(REPEAT, reason="Python's own logic over the collectives: the first pass runs it")
def test_elastic_sampler_resumes_on_other_ranks_with_what_is_left(ranks_job):
    """hvd.elastic.ElasticSampler in TorchState: 2 ranks go through 5 batches of 4 of a
    50-index epoch, committing after batches 2 and 4 (each commit gathers both ranks'
    indices); relaunched on one rank (the variables herd run --max-restarts sets, as after
    losing a host), the job goes through exactly the 18 indices the commit had not
    recorded: none twice, none left out. (Sharing what is left among several ranks is
    the sampler's reset, which the first job runs too.)"""
    import json
    tmp_path, _ = ranks_job(2)  # its job ran "sampler first"
    relaunch = {"HERD_RUN_SUPERVISED": "1", "HERD_RUN_RESTARTS": "1"}
    rc, out = run(tmp_path, 1, "sampler", "resume", env=relaunch)
    assert rc == 0, out
    assert "(committed on 2 rank(s); 1 now)" in out, out
    first = json.load(open(tmp_path / "sampler-first.json"))
    resumed = json.load(open(tmp_path / "sampler-resume.json"))
    assert first["ranks"] == 2 and resumed["ranks"] == 1
    assert [len(s) for s in first["seen"]] == [5 * 4, 5 * 4]
    assert not set(first["seen"][0]) & set(first["seen"][1])  # the epoch shared, not repeated
    committed = set(resumed["committed"])
    assert len(committed) == 2 * 4 * 4  # both ranks' first 4 batches, gathered at the commit
    assert committed <= set(first["seen"][0]) | set(first["seen"][1])
    after = resumed["seen"][0]
    assert sorted(after) == sorted(set(range(50)) - committed)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no GPU here")


@needs_cuda
def test_cuda_training_equals_one_gpu_process(tmp_path):
    """2 ranks on the GPUs (sharing one where there is one: herd then sums through host
    memory; NCCL on two) against one GPU process taking the whole global batch, the plain
    CNN and the one with hvd.SyncBatchNorm."""
    launcher(2)  # skips without MPI
    rc, out = run(tmp_path, 1, "train", "1", "none", "cuda", "+", "syncbn", "1", "cuda")
    assert rc == 0, out
    rc, out = run(tmp_path, 2, "train", "1", "none", "cuda", "+", "syncbn", "1", "cuda", "+", "cuda_collectives")
    assert rc == 0, out
    assert out.count("ok: cuda:") >= 2 * 8, out
    assert max_difference(tmp_path / "weights-2-1-none-cuda.pt", tmp_path / "weights-1-1-none-cuda.pt") < 1e-4
    assert max_difference(tmp_path / "weights-syncbn-2-1-cuda.pt", tmp_path / "weights-syncbn-1-1-cuda.pt") < 1e-4
