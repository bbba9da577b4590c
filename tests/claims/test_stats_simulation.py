"""The statistics of a verdict: numbers against scipy and hand computations, and the error rates of issue 23's
procedures under simulated nulls (the simulations below run lnbench/claims/tuning.pick and lnbench/claims/stats.py;
docs/verdicts-log.md has their tables); issue 39's estimand and plans: tests/claims/test_estimand.py.

The fast versions use a few thousand vectorized trials (well under a second each); `-m slow` reruns them
with 50,000. A rate passes if it is below its nominal level plus three binomial standard errors; the
procedures before issue 23 are shown to fail the same bound."""

import math

import numpy as np
import pytest
from scipy import stats as sst

from lnbench.claims import stats
from lnbench.claims.tuning import pick

FAST, SLOW = 4000, 50_000


def bound(nominal: float, trials: int) -> float:
    return nominal + 3 * math.sqrt(nominal * (1 - nominal) / trials)


# ---- numbers against references ------------------------------------------------------------------
def test_paired_t_p_values_are_scipys_one_sided_tests_shifted_by_the_margin():
    rng = np.random.default_rng(1)
    d = rng.normal(0.3, 1.0, (50, 5))
    ph, pc, pe, mean, se, df = stats.paired_t(d, margin=0.1)
    assert np.allclose(ph, sst.ttest_1samp(d - 0.1, 0, axis=-1, alternative="greater").pvalue)
    assert np.allclose(pc, sst.ttest_1samp(d + 0.1, 0, axis=-1, alternative="less").pvalue)
    tost = np.maximum(
        sst.ttest_1samp(d + 0.1, 0, axis=-1, alternative="greater").pvalue,
        sst.ttest_1samp(d - 0.1, 0, axis=-1, alternative="less").pvalue,
    )
    assert np.allclose(pe, tost) and np.allclose(df, 4)
    lo, hi = stats.interval(mean, se, df)
    ref = sst.t.interval(0.95, 4, loc=d.mean(-1), scale=sst.sem(d, axis=-1))
    assert np.allclose(lo, ref[0]) and np.allclose(hi, ref[1])


def test_a_decision_at_95_percent_is_the_interval_beyond_the_margin():
    rng = np.random.default_rng(2)
    d = rng.normal(0.5, 1.0, (2000, 4))
    ph, pc, pe, mean, se, df = stats.paired_t(d, margin=0.2)
    p, kind = stats.decide(ph, pc, pe)
    lo, hi = stats.interval(mean, se, df)
    decided = p <= 0.05
    assert np.array_equal(decided & (kind == stats.HELD), lo > 0.2)
    assert np.array_equal(decided & (kind == stats.CONTRA), hi < -0.2)
    assert np.array_equal(decided & (kind == stats.EQUIV), (lo > -0.2) & (hi < 0.2))


def test_identical_differences_decide_nothing_unless_a_resolution_bounds_their_spread():
    p = stats.paired_t([30.0, 30.0, 30.0])[:3]
    assert all(x == 1.0 for x in p)  # a zero-width interval is no evidence
    ph = stats.paired_t([30.0, 30.0, 30.0], resolution=10.0)[0]  # measured to 10 steps: spread >= 10/sqrt(6)
    assert ph == pytest.approx(sst.t.sf(30 / (10 / math.sqrt(6) / math.sqrt(3)), 2))


def test_the_sign_tests_are_scipys_binomial_tests_with_every_pair_counted():
    lo = np.array([1.0, 2.0, 0.5, -np.inf, 3.0, 1.0, 0.0])
    hi = np.array([1.0, np.inf, np.inf, np.inf, 3.0, 1.0, 0.0])  # pair 3: both diverged, order unknown; 6: a tie
    ph, pc, pe = stats.sign_tests(lo, hi)
    # 5 of 7 above 0: the tie and the unknown pair count against held (n = 7, not 5)
    assert ph == pytest.approx(sst.binomtest(5, 7, 0.5, alternative="greater").pvalue)
    assert pc == pytest.approx(sst.binomtest(0, 7, 0.5, alternative="greater").pvalue) and pe == 1.0  # margin 0
    ph, pc, pe = stats.sign_tests(lo, hi, margin=1.5)  # above +1.5: 2 and 3; below -1.5: none
    assert ph == pytest.approx(sst.binomtest(2, 7, 0.5, alternative="greater").pvalue)
    # equivalent: above -1.5 (every pair but the unknown one: 6 of 7) and below +1.5 (1, 1, 0: 3 of 7)
    lower = sst.binomtest(6, 7, 0.5, alternative="greater").pvalue
    upper = sst.binomtest(3, 7, 0.5, alternative="greater").pvalue
    assert pe == pytest.approx(max(lower, upper))


def test_the_median_interval_reads_the_sign_test_at_every_level():
    rng = np.random.default_rng(4)
    for n in (6, 9, 14, 21):
        d = rng.normal(0.3, 1.0, (300, n))
        ph, pc, _ = stats.sign_tests(d, d, margin=0.1)
        for level in (0.05, 0.01, 0.002):
            found = [stats.median_interval(x, x, 1 - level) for x in d]
            if 0.5**n > level / 2:
                assert all(f is None for f in found)
                continue
            low = np.array([f[0] for f in found])
            high = np.array([f[1] for f in found])
            assert np.array_equal(low > 0.1, 2 * ph <= level) and np.array_equal(high < -0.1, 2 * pc <= level)
    assert stats.median_interval([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) is None  # 1/8 > 2.5%: no 95% interval


def test_tails_flags_a_seed_beyond_three_interquartile_ranges():
    d = np.array([0.1, 0.12, 0.09, 0.11, 0.1, 0.13, 0.08, 0.1, -0.9])
    assert list(stats.tails(d)) == [8] and len(stats.tails(d[:8])) == 0


def test_tails_of_a_quantized_metric_are_not_its_ordinary_ties():
    # an error rate on 100 test items: differences of whole items, mostly tied; float differences, not exact steps
    than = np.array([0.12, 0.10, 0.11, 0.13, 0.12, 0.10, 0.11, 0.12, 0.14])
    better = than - np.array([0, 0, 0, 0, 0, 0, 0, 0.01, -0.01])
    d = than - better
    assert np.percentile(d, 25) == np.percentile(d, 75) == 0 and len(stats.tails(d)) == 0  # a step off: ordinary
    d[3] = -0.93 + d[3]  # a catastrophe among the ties is still far out, and so are 4 items beyond 3 steps' fence
    assert list(stats.tails(d)) == [3] and list(stats.tails(np.r_[np.zeros(7), 0.01, 0.04])) == [8]


def test_holm_and_bh_adjusted_p_values_by_hand():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, running max
    assert np.allclose(stats.holm(p), [0.03, 0.06, 0.06, 0.02])
    # BH: sorted times 4/1, 4/2, 4/3, 4/4, running min from the top
    assert np.allclose(stats.bh(p), [0.02, 0.04, 0.04, 0.02])
    assert np.allclose(stats.holm_levels(p), [0.05 / 3, 0.05 / 1, 0.05 / 2, 0.05 / 4])


def test_panels_combine_by_intersection_union_for_held_and_bonferroni_for_contradicted():
    ph, pc, pe = stats.combine_panels(np.array([0.01, 0.2]), np.array([0.3, 0.02]), np.array([0.5, 0.4]))
    assert (ph, pc, pe) == (0.2, pytest.approx(0.04), 0.5)


def test_spending_is_linear_in_seeds_and_the_sequential_p_is_the_smallest_spent_share():
    assert np.allclose(stats.spending([3, 6, 9]), [1 / 3, 1 / 3, 1 / 3])
    assert np.allclose(stats.spending([3, 10]), [0.3, 0.7])
    assert stats.sequential([0.02, 0.01, 0.5], stats.spending([3, 6, 9])) == pytest.approx(0.03)


def test_the_minimum_detectable_effect_has_80_percent_power_by_simulation():
    mde = stats.mde(1.0, 5, level=0.05)
    rng = np.random.default_rng(3)
    d = rng.normal(mde, 1.0, (20000, 5))
    power = (2 * stats.paired_t(d)[0] <= 0.05).mean()
    assert power == pytest.approx(0.8, abs=0.015)
    assert stats.mde(1.0, 3) == pytest.approx(3.3, abs=0.1) and stats.mde(1.0, 10) == pytest.approx(1.0, abs=0.05)


def test_the_bootstrap_is_reproducible_and_p_improvement_counts_ties_half():
    d = [0.1, -0.05, 0.2, 0.3]
    assert stats.bootstrap_interval(d) == stats.bootstrap_interval(d)
    lo, hi = stats.bootstrap_interval(d)
    assert lo < np.mean(d) < hi
    assert stats.p_improvement(np.array([1.0, -1.0, 0.0, 2.0]), np.array([1.0, -1.0, 0.0, 2.0])) == pytest.approx(0.625)


# ---- the simulations: every scenario a null ------------------------------------------------------
# The two models of a claim are identical (the same mean at every learning rate), so any held or contradicted
# verdict is false. A run's final value is a seed effect both models share at that seed (the same data order)
# plus the model's own noise; a run's test value adds a little noise of its own. "before" is the procedure before
# issue 23: the learning rate chosen and the claim judged on the same three seeds, no family adjustment,
# "contradicted if contradicted in any panel", and each look at 95%.
ALPHA = stats.ALPHA


def _runs(rng, shape, sd):
    """Final validation values (trials, models, lrs, seeds) of identical models with the given noise per model."""
    trials, lrs, seeds = shape
    shared = rng.normal(0, 1.0, (trials, 1, 1, seeds))
    own = rng.normal(0, 1, (trials, len(sd), lrs, seeds)) * np.asarray(sd)[None, :, None, None]
    return shared + own


def _decisions(d, looks=None):
    """(held, contradicted) decided on paired differences d (trials, n) at 95% (one look, or the looks' design)."""
    if looks is None:
        ph, pc, _ = stats.paired_t(d)[:3]
    else:
        w = stats.spending(looks)
        ph, pc = (stats.sequential(np.stack([stats.paired_t(d[:, :n])[i] for n in looks], -1), w) for i in (0, 1))
    p, kind = stats.decide(ph, pc, np.ones_like(ph))
    return (p <= ALPHA) & (kind == stats.HELD), (p <= ALPHA) & (kind == stats.CONTRA)


def _chosen(val):
    """Each model's runs at the learning rate tuning.pick chooses on them: (trials, models, seeds)."""
    chosen = pick(val, np.ones(val.shape, bool))
    return np.take_along_axis(val, chosen[:, :, None, None], 2)[:, :, 0, :]


def simulate_tuning(trials, sd_ratio, judge="fresh", lrs=3, seeds=3, n_judge=3, seed=0):
    """(false held, false contradicted) of "the noisier model beats the quieter", each model tuned on its tuning
    seeds, then judged on the same runs ("same", before), their test values ("test") or fresh seeds ("fresh")."""
    rng = np.random.default_rng(seed)
    sd = (1.0, sd_ratio)  # model 0: than (quiet), model 1: better (noisy)
    at = _chosen(_runs(rng, (trials, lrs, seeds), sd))
    if judge == "same":
        judged = at
    elif judge == "test":
        judged = at + rng.normal(0, 0.1, at.shape)
    else:  # fresh seeds: new runs at the chosen value; under the null the value does not change the mean
        judged = _runs(rng, (trials, 1, n_judge), sd)[:, :, 0, :]
    held, contra = _decisions(judged[:, 0] - judged[:, 1])
    return float(held.mean()), float(contra.mean())


def simulate_family(trials, claims=26, adjust="holm", procedure="after", seed=0):
    """(mean number of false verdicts per check, P(at least one)) when all claims are null, independent."""
    rng = np.random.default_rng(seed)
    if procedure == "before":  # the old whole procedure per claim, unadjusted (equal noise, same seeds)
        at = _chosen(_runs(rng, (trials * claims, 3, 3), (1.0, 1.0)))
        d = at[:, 0] - at[:, 1]
    else:
        d = rng.normal(0, 1, (trials * claims, 3))
    p, _ = stats.decide(*stats.paired_t(d)[:3])
    false = (stats.ADJUST[adjust if procedure == "after" else "none"](p.reshape(trials, claims)) <= ALPHA).sum(-1)
    return float(false.mean()), float((false > 0).mean())


def simulate_panels(trials, k, rule="after", n=3, seed=0):
    """(false held, false contradicted) of a claim over k null panels: the old rule (contradicted if
    contradicted in any panel, each at 95%) or stats.combine_panels."""
    rng = np.random.default_rng(seed)
    ph, pc, pe = (x.reshape(trials, k) for x in stats.paired_t(rng.normal(0, 1, (trials * k, n)))[:3])
    if rule == "before":
        return float((2 * ph <= ALPHA).all(-1).mean()), float((2 * pc <= ALPHA).any(-1).mean())
    p, kind = stats.decide(*stats.combine_panels(ph, pc, pe))
    return float(((p <= ALPHA) & (kind == stats.HELD)).mean()), float(((p <= ALPHA) & (kind == stats.CONTRA)).mean())


def simulate_stopping(trials, looks, rule="after", seed=0):
    """P(a false held or contradicted at some look) when seeds are added until the claim is decided: each look
    at 95% ("before") or the looks' alpha spending (stats.spending, stats.sequential)."""
    d = np.random.default_rng(seed).normal(0, 1, (trials, looks[-1]))
    if rule == "before":
        decided = np.zeros(trials, bool)
        for n in looks:
            held, contra = _decisions(d[:, :n])
            decided |= held | contra
        return float(decided.mean())
    held, contra = _decisions(d, looks)
    return float((held | contra).mean())


# ---- error rates under the null ---------------------------------------------------------------
def _selection(trials):
    for ratio in (5, 10):
        before_held, _ = simulate_tuning(trials, ratio, "same")
        test_held, _ = simulate_tuning(trials, ratio, "test")
        after_held, after_contra = simulate_tuning(trials, ratio, "fresh")
        assert before_held > bound(0.025, trials), (ratio, before_held)  # today's procedure fails the test...
        assert test_held > bound(0.025, trials), (ratio, test_held)  # ...and judging on test does not fix it
        assert after_held <= bound(0.025, trials) and after_contra <= bound(0.025, trials), (
            ratio,
            after_held,
            after_contra,
        )


def _family(trials):
    _, any_before = simulate_family(trials, procedure="before")
    _, any_raw = simulate_family(trials, adjust="none")
    _, any_holm = simulate_family(trials, adjust="holm")
    _, any_bh = simulate_family(trials, adjust="bh")
    assert any_before > 0.4 and any_raw > 0.6
    assert any_holm <= bound(0.05, trials) and any_bh <= bound(0.05, trials)  # all null: FDR is the family-wise rate


def _panels(trials):
    for k in (2, 3):
        _, before = simulate_panels(trials, k, "before")
        held, contra = simulate_panels(trials, k, "after")
        assert before > bound(0.025, trials) and held <= bound(0.025, trials) and contra <= bound(0.025, trials)


def _stopping(trials):
    for looks in ([3, 6, 9], [3, 4, 5, 6, 7]):
        assert simulate_stopping(trials, looks, "before") > bound(0.05, trials)
        assert simulate_stopping(trials, looks, "after") <= bound(0.05, trials)


@pytest.mark.parametrize("check", [_selection, _family, _panels, _stopping])
def test_error_rates_under_the_null(check):
    check(FAST if check is not _family else FAST // 4)


@pytest.mark.slow
@pytest.mark.parametrize("check", [_selection, _family, _panels, _stopping])
def test_error_rates_under_the_null_many_trials(check):
    check(SLOW if check is not _family else SLOW // 10)
