"""One claim preset of `lnbench check`, as a sequence of rounds: its tuning sweep; widening rounds while a compared
line's winner sits at its grid's edge (--widen, tuning seeds only); the judging plan, declared in judging.json
before any judging seed runs (lnbench.claims.plan, within the check's budget: lnbench.check.budget); the judging
rounds, each for the claims still open at the seeds it adds; its report.

`PresetCheck.rounds()` is a generator: it yields each round's sweeps (the arguments of `lnbench train`, one list
per sweep), is sent their exit codes once they have run, and returns the preset's Outcome. Who runs the sweeps is
the runner's business (lnbench.check.runner): one after the other as processes of their own (SLURM), or on the
check's warm pool, overlapping with the other presets' rounds.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generator

from lnbench.atomic import write_bytes
from lnbench.check import rounds
from lnbench.check.args import Args, sweep_dir, sweep_overrides
from lnbench.check.budget import Budget, mean_cost
from lnbench.claims import family as familylib
from lnbench.claims import plan as planlib
from lnbench.claims import spec as claimlib
from lnbench.claims import verdicts as verdictlib
from lnbench.claims.judge import DESIGN_FILE
from lnbench.config import overrides as hydra_args
from lnbench.config.choices import Stage
from lnbench.config.presets import read_experiment, sweeper_params

Sweeps = list[list[str]]  # a round: the `lnbench train` arguments of each of its sweeps


@dataclass
class Outcome:
    preset: str
    directory: Path
    seconds: float
    load: tuple[float, float]  # 1-minute load average at the start and the end
    exit_code: int
    verdicts: list[dict[str, Any]]
    note: str = ""
    added: dict[str, int] = field(default_factory=dict)  # runs by stage: tune, widen, judge
    design: dict[str, Any] = field(default_factory=dict)  # its judging.json: the design that decided ({}: none)


@dataclass
class Design:
    """The judging rounds of a preset and each open claim's plan."""

    plans: dict[str, planlib.JudgingPlan]
    rounds: list[int]  # the numbers of judging seeds the rounds bring the open claims' lines to


def judge_preset(args: Args, directory: Path, figures: bool = True):
    """The preset's report (written with figures), or None if its sweep left no runs."""
    from lnbench import report  # noqa: PLC0415 (matplotlib, scipy: not for `lnbench check --help`)

    runs = report.load_runs(directory) if directory.is_dir() else []
    if not runs:
        return None
    rep = report.make_report(directory, runs, {}, x_axes=report.X_AXES if figures else (), adjust=args.adjust)
    if figures:
        report.write_report(rep, directory / report.OUT_DIR)
    return rep


class PresetCheck:
    def __init__(self, args: Args, preset: str, budget: Budget):
        self.args, self.preset, self.budget = args, preset, budget
        self.directory = sweep_dir(args, preset)
        self.base = sweep_overrides(args, preset)
        cfg = read_experiment(preset)
        self.claims = len(cfg.get("claims") or ())
        self.tuning_jobs = len(hydra_args.expand([f"{k}={v}" for k, v in sweeper_params(cfg).items()]))
        self.started = False  # its first round handed to the runner
        self.planned = False  # its judging plan is made (judging.json)
        self.job_s: float | None = None  # its runs' mean cost, measured (lnbench.check.budget.run_cost)
        self.judging_left_s = 0.0  # worker-seconds of planned judging not queued yet (worst case)

    @property
    def open_claims(self) -> int:
        """Claims that may still get judging seeds planned (before its plan: all of them)."""
        return 0 if self.planned else self.claims

    def rounds(self) -> Generator[Sweeps, list[int], Outcome]:
        args, t0, load0 = self.args, time.time(), os.getloadavg()[0]
        self.started = True
        code = (yield [self.base])[0]
        refused: list[str] = []  # rounds whose sweep refused its input (exit 2): a bug to report, never a quiet gap
        declared = self.declared()
        widen = declared_widen(declared, args.widen)
        judging = declared is not None or args.judging != 0  # a declared design goes on, whatever --judging-seeds
        rep = self._report() if widen or judging else None
        for k in range(1, widen + 1):
            cells = rounds.widen_cells(rep, rounds.needed(rep), widen) if rep else []
            if not cells:
                break
            codes = yield rounds.commands(self.base, self.directory, f"widen-{k}", cells, self._drop(cells))
            refused += [f"widen-{k}"] * codes.count(2)
            rep = self._report()
        if rep is not None and judging:
            design = self.design(rep)
            for r, n in enumerate(design.rounds):
                ids = self._still_open(rep, design, n, first=r == 0)
                if not ids:
                    break
                seeds = list(range(rounds.JUDGING_SEED0, rounds.JUDGING_SEED0 + n))
                cells = rounds.judge_cells(rep, rounds.needed(rep, ids), seeds)
                if not cells:  # a rerun: this round's seeds have all run
                    continue
                self._queued(cells)
                codes = yield rounds.commands(self.base, self.directory, f"judge-{r + 1}", cells, self._drop(cells))
                refused += [f"judge-{r + 1}"] * codes.count(2)
                rep = self._report()
        self.judging_left_s, self.planned = 0.0, True
        rep = judge_preset(args, self.directory)
        seconds, load = time.time() - t0, (load0, os.getloadavg()[0])
        if rep is None:
            return Outcome(self.preset, self.directory, seconds, load, code, [], "the sweep left no runs")
        notes = [n for n in [note(rep)] if n]
        notes += [f"the {r} sweep refused its input (see the log above it)" for r in dict.fromkeys(refused)]
        verdicts, why = rep.verdicts, "; ".join(notes)
        return Outcome(self.preset, self.directory, seconds, load, code, verdicts, why, counts(rep), self.declared())

    # ---- the plan -----------------------------------------------------------------------------------
    def design(self, rep) -> Design:
        """The design judging.json declares (a rerun keeps it), or a new one, written there before any judging seed
        of the preset runs: each claim that no grid edge blocks planned by the test's power within the check's
        budget (or in the looks given by hand), the blocked ones listed with why."""
        if (declared := self.declared()) is not None:
            return self._declared(declared, rep)
        blocked = rounds.edge_blocked(rep)
        claims = [c for c in claimlib.claims_of(r.config for r in rep.runs) if c.id not in blocked]
        sizes = familylib.sizes((c.id, c.family) for c in claimlib.claims_of(r.config for r in rep.runs))
        size = {c.id: sizes.get(c.family or familylib.UNDECLARED, 1) for c in claims}
        record: dict[str, Any] = {"planned": self.args.planned}
        if self.args.planned:
            cost = seed_costs(rep, claims)
            plans, record["budget"] = self.budget.plan(
                self.preset, {c.id: (size[c.id], cost[c.id]) for c in claims}, self.args.max_seeds
            )
        else:
            plans = {c.id: planlib.plan_for_looks(self.args.looks, size[c.id]) for c in claims}
        looks = self.args.looks if not self.args.planned else None
        options = {"widen": self.args.widen, "max_seeds": self.args.max_seeds}  # those a rerun may not change
        record = {**self.record(plans, looks), **record, "blocked": blocked, "options": options}
        write_bytes(self.directory / DESIGN_FILE, (json.dumps(record, indent=1) + "\n").encode())
        design = Design(plans, list(record["rounds"]))
        self.judging_left_s = worst_case_s(rep, design)
        self.planned = True
        return design

    @staticmethod
    def record(plans: dict[str, planlib.JudgingPlan], looks: list[int] | None) -> dict[str, Any]:
        if plans and any(p.looks for p in plans.values()):
            out = planlib.sweep_record(plans, rounds.JUDGING_SEED0)
        else:  # every claim blocked, or none can decide: no judging seed
            out = {
                "first_seed": rounds.JUDGING_SEED0,
                "rounds": [],
                "claims": {c: p.record() for c, p in plans.items()},
            }
        return out | ({"looks": looks, "rounds": looks if plans else []} if looks is not None else {})

    def _declared(self, raw: dict, rep) -> Design:
        sweep, per_claim = planlib.read_record(raw)
        plans = {cid: p for cid, rec in per_claim.items() if (p := planlib.JudgingPlan.from_record(rec)) is not None}
        if not per_claim and sweep is not None:  # judging.json from before issue 39: the same looks for every claim
            ids = {c.id for c in claimlib.claims_of(r.config for r in rep.runs)}
            plans = {cid: sweep for cid in ids}
        found = raw.get("rounds") or sorted({n for p in plans.values() for n in p.looks})
        self.planned = True
        return Design(plans, [int(n) for n in found])

    def _still_open(self, rep, design: Design, n: int, first: bool) -> set[str]:
        """The claims a round of n judging seeds is for: planned to reach n, and (after the first round) still
        inconclusive with nothing that more seeds cannot mend (a block, a seed that failed). A claim whose seeds
        have not reached its first look yet (an earlier round was for claims planned to look sooner) is open."""
        ids = {cid for cid, p in design.plans.items() if p.looks and p.looks[-1] >= n}
        if first:
            return ids
        undecided = {
            d["id"]
            for d in rep.verdicts
            if d["verdict"] == verdictlib.INCONCLUSIVE
            and (not d.get("raw_reason") or d.get("awaiting_seeds"))
            and not d.get("note")
        }
        return ids & undecided

    def declared(self) -> dict[str, Any] | None:
        """judging.json, where the preset's design is declared (lnbench check refused a damaged one before it
        started: lnbench.check.design)."""
        path = self.directory / DESIGN_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    # ---- bookkeeping -------------------------------------------------------------------------------
    def _report(self):
        rep = judge_preset(self.args, self.directory, figures=False)
        if rep is not None:
            self.job_s = mean_cost(rep.runs) or self.job_s
        return rep

    def _queued(self, cells: list) -> None:
        """Judging jobs handed to the runner: no longer planned work still to come (lnbench.check.budget)."""
        done = sum(len(c.seeds) * (group_cost(c.group) or self.job_s or 0.0) for c in cells)
        self.judging_left_s = max(0.0, self.judging_left_s - done)

    def _drop(self, cells: list) -> set[str]:
        """The overrides a round's sweep leaves out of the preset's command: its cells set them (and the seeds)."""
        params = sweeper_params(read_experiment(self.preset))
        return {"seed", *params, *(k for c in cells for k in c.values)}


def declared_widen(declared: dict[str, Any] | None, given: int) -> int:
    """The widening a preset's rounds go to: once judging.json is declared, the --widen it was declared under (its
    judging seeds run at the values that widening chose; one declared before --widen was recorded widened no
    further), else the one given."""
    if declared is None:
        return given
    return int((declared.get("options") or {}).get("widen", 0))


def group_cost(g) -> float | None:
    """One more job of a (panel, line): its tuning runs' mean cost at the chosen value."""
    runs = g.selection.runs if g.selection else [r for r in g.runs if r.stage != Stage.judge]
    return mean_cost(runs)


def seed_costs(rep, claims: list) -> dict[str, float]:
    """Claim id -> worker-seconds of one judging seed: a job on each (panel, line) it compares, shared among the
    claims that compare the same one."""
    users: dict[int, int] = {}
    for c in claims:
        for g in rounds.compared(rep, c):
            users[id(g)] = users.get(id(g), 0) + 1
    fallback = mean_cost(rep.runs) or 0.0
    out = {}
    for c in claims:
        groups = rounds.compared(rep, c)
        out[c.id] = sum((group_cost(g) or fallback) / users[id(g)] for g in groups) or fallback
    return out


def worst_case_s(rep, design: Design) -> float:
    """Worker-seconds of every judging seed the plan may run: each compared line to the most seeds any of its
    claims is planned."""
    most: dict[int, int] = {}
    groups = {}
    for c in claimlib.claims_of(r.config for r in rep.runs):
        p = design.plans.get(c.id)
        for g in rounds.compared(rep, c) if p and p.looks else ():
            most[id(g)], groups[id(g)] = max(most.get(id(g), 0), p.looks[-1]), g
    have = {k: len({r.value("seed") for r in g.judging}) for k, g in groups.items()}
    return sum(max(0, most[k] - have[k]) * (group_cost(g) or 0.0) for k, g in groups.items())


def note(rep) -> str:
    said = "; ".join(rep.claim_errors)
    failed = [r for r in rep.runs if r.status not in ("completed", "diverged")]
    if failed:
        said = (
            said + "; " if said else ""
        ) + f"{len(failed)} of {len(rep.runs)} jobs neither completed nor diverged (see its report)"
    return said


def counts(rep) -> dict[str, int]:
    return rounds.counts(rep.runs)
