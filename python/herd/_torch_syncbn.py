"""herd.torch.SyncBatchNorm: Horovod's hvd.SyncBatchNorm, batch normalisation over the
global batch of all ranks (its statistics summed across them), on CPU and CUDA tensors.

Training on N ranks gives the bits of one process normalising the concatenated batch,
up to rounding: each rank's count, sum and squared deviations from its own mean are
gathered and combined in rank order on every rank (Chan et al.'s pairwise update, so no
E[x^2] - E[x]^2 cancellation), in float64. The backward sums the gradient's two
reductions over the ranks; the weight and bias gradients stay this rank's, as every
parameter's does until DistributedOptimizer averages them. Outside training, or on one
rank, it is torch's batch norm."""
import torch
import torch.nn.functional as F

from herd import _herd
from herd import torch as _hvd


def _reduce_dims(x):
    return [0] + list(range(2, x.dim()))


def _channel_view(v, x):
    return v.view([1, -1] + [1] * (x.dim() - 2))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        dims = _reduce_dims(x)
        x64 = x.detach().double()
        count = x.numel() // x.shape[1]
        mean_here = x64.mean(dims)
        sq_here = ((x64 - _channel_view(mean_here, x64)) ** 2).sum(dims)
        # One allgather of equal rows (host memory): [count, mean, squared deviations].
        mine = torch.cat([torch.tensor([float(count)], dtype=torch.float64),
                          mean_here.cpu(), sq_here.cpu()])
        every = torch.empty((_hvd.size(), mine.numel()), dtype=torch.float64)
        # A rank that has called hvd.join gives a row of count 0.
        with _hvd._join.collective(_hvd.global_process_set, _hvd._join.SYNCBN, mine.numel() * 8):
            _herd.allgather(mine.data_ptr(), every.data_ptr(), [mine.numel() * 8] * _hvd.size())
        c = x.shape[1]
        total, mean, sq = 0.0, torch.zeros(c, dtype=torch.float64), torch.zeros(c, dtype=torch.float64)
        for row in every:  # rank order, the same on every rank
            n, m, s = float(row[0]), row[1:1 + c], row[1 + c:]
            if n == 0:
                continue
            delta = m - mean
            grown = total + n
            mean = mean + delta * (n / grown)
            sq = sq + s + delta * delta * (total * n / grown)
            total = grown
        if total < 2:
            raise _hvd.InvalidArgument(f"SyncBatchNorm: {int(total)} value(s) per channel over all "
                                       "ranks; batch norm in training needs at least 2")
        invstd = torch.rsqrt(sq / total + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean), alpha=momentum)
                running_var.mul_(1 - momentum).add_((sq / (total - 1)).to(running_var),
                                                     alpha=momentum)
        mean32, invstd32 = mean.to(x), invstd.to(x)
        xhat = (x - _channel_view(mean32, x)) * _channel_view(invstd32, x)
        y = xhat
        if weight is not None:
            y = xhat * _channel_view(weight, x) + _channel_view(bias, x)
        ctx.save_for_backward(xhat, weight, invstd32)
        ctx.total = total
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, invstd = ctx.saved_tensors
        dims = _reduce_dims(dy)
        dy = dy.contiguous()
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        sums = torch.cat([sum_dy, sum_dy_xhat]).double().cpu()
        _hvd.allreduce_(sums, op=_hvd.Sum, name="sync batch norm gradient")
        c = dy.shape[1]
        mean_dy = (sums[:c] / ctx.total).to(dy)
        mean_dy_xhat = (sums[c:] / ctx.total).to(dy)
        scale = invstd if weight is None else invstd * weight
        dx = _channel_view(scale, dy) * (dy - _channel_view(mean_dy, dy)
                                         - xhat * _channel_view(mean_dy_xhat, dy))
        if weight is None:
            return dx, None, None, None, None, None, None
        return dx, sum_dy_xhat, sum_dy, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Batch norm whose training statistics are the global batch's (every rank's part of
    it): a drop-in for torch.nn.BatchNorm1d/2d/3d under herd.torch. Every rank must call it
    in the same order (it runs collectives in forward and backward)."""

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x):
        self._check_input_dim(x)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative average
                momentum = 1.0 / float(self.num_batches_tracked)
        if not self.training or _hvd.size() == 1:
            use_batch = self.training or not self.track_running_stats
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                use_batch, momentum, self.eps)
        keep = self.track_running_stats
        return _SyncBatchNormFunction.apply(x, self.weight, self.bias,
                                            self.running_mean if keep else None,
                                            self.running_var if keep else None, self.eps, momentum)

    @classmethod
    def convert_sync_batchnorm(cls, module):
        """module with every torch batch norm replaced by a SyncBatchNorm holding its
        parameters and running statistics (as torch.nn.SyncBatchNorm's helper does)."""
        out = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not isinstance(module, cls):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            if module.track_running_stats:
                out.running_mean = module.running_mean
                out.running_var = module.running_var
                out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child))
        return out
