"""One claim preset of `lnbench check`, as a sequence of rounds: its tuning sweep; widening rounds while a compared
line's winner sits at its grid's edge (--widen, tuning seeds only); the judging plan, declared in judging.json
before any judging seed runs (lnbench.claims.plan: each claim's plan is its test's, the same on any machine and
beside any other preset); the judging rounds, each for the claims still open at the seeds it adds; its report.
Once the check's --budget has run out (lnbench.check.budget) no further round starts: every claim still open
stays awaiting its seeds, its reason naming the budget, and the same command continues the same plan.

`PresetCheck.rounds()` is a generator: it yields each round's sweeps (the arguments of `lnbench train`, one list
per sweep), is sent their exit codes once they have run, and returns the preset's Outcome. Who runs the sweeps is
the runner's business (lnbench.check.runner): one after the other as processes of their own (SLURM), or on the
check's warm pool, overlapping with the other presets' rounds.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generator

from lnbench.atomic import write_bytes
from lnbench.check import rounds
from lnbench.check.args import Args, sweep_dir, sweep_overrides
from lnbench.check.budget import DEFAULT_JOB_S, Budget, mean_cost, minutes
from lnbench.claims import family as familylib
from lnbench.claims import plan as planlib
from lnbench.claims import spec as claimlib
from lnbench.claims import verdicts as verdictlib
from lnbench.claims.decision import ClaimVerdict
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
        self.config = read_experiment(preset)
        self.tuning_jobs = len(hydra_args.expand([f"{k}={v}" for k, v in sweeper_params(self.config).items()]))
        self.stopped = ""  # where the budget stopped the preset ("" while it has not)

    def rounds(self) -> Generator[Sweeps, list[int], Outcome]:
        args, t0, load0 = self.args, time.time(), os.getloadavg()[0]
        code = (yield [self.base])[0]
        refused: list[str] = []  # rounds whose sweep refused its input (exit 2): a bug to report, never a quiet gap
        declared = self.declared()
        widen = declared_widen(declared, args.widen)
        judging = declared is not None or args.judging != 0  # a declared design goes on, whatever --judging-seeds
        rep = self._report() if widen or judging else None
        design = None
        for k in range(1, widen + 1):
            if self._out(f"after its {'tuning' if k == 1 else f'widen-{k - 1}'} round"):
                break
            cells = rounds.widen_cells(rep, rounds.needed(rep), widen) if rep else []
            if not cells:
                break
            codes = yield rounds.commands(self.base, self.directory, f"widen-{k}", cells, self._drop(cells))
            refused += [f"widen-{k}"] * codes.count(2)
            rep = self._report()
        if rep is not None and judging and not self._out("before its judging plan"):
            design = self.design(rep)
            for r, n in enumerate(design.rounds):
                if r and self._out(f"after its judge-{r} round"):  # a round the pool cut short ends here too
                    break
                ids = self._still_open(rep, design, n, first=r == 0)
                if not ids:
                    break
                seeds = list(range(rounds.JUDGING_SEED0, rounds.JUDGING_SEED0 + n))
                cells = rounds.judge_cells(rep, rounds.needed(rep, ids), seeds)
                if not cells:  # a rerun: this round's seeds have all run
                    continue
                codes = yield rounds.commands(self.base, self.directory, f"judge-{r + 1}", cells, self._drop(cells))
                refused += [f"judge-{r + 1}"] * codes.count(2)
                rep = self._report()
        rep = judge_preset(args, self.directory)
        seconds, load = time.time() - t0, (load0, os.getloadavg()[0])
        verdicts = rep.verdicts if rep is not None else []
        if self.stopped or self.budget.out():  # out during its last round: the pool may have cut that short
            verdicts, waiting = self.awaiting(verdicts, design, rep)
            if waiting and not self.stopped:
                self._out("in its last round")
        if not verdicts:
            return Outcome(self.preset, self.directory, seconds, load, code, [], "the sweep left no runs")
        notes = [n for n in [note(rep) if rep is not None else "", self.left(rep)] if n]
        notes += [f"the {r} sweep refused its input (see the log above it)" for r in dict.fromkeys(refused)]
        added = counts(rep) if rep is not None else {}
        why = "; ".join(notes)
        return Outcome(self.preset, self.directory, seconds, load, code, verdicts, why, added, self.declared() or {})

    def _out(self, where: str) -> bool:
        """Whether the budget has run out; if so the preset stops here (said once, on the console too)."""
        if not self.stopped and self.budget.out():
            self.stopped = where
            print(f"lnbench check: {self.preset} stopped {where}: {self.budget.ran_out()}", flush=True)
        return bool(self.stopped)

    # ---- the plan -----------------------------------------------------------------------------------
    def claims(self, rep=None) -> list[claimlib.Claim]:
        """The preset's claims: its runs' (rep's), else its config's."""
        return claimlib.claims_of(r.config for r in rep.runs) if rep is not None else claimlib.claims_of([self.config])

    def plans(self, claims: list[claimlib.Claim]) -> dict[str, planlib.JudgingPlan]:
        """Each claim's plan (claim_plans), or the looks given by hand at its family's level (none: none)."""
        if self.args.planned:
            return claim_plans(claims, self.args.max_seeds)
        sizes = {cid: p.family_size for cid, p in claim_plans(claims).items()}
        looks = self.args.looks
        return {c.id: planlib.plan_for_looks(looks, sizes[c.id]) for c in claims} if looks else {}

    def design(self, rep) -> Design:
        """The design judging.json declares (a rerun keeps it), or a new one, written there before any judging seed
        of the preset runs: each claim that no grid edge blocks planned by its test's power at its family's level
        (or in the looks given by hand), the blocked ones listed with why."""
        if (declared := self.declared()) is not None:
            return self._declared(declared, rep)
        blocked = rounds.edge_blocked(rep)
        plans = {cid: p for cid, p in self.plans(self.claims(rep)).items() if cid not in blocked}
        looks = self.args.looks if not self.args.planned else None
        cap = (self.args.max_seeds or planlib.CAP) if self.args.planned else None
        options = {"widen": self.args.widen, "max_seeds": self.args.max_seeds}  # those a rerun may not change
        record = {**self.record(plans, looks), "planned": self.args.planned, "cap": cap, "blocked": blocked}
        record["options"] = options
        write_bytes(self.directory / DESIGN_FILE, (json.dumps(record, indent=1) + "\n").encode())
        return Design(plans, list(record["rounds"]))

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
        return Design(plans, [int(n) for n in found])

    def declared(self) -> dict[str, Any] | None:
        """judging.json, where the preset's design is declared (lnbench check refused a damaged one before it
        started: lnbench.check.design)."""
        path = self.directory / DESIGN_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    def _still_open(self, rep, design: Design, n: int, first: bool) -> set[str]:
        """The claims a round of n judging seeds is for: planned to reach n, and (after the first round) still
        inconclusive with nothing that more seeds cannot mend (a block, a seed that failed). A claim whose seeds
        have not reached its first look yet (an earlier round was for claims planned to look sooner) is open."""
        ids = {cid for cid, p in design.plans.items() if p.looks and p.looks[-1] >= n}
        if first:
            return ids
        return ids & {d["id"] for d in rep.verdicts if is_open(d)}

    # ---- stopped by the budget ----------------------------------------------------------------------
    def awaiting(self, verdicts: list[dict[str, Any]], design: Design | None, rep) -> tuple[list[dict], int]:
        """The preset's verdicts once the budget stopped it: a claim decided at a look of its plan, or blocked for
        good (a grid edge after the widening, a failed seed), keeps its verdict; every other one awaits its seeds,
        with its plan (and so its planned MDE) and a reason naming the budget. Never a verdict on the tuning seeds
        or at a look the plan did not declare. Returns the verdicts and how many claims await their seeds."""
        known = {d["id"]: d for d in verdicts}
        claims = self.claims(rep)
        plans = design.plans if design is not None else self.plans(claims)
        out, waiting = [], 0
        for c in claims:
            d, p = known.get(c.id), plans.get(c.id)
            lines = (d or {}).get("lines") or {}
            judged = min((len(x.get("judging_seeds") or ()) for x in lines.values()), default=0)
            on_plan = d is not None and not d.get("note")  # else judged on the tuning seeds, or not at all
            if design is not None and (
                p is None or not p.looks or on_plan and not (is_open(d) and judged < p.max_seeds)
            ):
                out += [d] if d is not None else []
                continue
            waiting += 1
            v = ClaimVerdict(c.id, c.text, c.better, c.than, c.describe(), c.min_effect, c.family, c.estimand)
            v.lines, v.n_seeds, v.awaiting_seeds = lines, judged, True
            v.margin = (d or {}).get("margin", 0.0)  # fixed on the tuning runs, before any judging seed
            if p is not None and p.looks:
                v.planned_looks, v.planned_shares, v.max_seeds = list(p.looks), list(p.shares), p.max_seeds
            planned = f"{judged} of up to {p.max_seeds} judging seeds run" if p and p.looks else "no judging seeds"
            v.raw_reason = f"awaiting seeds: {planned} when {self.budget.ran_out()}"
            out.append(v.as_dict())
        return out, waiting

    def left(self, rep) -> str:
        """What the budget left of the preset's plan, and what it would take here ("" if it did not stop it)."""
        if not self.stopped:
            return ""
        took, what = self.estimate(rep.runs if rep else [])
        here = f"about {minutes(took / self.budget.workers)} here on {self.budget.workers} worker(s)"
        return f"stopped {self.stopped}: {self.budget.ran_out()}; left: {what}: {here}"

    def estimate(self, runs: list) -> tuple[float, str]:
        """Seconds of a worker the plan still takes, and the words: the jobs not run yet (the runs given have),
        each at the cost measured on those runs, else at a default; an estimate, and it says so."""
        done = {s: sum(r.stage == s and r.status in ("completed", "diverged") for r in runs) for s in Stage}
        tuning, judging = self.jobs_left(done[Stage.tune], done[Stage.judge])
        job_s = mean_cost(runs)
        took = (tuning + judging) * (job_s or DEFAULT_JOB_S)
        cost = "measured on its runs here" if job_s else "a default: nothing measured here yet"
        return took, (
            f"{tuning} tuning and up to {judging} judging jobs (and any widening), about {minutes(took)} of a "
            f"worker at {job_s or DEFAULT_JOB_S:.1f} s a job ({cost}; an estimate)"
        )

    def jobs_left(self, tuned: int = 0, judged: int = 0) -> tuple[int, int]:
        """(tuning jobs, judging jobs) of the plan not run yet: the judging ones at most (each line compared in
        every panel, to the most seeds a claim comparing it is planned; a claim's `where` may ask for fewer)."""
        claims = self.claims()
        plans = self.plans(claims)
        axes = hydra_args.axes([f"{k}={v}" for k, v in sweeper_params(self.config).items()])
        values = {k: [o.split("=", 1)[1] for o in v] for k, v in axes.items() if k != "seed"}
        values = {k: v for k, v in values.items() if k not in (self.config.get("tune") or ())}
        compared = [x for c in claims for x in (c.better, c.than)]
        line = next((k for k, v in values.items() if all(any(claimlib.same(x, y) for y in v) for x in compared)), "")
        panels = math.prod(len(v) for k, v in values.items() if k != line)
        seeds: dict[str, int] = {}
        for c in claims:
            for x in (c.better, c.than):
                seeds[str(x)] = max(seeds.get(str(x), 0), plans[c.id].max_seeds if c.id in plans else 0)
        return max(0, self.tuning_jobs - tuned), max(0, sum(seeds.values()) * panels - judged)

    # ---- bookkeeping -------------------------------------------------------------------------------
    def _report(self):
        return judge_preset(self.args, self.directory, figures=False)

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


def claim_plans(claims: list[claimlib.Claim], cap: int | None = None) -> dict[str, planlib.JudgingPlan]:
    """Each claim's judging plan: its test's power at its declared family's level, capped by --max-seeds, and
    nothing else (not the machine, not the budget, not the presets beside it)."""
    known = familylib.declared()
    sizes = familylib.sizes((c.id, c.family) for c in claims)
    size = {c.id: sizes.get(familylib.membership(c.id, c.family, known), 1) for c in claims}
    kw = {} if cap is None else {"cap": cap}
    return {c.id: planlib.plan_judging(family_size=size[c.id], **kw) for c in claims}


def is_open(d: dict[str, Any]) -> bool:
    """A claim more judging seeds may decide: inconclusive with nothing they cannot mend (a block, a failed seed)."""
    return (
        d["verdict"] == verdictlib.INCONCLUSIVE
        and (not d.get("raw_reason") or d.get("awaiting_seeds"))
        and not d.get("note")
    )


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
