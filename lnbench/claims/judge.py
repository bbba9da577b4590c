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
from pathlib import Path
from typing import Any

from lnbench.claims import spec as claimlib
from lnbench.claims import verdicts
from lnbench.claims.spec import DIVERGED, Claim, Value
from lnbench.runs import Run

DESIGN_FILE = "judging.json"  # written by lnbench check: the looks in which judging seeds were added
LEARNED_MARGIN = 0.05  # a line learned if its mean final validation loss is 5% below the trivial predictor's
ON_TUNING_SEEDS = ("judged on the seeds that chose the hyperparameters (no judging runs): a winner's curse "
                   "favours the noisier line; `lnbench check` adds fresh judging seeds")


def stage(run: Run) -> str:
    """tune, widen or judge (lnbench/config/schema.py `stage`; runs made before it existed: tune)."""
    value = run.value("stage")
    return value if value in ("widen", "judge") else "tune"


def read_design(root: Path) -> list[int] | None:
    """The looks (numbers of judging seeds) lnbench check planned for this sweep, if it wrote them."""
    try:
        looks = json.loads((root / DESIGN_FILE).read_text()).get("looks")
    except (OSError, ValueError, AttributeError):
        return None
    return [int(n) for n in looks] if isinstance(looks, list) and looks else None


def judge_claims(groups: list, lay, design: list[int] | None, adjust: str = "holm") -> tuple[list[dict[str, Any]], list[str]]:
    """claims.json's entries for every claim the runs declare, family-adjusted over them all. groups and lay:
    the report's (lnbench.report.analysis), duck-typed so that the report imports the judge, never both ways."""
    runs = [r for g in groups for r in (*g.runs, *g.judging)]
    try:
        claims = claimlib.claims_of(r.config for r in runs)
    except claimlib.ClaimError as e:
        return [], [str(e)]
    entries = []
    for claim in claims:
        panels, on_tuning = [], False
        for panel in dict.fromkeys(g.panel for g in groups):
            cells = {g.line: g for g in groups if g.panel == panel}
            if not any(claimlib.declares(r.config, claim) for g in cells.values() for r in (*g.runs, *g.judging)):
                continue  # another sweep's panel (a folder of mixed runs)
            if not matches(claim, dict(zip(lay.panels, panel)), cells.values()):
                continue
            better, than = (_cell(cells, line) for line in (claim.better, claim.than))
            judging = bool(better and than and better.judging and than.judging)
            on_tuning |= not judging and any(g is not None and g.selection for g in (better, than))
            comparison = _compare(claim, lay.title(panel), better, than, judging, design)
            panels.append(comparison)
        entries.append(verdicts.judge_claim(claim, panels, design, ON_TUNING_SEEDS if on_tuning and panels else ""))
    verdicts.adjust(entries, adjust)
    return entries, []


def matches(claim: Claim, values: dict[str, Any], cells) -> bool:
    """Whether a panel (its values of the panel keys) is one the claim's `where` names; a key the sweep did not
    vary matches the value all the panel's runs share. Fills `values` with those keys."""
    for key, want in claim.where.items():
        if key not in values:  # a key the sweep did not vary: the value all its runs share
            shared = {str(r.value(key)) for g in cells for r in g.runs}
            values[key] = next(iter(shared)) if len(shared) == 1 else _MISSING
        if not claimlib.same(values[key], want):
            return False
    return True


_MISSING = object()


def _cell(cells: dict, line: Any):
    return next((g for v, g in cells.items() if claimlib.same(v, line)), None)


def _compare(claim: Claim, title: str, better, than, judging: bool, design: list[int] | None) -> verdicts.Panel:
    numbers, blocked = {}, []
    for name, g in (("better", better), ("than", than)):
        if g is None:
            numbers[name] = {}
            continue
        runs = [r for r in (g.judging if judging else _tuning(g)) if claimlib.declares(r.config, claim)]
        numbers[name], why = _values(claim, runs, g.line)
        blocked += why
    if better and than and not blocked and not (_learned(better, judging) or _learned(than, judging)):
        blocked.append(f"no learning: neither line's final validation loss is {LEARNED_MARGIN:.0%} below the trivial predictor's")
    p = verdicts.compare(title, numbers["better"], numbers["than"], claim, looks=design if judging else None, blocked="; ".join(blocked))
    p.lines = {str(g.line): _line_info(g, judging) for g in (better, than) if g is not None}
    p.values = {k: {str(s): (v.x if math.isfinite(v.x) else "diverged") for s, v in numbers[k].items()} for k in numbers}
    return p


def _tuning(g) -> list[Run]:
    return [r for r in g.runs if stage(r) != "judge"]


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
    return {"chosen": sel.text() if sel else "", "edge": bool(sel and sel.edge), "widened": sel.widened if sel else 0,
            "tuning_seeds": sorted({r.value("seed") for r in _tuning(g)}, key=str),
            "judging_seeds": sorted({r.value("seed") for r in g.judging}, key=str) if judging else []}


# ---- what a reader sees ---------------------------------------------------------------------------------
def seeds_text(d: dict[str, Any]) -> str:
    """'3 + 6': the tuning seeds (per value of the grid) and the judging seeds, from a claims.json entry."""
    lines = list((d.get("lines") or {}).values())
    tuning = min((len(x["tuning_seeds"]) for x in lines), default=0)
    judging = min((len(x["judging_seeds"]) for x in lines), default=0)
    if judging:
        return f"{tuning} + {judging}"
    return f"{tuning} (the tuning seeds)" if d.get("note") else str(d.get("n_seeds", 0))


def chosen_text(d: dict[str, Any]) -> str:
    return "; ".join(f"{line}: {x['chosen']}" for line, x in (d.get("lines") or {}).items() if x.get("chosen")) or "—"


def verdict_text(d: dict[str, Any]) -> str:
    return d["verdict"] + (f" ({d['reason']})" if d["verdict"] == verdicts.INCONCLUSIVE and d.get("reason") else "")


def effect_text(d: dict[str, Any]) -> str:
    """'0.05 [0.01, 0.09]; d=2.1; bootstrap [0.02, 0.08]': the t interval (it decides), the effect in standard
    deviations of the differences, the bootstrap interval (shown only)."""
    text = claimlib.fmt_effect(d)
    if d.get("effect_size") is not None:
        text += f"; d={d['effect_size']:.2g}"
    if d.get("boot_low") is not None:
        text += f"; bootstrap [{d['boot_low']:.3g}, {d['boot_high']:.3g}]"
    return text


def table_rows(entries: list[dict[str, Any]]) -> list[list[str]]:
    return [[d["id"], d["text"], f"{d['better']} vs {d['than']}", d["measure"], verdict_text(d), d["raw_verdict"],
             effect_text(d), "—" if d.get("p_improve") is None else f"{d['p_improve']:.2f}", seeds_text(d), chosen_text(d)]
            for d in entries]


COLUMNS = ["claim", "paper", "better vs than", "measure", "verdict (adjusted)", "unadjusted", "effect [95% t CI]; d; bootstrap",
           "P(better<than)", "seeds: tuning + judging", "chosen (val)"]


def lines(entries: list[dict[str, Any]], adjust: str) -> list[str]:
    out = ["statistics: " + verdicts.describe_method(adjust) + "; effect > 0 supports the claim; the t interval (the sign "
           "test where a run diverged or never reached its target) decides, the bootstrap interval is shown only"]
    notes = sorted({d["note"] for d in entries if d.get("note")})
    out += [f"**{n}**" for n in notes]
    return out
