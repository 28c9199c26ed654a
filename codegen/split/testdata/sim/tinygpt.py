"""A small GPT written the way people write one (model.factory: tinygpt:build): token and position
embeddings in one module, a ModuleList of blocks, a final LayerNorm and the head. Not an
nn.Sequential: the PyTorch plugin's inspection cuts it at block boundaries.

TestGolden's pytorch-factory-gpt-train case describes these layers as the inspection would;
TestSimulatedPipeline and TestEndToEnd train it with tokens.py's data and loss.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, SEQ, HIDDEN, HEADS, BLOCKS = 64, 16, 32, 4, 4


class Embed(nn.Module):
    """Token and position embeddings, added."""
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(SEQ, HIDDEN)

    def forward(self, ids):
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))


class Block(nn.Module):
    """Causal self-attention and an MLP, LayerNorm before each, residuals inside the block."""
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.qkv, self.proj = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
        self.mlp = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN))

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (z.view(b, t, HEADS, h // HEADS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // HEADS)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, h))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = Embed()
        self.blocks = nn.ModuleList([Block() for _ in range(BLOCKS)])
        self.ln_f = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def build():
    return GPT()
