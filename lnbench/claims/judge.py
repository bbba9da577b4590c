"""The claims of a report: which runs judge each claim, their numbers, the verdicts (lnbench/claims/verdicts.py),
and the text of the claims' table (its figure: lnbench/report/plots.py).

A claim is judged only on the runs whose config declares it (its own sweep's), panel by panel, on the runs
of each line at the hyperparameters the tuning seeds chose. Where both lines have judging runs (stage=judge:
fresh seeds at the chosen value, added by `lnbench check`) those judge and the tuning seeds only chose;
otherwise the tuning seeds at the chosen value judge, and the entry says so. A run that diverged counts as
the worst value of its line; one that failed, was killed or still runs blocks its panel with the reason;
so does a panel where neither line beats the trivial predictor by LEARNED_MARGIN (no learning).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lnbench.claims import decision, family, plan, verdicts
from lnbench.claims import spec as claimlib
from lnbench.claims.spec import DIVERGED, Claim, Value
from lnbench.config.choices import Stage
from lnbench.errors import UserError
from lnbench.runs import Run, read_json_record

DESIGN_FILE = "judging.json"  # written by lnbench check: the looks in which judging seeds were added
LOSS_METRICS = ("loss", "mse")  # in the units of the dataset's `baseline` (a trivial predictor's loss)
LEARNED_MARGIN = 0.05  # a line learned if its mean final validation loss is 5% below the trivial predictor's
ON_TUNING_SEEDS = (
    "judged on the seeds that chose the hyperparameters (no judging runs): a winner's curse "
    "favours the noisier line; `lnbench check` adds fresh judging seeds"
)


@dataclass(frozen=True)
class Designs:
    """What a sweep's judging.json declares: the sweep's plan (its looks and shares) and each claim's own plan
    where lnbench check planned claims apart (lnbench/claims/plan.py's sweep_record)."""

    sweep: plan.JudgingPlan | None
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)

    def of(self, claim_id: str, family_size: int) -> plan.JudgingPlan | None:
        """The plan a claim was judged under: its own record, else the sweep's. (Its MDE on the page is computed
        for its looks and shares at the claim's declared family: lnbench/claims/family.py.)"""
        if claim_id in self.claims:
            return plan.JudgingPlan.from_record(self.claims[claim_id], family_size)
        return self.sweep


def read_design(root: Path) -> Designs | None:
    """The looks (numbers of judging seeds) lnbench check planned for this sweep and the share of alpha each
    spends, if it wrote them: lnbench/claims/plan.py's records, issue 30's (looks and shares) or older ones (looks
    only: alpha spent linearly in seeds, as it was planned). A damaged judging.json is refused (DesignDamaged),
    never read as none: the seeds would be judged in one look, at another level."""
    path = root / DESIGN_FILE
    if not path.exists():
        return None
    remedy = (
        "Restore it from a copy; without it the judging seeds would be judged as if in one look, which is not the "
        "design they were planned in"
    )
    sweep, claims = plan.read_record(read_design_record(path, remedy))
    return Designs(sweep, claims) if sweep is not None or claims else None


class DesignDamaged(UserError):
    """judging.json is not the record lnbench check wrote: one paragraph naming it and what is wrong."""


def read_design_record(path: Path, remedy: str) -> dict[str, Any]:
    """judging.json as written (a JSON object whose fields have the types plan.py and lnbench check write), or
    DesignDamaged: the file, what is wrong with it, and `remedy`."""
    raw, problem = read_json_record(path, design_problem)
    if problem:
        raise DesignDamaged(
            f"{path} {problem}: it declares the looks and shares of alpha this sweep's judging seeds were "
            f"planned in (lnbench check wrote it before the first of them ran). {remedy}."
        )
    return raw


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_counts(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(n) and n >= 0 for n in v)


# judging.json's fields (plan.JudgingPlan.record, plan.sweep_record, lnbench check's own) and what each holds
_COUNTS = (_is_counts, "a list of seed counts")
_WHOLE = (lambda v: _is_int(v) and v >= 0, "a whole number")
_NUMBER = (lambda v: v is None or _is_number(v), "a number")
_TEXT = (lambda v: isinstance(v, str), "text")
_OBJECT = (lambda v: isinstance(v, dict), "an object")
DESIGN_FIELDS: dict[str, tuple[Any, str]] = {
    "planned": (lambda v: isinstance(v, bool), "true or false"),
    "looks": (lambda v: v is None or _is_counts(v), "a list of seed counts"),
    "rounds": _COUNTS,
    "shares": (lambda v: isinstance(v, list) and all(map(_is_number, v)), "a list of numbers"),
    **dict.fromkeys(("max_seeds", "family_size", "first_seed", "needed"), _WHOLE),
    **dict.fromkeys(("alpha", "agree", "power", "mde", "power_at_agree", "expected_seeds"), _NUMBER),
    **dict.fromkeys(("estimand", "test", "capped_by"), _TEXT),
    **dict.fromkeys(("claims", "blocked", "budget", "options"), _OBJECT),
}
OPTION_FIELDS = {"widen": _WHOLE, "max_seeds": (lambda v: v is None or _WHOLE[0](v), "a whole number or null")}


def design_problem(raw: Any, where: str = "", fields: dict | None = None) -> str:
    """What makes `raw` no judging.json ("" where nothing does): a field of another type names the first one."""
    if not isinstance(raw, dict):
        return f"holds {type(raw).__name__} {f'at `{where[:-1]}`' if where else 'at its top'}, not an object"
    for key, (ok, want) in (fields or DESIGN_FIELDS).items():
        if key in raw and not ok(raw[key]):
            return f"has `{where}{key}`: {json.dumps(raw[key])[:60]}, not {want}"
    for cid, record in (raw.get("claims") or {}).items() if fields is None else ():
        if problem := design_problem(record, f"claims.{cid}."):
            return problem
    return design_problem(raw["options"], "options.", OPTION_FIELDS) if fields is None and "options" in raw else ""


def judge_claims(
    groups: list, lay, design: Designs | None, adjust: str = family.DEFAULT_ADJUST
) -> tuple[list[dict[str, Any]], list[str]]:
    """claims.json's entries for every claim the runs declare, adjusted over their declared families. groups and
    lay: the report's (lnbench.report.analysis), duck-typed so that the report imports the judge, never both ways."""
    runs = [r for g in groups for r in (*g.runs, *g.judging)]
    try:
        claims = claimlib.claims_of(r.config for r in runs)
    except claimlib.ClaimError as e:
        return [], [str(e)]
    known = family.declared()
    sizes = family.sizes((c.id, c.family) for c in claims)
    judged = []
    for claim in claims:
        size = sizes.get(family.membership(claim.id, claim.family, known), 1)
        planned = design.of(claim.id, size) if design else None
        own = bool(design and claim.id in design.claims and planned and planned.looks)
        panels, on_tuning, trivial = [], False, set()
        for panel in dict.fromkeys(g.panel for g in groups):
            cells = {g.line: g for g in groups if g.panel == panel}
            if not any(claimlib.declares(r.config, claim) for g in cells.values() for r in (*g.runs, *g.judging)):
                continue  # another sweep's panel (a folder of mixed runs)
            if not matches(claim, dict(zip(lay.panels, panel)), cells.values()):
                continue
            better, than = (_cell(cells, line) for line in (claim.better, claim.than))
            judging = bool(better and than and better.judging and than.judging)
            # a claim judging.json planned on its own awaits its judging seeds: never judged on the tuning ones
            waits = not judging and own and better is not None and than is not None
            on_tuning |= not judging and not waits and any(g is not None and g.selection for g in (better, than))
            panels.append(_compare(claim, lay.title(panel), better, than, judging, planned, waits))
            trivial |= {t for g in (better, than) if g is not None and (t := trivial_value(claim, g.runs)) is not None}
        note = ON_TUNING_SEEDS if on_tuning and panels else ""
        judged.append(
            decision.judge_claim(
                claim,
                panels,
                planned if planned and planned.looks else None,
                note,
                size,
                trivial.pop() if len(trivial) == 1 else None,
            )
        )
    family.adjust(judged, adjust, sizes, known)
    return [v.as_dict() for v in judged], []


def panel_values(claim: Claim, values: dict[str, Any], cells) -> dict[str, Any]:
    """A panel's values of its keys, plus the keys the claim's `where` names that the sweep did not vary: the
    value all the panel's runs share (or none)."""
    out = dict(values)
    for key in claim.where:
        if key not in out:
            shared = {str(r.value(key)) for g in cells for r in g.runs}
            out[key] = next(iter(shared)) if len(shared) == 1 else _MISSING
    return out


def matches(claim: Claim, values: dict[str, Any], cells=()) -> bool:
    """Whether a panel (its values of the panel keys, panel_values) is one the claim's `where` names."""
    values = panel_values(claim, values, cells)
    return all(claimlib.same(values[key], want) for key, want in claim.where.items())


_MISSING = object()


def _cell(cells: dict, line: Any):
    return next((g for v, g in cells.items() if claimlib.same(v, line)), None)


def _compare(
    claim: Claim, title: str, better, than, judging: bool, design: plan.JudgingPlan | None, waits: bool = False
) -> verdicts.Panel:
    if waits:  # planned, and a line has no judging seed yet
        p = verdicts.Panel(title, claim.estimand, awaiting=True)
        p.reason = f"n<{design.looks[0]}: 0 paired judging seed(s)"
        p.lines = {str(g.line): _line_info(g, True) for g in (better, than)}
        return p
    numbers, blocked = {}, []
    for name, g in (("better", better), ("than", than)):
        if g is None:
            numbers[name] = {}
            continue
        runs = [r for r in (g.judging if judging else _tuning(g)) if claimlib.declares(r.config, claim)]
        numbers[name], why = _values(claim, runs, g.line)
        blocked += why
    if better and than and not blocked:
        blocked += _grid_edge(better, than) + _no_learning(claim, better, than, numbers, judging)
    margin = None
    if judging and than is not None:  # fixed before judging: the tuning runs of `than` at its chosen value
        tuned, _ = _values(claim, [r for r in _tuning(than) if claimlib.declares(r.config, claim)], than.line)
        exact = [v.x for v in tuned.values() if v.exact]
        margin = claim.margin(sum(exact) / len(exact) if exact else None)
    if judging and design is not None and not design.looks:
        blocked.append(f"no judging seeds planned: {design.summary()}")
    p = verdicts.compare(
        title,
        numbers["better"],
        numbers["than"],
        claim,
        design if judging and design is not None and design.looks else None,
        "; ".join(blocked),
        margin,
    )
    p.lines = {str(g.line): _line_info(g, judging) for g in (better, than) if g is not None}
    p.values = {
        k: {str(s): (v.x if math.isfinite(v.x) else "diverged") for s, v in numbers[k].items()} for k in numbers
    }
    return p


def _grid_edge(*cells) -> list[str]:
    """A verdict about a line still tuned at its grid's edge (after the widening budget) is one about the grid."""
    out = []
    for g in cells:
        sel = g.selection
        if sel and sel.edge:
            out.append(
                f"grid edge: {g.line} chose {sel.text()}; its best value may lie outside the grid "
                f"(lnbench check --widen N widens up to N values)"
            )
    return out


def _no_learning(claim: Claim, better, than, numbers: dict, judging: bool) -> list[str]:
    """Neither line beats the trivial predictor by LEARNED_MARGIN on the values compared (where the judged metric is
    in the baseline's units), or, where it is not, on its final validation loss."""
    base = trivial_value(claim, better.runs + than.runs)
    if base is not None:
        means = {k: [v.x for v in numbers[k].values() if v.exact] for k in ("better", "than")}
        means = {k: sum(xs) / len(xs) for k, xs in means.items() if xs}
        if means and all(m > (1 - LEARNED_MARGIN) * base for m in means.values()):
            shown = ", ".join(f"{g.line} {means[k]:.3g}" for k, g in (("better", better), ("than", than)) if k in means)
            return [
                f"no learning: neither line's {claim.describe()} ({shown}) is {LEARNED_MARGIN:.0%} below the trivial "
                f"predictor's {base:.3g}"
            ]
        return []
    if not (_learned(better, judging) or _learned(than, judging)):
        return [
            f"no learning: neither line's final validation loss is {LEARNED_MARGIN:.0%} below the trivial predictor's"
        ]
    return []


def trivial_value(claim: Claim, runs: list[Run]) -> float | None:
    """The trivial predictor's value on the claim's metric, where it is in the baseline's units (a loss or mse
    read at one point: final, best or at; an auc averages the curve from its untrained start); None otherwise."""
    if claim.name not in LOSS_METRICS or claim.measure not in ("final", "best", "at"):
        return None
    base = {r.summary.get("baseline") for r in runs} - {None}
    return float(base.pop()) if len(base) == 1 else None


def _tuning(g) -> list[Run]:
    return [r for r in g.runs if r.stage != Stage.judge]


def _values(claim: Claim, runs: list[Run], line: Any) -> tuple[dict[Any, Value], list[str]]:
    """seed -> Value of each run; the reasons a seed cannot count (never silently left out)."""
    out: dict[Any, Value] = {}
    why, seen = [], set()
    for r in runs:
        seed = r.value("seed")
        if seed in seen:
            why.append(f"two runs of {line} with seed {seed} ({r.name}): which one counts is ambiguous")
            continue
        seen.add(seed)
        if r.status == "diverged":
            out[seed] = DIVERGED
        elif r.status != "completed":
            why.append(f"seed {seed} of {line} is {r.status} ({r.name}): run it again (lnbench check resumes it)")
        elif (v := claimlib.run_measure(claim, r.points(claim.split, claim.name, claim.x), r.summary)) is None:
            why.append(f"seed {seed} of {line} has no {claim.describe()} ({r.name})")
        else:
            out[seed] = v
    return out, why


def _learned(g, judging: bool) -> bool:
    """Whether the line beats the trivial predictor (the dataset's baseline loss) by LEARNED_MARGIN; True when
    no baseline is known."""
    runs = [r for r in (g.judging if judging else _tuning(g)) if r.status == "completed"]
    base = {r.summary.get("baseline") for r in runs} - {None}
    losses = [v for r in runs if (v := r.final_val("loss")) is not None]
    if len(base) != 1 or not losses:
        return True
    return sum(losses) / len(losses) <= (1 - LEARNED_MARGIN) * base.pop()


def _line_info(g, judging: bool) -> dict[str, Any]:
    sel = g.selection
    return {
        "chosen": sel.text() if sel else "",
        "edge": bool(sel and sel.edge),
        "widened": sel.widened if sel else 0,
        "tuning_seeds": sorted({r.value("seed") for r in _tuning(g)}, key=str),
        "judging_seeds": sorted({r.value("seed") for r in g.judging}, key=str) if judging else [],
    }
