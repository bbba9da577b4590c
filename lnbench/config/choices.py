"""Enumerated choices and reserved names a config uses (besides the normalizer, lnbench.nn.normalizers);
free of torch."""

from __future__ import annotations

from enum import Enum


class Placement(str, Enum):
    """Where a Transformer block normalizes (lnbench.models.transformer)."""

    pre = "pre"  # x + f(N(x)), and N before the head (Xiong et al.'s Pre-LN)
    post = "post"  # N(x + f(x)) (the original Transformer's Post-LN)


class Stage(str, Enum):
    """A run's part in a tuned comparison (the `stage` key; lnbench.claims.verdicts): set by `lnbench check`."""

    tune = "tune"  # chooses the hyperparameters (every run made by hand)
    widen = "widen"  # the same, at a value lnbench check added beyond the grid's edge
    judge = "judge"  # a fresh seed at the chosen value, judged on

    def __str__(self) -> str:  # "judge" in file and directory names and f-strings, not "Stage.judge"
        return self.value

    @classmethod
    def of(cls, value: object) -> "Stage":
        """The stage a recorded value names; runs made before the key existed, or with another value, tune."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.tune


class Impl(str, Enum):
    """How a recurrent layer runs its cell (lnbench.nn.fast.layers); every way computes the same equations."""

    # torch's fused kernel without a normalizer (the GRU: lnbench's C++ one), the fast layer where there is one
    auto = "auto"
    reference = "reference"  # the plain per-step loop over the reference cell, always
    fast = "fast"  # lnbench's fast layer (an error where it does not exist)
    torch = "torch"  # as auto, but only torch's kernels and ops: never lnbench's C++ kernels


# The name of the record every run writes (metrics.jsonl) among its metric sinks and in its checkpoint: no logger
# entry may take it (lnbench.config.validate refuses one; lnbench.training.sinks.jsonl is that sink).
RECORD_SINK = "jsonl"
