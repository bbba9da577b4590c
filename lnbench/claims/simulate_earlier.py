"""The simulations of issues 23 and 30, with the procedures of their time: the tables of docs/verdicts.md's
history sections, and the "before" columns of issue 39's (lnbench/claims/simulate.py prints them all). Issue 30's
rule (the paired t test gated by a sign test that leaves ties out) is kept here as it ran: the code now judges
with lnbench/claims/stats.py's sign_tests. Sweeps with known answers, judged by lnbench/tuning.pick and
lnbench/claims/stats.py: the error rates in docs/verdicts.md and in tests/claims/test_stats_simulation.py.

Every scenario is a null: the two models of a claim are identical (the same mean at every learning rate),
so any held or contradicted verdict is false. A run's final value is a seed effect shared by both models at
that seed (the same data order) plus the model's own noise, whose spread may differ between the models; a
run's test value is its validation value plus a little noise of its own. "before" is the procedure before
issue 23: the learning rate chosen and the claim judged on the same three seeds, no family adjustment,
"contradicted if contradicted in any panel", and looking again after each added seed.

Issue 30's scenarios: a noisier model whose seeds are right-skewed (a centered exponential seed effect: most
seeds a little better, a few much worse, equal means), the whole check's family with such lines, a true
effect equal to the margin when the margin is read from the judged runs or fixed before them, and the
80%-power effect per claim. "before" is issue 23's procedure (t test, alpha spent linearly in seeds, Holm over
the page's claims), "after" issue 30's (the t test gated by the sign test at the look's share, declared
shares, Bonferroni over the declared family).

    python -m lnbench.claims.simulate [--trials N] [--seed S] [--only 23|30|39]    # the tables of docs/verdicts.md
"""

from __future__ import annotations

import numpy as np

from lnbench.claims import stats
from lnbench.claims.stats import POWER
from lnbench.claims.tuning import pick

ISSUE30_SPENDING = 3.0  # issue 30's declared shares: alpha * t^3 over the looks 3, 6, 9
SHARED_SD = 1.0  # the seed effect both models share
TEST_SD = 0.1  # a run's test value: its validation value plus this much noise of its own
ALPHA = stats.ALPHA


def _runs(rng, shape, sd):
    """Final validation values (..., models, lrs, seeds) of identical models with the given noise per model."""
    trials, lrs, seeds = shape
    shared = rng.normal(0, SHARED_SD, (trials, 1, 1, seeds))
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


def tuning(
    trials: int, sd_ratio: float, judge: str = "fresh", lrs: int = 3, seeds: int = 3, n_judge: int = 3, seed: int = 0
):
    """(false held, false contradicted) of a whole tuned comparison: each model's learning rate chosen on the
    mean final validation of its tuning seeds (tuning.pick), then the claim "the noisier model beats the
    quieter" judged on `judge`: the same runs ("same", before), their test values ("test") or fresh seeds at
    the chosen values ("fresh", lnbench check)."""
    rng = np.random.default_rng(seed)
    sd = (1.0, sd_ratio)  # model 0: than (quiet), model 1: better (noisy)
    val = _runs(rng, (trials, lrs, seeds), sd)
    chosen = pick(val, np.ones(val.shape, bool))  # (trials, models)
    at = np.take_along_axis(val, chosen[:, :, None, None], 2)[:, :, 0, :]
    if judge == "same":
        judged = at
    elif judge == "test":
        judged = at + rng.normal(0, TEST_SD, at.shape)
    else:  # fresh seeds: new runs at the chosen value; under the null the value does not change the mean
        judged = _runs(rng, (trials, 1, n_judge), sd)[:, :, 0, :]
    held, contra = _decisions(judged[:, 0] - judged[:, 1])
    return float(held.mean()), float(contra.mean())


def family(trials: int, claims: int = 26, adjust: str = "holm", procedure: str = "after", seed: int = 0):
    """(mean number of false verdicts per check, P(at least one)) when all claims are null, independent."""
    rng = np.random.default_rng(seed)
    if procedure == "before":  # the old whole procedure per claim, unadjusted (equal noise, same seeds)
        val = _runs(rng, (trials * claims, 3, 3), (1.0, 1.0))
        chosen = pick(val, np.ones(val.shape, bool))
        at = np.take_along_axis(val, chosen[:, :, None, None], 2)[:, :, 0, :]
        d = at[:, 0] - at[:, 1]
    else:
        d = rng.normal(0, 1, (trials * claims, 3))
    ph, pc, pe = stats.paired_t(d)[:3]
    p, _ = stats.decide(ph, pc, pe)
    p = stats.ADJUST[adjust if procedure == "after" else "none"](p.reshape(trials, claims))
    false = (p <= ALPHA).sum(-1)
    return float(false.mean()), float((false > 0).mean())


def panels(trials: int, k: int, rule: str = "after", n: int = 3, seed: int = 0):
    """(false held, false contradicted) of a claim over k null panels: the old rule (contradicted if
    contradicted in any panel, each at 95%) or stats.combine_panels."""
    rng = np.random.default_rng(seed)
    ph, pc, pe = (x.reshape(trials, k) for x in stats.paired_t(rng.normal(0, 1, (trials * k, n)))[:3])
    if rule == "before":
        held_each, contra_each = 2 * ph <= ALPHA, 2 * pc <= ALPHA
        return float(held_each.all(-1).mean()), float(contra_each.any(-1).mean())
    p, kind = stats.decide(*stats.combine_panels(ph, pc, pe))
    return float(((p <= ALPHA) & (kind == stats.HELD)).mean()), float(((p <= ALPHA) & (kind == stats.CONTRA)).mean())


def stopping(trials: int, looks: list[int], rule: str = "after", seed: int = 0):
    """P(a false held or contradicted at some look) when seeds are added until the claim is decided: each look
    at 95% ("before") or the looks' alpha spending (stats.spending, stats.sequential)."""
    rng = np.random.default_rng(seed)
    d = rng.normal(0, 1, (trials, looks[-1]))
    if rule == "before":
        decided = np.zeros(trials, bool)
        for n in looks:
            held, contra = _decisions(d[:, :n])
            decided |= held | contra
        return float(decided.mean())
    held, contra = _decisions(d, looks)
    return float((held | contra).mean())


def power(trials: int, effect: float, looks: list[int], claims: int = 1, seed: int = 0) -> float:
    """P(held) for a true effect (in standard deviations of the paired differences), seeds added look by look
    until decided, each look at its share of alpha / claims (Bonferroni: a lower bound on Holm's power)."""
    rng = np.random.default_rng(seed)
    d = rng.normal(effect, 1, (trials, looks[-1]))
    w = stats.spending(looks)
    held = np.zeros(trials, bool)
    for n, share in zip(looks, w):
        held |= 2 * stats.paired_t(d[:, :n])[0] <= ALPHA * share / claims
    return float(held.mean())


FAMILIES = {"primary": 23, "control": 4, "beyond": 9}  # the presets' declared families (lnbench/claims/family.py)
LOOKS = [3, 6, 9]


def sign_test_known(lo, hi, margin=0.0):
    """Issue 30's sign test: the exact binomial test on the pairs whose side of the margin is known, ties and
    pairs of unknown order left out (so n shrinks with them: the tie issue 39 closed)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    up, down = (lo > margin).sum(-1), (hi < margin).sum(-1)
    p_held = stats.st.binom.sf(up - 1, up + down, 0.5)
    up_c, down_c = (lo > -margin).sum(-1), (hi < -margin).sum(-1)
    p_contra = stats.st.binom.sf(down_c - 1, up_c + down_c, 0.5)
    return p_held, p_contra, np.ones_like(p_held)


def sign_gate(p_test, p_sign, share):
    """Issue 30's gate: p_test where the sign test on the same pairs passes at the look's own share of alpha
    (one side: ALPHA / 2 * share, never divided by the family), else 1."""
    agrees = np.asarray(p_sign, float) <= ALPHA / 2 * np.asarray(share, float) * (1 + 1e-9)
    return np.where(agrees, p_test, 1.0)


def looked(d, looks: list[int], rule: str = "after", margin=0.0):
    """(p_held, p_contra) of paired differences d (trials, looks[-1]) judged in looks: "before" the t test with
    alpha spent linearly in seeds; "after" the t test gated by the sign test, declared shares (the code of
    lnbench/claims/verdicts.py, on arrays)."""
    shares = stats.spending(looks, 1.0 if rule == "before" else ISSUE30_SPENDING)
    ph, pc = [], []
    for n, w in zip(looks, shares):
        h, c = stats.paired_t(d[..., :n], margin)[:2]
        if rule == "after":
            sh, sc, _ = sign_test_known(d[..., :n], d[..., :n], margin)
            h, c = sign_gate(h, sh, w), sign_gate(c, sc, w)
        ph.append(h)
        pc.append(c)
    return stats.sequential(np.stack(ph, -1), shares), stats.sequential(np.stack(pc, -1), shares)


def skewed_d(rng, shape, ratio: float):
    """Paired differences quiet - noisy of the skewed null: the shared seed effect cancels, the quiet line's
    own noise is N(0, 1), the noisy line's ratio * (Exp(1) - 1): equal means, so any held is false."""
    return rng.normal(0, 1, shape) - ratio * (rng.exponential(1, shape) - 1)


def skewed(trials: int, ratio: float, rule: str = "after", looks: list[int] = LOOKS, seed: int = 0):
    """(false held, false contradicted) of one claim "the noisy model beats the quiet one" on fresh judging
    seeds added in looks (the skewed null)."""
    rng = np.random.default_rng(seed)
    ph, pc = looked(skewed_d(rng, (trials, looks[-1]), ratio), looks, rule)
    p, kind = stats.decide(ph, pc, np.ones_like(ph))
    return float(((p <= ALPHA) & (kind == stats.HELD)).mean()), float(((p <= ALPHA) & (kind == stats.CONTRA)).mean())


def whole_check(trials: int, rule: str = "after", ratio: float = 1.0, seed: int = 0) -> dict[str, float]:
    """P(some false verdict) per declared family and over all 36 claims, every claim null and every other
    claim's noisier line skewed (the rest Gaussian, as noisy): before, Holm over the page's 36 claims; after,
    Bonferroni over each declared family."""
    rng = np.random.default_rng(seed)
    m = sum(FAMILIES.values())
    d = np.empty((trials, m, LOOKS[-1]))
    d[:, ::2] = skewed_d(rng, d[:, ::2].shape, ratio)
    d[:, 1::2] = rng.normal(0, 1, d[:, 1::2].shape) + ratio * rng.normal(0, 1, d[:, 1::2].shape)
    p, _ = stats.decide(*looked(d, LOOKS, rule), np.ones(d.shape[:2]))
    bounds = np.cumsum([0, *FAMILIES.values()])
    if rule == "before":
        false = stats.holm(p) <= ALPHA
    else:
        false = np.concatenate([stats.bonferroni(p[:, a:b]) for a, b in zip(bounds, bounds[1:])], -1) <= ALPHA
    out = {f: float(false[:, a:b].any(-1).mean()) for f, a, b in zip(FAMILIES, bounds, bounds[1:])}
    return {**out, "all 36": float(false.any(-1).mean())}


def equivalence(trials: int, pairing: float, margin_from: str = "tuning", n: int = 9, seed: int = 0) -> float:
    """P(false equivalent) when the true difference equals the margin. A run's value is 1 + s + e: s a seed effect
    both lines share (sd `pairing`; it cancels in the differences), e each run's own (sd 0.002); `better` is lower
    by the true difference. Before: the margin is 1% of `than`'s mean over the judged runs, the true difference
    1% of its true mean. After: the margin is fixed first, 1% of `than`'s mean over 3 tuning runs at the chosen
    value, and the true difference equals that margin. Two one-sided t tests at 5%, n judging seeds."""
    rng = np.random.default_rng(seed)
    tuned = 1.0 + rng.normal(0, pairing, (trials, 3)) + rng.normal(0, 0.002, (trials, 3))
    fixed = 0.01 * tuned.mean(-1, keepdims=True)
    shared = rng.normal(0, pairing, (trials, n))
    than = 1.0 + shared + rng.normal(0, 0.002, (trials, n))
    effect = 0.01 if margin_from == "judged" else fixed
    better = 1.0 - effect + shared + rng.normal(0, 0.002, (trials, n))
    margin = 0.01 * than.mean(-1) if margin_from == "judged" else fixed[:, 0]
    d = than - better
    mean, se = d.mean(-1), d.std(-1, ddof=1) / np.sqrt(n)
    p_equiv = np.maximum(stats.st.t.sf((mean + margin) / se, n - 1), stats.st.t.cdf((mean - margin) / se, n - 1))
    return float((2 * p_equiv <= ALPHA).mean())


def power80(rule: str, family: int, trials: int = 4000, seed: int = 0) -> float:
    """The true effect (sd of the paired differences) held with 80% probability by one claim of a family of this
    size, seeds added in looks 3, 6, 9 (Bonferroni over the family: Holm's first step)."""
    z = np.random.default_rng(seed).normal(0, 1, (trials, LOOKS[-1]))
    lo, hi = 0.0, 10.0
    for _ in range(30):
        mid = (lo + hi) / 2
        ph, _ = looked(z + mid, LOOKS, rule)
        lo, hi = (mid, hi) if (2 * ph * family <= ALPHA).mean() < POWER else (lo, mid)
    return hi


def tables30(trials: int, seed: int = 0) -> str:
    """Issue 30's tables of docs/verdicts.md, as Markdown."""
    out = [
        f"{trials:,} simulated claims per cell, numpy seed {seed}.",
        "",
        "| skewed noisy model (centered exponential) | rule | false held | false contradicted |",
        "|---|---|---|---|",
    ]
    for ratio in (1, 5, 10):
        for rule in ("before", "after"):
            h, c = skewed(trials, ratio, rule, seed=seed)
            out.append(f"| {ratio}x | {rule} | {h:.2%} | {c:.2%} |")
    out += [
        "",
        "| 36 null claims, half skewed | rule | "
        + " | ".join(f"{f} ({m})" for f, m in FAMILIES.items())
        + " | all 36 |",
        "|---|---|---|---|---|---|",
    ]
    for ratio in (1, 5):
        for rule in ("before", "after"):
            fwe = whole_check(max(trials // 5, 200), rule, ratio, seed=seed)
            out.append(f"| {ratio}x | {rule} | " + " | ".join(f"{v:.2%}" for v in fwe.values()) + " |")
    out += ["", "| shared seed effect (sd, of the mean) | margin | false equivalent |", "|---|---|---|"]
    for pairing in (0.005, 0.02, 0.05):
        for src, label in (
            ("judged", "1% of the judged runs (before)"),
            ("tuning", "1% of the tuning runs, fixed first (after)"),
        ):
            out.append(f"| {pairing:g} | {label} | {equivalence(trials, pairing, src, seed=seed):.2%} |")
    out += [
        "",
        "| family (claims) | 80%-power effect before (Holm over 36) | after (Bonferroni over the family) |",
        "|---|---|---|",
    ]
    for name, m in FAMILIES.items():
        out.append(
            f"| {name} ({m}) | {power80('before', 36, seed=seed):.2f} sd | {power80('after', m, seed=seed):.2f} sd |"
        )
    return "\n".join(out)


def tables(trials: int, seed: int = 0) -> str:
    """Every table of docs/verdicts.md, as Markdown."""
    out = [
        f"{trials:,} simulated sweeps per cell, numpy seed {seed}; nominal: 2.5% per side, 5% family-wise.",
        "",
        "| seed noise, noisy / quiet | judged on | false held | false contradicted |",
        "|---|---|---|---|",
    ]
    for ratio in (1, 5, 10):
        for judge, label in (
            ("same", "tuning seeds (before)"),
            ("test", "test split of the tuning runs"),
            ("fresh", "3 fresh seeds (after)"),
        ):
            h, c = tuning(trials, ratio, judge, seed=seed)
            out.append(f"| {ratio}x | {label} | {h:.2%} | {c:.2%} |")
    h, c = tuning(trials, 10, "same", seeds=10, seed=seed)
    out.append(f"| 10x | 10 tuning seeds (before) | {h:.2%} | {c:.2%} |")
    out += ["", "| 26 null claims | mean false verdicts per check | P(at least one) |", "|---|---|---|"]
    for label, kw in (
        ("before (tuning seeds, unadjusted)", {"procedure": "before"}),
        ("unadjusted", {"adjust": "none"}),
        ("Holm", {"adjust": "holm"}),
        ("Benjamini-Hochberg", {"adjust": "bh"}),
    ):
        mean, any_ = family(max(trials // 10, 100), **kw, seed=seed)
        out.append(f"| {label} | {mean:.3f} | {any_:.2%} |")
    out += ["", "| null panels | rule | false held | false contradicted |", "|---|---|---|---|"]
    for k in (1, 2, 3):
        for rule, label in (
            ("before", "any panel contradicts (before)"),
            ("after", "intersection-union / Bonferroni (after)"),
        ):
            h, c = panels(trials, k, rule, seed=seed)
            out.append(f"| {k} | {label} | {h:.2%} | {c:.2%} |")
    out += ["", "| looks (judging seeds) | rule | false verdicts (both sides) |", "|---|---|---|"]
    for looks in ([3, 6, 9], [3, 4, 5, 6, 7], [5, 10, 15, 20, 25]):
        for rule, label in (
            ("before", "each look at 95% (before)"),
            ("after", "alpha spent linearly in seeds (after)"),
        ):
            out.append(f"| {', '.join(map(str, looks))} | {label} | {stopping(trials, looks, rule, seed=seed):.2%} |")
    out += [
        "",
        "| true effect (sd of the differences) | 3 seeds, alone | 3 seeds, 1 of 26 claims "
        "| looks 3, 6, 9, 1 of 26 claims |",
        "|---|---|---|---|",
    ]
    for effect in (1.0, 2.0, 3.0, 5.0):
        cells = [power(trials, effect, looks, m, seed=seed) for looks, m in (([3], 1), ([3], 26), ([3, 6, 9], 26))]
        out.append(f"| {effect:g} | " + " | ".join(f"{c:.0%}" for c in cells) + " |")
    return "\n".join(out)
