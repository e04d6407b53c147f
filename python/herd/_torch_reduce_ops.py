"""Horovod's Min, Max and Product (allreduce(t, op=hvd.Max) and the rest): herd's
element-by-element reduction (herd_dist_allreduce_op_start, MPI's own MPI_MIN, MPI_MAX and
MPI_PROD on the communication thread), in the tensor's own type where herd has it.

float16 and bfloat16 travel as float32 (exact for min and max; a product is rounded once,
at the end), bool as uint8 (max: any, min and product: all). A NaN on any rank is the
min or max everywhere. Integer products that do not fit the type raise on every rank
instead of wrapping as MPI's do: the values are multiplied as float64 beside them, in
the same queue. A joined rank (hvd.join) takes part with the operation's identity.

Differentiable as the sums are: the gradient of the ranks' summed loss. For min and
max it goes to the ranks whose value is the result, shared equally between ties (as
torch.amax shares it); for a product, to each rank as the product of the others' values
(zeros included)."""
import torch

from herd import HerdError, InvalidArgument, _herd
from herd import _torch_join as _join
from herd import torch as hvd

_OPS = {"Min": 0, "Max": 1, "Product": 2}  # herd_reduce_op
TYPES = {0: torch.float32, 1: torch.float64, 4: torch.int8, 5: torch.uint8, 6: torch.int16,
         7: torch.int32, 8: torch.int64}  # herd_dtype -> torch
_CODES = {t: code for code, t in TYPES.items()}
_WIDENED = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.bool: torch.uint8}
_F64, _PRODUCT = 1, 2


def is_elementwise(op, average):
    return average is None and op in _OPS


def take_part_joined(n, code, opcode):
    """A joined rank's part (hvd.join) in an announced min, max or product of n values of
    herd_dtype code: the operation's identity, through the same collectives as start()."""
    dtype = TYPES[code]
    if opcode == _PRODUCT:
        value = 1
    elif dtype.is_floating_point:
        value = float("inf") if opcode == 0 else float("-inf")
    else:
        value = torch.iinfo(dtype).max if opcode == 0 else torch.iinfo(dtype).min
    mine = torch.full((n,), value, dtype=dtype)
    ticket, check = _queue(mine, code, opcode, "join: identity", 0)
    _herd.wait(ticket, 0)  # mine and check stay alive until here
    del check


def _queue(work, code, opcode, label, set_id):
    """Queues the reduction of work (and, for an integer product, of its values as float64
    beside it, to check that the result fits); (the last ticket, the float64 copy or None)."""
    # Copied before the reduction is queued: the communication thread writes work in place.
    check = work.to(torch.float64) if opcode == _PRODUCT and code not in (0, 1) else None
    ticket = _herd.allreduce_op_start(work.data_ptr(), work.numel(), code, opcode, label, set_id)
    if check is not None:
        ticket = _herd.allreduce_op_start(check.data_ptr(), check.numel(), _F64, _PRODUCT, f"{label}: fits",
                                          set_id)
    return ticket, check


def start(tensor, op, compression, prescale, postscale, what, name, ps):
    """Starts op over the ranks of ps, in place in tensor (contiguous); a hvd._Handle."""
    if compression != hvd.Compression.none:
        raise InvalidArgument(f"{what}: compression applies to sums and means, not op={op}")
    dtype = tensor.dtype
    if dtype not in _CODES and dtype not in _WIDENED:
        raise HerdError(f"{what}: {dtype} tensors have no {op} in herd; it reduces float32, float64, "
                        "float16, bfloat16, int8, uint8, int16, int32, int64 and bool")
    pre, post = float(prescale), float(postscale)
    if (pre != 1.0 or post != 1.0) and not dtype.is_floating_point:
        raise InvalidArgument(f"{what}: scale factors apply to floating-point tensors, not {dtype}")
    work = tensor
    if tensor.is_cuda or dtype in _WIDENED or pre != 1.0:  # a copy in host memory, written back
        work = tensor.detach().to("cpu", _WIDENED.get(dtype, dtype), copy=True)
        if pre != 1.0:
            work.mul_(pre)
    code, opcode = _CODES[work.dtype], _OPS[op]
    with _join.collective(ps, _join.REDUCE, work.numel(), code, opcode) as header:
        ticket, check = _queue(work, code, opcode, name or "allreduce", ps.process_set_id)
    h = hvd._Handle(work, ticket, None if post == 1.0 else post, keep=(header, check),
                    set_id=ps.process_set_id)
    if check is not None:
        h.finish = lambda: _fits(check, work.dtype, what)
    if work is not tensor:
        h.back = tensor
    return h


def _fits(product, dtype, what):
    """Raises (on every rank: they all hold the same products) when an integer product
    does not fit dtype: float64 products are exact below 2^53, within 1e-15 above."""
    if not product.numel():
        return
    info, big = torch.iinfo(dtype), product.abs().max().item()
    lo, hi = product.min().item(), product.max().item()
    margin = 0.0 if big < 2.0 ** 53 else big * 1e-12
    if lo < info.min - margin or hi > info.max + margin or (margin and big >= 2.0 ** 63 * (1 - 1e-12)):
        raise HerdError(f"{what}: a product over the ranks ({hi if hi > -lo else lo:.4g}) does not fit "
                        f"{dtype}; multiply a wider integer or a floating-point tensor")


class Elementwise(torch.autograd.Function):
    """allreduce(op=Min, Max or Product) of a floating-point tensor that requires grad: the
    reduction of the scaled values kept (in float32 for 16-bit tensors) for the backward."""

    @staticmethod
    def forward(ctx, tensor, name, op, compression, prescale, postscale, process_set):
        z = tensor.detach().to("cpu", _WIDENED.get(tensor.dtype, tensor.dtype), copy=True)
        if float(prescale) != 1.0:
            z.mul_(float(prescale))  # as start() scales: the same values, bit for bit
        r = hvd.synchronize(hvd.allreduce_async_(z.clone(), None, name, op, compression,
                                                 process_set=process_set))
        ctx.save_for_backward(z, r)
        ctx.args = (name, op, float(prescale) * float(postscale), process_set, tensor.dtype, tensor.device)
        return (r * float(postscale)).to(tensor.dtype).to(tensor.device)

    @staticmethod
    def backward(ctx, grad):
        z, r = ctx.saved_tensors
        name, op, scale, ps, dtype, device = ctx.args
        label = f"{name or 'allreduce'} gradient"
        g, n = grad.detach().to("cpu", torch.float64).reshape(-1), z.numel()
        z = z.reshape(-1)
        if op == "Product":
            zf = z.to(torch.float64)
            sums = hvd._allreduce_copy(torch.cat([g, (zf == 0).to(torch.float64)]), None, label, hvd.Sum,
                                       process_set=ps)
            ones = torch.ones_like(zf)
            nonzero = hvd._allreduce_copy(torch.where(zf == 0, ones, zf), None, label, op, process_set=ps)
            zeros = sums[n:]  # of the ranks' values, how many are 0: the others' product is 0 past one
            others = torch.where(zf == 0, torch.where(zeros > 1, 0.0, nonzero),
                                 torch.where(zeros > 0, 0.0, nonzero / torch.where(zf == 0, ones, zf)))
            back = sums[:n] * others
        else:  # the ranks whose value is the result share the gradient
            won = (z == r.reshape(-1)).to(torch.float64)
            sums = hvd._allreduce_copy(torch.cat([g, won]), None, label, hvd.Sum, process_set=ps)
            back = sums[:n] * won / sums[n:].clamp(min=1)
        back = (back * scale).reshape(grad.shape).to(dtype).to(device)
        return back, None, None, None, None, None, None
