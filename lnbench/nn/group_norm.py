"""Group norm of a layer's summed inputs (for the recurrent and MLP families; conv layers use torch's nn.GroupNorm)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GroupNorm(nn.Module):
    """Group norm (Wu & He 2018) of summed inputs (..., H): each case's H units in `groups` contiguous groups,
    each normalized by its own mean and variance; a gain (and bias) per unit. torch's F.group_norm, which
    takes (N, C, ...), sees the units as channels. One group is layer norm."""

    def __init__(self, num_features: int, groups: int, *, gain_init: float = 1.0, bias: bool = True, eps: float = 1e-5):
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.full((num_features,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(num_features)) if bias else None

    def forward(self, a: Tensor) -> Tensor:
        return F.group_norm(a.reshape(-1, a.shape[-1]), self.groups, self.weight, self.bias, self.eps).view_as(a)
