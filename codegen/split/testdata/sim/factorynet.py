"""A factory model for the split generator's tests (model.factory: factorynet:build).

TestGolden's factory case describes these layers as the PyTorch plugin's inspection would.
"""
from torch import nn


def build():
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 3))
