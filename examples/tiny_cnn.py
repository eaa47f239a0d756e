"""A small CNN to try dlperf on your own code:

    dlperf analyze examples/tiny_cnn.py:model --gpu a100 --precision amp-fp16

`model()` returns the module and the inputs it expects (meta tensors are
fine: dlperf never needs real data). Loading this file runs it, as loading
any model file does.
"""

import torch
from torch import nn


def model():
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    return net, torch.empty(32, 3, 64, 64, device="meta")
