"""The normalizer registry: one object per normalization kind, which the models ask instead of testing kinds.
Free of torch at import, so that composing a config, printing it or rejecting a bad override
(lnbench.config.schema) starts in a fraction of a second."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from lnbench.errors import ConfigError


class NormKind(str, Enum):
    """The built-in kinds (`normalizer(kind)` gives each one's object below); a config's `norm.kind` may
    also name a kind registered later (`register`)."""

    none = "none"
    batch = "batch"
    layer = "layer"
    weight = "weight"
    rms = "rms"
    group = "group"


@dataclass
class NormConfig:
    kind: str = NormKind.none.value  # a registered normalizer's name (NORMALIZERS)
    # LN's paper default is 1.0 (it also tries 0.1); recurrent BN's (Cooijmans et al.) is 0.1.
    gain_init: float = 1.0
    eps: float = 1e-5
    # BN: the paper's small-batch runs normalize with the unbiased variance estimator.
    unbiased_var: bool = False
    momentum: float = 0.1
    # WN: Salimans & Kingma's data-dependent initialisation of g and b from the first batch.
    data_init: bool = False
    # MLP only: also normalize the output layer's summed inputs (the logits). The paper's Figure 6 BN is
    # "applied to all layers"; its LN covers the hidden layers only.
    norm_logits: bool = False
    # Group norm (Wu & He 2018): the units (a conv layer's channels) in this many groups, each normalized
    # apart. Wu & He use 32 groups of ImageNet-sized layers; 8 fits lnbench's narrower ones.
    groups: int = 8


# ---- normalizers: one registered object per kind ------------------------------------------------
class Normalizer:
    """Everything a normalization kind implies, in one object the models ask instead of testing kinds.

    Subclass it, set the traits, give `module` (and `linear` or `apply` where the default does not fit),
    and `register()` an instance: configs accept `model.norm.kind=<name>` from then on, and the MLP, the
    LSTM/GRU cells and the Transformer build with it. The class imports torch only inside its methods, so
    that composing a config (which reads the traits) stays free of torch.

    Traits (class attributes, no defaults: a new kind must say what it is):
      linear_bias: the Linear feeding it keeps its own bias (nothing re-centers the summed inputs).
      norm_bias: its modules on a recurrent cell's input/recurrent projections carry an additive bias
        (LN's b). A cell whose projections end with no bias at all gets one gate bias (LSTM: b of eq. 20;
        GRU: a gate and candidate bias), so none is ever lost.
      batch_stats: its statistics are taken over the batch (needs >= 2 cases in training) and, in a
        recurrent layer, kept per time step.
      activations: it normalizes summed inputs; False means the cell is torch's own LSTM/GRU on (possibly
        re-parametrized) weights, which torch's fused kernel runs (the un-normalized GRU: lnbench's, see
        lnbench.nn.fast.layers.NATIVE_NONE_GRU_ISAS).
      fast_kernel: the name of lnbench's fast recurrent kernel that computes exactly this normalizer
        ("layer", "batch"), or None for the reference loop. Only an exact implementation may name one.
    """

    name: str
    linear_bias: bool
    norm_bias: bool
    batch_stats: bool
    activations: bool
    fast_kernel: Optional[str] = None

    def module(self, cfg: NormConfig, num_features: int, *, bias: bool = True, time_steps: int = 0):
        """The torch module normalizing summed inputs (..., B, num_features); bias: whether it carries its
        own additive bias; time_steps: per-step statistics for that many steps (batch_stats kinds)."""
        raise NotImplementedError

    def linear(self, cfg: NormConfig, in_features: int, out_features: int):
        """The Linear whose summed inputs this normalizer receives."""
        from torch import nn  # noqa: PLC0415 (config reads it torch-free)

        return nn.Linear(in_features, out_features, bias=self.linear_bias)

    def apply(self, module, a, t: Optional[int] = None):
        """The module on summed inputs `a` at time step t (None: a feed-forward layer or all steps at once)."""
        return module(a)

    def init_from_data(self, model, x, cfg: NormConfig) -> None:
        """A data-dependent initialisation from the first training batch `x`, if the kind has one."""

    def conv_module(self, cfg: NormConfig, channels: int):
        """The module normalizing a conv layer's summed inputs (B, C, H, W) (lnbench.models.conv); a kind
        without a convolutional form keeps this default, which refuses it."""
        has = [n for n, z in NORMALIZERS.items() if type(z).conv_module is not Normalizer.conv_module]
        raise ConfigError(
            f"model.norm.kind={self.name} is not allowed for a convolutional model: it has no "
            f"convolutional form here. Use one of {', '.join(has)}."
        )

    @property
    def cell_gate_bias(self) -> bool:
        """An LSTM's gate bias b (eq. 20): needed wherever the Linears lose theirs."""
        return not self.linear_bias

    @property
    def gru_extra_bias(self) -> bool:
        """A GRU's gate and candidate bias: needed where neither the Linears nor the normalizers carry one."""
        return not self.linear_bias and not self.norm_bias


NORMALIZERS: dict[str, Normalizer] = {}


def register(normalizer: Normalizer) -> Normalizer:
    """Adds (or replaces) a normalization kind under its name; returns it."""
    for trait in ("name", "linear_bias", "norm_bias", "batch_stats", "activations"):
        if not hasattr(normalizer, trait):
            raise TypeError(f"{type(normalizer).__name__} does not set the Normalizer trait {trait!r}")
    NORMALIZERS[str(normalizer.name)] = normalizer
    return normalizer


def normalizer(kind: "str | NormKind") -> Normalizer:
    """The registered normalizer of `kind` (a NormKind or its name)."""
    name = getattr(kind, "value", kind)
    try:
        return NORMALIZERS[name]
    except KeyError:
        raise ConfigError(
            f"model.norm.kind={name} is not allowed: expected one of [{', '.join(NORMALIZERS)}] (the registered "
            f"normalizers; a new one is a Normalizer passed to lnbench.nn.normalizers.register)."
        ) from None


class _NoNorm(Normalizer):
    name, linear_bias, norm_bias, batch_stats, activations = "none", True, False, False, False

    def module(self, cfg, num_features, *, bias=True, time_steps=0):
        from torch import nn  # noqa: PLC0415 (config reads it torch-free)

        return nn.Identity()

    def conv_module(self, cfg, channels):
        from torch import nn  # noqa: PLC0415 (config reads it torch-free)

        return nn.Identity()


class _WeightNorm(_NoNorm):
    """Salimans & Kingma: torch's weight_norm parametrization of each Linear; summed inputs untouched."""

    name = "weight"
    conv_module = Normalizer.conv_module  # no weight-normed conv layers here: refused, not silently none

    def linear(self, cfg, in_features, out_features):
        from torch import nn  # noqa: PLC0415 (config reads it torch-free)
        from torch.nn.utils.parametrizations import weight_norm  # noqa: PLC0415 (config reads it torch-free)

        linear = nn.Linear(in_features, out_features, bias=True)
        if cfg.data_init:  # Salimans & Kingma sample v from N(0, 0.05) before the data-dependent init
            nn.init.normal_(linear.weight, 0.0, 0.05)
        return weight_norm(linear, name="weight", dim=0)

    def init_from_data(self, model, x, cfg):
        if cfg.data_init:
            from lnbench.nn.weight_norm import weight_norm_data_init  # noqa: PLC0415 (config reads it torch-free)

            weight_norm_data_init(model, x)


class _LayerNorm(Normalizer):
    name, linear_bias, norm_bias, batch_stats, activations, fast_kernel = "layer", False, True, False, True, "layer"

    def module(self, cfg, num_features, *, bias=True, time_steps=0):
        from torch import nn  # noqa: PLC0415 (config reads it torch-free)

        ln = nn.LayerNorm(num_features, eps=cfg.eps, bias=bias)
        nn.init.constant_(ln.weight, cfg.gain_init)
        return ln

    def conv_module(self, cfg, channels):
        # The paper's LN of a conv layer: statistics over all its summed inputs of one case (C x H x W),
        # a gain and bias per channel: torch's GroupNorm with a single group.
        return _group_norm(cfg, 1, channels)


class _RMSNorm(Normalizer):
    name, linear_bias, norm_bias, batch_stats, activations = "rms", False, False, False, True

    def module(self, cfg, num_features, *, bias=True, time_steps=0):
        from torch import nn  # noqa: PLC0415 (config reads it torch-free)

        rms = nn.RMSNorm(num_features, eps=cfg.eps)
        nn.init.constant_(rms.weight, cfg.gain_init)
        return rms


class _BatchNorm(Normalizer):
    """The paper's eq. 2; per-time-step statistics in a recurrent layer (Cooijmans et al.)."""

    name, linear_bias, norm_bias, batch_stats, activations, fast_kernel = "batch", False, False, True, True, "batch"

    def module(self, cfg, num_features, *, bias=True, time_steps=0):
        from lnbench.nn.batch_norm import BatchNorm  # noqa: PLC0415 (config reads it torch-free)

        return BatchNorm(
            num_features,
            gain_init=cfg.gain_init,
            bias=bias,
            eps=cfg.eps,
            momentum=cfg.momentum,
            unbiased=cfg.unbiased_var,
            time_steps=time_steps,
        )

    def apply(self, module, a, t=None):
        return module(a, t)

    def conv_module(self, cfg, channels):
        from torch import nn  # noqa: PLC0415 (config reads it torch-free)

        if cfg.unbiased_var:  # torch's BatchNorm2d has no such option (over B x H x W cases it is ~1 anyway)
            raise ConfigError(
                "model.norm.unbiased_var=true is not allowed for a convolutional model: its batch norm "
                "is torch's BatchNorm2d (statistics over batch x height x width). Leave it false."
            )
        bn = nn.BatchNorm2d(channels, eps=cfg.eps, momentum=cfg.momentum)
        nn.init.constant_(bn.weight, cfg.gain_init)
        return bn


class _GroupNorm(Normalizer):
    """Group norm (Wu & He 2018): per case, statistics over each of `groups` groups of units (of channels in a
    conv layer, over their height x width too); a gain and bias per unit. One group is LN."""

    name, linear_bias, norm_bias, batch_stats, activations = "group", False, True, False, True

    def module(self, cfg, num_features, *, bias=True, time_steps=0):
        from lnbench.nn.group_norm import GroupNorm  # noqa: PLC0415 (config reads it torch-free)

        _check_groups(cfg.groups, num_features)
        return GroupNorm(num_features, cfg.groups, gain_init=cfg.gain_init, bias=bias, eps=cfg.eps)

    def conv_module(self, cfg, channels):
        return _group_norm(cfg, cfg.groups, channels)


def _check_groups(groups: int, units: int) -> None:
    if groups < 1 or units % groups:
        raise ConfigError(
            f"model.norm.groups={groups} is not allowed here: group norm splits a layer's {units} "
            f"units (or channels) into equal groups, so it must be an integer >= 1 dividing {units}."
        )


def _group_norm(cfg: NormConfig, groups: int, channels: int):
    from torch import nn  # noqa: PLC0415 (config reads it torch-free)

    _check_groups(groups, channels)
    gn = nn.GroupNorm(groups, channels, eps=cfg.eps)
    nn.init.constant_(gn.weight, cfg.gain_init)
    return gn


for _n in (_NoNorm(), _BatchNorm(), _LayerNorm(), _WeightNorm(), _RMSNorm(), _GroupNorm()):
    register(_n)
