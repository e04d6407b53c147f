"""herd.torch's process sets (Horovod's): collectives among some of the job's ranks.

    evens = hvd.add_process_set([0, 2])       # every rank of the job calls it, in one order
    if evens.included():
        hvd.allreduce(t, process_set=evens)   # the ranks of the set, and only they

A set is a group of herd's communicator (herd_dist_split: MPI_Comm_split), with its own
queue and communication thread under the job's stall inspector and timeout, so the sets'
collectives run side by side. Ranks are the job's (hvd.rank()): a broadcast's root_rank
too, as in Horovod; within a set its ranks count in increasing order (ProcessSet.rank())."""
from herd import InvalidArgument, _herd


class ProcessSet:
    """Some of the job's ranks. Registered by hvd.init(process_sets=[...]) or
    hvd.add_process_set, which give it its process_set_id."""

    def __init__(self, ranks):
        try:
            ranks = sorted(ranks)
        except TypeError:
            raise InvalidArgument(f"ProcessSet takes a list of ranks, got {ranks!r}") from None
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise InvalidArgument(f"ProcessSet takes ranks as ints, got {ranks!r}")
        if len(set(ranks)) != len(ranks):
            raise InvalidArgument(f"ProcessSet: rank(s) named twice in {ranks}")
        self.ranks = ranks
        self.process_set_id = None

    def _registered(self):
        if self.process_set_id is None:
            raise InvalidArgument(f"{self} is not registered: pass it to hvd.init(process_sets=...) "
                                  "or hvd.add_process_set first")

    def included(self):
        """Whether this rank is in the set."""
        self._registered()
        return _herd.rank() in self._all()

    def _all(self):
        return range(_herd.size()) if self.process_set_id == 0 else self.ranks

    def size(self):
        self._registered()
        return len(self._all())

    def rank(self):
        """This rank's place in the set (its ranks in increasing order); None when not in it."""
        self._registered()
        ranks = list(self._all())
        return ranks.index(_herd.rank()) if _herd.rank() in ranks else None

    def __str__(self):
        ranks = "all" if self.process_set_id == 0 else self.ranks
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_registered = {0: global_process_set}


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks) and returns it. Collective: every rank of
    the job calls it with the same ranks, sets in the same order."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise InvalidArgument(f"{ps} is registered already")
    # herd_dist_split checks the ranks on every rank together: one whose list is bad alone
    # raises with the others, not before them.
    ps.process_set_id = _herd.add_process_set(ps.ranks)
    _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a set (collective, as add_process_set, with none of its collectives
    pending); False for the global set, which stays."""
    if process_set.process_set_id == 0:
        return False
    if _registered.get(process_set.process_set_id) is not process_set:
        raise InvalidArgument(f"{process_set} is not registered")
    _herd.remove_process_set(process_set.process_set_id)
    del _registered[process_set.process_set_id]
    process_set.process_set_id = None
    return True


def process_sets():
    """The registered sets, by id (the global set first)."""
    return [_registered[k] for k in sorted(_registered)]


def _forget_all():
    """After shutdown: the groups went with the job."""
    for k in [k for k in _registered if k != 0]:
        _registered.pop(k).process_set_id = None


def _of(process_set, what):
    """The registered set a collective runs on, which this rank must be in."""
    if not isinstance(process_set, ProcessSet):
        raise InvalidArgument(f"{what}: process_set takes a ProcessSet, got {type(process_set).__name__}")
    process_set._registered()
    if _registered.get(process_set.process_set_id) is not process_set:
        raise InvalidArgument(f"{what}: {process_set} was removed")
    if not process_set.included():
        raise InvalidArgument(f"{what}: this rank ({_herd.rank()}) is not in {process_set}")
    return process_set


def _root_in(process_set, root_rank, what):
    """A job's rank (Horovod's root_rank) as its place in the set."""
    ranks = list(process_set._all())
    if int(root_rank) not in ranks:
        raise InvalidArgument(f"{what}: root_rank {root_rank} is not in {process_set}")
    return ranks.index(int(root_rank))
