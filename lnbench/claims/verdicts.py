"""From the runs' numbers to a verdict: one panel (compare), one claim over its panels and looks
(judge_claim). The family adjustment: lnbench/claims/family.py; the tests: lnbench/claims/stats.py;
docs/verdicts.md gives the reasons and the simulated error rates.

- The estimand is the mean paired difference d = value(than) - value(better) (positive supports the claim).
  A panel's test at a look: the paired Student t test on the pairs whose values are exact, gated by the exact
  sign test on every pair whose order is known, at the look's own share of alpha (stats.sign_gate): a mean
  that only some seeds carry decides nothing. A run that diverged (worse than any value) or never reached a
  to_target target (censored) makes its pair's sign known but not its size: it leaves the t test, enters the
  sign test, and rules out the side it goes against (its mean is unknown in that direction). Fewer than two
  exact pairs: the sign test alone. Lines without 3 common seeds: Welch's unpaired t test.
- Judging seeds are judged in the looks of the design that added them (judging.json: the looks and the
  share of alpha each spends); a claim decided at a look is frozen there: later seeds do not change it.
- A claim over several panels: held only where held in every panel (intersection-union), contradicted where
  contradicted in any (Bonferroni over panels), practically equivalent only where so in every panel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lnbench.claims import stats
from lnbench.claims.spec import Claim, Value

MIN_SEEDS = 3
HELD, CONTRADICTED, EQUIVALENT, INCONCLUSIVE = "held", "contradicted", "equivalent", "inconclusive"
KINDS = (HELD, CONTRADICTED, EQUIVALENT)  # stats.HELD, stats.CONTRA, stats.EQUIV
P_KEYS = ("p_held", "p_contra", "p_equiv")


@dataclass(frozen=True)
class Design:
    """The looks (numbers of judging seeds) and the share of alpha each spends, declared before any judging seed."""

    looks: list[int]
    shares: list[float]

    @classmethod
    def declared(cls, looks: list[int]) -> Design:
        """The shares lnbench check declares: alpha * t^SPENDING_POWER."""
        return cls(list(looks), [float(w) for w in stats.spending(looks, stats.SPENDING_POWER)])

    @classmethod
    def linear(cls, looks: list[int]) -> Design:
        """A judging.json without shares (before issue 30): spent linearly in seeds."""
        return cls(list(looks), [float(w) for w in stats.spending(looks)])

    def share(self, n: int) -> float:
        return self.shares[self.looks.index(n)]


@dataclass
class Look:
    n: int
    p_held: float
    p_contra: float
    p_equiv: float
    mean: float | None = None  # the t test's numbers (exact pairs), to draw its interval at any level
    se: float | None = None
    df: float | None = None
    via_t: list[str] = field(default_factory=list)  # the sides whose p is the (gated) t test's: it has an interval
    gated: list[str] = field(default_factory=list)  # the sides the sign test vetoed at this look
    sign: str = ""  # "7 of 9 pairs above the margin": what the sign test saw


@dataclass
class Panel:
    """One panel's evidence for a claim."""

    panel: str
    n: int = 0
    method: str = ""
    effect: float | None = None
    sd: float | None = None
    effect_size: float | None = None  # mean / sd of the differences
    p_improve: float | None = None  # P(better < than) over paired seeds
    unadjusted_boot95_low: float | None = None  # unadjusted 95% percentile bootstrap, shown only
    unadjusted_boot95_high: float | None = None
    margin: float = 0.0
    reason: str = ""
    better_mean: float | None = None
    than_mean: float | None = None
    seeds: list = field(default_factory=list)
    looks: list[Look] = field(default_factory=list)
    lines: dict[str, Any] = field(default_factory=dict)  # per line: how it was chosen and judged (the caller's)
    values: dict[str, Any] = field(default_factory=dict)  # per line: seed -> its number (the caller's, for plots)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["looks"] = [dict(lk.__dict__) for lk in self.looks]
        return d


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
    design: Design | None = None,
    blocked: str = "",
    margin: float | None = None,
) -> Panel:
    """better/than: seed -> the run's Value. design: the looks the judging seeds were added in (None: one look at
    every common seed). blocked: a reason this panel cannot be judged (no learning, a grid edge, a failed seed).
    margin: min_effect in the measure's units, fixed before judging (None: from these runs' `than`)."""
    if margin is None:
        margin = claim.margin(_mean(than))
    p = Panel(panel, better_mean=_mean(better), than_mean=_mean(than), margin=margin)
    common = sorted(set(better) & set(than), key=_seed_order)
    if blocked:  # no effect, no interval, no test: the reason says why
        p.n, p.reason = len(common), blocked
        return p
    if not better or not than:
        p.reason = f"no run of the `{'better' if not better else 'than'}` line"
        return p
    if len(common) < MIN_SEEDS:
        if min(len(better), len(than)) >= MIN_SEEDS:
            return _unpaired(p, better, than)
        p.n = len(common) if common else min(len(better), len(than))
        p.reason = f"n<{MIN_SEEDS}: " + (
            f"{len(common)} paired seed(s)" if common else f"{len(better)} vs {len(than)} seed(s)"
        )
        return p
    design = design or Design.linear([len(common)])
    looks = [n for n in design.looks if n <= len(common)]
    if not looks:
        p.reason = f"n<{design.looks[0]}: {len(common)} paired judging seed(s)"
        return p
    lo = np.array([than[s].low - better[s].high for s in common])
    hi = np.array([than[s].high - better[s].low for s in common])
    lo, hi = np.where(np.isnan(lo), -np.inf, lo), np.where(np.isnan(hi), np.inf, hi)  # both diverged: order unknown
    exact = np.array([than[s].exact and better[s].exact for s in common])
    res = max(v.resolution for s in common for v in (than[s], better[s]))
    p.looks = [_look(lo[:n], hi[:n], exact[:n], margin, res, design.share(n)) for n in looks]
    n = looks[-1]
    p.n, p.seeds = n, common[:n]
    p.p_improve = stats.p_improvement(lo[:n], hi[:n])
    _describe(p, lo[:n], exact[:n], res)
    return p


def _look(lo: np.ndarray, hi: np.ndarray, exact: np.ndarray, margin: float, res: float, share: float) -> Look:
    """One look's three p-values: the gated t test where it applies to a side, else the sign test alone."""
    sign = stats.sign_test(lo, hi, margin)
    seen = f"{int((lo > margin).sum())} of {len(lo)} pairs above +margin, {int((hi < -margin).sum())} below −margin"
    look = Look(len(lo), *(float(x) for x in sign), sign=seen)
    if exact.sum() < 2:
        return look
    ph, pc, pe, mean, se, df = stats.paired_t(lo[exact], margin, res)
    if not se > 0:  # every difference equal, no resolution to bound their spread: only the signs speak
        return look
    look.mean, look.se, look.df = float(mean), float(se), float(df)
    odd_lo, odd_hi = lo[~exact], hi[~exact]
    # a pair known only as a bound enters a side's t test only where its bound lies on that side
    sides = ((HELD, ph, sign[0], (odd_lo > margin).all()), (CONTRADICTED, pc, sign[1], (odd_hi < -margin).all()))
    for side, p_t, p_sign, fits in sides:
        if fits:
            gated = float(stats.sign_gate(p_t, p_sign, share))
            look.via_t.append(side)
            look.gated += [side] if gated == 1.0 and p_t <= stats.ALPHA / 2 * share else []  # a veto that mattered
            setattr(look, "p_held" if side == HELD else "p_contra", gated)
    if exact.all():
        look.p_equiv = float(pe)
        look.via_t.append(EQUIVALENT)
    return look


def _describe(p: Panel, lo: np.ndarray, exact: np.ndarray, res: float) -> None:
    odd = int((~exact).sum())
    what = f"; {odd} of {len(lo)} pairs diverged or never reached the target" if odd else ""
    if exact.sum() < 2:
        p.method = f"sign test ({odd} of {len(lo)} pairs diverged or never reached the target)"
        return
    d = lo[exact]
    _, _, _, mean, se, _ = stats.paired_t(d, p.margin, res)
    p.method = f"paired t on {len(d)} exact pairs, gated by the sign test on every pair{what}"
    p.effect, p.sd = float(mean), float(se * math.sqrt(len(d)))
    p.effect_size = p.effect / p.sd if p.sd > 0 else None
    p.unadjusted_boot95_low, p.unadjusted_boot95_high = stats.bootstrap_interval(d)


def _unpaired(p: Panel, better: dict, than: dict) -> Panel:
    if not all(v.exact for v in (*better.values(), *than.values())):
        p.reason = "unpaired seeds with a run that diverged or never reached the target: no test applies"
        return p
    tv, bv = [v.x for v in than.values()], [v.x for v in better.values()]
    ph, pc, pe, mean, se, df = stats.welch_t(tv, bv, p.margin)
    p.n, p.effect = min(len(tv), len(bv)), float(mean)
    p.method = "Welch t (unpaired: fewer than 3 common seeds; no sign gate)"
    p.looks = [Look(p.n, float(ph), float(pc), float(pe), float(mean), float(se), float(df), list(KINDS))]
    return p
