"""Experiment presets compose into the sweeps they promise; real tiny sweeps on every launcher (slow)."""

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from lnbench import report
from lnbench.config import launchers
from lnbench.config.schema import register_configs
from lnbench.config.validate import validate
from lnbench.errors import ConfigError
from lnbench.launch.entry import CONF_DIR
from lnbench.launch.process.threads import parallel_job_threads
from tests.conftest import REPO, TINY, compose_train
from tests.wandb_file import read_offline_runs

PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))
SWEEP_PRESETS = [p for p in PRESETS if p != "smoke"]


def sweep_axes(overrides: list[str]) -> dict[str, list[str]]:
    """hydra.sweeper.params of the composed config, each value list expanded the way the sweeper does."""
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    params = cfg.hydra.sweeper.params or {}
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return {o.get_key_element(): list(o.sweep_string_iterator()) for o in parsed}


def test_there_is_a_preset_for_every_claim():
    assert set(PRESETS) >= {
        "fig6_mnist",
        "seq_len_sweep",
        "batch_size_sweep",
        "longer_test_seqs",
        "ln_gain_init",
        "smoke",
    }


@pytest.mark.parametrize("name", SWEEP_PRESETS)
def test_preset_names_its_sweep_axes(name):
    axes = sweep_axes([f"+experiment={name}"])
    assert axes and all(len(values) >= 2 for values in axes.values()), axes
    text = (Path(CONF_DIR) / "experiment" / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_") and "Claim under test" in text and "scale up" in text.lower()


@pytest.mark.slow  # a second per composition on this machine: 50 of them
@pytest.mark.parametrize("name", SWEEP_PRESETS)
def test_every_job_of_a_preset_composes_and_validates(name):
    """Each point of the sweep composes; the only job allowed to be refused is BN at batch size 1."""
    axes = sweep_axes([f"+experiment={name}"])
    for values in itertools.product(*axes.values()):
        job = [f"{k}={v}" for k, v in zip(axes, values)]
        cfg = compose_train([f"+experiment={name}", *job])
        try:
            validate(cfg)
        except ConfigError as e:
            assert "dataset.batch_size=1" in job and "batch normalization" in str(e), (job, e)


def test_a_sweep_override_keeps_the_presets_other_settings():
    cfg = compose_train(["+experiment=fig6_mnist", "model=bn_mlp", "dataset.batch_size=4"])
    assert list(cfg.model.hidden_sizes) == [1000, 1000] and cfg.model.norm.kind == "batch"
    assert cfg.model.norm.unbiased_var is True  # the paper's small-batch BN
    assert cfg.optim._target_ == "torch.optim.Adam" and cfg.dataset._target_ == "lnbench.data.MNIST"


@pytest.mark.parametrize("name", SWEEP_PRESETS)
def test_smoke_shrinks_any_preset_and_keeps_its_axes(name):
    cfg = compose_train([f"+experiment=[{name},smoke]"])
    assert cfg.steps <= 5 and cfg.eval_every <= cfg.steps
    assert sweep_axes([f"+experiment=[{name},smoke]"]) == sweep_axes([f"+experiment={name}"])


@pytest.mark.parametrize("name", PRESETS)
def test_preset_composes_for_training(name):
    cfg = compose_train([f"+experiment={name}"])
    validate(cfg)


@pytest.mark.parametrize("n_jobs,cores,threads", [(-1, 2, 1), (2, 2, 1), (1, 2, 2), (-1, 8, 1), (4, 8, 2), (-2, 8, 1)])
def test_parallel_jobs_share_the_cores(n_jobs, cores, threads, monkeypatch):
    monkeypatch.setattr(launchers, "shareable_cores", lambda: cores)  # affinity and quota, as joblib counts them
    joblib = {"_target_": launchers.HYDRA["joblib"][0], "n_jobs": n_jobs}
    assert parallel_job_threads(OmegaConf.create({"launcher": joblib})) == threads
    submitit = {"_target_": launchers.HYDRA["submitit_local"][0], "timeout_min": 60}
    assert parallel_job_threads(OmegaConf.create({"launcher": submitit})) is None
    assert parallel_job_threads(OmegaConf.create({"launcher": {**submitit, "cpus_per_task": 3}})) == 3


# ---- end to end: real multiruns in a subprocess ------------------------------------------------
TINY_ADDING = [o for o in TINY["adding"] if not o.startswith("dataset.batch_size")]
# Four jobs: BN at batch size 1 is refused (recorded as failed), the other three train.
SWEEP = [
    "model=ln_lstm,bn_lstm",
    "dataset.batch_size=1,8",
    "dataset=adding",
    *TINY_ADDING,
    "model.hidden_size=16",
    "steps=4",
    "eval_every=2",
    "log_every=1",
    "progress=false",
]
LAUNCHERS = {
    "basic": [],
    "joblib": ["hydra/launcher=joblib"],
    "warm": ["hydra/launcher=warm"],  # lnbench's warm pool, as lnbench check runs its rounds
    "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"],
}


def multirun(sweep_dir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0"}
    cmd = [sys.executable, "-m", "lnbench.cli", "train", "-m", *args, f"hydra.sweep.dir={sweep_dir}"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def job_summaries(sweep_dir: Path) -> dict[str, dict]:
    return {str(p.parent.relative_to(sweep_dir)): json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_sweep_runs_every_job_records_failures_and_reports(launcher, tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = multirun(sweep_dir, *SWEEP, *LAUNCHERS[launcher])
    summaries = job_summaries(sweep_dir)
    assert len(summaries) == 4, (proc.stdout, proc.stderr)
    assert proc.returncode == 1  # Hydra raises the first failure once every job has run
    statuses = sorted(s["status"] for s in summaries.values())
    assert statuses == ["completed", "completed", "completed", "failed"], summaries
    failed = next(s for s in summaries.values() if s["status"] == "failed")
    assert "ConfigError" in failed["error"] and "batch_size=1" in failed["error"]

    for job in (sweep_dir / n for n, s in summaries.items() if s["status"] == "completed"):
        run = read_offline_runs(job)
        # the directory's name, which holds "sweep" already (lnbench.training.tracker.run_group)
        assert run.group == sweep_dir.name == "sweep" and run.exit_code == 0 and run.job_type == "train"
        assert run.name.startswith(("ln_lstm · ", "bn_lstm · ")) and "batch_size=" in run.name
        assert {"dataset=adding", "norm=layer"} <= set(run.tags) or {"dataset=adding", "norm=batch"} <= set(run.tags)
        if launcher in ("joblib", "warm"):  # two jobs at a time on this machine's cores: their threads split them
            assert summaries[job.name]["threads"] == launchers.JOBLIB.job_cores({"n_jobs": -1})

    assert report.main([str(sweep_dir)]) == 0
    md = (sweep_dir / "report" / "report.md").read_text()
    assert "## Failures" in md and "ConfigError" in md and md.count("| completed |") == 3


@pytest.mark.slow
def test_a_diverging_job_ends_its_wandb_run_with_a_failing_exit_code_under_joblib(tmp_path):
    sweep_dir = tmp_path / "sweep"
    multirun(
        sweep_dir, "model=ln_lstm", "optim.lr=1e-3,1e30", *SWEEP[2:], "dataset.batch_size=8", "hydra/launcher=joblib"
    )
    summaries = job_summaries(sweep_dir)
    by_status = {s["status"]: n for n, s in summaries.items()}
    assert set(by_status) == {"completed", "diverged"}, summaries
    assert read_offline_runs(sweep_dir / by_status["diverged"]).exit_code == 1
    assert read_offline_runs(sweep_dir / by_status["completed"]).exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", SWEEP_PRESETS)
def test_every_preset_runs_as_a_smoke_sweep(name, tmp_path):
    sweep_dir = tmp_path / "sweep"
    # one seed and one learning rate: every model and panel of the preset, a ninth of its jobs
    multirun(sweep_dir, f"+experiment=[{name},smoke]", "seed=0", "optim.lr=1e-3", "hydra/launcher=joblib", timeout=1800)
    summaries = job_summaries(sweep_dir)
    axes = {k: v for k, v in sweep_axes([f"+experiment={name}"]).items() if k not in ("seed", "optim.lr")}
    assert len(summaries) == len(list(itertools.product(*axes.values())))
    for s in summaries.values():
        assert s["status"] == "completed" or "batch normalization" in s.get("error", ""), s


# ---- the claims every preset declares -----------------------------------------------------------
CLAIM_PRESETS = [
    p for p in SWEEP_PRESETS if (Path(CONF_DIR) / "experiment" / f"{p}.yaml").read_text().count("\nclaims:")
]


def test_every_sweep_preset_declares_claims_seeds_and_a_tuned_lr():
    assert CLAIM_PRESETS == SWEEP_PRESETS
    assert {"shakespeare_bpc", "pmnist"} <= set(CLAIM_PRESETS)


@pytest.mark.parametrize("name", CLAIM_PRESETS)
def test_each_claim_compares_lines_the_sweep_runs_in_panels_it_has(name):
    from lnbench.claims.spec import claims_of, same

    cfg = OmegaConf.to_container(compose_train([f"+experiment={name}"]))
    claims = claims_of([cfg])
    axes = sweep_axes([f"+experiment={name}"])
    assert len(axes["seed"]) >= 3 and len(axes["optim.lr"]) >= 3 and cfg["tune"] == ["optim.lr"]
    line = next(k for k in ("model", "model.norm.gain_init") if k in axes)
    assert claims and len({c.id for c in claims}) == len(claims)
    for c in claims:
        assert any(same(c.better, v) for v in axes[line]) and any(same(c.than, v) for v in axes[line]), c
        for key, value in c.where.items():
            assert any(same(value, v) for v in axes[key]), (c.id, key)
        if c.eval_seq_len:
            assert c.eval_seq_len in cfg["test_seq_lens"]


LADDER = [float(f"{m * 10.0**k:.3g}") for k in range(-7, 1) for m in (1, 3)]  # 1e-7, 3e-7, ..., 1, 3


@pytest.mark.parametrize("name", CLAIM_PRESETS)
def test_each_claim_presets_lr_grid_is_a_run_of_half_decades_centred_as_its_header_says(name):
    """Issue 39: each grid re-centred on the preset's own tuning runs (validation only), its rule in the header."""
    lrs = sorted(float(v) for v in sweep_axes([f"+experiment={name}"])["optim.lr"])
    start = LADDER.index(lrs[0])
    assert lrs == LADDER[start : start + len(lrs)] and len(lrs) >= 3  # 1, 3, 10, ... with nothing skipped
    header = (Path(CONF_DIR) / "experiment" / f"{name}.yaml").read_text().split("\ndefaults:")[0]
    assert "Learning-rate grid (issue 39)" in header and "final validation" in header
    stated = re.search(r"-> grid ([0-9.e,-]+)", header.replace("\n# ", " "))
    assert stated and sorted(float(v) for v in stated.group(1).strip(",.").split(",")) == lrs  # the grid it states


def test_fig6_gives_both_batch_sizes_the_same_epochs_and_bn_on_all_layers():
    small, large = (
        compose_train(["+experiment=fig6_mnist", f"dataset.batch_size={b}", "model=bn_mlp_all"]) for b in (4, 128)
    )
    assert (small.steps, large.steps) == (2 * (8000 // 4), 2 * (8000 // 128))  # 2 epochs each, short batch dropped
    assert small.eval_every * 4 == pytest.approx(large.eval_every * 128, rel=0.05)
    assert small.model.norm.norm_logits is True and small.model.norm.unbiased_var is True
    assert "bn_mlp" in sweep_axes(["+experiment=fig6_mnist"])["model"]  # the hidden-only BN stays as a variant


# ---- lnbench check ------------------------------------------------------------------------------
def test_check_arguments_presets_scale_and_pass_through_overrides():
    from lnbench.check import cli as check

    args = check.parse_args(["pmnist", "scale=2", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu"])
    assert args.presets == ["pmnist"] and args.scale == 2
    cmd = check.sweep_command(args, "pmnist")
    assert "+experiment=pmnist" in cmd and "steps=800" in cmd and "eval_every=200" in cmd
    assert "hydra/launcher=submitit_slurm" in cmd and "hydra/launcher=joblib" not in cmd  # the user's launcher wins
    assert f"hydra.sweep.dir={Path('outputs/check/pmnist-x2')}" in cmd  # fixed: a re-run resumes there
    default = check.sweep_command(check.parse_args([]), "pmnist")
    assert (
        "hydra/launcher=joblib" in default
        and "logger=none" in default
        and not any(a.startswith("steps=") for a in default)
    )
    assert check.parse_args([]).presets == check.claim_presets() and "fig6_mnist" in check.claim_presets()


def test_check_scales_a_preset_counted_in_epochs_by_its_epochs():
    from lnbench.check import cli as check

    scaled = check.scaled_overrides("fig6_mnist", 3)
    cfg = compose_train(["+experiment=fig6_mnist", "dataset.batch_size=128", *scaled])
    assert cfg.steps == 3 * 2 * (8000 // 128)


@pytest.mark.parametrize(
    "argv,match",
    [
        (["fig7"], "preset 'fig7' is not a claim preset: use one of"),
        (["scale=0"], "scale=0 is not allowed"),
        (["scale=x"], "scale=x is not allowed"),
    ],
)
def test_check_bad_arguments_are_one_clear_error(argv, match, capsys):
    from lnbench.check import cli as check

    assert check.main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


@pytest.mark.slow
def test_check_runs_a_preset_writes_its_page_and_resumes(tmp_path):
    out = tmp_path / "check"
    check = [sys.executable, "-m", "lnbench.cli", "check", "ln_gain_init", "scale=0.02", "--out", str(out)]
    check += ["dataset.val_size=64", "dataset.test_size=64", "model.hidden_size=16"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.run(check, capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (out / "check.md").read_text()
    assert page.count("| ln_gain_init |") == 2 and "ln_gain_init-x0.02/report/report.html" in page
    claims = json.loads((out / "ln_gain_init-x0.02" / "report" / "claims.json").read_text())
    assert all(c["verdict"] in ("held", "contradicted", "equivalent", "inconclusive") for c in claims)
    assert all(set(line["judging_seeds"]) >= {1000, 1001, 1002} for c in claims for line in c["lines"].values())
    before = {p: p.stat().st_mtime for p in out.glob("ln_gain_init-x0.02/*/metrics.jsonl")}
    assert len(before) == 18
    again = subprocess.run(check, capture_output=True, text=True, timeout=1800, env=env)
    assert again.returncode == 0 and "already completed" in again.stdout + again.stderr
    assert {p: p.stat().st_mtime for p in before} == before  # completed jobs were skipped, not re-run


def test_check_page_lists_every_verdict_with_its_interval_and_a_link(tmp_path):
    from lnbench.check import cli as check
    from lnbench.check.page import write_page
    from lnbench.claims.decision import ClaimVerdict

    lines = {
        "ln": {
            "chosen": "lr=0.01 (edge of grid; grid widened ×1)",
            "tuning_seeds": [0, 1, 2],
            "judging_seeds": [1000, 1001, 1002],
        }
    }

    def verdict(cid, text, effect, se, p, raw):  # one panel, one look of 9 seeds whose t test decides
        look = {"n": 9, "mean": effect, "se": se, "df": 8, "via_t": ["held", "contradicted", "equivalent"]}
        return ClaimVerdict(
            cid,
            text,
            "ln",
            "bn",
            "val/error final",
            estimand="mean",
            panels=[{"panel": "all runs", "looks": [look]}],
            p_decide=p,
            kind="held",
            raw_verdict=raw,
            decided_at=9,
            panel="all runs",
            effect=effect,
            n_seeds=9,
            sd=se * 3,
            lines=lines,
            better_mean=0.2,
            than_mean=0.2 + effect,
        ).as_dict()

    verdicts = [
        verdict("a", "LN beats BN", 0.05, 0.01, 0.0004, "held"),
        verdict("b", "BN beats LSTM", 0.01, 0.015, 0.5, "inconclusive"),
    ]
    args = check.Args(["pmnist"], 1.0, tmp_path)
    outcome = check.Outcome("pmnist", tmp_path / "pmnist", 60.0, (1.0, 2.0), 0, verdicts)
    md = write_page(
        [
            outcome,
            check.Outcome("fig6_mnist", tmp_path / "fig6_mnist", 1.0, (1.0, 1.0), 1, [], "the sweep left no runs"),
        ],
        args,
        61.0,
    )
    # Bonferroni over 2 undeclared claims: the interval at 97.5%, t(0.9875, 8) = 2.75
    assert (
        "| a: LN beats BN | pmnist | mean (rests on the tails) | held | held | "
        "mean +0.05 [0.0225, 0.0775] at 97.5% | 0 | — | — | ln 0.2, bn 0.25 | 3 + 3 | "
        "ln: lr=0.01 (edge of grid; grid widened ×1) | "
        "[report](pmnist/report/report.html) |"
    ) in md
    assert "| inconclusive (the interval includes 0" in md and "no verdict: the sweep left no runs" in md
    assert "estimands: 2 mean" in md
    assert (
        "held 1, inconclusive 1" in md
        and "load 1.0→2.0" in md
        and "Bonferroni over the declared family) of the 2 claims" in md
    )
    assert "<a href='pmnist/report/report.html'>report</a>" in (tmp_path / "check.html").read_text()


def test_check_fails_when_a_preset_gives_no_verdict(tmp_path, monkeypatch):
    from lnbench.check import cli as check

    class NoRuns:  # a runner whose preset's sweep left no runs
        overlapping = False

        def run(self, checks, done, budget):
            for c in checks:
                done(check.Outcome(c.preset, tmp_path / c.preset, 1.0, (0.0, 0.0), 1, [], "the sweep left no runs"))

    monkeypatch.setattr(check, "make_runner", lambda args: (NoRuns(), 1))
    assert check.main(["pmnist", "--out", str(tmp_path)]) == 1
    assert "no verdict: the sweep left no runs" in (tmp_path / "check.md").read_text()
