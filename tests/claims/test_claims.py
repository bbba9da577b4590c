"""Claims and verdicts on sweep directories built by hand, with known answers (no training)."""

import json
import statistics

import pytest
import yaml
from scipy import stats as scipy_t

from lnbench import report
from lnbench.claims import spec as claims
from lnbench.claims import verdicts
from lnbench.report import analysis, page

CLAIM = {
    "id": "ln_beats_bn",
    "text": "LN converges faster than BN",
    "better": "ln_mlp",
    "than": "bn_mlp",
    "metric": "val/error",
    "measure": "final",
}


def make_job(
    root, num, model, seed, final, *, lr=1e-3, test=0.5, claim_list=(CLAIM,), tune=(), batch=None, status="completed"
):
    """One job whose val error falls linearly to `final` over 3 evaluations; its test error is `test`."""
    job = root / str(num)
    (job / ".hydra").mkdir(parents=True)
    overrides = [f"model={model}", f"seed={seed}", f"optim.lr={lr}"] + (
        [f"dataset.batch_size={batch}"] if batch else []
    )
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    config = {"seed": seed, "optim": {"lr": lr}, "claims": [dict(c) for c in claim_list], "tune": list(tune)}
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": {"model": model}}}}))
    lines = [
        {"step": 10 * i, "split": "val", "epoch": i / 2, "time": float(i), "error": final + 0.1 * (3 - i), "loss": 1.0}
        for i in (1, 2, 3)
    ]
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = {
        "status": status,
        "primary_metric": "error",
        "steps": 30,
        "test": {"error": test},
        "final_val": {"error": final},
        "time_per_step": 0.01,
    }
    (job / "summary.json").write_text(json.dumps(summary))


# Seed-to-seed noise shared by both lines (a paired design), plus a little of each line's own. Six seeds: the
# fewest at which the sign test can pass at 95% (1/64 <= 2.5%; five agreeing pairs give 1/32).
NOISE = [0.00, 0.02, -0.01, 0.015, -0.02, 0.005]
OWN = [0.001, -0.002, 0.0015, -0.001, 0.002, -0.0005]


def sweep(root, ln_minus_bn, seeds=6, **kw):
    root.mkdir(exist_ok=True)
    num = 0
    for seed in range(seeds):
        for model, shift in (("bn_mlp", 0.0), ("ln_mlp", ln_minus_bn)):
            own = OWN[seed] if model == "ln_mlp" else -OWN[seed]
            make_job(root, num, model, seed, 0.2 + NOISE[seed] + shift + own, **kw)
            num += 1
    return root


def verdict(root, **kw):
    rep = report.make_report(root, report.load_runs(root), {}, x_axes=(), **kw)
    return {d["id"]: d for d in rep.verdicts}


def test_a_clear_win_is_held(tmp_path):
    d = verdict(sweep(tmp_path, -0.05))["ln_beats_bn"]
    assert d["verdict"] == "held" and d["n_seeds"] == 6 and d["estimand"] == "median"
    diffs = [0.05 - 2 * o for o in OWN]  # bn - ln, paired by seed
    assert d["effect"] == pytest.approx(statistics.median(diffs))  # the estimand's estimate: the median
    assert d["mean"] == pytest.approx(statistics.fmean(diffs)) and d["mean_low"] < d["mean"] < d["mean_high"]
    # the interval that decided: 6 of 6 pairs above 0 is p = 1/64 <= 2.5%, so the order-statistic interval at
    # 95% is [smallest, largest] and lies above 0
    assert (d["ci_low"], d["ci_high"]) == (pytest.approx(min(diffs)), pytest.approx(max(diffs)))
    assert d["p_held"] == pytest.approx(1 / 64) and d["sign"].startswith("6 of 6 pairs above")


def test_the_same_distribution_is_inconclusive(tmp_path):
    d = verdict(sweep(tmp_path, 0.0))["ln_beats_bn"]
    assert d["verdict"] == "inconclusive" and d["ci_low"] < 0 < d["ci_high"]


def test_a_reversed_effect_is_contradicted(tmp_path):
    d = verdict(sweep(tmp_path, +0.05))["ln_beats_bn"]
    assert d["verdict"] == "contradicted" and d["ci_high"] < 0


def test_two_seeds_are_inconclusive_whatever_the_effect(tmp_path):
    d = verdict(sweep(tmp_path, -0.3, seeds=2))["ln_beats_bn"]
    assert d["verdict"] == "inconclusive" and d["n_seeds"] == 2 and "n<3" in d["reason"]
    assert d["effect"] is None and d["ci_low"] is None  # no test, no effect shown


def test_min_effect_must_be_cleared_and_a_tight_small_effect_is_practically_equivalent(tmp_path):
    d = verdict(sweep(tmp_path / "a", -0.05, claim_list=[{**CLAIM, "min_effect": 0.05}]))["ln_beats_bn"]
    assert d["verdict"] == "inconclusive" and d["ci_low"] < 0.05 < d["ci_high"]
    d = verdict(sweep(tmp_path / "b", -0.05, claim_list=[{**CLAIM, "min_effect": 0.2}]))["ln_beats_bn"]
    assert d["verdict"] == "equivalent" and -0.2 < d["ci_low"] < d["ci_high"] < 0.2
    d = verdict(sweep(tmp_path / "c", -0.05, claim_list=[{**CLAIM, "min_effect": "100%"}]))[
        "ln_beats_bn"
    ]  # of bn's mean, 0.2
    assert d["verdict"] == "equivalent" and d["margin"] == pytest.approx(0.2 + sum(NOISE) / 6 - sum(OWN) / 6)


@pytest.mark.parametrize("value", ["-1", "x%", "inf"])
def test_a_bad_min_effect_is_a_clear_error(value):
    with pytest.raises(claims.ClaimError, match=f"min_effect={value!r} is not allowed"):
        claims.parse_claim({**CLAIM, "min_effect": value})


def test_the_median_is_judged_by_the_exact_sign_test_and_the_mean_by_student_t_when_declared():
    better = {0: 1.0, 1: 2.0, 2: 3.0}
    than = {0: 1.5, 1: 2.7, 2: 3.4}  # differences 0.5, 0.7, 0.4: mean 0.5333, sd 0.1528
    c = verdicts.compare("p", _values(better), _values(than), claims.parse_claim(CLAIM))
    look = c.looks[0]
    assert (
        c.method.startswith("exact sign test") and c.effect == pytest.approx(0.5) and c.mean == pytest.approx(0.533333)
    )
    assert (look.mean, look.se, look.df) == (pytest.approx(0.533333, abs=1e-6), pytest.approx(0.15275252 / 3**0.5), 2)
    # p = 0.013 by the t test, but the median estimand is tested by the sign test: 3 of 3 pairs are p = 1/8
    assert scipy_t.ttest_1samp([0.5, 0.7, 0.4], 0, alternative="greater").pvalue < 0.025
    assert look.p_held == pytest.approx(1 / 8) and look.median == pytest.approx(0.5)
    mean = claims.parse_claim({**CLAIM, "estimand": "mean"})
    c = verdicts.compare("p", _values(better), _values(than), mean)
    assert c.method.startswith("paired t") and c.effect == pytest.approx(0.533333, abs=1e-6)
    assert c.looks[0].p_held == pytest.approx(scipy_t.ttest_1samp([0.5, 0.7, 0.4], 0, alternative="greater").pvalue)


def test_unmatched_seeds_are_compared_unpaired_only_for_the_mean():
    better, than = _values({0: 1.0, 1: 1.1, 2: 0.9}), _values({3: 2.0, 4: 2.1, 5: 1.9})
    c = verdicts.compare("p", better, than, claims.parse_claim({**CLAIM, "estimand": "mean"}))
    welch = scipy_t.ttest_ind([2.0, 2.1, 1.9], [1.0, 1.1, 0.9], equal_var=False, alternative="greater").pvalue
    assert c.method.startswith("Welch") and c.effect == pytest.approx(1.0)
    assert c.looks[0].p_held == pytest.approx(welch)
    # the median estimand is about pairs: unpaired seeds decide nothing, and say why
    c = verdicts.compare("p", better, than, claims.parse_claim(CLAIM))
    assert not c.looks and c.effect is None and "median estimand compares paired seeds" in c.reason


def test_a_bad_estimand_is_a_clear_error():
    with pytest.raises(claims.ClaimError, match="estimand='average' is not one of median, mean"):
        claims.parse_claim({**CLAIM, "estimand": "average"})


def _values(d):
    return {s: claims.Value(v) for s, v in d.items()}


def test_a_claim_must_hold_in_every_panel_unless_where_restricts_it(tmp_path):
    num = 0
    noise, own = [*NOISE, 0.01], [*OWN, 0.001]  # 7 seeds: 1/128 passes for 2 claims on the page (1/64 would not)
    for batch, ln_shift in ((4, -0.05), (128, 0.0)):
        for seed in range(7):
            for model, shift in (("bn_mlp", 0.0), ("ln_mlp", ln_shift)):
                make_job(
                    tmp_path,
                    num,
                    model,
                    seed,
                    0.2 + noise[seed] + shift + (own[seed] if model == "ln_mlp" else 0),
                    batch=batch,
                )
                num += 1
    only4 = {**CLAIM, "id": "at4", "where": {"dataset.batch_size": 4}}
    for job in tmp_path.iterdir():
        cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        cfg["claims"] = [CLAIM, only4]
        (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    v = verdict(tmp_path)
    assert v["at4"]["verdict"] == "held" and [p["panel"] for p in v["at4"]["panels"]] == ["batch_size=4"]
    assert v["ln_beats_bn"]["verdict"] == "inconclusive" and len(v["ln_beats_bn"]["panels"]) == 2
    assert "batch_size=128" in v["ln_beats_bn"]["reason"]


@pytest.mark.parametrize(
    "measure,extra,ln_value",
    [
        ("best", {}, 0.15),
        ("at", {"x": "epoch", "at": 1.0}, 0.25),
        ("auc", {"x": "step", "at": 20}, 0.30),
        ("to_target", {"x": "step", "target": 0.3}, 20),
    ],
)
def test_each_measure_reads_the_curve(measure, extra, ln_value):
    c = claims.parse_claim({**CLAIM, "measure": measure, **extra})
    # val error 0.35, 0.25, 0.15 at steps 10, 20, 30 (epochs 0.5, 1.0, 1.5)
    points = {10 * i: ((i / 2 if c.x == "epoch" else 10 * i), 0.15 + 0.1 * (3 - i)) for i in (1, 2, 3)}
    assert claims.run_measure(c, points, None).x == pytest.approx(ln_value)


def test_a_target_never_reached_is_censored_at_the_last_evaluation_not_a_time():
    c = claims.parse_claim({**CLAIM, "measure": "to_target", "target": 0.01})
    v = claims.run_measure(c, {10: (10, 0.5), 20: (20, 0.4)}, None)
    assert v == claims.Value(20, censored=True, resolution=10) and v.high == float("inf") and not v.exact


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("measure", "fastest", "measure='fastest' is not one of final, best"),
        ("metric", "error", "metric='error' is not split/name"),
        ("colour", "red", "unknown field"),
    ],
)
def test_a_bad_claim_is_a_clear_error(field, value, match):
    with pytest.raises(claims.ClaimError, match=match):
        claims.parse_claim({**CLAIM, field: value})


def test_a_bad_claim_in_a_sweep_is_reported_not_raised(tmp_path):
    sweep(tmp_path, -0.05, seeds=3, claim_list=[{**CLAIM, "measure": "fastest"}])
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    assert rep.verdicts == [] and "fastest" in rep.claim_errors[0]
    assert "claim error" in page.render_markdown(rep)


# ---- tuning -----------------------------------------------------------------------------------
def tuned_sweep(root, val_by_lr, test_by_lr, models=("bn_mlp", "ln_mlp"), seeds=6):
    num = 0
    for model in models:
        for lr, val in val_by_lr[model].items():
            for seed in range(seeds):
                make_job(
                    root, num, model, seed, val + NOISE[seed], lr=lr, test=test_by_lr[model][lr], tune=["optim.lr"]
                )
                num += 1
    return root


def test_tuning_picks_on_validation_and_never_reads_test(tmp_path, monkeypatch):
    # validation prefers lr 1e-3 for ln and 1e-2 for bn; test would prefer the opposite
    val = {"ln_mlp": {1e-4: 0.30, 1e-3: 0.10, 1e-2: 0.20}, "bn_mlp": {1e-4: 0.40, 1e-3: 0.30, 1e-2: 0.25}}
    test = {"ln_mlp": {1e-4: 0.01, 1e-3: 0.90, 1e-2: 0.50}, "bn_mlp": {1e-4: 0.01, 1e-3: 0.02, 1e-2: 0.90}}
    tuned_sweep(tmp_path, val, test)
    runs = report.load_runs(tmp_path)
    lay = analysis.layout(runs)
    assert lay.tuned == ["optim.lr"] and lay.panels == [] and lay.line == "model"  # lr is no panel
    groups = analysis.group_runs(runs, lay)
    read = []
    # the selection gets the final validation metric only: poison test to prove it is never consulted
    for r in runs:
        r.summary = {**r.summary, "test": _Poisoned(read)}
    analysis.tune_groups(groups, lay, "error")
    assert not read
    picks = {g.line: g.selection for g in groups}
    assert picks["ln_mlp"].chosen == (1e-3,) and not picks["ln_mlp"].edge
    assert picks["bn_mlp"].chosen == (1e-2,) and picks["bn_mlp"].edge == ["optim.lr"]  # top of the grid
    assert all(r.value("optim.lr") == 1e-3 for r in picks["ln_mlp"].runs) and len(picks["ln_mlp"].runs) == 6


def test_the_report_judges_claims_at_the_tuned_values_and_a_line_at_its_grid_edge_gives_no_verdict(tmp_path):
    val = {"ln_mlp": {1e-4: 0.50, 1e-3: 0.10, 1e-2: 0.20}, "bn_mlp": {1e-4: 0.40, 1e-3: 0.30, 1e-2: 0.25}}
    test = {m: {lr: 0.5 for lr in v} for m, v in val.items()}
    tuned_sweep(tmp_path, val, test)
    md = page.render_markdown(report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=()))
    d = json.loads(json.dumps(verdict(tmp_path)))["ln_beats_bn"]
    assert d["raw_verdict"] == d["verdict"] == "inconclusive" and d["reason"].startswith(
        "grid edge: bn_mlp chose lr=0.01"
    )
    assert d["effect"] is None and d["ci_low"] is None  # a blocked claim shows no effect
    assert d["better_mean"] == pytest.approx(0.10 + sum(NOISE) / 6) and d["than_mean"] == pytest.approx(
        0.25 + sum(NOISE) / 6
    )
    assert "winner at the edge of the grid** for bn_mlp" in md
    # one step inside the grid: bn at 1e-2 vs ln at 1e-3 is held
    val["bn_mlp"][1e-1] = 0.35
    d = verdict(tuned_sweep(tmp_path / "inside", val, {m: {lr: 0.5 for lr in v} for m, v in val.items()}))[
        "ln_beats_bn"
    ]
    assert d["verdict"] == "held" and d["effect"] == pytest.approx(0.25 - 0.10)
    assert "| ln_mlp ★ |" in md and "lr=0.001 |" in md


def test_tune_on_the_command_line(tmp_path):
    val = {"ln_mlp": {1e-4: 0.5, 1e-3: 0.1, 1e-2: 0.2}, "bn_mlp": {1e-4: 0.4, 1e-3: 0.25, 1e-2: 0.3}}
    tuned_sweep(tmp_path, val, {m: {lr: 0.5 for lr in v} for m, v in val.items()})
    for job in tmp_path.iterdir():  # no `tune:` in the configs
        cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        cfg["tune"] = []
        (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert analysis.layout(report.load_runs(tmp_path)).panels == ["optim.lr"]
    assert report.main([str(tmp_path), "--tune", "optim.lr"]) == 0
    saved = json.loads((tmp_path / "report" / "claims.json").read_text())
    assert saved[0]["verdict"] == "held" and saved[0]["n_seeds"] == 6


class _Poisoned(dict):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def get(self, *a, **k):
        self.log.append(a)
        return super().get(*a, **k)

    def __getitem__(self, k):
        self.log.append(k)
        raise KeyError(k)


def test_where_matches_a_value_the_sweep_did_not_vary(tmp_path):
    only4 = {**CLAIM, "where": {"dataset.batch_size": 4}}
    sweep(tmp_path, -0.05, batch=4, claim_list=[only4])
    d = verdict(tmp_path)["ln_beats_bn"]
    assert d["verdict"] == "held" and d["panels"][0]["panel"] == "all runs"
    only128 = verdict(
        sweep(tmp_path / "b", -0.05, seeds=3, batch=4, claim_list=[{**CLAIM, "where": {"dataset.batch_size": 128}}])
    )
    assert only128["ln_beats_bn"]["verdict"] == "inconclusive" and "no panel" in only128["ln_beats_bn"]["reason"]


def test_a_run_that_never_reached_the_target_is_later_than_one_that_reached_it_at_the_same_evaluation():
    claim = claims.parse_claim({**CLAIM, "measure": "to_target", "target": 0.1, "x": "step"})
    never = claims.run_measure(claim, {10: (10, 0.5), 20: (20, 0.4)}, None)  # censored at its last evaluation, 20
    reached = claims.run_measure(claim, {10: (10, 0.5), 20: (20, 0.05)}, None)  # first at or below 0.1 at 20
    assert never.low > reached.high == 20
    # than never got there, better did at that same evaluation: the pair's order is known and counts
    c = verdicts.compare("p", {s: reached for s in range(6)}, {s: never for s in range(6)}, claim)
    assert c.looks[0].p_held == pytest.approx(1 / 64) and c.looks[0].sign.startswith("6 of 6 pairs above")


def test_an_open_claim_counts_the_seeds_judged_so_far_whatever_look_gives_its_p_value():
    from lnbench.claims.decision import judge_claim

    claim = claims.parse_claim(CLAIM)
    design = verdicts.Design([3, 6, 9], [0.2, 0.3, 0.5])
    # 3 equal differences (no spread: the sign test alone, p = 1/8 at look 3), then 3 that disagree
    better = {s: claims.Value(1.0) for s in range(6)}
    than = {s: claims.Value(x) for s, x in enumerate([1.1, 1.1, 1.1, 0.9, 1.2, 0.95])}
    v = judge_claim(claim, [verdicts.compare("p", better, than, claim, design)], design)
    assert v.raw_verdict == "inconclusive" and v.looks == [3, 6] and v.decided_at == 3
    assert v.n_seeds == 6  # lnbench check adds the third look to claims open at 6 seeds
