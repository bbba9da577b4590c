"""`lnbench check --budget`: the check's wall time, and nothing else. It never changes a plan (a claim's judging
seeds are its test's: lnbench.claims.plan); once it has run out, no round starts (lnbench.check.preset) and the
pool starts no job (lnbench.check.runner): the jobs running end as usual, every claim still open stays awaiting
its seeds, and the same command continues the same plan.

What the plan will take here is an estimate, said before the first job and on the page when the budget stops the
check: jobs times their cost in seconds of a worker (a core of the pool, a SLURM job slot), over the workers. A
job's cost is its summary's wall time (measured: the preset's own runs, where any has run) plus FIXED_JOB_S for
what a job costs besides its steps and evaluations (composing, forking, set-up, checkpoints, exit: 0.24-0.41 s,
docs/performance.md); DEFAULT_JOB_S where nothing is measured yet, and the estimate says so.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field

from lnbench.errors import UserError

FIXED_JOB_S = 0.4
DEFAULT_JOB_S = 10.0  # a job of a preset none of whose runs is measured yet: an estimate, labelled so
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
            "1h30m or 5400s (a number without a unit is seconds), or none (the default: the check runs its whole "
            "plan)."
        )
    return seconds


class BudgetError(UserError):
    """A --budget that is no duration: one paragraph, exit 2."""


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def run_cost(run) -> float | None:
    """A finished run's cost in seconds of a worker (None for a run with no measured wall time)."""
    wall = run.summary.get("wall_time") if run.status in ("completed", "diverged") else None
    return float(wall) + FIXED_JOB_S if isinstance(wall, (int, float)) and wall >= 0 else None


def mean_cost(runs) -> float | None:
    costs = [c for r in runs if (c := run_cost(r)) is not None]
    return statistics.fmean(costs) if costs else None


@dataclass
class Budget:
    """The check's wall time (None: no limit) and its clock."""

    seconds: float | None
    text: str = "none"  # as given, for what the check says
    start: float = field(default_factory=time.time)
    workers: int = 1  # jobs run at once: what is left takes its worker-seconds over them

    def out(self) -> bool:
        return self.seconds is not None and time.time() - self.start >= self.seconds

    def read_as(self) -> str:
        """'--budget 90 read as 90 seconds of wall time: ...'."""
        if self.seconds is None:
            return "no --budget: the check runs its whole plan"
        return (
            f"--budget {self.text} read as {self.seconds:g} seconds"
            + (f" ({minutes(self.seconds)})" if self.seconds >= 90 else "")
            + " of wall time: once it "
            "has run out no round and no job starts (the running ones end), each open claim stays awaiting its "
            "seeds, and the same command continues the same plan"
        )

    def ran_out(self) -> str:
        """A claim's reason, and the page's line, once the budget stopped the check."""
        return f"the check's --budget {self.text} ran out; the same command continues the same plan"
