"""The family a claim's verdict is adjusted over: declared in the presets, never whatever a page judged.

Each claim of conf/experiment/*.yaml names its family (`family: primary` for the paper's own claims,
`control` for checks that are not claims of the paper, `beyond` for claims from other papers or the slides).
A family's size is the number of claims the presets declare in it, whether or not they were run, so that a
preset's report, `lnbench check` of some presets and the full check judge the same runs alike. The default
adjustment, Bonferroni over the declared family, depends on no other claim's p-value: the same runs get the
same verdict on every page. Holm and Benjamini-Hochberg (asked for) count the family's claims that are not
on the page as p = 1, so a page never reads less strict than the full check, but can read stricter. A claim
without a `family` is adjusted with the page's other undeclared claims, and the page says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

import lnbench
from lnbench.claims import stats
from lnbench.claims.decision import ClaimVerdict, interval_shown
from lnbench.claims.verdicts import INCONCLUSIVE
from lnbench.config.presets import experiments

DEFAULT_ADJUST = "bonferroni"
UNDECLARED = "undeclared"
NAMES = {
    "bonferroni": "Bonferroni over the declared family",
    "holm": "Holm over the declared family (claims not run: p = 1)",
    "bh": "Benjamini-Hochberg over the declared family (claims not run: p = 1)",
    "none": "none (unadjusted)",
}


def declared(conf_dir: Path = lnbench.CONF_DIR) -> dict[str, set[str]]:
    """family -> the ids of the claims the experiment presets declare in it."""
    out: dict[str, set[str]] = {}
    for cfg in experiments(conf_dir).values():
        for raw in cfg.get("claims") or ():
            if isinstance(raw, dict) and raw.get("family") and raw.get("id"):
                out.setdefault(str(raw["family"]), set()).add(str(raw["id"]))
    return out


def sizes(members: Iterable[tuple[str, str]], conf_dir: Path = lnbench.CONF_DIR) -> dict[str, int]:
    """family -> its size: the claims the presets declare in it, and any other claim (id, family) on the page."""
    known = declared(conf_dir)
    for cid, fam in members:
        known.setdefault(fam or UNDECLARED, set()).add(cid)
    return {f: len(ids) for f, ids in known.items()}


def adjust(
    verdicts: list[ClaimVerdict], method: str = DEFAULT_ADJUST, family_sizes: dict[str, int] | None = None
) -> None:
    """Sets each verdict's adjusted verdict, p-value, family size, the interval that decided and, if
    inconclusive, why. raw_verdict keeps the unadjusted one."""
    family_sizes = family_sizes or sizes((v.id, v.family) for v in verdicts)
    for family in dict.fromkeys(v.family or UNDECLARED for v in verdicts):
        members = [v for v in verdicts if (v.family or UNDECLARED) == family]
        m = max(family_sizes.get(family, 0), len(members))
        p = np.array([v.p_decide for v in members])
        padded = np.concatenate([p, np.ones(m - len(members))])
        for v, pa in zip(members, stats.ADJUST[method](padded)):
            _set(v, method, m, float(pa))


def _set(v: ClaimVerdict, method: str, m: int, p_adjusted: float) -> None:
    v.adjust, v.family_size, v.p_adjusted = method, m, p_adjusted
    v.verdict = v.kind if v.kind and not v.raw_reason and p_adjusted <= stats.ALPHA else INCONCLUSIVE
    factor = (
        m
        if method == "bonferroni"
        else 1.0
        if method == "none"
        else (max(1.0, p_adjusted / v.p_decide) if 0 < v.p_decide < 1 and p_adjusted < 1 else m)
    )
    v.ci_low, v.ci_high, v.level = interval_shown(v, factor, v.verdict)
    v.mde = _mde(v)
    v.reason = "" if v.verdict != INCONCLUSIVE else why(v)


def _mde(v: ClaimVerdict) -> float | None:
    found = stats.mde(v.sd, v.n_seeds, v.level) if v.sd and v.n_seeds else None
    return None if found is None else found + (v.margin or 0.0)


def why(v: ClaimVerdict) -> str:
    """Why an inconclusive verdict is one (a query: it changes nothing)."""
    if v.raw_reason:
        return v.raw_reason
    where = f" in {v.panel}" if len(v.panels) > 1 else ""
    known = v.mde is not None and v.effect is not None
    mde = f"MDE {v.mde:.3g} at {v.n_seeds} seeds, effect {v.effect:.3g}" if known else ""
    if v.ci_low is None and v.sign:
        return f"the sign test{where} did not pass at look {v.decided_at} ({v.sign})" + (f"; {mde}" if mde else "")
    if v.raw_verdict != INCONCLUSIVE:
        return f"{v.raw_verdict} before the family adjustment (p {v.p_decide:.2g}, adjusted {v.p_adjusted:.2g})" + (
            f"; {mde}" if mde else ""
        )
    if mde and abs(v.effect) < v.mde:
        return f"underpowered{where}: {mde}"
    return f"the interval{where} includes " + (f"±{v.margin:.3g}" if v.margin else "0")


def describe_method(method: str) -> str:
    return (
        "estimand: the mean paired difference (than - better); test: paired t on the exact pairs, gated by "
        "the exact sign test on every pair whose order is known at the look's share of alpha (the sign test "
        "alone where a run diverged or never reached its target; Welch without 3 common seeds); "
        "held/contradicted: the interval shown lies beyond ±min_effect, equivalent: inside it; looks spend "
        "their declared shares of alpha; panels: "
        f"intersection-union for held, Bonferroni for contradicted; family: {NAMES[method]}"
    )
