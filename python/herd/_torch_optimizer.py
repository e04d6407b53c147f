"""herd.torch.DistributedOptimizer: gradients averaged over the ranks in buckets that
start reducing during backward, on herd's communication thread, as herd's own trainer
does (src/train/buckets.c): the last layers' gradients, ready first, go first in a small
bucket, the rest in buckets of bucket_mb. Buckets start in one fixed order on every
rank (a bucket waits for the ones before it), so the ranks' collectives always pair up;
the ranks check at construction that they hold the same parameters."""
import contextlib
import hashlib
import warnings

import torch

from herd import HerdError, InvalidArgument, _herd
from herd import torch as hvd

FIRST_BUCKET_MB = 1.0


# herd_timeline_span; the timeline goes to the file every so many steps (a collective).
_SPAN_STEP, _SPAN_BACKWARD, _SPAN_COMM_WAIT, _SPAN_OPTIMIZER = 0, 2, 3, 4
_TIMELINE_WRITE_EVERY = 100


class _Bucket:
    def __init__(self, index, params, dtype):
        self.index, self.params, self.dtype = index, params, dtype
        self.numel = sum(p.numel() for p in params)
        self.flat = torch.empty(self.numel, dtype=dtype, device=params[0].device)
        self.offsets, at = [], 0
        for p in params:
            self.offsets.append(at)
            at += p.numel()
        self.pending = set()
        self.launched = False
        self.handle = None


def _buckets(params, bucket_mb):
    """Params in reverse order of the model's registration (backward reaches the last
    layers first), cut by dtype, device and size: the first bucket small so that
    communication starts early."""
    buckets, current, size, limit = [], [], 0, FIRST_BUCKET_MB * 2 ** 20
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and (p.dtype != current[0].dtype or p.device != current[0].device or
                        size + nbytes > limit):
            buckets.append(_Bucket(len(buckets), current, current[0].dtype))
            current, size, limit = [], 0, bucket_mb * 2 ** 20
        current.append(p)
        size += nbytes
    if current:
        buckets.append(_Bucket(len(buckets), current, current[0].dtype))
    return buckets


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 bucket_mb, sparse_as_dense, process_set):
        super(self.__class__, self).__init__(params)
        self._sparse_as_dense = bool(sparse_as_dense)
        self._process_set = hvd._ps._of(process_set, "DistributedOptimizer")
        all_params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(n, tuple) or len(n) != 2 for n in named):
                raise InvalidArgument("named_parameters takes model.named_parameters(): (name, parameter) pairs")
            names = {id(p): name for name, p in named}
            missing = [p for p in all_params if id(p) not in names]
            if missing:
                raise InvalidArgument(f"{len(missing)} parameters of the optimizer are not in "
                                      "named_parameters; pass model.named_parameters() of the same model")
            if len(set(names.values())) != len(names):
                raise InvalidArgument("named_parameters has a name twice")
            # The model's order: the registration order that backward reverses.
            order = {id(p): i for i, (_, p) in enumerate(named)}
            all_params.sort(key=lambda p: order[id(p)])
        else:
            names = {id(p): f"param.{i}" for i, p in enumerate(all_params)}
        if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
                or backward_passes_per_step < 1:
            raise InvalidArgument(f"backward_passes_per_step must be an integer >= 1, got {backward_passes_per_step!r}")
        try:  # herd train's --bucket-mb range
            in_range = 0.001 <= float(bucket_mb) <= 4096
        except (TypeError, ValueError):
            in_range = False
        if isinstance(bucket_mb, bool) or not in_range:
            raise InvalidArgument(f"bucket_mb must be a number in [0.001, 4096], got {bucket_mb!r}")
        if compression not in hvd._WIRE:
            raise InvalidArgument(f"compression is Compression.none, fp16 or bf16, got {compression!r}")
        for p in all_params:
            hvd._check(p, f"parameter {names[id(p)]}")
            if p.dtype not in hvd._DTYPES:
                raise HerdError(f"parameter {names[id(p)]} is {p.dtype}: herd reduces float32, "
                                "float64, float16 and bfloat16 gradients")
        self._names = names
        self._adasum = op == hvd.Adasum  # the methods of herd/_torch_adasum.py's AdasumSteps
        self._scale = 1.0 if self._adasum else hvd._scale(op, None, "DistributedOptimizer", self._process_set)
        self._compression = compression
        self._passes = backward_passes_per_step
        self._buckets = _buckets(all_params, float(bucket_mb))
        if compression != "none" and any(b.dtype != torch.float32 for b in self._buckets):
            warnings.warn("herd.torch: compression applies to float32 gradients; the others "
                          "travel as they are")
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        self._bucket_mb = float(bucket_mb)
        self._all_params = all_params
        self._gathered = []  # parameters with sparse gradients: their rows allgathered, not bucketed
        self._sparse_checked = self._sparse_as_dense or self._adasum  # Adasum: deltas are dense
        self._counts = {id(p): 0 for p in all_params}
        self._next = 0
        self._synchronized = False
        self._should_synchronize = True
        self._steps = 0  # for the timeline: steps taken, and when the last one ended
        self._last_step_end = self._backward_start = self._first_backward = None
        self._check_ranks_agree(all_params)
        self._hooks = []
        if self._process_set.size() > 1:
            self._start_gpu_collectives(all_params, self._process_set)
            self._register_hooks(all_params)

    def _check_ranks_agree(self, params):
        desc = "\n".join(f"{self._names[id(p)]} {tuple(p.shape)} {p.dtype}" for p in params)
        desc += f"\nbuckets {[b.numel for b in self._buckets]} passes {self._passes} " \
                f"compression {self._compression} scale {self._scale} sparse_as_dense {self._sparse_as_dense} " \
                f"adasum {self._adasum}"
        digests = hvd.allgather_object(hashlib.sha256(desc.encode()).hexdigest(), "optimizer check",
                                       self._process_set)
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        if differ:
            raise HerdError(f"DistributedOptimizer: rank(s) {differ} hold other parameters, buckets "
                            "or options than rank 0 (names, shapes, dtypes, backward_passes_per_step, "
                            "compression, op, sparse_as_dense): build the same model and optimizer on every rank")

    @staticmethod
    def _start_gpu_collectives(params, process_set):
        """With gradients on a GPU, one collective here makes herd's GPU backend and
        communicator on this thread, together on every rank: the gradient hooks run on
        PyTorch's backward thread, which should only queue sums."""
        cuda = [p for p in params if p.is_cuda]
        if cuda:
            hvd.allreduce(torch.zeros(1, device=cuda[0].device), name="the GPU's first sum",
                          process_set=process_set)

    def _register_hooks(self, params):
        # A parameter's gradients feed the newest DistributedOptimizer built over it: an
        # earlier one's hooks (not removable on PyTorch 1.13's accumulators) stay inert.
        self._token = object()
        for p in params:
            p._herd_optimizer = self._token
            if hasattr(p, "register_post_accumulate_grad_hook"):  # PyTorch 2.1+
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda param: self._grad_ready(param)))
            else:  # the gradient accumulator's hook, kept alive with the optimizer
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append(acc)
                acc.register_hook(self._make_hook(p))

    def _make_hook(self, p):
        def hook(*_):
            self._grad_ready(p)
        return hook

    def _grad_ready(self, p):
        if not self._should_synchronize or getattr(p, "_herd_optimizer", None) is not self._token:
            return
        key = id(p)
        self._counts[key] += 1
        if self._counts[key] < self._passes:
            return
        if self._counts[key] > self._passes:
            raise HerdError(f"gradient of {self._names[key]} computed {self._counts[key]} times before "
                            f"step() (backward_passes_per_step={self._passes}); call step() or "
                            "synchronize() after each step's backward passes")
        if hvd._timeline_on and self._backward_start is None:
            self._backward_start = _herd.timeline_now()  # the step's first gradient
        bucket = self._bucket_of.get(key)
        if bucket is None:  # sparse rows: gathered at synchronize
            return
        bucket.pending.add(key)
        self._launch_ready()

    def _launch_ready(self, force=False):
        """Starts the buckets whose gradients are all ready, in bucket order."""
        while self._next < len(self._buckets):
            b = self._buckets[self._next]
            if not force and len(b.pending) < len(b.params):
                return
            self._launch(b)
            self._next += 1

    def _launch(self, b):
        with torch.no_grad():
            for p, at in zip(b.params, b.offsets):
                view = b.flat[at:at + p.numel()]
                if p.grad is None:
                    view.zero_()  # unused here: the other ranks' gradients still count
                elif p.grad.is_sparse:  # an embedding's rows: summed dense
                    view.copy_(p.grad.to_dense().reshape(-1))
                else:
                    view.copy_(p.grad.reshape(-1))
        _herd.set_activity(f"herd.torch: backward, gradient bucket {b.index + 1} of {len(self._buckets)}")
        wire = self._compression if b.dtype == torch.float32 else "none"
        b.handle = hvd._allreduce_agreed(b.flat, op=hvd.Sum, compression=wire,
                                         name=f"gradient bucket {b.index + 1}",
                                         prescale_factor=self._scale, process_set=self._process_set)
        b.launched = True

    def synchronize(self):
        """Waits for every bucket (starting those whose gradients never came: unused
        parameters count as zero) and writes the mean gradients into .grad."""
        if self._process_set.size() == 1:
            self._synchronized = True
            return
        self._launch_ready(force=True)
        _herd.set_activity("herd.torch: waiting for the gradient buckets")
        wait_start = _herd.timeline_now() if hvd._timeline_on else None
        with torch.no_grad():
            for b in self._buckets:
                hvd.synchronize(b.handle)
                for p, at in zip(b.params, b.offsets):
                    mean = b.flat[at:at + p.numel()].view_as(p)
                    if p.grad is None:
                        p.grad = mean.clone()
                    elif p.grad.is_sparse:  # handed back as rows, unless asked dense
                        p.grad = mean.clone() if self._sparse_as_dense else mean.to_sparse(1)
                    else:
                        p.grad.copy_(mean)
                b.pending.clear()
                b.launched, b.handle = False, None
            for p in self._gathered:
                self._gather_rows(p)
        self._next = 0
        for key in self._counts:
            self._counts[key] = 0
        self._synchronized = True
        if not self._sparse_checked:
            self._gather_sparse_from_now_on()
        if wait_start is not None:
            now, step = _herd.timeline_now(), self._steps + 1
            if self._backward_start is not None:
                _herd.timeline_record(_SPAN_BACKWARD, step, self._backward_start, wait_start)
            _herd.timeline_record(_SPAN_COMM_WAIT, step, wait_start, now)
        self._first_backward, self._backward_start = self._backward_start, None
        _herd.set_activity("herd.torch: forward and backward")

    def _gather_sparse_from_now_on(self):
        """After the first step, which found which parameters' gradients are sparse (an
        nn.Embedding(sparse=True)): from the next step on, those send their rows, as
        Horovod's default does (an allgather of each rank's row indices and values, summed
        where rows repeat), instead of the whole table in a bucket. Decided by every rank
        of the set together (a rank that did not touch an embedding this step has no
        gradient for it), so that the buckets stay the same everywhere."""
        self._sparse_checked = True
        mine = [self._names[id(p)] for p in self._all_params if p.grad is not None and p.grad.is_sparse]
        every = set().union(*hvd.allgather_object(mine, "sparse gradients", self._process_set))
        if not every:
            return
        self._gathered = [p for p in self._all_params if self._names[id(p)] in every]
        dense = [p for p in self._all_params if self._names[id(p)] not in every]
        self._buckets = _buckets(dense, self._bucket_mb)
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}

    def _gather_rows(self, p):
        """p's gradient rows from every rank of the set, the mean of each row as sparse rows."""
        name = self._names[id(p)]
        g = p.grad
        if g is None:  # not touched here: no rows of this rank's
            rows = torch.empty(0, dtype=torch.int64, device=p.device)
            values = torch.empty((0,) + tuple(p.shape[1:]), dtype=p.dtype, device=p.device)
        elif not g.is_sparse:
            raise HerdError(f"gradient of {name} is dense on rank {hvd.rank()}, sparse before: an "
                            "embedding's sparse= must not change between steps")
        else:
            g = g.coalesce()
            rows, values = g.indices()[0], g.values()
        _herd.set_activity(f"herd.torch: gathering the gradient rows of {name}")
        rows = hvd.allgather(rows, f"{name} rows", self._process_set)
        values = hvd.allgather(values, f"{name} values", self._process_set)
        if self._scale != 1.0:
            values = values * self._scale
        p.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), values, p.shape).coalesce()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step after an explicit synchronize() (gradient clipping): step() then
        does not synchronize again."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize and not self._synchronized:  # not done by hand already
            self.synchronize()
        self._synchronized = False
        if not hvd._timeline_on:
            self._last_step_end = None
            return super(self.__class__, self).step(closure)
        start = _herd.timeline_now()
        result = super(self.__class__, self).step(closure)
        end = _herd.timeline_now()
        self._steps += 1
        _herd.timeline_record(_SPAN_OPTIMIZER, self._steps, start, end)
        begin = self._last_step_end if self._last_step_end is not None else self._first_backward
        if begin is not None:  # a step: from the end of the one before (the first: its backward)
            _herd.timeline_record(_SPAN_STEP, self._steps, begin, end)
        self._last_step_end = end
        # every rank at the same step, none pending (a process set's ranks alone: at the end)
        if self._steps % _TIMELINE_WRITE_EVERY == 0 and self._process_set is hvd.global_process_set:
            with hvd._join.collective(hvd.global_process_set, hvd._join.TIMELINE):
                _herd.timeline_write(False)
        return result

    def zero_grad(self, set_to_none=None):
        if any(b.launched for b in self._buckets):
            raise HerdError("zero_grad() while gradient buckets are being reduced: call step() "
                            "(or synchronize()) after backward first")
        if set_to_none is None:
            return super(self.__class__, self).zero_grad()
        return super(self.__class__, self).zero_grad(set_to_none=set_to_none)


def DistributedOptimizer(optimizer, named_parameters=None, compression="none",
                         backward_passes_per_step=1, op="Average", gradient_predivide_factor=1.0,
                         bucket_mb=25.0, sparse_as_dense=False, process_set=None, num_groups=0, groups=None):
    """Wraps optimizer (of any torch.optim class): step() first averages the gradients
    over the ranks, reduced in buckets during backward. As Horovod's; bucket_mb is herd's
    --bucket-mb (the first bucket is 1 MiB). Sparse gradients (an nn.Embedding with
    sparse=True) travel as the rows each rank touched, allgathered, from the second step
    on (the first finds them), as Horovod's default does, and come back as sparse rows, so
    that optimizers that take only sparse gradients (SparseAdam) keep working; with
    sparse_as_dense they stay in their bucket and come back dense. gradient_predivide_factor
    (Horovod's split of the averaging around the sum) is accepted and changes nothing: herd applies 1/size
    once, after the sum on a float32 wire and before the cast on a 16-bit one (so that a
    sum cannot overflow where the mean would not), which is the same mean. process_set:
    the ranks that average (a ProcessSet this rank is in; all by default). num_groups and
    groups (Horovod's fusion groups) are checked and change nothing: herd's buckets choose
    which gradients travel together, and the values are the same either way."""
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 0:
        raise InvalidArgument(f"num_groups must be an int >= 0, got {num_groups!r}")
    if groups is not None and not isinstance(groups, int):
        mine = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if not isinstance(groups, (list, tuple)) or any(
                not isinstance(g, (list, tuple)) or any(id(p) not in mine for p in g) for g in groups):
            raise InvalidArgument("groups is an int or a list of lists of the optimizer's parameters")
    if not gradient_predivide_factor > 0:
        raise InvalidArgument(f"gradient_predivide_factor must be > 0, got {gradient_predivide_factor}")
    if gradient_predivide_factor != 1.0 and op != "Average":
        raise InvalidArgument("gradient_predivide_factor applies to op=Average")
    methods = dict(_DistributedOptimizer.__dict__)
    if op == hvd.Adasum:  # Horovod's delta optimizer (herd/_torch_adasum.py)
        methods.update({k: v for k, v in hvd._adasum.AdasumSteps.__dict__.items() if not k.startswith("__")})
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, bucket_mb, sparse_as_dense, process_set or hvd.global_process_set)
