"""The claims' table as a reader sees it, from claims.json entries (lnbench/claims/decision.py's ClaimVerdict):
each verdict beside the interval that decided it, at its level, the two lines' means and the trivial
predictor's value in the metric's units, the margin, and the seeds that chose and judged. The report and
`lnbench check` show the same cells."""

from __future__ import annotations

import math
from typing import Any

from lnbench.claims import family
from lnbench.claims.spec import MEAN
from lnbench.claims.verdicts import INCONCLUSIVE
from lnbench.report.render import Detail


def seeds_text(d: dict[str, Any]) -> str:
    """'3 + 6': the tuning seeds (per value of the grid) and the judging seeds, from a claims.json entry."""
    lines = list((d.get("lines") or {}).values())
    tuning = min((len(x["tuning_seeds"]) for x in lines), default=0)
    judging = min((len(x["judging_seeds"]) for x in lines), default=0)
    if judging or d.get("awaiting_seeds"):
        planned = d.get("max_seeds") or 0
        return f"{tuning} + {judging}" + (f" (of up to {planned})" if planned > judging else "")
    return f"{tuning} (the tuning seeds)" if d.get("note") else str(d.get("n_seeds", 0))


def chosen_text(d: dict[str, Any]) -> str:
    return "; ".join(f"{line}: {x['chosen']}" for line, x in (d.get("lines") or {}).items() if x.get("chosen")) or "—"


def estimand_text(d: dict[str, Any]) -> str:
    """'median (most seeds)' or 'mean (rests on the tails)': what the verdict is about."""
    return "mean (rests on the tails)" if d.get("estimand") == MEAN else "median (most seeds)"


def verdict_text(d: dict[str, Any]) -> str:
    """The adjusted verdict, why if inconclusive, and for `estimand: mean` the seeds its mean rests on."""
    return str(verdict_cell(d))


def verdict_cell(d: dict[str, Any]) -> Detail:
    """verdict_text as a cell: the verdict, and why (folded in the HTML)."""
    if d["verdict"] == INCONCLUSIVE:
        return Detail(d["verdict"], d.get("reason") or "")
    flag = d.get("estimand") == MEAN and d.get("tails")
    return Detail(d["verdict"], f"tails flagged: {d['tails']}" if flag else "")


def level_text(level: float) -> str:
    """'99.85%': a confidence level 1 - level, with two significant digits of what it leaves out."""
    digits = max(1, 1 - math.floor(math.log10(100 * level)))
    return f"{100 * (1 - level):.{digits}f}%"


def look_text(d: dict[str, Any]) -> str:
    """' (look 7)' where the claim was judged in looks (or frozen before its last seeds): the look that decided."""
    n = d.get("decided_at")
    several = len(d.get("planned_looks") or d.get("looks") or ()) > 1 or (n is not None and n < d.get("n_seeds", 0))
    return f" (look {n})" if n is not None and several else ""


def effect_text(d: dict[str, Any]) -> str:
    """'median +0.05 [0.01, 0.09] at 99.8% (look 9)': the estimand's estimate at the deciding look and the
    interval that decided, at its level; where no interval reaches that level, what the sign tests saw. A
    blocked claim: none."""
    if d.get("raw_reason"):
        return "—"
    name = "mean" if d.get("estimand") == MEAN else "median"
    if d.get("effect") is None:  # a median a censored pair leaves open, or no test of a mean
        return f"sign tests: {d['sign']}" if d.get("sign") else "—"
    text = f"{name} {d['effect']:+.3g}"
    if d.get("ci_low") is not None:
        text += f" [{d['ci_low']:.3g}, {d['ci_high']:.3g}] at {level_text(d['level'])}{look_text(d)}"
    elif d.get("sign"):
        text += f" (no interval at {level_text(d['level'])}{look_text(d)})" if d.get("level") else ""
    return text


def pairs_text(d: dict[str, Any]) -> str:
    """'8 of 9 above, 0 below': the pairs beyond +min_effect and beyond -min_effect (what the sign tests count)."""
    sign = d.get("sign") or ""
    if d.get("raw_reason") or not sign:
        return "—"
    counted = sign.replace(" pairs above +margin,", " above,").replace(" below −margin", " below")
    cost = family.ties_text(d)
    return counted + (f"; {cost}" if cost else "")


def mean_text(d: dict[str, Any]) -> str:
    """'+0.04 [-0.01, 0.09]; tails: seed 1004 (-0.93) beyond 3 IQR': the mean of the exact pairs at the deciding
    look with its plain t 95% interval, a description that rests on the seeds' tails (which it names)."""
    if d.get("raw_reason") or d.get("mean") is None:
        return "—"
    text = f"{d['mean']:+.3g}"
    if d.get("mean_low") is not None:
        text += f" [{d['mean_low']:.3g}, {d['mean_high']:.3g}]"
    return text + (f"; tails: {d['tails']}" if d.get("tails") else "")


def lines_text(d: dict[str, Any]) -> str:
    """'ln 0.20, bn 0.30; trivial 0.167': each line's mean on the metric compared, in its units."""
    names = {"better_mean": d.get("better"), "than_mean": d.get("than")}
    parts = [f"{names[k]} {d[k]:.3g}" for k in ("better_mean", "than_mean") if d.get(k) is not None]
    text = ", ".join(parts) or "—"
    return text + (f"; trivial {d['trivial']:.3g}" if d.get("trivial") is not None else "")


def margin_text(d: dict[str, Any]) -> str:
    me = d.get("min_effect")
    return f"±{d['margin']:.3g}" + (f" ({me} of than)" if isinstance(me, str) else "") if d.get("margin") else "0"


def table_rows(entries: list[dict[str, Any]]) -> list[list]:
    return [
        [
            d["id"],
            d["text"],
            f"{d['better']} vs {d['than']}",
            d["measure"],
            estimand_text(d),
            verdict_cell(d),
            d["raw_verdict"],
            effect_text(d),
            margin_text(d),
            pairs_text(d),
            mean_text(d),
            lines_text(d),
            seeds_text(d),
            chosen_text(d),
        ]
        for d in entries
    ]


EFFECT = "effect [interval that decided, its level]"
PAIRS = "pairs beyond ±min_effect"
MEAN_COLUMN = "mean [t 95%] (rests on the seeds' tails)"
NOWRAP = (EFFECT, "min_effect")
COLUMNS = [
    "claim",
    "paper",
    "better vs than",
    "measure",
    "estimand",
    "verdict (adjusted)",
    "unadjusted",
    EFFECT,
    "min_effect",
    PAIRS,
    MEAN_COLUMN,
    "means (units of the measure)",
    "seeds: tuning + judging",
    "chosen (val)",
]


def lines(entries: list[dict[str, Any]], adjust: str) -> list[str]:
    fams = sorted(
        {(d.get("adjusted_in") or d.get("family") or family.UNDECLARED, d.get("family_size", 0)) for d in entries}
    )
    out = [
        "statistics: " + family.describe_method(adjust) + "; effect > 0 supports the claim; the interval shown is "
        "the one that decided, at its level (the look's share of alpha, the family's adjustment); the mean and "
        "its t 95% interval describe the seeds and rest on their tails; the bootstrap interval in claims.json "
        "(unadjusted_boot95_*) is a plain 95% one, shown only",
        "families: "
        + ", ".join(f"{f} ({n} claim(s) {'on this page' if f == family.UNDECLARED else 'declared'})" for f, n in fams),
    ]
    if any(not d.get("family") for d in entries):
        out.append("claims without a declared `family` are adjusted over this page's undeclared claims only")
    apart = [d["id"] for d in entries if d.get("family") and d.get("adjusted_in") == family.UNDECLARED]
    if apart:
        out.append(
            "adjusted apart, with this page's undeclared claims (no preset declares them in the family they name, "
            "so they cannot change its size): " + ", ".join(apart)
        )
    notes = sorted({d["note"] for d in entries if d.get("note")})
    out += [f"**{n}**" for n in notes]
    return out
