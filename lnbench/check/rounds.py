"""The rounds `lnbench check` adds to a preset's tuning sweep: a grid widened past its edge, and judging seeds.

Each round is one Hydra sweep of its own (so it runs under the user's launcher, and re-running the check
resumes it) into `<preset dir>/<round>/`: `widen-K` (the tuning seeds at one more value beyond the edge a
line's winner sits at, x3 or /3) and `judge-K` (fresh seeds at each line's chosen value). Its jobs are
`+cell=NAME seed=...`: a cell is one (panel, line) of the sweep at one value of the tuned keys, written as
a config file `<preset dir>/.cells/cell/NAME.yaml` that sets those values (and the run's `stage`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lnbench.claims import spec as claimlib
from lnbench.claims.judge import matches
from lnbench.claims.plan import plan_for_looks
from lnbench.config.choices import Stage

CELLS = ".cells"
JUDGING_SEED0 = 1000  # judging seeds are 1000, 1001, ...: never a tuning seed of the presets (0, 1, 2)
WIDEN_FACTOR = 3.0


@dataclass
class Cell:
    values: dict[str, Any]  # config key -> value (the panel, the line, the tuned keys)
    groups: set[str]  # which of the keys are config groups (model=...): set in the defaults list
    stage: Stage  # widen or judge
    seeds: list[Any]
    group: Any = field(default=None, repr=False, compare=False)  # the report's group it adds runs to

    @property
    def name(self) -> str:
        parts = [str(v) if k in self.groups else f"{k.rsplit('.', 1)[-1]}-{v}" for k, v in self.values.items()]
        return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(parts + [str(self.stage)]))

    def config(self) -> str:
        body: dict[str, Any] = {"stage": str(self.stage)}
        for key, value in self.values.items():
            if key in self.groups:
                continue
            node = body
            *path, last = key.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        defaults = [{f"override /{k}": v} for k, v in self.values.items() if k in self.groups]
        return "# @package _global_\n# written by lnbench check (lnbench/check/rounds.py)\n" + yaml.safe_dump(
            ({"defaults": defaults} if defaults else {}) | body, sort_keys=False
        )


def needed(rep, claim_ids: set[str] | None = None) -> list:
    """The report's groups that some claim compares (of those in claim_ids, if given), in report order."""
    lay, out = rep.lay, []
    claims = claimlib.claims_of(r.config for r in rep.runs)
    for g in rep.groups:
        cells = {h.line: h for h in rep.groups if h.panel == g.panel}
        for c in claims:
            if claim_ids is not None and c.id not in claim_ids:
                continue
            if any(claimlib.same(g.line, line) for line in (c.better, c.than)) and matches(
                c, dict(zip(lay.panels, g.panel)), cells.values()
            ):
                out.append(g)
                break
    return out


def compared(rep, claim) -> list:
    """The report's groups (panel, line) a claim compares, in report order."""
    lay, out = rep.lay, []
    for g in rep.groups:
        cells = [h for h in rep.groups if h.panel == g.panel]
        if any(claimlib.same(g.line, line) for line in (claim.better, claim.than)) and matches(
            claim, dict(zip(lay.panels, g.panel)), cells
        ):
            out.append(g)
    return out


def edge_blocked(rep) -> dict[str, str]:
    """Claim id -> why a grid's edge blocks it: a line it compares still chose its grid's lowest or highest value
    (after the widening rounds). Such a claim gets no judging seeds: its verdict would be one about the grid."""
    out = {}
    for claim in claimlib.claims_of(r.config for r in rep.runs):
        edges = [
            f"{g.line} ({rep.lay.title(g.panel)}) chose {g.selection.text()}"
            for g in compared(rep, claim)
            if g.selection and g.selection.edge
        ]
        if edges:
            out[claim.id] = "grid edge: " + "; ".join(edges)
    return out


def _cell_values(rep, g, tuned_values: tuple) -> tuple[dict[str, Any], set[str]]:
    lay = rep.lay
    values = {k: v for k, v in zip(lay.panels, g.panel) if v is not None}
    if lay.line:
        values[lay.line] = g.line
    values.update(zip(lay.tuned, tuned_values))
    run = g.runs[0] if g.runs else None
    groups = {k for k in values if run is not None and k in run.choices}
    return values, groups


def widen_cells(rep, groups: list, cap: int) -> list[Cell]:
    """One more value past the edge for each group whose winner sits at its grid's edge (its runs all
    completed), unless the group was widened `cap` times already: --widen N is a budget of up to N values per
    line and panel, one per round, each round choosing again. A line still at its edge after that makes its
    claims inconclusive (grid edge, lnbench/claims/judge.py)."""
    out = []
    for g in groups:
        sel = g.selection
        if not sel or not sel.edge or sel.incomplete or sel.widened >= cap or len(rep.lay.tuned) != 1:
            continue
        axis = sorted(v[0] for v in sel.grid)
        chosen = sel.chosen[0]
        new = chosen * WIDEN_FACTOR if chosen == axis[-1] else chosen / WIDEN_FACTOR
        values, keys = _cell_values(rep, g, (float(f"{new:.3g}"),))
        seeds = sorted({r.value("seed") for r in sel.runs}, key=str)
        out.append(Cell(values, keys, Stage.widen, seeds, g))
    return out


def judge_cells(rep, groups: list, seeds: list[int]) -> list[Cell]:
    """Judging seeds at each group's chosen value (or its only value, where nothing is tuned)."""
    out = []
    for g in groups:
        chosen = g.selection.chosen if g.selection else ()
        values, keys = _cell_values(rep, g, chosen)
        have = {r.value("seed") for r in g.judging if r.status in ("completed", "diverged")}  # the others are retried
        if missing := [s for s in seeds if s not in have]:
            out.append(Cell(values, keys, Stage.judge, missing, g))
    return out


def design_record(looks: list[int], family_size: int = 1) -> dict[str, Any]:
    """judging.json, written before the first judging seed runs: the looks, the share of alpha each spends
    (declared now, never chosen after seeing data; only where a decision is possible at the family's level:
    lnbench/claims/plan.py), the plan's power and MDE, and the first judging seed."""
    return {**plan_for_looks(looks, family_size).record(), "first_seed": JUDGING_SEED0}


def judging_seeds(looks: list[int], look: int) -> list[int]:
    """The seeds a look adds: look 0 is JUDGING_SEED0 .. +looks[0]-1, and so on."""
    start = looks[look - 1] if look else 0
    return list(range(JUDGING_SEED0 + start, JUDGING_SEED0 + looks[look]))


def write_cells(directory: Path, cells: list[Cell]) -> Path:
    folder = directory / CELLS / "cell"
    folder.mkdir(parents=True, exist_ok=True)
    for c in cells:
        path = folder / f"{c.name}.yaml"
        text = c.config()
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return directory / CELLS


def commands(base: list[str], directory: Path, round_name: str, cells: list[Cell], drop: set[str]) -> list[list[str]]:
    """The sweeps of one round: one per set of seeds (cells that need the same seeds share a sweep). base: the
    preset's tuning sweep command; its overrides of the keys a cell sets (drop) are left out."""
    search = write_cells(directory, cells).resolve()
    kept = [a for a in base if not a.startswith("hydra.sweep.dir=") and a.split("=", 1)[0].lstrip("+~") not in drop]
    job_type = f"logger.wandb.job_type={round_name.split('-')[0]}"  # W&B: widen or judge (the base sweep: tune)
    kept = [job_type if a.startswith("logger.wandb.job_type=") else a for a in kept]
    by_seeds: dict[tuple, list[str]] = {}
    for c in cells:
        by_seeds.setdefault(tuple(c.seeds), []).append(c.name)
    return [
        [
            *kept,
            f"hydra.sweep.dir={directory / round_name}",
            f"+cell={','.join(names)}",
            f"seed={','.join(map(str, seeds))}",
            f"hydra.searchpath=[file://{search}]",
            "hydra.sweeper.params=null",
            "hydra.sweep.subdir=${hydra:runtime.choices.cell}_s${seed}",
        ]
        for seeds, names in by_seeds.items()
    ]


def counts(runs: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in runs:
        out[r.stage] = out.get(r.stage, 0) + 1
    return out
