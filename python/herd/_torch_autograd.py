"""The gradients of herd.torch's collectives (allreduce, allgather, broadcast,
reducescatter and alltoall on tensors that require grad), as Horovod's are differentiable.

Each backward is the collective that carries the output's gradient back to the inputs
that made it, for the sum of every rank's loss: an allreduce's is the same allreduce; an
allgather's is the sum over the ranks of the rows each rank gave (a reduce-scatter);
a broadcast's is that sum on the root and zero elsewhere; a reduce-scatter's is every
rank's output gradient, gathered; an alltoall's is the output's gradient sent back the
way it came. With DistributedOptimizer averaging the parameters'
gradients, N ranks then train as one process taking the global batch (python_torch
checks a contrastive loss over allgathered features). Horovod averages instead of
summing in the allgather's and broadcast's backward, which gives 1/N of that gradient
for what crosses ranks. Every rank runs these in the same order, as its backward
meets them (a rank whose tensor requires no grad while the others' do leaves them
waiting: the stall inspector names it)."""
import torch

from herd import torch as hvd


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, average, name, op, compression, prescale, postscale, process_set):
        ctx.args = (average, name, op, compression, prescale, postscale, process_set)
        return hvd._allreduce_copy(tensor, average, name, op, compression, prescale, postscale, process_set)

    @staticmethod
    def backward(ctx, grad):
        average, name, op, compression, prescale, postscale, process_set = ctx.args
        back = hvd._allreduce_copy(grad.contiguous(), average, f"{name or 'allreduce'} gradient", op,
                                   compression, prescale, postscale, process_set)
        return back, None, None, None, None, None, None, None


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out, rows_of = hvd._allgather(tensor, name, process_set)
        ctx.rows_of, ctx.name, ctx.shape, ctx.process_set = rows_of, name, tensor.shape, process_set
        return out

    @staticmethod
    def backward(ctx, grad):
        host = grad.detach().to("cpu", copy=True, memory_format=torch.contiguous_format)
        mine = hvd._sum_my_rows(host, ctx.rows_of, 1.0, 0, f"{ctx.name or 'allgather'} gradient",
                                ctx.process_set)
        return mine.reshape(ctx.shape).to(grad.device), None, None


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.name, ctx.process_set = root_rank, name, process_set
        return hvd._broadcast_copy(tensor, root_rank, name, process_set)

    @staticmethod
    def backward(ctx, grad):
        total = hvd._allreduce_copy(grad.contiguous(), None, f"{ctx.name or 'broadcast'} gradient",
                                    hvd.Sum, process_set=ctx.process_set)
        if hvd.rank() != ctx.root:
            total.zero_()
        return total, None, None, None


class Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, compression, process_set):
        out = hvd._reducescatter(tensor, name, op, prescale, postscale, compression, process_set)
        ctx.scale = hvd._scale(op, None, "reducescatter", process_set) * float(prescale) * float(postscale)
        ctx.name, ctx.process_set = name, process_set
        return out

    @staticmethod
    def backward(ctx, grad):
        every = hvd._allgather(grad.contiguous(), f"{ctx.name or 'reducescatter'} gradient",
                               ctx.process_set)[0]
        return every * ctx.scale, None, None, None, None, None, None


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = hvd._alltoall(tensor, splits, name, process_set)
        ctx.received, ctx.name, ctx.process_set = received.tolist(), name, process_set
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = hvd._alltoall(grad.contiguous(), ctx.received, f"{ctx.name or 'alltoall'} gradient",
                                ctx.process_set)
        return back, None, None, None
