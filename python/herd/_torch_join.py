"""hvd.join(): ranks with fewer batches than the others stop early, as Horovod's join.

A rank that runs out of data calls hvd.join(); until every rank has, it takes part in the
others' collectives with nothing of its own: zeros in their allreduces (DistributedOptimizer's
gradient buckets among them: the mean still divides by every rank of the job, as Horovod
and DDP's Join do by default), the identity in a min, max or product, no rows in their
allgathers and SyncBatchNorm statistics.
join() returns, on every rank, the rank that joined last, whose parameters are the ones
to broadcast (the others stopped updating theirs when they joined).

herd's collectives pair up by order, not by name, so a joined rank must learn what the
others start next. With join on (hvd.init(join=True) or HERD_TORCH_JOIN=1, the same on
every rank: it costs a small sum per collective), every collective herd.torch starts on
the job (not on a process set) is announced by a small allreduce first, on the same queue: [1, kind, a, b, c] from each
rank still training (float32, a in two digits of 12 bits so that the sums stay exact; a
float32 sum queues on the communication thread where a float64 one would wait for the
queue), zeros from a joined one. The sum tells a joined rank how many ranks
still train and what to take part in; it tells the ones still training whether any rank
has joined. The announcement of an allreduce or an allgather travels ahead of it without
a wait (one small sum more on the queue per collective); a collective a joined rank cannot take part in (Adasum, broadcast, alltoall,
reducescatter, barrier) waits for its announcement and raises on every rank when some
rank has joined, instead of leaving the others waiting."""
import contextlib

import torch

from herd import HerdError, InvalidArgument, _herd
from herd import _torch_process_sets as _ps

ALLREDUCE, ALLGATHER, SYNCBN, TIMELINE, OTHER, REDUCE = 2, 3, 4, 5, 6, 7
enabled = False  # announcements on: hvd.init(join=True) or HERD_TORCH_JOIN=1, on every rank
_F32 = 0  # herd_dtype
_DIGIT = 4096
_quiet = 0  # inside a collective already announced (its own inner collectives are not)
_rounds = 0  # announcements this rank took part in: the same sequence on every rank
_joined_at = None  # _rounds when this rank called join()


def _announce(active, kind=0, a=0, b=0, c=0):
    """Queues the announcement on the job's queue; (buffer, ticket): keep the buffer until
    a later collective on the job has completed."""
    global _rounds
    _rounds += 1
    header = torch.tensor([active, kind, a // _DIGIT, a % _DIGIT, b, c], dtype=torch.float32)
    return header, _herd.allreduce_start(header.data_ptr(), 6, _F32, 1.0, 0, "join: announcement", 0)


def takes_part(ps):
    """Whether a joined rank would take part in ps's allreduces (announced, with zeros): then
    they are not described first (herd/_torch_agree.py), the joined rank knowing no op."""
    return enabled and ps is _ps.global_process_set and _herd.size() > 1


@contextlib.contextmanager
def collective(ps, kind, a=0, b=0, c=0, what=None):
    """Around a collective that herd.torch starts on ps: announced when on the job, yields
    the announcement's buffer (None when not announced) to keep alive until the collective
    is done. what: for a kind a joined rank cannot take part in (waits, raises)."""
    global _quiet
    if not enabled or _quiet or ps is not _ps.global_process_set or _herd.size() == 1:
        yield None
        return
    header, ticket = _announce(1, kind, a, b, c)
    if kind == OTHER:
        _herd.wait(ticket, 0)
        if header[0] < _herd.size():
            raise HerdError(f"{what}: {_herd.size() - int(header[0])} rank(s) have called hvd.join(), "
                            "and a joined rank takes part in allreduce (not op=Adasum), allgather, "
                            "SyncBatchNorm and DistributedOptimizer steps only; call join() after the last "
                            "of those")
    _quiet += 1
    try:
        yield header
    finally:
        _quiet -= 1


def join(device=-1):
    """Horovod's hvd.join: see the module's doc. Returns the rank that joined last."""
    global _joined_at, _quiet
    from herd import torch as hvd
    del device  # Horovod's GPU to run the joined rank's zeros on; herd's go through host memory
    if hvd.size() == 1:
        return 0
    if not enabled:
        raise HerdError("hvd.join needs the job's collectives announced from the start: launch with "
                        "HERD_TORCH_JOIN=1 (herd run -x HERD_TORCH_JOIN=1 -- python3 ...) or call "
                        "hvd.init(join=True) on every rank (a small sum more per collective)")
    others = [ps for ps in _ps.process_sets() if ps.process_set_id != 0]
    if others:
        raise InvalidArgument(f"hvd.join with process sets registered ({others}): join takes part in the "
                              "job's collectives only; remove the sets first")
    if _quiet:
        raise HerdError("hvd.join inside a collective")
    _joined_at = _rounds
    try:
        while True:
            header, ticket = _announce(0)
            _herd.wait(ticket, 0)
            active = int(header[0])
            if active == 0:
                break
            kind, a_hi, a_lo, b, c = (int(round(float(v) / active)) for v in header[1:])
            a = a_hi * _DIGIT + a_lo
            _quiet += 1
            try:
                _take_part(hvd, kind, a, b, c)
            finally:
                _quiet -= 1
        # Every rank is here: the last to join is the one that took part in most announcements.
        n = hvd.size()
        mine, every = torch.tensor([_joined_at], dtype=torch.int64), torch.empty(n, dtype=torch.int64)
        _herd.allgather(mine.data_ptr(), every.data_ptr(), [8] * n, 0)
        return max(range(n), key=lambda r: (int(every[r]), r))
    finally:
        _joined_at = None


def _take_part(hvd, kind, a, b, c):
    """A joined rank's part in the collective announced: nothing of its own."""
    if kind == ALLREDUCE:  # a, b, c: values, herd_dtype, wire
        dtype = {0: torch.float32, 1: torch.float64, 2: torch.float16, 3: torch.bfloat16}[b]
        zeros = torch.zeros(a, dtype=dtype)
        _herd.wait(_herd.allreduce_start(zeros.data_ptr(), a, b, 1.0, c, "join: zeros", 0), 0)
    elif kind == REDUCE:  # a, b, c: values, herd_dtype, min, max or product
        hvd._reduce_ops.take_part_joined(a, b, c)
    elif kind == ALLGATHER:  # a: bytes of one row; none of this rank's, as the others gather
        hvd._gather_rows(torch.empty((0, a), dtype=torch.uint8), _ps.global_process_set, "hvd.join: allgather")
    elif kind == SYNCBN:  # a: bytes of a row of statistics; this rank's with a count of 0
        n = hvd.size()
        row, every = torch.zeros(a // 8, dtype=torch.float64), torch.empty(n * a // 8, dtype=torch.float64)
        _herd.allgather(row.data_ptr(), every.data_ptr(), [a] * n, 0)
    elif kind == TIMELINE:
        _herd.timeline_write(False)
    elif kind == OTHER:
        raise HerdError(f"hvd.join: rank {hvd.rank()} has joined, and the others started a collective "
                        "a joined rank takes no part in (broadcast, alltoall, reducescatter, barrier or Adasum); "
                        "call join() after the last of those")
    else:
        raise HerdError(f"hvd.join: an announcement of kind {kind} (the ranks started different collectives?)")
