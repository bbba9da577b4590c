"""Issue 39: the declared estimand (the median: `better` beats `than` by more than the margin on most seeds), its
exact sign tests, the judging seeds planned for them (lnbench/claims/plan.py), and their error rates and power
simulated under every shape of calibration/nulls.py (a fast version by default, 50,000 trials with `-m slow`).
A rate passes below its nominal level plus three binomial standard errors; the mean option is shown to fail the
same bound where its label says it may."""

import math

import numpy as np
import pytest
from scipy import stats as sst

from calibration import simulate
from calibration.nulls import SHAPES
from lnbench.check.rounds import design_record
from lnbench.claims import plan, stats

FAST, SLOW = 4000, 50_000


def bound(nominal: float, trials: int) -> float:
    return nominal + 3 * math.sqrt(nominal * (1 - nominal) / trials)


# ---- the plan ----------------------------------------------------------------------------------------
def test_the_exact_power_of_one_look_is_the_binomial_tail_beyond_the_sign_tests_critical_count():
    for n, level in ((9, 0.025), (21, 0.025 / 23), (15, 0.025 / 4)):
        c = plan.critical(n, level)
        assert sst.binom.sf(c - 1, n, 0.5) <= level < sst.binom.sf(c - 2, n, 0.5)  # the smallest that passes
        assert plan.power_of([n], [1.0], level, 0.9) == pytest.approx(sst.binom.sf(c - 1, n, 0.9))
    assert plan.critical(9, 0.025 / 23) == 10 and not plan.decisive(9, 0.025 / 23)  # 1/512 > 0.0011
    assert plan.smallest_decisive(0.025 / 23) == 10 and plan.smallest_decisive(0.025) == 6


@pytest.mark.parametrize("family_size", [1, 4, 9, 23])
def test_the_plan_is_the_fewest_seeds_with_the_power_asked_and_spends_alpha_only_where_a_look_can_decide(family_size):
    p = plan.plan_judging(family_size=family_size)
    level = 0.025 / family_size
    assert p.power_at_agree >= 0.8 and p.mde <= 0.9 and not p.capped_by
    assert sum(p.shares) == pytest.approx(1.0) and all(plan.decisive(n, w * level) for n, w in zip(p.looks, p.shares))
    for fewer in range(plan.smallest_decisive(level), p.max_seeds):  # no smaller plan of the same rule has the power
        grid = plan.candidate_looks(fewer)
        assert plan.power_of(grid, plan.shares_for(grid, level), level, 0.9) < 0.8
    assert plan.power_of(p.looks, p.shares, level, p.mde) == pytest.approx(0.8, abs=2e-3)  # the MDE, exactly


def test_the_plan_is_capped_only_by_max_seeds_and_says_when_nothing_it_allows_can_decide():
    full = plan.plan_judging(family_size=23)
    assert (full.max_seeds, full.looks) == (21, (14, 21))
    capped = plan.plan_judging(family_size=23, cap=15)
    assert capped.max_seeds <= 15 and capped.capped_by == "cap" and capped.needed == 21 and capped.mde > full.mde
    none = plan.plan_judging(family_size=23, cap=9)  # 9 seeds: 1/512 > 0.025/23
    assert none.max_seeds == 0 and not none.looks and not none.decidable and "needs at least 10" in none.summary()
    assert "capped by --max-seeds (21 asked for)" in capped.summary()


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"family_size": 0}, "family_size=0"),
        ({"family_size": 4, "agree": 0.5}, "agree=0.5"),
        ({"family_size": 4, "power": 1.0}, "power=1.0"),
        ({"family_size": 4, "min_seeds": 50}, "min_seeds=50"),
    ],
)
def test_a_plan_with_impossible_arguments_is_a_clear_error(kw, match):
    with pytest.raises(plan.PlanError, match=match):
        plan.plan_judging(**kw)


def test_judging_json_declares_the_plan_and_older_files_read_as_they_were_planned():
    rec = design_record([3, 6, 9])  # lnbench check's looks: 3 and 6 cannot decide even alone (1/8, 1/64 > 2.5% x share)
    assert rec["shares"] == [0.0, 0.0, 1.0] and rec["first_seed"] == 1000 and rec["estimand"] == "median"
    p = plan.plan_judging(family_size=9)
    back = plan.JudgingPlan.from_record(p.record())
    assert (back.looks, back.max_seeds, back.family_size, back.mde) == (p.looks, p.max_seeds, 9, p.mde)
    issue30 = plan.JudgingPlan.from_record({"looks": [3, 6, 9], "shares": [0.037037, 0.259259, 0.703704]}, 23)
    assert issue30.shares == (0.037037, 0.259259, 0.703704) and issue30.family_size == 23 and not issue30.decidable
    older = plan.JudgingPlan.from_record({"looks": [3, 6, 9]})
    assert older.shares == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    sweep, claims = plan.read_record(plan.sweep_record({"a": p, "b": plan.plan_judging(family_size=23)}, 1000))
    assert sweep.family_size == 23 and plan.JudgingPlan.from_record(claims["a"]).looks == p.looks


# ---- the error rates and the power, simulated -----------------------------------------------------------
def _level(trials):
    alone = plan.plan_judging(family_size=1)
    for name, shape in SHAPES.items():
        rates = simulate.level(shape, trials, alone)
        assert max(rates) <= bound(0.025, trials), (name, rates)


def _family(trials):
    for name, size in simulate.FAMILIES.items():
        fwe = simulate.family_error(trials, size, plan.plan_judging(family_size=size))
        assert fwe <= bound(0.05, trials), (name, fwe)


def _power(trials):
    for size in (1, *simulate.FAMILIES.values()):
        p = plan.plan_judging(family_size=size)
        for name in ("normal", "catastrophe 10%", "diverged"):
            held = simulate.power(SHAPES[name], trials, p, p.mde)
            assert abs(held - 0.8) <= 0.03, (size, name, held)


def _mean_needs_its_label(trials):
    alone = plan.plan_judging(family_size=1)
    normal = simulate.equal_means(SHAPES["normal"], trials, alone)
    assert normal["mean"] <= bound(0.025, trials)  # Gaussian seeds: the t test keeps its level
    for name in ("catastrophe 10%", "catastrophe 5%"):  # equal means, rare catastrophes: the mean fails...
        r = simulate.equal_means(SHAPES[name], trials, alone)
        assert r["mean"] > 10 * bound(0.025, trials) and r["mean, no tails flag"] > 0.25, (name, r)
        assert r["P(d > margin)"] > 0.85  # ...and the median's "held" is a true verdict there


@pytest.mark.parametrize("check", [_level, _family, _power, _mean_needs_its_label])
def test_error_rates_and_power(check):
    check(FAST if check is not _family else FAST // 4)


@pytest.mark.slow
@pytest.mark.parametrize("check", [_level, _family, _power, _mean_needs_its_label])
def test_error_rates_and_power_many_trials(check):
    check(SLOW if check is not _family else SLOW // 5)


def test_a_tie_at_the_margin_and_an_unknown_pair_count_against_every_side():
    lo = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, -np.inf])
    hi = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, np.inf])
    ph, pc, pe = stats.sign_tests(lo, hi, margin=0.0)
    assert ph == pytest.approx(sst.binom.sf(4, 8, 0.5)) and pc == 1.0  # 5 of 8, not 5 of 5
