"""Runs -> the report's layout and groups: which keys a sweep varied and what role each plays, the
(panel, line) groups of runs, each line's tuned value (lnbench.claims.tuning), and the numbers read from a run.

A sweep's axes are the keys whose value differs between its jobs (from each job's overrides, falling back
to its composed config). They take three roles: `seed` is averaged over (mean line, min-max band), one
axis gives the lines of every panel (the model, else the normalizer, else the last axis), and each value
of the remaining axes (batch size, seq_len, ...) gets its own panel. A tuned axis (`tune:` in the preset or
`--tune KEY`) is no panel: each line of each panel keeps its best value on validation.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lnbench.claims import judge
from lnbench.claims import spec as claimlib
from lnbench.claims.tuning import Selection, select
from lnbench.config.choices import Stage
from lnbench.runs import INTERPOLATION, SOURCE_KEY, Run

SEED_KEYS = ("seed",)
# Which swept key draws the lines of a panel, in order of preference; otherwise the last swept key.
LINE_KEYS = ("model", "model.norm.kind", "model.cell")
# Keys that say where or how a run went, not what it computed: never an axis, even when runs differ in them.
NOT_AXES = (
    "resume",
    "progress",
    "checkpoint_every",
    "log_every",
    "eval_every",
    "logger",
    "dataset.data_dir",
    "dataset.download",
    "site",
    "hydra",
    "stage",
    "cell",
)  # stage and cell: how lnbench check added a run (judging seeds, a widened grid)
X_AXES = {"step": "training steps", "epoch": "epochs", "time": "wall-clock seconds"}


# ---- the sweep's axes -------------------------------------------------------------------------
@dataclass
class Layout:
    line: str | None  # the key whose values are the lines of every panel
    panels: list[str]  # keys whose value combinations are the panels
    seeds: list[str]  # keys averaged over
    fixed: dict[str, Any]  # overrides every run shares
    tuned: list[str] = field(default_factory=list)  # keys selected on validation per (panel, line)

    def title(self, panel: tuple) -> str:
        return panel_title(self.panels, panel)


def panel_title(keys: list[str], panel: tuple) -> str:
    # None: a key the panel's runs do not have (no seq_len for MNIST beside the adding problem)
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, panel) if v is not None) or "all runs"


def varied_keys(runs: list[Run]) -> list[str]:
    """Override keys (in command-line order) and config groups whose values differ between runs: a sweep's
    axes as its runs show them (lnbench.config.presets.Sweep is the sweep's own, before it runs), or what a
    folder of single runs varied. Keys that say where or how a run went, not what it
    computed, are none (NOT_AXES); `dir` is one when runs of several directories would otherwise mix."""
    keys = dict.fromkeys(k for run in runs for k in (*run.overrides, *run.choices) if not not_axis(k))
    axes = [k for k in keys if _varies(runs, k)]
    if _varies(runs, SOURCE_KEY) and _collide(runs, axes):
        axes.insert(0, SOURCE_KEY)
    return axes


def not_axis(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in NOT_AXES)


def _varies(runs: list[Run], key: str) -> bool:
    return len({sort_key(r.value(key)) for r in runs}) > 1


def _collide(runs: list[Run], axes: list[str]) -> bool:
    """Whether runs of different directories share every axis value (seed included): then only `dir` tells them
    apart."""
    where: dict[tuple, str | None] = {}
    for r in runs:
        cell = tuple(sort_key(r.value(k)) for k in axes)
        if where.setdefault(cell, r.source) != r.source:
            return True
    return False


def layout(
    runs: list[Run], line: str | None = None, panels: list[str] | None = None, tune: list[str] | None = None
) -> Layout:
    axes = varied_keys(runs)
    seeds = [k for k in axes if k in SEED_KEYS]
    tuned = [k for k in (tune if tune is not None else tune_keys(runs)) if k in axes]
    rest = [k for k in axes if k not in seeds and k not in tuned]
    if line is None:
        line = next((k for k in LINE_KEYS if k in rest and k not in (panels or ())), None)
        line = line or next((k for k in reversed(rest) if k not in (panels or ())), None)
    if panels is None:
        panels = [k for k in rest if k != line]
    shared = {k: v for k, v in runs[0].overrides.items() if k not in axes} if runs else {}
    # as typed (progress=false, not False), unless Hydra left an interpolation to resolve
    fixed = {
        k: runs[0].value(k) if INTERPOLATION in v else v
        for k, v in shared.items()
        if all(r.overrides.get(k) == v for r in runs)
    }
    return Layout(line, panels, seeds, fixed, tuned)


def tune_keys(runs: list[Run]) -> list[str]:
    """The keys the runs' configs declare `tune:` (the preset's), in order."""
    keys: list[str] = []
    for run in runs:
        keys += [str(k) for k in run.config.get("tune") or () if str(k) not in keys]
    return keys


def sort_key(v: Any, seen: dict | None = None) -> tuple:
    """Numbers by value (batch 4 before 128); names in the order the sweep ran them (`seen`), else by name."""
    if isinstance(v, bool) or v is None:
        return (2, 0, str(v))
    if isinstance(v, (int, float)):
        return (0, v, "")
    return (1, (seen or {}).get(v, 0), str(v))


# ---- the groups -------------------------------------------------------------------------------
@dataclass
class Group:
    """The runs of one (panel, line) cell: several when seeds are swept."""

    panel: tuple
    line: Any
    runs: list[Run]  # the selected runs when a key is tuned
    selection: Selection | None = None
    best: bool = False  # the best line of its panel (mean final validation metric)
    metric: str = "loss"  # what its panel ranks by: the primary metric of the panel's runs
    judging: list[Run] = field(default_factory=list)  # stage=judge runs at the chosen value (also in runs)
    stale: list[Run] = field(default_factory=list)  # stage=judge runs at a value the tuning no longer chooses


def group_runs(runs: list[Run], lay: Layout) -> list[Group]:
    cells: dict[tuple, list[Run]] = {}
    for run in runs:
        panel = tuple(run.value(k) for k in lay.panels)
        line = run.value(lay.line) if lay.line else run.choices.get("model", run.name)
        cells.setdefault((panel, line), []).append(run)
    seen = {v: i for i, v in enumerate(dict.fromkeys(v for panel, line in cells for v in (*panel, line)))}
    order = sorted(cells, key=lambda pl: ([sort_key(v, seen) for v in pl[0]], sort_key(pl[1], seen)))
    return [Group(panel, line, cells[(panel, line)]) for panel, line in order]


def arrange(
    runs: list[Run], line: str | None, panels: list[str] | None, tune: list[str] | None
) -> tuple[Layout, list[Group], list[Run]]:
    """The layout and its groups, and the runs set aside: those that never logged a metric (refused before
    training, killed at start) in a panel where no run trained. They keep their row beside the runs that
    trained (BN refused at batch 1 next to LN at batch 1), but get no empty panel of their own; and the axes
    are found again without them, so that a key only they varied (a typo'd batch size) makes no panels. A run
    whose `.hydra/` record is damaged (its values unknown: lnbench.runs.reader.hydra_records) is set aside too."""
    unknown = [r for r in runs if r.status == "unreadable" and not (r.config or r.overrides)]  # its .hydra damaged
    runs = [r for r in runs if r not in unknown]
    lay = layout(runs, line, panels, tune)
    groups = group_runs(runs, lay)
    empty = {g.panel for g in groups} - {g.panel for g in groups if any(r.trained for r in g.runs)}
    aside = unknown + [r for g in groups if g.panel in empty for r in g.runs]
    if aside:
        kept = [r for r in runs if r not in aside]
        lay = layout(kept, line, panels, tune)
        groups = group_runs(kept, lay)
    return lay, groups, aside


def tune_groups(groups: list[Group], lay: Layout, metric: str | None = None) -> None:
    """Keep each group's runs at its best tuned value (final validation metric of the tuning runs, never test,
    never a judging run), with the judging runs at that value; mark the best line of each panel by the same
    validation number: each group's own metric (see panel_metrics), or `metric` for all of them."""
    for g in groups if metric is not None else ():
        g.metric = metric
    for g in groups:
        tuning = [r for r in g.runs if r.stage != Stage.judge]
        judging = [r for r in g.runs if r.stage == Stage.judge]
        if lay.tuned and tuning:
            g.selection = select(tuning, lay.tuned, Run.value, lambda r, m=g.metric: scored_val(r, m))
            g.selection.widened = len({tuple(r.value(k) for k in lay.tuned) for r in tuning if r.stage == Stage.widen})
            at = [
                r for r in judging if all(claimlib.same(r.value(k), v) for k, v in zip(lay.tuned, g.selection.chosen))
            ]
            g.judging, g.stale = at, [r for r in judging if r not in at]
            g.runs = g.selection.runs + at
        else:
            g.judging = judging
    for panel in dict.fromkeys(g.panel for g in groups):
        scored = [
            (m, g)
            for g in groups
            if g.panel == panel and (m := mean_of([scored_val(r, g.metric) for r in g.runs])) is not None
        ]
        if len(scored) > 1:
            min(scored, key=lambda mg: mg[0])[1].best = True


def panel_metrics(groups: list[Group]) -> None:
    """Each panel ranks by the primary metric of its runs: a folder of runs on MNIST and on the adding
    problem compares error in one panel and mse in the other."""
    for panel in dict.fromkeys(g.panel for g in groups):
        cell = [g for g in groups if g.panel == panel]
        for g in cell:
            g.metric = primary_metric([r for h in cell for r in h.runs])


def primary_metric(runs: list[Run]) -> str:
    """The metric most runs rank by (their summary says which); loss if no run got that far."""
    named = Counter(r.primary for r in runs if r.summary.get("primary_metric") or r.records)
    return named.most_common(1)[0][0] if named else "loss"


# ---- numbers of a run -------------------------------------------------------------------------
def scored_val(run: Run, metric: str) -> float | None:
    """The final validation metric of a run that completed; None otherwise (a run that diverged, failed or was
    killed has a last finite value from before it stopped, which must not make its value or line win)."""
    return run.final_val(metric) if run.status == "completed" else None


def mean_of(values: list[float | None]) -> float | None:
    """The mean when every run has a finite value, else None (a diverged seed disqualifies its line)."""
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return statistics.fmean(values)


def seed_band(runs: list[Run], split: str, metric: str, x: str):
    """Mean and min-max over the runs at each logged step; x is the runs' mean at that step."""
    per_run = [r.points(split, metric, x) for r in runs]
    steps = sorted(set().union(*per_run))
    xs, mean, lo, hi = [], [], [], []
    for s in steps:
        pts = [p[s] for p in per_run if s in p]
        ys = [y for _, y in pts]
        xs.append(statistics.fmean(xv for xv, _ in pts))
        mean.append(statistics.fmean(ys))
        lo.append(min(ys))
        hi.append(max(ys))
    return xs, mean, lo, hi


def best_val(run: Run, metric: str) -> float | None:
    values = [y for _, y in run.points("val", metric, "step").values()]
    if values:
        return min(values)
    return (run.summary.get("best_val") or {}).get(metric)


def default_target(runs: list[Run], metric: str) -> float | None:
    """The best value the slowest-converging completed run that learned reaches, so every such run reaches it.
    A run learned if its best is judge.LEARNED_MARGIN below the trivial predictor's value, where that is known:
    a run that never learned would put the target at the trivial predictor, which says nothing."""
    trivial = trivial_value(runs, metric)
    ceiling = math.inf if trivial is None else (1 - judge.LEARNED_MARGIN) * trivial
    bests = [b for r in runs if r.status == "completed" and (b := best_val(r, metric)) is not None and b <= ceiling]
    return max(bests) if bests else None


# A trivial predictor's value of a metric, from the dataset's baseline loss in nats (bpc: in bits). No entry:
# unknown from the loss alone (a classifier's error rate).
TRIVIAL_UNITS = {"loss": 1.0, "mse": 1.0, "bound": 1.0, "bpc": 1 / math.log(2)}


def trivial_value(runs: list[Run], metric: str) -> float | None:
    """The value of `metric` a trivial predictor scores on these runs' dataset; None where unknown or where the
    runs' datasets differ."""
    values = {r.summary.get("baseline") for r in runs} - {None}
    if metric not in TRIVIAL_UNITS or len(values) != 1:
        return None
    return float(values.pop()) * TRIVIAL_UNITS[metric]


def reach(run: Run, metric: str, target: float) -> tuple[int, float] | None:
    """(step, seconds) of the first validation at or below the target; None if never."""
    pts = run.points("val", metric, "time")
    for step in sorted(pts):
        if pts[step][1] <= target:
            return step, pts[step][0]
    return None


def run_problem(run: Run) -> str:
    s = run.summary
    if run.status == "diverged":
        return f"loss not finite at step {s.get('diverged_at_step', '?')}"
    if run.status == "running":
        return "still running"
    if run.status in ("incomplete", "not started"):
        return "no summary.json and no live process: the job was killed, or never started"
    return str(s.get("error", ""))
