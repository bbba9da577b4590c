"""From the runs' numbers to a verdict: one panel (compare), one claim over its panels and looks
(lnbench/claims/decision.py), the family adjustment (lnbench/claims/family.py); the tests: lnbench/claims/stats.py;
docs/verdicts.md gives the reasons and the simulated error rates.

- d = value(than) - value(better) per seed (positive supports the claim), known as bounds lo <= d <= hi.
- The default estimand is the median: P(d > margin) > 1/2, `better` beats `than` by more than the margin on most
  seeds. Its tests are exact sign tests on every pair (stats.sign_tests), whatever the seeds' distribution.
  Divergence and censoring are ranks, no special case: a diverged run is the worst value of its line (d = -inf
  where `better` diverged, +inf where `than` did), a run that never reached a to_target target sits after every
  run that reached it; a pair whose two runs both diverged has no known order and counts against every side.
- `estimand: mean`: the paired t test on the pairs whose values are exact; a pair known only as a bound leaves it,
  and rules out the side it goes against (that line's mean is unbounded there). Lines without 3 common seeds:
  Welch's unpaired t test (the median estimand needs pairs: such a panel is not judged).
- Every panel describes the mean of its exact pairs with its t 95% interval, labelled as resting on the seeds'
  tails, and flags the differences beyond 3 IQR (stats.tails): for `estimand: mean` that flag is the verdict's.
- Judging seeds are judged in the looks of the design that added them (judging.json, lnbench/claims/plan.py); a
  claim decided at a look is frozen there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from lnbench.claims import stats
from lnbench.claims.spec import MEAN, MEDIAN, Claim, Value

MIN_SEEDS = 3
HELD, CONTRADICTED, EQUIVALENT, INCONCLUSIVE = "held", "contradicted", "equivalent", "inconclusive"
KINDS = (HELD, CONTRADICTED, EQUIVALENT)  # stats.HELD, stats.CONTRA, stats.EQUIV
P_KEYS = ("p_held", "p_contra", "p_equiv")


class Looks(Protocol):
    """The looks (numbers of judging seeds) and the share of alpha each spends: a Design, or a plan
    (lnbench/claims/plan.py's JudgingPlan)."""

    looks: Sequence[int]

    def share(self, n: int) -> float: ...


@dataclass(frozen=True)
class Design:
    """Looks and shares, declared before any judging seed (or one look at every seed, for a sweep without)."""

    looks: list[int]
    shares: list[float]

    @classmethod
    def one_look(cls, n: int) -> Design:
        return cls([n], [1.0])

    def share(self, n: int) -> float:
        return self.shares[self.looks.index(n)]


@dataclass
class Look:
    n: int
    p_held: float
    p_contra: float
    p_equiv: float
    median: float | None = None  # the median of d at this look (None where censoring leaves it a range)
    mean: float | None = None  # the t test's numbers on the exact pairs: the mean's interval at any level
    se: float | None = None
    df: float | None = None
    via_t: list[str] = field(default_factory=list)  # estimand mean: the sides whose p is the t test's
    ruled_out: list[str] = field(default_factory=list)  # estimand mean: sides a bound pair goes against
    sign: str = ""  # "7 of 9 pairs above +margin, 0 below −margin": the sign tests' counts
    tied: int = 0  # pairs beyond neither +margin nor −margin (ties, pairs of unknown order): against every side
    tails: str = ""  # what a mean of these pairs rests on (tails_text)


@dataclass
class Panel:
    """One panel's evidence for a claim."""

    panel: str
    estimand: str = MEDIAN
    n: int = 0
    method: str = ""
    effect: float | None = None  # the estimand's estimate: the median of d (or its mean, estimand mean)
    mean: float | None = None  # the mean of the exact pairs, and its t 95% interval: a description
    mean_low: float | None = None
    mean_high: float | None = None
    tails: str = ""  # differences beyond 3 IQR, pairs known only as bounds: what a mean rests on
    sd: float | None = None
    effect_size: float | None = None  # mean / sd of the differences
    p_improve: float | None = None  # P(better < than) over paired seeds
    unadjusted_boot95_low: float | None = None  # unadjusted 95% percentile bootstrap of the mean, shown only
    unadjusted_boot95_high: float | None = None
    margin: float = 0.0
    reason: str = ""
    awaiting: bool = False  # fewer paired judging seeds than the design's first look: more seeds mend the reason
    better_mean: float | None = None
    than_mean: float | None = None
    seeds: list = field(default_factory=list)
    pairs: list = field(default_factory=list)  # [lo, hi] of each pair's d, in seed order (infinities as text)
    looks: list[Look] = field(default_factory=list)
    lines: dict[str, Any] = field(default_factory=dict)  # per line: how it was chosen and judged (the caller's)
    values: dict[str, Any] = field(default_factory=dict)  # per line: seed -> its number (the caller's, for plots)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["looks"] = [dict(lk.__dict__) for lk in self.looks]
        return d


def encode_bound(x: float) -> float | str:
    """A bound for claims.json: strict JSON has no infinities."""
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def pair_bounds(pairs: list, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of the first n pairs of a panel's `pairs` (claims.json)."""
    rows = pairs[:n] if n is not None else pairs
    lo = np.array([float(a) for a, _ in rows], float)
    hi = np.array([float(b) for _, b in rows], float)
    return lo, hi


def _seed_order(s: Any) -> tuple:
    return (0, s, "") if isinstance(s, (int, float)) else (1, 0, str(s))


def _mean(values: dict[Any, Value]) -> float | None:
    xs = [v.x for v in values.values() if v.exact]
    return float(np.mean(xs)) if xs else None


def compare(
    panel: str,
    better: dict[Any, Value],
    than: dict[Any, Value],
    claim: Claim,
    design: Looks | None = None,
    blocked: str = "",
    margin: float | None = None,
) -> Panel:
    """better/than: seed -> the run's Value. design: the looks the judging seeds were added in (None: one look at
    every common seed). blocked: a reason this panel cannot be judged (no learning, a grid edge, a failed seed).
    margin: min_effect in the measure's units, fixed before judging (None: from these runs' `than`)."""
    if margin is None:
        margin = claim.margin(_mean(than))
    p = Panel(panel, claim.estimand, better_mean=_mean(better), than_mean=_mean(than), margin=margin)
    common = sorted(set(better) & set(than), key=_seed_order)
    if blocked:  # no effect, no interval, no test: the reason says why
        p.n, p.reason = len(common), blocked
        return p
    if not better or not than:
        p.reason = f"no run of the `{'better' if not better else 'than'}` line"
        return p
    if len(common) < MIN_SEEDS:
        p.n = len(common) if common else min(len(better), len(than))
        if min(len(better), len(than)) >= MIN_SEEDS:
            if claim.estimand == MEAN:
                return _unpaired(p, better, than)
            p.reason = (
                f"unpaired seeds ({len(common)} in common): the median estimand compares paired seeds; run both "
                "lines with the same seeds (or declare `estimand: mean` for Welch's t on the means)"
            )
            return p
        p.reason = f"n<{MIN_SEEDS}: " + (
            f"{len(common)} paired seed(s)" if common else f"{len(better)} vs {len(than)} seed(s)"
        )
        return p
    design = design or Design.one_look(len(common))
    looks = [n for n in design.looks if n <= len(common)]
    if not looks:
        p.reason, p.awaiting = f"n<{design.looks[0]}: {len(common)} paired judging seed(s)", True
        return p
    lo = np.array([than[s].low - better[s].high for s in common])
    hi = np.array([than[s].high - better[s].low for s in common])
    lo, hi = np.where(np.isnan(lo), -np.inf, lo), np.where(np.isnan(hi), np.inf, hi)  # both diverged: order unknown
    exact = np.array([than[s].exact and better[s].exact for s in common])
    res = max(v.resolution for s in common for v in (than[s], better[s]))
    p.looks = [_look(lo[:n], hi[:n], exact[:n], margin, res, claim.estimand, common[:n]) for n in looks]
    n = looks[-1]
    p.n, p.seeds = n, common[:n]
    p.pairs = [[encode_bound(a), encode_bound(b)] for a, b in zip(lo[:n], hi[:n])]
    p.p_improve = stats.p_improvement(lo[:n], hi[:n])
    _describe(p, lo[:n], hi[:n], exact[:n], res)
    return p


def median_of(lo: np.ndarray, hi: np.ndarray) -> float | None:
    """The median of pairs known as bounds, where the bounds fix it (a censored pair in the middle may not)."""
    with np.errstate(invalid="ignore"):
        a, b = float(np.median(lo)), float(np.median(hi))
    return a if a == b and not math.isnan(a) else None


def _look(
    lo: np.ndarray, hi: np.ndarray, exact: np.ndarray, margin: float, res: float, estimand: str, seeds: list
) -> Look:
    """One look's three p-values for the claim's estimand, and the numbers that describe it."""
    above, below = int((lo > margin).sum()), int((hi < -margin).sum())
    look = Look(len(lo), 1.0, 1.0, 1.0, median_of(lo, hi), sign=f"{above} of {len(lo)} pairs above +margin, ")
    look.sign += f"{below} below −margin"
    look.tied = len(lo) - above - below
    look.tails = tails_text(lo[exact], [s for s, e in zip(seeds, exact) if e], int((~exact).sum()))
    t = stats.paired_t(lo[exact], margin, res) if exact.sum() >= 2 else None
    if t is not None and t[4] > 0:  # every difference equal and no resolution to bound their spread: no t numbers
        look.mean, look.se, look.df = float(t[3]), float(t[4]), float(t[5])
    if estimand == MEDIAN:
        look.p_held, look.p_contra, look.p_equiv = (float(x) for x in stats.sign_tests(lo, hi, margin))
        return look
    if look.se is None:  # no test of a mean: fewer than two exact pairs, or no spread
        return look
    ph, pc, pe = t[:3]
    odd_lo, odd_hi = lo[~exact], hi[~exact]
    # a pair known only as a bound rules out the side it goes against: that line's mean is unbounded there
    for side, p_t, fits in ((HELD, ph, (odd_lo > margin).all()), (CONTRADICTED, pc, (odd_hi < -margin).all())):
        if fits:
            setattr(look, "p_held" if side == HELD else "p_contra", float(p_t))
            look.via_t.append(side)
        else:
            look.ruled_out.append(side)
    if exact.all():
        look.p_equiv = float(pe)
        look.via_t.append(EQUIVALENT)
    return look


def tails_text(d: np.ndarray, seeds: list, odd: int) -> str:
    """'seed 1004 (-0.93) beyond 3 IQR; 1 pair diverged or never reached the target': what a mean rests on."""
    far = stats.tails(d)
    parts = [
        ", ".join(f"seed {seeds[i]} ({d[i]:+.3g})" for i in far) + f" beyond {stats.TAIL_IQR:g} IQR"
        if len(far)
        else "",
        f"{odd} pair(s) diverged or never reached the target (unbounded)" if odd else "",
    ]
    return "; ".join(x for x in parts if x)


def _describe(p: Panel, lo: np.ndarray, hi: np.ndarray, exact: np.ndarray, res: float) -> None:
    odd = int((~exact).sum())
    what = f"; {odd} of {len(lo)} pairs diverged or never reached the target (ranked)" if odd else ""
    d = lo[exact]
    p.tails = tails_text(d, [s for s, e in zip(p.seeds, exact) if e], odd)
    if p.estimand == MEDIAN:
        p.method = f"exact sign test on {len(lo)} pairs (ties count against){what}"
        p.effect = median_of(lo, hi)
    if len(d) < 2:
        if p.estimand == MEAN:
            p.method = f"no test of a mean: {len(d)} exact pair(s){what}"
        return
    _, _, _, mean, se, df = stats.paired_t(d, p.margin, res)
    p.mean, p.sd = float(mean), float(se * math.sqrt(len(d)))
    if se > 0:
        p.mean_low, p.mean_high = (float(x) for x in stats.interval(mean, se, df))
    p.effect_size = p.mean / p.sd if p.sd > 0 else None
    p.unadjusted_boot95_low, p.unadjusted_boot95_high = stats.bootstrap_interval(d)
    if p.estimand == MEAN:
        p.method = f"paired t on {len(d)} exact pairs{what}"
        p.effect = p.mean


def _unpaired(p: Panel, better: dict, than: dict) -> Panel:
    if not all(v.exact for v in (*better.values(), *than.values())):
        p.reason = "unpaired seeds with a run that diverged or never reached the target: no test applies"
        return p
    tv, bv = [v.x for v in than.values()], [v.x for v in better.values()]
    ph, pc, pe, mean, se, df = stats.welch_t(tv, bv, p.margin)
    p.n, p.effect, p.mean = min(len(tv), len(bv)), float(mean), float(mean)
    p.method = "Welch t (unpaired: fewer than 3 common seeds)"
    p.looks = [Look(p.n, float(ph), float(pc), float(pe), None, float(mean), float(se), float(df), list(KINDS))]
    return p


def reads(low: float, high: float, margin: float) -> str:
    """The verdict an interval reads: above +margin held, below -margin contradicted, inside equivalent."""
    if low > margin:
        return HELD
    if high < -margin:
        return CONTRADICTED
    return EQUIVALENT if margin > 0 and -margin < low and high < margin else INCONCLUSIVE
