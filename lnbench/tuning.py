"""Fair tuning: each model at its own best value of a swept hyperparameter, chosen on validation only.

For each (panel, line) cell the runs are split by the tuned keys' values; the value whose runs have the
lowest mean final validation metric (the primary metric, over seeds) wins, and only its runs go on to the
table, the curves and the claims. Test metrics are never read here: the selection gets only a function
that returns a run's final validation value. A winner at either end of a numeric grid is flagged: the
best value may lie outside the grid.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

R = TypeVar("R")


@dataclass
class Selection(Generic[R]):
    keys: list[str]
    chosen: tuple  # the winning values, one per key
    grid: list[tuple]  # every value tried, in grid order
    means: dict[tuple, float | None]  # value -> mean final validation metric over its runs
    runs: list[R] = field(default_factory=list)  # the winner's runs
    edge: list[str] = field(default_factory=list)  # keys whose winner is the grid's lowest or highest value

    def text(self) -> str:
        chosen = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(self.keys, self.chosen))
        return chosen + (" (edge of grid)" if self.edge else "")


def select(runs: Sequence[R], keys: list[str], value: Callable[[R, str], Any], val_metric: Callable[[R], float | None]) -> Selection[R]:
    """runs: one (panel, line) cell's runs across the tuned grid. value(run, key): its config value.
    val_metric(run): its final validation metric (lower is better), None if it has none."""
    by_value: dict[tuple, list[R]] = {}
    for run in runs:
        by_value.setdefault(tuple(value(run, k) for k in keys), []).append(run)
    grid = sorted(by_value, key=_order)
    means = {}
    for v, rs in by_value.items():
        vals = [m for r in rs if (m := val_metric(r)) is not None and math.isfinite(m)]
        # a value whose runs diverged or failed cannot win: it has no (or fewer) finite validation values
        means[v] = statistics.fmean(vals) if vals and len(vals) == len(rs) else None
    ranked = [v for v in grid if means[v] is not None]
    chosen = min(ranked, key=lambda v: means[v]) if ranked else grid[0]
    edge = []
    for i, key in enumerate(keys):
        axis = sorted({v[i] for v in grid}, key=_order1)
        if len(axis) >= 2 and isinstance(chosen[i], (int, float)) and chosen[i] in (axis[0], axis[-1]):
            edge.append(key)
    return Selection(keys, chosen, grid, means, by_value[chosen], edge)


def _order1(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def _order(values: tuple) -> list:
    return [_order1(v) for v in values]
