"""One claim's verdict, typed: its p-values over its panels and looks (judge_claim), then, once the family is
known (lnbench/claims/family.py), its adjusted verdict and the interval at the level that decided it.

The interval shown is the one the decision used: the t interval of the deciding panel at the deciding look, at
level 1 - alpha * share / factor, where share is that look's share of alpha and factor what the family
adjustment multiplied the claim's p-value by (Bonferroni over the panels too, for a contradiction). So a
verdict and its interval never disagree: held <=> the interval lies above +margin, contradicted <=> below
-margin, equivalent <=> inside. Where the sign test vetoed the t test, or decided alone, no interval is shown,
only what the sign test saw.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from lnbench.claims import stats
from lnbench.claims.spec import Claim
from lnbench.claims.verdicts import CONTRADICTED, EQUIVALENT, HELD, INCONCLUSIVE, KINDS, P_KEYS, Design, Panel

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
    note: str = ""  # e.g. judged on the tuning seeds
    panels: list[dict[str, Any]] = field(default_factory=list)  # Panel.as_dict() of each
    # unadjusted: sequential over the looks (frozen at the deciding one), combined over panels
    p_held: float = 1.0
    p_contra: float = 1.0
    p_equiv: float = 1.0
    p_decide: float = 1.0  # twice the smallest of the three: a two-sided level
    kind: str | None = None
    raw_verdict: str = INCONCLUSIVE
    raw_reason: str = ""  # why no test could decide (blocked, too few seeds): no look of more seeds helps
    looks: list[int] = field(default_factory=list)  # the looks judged (up to the deciding one)
    decided_at: int | None = None  # the look (seeds) whose share gives the claim its p-value
    weight: float = 1.0  # that look's share of alpha
    # the panel shown: the one that decides (weakest for held and equivalent, strongest against)
    panel: str = ""
    effect: float | None = None  # mean difference at the deciding look (exact pairs)
    n_seeds: int = 0
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
    family_size: int = 0
    p_adjusted: float = 1.0
    verdict: str = INCONCLUSIVE
    level: float = ALPHA  # the two-sided level of the interval shown (alpha * share / factor)
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str = ""
    mde: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClaimVerdict:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def judge_claim(
    claim: Claim,
    panels: list[Panel],
    design: Design | None = None,
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
        note,
        [p.as_dict() for p in panels],
        trivial=trivial,
    )
    if not panels:
        v.raw_reason = "no panel of the claim's sweep matches its `where`"
        return v
    shared = sorted(set.intersection(*({lk.n for lk in p.looks} for p in panels)))
    if not shared:
        reasons = [_where(p, panels) + p.reason for p in panels if not p.looks]
        v.raw_reason = "; ".join(reasons) or "no look shared by every panel"
        _headline(v, panels, None, None)
        return v
    shares = _shares(design, shared)
    per_look = [
        stats.combine_panels(*(np.array([getattr(_at(p, n), k) for p in panels]) for k in P_KEYS)) for n in shared
    ]
    for j in range(len(shared)):  # frozen at the first look that would pass the family's first step
        ps = [float(stats.sequential([pl[i] for pl in per_look[: j + 1]], shares[: j + 1])) for i in range(3)]
        p_decide, kind = stats.decide(*ps)
        if p_decide * family_size <= ALPHA:
            break
    v.p_held, v.p_contra, v.p_equiv = ps
    v.p_decide, v.kind, v.looks = float(p_decide), KINDS[int(kind)], shared[: j + 1]
    spent = [per_look[i][int(kind)] / shares[i] for i in range(j + 1)]
    deciding = int(np.argmin(spent))
    v.decided_at, v.weight = shared[deciding], float(shares[deciding])
    v.raw_verdict = v.kind if v.p_decide <= ALPHA else INCONCLUSIVE
    _headline(v, panels, v.kind, v.decided_at)
    return v


def _where(p: Panel, panels: list[Panel]) -> str:
    return f"{p.panel}: " if len(panels) > 1 else ""


def _at(p: Panel, n: int):
    return next(lk for lk in p.looks if lk.n == n)


def _shares(design: Design | None, shared: list[int]) -> np.ndarray:
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
    v.effect = look.mean if look and look.mean is not None else (h.effect if look else None)
    v.sign = look.sign if look else ""


def interval_shown(v: ClaimVerdict, factor: float, verdict: str) -> tuple[float | None, float | None, float]:
    """(low, high, two-sided level) of the interval that decided: the headline panel's t interval at the
    deciding look, at alpha * share / factor (and / panels for a contradiction). None where no t test
    speaks for that side (the sign test decided alone), and where the interval would disagree with the
    verdict (the sign test vetoed a t interval beyond the margin): the sign test's counts are shown instead."""
    level = ALPHA * v.weight / factor / (len(v.panels) if v.kind == CONTRADICTED else 1)
    panel = next((p for p in v.panels if p["panel"] == v.panel), None)
    look = next((lk for lk in (panel or {}).get("looks", []) if lk["n"] == v.decided_at), None)
    if v.raw_reason or look is None or look.get("mean") is None or (v.kind or HELD) not in look.get("via_t", []):
        return None, None, level
    low, high = (float(x) for x in stats.interval(look["mean"], look["se"], look["df"], 1 - level))
    return (low, high, level) if reads(low, high, v.margin) == verdict else (None, None, level)


def reads(low: float, high: float, margin: float) -> str:
    """The verdict an interval reads: above +margin held, below -margin contradicted, inside equivalent."""
    if low > margin:
        return HELD
    if high < -margin:
        return CONTRADICTED
    return EQUIVALENT if margin > 0 and -margin < low and high < margin else INCONCLUSIVE
