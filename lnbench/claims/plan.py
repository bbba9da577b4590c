"""The judging seeds a claim gets, planned before any of them runs: how many at most, the looks at which the
claim is judged, and the share of alpha each look spends (issue 39; docs/verdicts.md, "The plan").

The default estimand is P(d > margin) > 1/2 (`better` beats `than` by more than the margin on most seeds), tested
by the exact sign test: with n pairs of which W lie beyond the margin, p = P(Binomial(n, 1/2) >= W), whatever the
seeds' distribution. So the power of a design is exact too: it depends only on p* = P(d > margin), the number of
seeds at each look and the level each look is tested at (alpha * share / family size, Bonferroni over the looks
and over the declared family). This module computes that power by dynamic programming over the running count of
pairs beyond the margin (no simulation), and chooses:

- max_seeds: the fewest seeds at which a claim whose seeds agree `agree` of the time (p* = agree) is held with
  probability `power` at its family's level, capped by `cap` (lnbench check's --max-seeds) and by nothing else:
  not the machine, not a budget, not the other claims of a check, so the same claim gets the same plan anywhere;
- looks: a third, two thirds and all of max_seeds, keeping only those where a decision is possible: a sign test
  at n seeds cannot reach p < share * level when 0.5**n is larger, and such a look would spend alpha for nothing;
- shares: alpha * t^SPENDING_POWER by information time t = n / max_seeds (Kim-DeMets), over the looks kept;
- mde: the P(d > margin) the design holds with probability `power`: the claim's minimum detectable effect, for
  the procedure that runs, known before any judging seed (never post hoc).

Everything here is a pure function of its arguments: lnbench check calls plan_judging and writes the record into
judging.json; lnbench report reads it back (from_record).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as st

ALPHA = 0.025  # one-sided: held (or contradicted) at 2.5%, a 95% interval
AGREE = 0.9  # the default planned effect: the seeds agree 9 times in 10
POWER = 0.8
SPENDING_POWER = 3.0  # shares alpha * t^3 (Kim-DeMets): most of alpha where most seeds are
LOOKS = 3  # candidate looks: a third, two thirds and all of max_seeds
MIN_SEEDS = 3
CAP = 40  # no plan asks for more judging seeds than this unless told
ESTIMAND = "median"
TEST = "exact sign test (binomial), two one-sided sign tests for equivalence"
TOLERANCE = 1e-9  # a p-value equal to its level passes (binomial tails are sums of powers of 1/2)


class PlanError(ValueError):
    """A plan asked for with impossible arguments: one paragraph naming the bad value and what is allowed."""


def critical(n: int, level: float) -> int:
    """The fewest of n pairs beyond the margin that the exact sign test declares at this one-sided level: the
    smallest c with P(Binomial(n, 1/2) >= c) <= level; n + 1 where none is (0.5**n > level)."""
    return _critical(int(n), float(level))


@lru_cache(maxsize=4096)
def _critical(n: int, level: float) -> int:
    if n < 1 or not level > 0:
        return n + 1
    tail = st.binom.sf(np.arange(n + 1) - 1, n, 0.5)  # tail[c] = P(B >= c)
    passing = np.nonzero(tail <= level * (1 + TOLERANCE))[0]
    return int(passing[0]) if len(passing) else n + 1


def decisive(n: int, level: float) -> bool:
    """Whether a sign test of n pairs can reach this one-sided level at all (all n pairs beyond the margin)."""
    return critical(n, level) <= n


def shares_for(looks: Sequence[int], level: float, spending_power: float = SPENDING_POWER) -> tuple[float, ...]:
    """The share of alpha each look spends: alpha * t^spending_power by t = n / looks[-1], over the looks where a
    decision is possible at their own share (0.5**n <= share * level); the others get 0 and their share goes to
    the next look kept. Where no look can decide, the last keeps the whole of alpha (it decides nothing either)."""
    looks = [int(n) for n in looks]
    active = list(looks)
    while active:
        t = np.asarray(active, float) / looks[-1]
        w = np.diff(np.concatenate([[0.0], t**spending_power]))
        w[-1] += 1.0 - w.sum()  # the last look kept spends what is left
        idle = [n for n, wi in zip(active, w) if not decisive(n, wi * level)]
        if not idle:
            share = dict(zip(active, w.tolist()))
            return tuple(float(share.get(n, 0.0)) for n in looks)
        active.remove(idle[0])  # one at a time, earliest first: its share goes to the next look kept
    return tuple(0.0 for _ in looks[:-1]) + (1.0,)


def power_of(looks: Sequence[int], shares: Sequence[float], level: float, p: float) -> float:
    """P(held) when each pair is beyond the margin with probability p, pairs independent: exact."""
    return _run(tuple(int(n) for n in looks), tuple(float(w) for w in shares), float(level), float(p))[0]


def expected_seeds(looks: Sequence[int], shares: Sequence[float], level: float, p: float) -> float:
    """The mean number of judging seeds a claim runs before it is held or reaches the last look (it stops at
    the first look that decides)."""
    return _run(tuple(int(n) for n in looks), tuple(float(w) for w in shares), float(level), float(p))[1]


@lru_cache(maxsize=65536)
def _run(looks: tuple, shares: tuple, level: float, p: float) -> tuple[float, float]:
    alive, prev, held, seeds = np.array([1.0]), 0, 0.0, 0.0  # alive[w]: P(w pairs beyond, not decided yet)
    for n, w in zip(looks, shares):
        seeds += alive.sum() * (n - prev)
        alive = np.convolve(alive, st.binom.pmf(np.arange(n - prev + 1), n - prev, p))
        prev = n
        c = critical(n, w * level)
        held += alive[c:].sum()
        alive[c:] = 0.0
    return float(min(1.0, held)), float(seeds)


def detectable(looks: Sequence[int], shares: Sequence[float], level: float, power: float = POWER) -> float | None:
    """The P(d > margin) held with this probability by the design (its minimum detectable effect); None where
    no look can decide. Power rises with p, so bisection finds it (to 1e-4)."""
    if not looks or power_of(looks, shares, level, 1.0) < power:
        return None
    lo, hi = 0.5, 1.0
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power_of(looks, shares, level, mid) >= power else (mid, hi)
    return round(hi, 4)


def candidate_looks(max_seeds: int, looks: int = LOOKS, min_seeds: int = MIN_SEEDS) -> list[int]:
    """A third, two thirds and all of max_seeds (rounded), none below min_seeds."""
    out = sorted({max(min_seeds, round(max_seeds * k / looks)) for k in range(1, looks + 1)} | {max_seeds})
    return [n for n in out if n <= max_seeds]


@dataclass(frozen=True)
class JudgingPlan:
    """A claim's judging seeds, declared before the first runs (judging.json)."""

    max_seeds: int
    looks: tuple[int, ...]
    shares: tuple[float, ...]
    family_size: int = 1
    alpha: float = ALPHA
    agree: float = AGREE
    power: float = POWER
    mde: float | None = None  # P(d > margin) held with probability `power` by this design
    power_at_agree: float | None = None
    expected_seeds: float | None = None  # at agree, stopping at the first look that holds
    capped_by: str = ""  # "cap": fewer seeds than `agree` and `power` ask for ("budget" in records before issue 46)
    needed: int = 0  # the seeds `agree` and `power` ask for, whatever the cap

    @property
    def level(self) -> float:
        """The one-sided level of the claim's test: alpha over its declared family (Bonferroni)."""
        return self.alpha / self.family_size

    @property
    def decidable(self) -> bool:
        return self.mde is not None

    def share(self, n: int) -> float:
        return self.shares[self.looks.index(n)]

    def summary(self) -> str:
        """'up to 21 seeds in looks 14, 21: detects P(d > margin) >= 0.89 with 80% power at 0.025/23'."""
        if not self.decidable:
            return (
                f"no decision possible with {self.max_seeds} judging seeds at {self.alpha:g}/{self.family_size} "
                f"(needs at least {smallest_decisive(self.level)})"
            )
        by = "--max-seeds" if self.capped_by == "cap" else f"the {self.capped_by}"  # "budget": issue 39's records
        capped = f", capped by {by} ({self.needed} asked for)" if self.capped_by else ""
        return (
            f"up to {self.max_seeds} judging seeds in looks {', '.join(map(str, self.looks))}: detects "
            f"P(d > margin) >= {self.mde:.2f} with {self.power:.0%} power at {self.alpha:g}/{self.family_size}{capped}"
        )

    def record(self) -> dict[str, Any]:
        """What judging.json declares for the claim (from_record reads it back)."""
        return {
            "estimand": ESTIMAND,
            "test": TEST,
            "max_seeds": self.max_seeds,
            "looks": list(self.looks),
            "shares": [math.floor(w * 1e6) / 1e6 for w in self.shares],  # rounded down: they never sum above 1
            "family_size": self.family_size,
            "alpha": self.alpha,
            "agree": self.agree,
            "power": self.power,
            "mde": self.mde,
            "power_at_agree": None if self.power_at_agree is None else round(self.power_at_agree, 4),
            "expected_seeds": None if self.expected_seeds is None else round(self.expected_seeds, 2),
            "capped_by": self.capped_by,
            "needed": self.needed,
        }

    @classmethod
    def from_record(cls, raw: Mapping[str, Any], family_size: int | None = None) -> JudgingPlan | None:
        """A plan from judging.json: this module's record, issue 30's (looks and shares) or an older one (looks
        only: alpha spent linearly in seeds, as it was planned). family_size: the claim's declared family, for a
        record that does not say (the power and MDE are then computed for it). None: no looks."""
        looks = raw.get("looks") if isinstance(raw, Mapping) else None
        if not (isinstance(looks, list) and looks and all(isinstance(n, (int, float)) for n in looks)):
            return None
        looks_t = tuple(int(n) for n in looks)
        shares = raw.get("shares")
        if isinstance(shares, list) and len(shares) == len(looks_t):
            shares_t = tuple(float(w) for w in shares)
        else:  # before issue 30: linear in seeds
            shares_t = tuple(np.diff(np.concatenate([[0.0], np.asarray(looks_t, float) / looks_t[-1]])).tolist())
        size = int(raw.get("family_size") or family_size or 1)
        alpha = float(raw.get("alpha") or ALPHA)
        return describe(
            cls(looks_t[-1], looks_t, shares_t, size, alpha, float(raw.get("agree") or AGREE)),
            float(raw.get("power") or POWER),
            str(raw.get("capped_by") or ""),
            int(raw.get("needed") or 0),
        )


def describe(plan: JudgingPlan, power: float = POWER, capped_by: str = "", needed: int = 0) -> JudgingPlan:
    """The plan with its power, MDE and expected seeds computed (exactly) for its looks and shares."""
    if not plan.looks:
        return replace(plan, power=power, capped_by=capped_by, needed=needed)
    args = (plan.looks, plan.shares, plan.alpha / plan.family_size)
    return replace(
        plan,
        power=power,
        mde=detectable(*args, power),
        power_at_agree=power_of(*args, plan.agree),
        expected_seeds=expected_seeds(*args, plan.agree),
        capped_by=capped_by,
        needed=needed or plan.max_seeds,
    )


def smallest_decisive(level: float) -> int:
    """The fewest seeds at which a sign test can reach this one-sided level (all of them beyond the margin)."""
    return max(1, math.ceil(-math.log2(level) - TOLERANCE))


def _check(family_size: int, alpha: float, agree: float, power: float, min_seeds: int, cap: int) -> None:
    bad = [
        (family_size >= 1, f"family_size={family_size!r} (a whole number >= 1: the claims declared in the family)"),
        (0 < alpha < 0.5, f"alpha={alpha!r} (one-sided, between 0 and 0.5, e.g. 0.025)"),
        (0.5 < agree <= 1, f"agree={agree!r} (the planned P(d > margin), above 0.5 and at most 1, e.g. 0.9)"),
        (0 < power < 1, f"power={power!r} (between 0 and 1, e.g. 0.8)"),
        (1 <= min_seeds <= cap, f"min_seeds={min_seeds!r}, cap={cap!r} (1 <= min_seeds <= cap)"),
    ]
    if wrong := [text for ok, text in bad if not ok]:
        raise PlanError(f"a judging plan cannot be made with {'; '.join(wrong)}.")


def plan_for_looks(looks: Sequence[int], family_size: int = 1, alpha: float = ALPHA) -> JudgingPlan:
    """The plan of looks chosen by hand (lnbench check --judging-seeds N --max-seeds M): shares only at the looks
    where a decision is possible at the family's level (shares_for), its power and MDE computed for them."""
    looks_t = tuple(sorted({int(n) for n in looks}))
    if not looks_t or looks_t[0] < 1:
        raise PlanError(f"looks={list(looks)!r}: give one or more numbers of judging seeds, each at least 1.")
    _check(family_size, alpha, AGREE, POWER, 1, looks_t[-1])
    shares = shares_for(looks_t, alpha / family_size)
    return describe(JudgingPlan(looks_t[-1], looks_t, shares, family_size, alpha))


def plan_judging(
    *,
    family_size: int,
    alpha: float = ALPHA,
    agree: float = AGREE,
    power: float = POWER,
    min_seeds: int = MIN_SEEDS,
    cap: int = CAP,
    looks: int = LOOKS,
) -> JudgingPlan:
    """The fewest judging seeds (at most cap) at which a claim whose seeds agree `agree` of the time is held with
    probability `power` at alpha / family_size, with its looks and shares. Where the cap leaves fewer, the plan
    takes them and says so (capped_by; its MDE is then above agree); where even all of them could decide nothing
    (0.5**n > the level at every n allowed), max_seeds is 0 and no judging seed should run."""
    _check(family_size, alpha, agree, power, min_seeds, cap)
    return _plan(int(family_size), float(alpha), float(agree), float(power), int(min_seeds), int(cap), "cap", looks)


@lru_cache(maxsize=4096)
def _plan(F: int, alpha: float, agree: float, power: float, min_seeds: int, limit: int, capped_by: str, k: int):
    level = alpha / F
    first = max(min_seeds, smallest_decisive(level))
    designs = {}
    for n in range(first, max(limit, first) + CAP + 1):  # past the limit too: how many were needed
        grid = candidate_looks(n, k, min_seeds)
        shares = shares_for(grid, level)
        kept = tuple((m, w) for m, w in zip(grid, shares) if w > 0)
        designs[n] = (tuple(m for m, _ in kept), tuple(w for _, w in kept))
        if power_of(*designs[n], level, agree) >= power:
            break
    needed = n
    if needed <= limit:
        return describe(JudgingPlan(needed, *designs[needed], F, alpha, agree), power, "", needed)
    if limit < first:  # nothing the cap allows can decide: plan no judging seeds
        return JudgingPlan(0, (), (), F, alpha, agree, power, capped_by=capped_by, needed=needed)
    best = max(range(first, limit + 1), key=lambda m: (power_of(*designs[m], level, agree), -m))
    return describe(JudgingPlan(best, *designs[best], F, alpha, agree), power, capped_by, needed)


def sweep_record(plans: Mapping[str, JudgingPlan], first_seed: int) -> dict[str, Any]:
    """judging.json for a sweep whose claims have their own plans: each claim's record, and the union of their
    looks (the rounds of judging seeds the sweep runs) with the strictest plan's shares for a reader that knows
    no per-claim plans."""
    strictest = max(plans.values(), key=lambda p: (p.family_size, p.max_seeds))
    return {
        **strictest.record(),
        "first_seed": first_seed,
        "rounds": sorted({n for p in plans.values() for n in p.looks}),
        "claims": {cid: p.record() for cid, p in plans.items()},
    }


def read_record(raw: Any) -> tuple[JudgingPlan | None, dict[str, dict[str, Any]]]:
    """judging.json read back: the sweep's plan (None if it declares no looks) and each claim's own record (to
    be read with JudgingPlan.from_record at the claim's family size)."""
    if not isinstance(raw, Mapping):
        return None, {}
    per_claim = raw.get("claims")
    claims = (
        {str(k): v for k, v in per_claim.items() if isinstance(v, Mapping)} if isinstance(per_claim, Mapping) else {}
    )
    return JudgingPlan.from_record(raw), claims
