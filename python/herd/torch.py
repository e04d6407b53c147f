"""herd.torch: Horovod's API for PyTorch scripts, on herd's communicator (docs/python.md).

    import herd.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Launch with `herd run -np N -- python3 script.py` (or mpirun). Collectives run in the
order started on herd's communication thread, under its stall inspector and abort
timeout (herd.torch.init(comm_timeout=, stall_warning=)); a rank that raises ends the
whole job, naming itself, instead of leaving the others waiting. CPU and CUDA tensors:
float32 CUDA tensors are summed in GPU memory through NCCL when herd is built with CUDA
and NCCL (through MPI via host memory where ranks share a GPU); every other CUDA
collective goes through host memory (docs/python.md).
"""
import atexit
import functools
import os
import pickle
import sys
import threading

import torch

import herd as _herd_pkg
from herd import HerdError, InvalidArgument, _herd
from herd import _torch_agree as _agree
from herd import _torch_join as _join
from herd import _torch_process_sets as _ps
from herd._torch_process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401

__all__ = ["init", "shutdown", "is_initialized", "size", "rank", "local_rank", "local_size",
           "Average", "Sum", "Adasum", "Min", "Max", "Product", "Compression", "allreduce", "allreduce_", "allreduce_async",
           "allreduce_async_", "synchronize", "poll", "allgather", "allgather_async", "broadcast",
           "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object",
           "allgather_object", "broadcast_parameters", "broadcast_optimizer_state",
           "DistributedOptimizer", "elastic", "start_timeline", "stop_timeline", "join", "mpi_built", "nccl_built", "gloo_built", "mpi_threads_supported", "HerdError", "InvalidArgument",
           "cross_rank", "cross_size", "is_homogeneous", "barrier", "grouped_allreduce",
           "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "SyncBatchNorm",
           "reducescatter", "reducescatter_async", "alltoall", "alltoall_async", "grouped_allgather",
           "grouped_reducescatter", "ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set"]

Average, Sum, Adasum = "Average", "Sum", "Adasum"
Min, Max, Product = "Min", "Max", "Product"  # allreduce only (herd/_torch_reduce_ops.py)
_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}  # herd_dtype
_WIRE = {"none": 0, "fp16": 1, "bf16": 2}  # herd_compress
_initialized = False
_hosts = None  # every rank's (host name, local rank), asked once
_timeline_on = False  # DistributedOptimizer records its steps' spans while true


class Compression:
    """Gradients on the wire (float32 tensors): as they are, or cast to 16 bits for the
    reduction (each rank's values scaled first, so a sum cannot overflow where the mean
    would not) and back."""
    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"


def init(comm=None, comm_timeout=None, stall_warning=None, process_sets=None, join=None):
    """Joins the job, and registers process_sets (ProcessSets, in the same order on every
    rank; "dynamic", Horovod's switch for add_process_set later, changes nothing here: sets
    may always be added). join=True (or HERD_TORCH_JOIN=1) lets ranks with fewer batches
    call hvd.join(): every collective is then announced first (herd/_torch_join.py); the
    ranks check that they agree. comm (Horovod's list of ranks to run on) is not offered:
    every rank of the job takes part; a process set gives collectives among some of them."""
    global _initialized
    if comm is not None:
        raise InvalidArgument("herd.torch.init: comm= is not offered (every rank of the job takes "
                              "part); for collectives among some ranks use process_sets=")
    if join is None and _initialized:
        join = _join.enabled  # a later init keeps it
    elif join is None:
        flag = os.environ.get("HERD_TORCH_JOIN", "0")
        if flag not in ("0", "1"):
            raise InvalidArgument(f"HERD_TORCH_JOIN='{flag}' is not 0 or 1")
        join = flag == "1"
    _herd_pkg.init(comm_timeout, stall_warning)
    if not _initialized and size() > 1:
        _abort_on_uncaught_exception()
        every = allgather_object(bool(join), "join on?")  # announcements must match everywhere
        if len(set(every)) != 1:
            raise InvalidArgument("herd.torch.init: join is on for rank(s) "
                                  f"{[r for r, j in enumerate(every) if j]} only; set it (hvd.init(join=...) "
                                  "or HERD_TORCH_JOIN) the same on every rank")
        _join.enabled = bool(join)
    elif _initialized and bool(join) != _join.enabled and size() > 1:
        raise InvalidArgument(f"herd.torch.init: join was {'on' if _join.enabled else 'off'} at the first "
                              "init; it cannot change")
    _initialized = True
    if process_sets is not None and process_sets != "dynamic":
        for ps in process_sets:
            if ps.process_set_id is None:
                add_process_set(ps)
    if os.environ.get("HERD_TIMELINE") and not _timeline_on:  # Horovod's HOROVOD_TIMELINE
        start_timeline(os.environ["HERD_TIMELINE"])


def _abort_on_uncaught_exception():
    """A rank that raises would leave the others waiting in their next collective until
    the timeout: print the exception, then end every rank naming this one."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        _herd.abort(1, f"rank {rank()} raised {kind.__name__}: {value}; ending the job")
    sys.excepthook = hook

    def thread_hook(args):
        threading.__excepthook__(args)
        _herd.abort(1, f"rank {rank()} raised {args.exc_type.__name__} in thread "
                       f"{args.thread.name if args.thread else '?'}: {args.exc_value}; ending the job")
    threading.excepthook = thread_hook


def start_timeline(file_path, mark_cycles=False):
    """Collective: rank 0 writes a trace of the job to file_path, as herd train's
    --timeline (Chrome trace JSON for Perfetto): every gradient bucket's reduction on each
    rank's communication track, and DistributedOptimizer's steps (backward, waiting for
    the reductions, the update) on its compute track, on rank 0's clock. It is finished by
    stop_timeline(), shutdown() or the end of the script."""
    global _timeline_on
    if mark_cycles:
        raise InvalidArgument("start_timeline: mark_cycles is not offered (herd has no fusion "
                              "cycles: each bucket is its own reduction on the timeline)")
    if _timeline_on:
        raise HerdError("start_timeline: a timeline is already being written; stop_timeline() first")
    _herd.timeline_start(os.fspath(file_path))
    _timeline_on = True


def stop_timeline():
    """Collective: finishes the timeline's file (nothing without one)."""
    global _timeline_on
    _timeline_on = False
    _herd.timeline_write(True)


@atexit.register
def _finish_timeline():
    if _timeline_on:
        stop_timeline()


def shutdown():
    global _initialized
    stop_timeline()
    _herd.shutdown()
    _ps._forget_all()
    _initialized = False


def is_initialized():
    return _initialized


def size():
    return _herd.size()


def rank():
    return _herd.rank()


def local_rank():
    return _herd.local_rank()


def _every_rank_host():
    """[(host name, local rank)] of every rank, in rank order (one allgather, then kept)."""
    global _hosts
    if _hosts is None:
        import socket
        _hosts = allgather_object((socket.gethostname(), local_rank()))
    return _hosts


def local_size():
    """Ranks on this host."""
    hosts = [h for h, _ in _every_rank_host()]
    return hosts.count(hosts[rank()])


def cross_size():
    """Ranks with this rank's local rank: the hosts, where every host runs as many ranks."""
    mine = _every_rank_host()[rank()][1]
    return sum(1 for _, lr in _every_rank_host() if lr == mine)


def cross_rank():
    """This rank's place among the ranks of its local rank (its host's, in rank order)."""
    mine = _every_rank_host()[rank()][1]
    return sum(1 for _, lr in _every_rank_host()[:rank()] if lr == mine)


def is_homogeneous():
    """Whether every host runs as many ranks."""
    hosts = [h for h, _ in _every_rank_host()]
    return len({hosts.count(h) for h in hosts}) == 1


def barrier(process_set=global_process_set):
    """Returns once every rank (of process_set) has called it."""
    ps = _ps._of(process_set, "barrier")
    with _join.collective(ps, _join.OTHER, what="barrier"):
        _herd.barrier(ps.process_set_id)


def mpi_threads_supported():
    return True


def mpi_built():
    return _herd.backend() == "mpi" or "MPI: none" not in _herd.build_info()


def nccl_built():
    """Whether this herd sums GPU memory with NCCL (float32 CUDA tensors, one GPU a rank)."""
    return _herd.have_nccl()


def gloo_built():
    return False


def join(device=-1):
    """A rank out of data takes part in the others' allreduces (zeros), allgathers (no
    rows) and DistributedOptimizer steps until every rank has joined; returns, on every
    rank, the rank that joined last (broadcast its parameters). See herd/_torch_join.py."""
    return _join.join(device)


# ------------------------------------------------------------------ tensors

def _check(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} takes a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type not in ("cpu", "cuda"):
        raise HerdError(f"{what}: a tensor on {tensor.device} (herd.torch takes CPU and CUDA tensors)")
    if tensor.is_sparse:
        raise HerdError(f"{what}: sparse tensors are not offered")


_gpu = None  # the CUDA device herd's own GPU collectives run on, once the first one ran
_herd_has_cuda = None  # asked once: build_info loads the CUDA libraries to name them


def _on_herd_gpu(tensor, compression, what):
    """Whether herd sums this CUDA tensor in GPU memory: float32, no compression, and a
    herd built with CUDA (its backend, made at the first such sum, takes one GPU a
    process: the tensor's). Otherwise the tensor goes through host memory."""
    global _herd_has_cuda
    if _herd_has_cuda is None:
        _herd_has_cuda = "cuda: not built" not in _herd.build_info()
    if tensor.dtype != torch.float32 or compression != Compression.none or not _herd_has_cuda:
        return False
    global _gpu
    if _gpu is None:
        _gpu = tensor.device
    elif tensor.device != _gpu:
        raise InvalidArgument(f"{what}: a tensor on {tensor.device}, but herd's GPU collectives "
                              f"run on {_gpu} (one GPU a process: torch.cuda.set_device(hvd.local_rank()))")
    return True


def _allreduce_gpu(tensor, scale, name):
    """Starts herd's sum of a float32 CUDA tensor in place: PyTorch's queued writes to it
    finish first (herd's streams are its own); the sum is in place once waited for."""
    torch.cuda.current_stream(tensor.device).synchronize()
    with torch.cuda.device(tensor.device):  # the first call builds herd's backend on this GPU
        return _herd.allreduce_device_start("cuda", tensor.data_ptr(), tensor.numel(), scale, name)


def _scale(op, average, what, ps=None):
    if average is not None:
        op = Average if average else Sum
    op = op or Average
    if op not in (Average, Sum):
        also = " (Min, Max, Product and Adasum: allreduce alone)" if op in (Min, Max, Product, Adasum) else ""
        raise InvalidArgument(f"{what}: op is Average or Sum{also}, got {op!r}")
    return 1.0 / (ps.size() if ps is not None else size()) if op == Average else 1.0


class _Handle:
    """A collective in flight: the tensor it writes and the ticket to wait for (and a CUDA
    tensor whose values went through host memory: `back`, written once done)."""

    def __init__(self, tensor, ticket, after=None, keep=(), set_id=0):
        self.tensor, self.ticket, self.after, self.keep, self.done = tensor, ticket, after, keep, False
        self.set_id = set_id  # the process set whose queue the ticket is in
        self.back = None
        self.to_device = None
        self.finish = None  # called once waited for (integer sums: back from float64)


_EXACT = float(2 ** 53)  # float64 adds integers exactly below this
_INTEGERS = (torch.int32, torch.int64)  # summed exactly (op=Sum)


def _integer_sum_async_(tensor, average, op, compression, prescale_factor, postscale_factor, what, name, ps):
    """int32 and int64 sums, exact: the values as float64 behind a bound of the sums (each
    rank's largest magnitude, summed with them), checked before they are written back."""
    _scale(op, average, what)  # refuses what is not Average or Sum
    summed = (op == Sum) if average is None else not average
    if not summed or float(prescale_factor) != 1.0 or float(postscale_factor) != 1.0:
        raise InvalidArgument(f"{what}: {tensor.dtype} tensors are summed (op=Sum, no scale factors); "
                              "for a mean, sum and divide, or reduce a floating-point tensor")
    if compression != Compression.none:
        raise InvalidArgument(f"{what}: compression applies to float32 tensors, not {tensor.dtype}")
    wide = torch.empty(tensor.numel() + 1, dtype=torch.float64)
    # In float64: an int64's abs() of -2^63 wraps to itself and would pass the bound.
    wide[0] = float(tensor.to(torch.float64).abs().max()) if tensor.numel() else 0.0
    wide[1:] = tensor.reshape(-1)
    h = _sum_start(wide, 1.0, 0, name, ps)

    def finish():
        if not wide[0] < _EXACT:
            raise HerdError(f"{what}: the {tensor.dtype} sums may pass 2^53 (the ranks' largest "
                            f"values add up to {wide[0]:.0f}), beyond what herd adds exactly")
        sums, limits = wide[1:], torch.iinfo(tensor.dtype)
        if sums.numel() and (sums.min() < limits.min or sums.max() > limits.max):
            raise HerdError(f"{what}: a sum ({sums.abs().max():.0f}) does not fit {tensor.dtype}; "
                            "reduce a wider integer or a floating-point tensor")
        tensor.copy_(sums.reshape(tensor.shape).to(tensor.dtype))
        h.tensor = tensor
    h.finish = finish
    return h


def allreduce_async_(tensor, average=None, name=None, op=None, compression=Compression.none,
                     prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place sum (op=Sum), mean (op=Average, the default), min, max, product
    or Adasum over the ranks (of process_set). The ranks first agree that they start the
    same allreduce (herd/_torch_agree.py)."""
    what = f"allreduce {name}" if name else "allreduce"
    _check(tensor, what)
    if average is not None and op is not None:  # Horovod refuses the pair too
        raise InvalidArgument(f"{what}: give op= or the older average=, not both (op={op!r}, "
                              f"average={average!r})")
    ps = _ps._of(process_set, what)
    if not _join.takes_part(ps):  # a joined rank sums along without knowing the op: not described
        _agree.describe(ps, what, _agree.ALLREDUCE, tensor,
                        op=(op, average, float(prescale_factor), float(postscale_factor), compression))
    return _allreduce_agreed(tensor, average, name, op, compression, prescale_factor, postscale_factor, ps)


def _allreduce_agreed(tensor, average=None, name=None, op=None, compression=Compression.none,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async_ without the ranks' agreement: for collectives whose plan every rank
    already shares (DistributedOptimizer's buckets, checked when it was built)."""
    what = f"allreduce {name}" if name else "allreduce"
    _check(tensor, what)
    ps = _ps._of(process_set, what)
    elementwise, adasum = _reduce_ops.is_elementwise(op, average), _adasum.is_adasum(op, average)
    if (elementwise or adasum) and not tensor.is_contiguous():
        raise InvalidArgument(f"{what} in place needs a contiguous tensor; use allreduce (a copy)")
    if elementwise:
        return _reduce_ops.start(tensor, op, compression, prescale_factor, postscale_factor, what, name, ps)
    if adasum:
        return _adasum.start([tensor], compression, prescale_factor, postscale_factor, what, name, ps)[0]
    if tensor.dtype not in _DTYPES and tensor.dtype not in _INTEGERS:
        raise HerdError(f"{what}: {tensor.dtype} tensors are not reduced; herd sums float32, "
                        "float64, float16, bfloat16, int32 and int64")
    if not tensor.is_contiguous():
        raise InvalidArgument(f"{what} in place needs a contiguous tensor; use allreduce (a copy)")
    if tensor.dtype in _INTEGERS:
        if tensor.is_cuda:  # through host memory
            h = _integer_sum_async_(tensor.detach().to("cpu"), average, op, compression, prescale_factor,
                                    postscale_factor, what, name, ps)
            h.back = tensor
            return h
        return _integer_sum_async_(tensor, average, op, compression, prescale_factor, postscale_factor,
                                   what, name, ps)
    if compression not in _WIRE:
        raise InvalidArgument(f"{what}: compression is Compression.none, fp16 or bf16, got {compression!r}")
    scale = _scale(op, average, what, ps) * float(prescale_factor) * float(postscale_factor)
    if tensor.is_cuda:  # herd's GPU sums run over the whole job; a set's go through host memory
        if ps is global_process_set and _on_herd_gpu(tensor, compression, what):
            with _join.collective(ps, _join.OTHER, what=f"{what} in GPU memory"):
                return _Handle(tensor, _allreduce_gpu(tensor, scale, name or "allreduce"))
        host = tensor.detach().to("cpu")
        h = _allreduce_agreed(host, average, name, op, compression, prescale_factor, postscale_factor, ps)
        h.back = tensor
        return h
    after = None
    if tensor.dtype == torch.float32:
        wire = _WIRE[compression]
        c_scale = scale
    else:  # summed in their own type, scaled after
        if compression != Compression.none:
            raise InvalidArgument(f"{what}: compression applies to float32 tensors, not {tensor.dtype}")
        wire, c_scale = 0, 1.0
        after = None if scale == 1.0 else scale
    return _sum_start(tensor, c_scale, wire, name, ps, after)


def _sum_start(t, scale, wire, name, ps, after=None):
    """Queues herd's in-place sum of t (contiguous, in host memory, a _DTYPES type) over ps
    (announced to joined ranks, herd/_torch_join.py); its _Handle."""
    with _join.collective(ps, _join.ALLREDUCE, t.numel(), _DTYPES[t.dtype], wire) as header:
        ticket = _herd.allreduce_start(t.data_ptr(), t.numel(), _DTYPES[t.dtype], scale, wire,
                                       name or "allreduce", ps.process_set_id)
    return _Handle(t, ticket, after, keep=(header,), set_id=ps.process_set_id)


def allreduce_async(tensor, average=None, name=None, op=None, compression=Compression.none,
                    prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    _check(tensor, "allreduce")
    return allreduce_async_(tensor.detach().clone(memory_format=torch.contiguous_format), average,
                            name, op, compression, prescale_factor, postscale_factor, process_set)


def synchronize(handle):
    """Waits for a collective started by an *_async call and returns its tensor (the list
    of them for a grouped one)."""
    if isinstance(handle, _GroupHandle):
        return [synchronize(h) for h in handle.handles]
    if not isinstance(handle, _Handle):
        raise InvalidArgument(f"synchronize takes the handle an *_async call returned, got "
                              f"{type(handle).__name__}")
    if not handle.done:
        _herd.wait(handle.ticket, handle.set_id)
        if handle.finish is not None:
            handle.finish()
        if handle.after is not None:
            handle.tensor.mul_(handle.after)
        if handle.back is not None:
            handle.back.copy_(handle.tensor)
            handle.tensor, handle.back = handle.back, None
        if handle.to_device is not None:  # a result made in host memory for a CUDA tensor
            handle.tensor = handle.tensor.to(handle.to_device)
        handle.done = True
    return handle.tensor


def poll(handle):
    """True once synchronize would not block (herd answers only after waiting: a handle
    reports done once synchronized)."""
    return handle.done


class _GroupHandle:
    """A group of collectives in flight (grouped_allreduce_async): synchronize gives the list."""

    def __init__(self, handles):
        self.handles = handles

    @property
    def done(self):
        return all(h.done for h in self.handles)


def _group(tensors, what):
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise InvalidArgument(f"{what} takes a non-empty list of tensors")
    return list(tensors)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, compression=Compression.none,
                             prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async_ of every tensor of the list, started in its order; synchronize
    returns the list."""
    tensors = _group(tensors, "grouped_allreduce")
    if _adasum.is_adasum(op, average):  # one Adasum, each tensor with its own coefficients
        for t in tensors:
            _check(t, "grouped_allreduce")
        return _GroupHandle(_adasum.start(tensors, compression, prescale_factor, postscale_factor,
                                          "grouped_allreduce", name or "grouped_allreduce",
                                          _ps._of(process_set, "grouped_allreduce")))
    return _GroupHandle([allreduce_async_(t, average, f"{name or 'grouped_allreduce'}.{i}", op, compression,
                                          prescale_factor, postscale_factor, process_set)
                         for i, t in enumerate(tensors)])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, compression=Compression.none,
                            prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    tensors = _group(tensors, "grouped_allreduce")
    for t in tensors:
        _check(t, "grouped_allreduce")
    return grouped_allreduce_async_([t.detach().clone(memory_format=torch.contiguous_format) for t in tensors],
                                    average, name, op, compression, prescale_factor, postscale_factor,
                                    process_set)


def _blocking(start, name):
    """The blocking form of an *_async starter: the same arguments, synchronized."""
    @functools.wraps(start)
    def blocking(*args, **kwargs):
        return synchronize(start(*args, **kwargs))
    blocking.__name__ = blocking.__qualname__ = name
    return blocking


grouped_allreduce_ = _blocking(grouped_allreduce_async_, "grouped_allreduce_")
grouped_allreduce = _blocking(grouped_allreduce_async, "grouped_allreduce")
allreduce_ = _blocking(allreduce_async_, "allreduce_")
_allreduce_copy = _blocking(allreduce_async, "allreduce")


def _differentiable(tensor):
    return torch.is_grad_enabled() and isinstance(tensor, torch.Tensor) and tensor.requires_grad


def allreduce(tensor, average=None, name=None, op=None, compression=Compression.none,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The mean (op=Average, the default), sum, min, max, product or Adasum over the ranks
    (of process_set), in a new tensor. Differentiable (but Adasum): the gradient of the
    ranks' summed loss (for a mean or sum, the same reduction of the output's)."""
    if _differentiable(tensor) and _adasum.is_adasum(op, average):
        _adasum.refuse_gradient("allreduce")
    if _differentiable(tensor) and _reduce_ops.is_elementwise(op, average):
        return _reduce_ops.Elementwise.apply(tensor, name, op, compression, prescale_factor, postscale_factor,
                                             process_set)
    if _differentiable(tensor):
        return _autograd.Allreduce.apply(tensor, average, name, op, compression, prescale_factor,
                                         postscale_factor, process_set)
    return _allreduce_copy(tensor, average, name, op, compression, prescale_factor, postscale_factor,
                           process_set)


def reducescatter(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                  compression=Compression.none, process_set=global_process_set):
    """_reducescatter's result; differentiable: the input's gradient is the output
    gradients of every rank, gathered, times the same scale."""
    if _differentiable(tensor):
        return _autograd.Reducescatter.apply(tensor, name, op, prescale_factor, postscale_factor,
                                             compression, process_set)
    return _reducescatter(tensor, name, op, prescale_factor, postscale_factor, compression, process_set)


def _reducescatter(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                   compression=Compression.none, process_set=global_process_set):
    """The mean (op=Average, the default) or sum over the ranks of tensor, of which this
    rank gets its rows: the first dimension split in rank order as evenly as it goes, the
    first (rows % size) ranks one row more (Horovod's split). float32 travels as a
    reduce-scatter (each rank sends about the tensor's size, half an allreduce's); float64,
    float16, bfloat16 and (op=Sum) int32 and int64 are summed whole, then cut."""
    return synchronize(reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                                           compression, process_set))


def reducescatter_async(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                        compression=Compression.none, process_set=global_process_set):
    """reducescatter started: every rank's shape is checked at once (a small blocking
    exchange), the sum then runs on herd's communication thread; synchronize gives this
    rank's rows."""
    what = f"reducescatter {name}" if name else "reducescatter"
    _check(tensor, what)
    ps = _ps._of(process_set, what)
    if tensor.dim() == 0:
        raise InvalidArgument(f"{what}: a 0-d tensor has no rows to scatter")
    if tensor.dtype not in _DTYPES and tensor.dtype not in _INTEGERS:
        raise HerdError(f"{what}: {tensor.dtype} tensors are not reduced; herd sums float32, "
                        "float64, float16, bfloat16, int32 and int64")
    if compression not in _WIRE:
        raise InvalidArgument(f"{what}: compression is Compression.none, fp16 or bf16, got {compression!r}")
    scale = _scale(op, None, what, ps) * float(prescale_factor) * float(postscale_factor)
    if tensor.dtype in _INTEGERS and (op != Sum or scale != 1.0):
        raise InvalidArgument(f"{what}: {tensor.dtype} tensors are summed (op=Sum, no scale factors)")
    if compression != Compression.none and tensor.dtype != torch.float32:
        raise InvalidArgument(f"{what}: compression applies to float32 tensors, not {tensor.dtype}")
    if tensor.is_cuda:  # through host memory, back to the GPU once synchronized
        h = reducescatter_async(tensor.detach().to("cpu"), name, op, prescale_factor, postscale_factor,
                                compression, ps)
        h.to_device = tensor.device
        return h
    with _join.collective(ps, _join.OTHER, what=what):
        shapes = allgather_object((tuple(tensor.shape), str(tensor.dtype)), name, ps)
        if any(s != shapes[0] for s in shapes):
            raise InvalidArgument(f"{what}: every rank gives the same shape and dtype; got "
                                  + ", ".join(f"rank {r}: {list(s[0])} {s[1]}" for r, s in enumerate(shapes)))
        n, rows = ps.size(), tensor.shape[0]
        rows_of = [rows // n + (1 if r < rows % n else 0) for r in range(n)]
        return _sum_my_rows_start(tensor.detach().clone(memory_format=torch.contiguous_format), rows_of,
                                  scale, _WIRE[compression], name or "reducescatter", ps)


def _sum_my_rows(t, rows_of, scale, wire, name, ps):
    return synchronize(_sum_my_rows_start(t, rows_of, scale, wire, name, ps))


def _sum_my_rows_start(t, rows_of, scale, wire, name, ps):
    """Starts the sum of t (contiguous, in host memory, overwritten) over the ranks, times
    scale, of which this rank keeps its rows_of[its rank in ps] rows (the ranks' rows in
    rank order): float32 as one reduce-scatter, the other types summed whole. A _Handle
    whose synchronize gives this rank's rows."""
    me = ps.rank()
    first, mine = sum(rows_of[:me]), rows_of[me]
    if t.dtype == torch.float32:
        if t.numel() >= 2 ** 31:
            raise InvalidArgument(f"{name}: {t.numel()} values are beyond one MPI call (2^31); "
                                  "reduce-scatter the tensor in parts")
        per_row = t[0].numel() if t.shape[0] else 0
        counts = torch.tensor([k * per_row for k in rows_of], dtype=torch.int32)
        ticket = _herd.reduce_scatter_start(t.data_ptr(), t.numel(), counts.data_ptr(), scale, wire, name,
                                            ps.process_set_id)
        h, scale = _Handle(t, ticket, keep=(counts,), set_id=ps.process_set_id), 1.0
    else:
        h = _allreduce_agreed(t, op=Sum, name=name, process_set=ps)
    summed = h.finish

    def cut():
        if summed is not None:
            summed()
        rows = h.tensor[first:first + mine]
        h.tensor = rows * scale if scale != 1.0 else rows.clone()
    h.finish = cut
    return h


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of every tensor of the list, in its order (each differentiable)."""
    return [allgather(t, f"{name or 'grouped_allgather'}.{i}", process_set)
            for i, t in enumerate(_group(tensors, "grouped_allgather"))]


def grouped_reducescatter(tensors, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                          compression=Compression.none, process_set=global_process_set):
    """reducescatter of every tensor of the list, in its order (each differentiable)."""
    return [reducescatter(t, f"{name or 'grouped_reducescatter'}.{i}", op, prescale_factor,
                          postscale_factor, compression, process_set)
            for i, t in enumerate(_group(tensors, "grouped_reducescatter"))]


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows to every rank: splits[r] rows of tensor (the first dimension, in order) go to
    rank r; without splits the rows are split equally (they must divide). Returns the
    rows every rank sent this one, in rank order, and with splits given also how many
    came from each rank (int32, Horovod's received_splits). Differentiable: the input's
    gradient is the output's sent back the same way."""
    if _differentiable(tensor):
        out, received = _autograd.Alltoall.apply(tensor, splits, name, process_set)
    else:
        out, received = _alltoall(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


def _alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """(the rows every rank sent this one, how many from each rank)"""
    return synchronize(_alltoall_start(tensor, splits, name, process_set))


def _alltoall_start(tensor, splits, name, process_set):
    """alltoall started: the ranks' counts, row shapes and types agreed at once (a small
    blocking exchange), the rows then sent and received on herd's communication thread; a
    _Handle whose synchronize gives (rows, counts received)."""
    what = f"alltoall {name}" if name else "alltoall"
    _check(tensor, what)
    ps = _ps._of(process_set, what)
    if tensor.dim() == 0:
        raise InvalidArgument(f"{what}: a 0-d tensor has no rows to send")
    if tensor.is_cuda:  # through host memory, back to the GPU once synchronized
        h = _alltoall_start(tensor.detach().to("cpu"), splits, name, ps)
        on_host = h.finish

        def to_device():
            on_host()
            h.tensor = (h.tensor[0].to(tensor.device), h.tensor[1])
        h.finish = to_device
        return h
    n, rows = ps.size(), tensor.shape[0]
    if splits is None:
        if rows % n:
            raise InvalidArgument(f"{what}: {rows} rows do not split equally over {n} ranks; give splits")
        sent = [rows // n] * n
    else:
        sent = [int(v) for v in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
        if len(sent) != n or any(v < 0 for v in sent) or sum(sent) != rows:
            raise InvalidArgument(f"{what}: splits {sent} must give each of the {n} ranks a count "
                                  f">= 0 of the {rows} rows, adding up to them")
    with _join.collective(ps, _join.OTHER, what=what):
        every = allgather_object((sent, tuple(tensor.shape[1:]), str(tensor.dtype)), name, ps)
        if any(e[1:] != every[0][1:] for e in every):
            raise InvalidArgument(f"{what}: ranks send rows of other shapes or types: "
                                  + ", ".join(f"rank {r}: {list(e[1])} {e[2]}" for r, e in enumerate(every)))
        got = [every[r][0][ps.rank()] for r in range(n)]
        t = _contiguous(tensor)
        row_bytes = _agree.row_bytes(t)
        out = torch.empty((sum(got),) + tuple(t.shape[1:]), dtype=t.dtype)
        ticket = _herd.alltoall_start(t.data_ptr(), [k * row_bytes for k in sent], out.data_ptr(),
                                      [k * row_bytes for k in got], ps.process_set_id)
    h = _Handle(out, ticket, keep=(t,), set_id=ps.process_set_id)
    received = torch.tensor(got, dtype=torch.int32)

    def pair():
        h.tensor = (out, received)
    h.finish = pair
    return h


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """alltoall started (_alltoall_start): synchronize gives what alltoall returns."""
    h = _alltoall_start(tensor, splits, name, process_set)
    if splits is None:
        paired = h.finish

        def rows_only():
            paired()
            h.tensor = h.tensor[0]
        h.finish = rows_only
    return h


def _contiguous(tensor):
    return tensor.detach().contiguous()


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor, concatenated along the first dimension (which may differ
    between ranks; the others must match). Differentiable: each rank's input gradient is
    the sum over the ranks of the output gradients' rows that came from it."""
    if _differentiable(tensor):
        return _autograd.Allgather.apply(tensor, name, process_set)
    return _allgather(tensor, name, process_set)[0]


def _allgather(tensor, name=None, process_set=global_process_set):
    """(every rank's rows concatenated, [rows of each rank]) over process_set's ranks"""
    what = f"allgather {name}" if name else "allgather"
    _check(tensor, what)
    ps = _ps._of(process_set, what)
    if tensor.is_cuda:  # through host memory
        out, rows_of = _allgather(tensor.detach().to("cpu"), name, ps)
        return out.to(tensor.device), rows_of
    t = _contiguous(tensor).reshape(tensor.shape if tensor.dim() else (1,))
    with _join.collective(ps, _join.ALLGATHER, _agree.row_bytes(t)):  # a joined rank gives no rows
        return _gather_rows(t, ps, what)


def _gather_rows(t, ps, what):
    """t's rows from the ranks of ps, in rank order: (out, [rows of each rank])."""
    out, rows_of, counts = _gather_plan(t, ps, what)
    _herd.allgather(t.data_ptr(), out.data_ptr(), counts, ps.process_set_id)
    return out, rows_of


# An allgather_async below this many bytes in all completes on return, run by the calling
# thread: queued, 100 of 1 KiB each took 5.3 ms instead of 2.1 on 2 ranks (the hand-off to
# the communication thread and back), where a 2 MiB one gains from the queue
# (bench/results/2026-12-07-herd-torch-async-small-queued.txt, ...-allgather.txt).
_QUEUED_BYTES = 256 << 10


def _gather_rows_start(t, ps, what):
    """_gather_rows started on herd's communication thread (or done at once, when small):
    (out, [rows of each rank], a _Handle whose synchronize gives out)."""
    set_id = ps.process_set_id
    out, rows_of, counts = _gather_plan(t, ps, what)
    if sum(counts) < _QUEUED_BYTES:
        _herd.allgather(t.data_ptr(), out.data_ptr(), counts, set_id)
        h = _Handle(out, 0)
        h.done = True
        return out, rows_of, h
    counts = torch.tensor(counts, dtype=torch.int32)
    ticket = _herd.allgather_start(t.data_ptr(), out.data_ptr(), counts.data_ptr(), what, set_id)
    return out, rows_of, _Handle(out, ticket, keep=(t, counts), set_id=set_id)


def _gather_plan(t, ps, what):
    """The ranks' row counts, agreed with the rest of the allgather's description in one
    small allgather (herd/_torch_agree.py: rows of another size or dtype raise): (the
    output, [rows of each rank], [bytes from each rank])."""
    rows_of = _agree.describe(ps, what, _agree.ALLGATHER, t)
    counts = [r * _agree.row_bytes(t) for r in rows_of]
    if sum(counts) >= 2 ** 31:
        raise InvalidArgument(f"{what}: {sum(counts)} bytes from the ranks in all, beyond one "
                              "MPI call (2 GiB); gather the tensor in parts")
    return torch.empty((sum(rows_of),) + tuple(t.shape[1:]), dtype=t.dtype), rows_of, counts


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts allgather: the ranks' row counts are agreed at once (a small exchange), the
    rows travel on herd's communication thread while the caller goes on; synchronize
    gives them."""
    what = f"allgather {name}" if name else "allgather"
    _check(tensor, what)
    ps = _ps._of(process_set, what)
    if tensor.is_cuda:  # through host memory, back to the GPU once synchronized
        h = allgather_async(tensor.detach().to("cpu"), name, ps)
        if h.done:  # small: gathered already
            h.tensor = h.tensor.to(tensor.device)
        else:
            h.back = torch.empty_like(h.tensor, device=tensor.device)
        return h
    t = _contiguous(tensor).reshape(tensor.shape if tensor.dim() else (1,))
    with _join.collective(ps, _join.ALLGATHER, _agree.row_bytes(t)):  # a joined rank gives no rows
        return _gather_rows_start(t, ps, what)[2]


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's values into tensor on every rank (of process_set; root_rank is a rank of
    the job, as in Horovod), in place."""
    return _broadcast(tensor, root_rank, name, process_set, agree=True)


def _broadcast(tensor, root_rank, name, process_set, agree):
    """broadcast_; agree=False for a tensor already described (broadcast_parameters)."""
    what = f"broadcast {name}" if name else "broadcast"
    _check(tensor, what)
    ps = _ps._of(process_set, what)
    root = _ps._root_in(ps, root_rank, what) if ps is not global_process_set else int(root_rank)
    if not tensor.is_contiguous():
        raise InvalidArgument(f"{what} in place needs a contiguous tensor; use broadcast (a copy)")
    with _join.collective(ps, _join.OTHER, what=what):  # raises first when a rank has joined
        if agree:
            _agree.describe(ps, what, _agree.BROADCAST, tensor, root=root)
        return _broadcast_into(tensor, root, ps)


def _broadcast_into(tensor, root, ps):
    if tensor.is_cuda:  # through host memory
        host = tensor.detach().to("cpu")
        _herd.broadcast(host.data_ptr(), host.numel() * host.element_size(), root, ps.process_set_id)
        tensor.copy_(host)
        return tensor
    _herd.broadcast(tensor.data_ptr(), tensor.numel() * tensor.element_size(), root, ps.process_set_id)
    return tensor


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's values in a new tensor on every rank. Differentiable: root_rank's input
    gradient is the sum over the ranks of the output's, the others' zero."""
    if _differentiable(tensor):
        return _autograd.Broadcast.apply(tensor, root_rank, name, process_set)
    return _broadcast_copy(tensor, root_rank, name, process_set)


def _broadcast_copy(tensor, root_rank, name=None, process_set=global_process_set):
    _check(tensor, "broadcast")
    return broadcast_(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank, name,
                      process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """broadcast_, complete on return: queued on the communication thread, Horovod's own
    pattern (a broadcast_async_ per tensor, then each synchronized) took 1.5-2.7x longer
    than blocking broadcasts, which this thread runs itself (bench/herd_torch_broadcast.sh,
    2026-12-07, docs/performance.md)."""
    h = _Handle(broadcast_(tensor, root_rank, name, process_set), 0)
    h.done = True
    return h


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    h = _Handle(_broadcast_copy(tensor, root_rank, name, process_set), 0)
    h.done = True
    return h


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Any picklable object from root_rank to every rank (of process_set)."""
    data = pickle.dumps(obj) if rank() == root_rank else b""
    length = torch.tensor([len(data)], dtype=torch.int64)
    broadcast_(length, root_rank, name, process_set)
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if rank() == root_rank \
        else torch.empty(int(length), dtype=torch.uint8)
    if int(length):
        broadcast_(buf, root_rank, name, process_set)
    return pickle.loads(buf.numpy().tobytes()) if rank() != root_rank else obj


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's picklable object (of process_set's ranks), in rank order."""
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    lengths = allgather(torch.tensor([data.numel()], dtype=torch.int64), name, process_set)
    joined = allgather(data, name, process_set).numpy().tobytes()
    out, at = [], 0
    for n in lengths.tolist():
        out.append(pickle.loads(joined[at:at + n]))
        at += n
    return out


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """root_rank's parameters (a state_dict, or named_parameters()) into every rank's (of
    process_set), in place."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    if not all(isinstance(p, tuple) and len(p) == 2 for p in items):
        raise InvalidArgument("broadcast_parameters takes a state_dict or named_parameters()")
    items = [(name, p) for name, p in items if p is not None]
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise InvalidArgument(f"broadcast_parameters: {name} is a {type(p).__name__}, not a tensor")
    # One agreement for the whole list, then each tensor's broadcast.
    what = "broadcast_parameters"
    ps = _ps._of(process_set, what)
    root = _ps._root_in(ps, root_rank, what) if ps is not global_process_set else int(root_rank)
    with _join.collective(ps, _join.OTHER, what=what):
        _agree.describe_many(ps, what, _agree.BROADCAST, [p for _, p in items], root)
    for name, p in items:
        with torch.no_grad():
            if p.is_contiguous():
                _broadcast(p.data, root_rank, name, process_set, agree=False)
            else:
                p.copy_(_broadcast(p.detach().clone(memory_format=torch.contiguous_format), root_rank,
                                   name, process_set, agree=False))


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """root_rank's optimizer state (its state_dict: steps, momenta, hyper-parameters) into
    every rank's optimizer (of process_set)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise HerdError("broadcast_optimizer_state: LBFGS is not offered")
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None, root_rank,
                             "optimizer state", process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


from herd._torch_optimizer import DistributedOptimizer  # noqa: E402 (needs the functions above)
from herd import _torch_elastic as elastic  # noqa: E402 (Horovod's hvd.elastic)
from herd._torch_syncbn import SyncBatchNorm  # noqa: E402 (needs allgather and allreduce)
from herd import _torch_autograd as _autograd  # noqa: E402 (the collectives' gradients)
from herd import _torch_reduce_ops as _reduce_ops  # noqa: E402 (Min, Max and Product)
from herd import _torch_adasum as _adasum  # noqa: E402 (Adasum)
