"""What makes a completed run's numbers suspect: flagged in its summary (`flags`) and in the end-of-sweep block."""

from __future__ import annotations

import math

from omegaconf import DictConfig

SUSPECT_FACTOR = 100  # "orders of magnitude" above a trivial predictor's loss: at least two


def suspect(cfg: DictConfig, final_val: dict[str, float] | None, baseline: float | None) -> list[str]:
    """Why a completed run's numbers cannot be taken at face value (empty: nothing found): a warmup that
    outlasted the run, which then never trained at optim.lr; a final loss orders of magnitude above what
    predicting the mean or the class frequencies scores, which means the run blew up without ever reaching
    Inf (SGD with momentum above 1 ended at val mse 2.5e14)."""
    said = []
    warmup, steps = int(cfg.schedule.warmup_steps), int(cfg.steps)
    if warmup > steps:
        said.append(
            f"schedule.warmup_steps={warmup} outlasts the run (steps={steps}): the learning rate never "
            f"reached optim.lr, only {steps / warmup:.3g} of it"
        )
    loss = (final_val or {}).get("loss")
    if baseline and loss is not None and math.isfinite(loss) and loss > SUSPECT_FACTOR * baseline:
        said.append(
            f"final val loss {loss:.3g} is {loss / baseline:.3g} x a trivial predictor's ({baseline:.3g}): the "
            f"run did far worse than a constant guess; try a smaller optim.lr"
        )
    return said
