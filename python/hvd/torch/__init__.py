"""hvd.torch: a drop-in for horovod.torch (``import hvd.torch as hvd``)."""
from hvd.common import loader as _loader

_loader.load()

from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: E402
from hvd.torch.compression import Compression  # noqa: E402
from hvd.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,  # noqa: E402
                                 broadcast_parameters)
from hvd.torch.mpi_ops import (Adasum, Average, Max, Min, Product, ProcessSet, Sum,  # noqa: E402
                               add_process_set, allgather, allgather_async, allreduce, allreduce_,
                               allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                               broadcast_, broadcast_async, broadcast_async_, ccl_built, cross_rank, cross_size,
                               cuda_built, ddl_built, gloo_built, gloo_enabled, global_process_set,
                               grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                               grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                               grouped_reducescatter_async, init, is_homogeneous, is_initialized, join,
                               local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                               poll, rank, reducescatter, reducescatter_async, remove_process_set, rocm_built,
                               shutdown, size, sparse_allreduce_async, start_timeline, stop_timeline,
                               synchronize)
from hvd.torch.optimizer import DistributedOptimizer  # noqa: E402
from hvd.torch.p2p import irecv, isend, recv, send  # noqa: E402
from hvd.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402
from hvd.torch.zero import ShardedOptimizer  # noqa: E402  (ZeRO stages 1 and 2: docs/sharded-optimizer.md)
from hvd.torch import checkpoint  # noqa: E402,F401  (sharded checkpoints: docs/sharded-optimizer.md)
from hvd.torch import mpi_ops  # noqa: E402,F401  (hvd.mpi_ops._basics, as in Horovod)
from hvd.torch import elastic  # noqa: E402,F401  (hvd.elastic.run, TorchState, ElasticSampler: docs/elastic.md)
