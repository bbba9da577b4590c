"""Enumerated choices a model config names (besides the normalizer, lnbench.nn.normalizers); free of torch."""

from __future__ import annotations

from enum import Enum


class Placement(str, Enum):
    """Where a Transformer block normalizes (lnbench.models.transformer)."""

    pre = "pre"  # x + f(N(x)), and N before the head (Xiong et al.'s Pre-LN)
    post = "post"  # N(x + f(x)) (the original Transformer's Post-LN)


class Impl(str, Enum):
    """How a recurrent layer runs its cell (lnbench.nn.fast.layers); every way computes the same equations."""

    # torch's fused kernel without a normalizer (the GRU: lnbench's C++ one), the fast layer where there is one
    auto = "auto"
    reference = "reference"  # the plain per-step loop over the reference cell, always
    fast = "fast"  # lnbench's fast layer (an error where it does not exist)
    torch = "torch"  # as auto, but only torch's kernels and ops: never lnbench's C++ kernels
