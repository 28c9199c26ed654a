"""ElasticSampler (horovod.torch.elastic.sampler): a sampler that partitions
the samples not yet processed in this epoch across the current world, and
re-partitions them after a reset."""
import math

import torch

from hvd.torch.mpi_ops import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Samples of dataset for this rank: the epoch's order (shuffled with
    seed + epoch when shuffle), minus the first processed_num, padded to a
    multiple of the world size and strided by rank. record_batch() counts
    processed samples (batch_size x world size per call); set_epoch() starts
    a new epoch; state_dict()/load_state_dict() carry (epoch, processed_num)
    through TorchState."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of batch_size samples on every rank."""
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict['epoch']
        self.processed_num = state_dict['processed_num']
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        """Re-partitions the remaining samples over the current world."""
        self.num_replicas = size()
        self.rank = rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(len(indices), generator=g).tolist()
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) * 1.0 / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        self.indices = self.remaining_indices[:]
        # Pad to a multiple of the world size, then take this rank's stride.
        self.indices += self.indices[:(self.total_size - len(self.indices))]
        self.indices = self.indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
