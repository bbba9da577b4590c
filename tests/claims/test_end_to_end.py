"""Verdicts end to end: synthetic sweeps laid out as `lnbench check` leaves them (lnbench/check/synthetic.py),
judged by `lnbench report` itself; its claims.json, report.md, report.html and terminal output read back.

- The skewed null (a noisier model whose seeds are occasionally much worse, equal means): false held at most
  2.5% plus three binomial standard errors (30 sweeps by default, 300 per spread with `-m slow`).
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

from lnbench import report
from lnbench.check import synthetic
from lnbench.claims.decision import reads

LOOKS = [3, 6, 9]


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


def claim_rows(md: str) -> list[list[str]]:
    lines = [line for line in md.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [r for r in cells if is_claim_row(r)]


def is_claim_row(row: list[str]) -> bool:
    return len(row) > 7 and row[4].split(" ")[0] in ("held", "contradicted", "equivalent", "inconclusive")


def disagreements(entries, md: str, html_rows, terminal: str) -> list[str]:
    """Every place where a verdict stands beside an interval that reads another verdict, or a blocked claim shows
    an effect."""
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
    for where, rows in (
        ("report.md", claim_rows(md)),
        ("terminal", claim_rows(terminal)),
        ("report.html", [r for r in html_rows if is_claim_row(r)]),
    ):
        for row in rows:
            verdict, effect, margin = row[4].split(" ")[0], row[6], row[7]
            m = re.search(r"\[([-+0-9.e]+), ([-+0-9.e]+)\] at", effect)
            width = float(margin.split(" ")[0].lstrip("±")) if margin.startswith("±") else 0.0
            if m and reads(float(m[1]), float(m[2]), width) != verdict:
                bad.append(f"{where}: {verdict} beside {effect} (min_effect {margin})")
    return bad


def test_the_skewed_null_reads_held_rarely_end_to_end(tmp_path):
    rng = np.random.default_rng(3)
    held = 0
    for i in range(30):
        sweep = synthetic.skewed_null(rng, 5.0, LOOKS)
        entries, md, rows, terminal = run_report(synthetic.write(tmp_path / f"s{i}", sweep))
        held += entries[0]["verdict"] == "held"
        assert not disagreements(entries, md, rows, terminal)
    assert held / 30 <= bound(0.025, 30)


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [5.0, 10.0])
def test_the_skewed_null_reads_held_rarely_end_to_end_many_sweeps(tmp_path, ratio):
    held, n = synthetic.false_held(300, ratio, LOOKS, seed=int(ratio))
    assert held / n <= bound(0.025, n)


def _judged(rng, d_noisy_minus_quiet, n_claims=1, **kw):
    """Judging seeds where noisy - quiet is the given difference (seed by seed), with a shared seed effect."""
    n = len(d_noisy_minus_quiet)
    shared = 0.01 * rng.normal(size=n)
    judge = {"quiet": 1.0 + shared, "noisy": 1.0 + shared + np.asarray(d_noisy_minus_quiet)}
    claims = [synthetic.claim(f"c{i}") for i in range(n_claims)]
    return synthetic.Sweep(synthetic.tuned(rng, ("quiet", "noisy")), judge, claims, LOOKS, **kw)


def scenarios(rng):
    lucky = -0.01 * np.array([1.0, 0.2, 1.5, 0.1, 0.8, 1.2, 0.3, 0.05, 2.0])  # 9 of 9 agree, t about 3.5
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
        if name == "family_only":
            assert d["raw_verdict"] == "held" and d["family_size"] == 8 and d["ci_low"] < 0 < d["ci_high"]
        elif name == "edge":
            assert d["reason"].startswith("grid edge: noisy chose lr=0.01") and d["effect"] is None
        elif name == "guessing":
            assert d["reason"].startswith("no learning: neither line's val/loss final")
            assert "trivial predictor's 2.3" in d["reason"]
        elif name == "reversal":
            assert d["looks"] == LOOKS and d["decided_at"] == 9 and d["ci_low"] < 0 < d["ci_high"]  # 6 cannot decide


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
