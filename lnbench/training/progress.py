"""A run's pace: a line at a steady interval where no progress bar is drawn (a log file, a sweep's job), and
one warning, after the first few steps, when the run will take long.

Without it a run outside a terminal said nothing between evaluations, and a preset at the paper's full size
(model=ln_draw: ~25 s a step on 2 cores) trained for minutes before its first line said how slow it was.
"""

from __future__ import annotations

import logging
import time

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from lnbench.config.presets import experiments, sweeper_params

log = logging.getLogger("lnbench")

EVERY_S = 30.0  # a progress line this often where no bar is drawn
LONG_S = 300.0  # a run projected to take longer than this says so, once (ln_draw, 20 steps: 8 min)
MEASURED_STEPS = 3  # steps timed for the projection, after the first (its warm-up is no measure of the pace)


class Pace:
    def __init__(
        self,
        steps: int,
        start: int = 0,
        lines: bool = True,
        every_s: float = EVERY_S,
        long_s: float = LONG_S,
        clock=time.monotonic,
    ):
        self.steps, self.start, self.lines = steps, start, lines
        self.every_s, self.long_s, self.clock = every_s, long_s, clock
        self.first: float | None = None  # when the first step ended: the pace is measured from there
        self.last_line = clock()
        self.text = ""  # the latest training values shown (loss, primary metric)

    def note(self, text: str) -> None:
        self.text = text

    def tick(self, step: int) -> None:
        """After each step; cheap (a clock read) unless a line or the warning is due."""
        now = self.clock()
        if step == self.start + 1:
            self.first = now
        elif self.first is not None and step == self.start + 1 + MEASURED_STEPS:
            self.warn_if_long(step, now)
        if self.lines and now - self.last_line >= self.every_s:
            self.last_line = now
            self.line(step, now)

    def seconds_per_step(self, step: int, now: float) -> float | None:
        done = step - self.start - 1
        return (now - self.first) / done if self.first is not None and done > 0 else None

    def warn_if_long(self, step: int, now: float) -> None:
        rate = self.seconds_per_step(step, now)
        left = None if rate is None else rate * (self.steps - step)
        if left is not None and left > self.long_s:
            log.warning(
                "this run will take about %s more: %.3g s a step over %d steps left.%s",
                duration(left),
                rate,
                self.steps - step,
                smaller_preset_hint(),
            )

    def line(self, step: int, now: float) -> None:
        rate = self.seconds_per_step(step, now)
        eta = f"  ETA {duration(rate * (self.steps - step))}" if rate is not None else ""
        pace = f"  {rate * 1000:.1f} ms/step" if rate is not None else ""
        log.info("step %d/%d%s%s%s", step, self.steps, f"  {self.text}" if self.text else "", pace, eta)


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def smaller_preset_hint() -> str:
    """Where the run's model preset is used smaller by an experiment the run is not part of: that experiment."""
    try:
        choices = HydraConfig.get().runtime.choices
        model, experiment = choices.get("model"), choices.get("experiment")
    except Exception:  # noqa: BLE001 (not a Hydra job: a test, a caller of its own; no preset to name)
        return ""
    runs_it = experiments_running(str(model))
    if not model or experiment or not runs_it:
        return ""
    return (
        f" {' or '.join(f'+experiment={e}' for e in runs_it)} runs model={model} smaller, at a size for a few CPU "
        "cores (`lnbench presets`)."
    )


def experiments_running(model: str) -> list[str]:
    """Experiment presets that set or sweep model=`model` and resize it (a `model:` section of their own)."""
    found = []
    for name, cfg in experiments().items():
        overrides = [d for d in cfg.get("defaults") or [] if isinstance(d, dict)]
        chosen = [next(iter(d.values())) for d in overrides if "override /model" in d]
        swept = sweeper_params(cfg).get("model", "").split(",")
        if model in chosen + swept and isinstance(cfg.get("model"), dict):
            found.append(name)
    return found


def in_sweep() -> bool:
    """Whether this process runs a job of a Hydra sweep (whose parent shows the sweep's progress)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
