"""From the runs' numbers to a verdict: one panel (compare), one claim over its panels and looks
(judge_claim), the family of claims one page judges (adjust). The tests themselves are lnbench/claims/stats.py's;
docs/verdicts.md gives the reasons and the simulated error rates.

- A panel compares the two lines seed by seed: d = value(than) - value(better), positive supports the claim.
  Exact values: a paired Student t test. A run that diverged (worse than any value) or never reached a
  to_target target (censored) makes the sign of its pair known but not its size: then the exact sign test
  decides. Lines without 3 common seeds: Welch's unpaired t test.
- Judging seeds (stage=judge: fresh seeds at the hyperparameters the tuning seeds chose) are judged in the
  looks of the design that added them (lnbench check: 3, 6, 9 seeds), each look spending its share of alpha
  (stats.spending, stats.sequential), so adding seeds to an inconclusive claim keeps its error rate.
- A claim over several panels: held only where held in every panel (intersection-union), contradicted where
  contradicted in any (Bonferroni over panels), practically equivalent only where so in every panel.
- The family: the verdict is Holm-adjusted over every claim a page judges (Benjamini-Hochberg on request);
  the unadjusted verdict stands beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lnbench.claims import stats
from lnbench.claims.spec import Claim, Value

MIN_SEEDS = 3
HELD, CONTRADICTED, EQUIVALENT, INCONCLUSIVE = "held", "contradicted", "equivalent", "inconclusive"
KINDS = (HELD, CONTRADICTED, EQUIVALENT)  # stats.HELD, stats.CONTRA, stats.EQUIV
METHOD = ("paired Student t test on (than - better) over judging seeds (the sign test where a run diverged or "
          "never reached its target; Welch without 3 common seeds); held/contradicted: the 95% interval beyond "
          "±min_effect, equivalent: inside it; looks spend alpha linearly in seeds; panels: intersection-union "
          "for held, Bonferroni for contradicted; family: {adjust}")


@dataclass
class Look:
    n: int
    p_held: float
    p_contra: float
    p_equiv: float


@dataclass
class Panel:
    """One panel's evidence for a claim."""

    panel: str
    n: int = 0
    method: str = ""
    effect: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    sd: float | None = None
    effect_size: float | None = None  # mean / sd of the differences
    p_improve: float | None = None  # P(better < than) over paired seeds
    boot_low: float | None = None
    boot_high: float | None = None
    margin: float = 0.0
    verdict: str = INCONCLUSIVE  # this panel alone, at 95%
    reason: str = ""
    better_mean: float | None = None
    than_mean: float | None = None
    seeds: list = field(default_factory=list)
    looks: list[Look] = field(default_factory=list)
    lines: dict[str, Any] = field(default_factory=dict)  # per line: how it was chosen and judged (the caller's)
    values: dict[str, Any] = field(default_factory=dict)  # per line: seed -> its number (the caller's, for plots)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["looks"] = [lk.__dict__ for lk in self.looks]
        return d


def _seed_order(s: Any) -> tuple:
    return (0, s, "") if isinstance(s, (int, float)) else (1, 0, str(s))


def compare(panel: str, better: dict[Any, Value], than: dict[Any, Value], claim: Claim,
            looks: list[int] | None = None, blocked: str = "") -> Panel:
    """better/than: seed -> the run's Value. looks: the design's numbers of seeds (None: one look at every
    common seed). blocked: a reason this panel cannot be judged (no learning, a seed that failed)."""
    finite = [v.x for v in than.values() if v.exact]
    p = Panel(panel, better_mean=_mean(better), than_mean=_mean(than), margin=claim.margin(np.mean(finite) if finite else None))
    if blocked:  # the mean difference is still shown, without an interval or a test
        _too_few(p, better, than, sorted(set(better) & set(than), key=_seed_order))
        p.reason = blocked
        return p
    if not better or not than:
        p.reason = f"no run of the `{'better' if not better else 'than'}` line"
        return p
    common = sorted(set(better) & set(than), key=_seed_order)
    if len(common) < MIN_SEEDS:
        return _unpaired(p, better, than) if min(len(better), len(than)) >= MIN_SEEDS else _too_few(p, better, than, common)
    design = looks
    looks = [n for n in (looks or [len(common)]) if n <= len(common)]
    if not looks:
        p.reason = f"n<{MIN_SEEDS}: {len(common)} paired judging seed(s)"
        return p
    lo = np.array([than[s].low - better[s].high for s in common])
    hi = np.array([than[s].high - better[s].low for s in common])
    lo, hi = np.where(np.isnan(lo), -np.inf, lo), np.where(np.isnan(hi), np.inf, hi)  # both diverged: order unknown
    exact = all(than[s].exact and better[s].exact for s in common)
    res = max(v.resolution for s in common for v in (than[s], better[s]))
    for n in looks:
        ps = stats.paired_t(lo[:n], p.margin, res)[:3] if exact else stats.sign_test(lo[:n], hi[:n], p.margin)
        p.looks.append(Look(n, *(float(x) for x in ps)))
    n = looks[-1]
    p.n, p.seeds = n, common[:n]
    p.p_improve = stats.p_improvement(lo[:n], hi[:n])
    if exact:
        _describe_t(p, lo[:n], res)
    else:
        odd = sum(not (than[s].exact and better[s].exact) for s in common[:n])
        p.method = f"sign test ({odd} of {n} pairs diverged or never reached the target)"
    p.verdict, p.reason = _panel_verdict(p, _weights(design, looks))
    return p


def _describe_t(p: Panel, d: np.ndarray, res: float) -> None:
    _, _, _, mean, se, df = stats.paired_t(d, p.margin, res)
    p.method = "paired t"
    p.effect, p.sd = float(mean), float(se * math.sqrt(len(d)))
    p.ci_low, p.ci_high = (float(x) for x in stats.interval(mean, se, df))
    p.effect_size = p.effect / p.sd if p.sd > 0 else None
    p.boot_low, p.boot_high = stats.bootstrap_interval(d)


def _unpaired(p: Panel, better: dict, than: dict) -> Panel:
    if not all(v.exact for v in (*better.values(), *than.values())):
        p.reason = "unpaired seeds with a run that diverged or never reached the target: no test applies"
        return p
    tv, bv = [v.x for v in than.values()], [v.x for v in better.values()]
    ph, pc, pe, mean, se, df = stats.welch_t(tv, bv, p.margin)
    p.looks = [Look(min(len(tv), len(bv)), float(ph), float(pc), float(pe))]
    p.n, p.method, p.effect = min(len(tv), len(bv)), "Welch t (unpaired)", float(mean)  # no sd of differences: no MDE
    p.ci_low, p.ci_high = (float(x) for x in stats.interval(mean, se, df))
    p.verdict, p.reason = _panel_verdict(p, np.ones(1))
    return p


def _too_few(p: Panel, better: dict, than: dict, common: list) -> Panel:
    p.n = len(common) if common else min(len(better), len(than))
    ex = [than[s].x - better[s].x for s in common if than[s].exact and better[s].exact]
    p.effect = float(np.mean(ex)) if ex else None
    p.reason = f"n<{MIN_SEEDS}: " + (f"{len(common)} paired seed(s)" if common else f"{len(better)} vs {len(than)} seed(s)")
    return p


def _panel_verdict(p: Panel, weights: np.ndarray) -> tuple[str, str]:
    ps = [stats.sequential([getattr(lk, k) for lk in p.looks], weights) for k in ("p_held", "p_contra", "p_equiv")]
    pd, kind = stats.decide(*ps)
    if pd <= stats.ALPHA:
        return KINDS[int(kind)], ""
    if p.sd == 0 and p.method == "paired t":
        return INCONCLUSIVE, "every difference is equal: no spread to estimate an interval from"
    return INCONCLUSIVE, "the interval includes " + (f"±{p.margin:.3g}" if p.margin else "0")


def _mean(values: dict[Any, Value]) -> float | None:
    xs = [v.x for v in values.values() if v.exact]
    return float(np.mean(xs)) if xs else None


# ---- a claim over its panels ----------------------------------------------------------------------
def judge_claim(claim: Claim, panels: list[Panel], design: list[int] | None = None, note: str = "") -> dict[str, Any]:
    """The claims.json entry of one claim: its p-values (sequential over the design's looks, combined over
    panels), its unadjusted verdict and the panel shown. design: the looks the judging seeds were added in
    (None: one look). The adjusted verdict is set by adjust() over the whole family."""
    entry = {"id": claim.id, "text": claim.text, "better": claim.better, "than": claim.than, "measure": claim.describe(),
             "min_effect": claim.min_effect, "panels": [p.as_dict() for p in panels], "note": note}
    if not panels:
        return {**entry, **_undecided("no panel of the claim's sweep matches its `where`")}
    shared = sorted(set.intersection(*({lk.n for lk in p.looks} for p in panels)))
    if not shared:
        reasons = [f"{p.panel}: {p.reason}" if len(panels) > 1 else p.reason for p in panels if not p.looks]
        return {**entry, **_undecided("; ".join(reasons) or "no look shared by every panel"), **_headline(panels, None)}
    weights = _weights(design, shared)
    per_look = []
    for n in shared:
        got = [next(lk for lk in p.looks if lk.n == n) for p in panels]
        per_look.append(stats.combine_panels(*(np.array([getattr(lk, k) for lk in got]) for k in ("p_held", "p_contra", "p_equiv"))))
    p_held, p_contra, p_equiv = (float(stats.sequential([pl[i] for pl in per_look], weights)) for i in range(3))
    p_decide, kind = stats.decide(p_held, p_contra, p_equiv)
    kind = KINDS[int(kind)]
    raw = kind if p_decide <= stats.ALPHA else INCONCLUSIVE
    blocked = [f"{p.panel}: {p.reason}" if len(panels) > 1 else p.reason for p in panels if not p.looks or p.sd == 0]
    entry.update(p_held=p_held, p_contra=p_contra, p_equiv=p_equiv, p_decide=float(p_decide), kind=kind,
                 raw_verdict=raw, verdict=raw, looks=shared, weight=float(weights[-1]),
                 raw_reason="; ".join(blocked) if raw == INCONCLUSIVE and blocked else "")
    entry.update(_headline(panels, kind))
    return entry


def _weights(design: list[int] | None, shared: list[int]) -> np.ndarray:
    """The alpha share of each shared look: from the design when the looks are its, else one look."""
    if design and all(n in design for n in shared):
        full = stats.spending(design)
        return np.array([full[design.index(n)] for n in shared])
    return stats.spending(shared) if len(shared) > 1 else np.ones(1)


def _headline(panels: list[Panel], kind: str | None) -> dict[str, Any]:
    """The panel a table shows: the one that decides (weakest for held and equivalent, strongest against)."""
    judged = [p for p in panels if p.looks] or panels
    if kind == CONTRADICTED:
        h = min(judged, key=lambda p: p.looks[-1].p_contra if p.looks else 1.0)
    elif kind == EQUIVALENT:
        h = max(judged, key=lambda p: p.looks[-1].p_equiv if p.looks else 1.0)
    else:
        h = max(judged, key=lambda p: p.looks[-1].p_held if p.looks else 1.0)
    return {"panel": h.panel, "effect": h.effect, "ci_low": h.ci_low, "ci_high": h.ci_high, "n_seeds": h.n,
            "sd": h.sd, "p_improve": h.p_improve, "boot_low": h.boot_low, "boot_high": h.boot_high,
            "effect_size": h.effect_size, "margin": h.margin, "method": h.method, "lines": h.lines}


def _undecided(reason: str) -> dict[str, Any]:
    return {"p_held": 1.0, "p_contra": 1.0, "p_equiv": 1.0, "p_decide": 1.0, "kind": None, "raw_verdict": INCONCLUSIVE,
            "verdict": INCONCLUSIVE, "looks": [], "weight": 1.0, "raw_reason": reason, "n_seeds": 0}


# ---- the family ------------------------------------------------------------------------------------
def adjust(entries: list[dict[str, Any]], method: str = "holm", alpha: float = stats.ALPHA) -> None:
    """Sets each entry's `verdict` to its family-adjusted verdict (over all entries), with `p_adjusted`,
    `adjust`, the `level` it faced and, if inconclusive, why: underpowered (its minimum detectable effect at
    that level) or an interval that includes the margin. `raw_verdict` keeps the unadjusted one."""
    if not entries:
        return
    p = np.array([e["p_decide"] for e in entries])
    adjusted = stats.ADJUST[method](p)
    levels = stats.holm_levels(p, alpha) if method == "holm" else (
        alpha * (np.argsort(np.argsort(p, kind="stable"), kind="stable") + 1) / len(p) if method == "bh" else np.full(len(p), alpha))
    for e, pa, level in zip(entries, adjusted, levels):
        e.update(p_adjusted=float(pa), adjust=method, level=float(level * e.get("weight", 1.0)))
        e["verdict"] = e["kind"] if e["kind"] and pa <= alpha else INCONCLUSIVE
        e["reason"] = "" if e["verdict"] != INCONCLUSIVE else _why(e)


def _why(e: dict[str, Any]) -> str:
    if e.get("raw_reason"):
        return e["raw_reason"]
    found = stats.mde(e["sd"], e["n_seeds"], e["level"]) if e.get("sd") and e.get("n_seeds") else None
    e["mde"] = None if found is None else found + (e.get("margin") or 0.0)
    where = f" in {e['panel']}" if len(e.get("panels") or ()) > 1 else ""
    mde = f"MDE {e['mde']:.3g} at {e['n_seeds']} seeds, effect {e['effect']:.3g}" if e["mde"] is not None and e.get("effect") is not None else ""
    if e["raw_verdict"] != INCONCLUSIVE:
        return f"{e['raw_verdict']} before the family adjustment (p {e['p_decide']:.2g}, adjusted {e['p_adjusted']:.2g})" + (f"; {mde}" if mde else "")
    if mde and abs(e["effect"]) < e["mde"]:
        return f"underpowered{where}: {mde}"
    return f"the interval{where} includes " + (f"±{e['margin']:.3g}" if e.get("margin") else "0")


def describe_method(method: str) -> str:
    return METHOD.format(adjust={"holm": "Holm-Bonferroni over the page's claims", "bh": "Benjamini-Hochberg over the page's claims",
                                 "none": "none (unadjusted)"}[method])
