"""Horovod's Adasum: allreduce(t, op=hvd.Adasum) and DistributedOptimizer(op=hvd.Adasum).

Per tensor, two ranks' values a and b combine as (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b:
their sum where they are orthogonal, their mean where they are parallel, in a binary
tree over the ranks (herd_dist_allreduce_adasum_start, on the communication thread, in
double). Unlike Horovod's, any number of ranks (the ranks past a power of two fold in
first), process sets, and the formula at every norm (Horovod's code adds tensors whose
squared norm is below 1e-8 instead).

The optimizer is Horovod's delta optimizer: when a bucket's gradients are ready, its
parameters take the wrapped optimizer's step (one call for the bucket, where Horovod makes
one a parameter: the same values for torch's gradient-descent optimizers, which update each parameter on its
own) on this rank's gradients alone, and the change it made (the delta) is what the ranks
combine; the combined delta is added to the
parameters at synchronize(). Its state (momentum, Adam's moments) stays each rank's own."""
import threading

import torch

from herd import HerdError, InvalidArgument, _herd
from herd import _torch_join as _join
from herd import torch as hvd

_COMPRESSED = {"fp16": torch.float16, "bf16": torch.bfloat16}
# dtype -> staging buffers that no Adasum in flight holds, kept for the next ones (as many
# as were in flight at once, as DistributedOptimizer's compressed buckets are, up to
# _SPARES): a fresh one each call costs the first touch of its pages, at 16 MiB as much as
# the Adasum itself on this project's machine.
_spare = {}
_SPARES = 16
_spare_lock = threading.Lock()  # gradient hooks of CUDA parameters run on PyTorch's own threads


def is_adasum(op, average):
    return average is None and op == hvd.Adasum


def start(tensors, compression, prescale, postscale, what, name, ps, parts=None):
    """Starts one Adasum over the ranks of ps of the tensors (each its own coefficients,
    or, for one tensor, each of its consecutive parts of `parts` values), in place; a
    hvd._Handle per tensor, of the same ticket."""
    dtype = tensors[0].dtype
    if dtype not in hvd._DTYPES:
        raise HerdError(f"{what}: Adasum combines float32, float64, float16 and bfloat16 tensors, not {dtype}")
    if any(t.dtype != dtype for t in tensors):
        raise InvalidArgument(f"{what}: Adasum of a group takes tensors of one dtype")
    if compression not in hvd._WIRE:
        raise InvalidArgument(f"{what}: compression is Compression.none, fp16 or bf16, got {compression!r}")
    wire = _COMPRESSED.get(compression) if dtype == torch.float32 else None
    if compression != hvd.Compression.none and dtype != torch.float32:
        raise InvalidArgument(f"{what}: compression applies to float32 tensors, not {dtype}")
    pre, post = float(prescale), float(postscale)
    # One buffer in host memory unless a single CPU tensor is combined as it is.
    single = len(tensors) == 1 and not tensors[0].is_cuda and tensors[0].is_contiguous() and wire is None \
        and pre == 1.0
    staged = None
    if single:
        work = tensors[0].view(-1)
    else:
        staged = _Staged(sum(t.numel() for t in tensors), wire or dtype, len(tensors))
        work, at = staged.work, 0
        with torch.no_grad():
            for t in tensors:
                work[at:at + t.numel()].copy_(t.reshape(-1))
                at += t.numel()
        if pre != 1.0:
            work.mul_(pre)
    counts = torch.tensor(parts or [t.numel() for t in tensors], dtype=torch.int64)
    with _join.collective(ps, _join.OTHER, what=f"{what} with op=Adasum"):
        ticket = _herd.allreduce_adasum_start(work.data_ptr(), work.numel(), hvd._DTYPES[work.dtype],
                                              counts.data_ptr(), counts.numel(), name or "allreduce",
                                              ps.process_set_id)
    handles, at = [], 0
    for t in tensors:
        h = hvd._Handle(t, ticket, None if post == 1.0 else post, keep=(work, counts), set_id=ps.process_set_id)
        if staged is not None:
            h.finish = _copier(h, t, staged, at)
        at += t.numel()
        handles.append(h)
    return handles


class _Staged:
    """A staging buffer of n values (a spare one when big enough), handed back once each of
    the group's tensors has taken its part out."""

    def __init__(self, n, dtype, users):
        with _spare_lock:
            pool = _spare.setdefault(dtype, [])
            fits = [i for i, b in enumerate(pool) if b.numel() >= n]
            self.base = pool.pop(min(fits, key=lambda i: pool[i].numel())) if fits else None
        if self.base is None:
            self.base = torch.empty(n, dtype=dtype)
        self.work = self.base[:n]
        self.users = users

    def taken(self):
        self.users -= 1
        with _spare_lock:
            pool = _spare[self.base.dtype]
            if self.users == 0 and len(pool) < _SPARES:
                pool.append(self.base)


def _copier(h, t, staged, at):
    def finish():
        with torch.no_grad():
            t.copy_(staged.work[at:at + t.numel()].view_as(t))
        staged.taken()
        h.tensor = t
    return finish


class AdasumSteps:
    """DistributedOptimizer(op=hvd.Adasum)'s methods in place of the averaging ones
    (herd/_torch_optimizer.py): a bucket launches the deltas of its parameters' local
    steps, synchronize() adds the combined deltas, step() applies nothing more."""

    def _launch(self, b):
        with torch.no_grad():
            # Parameters without a gradient (not used this step here) make no change.
            before = {id(p): p.detach().clone() for p in b.params if p.grad is not None}
            stashed = [group["params"] for group in self.param_groups]
            try:  # one step of the wrapped optimizer on the bucket's parameters alone
                for group, params in zip(self.param_groups, stashed):
                    group["params"] = [q for q in params if id(q) in before]
                super(self.__class__, self).step()
            finally:
                for group, params in zip(self.param_groups, stashed):
                    group["params"] = params
            for p, at in zip(b.params, b.offsets):
                delta = b.flat[at:at + p.numel()]
                if id(p) not in before:
                    delta.zero_()
                    continue
                torch.sub(p.detach().reshape(-1), before[id(p)].reshape(-1), out=delta)
                p.copy_(before[id(p)])
        _herd.set_activity(f"herd.torch: backward, Adasum of bucket {b.index + 1} of {len(self._buckets)}")
        b.handle = start([b.flat], self._compression if b.dtype == torch.float32 else "none", 1.0, 1.0,
                         "DistributedOptimizer", f"adasum bucket {b.index + 1}", self._process_set,
                         parts=[p.numel() for p in b.params])[0]
        b.launched = True

    def synchronize(self):
        """Waits for every bucket (launching those whose gradients never came) and adds
        the combined deltas to the parameters."""
        if self._process_set.size() == 1:
            self._synchronized = True
            return
        self._launch_ready(force=True)
        _herd.set_activity("herd.torch: waiting for the Adasum buckets")
        with torch.no_grad():
            for b in self._buckets:
                hvd.synchronize(b.handle)
                for p, at in zip(b.params, b.offsets):
                    p.add_(b.flat[at:at + p.numel()].view_as(p))
                b.pending.clear()
                b.launched, b.handle = False, None
        self._next = 0
        for key in self._counts:
            self._counts[key] = 0
        self._synchronized = True
        _herd.set_activity("herd.torch: forward and backward")

    def skip_synchronize(self):
        raise HerdError("skip_synchronize() with op=Adasum: the ranks combine the parameters' "
                        "changes, not their gradients, and synchronize() applies them")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        if self._process_set.size() == 1:  # one rank: the wrapped optimizer's step as it is
            super(self.__class__, self).step()
        elif not self._synchronized:
            self.synchronize()
        self._synchronized = False
        return loss


def refuse_gradient(what):
    raise InvalidArgument(f"{what} with op=Adasum is not differentiable in herd (the gradient of Adasum "
                          "is not the Adasum of the gradients); reduce a detached tensor")
