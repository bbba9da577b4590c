"""The holes issue 23 found in the verdicts, each on a sweep directory built by hand with a known answer:
tuning with a diverged seed, seeds dropped silently, to_target's budget, the edge flag, single runs, mixed
folders, no learning, and the judging seeds that now decide (no training here; lnbench check's rounds too)."""

import json

import pytest
import yaml

from lnbench import report
from lnbench.check import cli as check
from lnbench.check import rounds
from lnbench.claims import judge
from lnbench.report import claims_text, page
from lnbench.runs.reader import parse_scalar

CLAIM = {
    "id": "ln_beats_bn",
    "text": "LN beats BN",
    "better": "ln_mlp",
    "than": "bn_mlp",
    "metric": "val/error",
    "measure": "final",
}
NOISE = [0.0, 0.02, -0.01, 0.015, -0.02, 0.01, -0.005, 0.012, -0.015]


def job(
    root,
    name,
    model,
    seed,
    final,
    *,
    lr=1e-3,
    stage="tune",
    status="completed",
    claims=(CLAIM,),
    tune=("optim.lr",),
    batch=None,
    times=(1.0, 2.0, 3.0),
    loss=0.5,
    baseline=2.3,
    typed_lr=None,
):
    """One job: val error falling linearly to `final` over 3 evaluations at steps 10, 20, 30 (x=time: `times`)."""
    path = root / name
    (path / ".hydra").mkdir(parents=True)
    overrides = (
        [f"model={model}", f"seed={seed}"]
        + ([f"optim.lr={typed_lr or lr}"] if stage == "tune" else [])
        + ([f"dataset.batch_size={batch}"] if batch else [])
    )
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    config = {
        "seed": seed,
        "optim": {"lr": lr},
        "dataset": {"batch_size": batch or 128},
        "claims": [dict(c) for c in claims],
        "tune": list(tune),
        "stage": stage,
    }
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (path / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": {"model": model}}}}))
    recs = [
        {"step": 10 * i, "split": "val", "time": t, "error": final + 0.1 * (3 - i), "loss": loss}
        for i, t in zip((1, 2, 3), times)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary = {"status": status, "primary_metric": "error", "steps": 30, "baseline": baseline, "time_per_step": 0.01}
    if status == "completed":
        summary["final_val"] = {"error": final, "loss": loss}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def entries(root, **kw):
    rep = report.make_report(root, report.load_runs(root), {}, x_axes=(), **kw)
    return rep, {d["id"]: d for d in rep.verdicts}


# ---- 0. the tuning bug ------------------------------------------------------------------------------
def test_a_value_with_a_diverged_seed_never_wins_and_the_claim_keeps_every_seed(tmp_path):
    for s in range(3):
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.20 + NOISE[s])
        job(tmp_path, f"bn3_{s}", "bn_mlp", s, 0.25 + NOISE[s], lr=1e-3)
        # lr 1e-2: seed 2 diverged after logging a very low value, which used to make 1e-2 win
        job(
            tmp_path,
            f"bn2_{s}",
            "bn_mlp",
            s,
            0.01 if s == 2 else 0.30 + NOISE[s],
            lr=1e-2,
            status="diverged" if s == 2 else "completed",
        )
    rep, v = entries(tmp_path)
    bn = next(g for g in rep.groups if g.line == "bn_mlp")
    assert bn.selection.chosen == (1e-3,) and bn.selection.means[(1e-2,)] is None
    assert v["ln_beats_bn"]["n_seeds"] == 3 and v["ln_beats_bn"]["lines"]["bn_mlp"]["chosen"].startswith("lr=0.001")


def test_when_every_value_has_a_diverged_seed_the_fewest_failures_win_and_divergence_counts_as_a_loss(tmp_path):
    for s in range(6):
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.20 + NOISE[s])
        for lr, bad in ((1e-4, {0, 1, 2}), (1e-3, {0, 1}), (1e-2, {3}), (1e-1, {0, 1, 2, 3})):
            job(
                tmp_path,
                f"bn{lr}_{s}",
                "bn_mlp",
                s,
                0.25 + 2 * NOISE[s],
                lr=lr,
                status="diverged" if s in bad else "completed",
            )
    rep, v = entries(tmp_path)
    bn = next(g for g in rep.groups if g.line == "bn_mlp")
    assert (
        bn.selection.chosen == (1e-2,)
        and bn.selection.incomplete
        and "no value completed every seed" in bn.selection.text()
    )
    d = v["ln_beats_bn"]
    assert d["n_seeds"] == 6 and "1 of 6 pairs diverged" in d["method"]  # the seed counts, as a loss of bn
    assert d["panels"][0]["values"]["than"]["3"] == "diverged" and d["p_improve"] == 1.0
    # divergence decides: the t test on the 5 exact pairs, the sign test (6 of 6 = 1/64 <= 2.5%) on all six
    assert d["raw_verdict"] == "held" and d["ci_low"] > 0 and d["sign"].startswith("6 of 6 pairs above")


def test_a_failed_or_killed_seed_blocks_the_claim_with_its_reason(tmp_path):
    for s in range(3):
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.20 + NOISE[s], tune=())
        job(tmp_path, f"bn{s}", "bn_mlp", s, 0.40 + NOISE[s], tune=(), status="failed" if s == 1 else "completed")
    _, v = entries(tmp_path)
    assert v["ln_beats_bn"]["verdict"] == "inconclusive" and "seed 1 of bn_mlp is failed" in v["ln_beats_bn"]["reason"]


# ---- 6. other holes ---------------------------------------------------------------------------------
def test_to_target_never_reached_is_censored_so_the_faster_budget_never_wins(tmp_path):
    claim = {**CLAIM, "id": "faster", "measure": "to_target", "target": 0.05, "x": "time"}
    for s in range(6):
        # ln never reaches 0.05 but its whole run took 2 s; bn reaches it after 4 s: ln is not "faster"
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.2, claims=[claim], tune=(), times=(0.5, 1.0, 2.0))
        job(tmp_path, f"bn{s}", "bn_mlp", s, 0.04, claims=[claim], tune=(), times=(2.0, 3.0, 4.0))
    _, v = entries(tmp_path)
    d = v["faster"]  # ln's true time is after 2 s, bn's 4 s: their order is unknown, and counts against both sides
    assert d["verdict"] == "inconclusive" and d["method"].startswith("exact sign test on 6 pairs")
    assert d["sign"].startswith("0 of 6 pairs above +margin, 0 below") and d["p_held"] == d["p_contra"] == 1.0


def test_identical_differences_are_not_a_zero_width_held_but_a_sign_test(tmp_path):
    for s in range(3):
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.20, tune=())
        job(tmp_path, f"bn{s}", "bn_mlp", s, 0.30, tune=())
    _, v = entries(tmp_path)
    d = v["ln_beats_bn"]
    assert d["raw_verdict"] == "inconclusive" and d["ci_low"] is None and d["p_held"] == pytest.approx(1 / 8)
    assert "the sign test did not pass at look 3 (3 of 3 pairs above +margin" in d["reason"]


def edge_sweep(root):
    """ln wins at the top of the grid (1e-2), bn at the bottom (1e-3)."""
    for s in range(3):
        for lr, ln, bn in ((1e-3, 0.3, 0.2), (1e-2, 0.2, 0.3)):
            job(root, f"ln{lr}_{s}", "ln_mlp", s, ln + NOISE[s], lr=lr)
            job(root, f"bn{lr}_{s}", "bn_mlp", s, bn + NOISE[s], lr=lr)


def test_the_edge_of_the_grid_reaches_claims_json_and_the_page(tmp_path):
    edge_sweep(tmp_path)
    _, v = entries(tmp_path)
    lines = v["ln_beats_bn"]["lines"]
    assert lines["ln_mlp"]["edge"] and "edge of grid" in claims_text.chosen_text(v["ln_beats_bn"])


def test_single_runs_read_1e_3_as_a_number_and_two_runs_of_one_seed_are_not_silently_merged(tmp_path):
    assert parse_scalar("1e-3") == 0.001 and parse_scalar("3E-4") == 0.0003 and parse_scalar("ln_mlp") == "ln_mlp"
    for s in range(3):
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.2 + NOISE[s], typed_lr="1e-3" if s else "0.001")
        job(tmp_path, f"bn{s}", "bn_mlp", s, 0.3 + NOISE[s])
    job(tmp_path, "bn_again", "bn_mlp", 0, 0.1)  # the same model and seed again, nothing to tell them apart
    rep, v = entries(tmp_path)
    assert rep.lay.tuned == [] and "optim.lr" not in rep.lay.panels  # 1e-3 and 0.001 are one value
    assert (
        v["ln_beats_bn"]["verdict"] == "inconclusive" and "two runs of bn_mlp with seed 0" in v["ln_beats_bn"]["reason"]
    )


# ---- 5. no verdict where nothing learned; a claim on its own sweep's runs only ---------------------------
def test_lines_that_do_not_beat_the_trivial_predictor_give_no_verdict(tmp_path):
    for s in range(5):
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.88 + NOISE[s], tune=(), loss=2.29, baseline=2.3026)
        job(tmp_path, f"bn{s}", "bn_mlp", s, 0.90 + NOISE[s], tune=(), loss=2.30, baseline=2.3026)
    _, v = entries(tmp_path)
    assert v["ln_beats_bn"]["verdict"] == "inconclusive" and v["ln_beats_bn"]["reason"].startswith("no learning")


def test_a_claim_is_judged_on_its_own_sweeps_panels_in_a_mixed_folder(tmp_path):
    only4 = {**CLAIM, "where": {}}
    for s in range(6):
        job(tmp_path / "a", f"ln{s}", "ln_mlp", s, 0.2 + NOISE[s], batch=4, claims=[only4], tune=())
        job(tmp_path / "a", f"bn{s}", "bn_mlp", s, 0.3 + NOISE[s] * 2, batch=4, claims=[only4], tune=())
        job(tmp_path / "b", f"ln{s}", "ln_mlp", s, 0.5, batch=128, claims=(), tune=())  # another sweep: no claims
    rep, v = entries(tmp_path)
    d = v["ln_beats_bn"]
    assert [p["panel"] for p in d["panels"]] == ["batch_size=4"] and d["n_seeds"] == 6 and d["raw_verdict"] == "held"


# ---- 1. judging seeds decide, tuning seeds choose ---------------------------------------------------------
def tuned_and_judged(root, judged_gap, design=None):
    for s in range(3):
        for lr, ln, bn in ((1e-4, 0.3, 0.4), (1e-3, 0.2, 0.3), (1e-2, 0.25, 0.35)):
            job(root, f"ln{lr}_{s}", "ln_mlp", s, ln + NOISE[s], lr=lr)
            job(root, f"bn{lr}_{s}", "bn_mlp", s, bn + NOISE[s], lr=lr)
    for i, s in enumerate(range(1000, 1000 + len(judged_gap))):
        job(root, f"judge/ln{s}", "ln_mlp", s, 0.2 + NOISE[i], stage="judge")
        job(root, f"judge/bn{s}", "bn_mlp", s, 0.2 + NOISE[i] + judged_gap[i], stage="judge")
    job(root, "judge/stale", "bn_mlp", 1000, 0.9, lr=1e-2, stage="judge")  # at a value the tuning does not choose
    if design:
        (root / judge.DESIGN_FILE).write_text(json.dumps(design))
    return root


def test_judging_seeds_judge_and_the_page_says_which_seeds_chose_and_which_judged(tmp_path):
    rep, v = entries(tuned_and_judged(tmp_path, [0.1, -0.05, 0.02]))  # tuning seeds: a clear 0.1; fresh: noise
    d = v["ln_beats_bn"]
    assert d["raw_verdict"] == "inconclusive" and d["n_seeds"] == 3 and not d["note"]
    assert d["lines"]["ln_mlp"]["tuning_seeds"] == [0, 1, 2] and d["lines"]["ln_mlp"]["judging_seeds"] == [
        1000,
        1001,
        1002,
    ]
    assert claims_text.seeds_text(d) == "3 + 3"
    md = page.render_markdown(rep)
    assert "3 + 3" in md and "chose: seed 0,1,2; judged: seed 1000,1001,1002" in md
    assert "Judging runs not used" in md and "judge/stale" in md


def test_a_sweep_without_judging_seeds_is_judged_on_its_tuning_seeds_and_says_so(tmp_path):
    for s in range(3):
        for lr in (1e-3, 1e-2):
            job(tmp_path, f"ln{lr}_{s}", "ln_mlp", s, 0.2 + NOISE[s] + lr, lr=lr)
            job(tmp_path, f"bn{lr}_{s}", "bn_mlp", s, 0.3 + NOISE[s] + 0.001 * s + lr, lr=lr)
    rep, v = entries(tmp_path)
    assert (
        v["ln_beats_bn"]["note"] == judge.ON_TUNING_SEEDS
        and claims_text.seeds_text(v["ln_beats_bn"]) == "3 (the tuning seeds)"
    )
    assert judge.ON_TUNING_SEEDS in page.render_markdown(rep)


def test_the_looks_of_the_design_spend_their_declared_shares(tmp_path):
    gaps = [0.1, 0.12, 0.09, 0.11, 0.1, 0.13]
    _, alone = entries(tuned_and_judged(tmp_path / "one", gaps))
    _, looked = entries(tuned_and_judged(tmp_path / "two", gaps, design={"looks": [3, 6], "shares": [0.2, 0.8]}))
    _, linear = entries(tuned_and_judged(tmp_path / "old", gaps, design={"looks": [3, 6]}))  # before issue 30: 1/2, 1/2
    assert alone["ln_beats_bn"]["raw_verdict"] == "held" and alone["ln_beats_bn"]["weight"] == 1.0
    p = alone["ln_beats_bn"]["p_decide"]
    d = looked["ln_beats_bn"]  # look 3 cannot pass the sign gate (1/8): look 6 decides, at its share 0.8
    assert d["p_decide"] == pytest.approx(p / 0.8) and d["weight"] == pytest.approx(0.8) and d["decided_at"] == 6
    assert d["level"] == pytest.approx(0.05 * 0.8) and d["ci_low"] > 0
    # at a share of 1/2 the sign gate is 1.25%: six agreeing pairs (1/64 = 1.6%) do not pass it
    assert (
        linear["ln_beats_bn"]["raw_verdict"] == "inconclusive"
        and "sign test did not pass" in linear["ln_beats_bn"]["reason"]
    )


# ---- 2. the family ----------------------------------------------------------------------------------------
def test_the_adjusted_verdict_stands_beside_the_raw_one(tmp_path):
    claims = [{**CLAIM, "id": f"c{i}"} for i in range(8)]
    gaps = [0.03, 0.005, 0.05, 0.04, 0.002, 0.01]  # held alone (2p = 0.034), not among 8 claims at 0.05/8
    for s in range(6):
        job(tmp_path, f"ln{s}", "ln_mlp", s, 0.2 + NOISE[s], claims=claims, tune=())
        job(tmp_path, f"bn{s}", "bn_mlp", s, 0.2 + NOISE[s] + gaps[s], claims=claims, tune=())
    rep, v = entries(tmp_path)
    d = v["c0"]
    assert d["raw_verdict"] == "held" and d["verdict"] == "inconclusive" and d["adjust"] == "bonferroni"
    assert d["family_size"] == 8 and d["p_adjusted"] == pytest.approx(8 * d["p_decide"])
    assert "held before the family adjustment" in d["reason"] or "underpowered" in d["reason"]
    _, none = entries(tmp_path, adjust="none")
    assert none["c0"]["verdict"] == "held"
    assert "| inconclusive (" in page.render_markdown(rep) and "| held |" in page.render_markdown(rep)


# ---- lnbench check's rounds ---------------------------------------------------------------------------------
def test_check_rounds_widen_an_edge_and_judge_at_the_chosen_value(tmp_path):
    edge_sweep(tmp_path)
    rep, _ = entries(tmp_path)
    need = rounds.needed(rep)
    wide = rounds.widen_cells(rep, need, cap=1)
    assert {(c.values["model"], c.values["optim.lr"]) for c in wide} == {("ln_mlp", 0.03), ("bn_mlp", 0.000333)}
    assert all(c.seeds == [0, 1, 2] and c.stage == "widen" for c in wide)
    for g in need:  # --widen is a budget: a line widened once and still at its edge gets another value under --widen 2
        g.selection.widened = 1
    assert rounds.widen_cells(rep, need, cap=1) == [] and len(rounds.widen_cells(rep, need, cap=2)) == 2
    cell = next(
        c for c in rounds.judge_cells(rep, need, rounds.judging_seeds([3, 6, 9], 1)) if c.values["model"] == "ln_mlp"
    )
    assert cell.seeds == [1003, 1004, 1005] and cell.stage == "judge"
    assert yaml.safe_load(cell.config()) == {
        "defaults": [{"override /model": "ln_mlp"}],
        "stage": "judge",
        "optim": {"lr": 0.01},
    }
    cmd = rounds.commands(
        ["python", "-m", "lnbench.cli", "train", "-m", "+experiment=x", "hydra.sweep.dir=d", "seed=0,1", "steps=5"],
        tmp_path,
        "judge-2",
        [cell],
        {"seed", "model"},
    )[0]
    assert "seed=0,1" not in cmd and "steps=5" in cmd and f"+cell={cell.name}" in cmd and "seed=1003,1004,1005" in cmd
    assert (
        tmp_path / rounds.CELLS / "cell" / f"{cell.name}.yaml"
    ).is_file() and f"hydra.sweep.dir={tmp_path / 'judge-2'}" in cmd


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--max-seeds", "2"], "--max-seeds '2' is not allowed"),
        (["--judging-seeds", "2"], "--judging-seeds '2' is not allowed"),
        (["--adjust", "bonf"], "--adjust 'bonf' is not allowed"),
        (["--judging-seeds", "6", "--max-seeds", "3"], "--max-seeds 3 is not allowed"),
    ],
)
def test_check_options_are_checked(argv, match, capsys):
    assert check.main(argv) == 2 and match in capsys.readouterr().err


def test_check_looks_and_a_changed_design_is_kept_and_said(tmp_path):
    assert check.parse_args([]).planned and check.parse_args([]).looks == []  # the default: a plan per claim
    assert check.parse_args(["--judging-seeds", "3"]).looks == [3, 6, 9]
    assert check.parse_args(["--judging-seeds", "3", "--max-seeds", "10"]).looks == [3, 6, 9, 10]
    assert check.parse_args(["--judging-seeds", "0"]).looks == []
    assert check.parse_args(["--judging-seeds", "3", "--max-seeds", "3"]).looks == [3]
    (tmp_path / "pmnist").mkdir()
    (tmp_path / "pmnist" / judge.DESIGN_FILE).write_text(json.dumps({"looks": [3, 6, 9]}))
    for other in (["--judging-seeds", "3", "--max-seeds", "6"], []):  # other looks; a plan per claim (the default)
        args = check.parse_args(["pmnist", "--out", str(tmp_path), *other])
        check.check_design(args)  # not refused: the rerun goes on in the declared looks, and says so
        assert any("declared under looks of [3, 6, 9] judging seeds" in line for line in check.kept_design(args))


def test_report_command_adjusts_as_asked_and_draws_every_claims_numbers(tmp_path, capsys):
    tuned_and_judged(tmp_path, [0.1, 0.12, 0.09])
    assert report.main([str(tmp_path), "--adjust", "bh"]) == 0
    saved = json.loads((tmp_path / "report" / "claims.json").read_text())
    assert saved[0]["adjust"] == "bh" and saved[0]["panels"][0]["values"]["than"]["1000"] == pytest.approx(0.3)
    assert (tmp_path / "report" / "claims.png").read_bytes().startswith(b"\x89PNG")
    assert "verdict (adjusted)" in capsys.readouterr().out
