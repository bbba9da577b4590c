"""The choices a config names for the models, free of torch so that composing a config, printing it or
rejecting a bad override (lnbench.config) starts in a fraction of a second."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class NormKind(str, Enum):
    none = "none"
    batch = "batch"
    layer = "layer"
    weight = "weight"
    rms = "rms"


@dataclass
class NormConfig:
    kind: NormKind = NormKind.none
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


class Impl(str, Enum):
    auto = "auto"  # torch's fused kernel without a normalizer, the fast layer where there is one
    reference = "reference"  # the plain per-step loop over the reference cell, always
    fast = "fast"  # lnbench's fast layer (an error where it does not exist)
