"""Verdicts end to end: synthetic sweeps laid out as `lnbench check` leaves them (calibration/synthetic.py),
judged by `lnbench report` itself; its claims.json, report.md, report.html and terminal output read back.

- Nulls of the declared estimand (P(d > 0) = 1/2: a catastrophe on 10% of the seeds, a skewed line, diverged
  runs): false held at most 2.5% plus three binomial standard errors (24 sweeps by default, 300 per shape with
  `-m slow`).
- Sweeps built to catch a verdict beside an interval that disagrees with it (a reversal after a look, a
  claim decided only before the family adjustment, a grid-edge winner, lines worse than guessing): none reads
  held or contradicted, and no file, page or terminal line shows an interval that reads another verdict."""

import contextlib
import html
import io
import json
import math
import re

import numpy as np
import pytest

from calibration import synthetic
from lnbench import report
from lnbench.claims.decision import reads
from lnbench.claims.plan import plan_judging
from lnbench.report.claims_text import EFFECT

LOOKS = [3, 6, 9]
ALONE = plan_judging(family_size=1)  # 13 seeds, looks 9 and 13


def bound(nominal: float, trials: int) -> float:
    return nominal + 3 * math.sqrt(nominal * (1 - nominal) / trials)


def run_report(root):
    """claims.json, report.md, the HTML table's rows and the terminal output of `lnbench report root`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert report.main([str(root)]) == 0
    folder = root / report.OUT_DIR
    page = (folder / "report.html").read_text()
    rows = [
        [html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)]
        for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S)
    ]
    return json.loads((folder / "claims.json").read_text()), (folder / "report.md").read_text(), rows, out.getvalue()


def table_rows(rows: list[list[str]]) -> list[dict[str, str]]:
    """The claims table's rows as {column: cell}, from rows of cells whose header row names the verdict column."""
    header = next((r for r in rows if "verdict (adjusted)" in r), None)
    if header is None:
        return []
    return [
        dict(zip(header, r))
        for r in rows
        if len(r) == len(header)
        and r[header.index("verdict (adjusted)")].split(" ")[0]
        in ("held", "contradicted", "equivalent", "inconclusive")
    ]


def claim_rows(md: str) -> list[dict[str, str]]:
    lines = [line for line in md.splitlines() if line.startswith("|")]
    return table_rows([[c.strip() for c in line.strip().strip("|").split("|")] for line in lines])


def disagreements(entries, md: str, html_rows, terminal: str) -> list[str]:
    """Every place where a verdict stands beside an interval that reads another verdict, a blocked claim shows an
    effect, or a claim does not name its estimand."""
    shown = [d for d in entries if d["ci_low"] is not None]
    bad = [
        f"claims.json {d['id']}: {d['verdict']} beside [{d['ci_low']}, {d['ci_high']}] ±{d['margin']}"
        for d in shown
        if reads(d["ci_low"], d["ci_high"], d["margin"]) != d["verdict"]
    ]
    bad += [
        f"claims.json {d['id']}: blocked, effect {d['effect']}"
        for d in entries
        if d["raw_reason"] and d["effect"] is not None
    ]
    bad += [
        f"claims.json {d['id']}: estimand {d.get('estimand')!r}"
        for d in entries
        if d.get("estimand") not in ("median", "mean")
    ]
    for where, rows in (
        ("report.md", claim_rows(md)),
        ("terminal", claim_rows(terminal)),
        ("report.html", table_rows(html_rows)),
    ):
        for row in rows:
            verdict, effect, margin = row["verdict (adjusted)"].split(" ")[0], row[EFFECT], row["min_effect"]
            m = re.search(r"\[([-+0-9.e]+), ([-+0-9.e]+)\] at", effect)
            width = float(margin.split(" ")[0].lstrip("±")) if margin.startswith("±") else 0.0
            if m and reads(float(m[1]), float(m[2]), width) != verdict:
                bad.append(f"{where}: {verdict} beside {effect} (min_effect {margin})")
            if not row["estimand"].startswith(("median", "mean")):
                bad.append(f"{where}: estimand {row['estimand']!r}")
    return bad


SHAPES = ["catastrophe 10%", "skewed 5x", "diverged"]


def test_nulls_of_the_declared_estimand_read_held_rarely_end_to_end(tmp_path):
    rng = np.random.default_rng(3)
    held = 0
    for i in range(24):
        sweep = synthetic.null_sweep(rng, SHAPES[i % 3], ALONE)
        entries, md, rows, terminal = run_report(synthetic.write(tmp_path / f"s{i}", sweep))
        held += entries[0]["verdict"] == "held"
        assert not disagreements(entries, md, rows, terminal)
        assert entries[0]["max_seeds"] == 13 and entries[0]["planned_looks"] == [9, 13]
    assert held / 24 <= bound(0.025, 24)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_nulls_of_the_declared_estimand_read_held_rarely_end_to_end_many_sweeps(tmp_path, shape):
    held, n = synthetic.false_held(300, shape, ALONE, seed=len(shape))
    assert held / n <= bound(0.025, n)


def _judged(rng, d_noisy_minus_quiet, n_claims=1, **kw):
    """Judging seeds where noisy - quiet is the given difference (seed by seed), with a shared seed effect."""
    n = len(d_noisy_minus_quiet)
    shared = 0.01 * rng.normal(size=n)
    judge = {"quiet": 1.0 + shared, "noisy": 1.0 + shared + np.asarray(d_noisy_minus_quiet)}
    claims = [synthetic.claim(f"c{i}") for i in range(n_claims)]
    return synthetic.SyntheticSweep(synthetic.tuned(rng, ("quiet", "noisy")), judge, claims, LOOKS, **kw)


def scenarios(rng):
    lucky = -0.01 * np.array([1.0, 0.2, 1.5, 0.1, -0.8, 1.2, 0.3, 0.05, 2.0])  # 8 of 9 agree: p = 10/512
    reversal = _judged(rng, np.r_[-0.05 * np.ones(6), 0.2 * np.ones(3)] + 0.005 * rng.normal(size=9))  # at look 9
    family_only = _judged(rng, lucky, n_claims=8)  # decided alone; not as 1 of 8 claims
    edge = _judged(rng, -0.05 + 0.005 * rng.normal(size=9))
    edge.tune["noisy"] = edge.tune["noisy"] - np.array([0, 0, 0.3])[:, None]  # its best value: the grid's top
    guessing = _judged(rng, -0.5 + 0.01 * rng.normal(size=9), on_loss=True)  # both worse than the trivial 2.3
    guessing.judge = {k: v + 2.5 for k, v in guessing.judge.items()}
    guessing.tune = {k: v + 2.5 for k, v in guessing.tune.items()}
    guessing.claims = [synthetic.claim(metric="val/loss")]
    return {"reversal": reversal, "family_only": family_only, "edge": edge, "guessing": guessing}


def test_sweeps_built_to_mislead_read_neither_held_nor_contradicted_and_no_interval_disagrees(tmp_path):
    for name, sweep in scenarios(np.random.default_rng(0)).items():
        entries, md, rows, terminal = run_report(synthetic.write(tmp_path / name, sweep))
        assert not disagreements(entries, md, rows, terminal), name
        assert {d["verdict"] for d in entries} == {"inconclusive"}, (name, [d["reason"] for d in entries])
        d = entries[0]
        if name == "family_only":  # held alone (2p = 0.039), not as 1 of 8 (0.31)
            assert d["raw_verdict"] == "held" and d["family_size"] == 8 and d["ci_low"] < 0 < d["ci_high"]
        elif name == "edge":
            assert d["reason"].startswith("grid edge: noisy chose lr=0.01") and d["effect"] is None
        elif name == "guessing":
            assert d["reason"].startswith("no learning: neither line's val/loss final")
            assert "trivial predictor's 2.3" in d["reason"]
        elif name == "reversal":  # looks 3 and 6 cannot decide (share 0: 1/8, 1/64 > 2.5% of their share)
            assert d["looks"] == LOOKS and d["planned_shares"] == [0.0, 0.0, 1.0] and d["decided_at"] == 9
            assert d["ci_low"] < 0 < d["ci_high"] and "(look 9)" in claim_rows(md)[0][EFFECT]


def test_a_diverged_judging_seed_decides_for_the_line_that_did_not_diverge(tmp_path):
    rng = np.random.default_rng(1)
    sweep = _judged(rng, -0.05 + 0.005 * rng.normal(size=9), diverged={"quiet": {4}})
    entries, md, rows, terminal = run_report(synthetic.write(tmp_path, sweep))
    d = entries[0]
    assert d["verdict"] == "held" and d["n_seeds"] == 9 and "1 of 9 pairs diverged" in d["method"]
    assert d["sign"].startswith("9 of 9") and d["ci_low"] > 0 and not disagreements(entries, md, rows, terminal)


def test_the_disagreement_check_finds_a_verdict_beside_an_interval_that_reads_another(tmp_path):
    rng = np.random.default_rng(2)
    sweep = _judged(rng, -0.05 + 0.005 * rng.normal(size=9))
    entries, md, rows, terminal = run_report(synthetic.write(tmp_path, sweep))
    assert entries[0]["verdict"] == "held" and claim_rows(md) and claim_rows(terminal)
    assert not disagreements(entries, md, rows, terminal)
    forged = [{**entries[0], "verdict": "inconclusive"}]
    assert disagreements(forged, md.replace("| held |", "| inconclusive |", 1), [], "")
