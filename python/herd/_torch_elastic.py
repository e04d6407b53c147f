"""herd.torch.elastic: Horovod's elastic API (TorchState, run) for jobs that herd run
--max-restarts relaunches (docs/python.md, "Restarts of a herd.torch script").

Horovod keeps its processes and resets the communicator in place; herd relaunches the
whole job, on the ranks there are. So what survives a failure is what was committed to
disk: state.commit() has rank 0 write the model, the optimizer and the state's own
attributes (epoch, batch, ...) to checkpoint_dir/state.pt, atomically, and the wrapper
of @hvd.elastic.run loads the last commit on a relaunch and broadcasts it from rank 0,
so every rank starts the attempt from the same bytes.
"""
import functools
import math
import os
import sys

import torch

from herd import HerdError

STATE_FILE = "state.pt"
_RESERVED = ("model", "optimizer", "checkpoint_dir")


def _say(message):
    """One line on stderr, as herd prints its own (one write: ranks' lines never mix)."""
    sys.stderr.write(f"herd: {message}\n")
    sys.stderr.flush()


def _hvd():
    import herd.torch as hvd  # herd.torch imports this module: resolved at call time
    return hvd


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's hvd.elastic.ElasticSampler: this rank's share of an epoch of dataset's
    indices (shuffled by seed + epoch when shuffle), leaving out the ones the job has
    processed this epoch. Call record_batch(batch_idx, batch_size) (or record_indices)
    after each batch; given to TorchState as a keyword (train_sampler=sampler), a commit
    keeps every rank's processed indices, and an attempt that resumes from it, on as many
    ranks or on others, shares what is left of the epoch among its ranks."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch, self.processed_indices = 0, set()
        self.reset()

    def set_epoch(self, epoch):
        """A new epoch: nothing processed yet."""
        self.epoch, self.processed_indices = epoch, set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks the indices of this rank's batch batch_idx (of batch_size) processed."""
        self.record_indices(self.indices[batch_idx * batch_size:(batch_idx + 1) * batch_size])

    def record_indices(self, indices):
        self.processed_indices.update(int(i) for i in indices)

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices)}

    def load_state_dict(self, state):
        self.epoch, self.processed_indices = state["epoch"], set(state["processed_indices"])
        self.reset()

    def reset(self):
        """Shares the epoch's unprocessed indices among the job's ranks as it is now."""
        hvd = _hvd()
        self.num_replicas, self.rank = hvd.size(), hvd.rank()
        left = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:  # the same order on every rank: one seed
            order = torch.randperm(len(left), generator=torch.Generator().manual_seed(self.seed + self.epoch))
            left = [left[i] for i in order.tolist()]
        self.num_samples = math.ceil(len(left) / self.num_replicas) if left else 0
        total = self.num_samples * self.num_replicas
        padded = left + left[:total - len(left)]  # every rank as many (Horovod's padding)
        self.indices = padded[self.rank:total:self.num_replicas]

    def _gather(self):
        """Every rank's processed indices (a collective: commit() runs it on every rank)."""
        for theirs in _hvd().allgather_object(sorted(self.processed_indices), name="elastic sampler"):
            self.processed_indices.update(theirs)

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples


class TorchState:
    """The state a relaunched attempt resumes from: model and optimizer (either may be
    None) and any picklable attributes given as keywords (epoch=0, batch=0), read and
    written as state.epoch, and ElasticSamplers (train_sampler=sampler), whose processed
    indices every rank's commit gathers. checkpoint_dir (or HERD_ELASTIC_DIR) is where commit()
    writes; without one a commit lives in memory only, for restore()."""

    def __init__(self, model=None, optimizer=None, checkpoint_dir=None, **attrs):
        for name in attrs:
            if name.startswith("_") or name in _RESERVED:
                raise HerdError(f"herd.torch.elastic.TorchState: '{name}' cannot be a state attribute")
        object.__setattr__(self, "_attrs", dict(attrs))
        self.model, self.optimizer = model, optimizer
        self.checkpoint_dir = checkpoint_dir or os.environ.get("HERD_ELASTIC_DIR") or None
        self._saved = None
        self._saved_size = None  # the job's size at the commit an attempt resumed from
        self._reset_callbacks = []

    def __getattr__(self, name):  # only for names not found the usual way: the attributes
        attrs = self.__dict__.get("_attrs", {})
        if name in attrs:
            return attrs[name]
        raise AttributeError(f"TorchState has no attribute '{name}'")

    def __setattr__(self, name, value):
        if name in self.__dict__.get("_attrs", {}):
            self._attrs[name] = value
        else:
            object.__setattr__(self, name, value)

    def _samplers(self):
        return {k: v for k, v in self._attrs.items() if isinstance(v, ElasticSampler)}

    def _snapshot(self):
        samplers = self._samplers()
        for sampler in samplers.values():
            sampler._gather()
        return {"model": self.model.state_dict() if self.model is not None else None,
                "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
                "attrs": {k: v for k, v in self._attrs.items() if k not in samplers},
                "samplers": {k: v.state_dict() for k, v in samplers.items()}, "size": _hvd().size()}

    def _apply(self, snap):
        if self.model is not None and snap["model"] is not None:
            self.model.load_state_dict(snap["model"])
        if self.optimizer is not None and snap["optimizer"] is not None:
            self.optimizer.load_state_dict(snap["optimizer"])
        self._attrs.update(snap["attrs"])
        for name, state in snap.get("samplers", {}).items():
            if isinstance(self._attrs.get(name), ElasticSampler):
                self._attrs[name].load_state_dict(state)

    def path(self):
        """The file commit() writes, or None without a checkpoint directory."""
        return os.path.join(self.checkpoint_dir, STATE_FILE) if self.checkpoint_dir else None

    def save(self):
        """Keeps a copy in memory for restore(); writes nothing."""
        snap = self._snapshot()
        # Copies: state_dict() returns the live tensors, which the next step changes.
        self._saved = _clone(snap)
        return snap

    def commit(self):
        """Saves the state; with a checkpoint directory rank 0 also writes it to disk, whole
        or not at all (a temporary file renamed over the last commit), for a relaunch."""
        snap = self.save()
        path = self.path()
        if path and _hvd().rank() == 0:
            os.makedirs(self.checkpoint_dir, exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                torch.save(snap, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(self.checkpoint_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def restore(self):
        """Back to the last save() or commit() of this process."""
        if self._saved is None:
            raise HerdError("herd.torch.elastic: restore() before any commit()")
        self._apply(_clone(self._saved))

    def sync(self):
        """Rank 0's model, optimizer and attributes into every rank's."""
        hvd = _hvd()
        if self.model is not None:
            hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        samplers = self._samplers()
        plain = {k: v for k, v in self._attrs.items() if k not in samplers}
        self._attrs.update(hvd.broadcast_object(plain, root_rank=0, name="elastic attributes"))
        for name, state in hvd.broadcast_object({k: v.state_dict() for k, v in samplers.items()},
                                                root_rank=0, name="elastic samplers").items():
            samplers[name].load_state_dict(state)  # and shared among this job's ranks
        self._saved_size = hvd.broadcast_object(self._saved_size, root_rank=0, name="elastic size")

    def register_reset_callbacks(self, callbacks):
        """Called (no arguments) when an attempt resumes on another number of ranks than
        the commit was made on: to scale the learning rate, rebuild samplers, ..."""
        self._reset_callbacks.extend(callbacks)

    def _load_commit(self):
        """Rank 0 reads the last commit, when this attempt should resume from one."""
        path = self.path()
        supervised = bool(os.environ.get("HERD_RUN_SUPERVISED"))
        attempt = int(os.environ.get("HERD_RUN_RESTARTS", "0") or 0)
        hvd = _hvd()
        if not path:
            if supervised and attempt > 0 and hvd.rank() == 0:
                _say("warning: herd.torch.elastic: no checkpoint_dir (or HERD_ELASTIC_DIR): this "
                     "restarted attempt starts from the beginning")
            return
        exists = hvd.broadcast_object(os.path.exists(path) if hvd.rank() == 0 else None, root_rank=0,
                                      name="elastic commit")
        if not exists:
            return
        if not supervised:
            raise HerdError(f"herd.torch.elastic: {path} holds the state an earlier job committed; "
                            "remove it to start afresh, or run under herd run --max-restarts, "
                            "which resumes from it")
        if hvd.rank() == 0:
            try:
                snap = torch.load(path, map_location="cpu", weights_only=False)
            except Exception as e:  # a torn file cannot be: commit renames whole files
                raise HerdError(f"herd.torch.elastic: cannot read {path}: {e}") from e
            self._apply(snap)
            self._saved_size = snap["size"]
            _say(f"herd.torch.elastic: resumed from {path} (committed on {snap['size']} "
                 f"rank(s); {hvd.size()} now)")


def _clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(v) for v in obj)
    return obj


def run(func):
    """Decorates the training function func(state, ...): each attempt resumes from the
    last commit (under herd run --max-restarts), every rank from rank 0's bytes."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, TorchState):
            raise HerdError("herd.torch.elastic.run: the first argument must be a TorchState")
        state._load_commit()
        state.sync()
        if state._saved_size is not None and state._saved_size != _hvd().size():
            for callback in state._reset_callbacks:
                callback()
        return func(state, *args, **kwargs)
    return wrapper
