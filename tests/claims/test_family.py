"""The family a verdict is adjusted over is declared in the presets, not whatever a page judged: the same runs
read the same verdict, with the same interval, on their preset's report and on `lnbench check`'s page."""

import numpy as np

from lnbench import report
from lnbench.check import cli as check
from lnbench.check import synthetic
from lnbench.check.page import adjusted
from lnbench.claims import family, simulate


def test_every_preset_claim_declares_its_family_and_the_simulations_use_their_sizes():
    declared = family.declared()
    assert {f: len(ids) for f, ids in declared.items()} == simulate.FAMILIES
    assert "xiong.preln_faster_without_warmup" in declared["beyond"] and "fixup.bn_vs_fixup" in declared["beyond"]
    assert "longer_seqs.ln_beats_bn_at_train_len" in declared["control"]


def _sweep(root, rng, cid, effect):
    shared = 0.01 * rng.normal(size=9)
    judge = {"quiet": 1.0 + shared, "noisy": 1.0 + shared - effect + 0.004 * rng.normal(size=9)}
    claims = [synthetic.claim(cid, family="primary")]
    sweep = synthetic.Sweep(synthetic.tuned(rng, ("quiet", "noisy")), judge, claims, [3, 6, 9])
    rep = report.make_report(root, report.load_runs(synthetic.write(root, sweep)), {}, x_axes=())
    return check.Outcome(cid, root, 1.0, (0.0, 0.0), 0, rep.verdicts)


def test_the_same_runs_read_the_same_verdict_on_their_report_and_on_the_check_page(tmp_path):
    rng = np.random.default_rng(0)
    a, b = "fig6.ln_beats_bn_at_batch_4", "pmnist.ln_lstm_beats_lstm"  # two of the 23 primary claims, on made-up runs
    one, two = _sweep(tmp_path / "a", rng, a, 0.03), _sweep(tmp_path / "b", rng, b, 0.004)
    alone = one.verdicts[0]
    assert alone["family"] == "primary" and alone["family_size"] == 23  # the presets' 23, whatever was run
    for method in ("bonferroni", "none"):
        page = {d["id"]: d for d in adjusted([one, two], method)}
        solo = {d["id"]: d for d in adjusted([one], method)}
        keys = ("verdict", "p_adjusted", "ci_low", "ci_high", "level")
        assert [page[a][k] for k in keys] == [solo[a][k] for k in keys]
        if method == "bonferroni":  # the preset's own report (bonferroni by default) reads the same
            assert [page[a][k] for k in keys] == [alone[k] for k in keys]
    assert alone["verdict"] == "held" and alone["ci_low"] > 0 and alone["level"] < 0.05 * 0.71 / 23
