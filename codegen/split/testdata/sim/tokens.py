"""train.data and train.loss for tinygpt: token ids from a Markov chain and cross-entropy."""
import torch
import torch.nn.functional as F

from tinygpt import SEQ, VOCAB


def batches(step, batch_size, seed):
    """Sequences from a fixed random Markov chain over the vocabulary; targets: shifted by one."""
    table = torch.Generator().manual_seed(seed + 7)
    probs = (torch.randn(VOCAB, VOCAB, generator=table, dtype=torch.float64) * 3).softmax(-1)
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    ids = torch.empty(batch_size, SEQ + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(VOCAB, (batch_size,), generator=g)
    for t in range(SEQ):
        ids[:, t + 1] = torch.multinomial(probs[ids[:, t]], 1, generator=g).squeeze(1)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def short(step, batch_size, seed):
    """Wrong: sequences one token shorter than model.input_shape."""
    ids, targets = batches(step, batch_size, seed)
    return ids[:, 1:], targets[:, 1:]


def per_token(logits, targets):
    """Wrong: a loss per token, not a scalar."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
