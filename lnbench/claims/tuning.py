"""Fair tuning: each model at its own best value of a swept hyperparameter, chosen on validation only.

For each (panel, line) cell the tuning runs are split by the tuned keys' values; the value whose runs have
the lowest mean final validation metric (the primary metric, over seeds) wins. A value with a run that did
not complete (diverged, failed, killed, still running) never wins over one whose runs all completed; where
no value completed every run, the one with the fewest such runs wins, and the selection says so. Test
metrics are never read here: the selection gets only a function that returns a run's final validation
value, and None for a run that did not complete. A winner at either end of a numeric grid is flagged:
the best value may lie outside the grid (`lnbench check` then widens it, lnbench/check/cli.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np

R = TypeVar("R")


@dataclass
class Selection(Generic[R]):
    keys: list[str]
    chosen: tuple  # the winning values, one per key
    grid: list[tuple]  # every value tried, in grid order
    means: dict[tuple, float | None]  # value -> mean final validation metric, None unless every run completed
    runs: list[R] = field(default_factory=list)  # the winner's runs
    edge: list[str] = field(default_factory=list)  # keys whose winner is the grid's lowest or highest value
    incomplete: bool = False  # no value completed all its runs: the winner is the one with the fewest failures
    widened: int = 0  # values beyond the first grid's edge (stage=widen runs), set by the caller

    def text(self) -> str:
        chosen = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(self.keys, self.chosen))
        notes = [
            n
            for n, on in (
                ("edge of grid", self.edge),
                (f"grid widened ×{self.widened}", self.widened),
                ("no value completed every seed", self.incomplete),
            )
            if on
        ]
        return chosen + (f" ({'; '.join(notes)})" if notes else "")


def pick(values: np.ndarray, ok: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
    """The winning index along the values axis. values, ok: (..., V values, S seeds); ok: the run completed
    with a finite validation value; present: the run exists (a value may have fewer seeds). Fewest present
    runs not ok first, then the lowest mean of the runs that are ok; ties go to the first value in grid
    order. Vectorized, so that the simulations of docs/verdicts.md run this very rule."""
    ok = np.asarray(ok, bool)
    present = np.ones_like(ok) if present is None else np.asarray(present, bool)
    ok = ok & present
    counts = ok.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, np.where(ok, values, 0.0).sum(-1) / np.maximum(counts, 1), np.inf)
    fails = (present & ~ok).sum(-1)
    eligible = fails == fails.min(-1, keepdims=True)
    return np.argmin(np.where(eligible, mean, np.inf), -1)


def select(
    runs: Sequence[R], keys: list[str], value: Callable[[R, str], Any], val_metric: Callable[[R], float | None]
) -> Selection[R]:
    """runs: one (panel, line) cell's runs across the tuned grid. value(run, key): its config value.
    val_metric(run): its final validation metric (lower is better), None if it did not complete."""
    by_value: dict[tuple, list[R]] = {}
    for run in runs:
        by_value.setdefault(tuple(value(run, k) for k in keys), []).append(run)
    grid = sorted(by_value, key=_order)
    width = max(len(rs) for rs in by_value.values())
    values, ok, present = (
        np.zeros((len(grid), width)),
        np.zeros((len(grid), width), bool),
        np.zeros((len(grid), width), bool),
    )
    for i, v in enumerate(grid):
        for j, run in enumerate(by_value[v]):
            m = val_metric(run)
            present[i, j] = True
            ok[i, j] = m is not None and math.isfinite(m)
            values[i, j] = m if ok[i, j] else 0.0
    chosen = grid[int(pick(values, ok, present))]
    means = {v: float(values[i][ok[i]].mean()) if ok[i].sum() == present[i].sum() else None for i, v in enumerate(grid)}
    edge = []
    for i, key in enumerate(keys):
        axis = sorted({v[i] for v in grid}, key=_order1)
        if len(axis) >= 2 and isinstance(chosen[i], (int, float)) and chosen[i] in (axis[0], axis[-1]):
            edge.append(key)
    incomplete = all(m is None for m in means.values())
    return Selection(keys, chosen, grid, means, by_value[chosen], edge, incomplete)


def _order1(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def _order(values: tuple) -> list:
    return [_order1(v) for v in values]
