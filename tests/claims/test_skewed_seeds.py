"""Issue 30's statistics: the sign gate, Bonferroni over a declared family, declared look shares, and the
error rates of lnbench/claims/simulate.py's skewed-seed, whole-check and margin scenarios (a fast version by
default, 50,000 trials with `-m slow`). A rate passes below its nominal level plus three binomial standard
errors; the procedure before issue 30 is shown to fail the same bound where it did."""

import math

import numpy as np
import pytest
from scipy import stats as sst

from lnbench.claims import simulate, stats
from lnbench.claims.verdicts import Design

FAST, SLOW = 4000, 50_000


def bound(nominal: float, trials: int) -> float:
    return nominal + 3 * math.sqrt(nominal * (1 - nominal) / trials)


def test_the_sign_gate_keeps_the_t_p_value_only_where_the_sign_test_passes_at_the_looks_share():
    p_t, p_sign = np.array([0.001, 0.001, 0.3]), np.array([1 / 512, 10 / 512, 1 / 512])
    assert list(stats.sign_gate(p_t, p_sign, 0.7)) == [0.001, 1.0, 0.3]  # 0.025 * 0.7 = 0.0175: 9 of 9, not 8 of 9
    assert stats.sign_gate(0.001, 10 / 512, 0.8) == 0.001  # 0.02: 8 of 9 passes
    # the exact sign test is scipy's binomial test
    d = np.array([0.3, 0.1, -0.2, 0.5, 0.4, 0.2, 0.6, 0.1, 0.3])
    assert stats.sign_test(d, d)[0] == pytest.approx(sst.binomtest(8, 9, 0.5, alternative="greater").pvalue)


def test_bonferroni_and_declared_shares():
    assert list(stats.bonferroni(np.array([0.01, 0.2]))) == [0.02, 0.4]
    assert stats.bonferroni(np.array([0.3] * 4)).max() == 1.0
    shares = Design.declared([3, 6, 9]).shares
    assert shares == pytest.approx([1 / 27, 8 / 27 - 1 / 27, 1 - 8 / 27]) and sum(shares) == pytest.approx(1.0)
    assert Design.linear([3, 6, 9]).shares == pytest.approx([1 / 3] * 3)


def _skewed(trials):
    for ratio in (5, 10):
        before, _ = simulate.skewed(trials, ratio, "before")
        held, contra = simulate.skewed(trials, ratio, "after")
        assert before > bound(0.025, trials), (ratio, before)  # the t test alone: 11-12%
        assert held <= bound(0.025, trials) and contra <= bound(0.025, trials), (ratio, held, contra)


def _whole_check(trials):
    after = simulate.whole_check(trials, "after", ratio=1.0)
    for family in simulate.FAMILIES:  # each declared family keeps its family-wise error, half its lines skewed
        assert after[family] <= bound(0.05, trials), (family, after)


def _margin(trials):
    for pairing in (0.005, 0.05):
        assert simulate.equivalence(trials, pairing, "tuning") <= bound(0.025, trials)


@pytest.mark.parametrize("check", [_skewed, _whole_check, _margin])
def test_error_rates_under_the_null(check):
    check(FAST if check is not _whole_check else FAST // 4)


@pytest.mark.slow
@pytest.mark.parametrize("check", [_skewed, _whole_check, _margin])
def test_error_rates_under_the_null_many_trials(check):
    check(SLOW if check is not _whole_check else SLOW // 10)


def test_power_of_a_primary_claim_is_not_worse_than_before():
    # 80% power: Holm over 36 claims, linear shares (before) against Bonferroni over the 23 primary claims,
    # declared shares, the sign gate (after); in sd of the paired differences
    before, after = simulate.power80("before", 36, trials=2000), simulate.power80("after", 23, trials=2000)
    assert 2.1 < before < 2.5 and after < before
