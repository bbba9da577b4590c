"""One claim's verdict, typed: its p-values over its panels and looks (judge_claim), then, once the family is
known (lnbench/claims/family.py), its adjusted verdict and the interval at the level that decided it.

The interval shown is the one the decision used, for the claim's estimand: the deciding panel's interval at the
deciding look, at level 1 - alpha * share / factor, where share is that look's share of alpha and factor what
the family adjustment multiplied the claim's p-value by (Bonferroni over the panels too, for a contradiction).
For the median (the default) it is the order-statistic interval of the sign test (stats.median_interval), for
the mean the Student t interval. So a verdict and its interval never disagree: held <=> the interval lies above
+margin, contradicted <=> below -margin, equivalent <=> inside. Where the seeds judged cannot reach that level,
no interval is shown, only what the sign tests saw.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from lnbench.claims import stats
from lnbench.claims.spec import MEDIAN, Claim
from lnbench.claims.verdicts import (
    CONTRADICTED,
    EQUIVALENT,
    HELD,
    INCONCLUSIVE,
    KINDS,
    P_KEYS,
    Looks,
    Panel,
    pair_bounds,
    reads,
)

ALPHA = stats.ALPHA


@dataclass
class ClaimVerdict:
    """A claim's entry in claims.json (as_dict); every page reads it, none assembles it."""

    id: str
    text: str
    better: Any
    than: Any
    measure: str
    min_effect: Any = 0.0
    family: str = ""
    estimand: str = MEDIAN  # median (most seeds, exact) or mean (rests on the seeds' tails)
    note: str = ""  # e.g. judged on the tuning seeds
    panels: list[dict[str, Any]] = field(default_factory=list)  # Panel.as_dict() of each
    # unadjusted: sequential over the looks (frozen at the deciding one), combined over panels
    p_held: float = 1.0
    p_contra: float = 1.0
    p_equiv: float = 1.0
    p_decide: float = 1.0  # twice the smallest of the three: a two-sided level
    kind: str | None = None
    raw_verdict: str = INCONCLUSIVE
    raw_reason: str = ""  # why no test could decide (blocked, too few seeds): no look of these seeds helps
    # the raw reason is only that the seeds have not reached the first planned look: more judging seeds mend it
    awaiting_seeds: bool = False
    looks: list[int] = field(default_factory=list)  # the looks judged (up to the deciding one)
    decided_at: int | None = None  # the look (seeds) whose share gives the claim its p-value
    weight: float = 1.0  # that look's share of alpha
    planned_looks: list[int] = field(default_factory=list)  # the design's looks (judging.json), or the one look
    planned_shares: list[float] = field(default_factory=list)
    max_seeds: int = 0  # the design's last look: the seeds the claim may reach
    # the panel shown: the one that decides (weakest for held and equivalent, strongest against)
    panel: str = ""
    effect: float | None = None  # the estimand's estimate at the deciding look: median (or mean) of d
    mean: float | None = None  # the mean of the exact pairs and its t 95% interval: a description (tails!)
    mean_low: float | None = None
    mean_high: float | None = None
    tails: str = ""  # differences beyond 3 IQR, unbounded pairs: estimand mean flags its verdict with them
    n_seeds: int = 0
    ties: int = 0  # of the pairs at the deciding look, those beyond neither ±margin: they count against the claim
    power_with_ties: float | None = None  # the plan's power at `agree` among the other pairs, at the tie rate seen
    sd: float | None = None
    effect_size: float | None = None
    p_improve: float | None = None
    unadjusted_boot95_low: float | None = None  # unadjusted 95% bootstrap: shown only, labelled so
    unadjusted_boot95_high: float | None = None
    margin: float = 0.0
    method: str = ""
    sign: str = ""  # what the sign test saw at the deciding look
    better_mean: float | None = None
    than_mean: float | None = None
    trivial: float | None = None  # the trivial predictor's value on the judged metric, where known
    lines: dict[str, Any] = field(default_factory=dict)
    # the family (family.adjust)
    adjust: str = ""
    adjusted_in: str = ""  # the family counted: the declared one, or the page's undeclared claims
    family_size: int = 0
    p_adjusted: float = 1.0
    verdict: str = INCONCLUSIVE
    level: float = ALPHA  # the two-sided level of the interval shown (alpha * share / factor)
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str = ""
    mde: float | None = None  # median: the P(d > margin) held with 80% power by the design; mean: in sd of d

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClaimVerdict:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def judge_claim(
    claim: Claim,
    panels: list[Panel],
    design: Looks | None = None,
    note: str = "",
    family_size: int = 1,
    trivial: float | None = None,
) -> ClaimVerdict:
    """A claim's unadjusted verdict over its panels and looks. family_size: the declared family's, to freeze
    a claim at the first look where it would pass the family's first step (Bonferroni's level)."""
    v = ClaimVerdict(
        claim.id,
        claim.text,
        claim.better,
        claim.than,
        claim.describe(),
        claim.min_effect,
        claim.family,
        claim.estimand,
        note,
        [p.as_dict() for p in panels],
        trivial=trivial,
    )
    if not panels:
        v.raw_reason = "no panel of the claim's sweep matches its `where`"
        return v
    shared = sorted(set.intersection(*({lk.n for lk in p.looks} for p in panels)))
    if not shared:
        waiting = [p for p in panels if not p.looks]
        reasons = [_where(p, panels) + p.reason for p in waiting]
        v.raw_reason = "; ".join(reasons) or "no look shared by every panel"
        v.awaiting_seeds = bool(waiting) and all(p.awaiting for p in waiting)
        if v.awaiting_seeds and design is not None:  # its planned MDE is known before the seeds: shown
            v.planned_looks = [int(n) for n in design.looks]
            v.planned_shares = [float(design.share(n)) for n in design.looks]
            v.max_seeds = v.planned_looks[-1]
        _headline(v, panels, None, None)
        return v
    shares = _shares(design, shared)
    planned = design is not None and all(n in design.looks for n in shared)
    v.planned_looks = [int(n) for n in design.looks] if planned else list(shared)
    v.planned_shares = [float(design.share(n)) for n in design.looks] if planned else [float(w) for w in shares]
    v.max_seeds = v.planned_looks[-1]
    per_look = [
        stats.combine_panels(*(np.array([getattr(_at(p, n), k) for p in panels]) for k in P_KEYS)) for n in shared
    ]
    for j in range(len(shared)):  # frozen at the first look that would pass the family's first step
        ps = [float(stats.sequential([pl[i] for pl in per_look[: j + 1]], shares[: j + 1])) for i in range(3)]
        p_decide, kind = stats.decide(*ps)
        if passes(p_decide * family_size):
            break
    v.p_held, v.p_contra, v.p_equiv = ps
    v.p_decide, v.kind, v.looks = float(p_decide), KINDS[int(kind)], shared[: j + 1]
    with np.errstate(divide="ignore"):  # a look of share 0 decides nothing
        spent = [per_look[i][int(kind)] / shares[i] for i in range(j + 1)]
    deciding = int(np.argmin(spent))
    v.decided_at, v.weight = shared[deciding], float(shares[deciding])
    v.raw_verdict = v.kind if passes(v.p_decide) else INCONCLUSIVE
    _headline(v, panels, v.kind, v.decided_at)
    return v


def passes(p_two_sided: float) -> bool:
    """A two-sided p-value at most alpha (binomial tails hit their level exactly: equal passes)."""
    return p_two_sided <= ALPHA * (1 + 1e-9)


def _where(p: Panel, panels: list[Panel]) -> str:
    return f"{p.panel}: " if len(panels) > 1 else ""


def _at(p: Panel, n: int):
    return next(lk for lk in p.looks if lk.n == n)


def _shares(design: Looks | None, shared: list[int]) -> np.ndarray:
    """The alpha share of each shared look: from the design when the looks are its, else one look."""
    if design and all(n in design.looks for n in shared):
        return np.array([design.share(n) for n in shared])
    return stats.spending(shared) if len(shared) > 1 else np.ones(1)


def _headline(v: ClaimVerdict, panels: list[Panel], kind: str | None, n: int | None) -> None:
    """The panel a table shows: the one that decides, at the deciding look."""
    judged = [p for p in panels if p.looks] or panels
    key = {CONTRADICTED: "p_contra", EQUIVALENT: "p_equiv"}.get(kind, "p_held")
    pick = min if kind == CONTRADICTED else max
    h = pick(judged, key=lambda p: getattr(_at(p, n) if n else p.looks[-1], key) if p.looks else 1.0)
    look = (_at(h, n) if n else h.looks[-1]) if h.looks else None
    # n_seeds: the seeds judged so far (lnbench check adds a look to claims open at its last one)
    v.panel, v.n_seeds, v.sd, v.effect_size = h.panel, h.n, h.sd, h.effect_size
    v.p_improve = h.p_improve
    v.unadjusted_boot95_low, v.unadjusted_boot95_high = h.unadjusted_boot95_low, h.unadjusted_boot95_high
    v.margin, v.method, v.lines = h.margin, h.method, h.lines
    v.better_mean, v.than_mean = h.better_mean, h.than_mean
    if v.raw_reason or look is None:  # blocked, or no look: no effect, nothing that reads as one
        v.sd = v.effect_size = v.p_improve = v.unadjusted_boot95_low = v.unadjusted_boot95_high = None
        return
    v.sign, v.tails, v.mean = look.sign, look.tails, look.mean
    v.ties = look.tied if v.estimand == MEDIAN else 0
    if look.mean is not None and look.se:
        v.mean_low, v.mean_high = (float(x) for x in stats.interval(look.mean, look.se, look.df))
    v.effect = look.median if v.estimand == MEDIAN else look.mean


def interval_shown(v: ClaimVerdict, factor: float, verdict: str) -> tuple[float | None, float | None, float]:
    """(low, high, two-sided level) of the interval that decided: the headline panel's interval for the claim's
    estimand at the deciding look, at alpha * share / factor (and / panels for a contradiction). None where no
    test speaks for that side, where the seeds judged cannot reach the level, and where the interval would read
    another verdict than the one beside it: the sign tests' counts are shown instead."""
    level = ALPHA * v.weight / factor / (len(v.panels) if v.kind == CONTRADICTED else 1)
    panel = next((p for p in v.panels if p["panel"] == v.panel), None)
    look = next((lk for lk in (panel or {}).get("looks", []) if lk["n"] == v.decided_at), None)
    if v.raw_reason or look is None or not level > 0:
        return None, None, level
    if v.estimand == MEDIAN:
        if not panel.get("pairs"):
            return None, None, level
        found = stats.median_interval(*pair_bounds(panel["pairs"], v.decided_at), 1 - level)
        if found is None:
            return None, None, level
        low, high = found
    else:
        if look.get("mean") is None or (v.kind or HELD) not in look.get("via_t", []):
            return None, None, level
        low, high = (float(x) for x in stats.interval(look["mean"], look["se"], look["df"], 1 - level))
    return (low, high, level) if reads(low, high, v.margin) == verdict else (None, None, level)
