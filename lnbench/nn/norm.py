"""The normalizers compared by lnbench, one small module each, and the one factory that picks them.

Every normalizer here acts on summed inputs `a` of shape (..., B, H): the last dim holds the H hidden
units, the one before it the batch. What each kind implies (its module, bias rules, statistics) is one
`Normalizer` object registered in lnbench.nn.normalizers; the factories below ask it. Layer and RMS norm are
torch's own modules; batch norm is lnbench.nn.batch_norm's, because torch's BatchNorm1d offers neither the
paper's unbiased-variance option for small batches nor per-time-step statistics; weight norm is torch's
own parametrization of a Linear's weight, with lnbench.nn.weight_norm's data-dependent initialisation.
"""

from __future__ import annotations

from torch import nn

from lnbench.nn.batch_norm import BatchNorm  # noqa: F401 (re-exported)
from lnbench.nn.group_norm import GroupNorm  # noqa: F401 (re-exported)
from lnbench.nn.normalizers import Normalizer, NormConfig, NormKind, normalizer, register  # noqa: F401 (re-exported)
from lnbench.nn.weight_norm import weight_norm_data_init  # noqa: F401 (re-exported)


def as_norm_config(cfg: NormConfig | dict | None) -> NormConfig:
    """A NormConfig whose kind is a registered normalizer (a built-in one as its NormKind member)."""
    if cfg is None:
        return NormConfig()
    if not isinstance(cfg, NormConfig):
        cfg = NormConfig(**dict(cfg))
    name = normalizer(cfg.kind).name  # KeyError naming the registered kinds
    cfg.kind = NormKind(name) if name in {k.value for k in NormKind} else name
    return cfg


def make_linear(cfg: NormConfig, in_features: int, out_features: int) -> nn.Linear:
    """A Linear whose summed inputs feed `cfg`'s normalizer (weight norm re-parametrizes its weight)."""
    return normalizer(cfg.kind).linear(cfg, in_features, out_features)


def make_norm(cfg: NormConfig, num_features: int, *, bias: bool = True, time_steps: int = 0) -> nn.Module:
    """The normalizer of summed inputs for `cfg.kind` (Identity for none and weight norm).

    bias: whether the normalizer carries its own additive bias (LN's b, BN's beta).
    time_steps: for BN in a recurrent layer, keep separate statistics for this many time steps.
    """
    return normalizer(cfg.kind).module(cfg, num_features, bias=bias, time_steps=time_steps)
