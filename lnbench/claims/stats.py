"""The statistics behind a verdict, as functions on numpy arrays: seeds on the last axis, any leading axes
batched. `lnbench report` calls them on one comparison; the simulations of docs/verdicts.md
(calibration/simulate.py) call the same functions on thousands at once, so the error rates they measure are
those of the code that judges.

d holds paired differences value(than) - value(better): positive supports the claim. margin >= 0 is the
claim's `min_effect`. Each comparison gives three one-sided p-values, for one of two estimands:

- the median (the default, `estimand: median`): held when P(d > margin) > 1/2, `better` beats `than` by more
  than the margin on most seeds; sign_tests(), exact whatever the seeds' distribution; its interval is
  median_interval() (order statistics);
- the mean (`estimand: mean`): held when mean(d) > margin; paired_t() (Student), exact only for Gaussian
  differences, and no test on a handful of seeds is exact for a mean whatever the distribution (Bahadur and
  Savage): a mean rests on the seeds' tails, which tails() flags.

A decision at two-sided level a is made when 2p <= a: for held and contra that is the (1 - a) interval lying
beyond +-margin, for equiv that interval lying inside +-margin (decide()).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize
from scipy import stats as st

ALPHA = 0.05  # two-sided: a 95% interval, 2.5% per side
POWER = 0.8
HELD, CONTRA, EQUIV = 0, 1, 2  # the index decide() returns
BOOTSTRAP_DRAWS = 10_000


def _sd_floor(resolution) -> np.ndarray:
    """The spread a difference of two values measured at this resolution has at least: each value is off by up
    to half a step (uniform), so a difference has variance 2 * res^2 / 12."""
    return np.asarray(resolution, float) / math.sqrt(6)


def paired_t(d, margin=0.0, resolution=0.0):
    """(p_held, p_contra, p_equiv, mean, se, df) of the paired differences d (..., n), n >= 2. A spread of zero
    (every difference equal, and no resolution to bound it) decides nothing: every p is 1."""
    d = np.asarray(d, float)
    n = d.shape[-1]
    mean = d.mean(-1)
    sd = np.maximum(d.std(-1, ddof=1), _sd_floor(resolution))
    se = sd / math.sqrt(n)
    return (*_t_tests(mean, se, n - 1, margin), mean, se, np.full_like(mean, n - 1.0))


def welch_t(than, better, margin=0.0):
    """The same three p-values for two unpaired samples (1-D), Welch-Satterthwaite degrees of freedom."""
    than, better = np.asarray(than, float), np.asarray(better, float)
    va, vb = than.var(ddof=1) / len(than), better.var(ddof=1) / len(better)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va**2 / (len(than) - 1) + vb**2 / (len(better) - 1)) or 1e-300)
    mean = than.mean() - better.mean()
    return (*_t_tests(np.float64(mean), np.float64(se), df, margin), mean, se, df)


def _t_tests(mean, se, df, margin):
    with np.errstate(divide="ignore", invalid="ignore"):
        t_held = (mean - margin) / se
        t_contra = (mean + margin) / se
        p_held = st.t.sf(t_held, df)
        p_contra = st.t.cdf(t_contra, df)
        # TOST: above -margin (p = sf of t_contra) and below +margin (p = cdf of t_held), both needed
        p_equiv = np.maximum(st.t.sf(t_contra, df), st.t.cdf(t_held, df)) if margin > 0 else np.ones_like(p_held)
    undecidable = ~(se > 0)
    return tuple(np.where(undecidable, 1.0, p) for p in (p_held, p_contra, p_equiv))


def sign_tests(lo, hi, margin=0.0):
    """(p_held, p_contra, p_equiv) of the default estimand, the median paired difference: exact binomial sign
    tests on pairs known as bounds lo <= d <= hi (..., n), whatever the seeds' distribution.

        held    H0: P(d > margin) <= 1/2     the pairs with lo > margin count for it
        contra  H0: P(d < -margin) <= 1/2    the pairs with hi < -margin count for it
        equiv   H0: P(d > -margin) <= 1/2 or P(d < margin) <= 1/2   (two one-sided sign tests)

    Every pair counts in n: a tie (d exactly at the margin) and a pair whose order is unknown (both runs
    diverged: lo = -inf, hi = +inf) count against every side, so each test stays exact (at worst conservative)
    for its H0. A diverged run is a bound like any other (d = -inf where `better` diverged): a rank, no special
    case. With margin 0 nothing is equivalent: p_equiv is 1."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    n = lo.shape[-1]
    m = np.asarray(margin, float)[..., None]  # a number, or one per comparison of the leading axes

    def tail(count):
        return st.binom.sf(count - 1, n, 0.5)

    p_held, p_contra = tail((lo > m).sum(-1)), tail((hi < -m).sum(-1))
    p_equiv = np.maximum(tail((lo > -m).sum(-1)), tail((hi < m).sum(-1)))
    return p_held, p_contra, np.where(np.asarray(margin) > 0, p_equiv, 1.0)


def median_interval(lo, hi, level=1 - ALPHA) -> tuple[float, float] | None:
    """The distribution-free interval of the median of d at this two-sided level: (the j-th smallest lo, the
    j-th largest hi), j the largest with P(Binomial(n, 1/2) <= j - 1) <= (1 - level) / 2. Its end lies above the
    margin exactly when the sign test of held passes at (1 - level) / 2 (and below -margin for contradicted,
    inside for equivalent): the interval and the verdict cannot disagree. None where n pairs cannot reach the
    level (0.5**n > (1 - level) / 2)."""
    lo, hi = np.sort(np.asarray(lo, float)), np.sort(np.asarray(hi, float))
    n = len(lo)
    below = st.binom.cdf(np.arange(n), n, 0.5)  # below[j - 1] = P(B <= j - 1)
    ok = np.nonzero(below <= (1 - level) / 2 * (1 + 1e-9))[0]
    if not len(ok):
        return None
    j = int(ok[-1]) + 1
    return float(lo[j - 1]), float(hi[n - j])


TAIL_IQR = 3.0  # Tukey's far-out fence


def tails(d) -> np.ndarray:
    """The indices of differences beyond TAIL_IQR interquartile ranges outside the quartiles: seeds a mean rests
    on. The range is at least the differences' step (the smallest gap between distinct ones: one test item of an
    error rate, one evaluation of a to_target measure), so that ordinary ties of a quantized metric (identical
    quartiles, a pair one step off them) are not far out, while a catastrophe among them still is."""
    d = np.asarray(d, float)
    if len(d) < 4:
        return np.zeros(0, int)
    q1, q3 = np.percentile(d, [25, 75])
    gaps = np.diff(np.unique(d[np.isfinite(d)]))
    gaps = gaps[gaps > 1e-9 * max(1.0, float(np.abs(d[np.isfinite(d)]).max(initial=0.0)))]  # float noise: one step
    fence = TAIL_IQR * max(q3 - q1, float(gaps.min()) if len(gaps) else 0.0)
    return np.nonzero((d < q1 - fence) | (d > q3 + fence))[0]


def interval(mean, se, df, level=1 - ALPHA):
    """The two-sided Student t interval at `level`."""
    half = st.t.ppf(0.5 + level / 2, df) * se
    return mean - half, mean + half


def combine_panels(p_held, p_contra, p_equiv):
    """One claim over several panels (the last axis): it holds only where it holds in every panel
    (intersection-union: the largest p, no correction needed); it is contradicted where it fails in some
    panel (a union over panels: Bonferroni, the smallest p times the number of panels); equivalent only
    where equivalent in every panel (intersection-union)."""
    k = np.asarray(p_contra).shape[-1]
    return (np.max(p_held, -1), np.minimum(1.0, k * np.min(p_contra, -1)), np.max(p_equiv, -1))


def spending(looks: list[int], power: float = 1.0) -> np.ndarray:
    """The share of alpha each look may spend: alpha * t^power spent by information time t = n / n_max
    (power 1: linear in the seeds a look adds, Lan-DeMets; lnbench/claims/plan.py declares its own). Each look
    is tested at its share alone (Bonferroni over looks): valid whatever the correlation between looks and
    whatever decides to stop, at the price of being conservative."""
    t = np.concatenate([[0.0], np.asarray(looks, float) / looks[-1]]) ** power
    return np.diff(t)


def sequential(p_looks, weights):
    """The p-value of a design with several looks (the last axis): min over looks of p_j / w_j, capped at 1.
    Under H0, P(some p_j <= u w_j) <= sum of u w_j = u: a valid p-value under optional stopping. A look of share
    0 (no decision possible there) never gives the p-value."""
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, np.min(np.asarray(p_looks, float) / np.asarray(weights, float), -1))


def decide(p_held, p_contra, p_equiv):
    """(p, kind): the smallest decision p-value (2p, for a two-sided level) and which decision it is."""
    ps = np.stack(np.broadcast_arrays(p_held, p_contra, p_equiv), -1)
    kind = np.argmin(ps, -1)
    return np.minimum(1.0, 2 * np.take_along_axis(ps, kind[..., None], -1)[..., 0]), kind


def holm(p):
    """Holm-Bonferroni adjusted p-values along the last axis (family-wise error, any dependence)."""
    p = np.asarray(p, float)
    m = p.shape[-1]
    order = np.argsort(p, -1, kind="stable")
    ranked = np.take_along_axis(p, order, -1) * (m - np.arange(m))
    adjusted = np.minimum(1.0, np.maximum.accumulate(ranked, -1))
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, -1)
    return out


def bh(p):
    """Benjamini-Hochberg adjusted p-values along the last axis (false discovery rate; valid for independent
    or positively dependent tests)."""
    p = np.asarray(p, float)
    m = p.shape[-1]
    order = np.argsort(p, -1, kind="stable")
    ranked = np.take_along_axis(p, order, -1) * m / np.arange(1, m + 1)
    adjusted = np.minimum(1.0, np.minimum.accumulate(ranked[..., ::-1], -1)[..., ::-1])
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, -1)
    return out


def bonferroni(p):
    """Bonferroni adjusted p-values along the last axis: each times their number (no other p-value matters)."""
    p = np.asarray(p, float)
    return np.minimum(1.0, p * p.shape[-1])


ADJUST = {"bonferroni": bonferroni, "holm": holm, "bh": bh, "none": lambda p: np.asarray(p, float)}


def holm_levels(p, alpha=ALPHA):
    """The level each test faced in Holm's step-down (alpha / (m - rank)): what an inconclusive one would have
    needed, for its minimum detectable effect."""
    p = np.asarray(p, float)
    m = len(p)
    levels = np.empty(m)
    levels[np.argsort(p, kind="stable")] = alpha / (m - np.arange(m))
    return levels


def mde(sd: float, n: int, level: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest true mean difference (beyond the margin) that a paired t test of n seeds detects with
    this power at this two-sided level, for differences with this standard deviation (noncentral t, exact)."""
    if n < 2 or not sd > 0 or not math.isfinite(sd):
        return None
    df, crit = n - 1, st.t.ppf(1 - level / 2, n - 1)
    nc = optimize.brentq(lambda c: st.nct.sf(crit, df, c) - power, 0.0, 1e3)
    return float(nc * sd / math.sqrt(n))


def bootstrap_interval(d, level=1 - ALPHA, draws=BOOTSTRAP_DRAWS, seed=0):
    """The percentile bootstrap interval of the mean of d (1-D), from a fixed seed (the same runs give the same
    numbers). Shown beside the t interval, never deciding: with a handful of seeds it is too narrow."""
    d = np.asarray(d, float)
    idx = np.random.default_rng(seed).integers(0, len(d), (draws, len(d)))
    means = d[idx].mean(-1)
    return tuple(float(q) for q in np.quantile(means, [0.5 - level / 2, 0.5 + level / 2]))


def p_improvement(lo, hi) -> float | None:
    """P(better < than) over paired seeds (rliable's probability of improvement, on pairs): the share of
    pairs where `better` scored lower, ties counted half; pairs whose order is unknown are left out."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    win, loss = (lo > 0).sum(), (hi < 0).sum()
    tie = ((lo == 0) & (hi == 0)).sum()
    known = win + loss + tie
    return float((win + tie / 2) / known) if known else None
