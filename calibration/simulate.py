"""The error rates and the power of the verdicts as lnbench judges them (issue 39), on the code that judges
(lnbench/claims/stats.py's tests, lnbench/claims/plan.py's plans), in vectorized trials.

- level: one claim, its seeds drawn from a null of the declared estimand (P(d > margin) = 1/2 exactly) of each
  shape of calibration/nulls.py, judged in its plan's looks: false held, contradicted and equivalent;
- family: every claim of a declared family null (the shapes in turn), Bonferroni over the family, each claim in
  its family's plan: the family-wise error;
- power: one claim whose P(d > margin) is its plan's MDE, the MDE the page shows: P(held), which the plan says
  is 80%;
- mean: the same shapes with equal means (the nulls issue 39 measured), judged by `estimand: mean` (the paired
  t test in the same plan, and how often the tails flag it) and by the median (whose verdict there is about
  another question).

    python -m calibration.simulate [--trials N] [--seed S]    # the tables of docs/verdicts.md

The tables of issues 23 and 30, with the procedures of their time, were printed by the commits that
docs/verdicts-log.md names; those procedures are not kept runnable.
"""

from __future__ import annotations

import argparse

import numpy as np

from calibration.nulls import SHAPES, Shape
from lnbench.claims import plan, stats
from lnbench.claims.plan import JudgingPlan

FAMILIES = {"primary": 23, "control": 4, "beyond": 9}  # the presets' declared families (lnbench/claims/family.py)
MARGIN = 1.0  # in the shapes' units; `ties` has its ties exactly there
ALPHA = stats.ALPHA


def judged(lo, hi, design: JudgingPlan, family_size: int = 1, estimand: str = "median", margin: float = MARGIN):
    """(kind, decided) of claims whose pairs are (lo, hi) (trials, seeds), judged as lnbench/claims/decision.py
    judges one: at each look the claim's p-values, alpha spent by the design's shares (stats.sequential), frozen
    at the first look where the smallest decides at alpha / family_size (Bonferroni over the family). kind:
    stats.HELD, CONTRA or EQUIV; decided: the claim reads it after the family adjustment."""
    trials = lo.shape[0]
    kind, decided = np.zeros(trials, int), np.zeros(trials, bool)
    per_look: list[tuple] = []
    for n in design.looks:
        if estimand == "median":
            per_look.append(stats.sign_tests(lo[:, :n], hi[:, :n], margin))
        else:
            per_look.append(_mean_tests(lo[:, :n], margin))
        ps = [
            stats.sequential(np.stack([pl[i] for pl in per_look], -1), design.shares[: len(per_look)]) for i in range(3)
        ]
        p, k = stats.decide(*ps)
        now = ~decided & (p * family_size <= ALPHA * (1 + 1e-9))
        kind, decided = np.where(now, k, kind), decided | now
    return kind, decided


def _mean_tests(d, margin):
    ph, pc, pe = stats.paired_t(d, margin)[:3]
    return ph, pc, pe


def level(shape: Shape, trials: int, design: JudgingPlan, seed: int = 0) -> tuple[float, float, float]:
    """(false held, false contradicted, false equivalent) of one claim under the shape's median null."""
    rng = np.random.default_rng(seed)
    lo, hi = shape.above(rng, (trials, design.max_seeds), 0.5, MARGIN)
    kind, decided = judged(lo, hi, design)
    return tuple(float((decided & (kind == k)).mean()) for k in (stats.HELD, stats.CONTRA, stats.EQUIV))


def family_error(trials: int, size: int, design: JudgingPlan, seed: int = 0, names=None) -> float:
    """P(some false verdict) among `size` null claims (the shapes in turn), Bonferroni over the family."""
    rng = np.random.default_rng(seed)
    names = names or list(SHAPES)
    wrong = np.zeros(trials, bool)
    for i in range(size):
        lo, hi = SHAPES[names[i % len(names)]].above(rng, (trials, design.max_seeds), 0.5, MARGIN)
        wrong |= judged(lo, hi, design, size)[1]
    return float(wrong.mean())


def power(shape: Shape, trials: int, design: JudgingPlan, p: float, seed: int = 0) -> float:
    """P(held) of one claim of the design's family whose pairs lie beyond the margin with probability p."""
    rng = np.random.default_rng(seed)
    lo, hi = shape.above(rng, (trials, design.max_seeds), p, MARGIN)
    kind, decided = judged(lo, hi, design, design.family_size)
    return float((decided & (kind == stats.HELD)).mean())


def equal_means(shape: Shape, trials: int, design: JudgingPlan, seed: int = 0) -> dict[str, float]:
    """False held under equal means (d's mean is the margin) by `estimand: mean` (and held with no tails flag at
    its deciding look), and what the median reads there (held: true for the median exactly
    when P(d > margin) > 1/2)."""
    rng = np.random.default_rng(seed)
    lo, _ = shape.mean_null(rng, (trials, max(design.max_seeds, 9)), MARGIN)
    kind, decided = judged(lo, lo, design, estimand="mean")
    held = decided & (kind == stats.HELD)
    flagged = np.zeros(trials, bool)
    stop = _stopping_look(lo, design, "mean")
    for n in design.looks:
        at = stop == n
        if at.any():
            flagged[at] = [len(stats.tails(d)) > 0 for d in lo[at, :n]]  # the rule the report applies
    mk, md = judged(lo, lo, design)
    return {
        "P(d > margin)": float((lo > MARGIN).mean()),
        "mean": float(held.mean()),
        "mean, no tails flag": float((held & ~flagged).mean()),
        "median held": float((md & (mk == stats.HELD)).mean()),
    }


def _stopping_look(lo, design: JudgingPlan, estimand: str) -> np.ndarray:
    """The look each trial stops at: the first that decides, else the last."""
    stop = np.full(lo.shape[0], design.looks[-1])
    done = np.zeros(lo.shape[0], bool)
    for j, n in enumerate(design.looks):
        sub = JudgingPlan(n, design.looks[: j + 1], design.shares[: j + 1])
        _, decided = judged(lo, lo, sub, estimand=estimand)
        stop = np.where(decided & ~done, n, stop)
        done |= decided
    return stop


def plans() -> dict[str, JudgingPlan]:
    """The default plan of each declared family, and of a claim alone."""
    return {"alone": plan.plan_judging(family_size=1)} | {
        f: plan.plan_judging(family_size=m) for f, m in FAMILIES.items()
    }


def _pct(x: float) -> str:
    return f"{x:.2%}"


def tables(trials: int, seed: int = 0) -> str:
    """The simulated tables of docs/verdicts.md, as Markdown."""
    designs = plans()
    alone = designs["alone"]
    out = [
        f"{trials:,} simulated claims per cell, numpy seed {seed}; margin {MARGIN:g} in the shapes' units.",
        "",
        f"One claim alone, its plan: {alone.summary()} (shares {', '.join(f'{w:.3f}' for w in alone.shares)}).",
        "",
        "| seeds (d = than − better), P(d > margin) = 1/2 | false held | false contradicted | false equivalent |",
        "|---|---|---|---|",
    ]
    for name in SHAPES:
        h, c, e = level(SHAPES[name], trials, alone, seed)
        out.append(f"| {name} | {_pct(h)} | {_pct(c)} | {_pct(e)} |")
    fam_trials = max(trials // 5, 200)
    out += [
        "",
        "| family (claims), every claim null, the shapes in turn | its plan | family-wise error |",
        "|---|---|---|",
    ]
    for f, m in FAMILIES.items():
        d = designs[f]
        looks = ", ".join(map(str, d.looks))
        out.append(f"| {f} ({m}) | {d.max_seeds} seeds, looks {looks} | {_pct(family_error(fam_trials, m, d, seed))} |")
    out += [
        "",
        "| plan | seeds, looks (shares) | MDE: P(d > margin) "
        "| P(held) at the MDE: normal / skewed 5x / catastrophe 10% "
        "| P(held) at 0.9 | mean seeds at 0.9 / at 1 |",
        "|---|---|---|---|---|---|",
    ]
    for f, d in designs.items():
        sims = " / ".join(
            _pct(power(SHAPES[s], trials, d, d.mde, seed)) for s in ("normal", "skewed 5x", "catastrophe 10%")
        )
        shares = ", ".join(f"{n} ({w:.2f})" for n, w in zip(d.looks, d.shares))
        at1 = plan.expected_seeds(d.looks, d.shares, d.level, 1.0)
        out.append(
            f"| {f} | {shares} | {d.mde:.3f} | {sims} | {d.power_at_agree:.1%} | {d.expected_seeds:.1f} / {at1:.1f} |"
        )
    out += [
        "",
        "| seeds, equal means | P(d > margin) | `estimand: mean`: false held | … not flagged by the tails "
        "| median: held |",
        "|---|---|---|---|---|",
    ]
    for name in SHAPES:
        if SHAPES[name].mean is None:
            continue
        r = equal_means(SHAPES[name], trials, alone, seed)
        out.append(
            f"| {name} | {r['P(d > margin)']:.3f} | "
            f"{_pct(r['mean'])} | {_pct(r['mean, no tails flag'])} | {_pct(r['median held'])} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(tables(args.trials, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
