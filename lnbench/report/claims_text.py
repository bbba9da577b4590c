"""The claims' table as a reader sees it, from claims.json entries (lnbench/claims/decision.py's ClaimVerdict):
each verdict beside the interval that decided it, at its level, the two lines' means and the trivial
predictor's value in the metric's units, the margin, and the seeds that chose and judged. The report and
`lnbench check` show the same cells."""

from __future__ import annotations

import math
from typing import Any

from lnbench.claims import family
from lnbench.claims.verdicts import INCONCLUSIVE


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
    return d["verdict"] + (f" ({d['reason']})" if d["verdict"] == INCONCLUSIVE and d.get("reason") else "")


def level_text(level: float) -> str:
    """'99.85%': a confidence level 1 - level, with two significant digits of what it leaves out."""
    digits = max(1, 1 - math.floor(math.log10(100 * level)))
    return f"{100 * (1 - level):.{digits}f}%"


def effect_text(d: dict[str, Any]) -> str:
    """'+0.05 [0.01, 0.09] at 99.8% (look 9)': the mean difference at the deciding look and the interval that
    decided, at its level; where the sign test decided or vetoed, what it saw instead. A blocked claim: none."""
    if d.get("raw_reason"):
        return "—"
    if d.get("effect") is None:  # the sign test alone (every pair diverged or censored, or no spread)
        return f"sign test: {d['sign']}" if d.get("sign") else "—"
    text = f"{d['effect']:+.3g}"
    if d.get("ci_low") is not None:
        text += f" [{d['ci_low']:.3g}, {d['ci_high']:.3g}] at {level_text(d['level'])}"
        text += f" (look {d['decided_at']})" if len(d.get("looks") or ()) > 1 else ""
    elif d.get("sign"):
        text += f" (no t interval: sign test, {d['sign']})"
    return text


def lines_text(d: dict[str, Any]) -> str:
    """'ln 0.20, bn 0.30; trivial 0.167': each line's mean on the metric compared, in its units."""
    names = {"better_mean": d.get("better"), "than_mean": d.get("than")}
    parts = [f"{names[k]} {d[k]:.3g}" for k in ("better_mean", "than_mean") if d.get(k) is not None]
    text = ", ".join(parts) or "—"
    return text + (f"; trivial {d['trivial']:.3g}" if d.get("trivial") is not None else "")


def margin_text(d: dict[str, Any]) -> str:
    me = d.get("min_effect")
    return f"±{d['margin']:.3g}" + (f" ({me} of than)" if isinstance(me, str) else "") if d.get("margin") else "0"


def table_rows(entries: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            d["id"],
            d["text"],
            f"{d['better']} vs {d['than']}",
            d["measure"],
            verdict_text(d),
            d["raw_verdict"],
            effect_text(d),
            margin_text(d),
            lines_text(d),
            p_improve_text(d),
            seeds_text(d),
            chosen_text(d),
        ]
        for d in entries
    ]


def p_improve_text(d: dict[str, Any]) -> str:
    return "—" if d.get("p_improve") is None else f"{d['p_improve']:.2f}"


EFFECT = "effect [interval that decided, its level]"
NOWRAP = (EFFECT, "min_effect")
COLUMNS = [
    "claim",
    "paper",
    "better vs than",
    "measure",
    "verdict (adjusted)",
    "unadjusted",
    EFFECT,
    "min_effect",
    "means (units of the measure)",
    "P(better<than)",
    "seeds: tuning + judging",
    "chosen (val)",
]


def lines(entries: list[dict[str, Any]], adjust: str) -> list[str]:
    fams = sorted({(d.get("family") or family.UNDECLARED, d.get("family_size", 0)) for d in entries})
    out = [
        "statistics: " + family.describe_method(adjust) + "; effect > 0 supports the claim; the interval shown is "
        "the one that decided, at its level (the look's share of alpha, the family's adjustment); the bootstrap "
        "interval in claims.json (unadjusted_boot95_*) is a plain 95% one, shown only",
        "families: " + ", ".join(f"{f} ({n} claims declared)" for f, n in fams),
    ]
    if any(f == family.UNDECLARED for f, _ in fams):
        out.append("claims without a declared `family` are adjusted over this page's undeclared claims only")
    notes = sorted({d["note"] for d in entries if d.get("note")})
    out += [f"**{n}**" for n in notes]
    return out
