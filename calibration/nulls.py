"""The seeds of the simulations of issue 39 (calibration/simulate.py, calibration/synthetic.py): paired
differences d = value(than) - value(better) of several shapes, drawn so that P(d > margin) is exactly what is
asked (1/2: a null of the declared estimand; the plan's MDE: its power), or so that the mean of d is exactly
the margin (a null of `estimand: mean`).

Each shape is a distribution of d, given by a sampler and its exact CDF (quantiles by root finding: no
estimate from the draws). A draw is a pair of bounds (lo, hi): lo == hi for a value, -inf/+inf for a run that
diverged, (-inf, +inf) for a pair whose two runs both diverged.

    normal       N(0, 1)
    skewed 5x    N(0, 1) - 5 (Exp(1) - 1): `better`'s seeds a centred exponential, occasionally much worse
    t2, Cauchy   heavy tails (t2: a mean, no variance; Cauchy: no mean)
    catastrophe  `better` slightly better (+1, sd 0.5) on 90% (95%) of seeds, much worse (-9, -19) on the rest:
                 equal means
    ties         to_target-like: whole evaluations, floor(N(mu, 1.5)), a quarter of the pairs tied
    diverged     each run diverges with probability 0.1, independently: a diverged run is its line's worst
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import integrate, optimize
from scipy import stats as st

DIVERGE = 0.1  # the `diverged` shape: each run's probability of diverging
TIE_SD = 1.5  # the `ties` shape: the spread of a difference, in evaluations


def _skewed_cdf(x: float) -> float:
    """P(N - 5 (E - 1) <= x) = E over e of Phi(x + 5 (e - 1)), e ~ Exp(1)."""
    return integrate.quad(lambda e: st.norm.cdf(x + 5 * (e - 1)) * np.exp(-e), 0, np.inf, limit=200)[0]


def _catastrophe(rate: float, worse: float) -> tuple[Callable, Callable]:
    def draw(rng, size):
        bad = rng.random(size) < rate
        return np.where(bad, worse, 1.0) + 0.5 * rng.normal(size=size)

    def cdf(x):
        return (1 - rate) * st.norm.cdf((x - 1) / 0.5) + rate * st.norm.cdf((x - worse) / 0.5)

    return draw, cdf


@dataclass(frozen=True)
class Shape:
    name: str
    draw: Callable  # (rng, size) -> d, before it is placed
    cdf: Callable | None  # exact CDF of d (None: a shape placed by its own rule, ties and diverged)
    mean: float | None  # exact mean of d (None: none, or infinite)

    def quantile(self, q: float) -> float:
        """The exact q-quantile of d (root of its CDF)."""
        return optimize.brentq(lambda x: self.cdf(x) - q, -1e3, 1e3, xtol=1e-12)

    def above(self, rng, size, p: float, margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of pairs with P(d > margin) = p exactly."""
        if self.name == "ties":  # floor(N(mu, s)) > m  <=>  N >= floor(m) + 1
            step = np.floor(margin) + 1
            mu = step - TIE_SD * st.norm.ppf(1 - p)
            d = np.floor(rng.normal(mu, TIE_SD, size))
            return d, d
        if self.name == "diverged":
            return _diverged(rng, size, p, margin)
        d = self.draw(rng, size) - self.quantile(1 - p) + margin
        return d, d

    def mean_null(self, rng, size, margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of pairs whose mean difference is exactly the margin (a null of `estimand: mean`)."""
        d = self.draw(rng, size) - self.mean + margin
        return d, d


def _diverged(rng, size, p: float, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Each run diverges with probability DIVERGE: d = +inf where only `than` did, -inf where only `better` did,
    unknown where both did; the finite pairs are placed so that P(lo > margin) = p over all pairs."""
    q = DIVERGE
    finite = (p - q * (1 - q)) / (1 - q) ** 2  # P(finite pair beyond the margin)
    d = rng.normal(size=size) - st.norm.ppf(1 - finite) + margin
    than_div, better_div = rng.random(size) < q, rng.random(size) < q
    lo = np.where(than_div & ~better_div, np.inf, np.where(better_div, -np.inf, d))
    hi = np.where(better_div & ~than_div, -np.inf, np.where(than_div, np.inf, d))
    return lo, hi


SHAPES = {
    s.name: s
    for s in (
        Shape("normal", lambda rng, size: rng.normal(size=size), st.norm.cdf, 0.0),
        Shape(
            "skewed 5x",
            lambda rng, size: rng.normal(size=size) - 5 * (rng.exponential(size=size) - 1),
            _skewed_cdf,
            0.0,
        ),
        Shape("t2", lambda rng, size: rng.standard_t(2, size), lambda x: st.t.cdf(x, 2), 0.0),
        Shape("Cauchy", lambda rng, size: rng.standard_cauchy(size), st.cauchy.cdf, None),
        Shape("catastrophe 10%", *_catastrophe(0.10, -9.0), 0.0),
        Shape("catastrophe 5%", *_catastrophe(0.05, -19.0), 0.0),
        Shape("ties", lambda rng, size: np.floor(rng.normal(0, TIE_SD, size)), None, None),
        Shape("diverged", lambda rng, size: rng.normal(size=size), None, None),
    )
}
WITH_MEAN = [name for name, s in SHAPES.items() if s.mean is not None]
