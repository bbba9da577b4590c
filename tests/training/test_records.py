"""Run records a team can compare later: provenance in every run directory (W&B or not), run names and
groups, the terminal's end-of-run and end-of-sweep blocks, val lines in train.log, and how presets,
the version and the outputs folder are found."""

import logging
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import REPO, TINY_CLI, run_cli, summary_of, tiny

from lnbench.launch.entry import CONF_DIR
from lnbench.launch.sweep.end import end_of_sweep_block, job_statuses
from lnbench.report.wandb_page import json_table
from lnbench.runs import job_axes, recorded_sweep
from lnbench.training import provenance
from lnbench.training.recipe import train
from lnbench.training.sinks.wandb_run import wandb_summary
from lnbench.training.tracker import Console, end_of_run_block, run_group, run_name


# ---- provenance -------------------------------------------------------------------------------
def test_every_run_records_its_provenance_with_wandb_disabled(tmp_path):
    summary = train(tiny("ln_lstm", "adding", "threads=1"), tmp_path)  # logger.wandb.mode=disabled
    prov = summary_of(tmp_path)["provenance"]
    assert prov == summary["provenance"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert prov["git_commit"] == head and isinstance(prov["git_dirty"], bool)
    for package in ("lnbench", "torch", "hydra-core", "omegaconf", "wandb"):
        assert prov[f"{package.replace('-', '_')}_version"] == metadata.version(package)
    assert prov["python"] == ".".join(map(str, sys.version_info[:3]))
    assert prov["torch_threads"] == 1 and prov["device"] == "cpu" and prov["cpu"] and prov["os"]


def test_dirty_flag_follows_uncommitted_changes_and_no_checkout_gives_no_git_keys(tmp_path):
    assert provenance.git_state.__wrapped__(tmp_path) == {}  # not a checkout (an installed package)
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    (repo / "outputs").mkdir()
    (repo / "outputs" / "run.log").write_text("untracked run output\n")
    clean = provenance.git_state.__wrapped__(repo)
    assert len(clean["git_commit"]) == 40 and clean["git_dirty"] is False
    (repo / "a.py").write_text("x = 2\n")
    assert provenance.git_state.__wrapped__(repo)["git_dirty"] is True


# ---- names, groups, the W&B summary ------------------------------------------------------------
def test_run_name_is_the_model_and_the_swept_values_and_stable_across_resume():
    overrides = ["+experiment=seq_len_sweep", "model=ln_lstm", "dataset.seq_len=50", "seed=1", "steps=300"]
    assert run_name("ln_lstm", overrides, swept={"model", "dataset.seq_len", "seed"}) == "ln_lstm · seq_len=50 · seed=1"
    resumed = [*overrides, "resume=/abs/outputs/runs/x", "hydra.run.dir=/abs/outputs/runs/x"]
    assert run_name("ln_lstm", resumed) == run_name("ln_lstm", overrides) == "ln_lstm · seq_len=50 · seed=1 · steps=300"
    assert run_name("ln_lstm", ["logger.wandb.mode=online", "threads=2", "device=cpu"]) == "ln_lstm"


def test_a_sweeps_axes_come_from_the_preset_and_the_command_line(tmp_path):
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - seed=0,1\n    - steps=5\n    - optim.lr=range(1,3)\n"
        "    - dataset.seq_len=10\n"
    )
    preset = {"model": "lstm,ln_lstm", "dataset.seq_len": "10,25,50"}  # the command line fixes seq_len
    assert job_axes(str(tmp_path), preset) == {"model", "seed", "optim.lr"}
    assert job_axes(str(tmp_path / "none"), None) == set()
    # the same model counts the sweep's jobs (the report's progress line) and its axes (preflight's checks)
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    params:\n      model: lstm,ln_lstm\n"
        "      seed: 0,1,2\n  overrides:\n    task:\n    - seed=7\n"
    )
    sweep = recorded_sweep(tmp_path)
    assert sweep.axes() == {"model": ["model=lstm", "model=ln_lstm"], "seed": ["seed=7"]}
    assert len(sweep.jobs()) == 2 and sweep.swept() == {"model"}


def test_group_is_the_experiment_and_the_sweeps_start_not_a_path():
    assert (
        run_group("seq_len_sweep", "outputs/multirun/2026-11-22/13-05-01-123456") == "seq_len_sweep 2026-11-22 13:05:01"
    )
    assert (
        run_group("[fig6_mnist,smoke]", "/abs/outputs/multirun/2026-11-22/13-05-01")
        == "fig6_mnist+smoke 2026-11-22 13:05:01"
    )
    assert run_group(None, "/data/sweeps/lr_scan") == "sweep lr_scan"


def test_wandb_summary_is_flat_with_ms_per_step():
    flat = wandb_summary(
        {
            "status": "completed",
            "test_at_len": {"40": {"mse": 0.2}, "80": {"mse": 0.3}},
            "provenance": {"git_dirty": False},
            "time_per_step": 0.0123,
            "wandb": "x",
            "error": None,
        }
    )
    assert flat == {
        "status": "completed",
        "test_at_len/40/mse": 0.2,
        "test_at_len/80/mse": 0.3,
        "provenance/git_dirty": False,
        "time_per_step": 0.0123,
        "ms_per_step": 12.3,
    }


@pytest.mark.parametrize(
    "data",
    [
        [{"claim": "a", "holds": True}, {"claim": "b", "ci": [1, 2]}],
        {"claims": [{"claim": "a", "holds": True}, {"claim": "b", "ci": [1, 2]}], "version": 1},
    ],
)
def test_claims_json_becomes_a_table(data):
    columns, rows = json_table(data)
    assert columns == ["claim", "holds", "ci"] and rows == [["a", True, None], ["b", None, "[1, 2]"]]


# ---- the terminal -----------------------------------------------------------------------------
def test_end_of_run_block_says_how_it_went_where_the_files_are_and_what_next(tmp_path):
    summary = train(tiny("ln_lstm", "adding", "test_seq_lens=[12,24]"), tmp_path)
    block = end_of_run_block(summary, tmp_path, "mse")
    assert block.startswith("run completed: 2 steps in ")
    assert f"final {summary['final_val']['mse']:.4g}  best {summary['best_val']['mse']:.4g}" in block
    assert "test @ 12" in block and "test @ 24" in block and "ms/step" in block
    assert f"next       lnbench report {tmp_path}" in block
    stopped = end_of_run_block({**summary, "status": "interrupted"}, tmp_path, "mse")
    assert f"lnbench train resume={tmp_path}" in stopped


def test_end_of_sweep_block_counts_jobs_and_names_failures(tmp_path):
    for job, status in enumerate(["completed", "failed", "diverged", None]):
        (tmp_path / str(job) / ".hydra").mkdir(parents=True)
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text("[]\n")
        if status:
            (tmp_path / str(job) / "summary.json").write_text(
                f'{{"status": "{status}", "error": "ConfigError: bad {job}", "diverged_at_step": 7}}'
            )
    block = end_of_sweep_block(tmp_path, job_statuses(tmp_path))
    assert f"sweep done: {tmp_path}" in block
    assert "jobs       4: 1 completed, 1 failed, 1 diverged, 0 interrupted, 1 no summary" in block
    assert "failed     1: ConfigError: bad 1" in block and "diverged   2: ConfigError: bad 2" in block
    assert f"continue   the same command with hydra.sweep.dir={tmp_path}" in block
    assert block.endswith(f"next       lnbench report {tmp_path}")


def test_end_of_sweep_block_names_a_completed_job_whose_numbers_are_flagged(tmp_path):
    (tmp_path / "0" / ".hydra").mkdir(parents=True)
    (tmp_path / "0" / ".hydra" / "overrides.yaml").write_text("[]\n")
    (tmp_path / "0" / "summary.json").write_text('{"status": "completed", "flags": ["final val loss 2.5e+14 is big"]}')
    block = end_of_sweep_block(tmp_path, job_statuses(tmp_path))
    assert "1 completed" in block and "flagged    0: final val loss 2.5e+14 is big" in block


@pytest.mark.parametrize("rounds_recorded", [True, False])
def test_a_check_presets_sweep_ends_on_its_own_jobs_in_number_order_beside_its_rounds(tmp_path, rounds_recorded):
    # A rerun of a finished check ends its preset's tuning sweep with the rounds' folders inside it: their names
    # were once compared with the job numbers (TypeError) and the block lost. A round that wrote its multirun.yaml
    # is a sweep of its own; one killed before it did is listed after the numbered jobs.
    for job in ["0", "2", "10", "judge-1/a_s1000", "widen-1/a_s0"]:
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text("[]\n")
        (tmp_path / job / "summary.json").write_text('{"status": "completed"}')
    for sweep in [tmp_path, *([tmp_path / "judge-1", tmp_path / "widen-1"] if rounds_recorded else [])]:
        (sweep / "multirun.yaml").write_text("{}\n")
    jobs = job_statuses(tmp_path)
    rounds = [] if rounds_recorded else ["judge-1/a_s1000", "widen-1/a_s0"]
    assert list(jobs) == ["0", "2", "10", *rounds]
    assert f"jobs       {len(jobs)}: {len(jobs)} completed" in end_of_sweep_block(tmp_path, jobs)


@pytest.mark.parametrize("terminal", [True, False])
def test_val_lines_stay_as_lines_above_the_live_bar(terminal, capsys, monkeypatch):
    """On a terminal rich redirects stdout while the bar is live: a logging handler made before the bar
    writes through rich for that time (its line lands above the bar, whole), then to its own stream again."""
    import rich
    import rich.console

    monkeypatch.setattr(rich, "_console", rich.console.Console(force_terminal=terminal, width=100))
    handler = logging.StreamHandler(sys.stdout)
    stream = handler.stream
    log = logging.getLogger("lnbench")
    log.addHandler(handler)
    old_level = log.level
    log.setLevel(logging.INFO)  # (setLevel, not the attribute: the logger caches what is enabled)
    monkeypatch.setattr(log, "disabled", False)  # an in-process Hydra run's dictConfig disables old loggers
    try:
        console = Console(total=10, enabled=True)
        assert (handler.stream is not stream) == terminal
        console.update(5, "val loss 0.5", line=True)
        console.update(6, "loss 0.4", line=False)
        console.close()
        assert handler.stream is stream
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    out = capsys.readouterr().out
    assert out.count("step 5  val loss 0.5\n") == 1 and "step 6  loss 0.4" not in out


@pytest.mark.parametrize("progress", ["false", pytest.param("true", marks=pytest.mark.slow)])
def test_cli_run_logs_val_lines_and_the_end_block_to_train_log(progress, tmp_path):
    proc = run_cli(
        "train",
        *[o for o in TINY_CLI if not o.startswith("progress")],
        f"progress={progress}",
        "steps=4",
        "eval_every=2",
        "log_every=2",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "train.log").read_text()
    assert "step 2  val loss" in log and "step 4  val loss" in log
    assert "run completed: 4 steps" in log and f"lnbench report {tmp_path}" in log
    assert "run completed: 4 steps" in proc.stdout


# ---- discoverability ----------------------------------------------------------------------------
def test_presets_lists_every_preset_with_the_description_its_file_starts_with():
    from lnbench.config.presets import read_presets

    proc = run_cli("presets")
    assert proc.returncode == 0
    for group in ("experiment", "model", "dataset"):
        files = sorted((Path(CONF_DIR) / group).glob("*.yaml"))
        assert files
        for f in files:
            (preset,) = [p for p in read_presets(Path(CONF_DIR)) if p.group == group and p.name == f.stem]
            assert preset.description and not preset.description.startswith("@"), f
            assert preset.description.split()[0] in proc.stdout and f"  {f.stem} " in proc.stdout
    seq = next(p for p in read_presets(Path(CONF_DIR)) if p.name == "seq_len_sweep")
    assert {"model", "dataset.seq_len"} <= set(seq.axes) and seq.axes["dataset.seq_len"] == "10,25,50"


def test_train_help_offers_presets_never_the_schemas():
    proc = run_cli("train", "--help")
    assert proc.returncode == 0 and re.search(r"model: (\w+, )*bn_gru, bn_lstm", proc.stdout)
    assert "base_" not in proc.stdout
    bad = run_cli("train", "model=base_sequence")
    assert bad.returncode != 0 and "model=base_sequence is not allowed" in bad.stderr and "base_mlp" not in bad.stderr


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"lnbench {metadata.version('lnbench')}"


def test_outputs_folder_is_in_the_repository_with_only_its_readme_tracked():
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "outputs"], capture_output=True, text=True
    ).stdout.split()
    assert tracked == ["outputs/README.md"]
    ignored = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "outputs/runs/2026-01-01/x/summary.json"],
        capture_output=True,
        text=True,
    )
    assert ignored.returncode == 0


@pytest.mark.slow
def test_a_sweep_with_a_failed_job_ends_with_its_block_names_and_report_run(tmp_path):
    """Hydra skips on_multirun_end when a job fails: the block still comes, last, and the W&B report run
    joins the jobs' group; each job's console lines carry its number and name."""
    from tests.wandb_file import read_offline_runs

    sweep = tmp_path / "2026-11-22" / "13-05-01-000001"
    args = [o for o in TINY_CLI if not o.startswith("logger.wandb.mode")]
    proc = run_cli(
        "train",
        "-m",
        "model=ln_lstm,bn_lstm",
        *args,
        "dataset.batch_size=1",
        "steps=2",
        "eval_every=2",
        "logger.wandb.mode=offline",
        "logger.wandb.report=true",
        f"hydra.sweep.dir={sweep}",
        env={"WANDB_MODE": "offline"},
    )
    assert proc.returncode == 1
    out = proc.stdout
    assert out.startswith(f"sweep: {sweep}\n")
    assert "[#0 ln_lstm] " in out and "[#1 bn_lstm] " in out  # only the swept key names a job
    block = out[out.index("sweep done:") :]
    assert "jobs       2: 1 completed, 1 failed, 0 diverged" in block and "failed     1: ConfigError" in block
    assert "W&B report" in block and block.rstrip().endswith(f"next       lnbench report {sweep}")

    job, report_run = read_offline_runs(sweep / "0"), read_offline_runs(sweep)
    assert (job.name, job.group, job.job_type) == ("ln_lstm", "sweep 2026-11-22 13:05:01", "train")
    assert (report_run.group, report_run.job_type) == (job.group, "report")
    assert report_run.history[0]["report/table/nrows"] == 2


# ---- the run directory's records: the thread count, the resolved config ------------------------
def test_the_thread_count_is_a_record_of_the_run_never_written_into_its_config(tmp_path, monkeypatch):
    """The launcher's count goes to the summary, the provenance and the checkpoint; the config (config.yaml,
    the checkpoint's, what W&B shows) keeps what the user set (here nothing)."""
    import torch
    import yaml

    from lnbench.config.runtime import Runtime

    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # keep this process's count for the other tests
    summary = train(tiny("ln_lstm", "adding"), tmp_path, runtime=Runtime(1, "1 usable cores", keeps_freed_memory=True))
    assert summary["threads"] == 1 and summary_of(tmp_path)["threads"] == 1
    assert summary["provenance"]["threads_chosen_by"] == "1 usable cores"
    assert summary["provenance"]["torch_threads"] == 1 and summary["provenance"]["malloc"].startswith("keeps freed")
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ckpt["threads"] == 1 and ckpt["config"]["threads"] is None
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == ckpt["config"]


def test_an_in_process_run_records_torchs_own_count_where_nothing_chose_one(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch, "set_num_threads", lambda n: pytest.fail(f"set_num_threads({n}): nothing chose it"))
    summary = train(tiny("ln_lstm", "adding"), tmp_path)
    assert summary["threads"] == torch.get_num_threads() == summary["provenance"]["torch_threads"]
    assert summary["provenance"]["threads_chosen_by"] == "torch's default" and "malloc" not in summary["provenance"]


def test_a_resume_keeps_the_thread_count_its_run_began_with():
    from lnbench.config.runtime import Runtime
    from lnbench.training.checkpoint import resumed_runtime

    chosen = Runtime(2, "2 usable cores")
    assert resumed_runtime(chosen, None, 4) == chosen  # a new run: the launcher's
    assert resumed_runtime(chosen, {"threads": 2, "config": {}}, 4) == chosen
    kept = resumed_runtime(Runtime(1, "threads=1 as configured"), {"threads": 2, "config": {"threads": None}}, 4)
    assert kept.threads == 2 and "as this run began (not 1" in kept.why
    assert resumed_runtime(Runtime(1, "x"), {"config": {"threads": 3}}, 4).threads == 3  # a checkpoint from before
    assert resumed_runtime(Runtime(None, "torch's default"), {"threads": 4, "config": {}}, 4).threads is None
    assert resumed_runtime(Runtime(None, "torch's default"), {"threads": 2, "config": {}}, 4).threads == 2


def test_the_report_reads_the_resolved_config_from_config_yaml_and_old_runs_from_the_checkpoint(tmp_path, monkeypatch):
    import torch

    from lnbench.runs import Run

    run_dir = tmp_path / "run"
    train(tiny("ln_lstm", "adding", "threads=1"), run_dir)
    with monkeypatch.context() as m:
        m.setattr(torch, "load", lambda *a, **k: pytest.fail("the report loaded checkpoint.pt"))
        written = Run(run_dir, ".").resolved
    assert written["model"]["hidden_size"] == 16 and written["threads"] == 1
    (run_dir / "config.yaml").unlink()  # a run directory from before config.yaml
    assert Run(run_dir, ".").resolved == written


def test_summary_json_has_one_shape_that_keeps_what_it_does_not_know(tmp_path):
    from lnbench.runs import Summary, read_summary, write_summary

    write_summary(tmp_path, Summary("failed", error="ValueError: x"))
    assert read_summary(tmp_path) == {"status": "failed", "steps": 0, "error": "ValueError: x"}  # unset: left out
    newer = {"status": "completed", "steps": 3, "wandb": None, "from_a_newer_lnbench": [1, 2]}
    assert Summary.from_dict(newer).as_dict() == newer  # None is written; unknown keys kept
    (tmp_path / "summary.json").write_text("{not json")
    assert read_summary(tmp_path)["status"] == "unreadable"
