"""Ranks that start different collectives raise, on every rank, instead of trading wrong bytes.

herd's collectives pair up by order, not by name: a rank calling allreduce(op=Sum) while
another calls allreduce(op=Max), broadcasts from another root, or sends 3 values where the
other sends 4, gets the other's bytes read as its own (wrong values, or MPI's own abort).
So every allreduce, broadcast and allgather a script starts through herd.torch first
exchanges its description: the same 64 bytes whatever the kind (an allgather), so that
even two kinds meet in the same exchange. Every rank compares every rank's description
with its own and raises the same InvalidArgument naming the first rank that differs and
the field, as Horovod's coordinator refuses mismatched tensors. An allgather's rows may
differ from rank to rank (the exchange also tells their counts: it is the allgather's
plan). DistributedOptimizer's gradient buckets skip it: their plan is checked once, when
the optimizer is built, and a blocking exchange per bucket would end their overlap with
backward. So do a job's allreduces with join on (hvd.init(join=True)): a rank that has
joined takes part in them knowing their size, not their op (herd/_torch_join.py).
"""
import threading
import zlib

import numpy as np

from herd import InvalidArgument, _herd

ALLREDUCE, BROADCAST, ALLGATHER = 1, 2, 3
_KINDS = {ALLREDUCE: "allreduce", BROADCAST: "broadcast", ALLGATHER: "allgather"}
_MAGIC = 0x68657264  # "herd": a description, not another collective's bytes
_FIELDS = ("magic", "kind", "dtype", "elements", "shape", "op", "root", "rows")
_N = len(_FIELDS)


def _code(text):
    return zlib.crc32(text.encode())  # the same on every rank, unlike hash()


_codes = {}  # dtype, shape and op codes already made (a few per script)


def _cached_code(key, text_of):
    code = _codes.get(key)
    if code is None:
        if len(_codes) > 4096:
            _codes.clear()
        code = _codes[key] = _code(text_of(key))
    return code


_local = threading.local()  # each thread's buffers, reused: the exchange is on every call


def _buffers(n):
    bufs = getattr(_local, "bufs", None)
    if bufs is None or bufs[1].shape[0] != n:
        bufs = _local.bufs = (np.empty(_N, np.int64), np.empty((n, _N), np.int64), [_N * 8] * n)
    return bufs


def row_bytes(t):
    """The bytes of one row (first-dimension slice) of t, also where it has no rows."""
    n = t.element_size()
    for d in t.shape[1:]:
        n *= d
    return n


def describe(ps, what, kind, tensor, op="", root=-1):
    """The collective's description, exchanged over ps; returns every rank's first
    dimension (an allgather's rows, which may differ; the other kinds' agree with their
    shape). op: any hashable whose str() is the same on every rank for the same reduction."""
    shape = tensor.shape
    rows = shape[0] if shape else 1
    if ps.size() == 1:
        return [rows]
    if kind == ALLGATHER:  # a row's bytes only: a joined rank (hvd.join) sends rows of bytes
        elements, dtype, shape_code = row_bytes(tensor), 0, 0
    else:
        dtype = _cached_code(tensor.dtype, str)
        elements, shape_code = tensor.numel(), _cached_code(shape, lambda s: str(tuple(s)))
    return _exchange(ps, what, (_MAGIC, kind, dtype, elements, shape_code, _cached_code(op, str),
                                root, rows), _N - 1 if kind == ALLGATHER else _N)


def describe_many(ps, what, kind, tensors, root=-1):
    """describe() of a list of tensors that one call moves one by one (broadcast_parameters:
    one exchange, not one a tensor)."""
    if ps.size() > 1:
        _exchange(ps, what, (_MAGIC, kind, _code("|".join(str(t.dtype) for t in tensors)),
                             sum(t.numel() for t in tensors),
                             _code(str([tuple(t.shape) for t in tensors])), 0, root, len(tensors)), _N)


def _exchange(ps, what, values, checked):
    """values against every rank's, their first `checked` fields equal or InvalidArgument;
    every rank's last field."""
    mine, every, counts = _buffers(ps.size())
    mine[:] = values
    _herd.allgather(mine.ctypes.data, every.ctypes.data, counts, ps.process_set_id)
    if not (every[:, :checked] == mine[:checked]).all():
        for r in range(ps.size()):
            differs = [f for f, a, b in zip(_FIELDS[:checked], every[r].tolist(), mine.tolist()) if a != b]
            if differs:
                raise InvalidArgument(_mismatch(ps, what, every[r].tolist(), mine.tolist(), r, differs))
    return every[:, _N - 1].tolist()


def _mismatch(ps, what, theirs, mine, r, differs):
    members = list(ps._all())
    me = _herd.rank()
    if "magic" in differs or theirs[1] not in _KINDS:
        told = "a collective herd.torch does not describe (a DistributedOptimizer step, a join, ...)"
    elif "kind" in differs:
        told = f"{_KINDS[theirs[1]]}"
    else:
        told = "the same kind with another " + ", ".join(
            {"dtype": "dtype", "elements": "number of elements", "shape": "shape", "op": "op, scale "
             "factors or compression", "root": f"root rank ({theirs[6]} against {mine[6]})",
             "rows": "row count"}[f] for f in differs)
        if theirs[1] == ALLGATHER:
            told = "allgather with rows of another size in bytes (only the first dimension may differ)"
    return (f"{what}: the ranks disagree on this collective: rank {members[r]} starts {told} "
            f"where rank {me} starts {_KINDS.get(mine[1], '?')}. Every rank must start the same "
            "collectives in the same order, with the same op, dtype, shape and root "
            "(herd pairs them by order, not by name)")
