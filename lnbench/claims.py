"""Claims as data, and the verdict on each: the statistics behind `lnbench report`'s claims table.

A preset declares the paper's claims under `claims:` (they travel in every job's `.hydra/config.yaml`):

    claims:
      - id: fig6.ln_faster_than_bn
        text: "Figure 6: LN ... exhibits a faster training convergence comparing to batch normalization"
        better: ln_mlp          # a value of the lines key (the model)
        than: bn_mlp_all
        metric: train/loss      # split/name; every metric lnbench logs is lower-is-better
        measure: auc            # final | best | at | auc | to_target
        x: epoch                # step | epoch | time, for at, auc and to_target
        at: 2                   # at: the value at x=N; auc: the mean of the curve up to x=N
        # target: 0.1           # to_target: x until the metric first reaches this value
        where: {dataset.batch_size: 4}   # optional: only these panels (default: every panel)
        min_effect: 0.0         # optional
        # eval_seq_len: 160     # a test metric at this test length (a preset's test_seq_lens)

Per panel, the effect is the mean over seeds of value(than) - value(better), so a positive effect supports
the claim. Runs are paired by seed (the seeds both lines ran); without 3 common seeds the two lines are
compared unpaired (Welch). The 95% interval is Student t's on that mean (scipy.stats.t): no resampling,
so it is exactly reproducible. held: the interval lies above min_effect; contradicted: below -min_effect;
inconclusive otherwise, and always with fewer than 3 seeds. A claim over several panels holds only if it
holds in every one, and is contradicted if it is contradicted in any.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

MEASURES = ("final", "best", "at", "auc", "to_target")
SPLITS = ("train", "val", "test")
X_KEYS = ("step", "epoch", "time")
MIN_SEEDS = 3
CONFIDENCE = 0.95
METHOD = ("95% Student t interval on the mean over seeds of (than - better), paired by seed "
          "(Welch's unpaired interval when the two lines share fewer than 3 seeds); held if it lies above "
          "min_effect, contradicted if below -min_effect, else inconclusive; fewer than 3 seeds: inconclusive")
HELD, CONTRADICTED, INCONCLUSIVE = "held", "contradicted", "inconclusive"


class ClaimError(ValueError):
    """A claim in a preset that cannot be evaluated as written."""


@dataclass
class Claim:
    id: str
    text: str
    better: Any
    than: Any
    metric: str  # split/name
    measure: str = "final"
    x: str = "step"
    at: float | None = None
    target: float | None = None
    where: dict[str, Any] = field(default_factory=dict)
    min_effect: float = 0.0
    eval_seq_len: int | None = None  # test metrics only: the run's test at this length (test_seq_lens)

    @property
    def split(self) -> str:
        return self.metric.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.metric.split("/", 1)[1]

    def describe(self) -> str:
        """'val/error final', 'train/loss auc to epoch 2', ... as a table cell."""
        text = f"{self.metric} {self.measure}" + (f" at length {self.eval_seq_len}" if self.eval_seq_len else "")
        if self.measure == "at":
            text += f" {self.x} {self.at:g}"
        elif self.measure == "auc":
            text += f" to {self.x} {self.at:g}" if self.at is not None else f" over {self.x}s"
        elif self.measure == "to_target":
            text += f" {self.target:g} in {self.x}s"
        return text


def parse_claim(raw: dict[str, Any]) -> Claim:
    """A claim from a config's `claims:` entry; a ClaimError names the bad field and what is allowed."""
    raw = dict(raw)
    cid = raw.get("id", "?")
    for key in ("id", "text", "better", "than", "metric"):
        if raw.get(key) in (None, ""):
            raise ClaimError(f"claim {cid}: `{key}` is missing (each claim needs id, text, better, than, metric).")
    known = set(Claim.__dataclass_fields__)
    if unknown := sorted(set(raw) - known):
        raise ClaimError(f"claim {cid}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}.")
    claim = Claim(**{**raw, "where": dict(raw.get("where") or {}), "min_effect": float(raw.get("min_effect") or 0.0)})
    split, _, name = claim.metric.partition("/")
    if split not in SPLITS or not name:
        raise ClaimError(f"claim {cid}: metric={claim.metric!r} is not split/name with split one of {', '.join(SPLITS)} (e.g. val/error).")
    if claim.measure not in MEASURES:
        raise ClaimError(f"claim {cid}: measure={claim.measure!r} is not one of {', '.join(MEASURES)}.")
    if claim.x not in X_KEYS:
        raise ClaimError(f"claim {cid}: x={claim.x!r} is not one of {', '.join(X_KEYS)}.")
    if claim.measure == "at" and claim.at is None:
        raise ClaimError(f"claim {cid}: measure=at needs `at: N` (the {claim.x} to read the metric at).")
    if claim.measure == "to_target" and claim.target is None:
        raise ClaimError(f"claim {cid}: measure=to_target needs `target: VALUE`.")
    if claim.eval_seq_len is not None and claim.split != "test":
        raise ClaimError(f"claim {cid}: eval_seq_len is for test metrics (test_seq_lens), not {claim.metric}.")
    if claim.split == "test" and claim.measure != "final":
        raise ClaimError(f"claim {cid}: a test metric has one value per run: use measure=final, not {claim.measure}.")
    return claim


def claims_of(configs: Iterable[dict[str, Any]]) -> list[Claim]:
    """The claims the runs' configs declare, each id once (every job of a sweep carries the same list)."""
    seen: dict[str, Claim] = {}
    for config in configs:
        for raw in config.get("claims") or ():
            claim = parse_claim(raw)
            seen.setdefault(claim.id, claim)
    return list(seen.values())


# ---- one run's number -------------------------------------------------------------------------
def run_measure(claim: Claim, points: dict[int, tuple[float, float]], summary: dict[str, Any] | None) -> float | None:
    """The claim's number for one run. points: step -> (x, value) of the claim's split and metric.
    summary: the run's summary.json (test metrics exist once per run, there)."""
    if claim.split == "test":
        summary = summary or {}
        test = summary.get("test_at_len", {}).get(str(claim.eval_seq_len)) if claim.eval_seq_len else summary.get("test")
        v = (test or {}).get(claim.name)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
    curve = [points[s] for s in sorted(points)]
    if not curve:
        return None
    if claim.measure == "final":
        return curve[-1][1]
    if claim.measure == "best":
        return min(y for _, y in curve)
    if claim.measure == "at":
        upto = [y for xv, y in curve if xv <= claim.at + 1e-9]
        return upto[-1] if upto else None
    if claim.measure == "auc":
        upto = [y for xv, y in curve if claim.at is None or xv <= claim.at + 1e-9]
        return statistics.fmean(upto) if upto else None
    # to_target: x of the first value at or below the target; a run that never gets there counts its
    # whole budget (a lower bound on its true time, so the claim is judged conservatively either way)
    return next((xv for xv, y in curve if y <= claim.target), curve[-1][0])


# ---- the statistics ---------------------------------------------------------------------------
@dataclass
class Comparison:
    """One panel's evidence: the effect (than - better, positive supports the claim) and its interval."""

    panel: str
    n: int
    effect: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    paired: bool = True
    verdict: str = INCONCLUSIVE
    reason: str = ""
    better_mean: float | None = None
    than_mean: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def t_quantile(df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + CONFIDENCE / 2, df))


def compare(panel: str, better: dict[Any, float], than: dict[Any, float], min_effect: float = 0.0) -> Comparison:
    """better/than: seed -> the run's number. The verdict of one panel."""
    common = sorted(set(better) & set(than), key=str)
    bm = statistics.fmean(better.values()) if better else None
    tm = statistics.fmean(than.values()) if than else None
    if not better or not than:
        missing = "better" if not better else "than"
        return Comparison(panel, 0, reason=f"no completed run of the `{missing}` line", better_mean=bm, than_mean=tm)
    if len(common) >= MIN_SEEDS:
        diffs = [than[s] - better[s] for s in common]
        n, effect = len(diffs), statistics.fmean(diffs)
        half = t_quantile(n - 1) * statistics.stdev(diffs) / math.sqrt(n)
        cmp = Comparison(panel, n, effect, effect - half, effect + half, True, better_mean=bm, than_mean=tm)
    else:
        n = min(len(better), len(than))
        effect = tm - bm
        if n < MIN_SEEDS:
            seeds = f"{len(common)} paired seed(s)" if common else f"{len(better)} vs {len(than)} seed(s)"
            return Comparison(panel, n, effect, paired=bool(common), reason=f"n<{MIN_SEEDS}: {seeds}", better_mean=bm, than_mean=tm)
        va, vb = statistics.variance(than.values()) / len(than), statistics.variance(better.values()) / len(better)
        se = math.sqrt(va + vb)
        # Welch-Satterthwaite degrees of freedom
        df = (va + vb) ** 2 / ((va**2 / (len(than) - 1) + vb**2 / (len(better) - 1)) or 1e-300)
        half = t_quantile(df) * se
        cmp = Comparison(panel, n, effect, effect - half, effect + half, False, better_mean=bm, than_mean=tm)
    if cmp.ci_low > min_effect:
        cmp.verdict = HELD
    elif cmp.ci_high < -min_effect:
        cmp.verdict = CONTRADICTED
    else:
        cmp.reason = f"the interval includes {'0' if not min_effect else f'[-{min_effect:g}, {min_effect:g}]'}"
    return cmp


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    comparisons: list[Comparison]
    reason: str = ""

    @property
    def headline(self) -> Comparison | None:
        """The panel that decides: a contradicting one, else the weakest (lowest interval)."""
        if not self.comparisons:
            return None
        bad = [c for c in self.comparisons if c.verdict == CONTRADICTED]
        if bad:
            return max(bad, key=lambda c: c.ci_high)
        return min(self.comparisons, key=lambda c: (c.ci_low if c.ci_low is not None else -math.inf))

    def as_dict(self) -> dict[str, Any]:
        h = self.headline
        return {
            "id": self.claim.id, "text": self.claim.text, "verdict": self.verdict,
            "effect": h.effect if h else None, "ci_low": h.ci_low if h else None, "ci_high": h.ci_high if h else None,
            "n_seeds": min((c.n for c in self.comparisons), default=0),
            "panels": [c.as_dict() for c in self.comparisons],
            "better": self.claim.better, "than": self.claim.than, "measure": self.claim.describe(),
            "min_effect": self.claim.min_effect, "reason": self.reason, "method": METHOD,
        }


def combine(claim: Claim, comparisons: list[Comparison]) -> Verdict:
    if not comparisons:
        return Verdict(claim, INCONCLUSIVE, [], "no panel of this sweep matches the claim's `where`")
    verdicts = [c.verdict for c in comparisons]
    if CONTRADICTED in verdicts:
        return Verdict(claim, CONTRADICTED, comparisons)
    if all(v == HELD for v in verdicts):
        return Verdict(claim, HELD, comparisons)
    reasons = [f"{c.panel}: {c.reason}" if len(comparisons) > 1 else c.reason for c in comparisons if c.verdict != HELD]
    return Verdict(claim, INCONCLUSIVE, comparisons, "; ".join(reasons))


def evaluate(claim: Claim, panels: list[tuple[str, dict[str, Any], Callable[[Any], dict[Any, float]]]]) -> Verdict:
    """panels: (title, {panel key: value}, line value -> {seed: number}) for each panel of the sweep."""
    comparisons = []
    for title, values, numbers in panels:
        if not all(same(values.get(k, _Missing), v) for k, v in claim.where.items()):
            continue
        comparisons.append(compare(title, numbers(claim.better), numbers(claim.than), claim.min_effect))
    return combine(claim, comparisons)


class _Missing:
    pass


def same(a: Any, b: Any) -> bool:
    """Config values equal as the user wrote them: 1.0 == '1.0', 4 == '4'."""
    return a == b or str(a) == str(b)


def fmt_effect(d: dict[str, Any], digits: int = 3) -> str:
    """'0.0123 [0.004, 0.021]' from a claims.json entry."""
    if d.get("effect") is None:
        return "—"
    text = f"{d['effect']:.{digits}g}"
    if d.get("ci_low") is not None:
        text += f" [{d['ci_low']:.{digits}g}, {d['ci_high']:.{digits}g}]"
    return text
