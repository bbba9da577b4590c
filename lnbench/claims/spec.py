"""Claims as data, and one run's number for a claim. How the numbers become a verdict: lnbench/claims/verdicts.py.

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
        min_effect: 1%          # optional: the smallest difference that matters (a number, or % of `than`
                                #   on the tuning runs at the chosen value, fixed before any judging seed)
        family: primary         # the family adjusted together (primary: the paper's own; control; beyond)
        # eval_seq_len: 160     # a test metric at this test length (a preset's test_seq_lens)
        # estimand: median      # median (default): `better` beats `than` by more than the margin on most
                                #   seeds, exact sign tests; mean: the mean difference, a t test whose verdict
                                #   rests on the seeds' tails (flagged where a seed lies beyond 3 IQR)
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

MEASURES = ("final", "best", "at", "auc", "to_target")
MEDIAN, MEAN = "median", "mean"
ESTIMANDS = {
    MEDIAN: "most seeds: P(d > margin) > 1/2, the median paired difference (exact sign tests)",
    MEAN: "the mean paired difference (paired t test): rests on the seeds' tails",
}
SPLITS = ("train", "val", "test")
X_KEYS = ("step", "epoch", "time")


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
    min_effect: float | str = 0.0  # a number in the measure's units, or "N%" of the `than` line's mean
    eval_seq_len: int | None = None  # test metrics only: the run's test at this length (test_seq_lens)
    family: str = ""  # declared in the preset (primary, control, beyond); "": the page's undeclared claims
    estimand: str = MEDIAN  # what a verdict is about (ESTIMANDS)

    @property
    def split(self) -> str:
        return self.metric.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.metric.split("/", 1)[1]

    def margin(self, than_mean: float | None) -> float:
        """min_effect in the measure's units: a percentage is of the `than` line's mean on the runs given (the
        tuning runs at the chosen value, so that the margin is fixed before the judging seeds run)."""
        if isinstance(self.min_effect, str):
            return (
                float(self.min_effect.rstrip("%")) / 100 * abs(than_mean)
                if than_mean is not None and math.isfinite(than_mean)
                else 0.0
            )
        return float(self.min_effect)

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
    if not isinstance(raw, dict):
        raise ClaimError(f"claim {raw!r} is not a mapping of fields (id, text, better, than, metric, ...).")
    raw = dict(raw)
    cid = raw.get("id", "?")
    for key in ("id", "text", "better", "than", "metric"):
        if raw.get(key) in (None, ""):
            raise ClaimError(f"claim {cid}: `{key}` is missing (each claim needs id, text, better, than, metric).")
    known = set(Claim.__dataclass_fields__)
    if unknown := sorted(set(raw) - known):
        raise ClaimError(f"claim {cid}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}.")
    claim = Claim(
        **{**raw, "where": dict(raw.get("where") or {}), "min_effect": _min_effect(cid, raw.get("min_effect"))}
    )
    split, _, name = claim.metric.partition("/")
    if split not in SPLITS or not name:
        raise ClaimError(
            f"claim {cid}: metric={claim.metric!r} is not split/name with split one of {', '.join(SPLITS)} "
            "(e.g. val/error)."
        )
    if claim.estimand not in ESTIMANDS:
        raise ClaimError(
            f"claim {cid}: estimand={claim.estimand!r} is not one of {', '.join(ESTIMANDS)} (median, the default: "
            "better on most seeds, exact; mean: the mean difference, resting on the seeds' tails)."
        )
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


def _min_effect(cid: str, value: Any) -> float | str:
    if value in (None, ""):
        return 0.0
    text = str(value).strip()
    try:
        number = float(text[:-1]) if text.endswith("%") else float(text)
    except ValueError:
        number = -1.0
    if not (number >= 0 and math.isfinite(number)):
        raise ClaimError(
            f"claim {cid}: min_effect={value!r} is not allowed: give a number >= 0 in the measure's units, "
            f"or a percentage of the `than` line's mean (e.g. 1%)."
        )
    return f"{number:g}%" if text.endswith("%") else number


def claims_of(configs: Iterable[dict[str, Any]]) -> list[Claim]:
    """The claims the runs' configs declare, each id once (every job of a sweep carries the same list)."""
    seen: dict[str, Claim] = {}
    for config in configs:
        for raw in config.get("claims") or ():
            claim = parse_claim(raw)
            seen.setdefault(claim.id, claim)
    return list(seen.values())


def declares(config: dict[str, Any], claim: Claim) -> bool:
    """Whether a run's config declares the claim: a claim is judged only on the runs of the sweep that made it."""
    return any(isinstance(raw, dict) and raw.get("id") == claim.id for raw in config.get("claims") or ())


# ---- one run's number -------------------------------------------------------------------------
@dataclass(frozen=True)
class Value:
    """A run's number for a claim. x = inf: the run diverged (worse than any finite value). censored: the true
    value lies above x (a target not reached by the run's last evaluation). resolution: values closer than this
    cannot be told apart (to_target: the spacing of the evaluations)."""

    x: float
    censored: bool = False
    resolution: float = 0.0

    @property
    def low(self) -> float:
        # censored: strictly above its last evaluation, so that a pair with a run that reached the target at
        # that same evaluation keeps its known order
        return math.nextafter(self.x, math.inf) if self.censored else self.x

    @property
    def high(self) -> float:
        return math.inf if self.censored else self.x

    @property
    def exact(self) -> bool:
        return not self.censored and math.isfinite(self.x)


DIVERGED = Value(math.inf)


def run_measure(claim: Claim, points: dict[int, tuple[float, float]], summary: dict[str, Any] | None) -> Value | None:
    """The claim's number for one completed run. points: step -> (x, value) of the claim's split and metric.
    summary: the run's summary.json (test metrics exist once per run, there)."""
    if claim.split == "test":
        summary = summary or {}
        test = (
            summary.get("test_at_len", {}).get(str(claim.eval_seq_len)) if claim.eval_seq_len else summary.get("test")
        )
        v = (test or {}).get(claim.name)
        return Value(float(v)) if isinstance(v, (int, float)) and math.isfinite(v) else None
    curve = [points[s] for s in sorted(points)]
    if not curve:
        return None
    if claim.measure == "final":
        return Value(curve[-1][1])
    if claim.measure == "best":
        return Value(min(y for _, y in curve))
    if claim.measure == "at":
        upto = [y for xv, y in curve if xv <= claim.at + 1e-9]
        return Value(upto[-1]) if upto else None
    if claim.measure == "auc":
        upto = [y for xv, y in curve if claim.at is None or xv <= claim.at + 1e-9]
        return Value(statistics.fmean(upto)) if upto else None
    # to_target: x of the first value at or below the target. Known only to an evaluation's spacing; a run
    # that never gets there is censored at its last evaluation (its true time is later, by how much unknown).
    xs = [xv for xv, _ in curve]
    spacing = statistics.median(b - a for a, b in zip(xs, xs[1:])) if len(xs) > 1 else 0.0
    hit = next((xv for xv, y in curve if y <= claim.target), None)
    return Value(hit, resolution=spacing) if hit is not None else Value(xs[-1], censored=True, resolution=spacing)


def same(a: Any, b: Any) -> bool:
    """Config values equal as the user wrote them: 1.0 == '1.0', 4 == '4'."""
    return a == b or str(a) == str(b)
