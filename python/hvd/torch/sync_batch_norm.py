"""SyncBatchNorm (horovod.torch.SyncBatchNorm): batch normalization whose
batch statistics are those of the whole batch across the ranks of a process
set, on CPU tensors.

Horovod's version needs CUDA (it calls torch.batch_norm_stats and friends,
which have no CPU kernels); this one computes the same quantities with plain
tensor operations, in float64:

forward (training, or track_running_stats=False): every member computes its
  shard's element count n_r, per-channel mean m_r and sum of squared
  deviations M2_r; one allgather of (n_r, m_r, M2_r) over the process set;
  the whole batch's mean and biased variance follow from Chan's parallel
  formula (shards may have different sizes); running_mean and running_var
  (unbiased) are updated with momentum (or the cumulative average when
  momentum is None) exactly as torch.nn.BatchNorm does on the whole batch.
backward: the per-channel sums of dy and dy·(x - mean) are allreduced (Sum)
  over the set, as Horovod's; the input gradient is then the whole-batch
  BatchNorm gradient for this shard. The weight and bias gradients are this
  shard's share (their sum over the members is the whole batch's), which
  DistributedOptimizer's allreduce combines, as in Horovod.
eval (with running stats): the running statistics, no communication.

Every member of the set must call forward (and backward) in the same order;
a rank outside process_set gets ValueError from the collective.
"""
import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from hvd.common.process_sets import global_process_set
from hvd.torch.mpi_ops import Sum, allgather_async, allreduce_async, synchronize


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous N-dimensional BatchNorm: the normalization uses
    the statistics of the whole batch over the members of process_set.

    Arguments:
        num_features: number of channels `C` from the shape `(N, C, ...)`
        eps: a value added to the denominator for numerical stability. Default: 1e-5
        momentum: the value used for the running_mean and running_var
            computation. Can be set to `None` for cumulative moving average
            (i.e. simple average). Default: 0.1
        affine: whether the module has learnable affine parameters. Default: `True`
        track_running_stats: whether the module tracks running mean and
            variance; when `False` batch statistics are used in eval mode too.
            Default: `True`
        process_set: the ranks whose batches are normalized together
            (hvd addition; Horovod's uses every rank). Default: the global set.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError('expected at least 2D input (got {}D input)'.format(input.dim()))

    def forward(self, input):
        self._check_input_dim(input)
        if input.size(1) != self.num_features:
            raise ValueError('SyncBatchNorm(%d): input has %d channels (dimension 1 of shape %s)'
                             % (self.num_features, input.size(1), tuple(input.shape)))
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not use_batch_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        update = self.training and self.track_running_stats
        running_mean = self.running_mean if update else None
        running_var = self.running_var if update else None
        if self.process_set.size() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias, True, factor, self.eps)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, running_mean, running_var, self.eps, factor,
                                    self.process_set)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set):
        """Returns module with every torch.nn.BatchNorm*D layer replaced by a
        SyncBatchNorm over process_set (parameters and buffers carried over),
        as torch.nn.SyncBatchNorm.convert_sync_batchnorm does."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_set=process_set)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return out


def _channels_last(x):
    """x as (C, rest): channel 1 first, everything else flattened."""
    return x.transpose(0, 1).reshape(x.size(1), -1)


def _bcast(v, x):
    """A per-channel vector shaped to broadcast against x (N, C, ...)."""
    return v.view([1, -1] + [1] * (x.dim() - 2))


class _SyncBatchNorm(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        x = input.contiguous().to(torch.float64)
        c = x.size(1)
        flat = _channels_last(x)
        n = flat.size(1)
        mean = flat.mean(dim=1) if n > 0 else torch.zeros(c, dtype=torch.float64)
        m2 = ((flat - mean.unsqueeze(1)) ** 2).sum(dim=1)
        stats = torch.cat([torch.tensor([float(n)], dtype=torch.float64), mean, m2]).unsqueeze(0)
        gathered = synchronize(allgather_async(stats, name='sync_batch_norm.stats', process_set=process_set))
        counts, means, m2s = gathered[:, 0], gathered[:, 1:1 + c], gathered[:, 1 + c:]
        total = counts.sum()
        if total.item() == 0:
            raise ValueError('SyncBatchNorm: the batch is empty on every member of the process set')
        gmean = (counts.unsqueeze(1) * means).sum(dim=0) / total
        gm2 = (m2s + counts.unsqueeze(1) * (means - gmean) ** 2).sum(dim=0)
        var = gm2 / total
        invstd = 1.0 / torch.sqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(gmean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            if total.item() <= 1:
                raise ValueError('Expected more than 1 value per channel when training, got input size %s '
                                 'on every member together' % (list(input.shape),))
            with torch.no_grad():
                unbiased = gm2 / (total - 1)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        xhat = (x - _bcast(gmean, x)) * _bcast(invstd, x)
        y = xhat
        if weight is not None:
            y = y * _bcast(weight.detach().to(torch.float64), x) + _bcast(bias.detach().to(torch.float64), x)
        ctx.save_for_backward(x, weight, gmean, invstd)
        ctx.total = total
        ctx.process_set = process_set
        ctx.in_dtype = input.dtype
        return y.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]
        g = grad_output.contiguous().to(torch.float64)
        xmu = x - _bcast(mean, x)
        sum_dy = _channels_last(g).sum(dim=1)
        sum_dy_xmu = _channels_last(g * xmu).sum(dim=1)
        grad_input = grad_weight = grad_bias = None
        if weight is not None and need_weight:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if weight is not None and need_bias:
            grad_bias = sum_dy.to(weight.dtype)
        if need_input:
            both = torch.cat([sum_dy, sum_dy_xmu])
            both = synchronize(allreduce_async(both, op=Sum, name='sync_batch_norm.sum_dy_xmu',
                                               process_set=ctx.process_set))
            c = x.size(1)
            mean_dy, mean_dy_xmu = both[:c] / ctx.total, both[c:] / ctx.total
            w = weight.detach().to(torch.float64) if weight is not None else torch.ones_like(invstd)
            grad_input = _bcast(w * invstd, x) * (g - _bcast(mean_dy, x) - xmu * _bcast(invstd ** 2 * mean_dy_xmu, x))
            grad_input = grad_input.to(ctx.in_dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
