"""The family a verdict is adjusted over is declared in the presets, not whatever a page judged: the same runs
read the same verdict, with the same interval, on their preset's report and on `lnbench check`'s page; and a
claim the presets do not declare in the family it names is adjusted apart, never changing that family's size."""

import numpy as np
import pytest

from calibration import simulate, synthetic
from lnbench import report
from lnbench.check import cli as check
from lnbench.check.page import adjusted
from lnbench.claims import family
from lnbench.claims.plan import plan_judging
from lnbench.report import claims_text

PRIMARY = plan_judging(family_size=23)  # 21 seeds, looks 14 and 21


def test_every_preset_claim_declares_its_family_and_the_simulations_use_their_sizes():
    declared = family.declared()
    assert {f: len(ids) for f, ids in declared.items()} == simulate.FAMILIES
    assert "xiong.preln_faster_without_warmup" in declared["beyond"] and "fixup.bn_vs_fixup" in declared["beyond"]
    assert "longer_seqs.ln_beats_bn_at_train_len" in declared["control"]


def _sweep(root, rng, cid, effect, fam="primary"):
    n = PRIMARY.max_seeds
    shared = 0.01 * rng.normal(size=n)
    judge = {"quiet": 1.0 + shared, "noisy": 1.0 + shared - effect + 0.004 * rng.normal(size=n)}
    claims = [synthetic.claim(cid, family=fam)]
    sweep = synthetic.SyntheticSweep(synthetic.tuned(rng, ("quiet", "noisy")), judge, claims, plan=PRIMARY)
    rep = report.make_report(root, report.load_runs(synthetic.write(root, sweep)), {}, x_axes=())
    return check.Outcome(cid, root, 1.0, (0.0, 0.0), 0, rep.verdicts)


def test_the_same_runs_read_the_same_verdict_on_their_report_and_on_the_check_page(tmp_path):
    rng = np.random.default_rng(0)
    a, b = "fig6.ln_beats_bn_at_batch_4", "pmnist.ln_lstm_beats_lstm"  # two of the 23 primary claims, on made-up runs
    one, two = _sweep(tmp_path / "a", rng, a, 0.03), _sweep(tmp_path / "b", rng, b, 0.004)
    alone = one.verdicts[0]
    assert alone["family"] == alone["adjusted_in"] == "primary" and alone["family_size"] == 23  # whatever was run
    for method in ("bonferroni", "none"):
        page = {d["id"]: d for d in adjusted([one, two], method)}
        solo = {d["id"]: d for d in adjusted([one], method)}
        keys = ("verdict", "p_adjusted", "ci_low", "ci_high", "level")
        assert [page[a][k] for k in keys] == [solo[a][k] for k in keys]
        if method == "bonferroni":  # the preset's own report (bonferroni by default) reads the same
            assert [page[a][k] for k in keys] == [alone[k] for k in keys]
    # 14 of 14 agreeing seeds pass at the first look's share: frozen there, and the page says which look
    assert alone["verdict"] == "held" and alone["decided_at"] == 14 and alone["n_seeds"] == 21
    assert alone["level"] == pytest.approx(PRIMARY.shares[0] * 0.05 / 23, rel=1e-5) and alone["ci_low"] > 0
    assert "(look 14)" in claims_text.effect_text(alone)
    assert alone["mde"] == PRIMARY.mde and "MDE" not in alone["reason"]


def test_a_claim_the_presets_do_not_declare_in_its_family_is_adjusted_apart(tmp_path):
    rng = np.random.default_rng(1)
    real = _sweep(tmp_path / "a", rng, "fig6.ln_beats_bn_at_batch_4", 0.03)
    made_up = _sweep(tmp_path / "b", rng, "my.own_claim", 0.03)  # `family: primary`, but no preset declares it
    for method in ("bonferroni", "holm"):
        page = {d["id"]: d for d in adjusted([real, made_up], method)}
        assert page["fig6.ln_beats_bn_at_batch_4"]["family_size"] == 23  # not 24
        assert page["my.own_claim"]["adjusted_in"] == family.UNDECLARED and page["my.own_claim"]["family_size"] == 1
    assert made_up.verdicts[0]["adjusted_in"] == family.UNDECLARED  # its preset's report too
    assert family.sizes([("fig6.ln_beats_bn_at_batch_4", "primary"), ("my.own_claim", "primary")])["primary"] == 23
    lines = claims_text.lines(adjusted([real, made_up], "bonferroni"), "bonferroni")
    assert any(line.startswith("adjusted apart") and "my.own_claim" in line for line in lines)
