"""What the check's judging seeds may cost: `--budget` is the whole check's wall time, and each preset's claims are
planned (lnbench.claims.plan) within what is left of it once its tuning is done, before any judging seed of the
preset runs.

Costs are in seconds of a worker (a core of the pool, a SLURM job slot): a job's cost is its summary's wall time
(measured: the preset's own tuning runs) plus FIXED_JOB_S for what a job costs besides its steps and evaluations
(composing, forking, set-up, checkpoints, exit: 0.24-0.41 s, docs/performance.md). A judging seed of a claim
costs one job on each (panel, line) it compares, at the value chosen there, each job shared among the open claims
that compare the same line. A preset whose runs are not measured yet is predicted at the mean job cost of the
runs measured so far (the pool runs each preset's first tuning job early, so that every preset is measured soon).

What is left for a preset's judging = (budget - elapsed) x workers - the work still to come (jobs queued or
running, judging planned by other presets and not yet run), shared between this preset's open claims and the
claims of presets not planned yet, in proportion to their number. Within it the plan is lnbench.claims.plan's
plan_check: every claim planned for the same effect, raised until the worst case (each claim run to its last
look) fits.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from lnbench.errors import UserError

FIXED_JOB_S = 0.4
DEFAULT_JOB_S = 10.0  # before any run of the check is measured (never used to plan: a planned preset is measured)
PART = r"(\d+(?:\.\d*)?|\.\d+)([hms])"  # a number and its unit
DURATION = re.compile(f"(?:{PART})+")
UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_budget(text: str) -> float | None:
    """--budget: a duration (90m, 2h, 1h30m, 1.5h, 5400s; a bare number is seconds) in seconds, or None for `none`."""
    text = text.strip().lower()
    if text == "none":
        return None
    seconds = math.nan
    try:
        seconds = float(text)
    except ValueError:
        if DURATION.fullmatch(text):
            seconds = sum(float(n) * UNIT_S[u] for n, u in re.findall(PART, text))
    if not (math.isfinite(seconds) and seconds > 0):
        raise BudgetError(
            f"--budget {text!r} is not allowed: give the check's wall time as a duration above zero, e.g. 90m, 2h, "
            "1h30m or 5400s (a number without a unit is seconds), or none to plan each claim's judging seeds by "
            "their power alone."
        )
    return seconds


class BudgetError(UserError):
    """A --budget that is no duration: one paragraph, exit 2."""


def run_cost(run) -> float | None:
    """A finished run's cost in seconds of a worker (None for a run with no measured wall time)."""
    wall = run.summary.get("wall_time") if run.status in ("completed", "diverged") else None
    return float(wall) + FIXED_JOB_S if isinstance(wall, (int, float)) and wall >= 0 else None


def mean_cost(runs) -> float | None:
    costs = [c for r in runs if (c := run_cost(r)) is not None]
    return statistics.fmean(costs) if costs else None


@dataclass
class Budget:
    """The check's budget and clock, and what the runner says is still to come."""

    seconds: float | None  # None: no budget (plans by power alone)
    workers: int
    start: float = field(default_factory=time.time)
    # worker-seconds of work queued or running now (the runner's), and of work planned but not yet queued
    still_to_come: Callable[[], float] = lambda: 0.0
    claims_ahead: Callable[[str], int] = lambda preset: 0  # open claims of presets not planned yet, but this one

    def available(self) -> float | None:
        """Worker-seconds left for judging seeds not planned yet; None without a budget."""
        if self.seconds is None:
            return None
        left = (self.seconds - (time.time() - self.start)) * self.workers
        return max(0.0, left - self.still_to_come())

    def plan(self, preset: str, claims: dict[str, tuple[int, float]], cap: int | None) -> tuple[dict, dict]:
        """Each open claim's plan (claims: id -> (declared family size, worker-seconds of one judging seed)), and
        the record of how the budget was shared (for judging.json)."""
        from lnbench.claims import plan as planlib  # noqa: PLC0415 (scipy: only once a preset plans)

        kw: dict[str, Any] = {} if cap is None else {"cap": cap}
        available = self.available()
        share = None
        if available is not None and claims:
            ahead = self.claims_ahead(preset)
            share = available * len(claims) / (len(claims) + ahead)
        plans = planlib.plan_check(claims, budget_s=share, **kw) if claims else {}
        record = {
            "budget_s": self.seconds,
            "elapsed_s": round(time.time() - self.start, 1),
            "workers": self.workers,
            "available_worker_s": None if available is None else round(available, 1),
            "share_worker_s": None if share is None else round(share, 1),
            "seed_cost_worker_s": {cid: round(cost, 3) for cid, (_, cost) in claims.items()},
            "worst_case_worker_s": round(sum(p.max_seeds * claims[cid][1] for cid, p in plans.items()), 1),
        }
        return plans, record
