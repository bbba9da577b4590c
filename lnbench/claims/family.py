"""The family a claim's verdict is adjusted over: declared in the presets, never whatever a page judged.

Each claim of conf/experiment/*.yaml names its family (`family: primary` for the paper's own claims,
`control` for checks that are not claims of the paper, `beyond` for claims from other papers or the slides).
A family's size is the number of claims the presets declare in it, whether or not they were run, so that a
preset's report, `lnbench check` of some presets and the full check judge the same runs alike. The default
adjustment, Bonferroni over the declared family, depends on no other claim's p-value: the same runs get the
same verdict on every page. Holm and Benjamini-Hochberg (asked for) count the family's claims that are not
on the page as p = 1, so a page never reads less strict than the full check, but can read stricter.

Membership is the presets': a claim counts in a declared family only if the presets declare its id there. A
claim without a `family`, or with one the presets do not declare it in (a claim added by hand under `primary`,
an id the presets do not know), is adjusted apart, with the page's other such claims, and the page says so: it
never changes a declared family's size (issue 39: a page claim under an undeclared id made "primary" 24).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import numpy as np

import lnbench
from lnbench.claims import plan, stats
from lnbench.claims.decision import ClaimVerdict, interval_shown, passes
from lnbench.claims.spec import MEDIAN
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


def membership(cid: str, fam: str, known: dict[str, set[str]]) -> str:
    """The family a claim is adjusted in: its declared one if the presets declare its id there, else UNDECLARED."""
    return fam if fam and cid in known.get(fam, set()) else UNDECLARED


def sizes(members: Iterable[tuple[str, str]], conf_dir: Path = lnbench.CONF_DIR) -> dict[str, int]:
    """family -> its size: the claims the presets declare in it; UNDECLARED: the page's claims (id, family) that
    no preset declares in their family (they are adjusted apart, membership)."""
    known = declared(conf_dir)
    out = {f: len(ids) for f, ids in known.items()}
    apart = {cid for cid, fam in members if membership(cid, fam, known) == UNDECLARED}
    return out | ({UNDECLARED: len(apart)} if apart else {})


def adjust(
    verdicts: list[ClaimVerdict],
    method: str = DEFAULT_ADJUST,
    family_sizes: dict[str, int] | None = None,
    known: dict[str, set[str]] | None = None,
) -> None:
    """Sets each verdict's adjusted verdict, p-value, the family it was counted in and its size, the interval
    that decided and, if inconclusive, why. raw_verdict keeps the unadjusted one."""
    known = declared() if known is None else known
    family_sizes = family_sizes or sizes((v.id, v.family) for v in verdicts)
    counted = {v.id: membership(v.id, v.family, known) for v in verdicts}
    for fam in dict.fromkeys(counted.values()):
        members = [v for v in verdicts if counted[v.id] == fam]
        m = max(family_sizes.get(fam, 0), len(members))
        p = np.array([v.p_decide for v in members])
        padded = np.concatenate([p, np.ones(m - len(members))])
        for v, pa in zip(members, stats.ADJUST[method](padded)):
            v.adjusted_in = fam
            _set(v, method, m, float(pa))


def _set(v: ClaimVerdict, method: str, m: int, p_adjusted: float) -> None:
    v.adjust, v.family_size, v.p_adjusted = method, m, p_adjusted
    v.verdict = v.kind if v.kind and not v.raw_reason and passes(p_adjusted) else INCONCLUSIVE
    factor = (
        m
        if method == "bonferroni"
        else 1.0
        if method == "none"
        else (max(1.0, p_adjusted / v.p_decide) if 0 < v.p_decide < 1 and p_adjusted < 1 else m)
    )
    v.ci_low, v.ci_high, v.level = interval_shown(v, factor, v.verdict)
    v.mde = _mde(v) if not v.raw_reason or v.awaiting_seeds else None
    v.power_with_ties = _power_with_ties(v)
    v.reason = "" if v.verdict != INCONCLUSIVE else why(v)


def _mde(v: ClaimVerdict) -> float | None:
    """The effect the design detects with 80% power at the family's Bonferroni level, known before the judging
    seeds ran (never from them): for the median, the P(d > margin) (lnbench/claims/plan.py, exact); for the mean,
    the true mean difference in standard deviations of d (a paired t test at the last look's share)."""
    if not v.planned_looks:
        return None
    level = stats.ALPHA / 2 / max(1, v.family_size)
    if v.estimand == MEDIAN:
        return plan.detectable(v.planned_looks, v.planned_shares, level)
    return stats.mde(1.0, v.max_seeds, 2 * level * v.planned_shares[-1])


def _power_with_ties(v: ClaimVerdict) -> float | None:
    """What the ties cost a sign test: the plan's power (at the family's Bonferroni level) for a claim whose
    untied pairs favour it `agree` of the time, at the tie rate these pairs show: a description of the seeds
    judged, never a test (None without ties or a planned design)."""
    if not v.ties or not v.decided_at or not v.planned_looks or v.estimand != MEDIAN or v.raw_reason:
        return None
    level = stats.ALPHA / 2 / max(1, v.family_size)
    return plan.power_of(v.planned_looks, v.planned_shares, level, plan.AGREE * (1 - v.ties / v.decided_at))


def ties_text(v: ClaimVerdict | dict) -> str:
    """'5 of 14 tied: power 85% → 31% at 9 in 10 of the other pairs' (the page's; "" without ties)."""
    d = v if isinstance(v, dict) else v.as_dict()
    if not d.get("ties") or d.get("power_with_ties") is None:
        return ""
    level = stats.ALPHA / 2 / max(1, d.get("family_size") or 1)
    planned = plan.power_of(d["planned_looks"], d["planned_shares"], level, plan.AGREE)
    return (
        f"{d['ties']} of {d['decided_at']} tied: power {planned:.0%} → {d['power_with_ties']:.0%} at "
        f"{plan.AGREE:.0%} of the other pairs"
    )


def mde_text(v: ClaimVerdict) -> str:
    """'MDE: P(d > margin) 0.89 at up to 21 seeds' (or why none is possible)."""
    if v.estimand != MEDIAN:
        return f"MDE {v.mde:.2g} sd of the differences at {v.max_seeds} seeds" if v.mde is not None else ""
    if v.mde is None:
        need = plan.smallest_decisive(stats.ALPHA / 2 / max(1, v.family_size))
        return (
            f"no decision possible: {v.max_seeds} seeds cannot reach the family's level (a sign test needs at "
            f"least {need} seeds, all beyond the margin)"
        )
    return f"MDE P(d > margin) {v.mde:.2f} at up to {v.max_seeds} seeds"


def why(v: ClaimVerdict) -> str:
    """Why an inconclusive verdict is one (a query: it changes nothing)."""
    if v.raw_reason:
        mde = mde_text(v) if v.awaiting_seeds and v.planned_looks else ""
        return v.raw_reason + (f"; planned {mde}" if mde else "")
    where = f" in {v.panel}" if len(v.panels) > 1 else ""
    mde = mde_text(v)
    if v.raw_verdict != INCONCLUSIVE:
        return f"{v.raw_verdict} before the family adjustment (p {v.p_decide:.2g}, adjusted {v.p_adjusted:.2g})" + (
            f"; {mde}" if mde else ""
        )
    if ruled := ruled_out(v):
        return f"{ruled}{where} at look {v.decided_at}" + (f"; {mde}" if mde else "")
    if v.estimand == MEDIAN or v.ci_low is None:
        test = "the sign test" if v.estimand == MEDIAN else "the t test"
        seen = f" ({v.sign})" if v.sign else ""
        tied = f"; ties: {ties_text(v)}" if ties_text(v) else ""
        return f"{test}{where} did not pass at look {v.decided_at}{seen}" + (f"; {mde}" if mde else "") + tied
    return f"the interval{where} includes " + (f"±{v.margin:.3g}" if v.margin else "0") + (f"; {mde}" if mde else "")


def ruled_out(v: ClaimVerdict) -> str:
    """Under `estimand: mean`, what a pair known only as a bound did: "held ruled out: 1 pair diverged or never
    reached the target, so that line's mean is unbounded; the t test on the 8 exact pairs passed no other side"
    ("" where no side was ruled out, or the estimand is the median)."""
    panel = next((p for p in v.panels if p["panel"] == v.panel), None)
    look = next((lk for lk in (panel or {}).get("looks", []) if lk["n"] == v.decided_at), None)
    if v.estimand == MEDIAN or not look or not look.get("ruled_out"):
        return ""
    pairs = panel.get("pairs", [])[: v.decided_at]
    odd = sum(1 for lo, hi in pairs if not all(math.isfinite(float(x)) for x in (lo, hi)))
    return (
        f"{' and '.join(look['ruled_out'])} ruled out: {odd} pair(s) diverged or never reached the target, so that "
        f"line's mean is unbounded; the t test on the {len(pairs) - odd} exact pairs passed no other side"
    )


def describe_method(method: str) -> str:
    return (
        "estimand: the median paired difference d = than - better (`better` beats `than` by more than "
        "min_effect on most seeds: P(d > min_effect) > 1/2), unless a claim declares `estimand: mean`; "
        "test: exact sign tests on every pair (ties and pairs of unknown order count against the claim; a "
        "diverged run is its line's worst value, a target never reached is censored at its last evaluation), "
        "two one-sided sign tests for equivalence; `estimand: mean`: the paired t test, its verdict resting on "
        "the seeds' tails (flagged beyond 3 IQR); held/contradicted: the interval shown lies beyond ±min_effect, "
        "equivalent: inside it; looks spend their declared shares of alpha (judging.json); panels: "
        f"intersection-union for held, Bonferroni for contradicted; family: {NAMES[method]}"
    )
