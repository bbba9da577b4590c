"""Runs that survive: resume after a crash or a signal, bit-identical reruns, divergence, one process per
run directory, and files a kill cannot tear. Kill tests of the real CLI process are marked slow."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import (
    TINY_CLI,
    after_log,
    compose_train,
    lnbench_cmd,
    metrics_without_time,
    results_of,
    run_cli,
    summary_of,
    tiny,
)

from lnbench.atomic import read_jsonl, write_json
from lnbench.errors import ConfigError, Diverged, Interrupted
from lnbench.training import checkpoint
from lnbench.training.recipe import train

# Checkpoints at 0, 3, 6, 9, 10 fall between logging steps (every 2), so a resume must carry the
# unlogged window; eval every 4 carries best/last val across the cut.
RESUMABLE = ["steps=10", "log_every=2", "eval_every=4", "checkpoint_every=3", "dataset.batch_size=4"]


def cfg_for(*extra):
    return tiny("ln_lstm", "adding", *RESUMABLE, *extra)


class HardStop(Exception):
    """Stands in for SIGKILL inside the test process: the run dies between two checkpoints."""


def after_train_log(monkeypatch, at_step, action):
    """Runs `action` right after the train metrics of step `at_step` are written."""
    after_log(monkeypatch, lambda split, step, extra: split == "train" and step == at_step, action)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every resumed run must equal."""
    run_dir = tmp_path_factory.mktemp("reference")
    train(cfg_for(), run_dir)
    return run_dir


def test_same_seed_gives_bit_identical_metrics(reference, tmp_path):
    train(cfg_for(), tmp_path)
    assert metrics_without_time(tmp_path) == metrics_without_time(reference)
    assert results_of(summary_of(tmp_path)) == results_of(summary_of(reference))


@pytest.mark.parametrize(
    "model,dataset,extra",
    [("bn_mlp", "mnist", []), ("ln_gru", "seq_mnist", ["dataset.permute=true"]), ("ln_lstm", "copy", [])],
)
def test_same_seed_gives_bit_identical_metrics_on_real_and_fixed_data(model, dataset, extra, tmp_path):
    from conftest import HAVE_DATA

    if dataset in ("mnist", "seq_mnist") and not HAVE_DATA:
        pytest.skip("real data not found")
    cfg = tiny(model, dataset, "steps=3", "log_every=1", "eval_every=3", *extra)
    train(cfg, tmp_path / "a")
    train(cfg, tmp_path / "b")
    assert metrics_without_time(tmp_path / "a") == metrics_without_time(tmp_path / "b")


def test_seed_reaches_init_data_and_synthetic_sets(reference, tmp_path):
    from hydra.utils import instantiate

    from lnbench.training.recipe import seed_everything, setup_model

    cfg0, cfg1 = cfg_for(), cfg_for("seed=1")
    assert metrics_without_time(reference) != (train(cfg1, tmp_path) and metrics_without_time(tmp_path))
    d0, d1 = instantiate(cfg0.dataset, _convert_="all"), instantiate(cfg1.dataset, _convert_="all")
    assert not torch.equal(d0.train_batch(0)[0], d1.train_batch(0)[0])  # data order / fresh batches
    assert not torch.equal(next(d0.eval_batches("val"))[0], next(d1.eval_batches("val"))[0])  # synthetic sets
    seed_everything(0)
    m0 = setup_model(cfg0.model, d0.spec).state_dict()
    seed_everything(1)
    m1 = setup_model(cfg1.model, d1.spec).state_dict()
    assert any(not torch.equal(m0[k], m1[k]) for k in m0)  # initialization


def test_resume_after_a_crash_equals_the_uninterrupted_run(reference, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        after_train_log(m, 4, lambda: (_ for _ in ()).throw(HardStop()))
        with pytest.raises(HardStop):
            train(cfg_for(), tmp_path)
    ckpt = torch.load(tmp_path / checkpoint.FILE, weights_only=True)
    assert ckpt["step"] == 3 and len(ckpt["window"]) == 1  # the last checkpoint, mid logging window
    # The line of step 4 (logged after the checkpoint) is in the file, and a kill may tear a line too.
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "split": "tra')
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")[0]] == [2, 4]

    summary = train(cfg_for(), tmp_path)  # the same command in the same run directory
    assert metrics_without_time(tmp_path) == metrics_without_time(reference)
    assert results_of(summary) == results_of(summary_of(reference))
    assert summary["resumed_at"] == [3]


def test_a_resume_onto_a_file_that_lost_bytes_below_its_checkpoint_appends_whole_lines(
    reference, tmp_path, monkeypatch, caplog
):
    """The checkpoint at step 3 kept the file's length then; the file then lost bytes below that length (a copy cut
    short, issue 40). The resume cuts it to its last whole line, so every line it appends reads back."""
    with monkeypatch.context() as m:
        after_train_log(m, 4, lambda: (_ for _ in ()).throw(HardStop()))
        with pytest.raises(HardStop):
            train(cfg_for(), tmp_path)
    kept = torch.load(tmp_path / checkpoint.FILE, weights_only=True)["sinks"]["jsonl"]["bytes"]
    os.truncate(tmp_path / "metrics.jsonl", kept - 5)  # the step-2 line, cut
    train(cfg_for(), tmp_path)
    records, skipped = read_jsonl(tmp_path / "metrics.jsonl")
    assert skipped == 0 and "lines are missing" in caplog.text
    after = [{k: v for k, v in r.items() if k != "time"} for r in records]
    assert after == [r for r in metrics_without_time(reference) if r["step"] > 3]  # step 2's line lost, no more


def test_sigterm_checkpoints_then_stops_and_resume_matches(reference, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        after_train_log(m, 6, lambda: os.kill(os.getpid(), signal.SIGTERM))
        with pytest.raises(Interrupted) as info:
            train(cfg_for(), tmp_path)
    assert info.value.exit_code == 128 + signal.SIGTERM and info.value.step == 6
    assert summary_of(tmp_path)["status"] == "interrupted"
    assert torch.load(tmp_path / checkpoint.FILE, weights_only=True)["step"] == 6
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers are put back

    train(cfg_for(), tmp_path)
    assert metrics_without_time(tmp_path) == metrics_without_time(reference)
    assert results_of(summary_of(tmp_path)) == results_of(summary_of(reference))


def test_sigint_mid_interval_checkpoints_the_unlogged_window(reference, tmp_path, monkeypatch):
    # SIGINT (Ctrl-C) during step 5, which is neither a logging nor a checkpoint step.
    original = checkpoint.StopSignals.__enter__

    def enter(self):
        out = original(self)
        real = torch.Tensor.backward  # called once per training step, never in evaluation
        calls = []

        def backward(*a, **k):
            calls.append(1)
            if len(calls) == 5:
                os.kill(os.getpid(), signal.SIGINT)
            return real(*a, **k)

        monkeypatch.setattr(torch.Tensor, "backward", backward)
        return out

    with monkeypatch.context() as m:
        m.setattr(checkpoint.StopSignals, "__enter__", enter)
        with pytest.raises(Interrupted) as info:
            train(cfg_for(), tmp_path)
    monkeypatch.undo()
    assert info.value.exit_code == 130 and info.value.step == 5
    assert len(torch.load(tmp_path / checkpoint.FILE, weights_only=True)["window"]) == 1
    train(cfg_for(), tmp_path)
    assert metrics_without_time(tmp_path) == metrics_without_time(reference)


def test_a_completed_run_is_not_trained_again(reference, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    before = (run_dir / "metrics.jsonl").read_bytes()
    assert train(cfg_for(), run_dir)["status"] == "completed"
    assert (run_dir / "metrics.jsonl").read_bytes() == before


def test_resume_refuses_another_config(reference, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    with pytest.raises(ConfigError, match=r"model.hidden_size=16 there, 32 now"):
        train(cfg_for("model.hidden_size=32"), run_dir)
    # Where and how fast a run goes may change.
    assert train(cfg_for("progress=true", "threads=1", "checkpoint_every=5"), run_dir)["status"] == "completed"


def test_two_processes_never_share_a_run_directory(tmp_path):
    from conftest import locked_by_another_process

    with locked_by_another_process(tmp_path):
        with pytest.raises(ConfigError, match="in use by another lnbench process"):
            train(cfg_for(), tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()
    assert train(cfg_for(), tmp_path)["status"] == "completed"  # free again
    assert not (tmp_path / ".lock").exists()


def test_unreadable_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / checkpoint.FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(Exception, match="cannot be read.*Move it away"):
        train(cfg_for(), tmp_path)


# ---- divergence ---------------------------------------------------------------------------------
DIVERGE = ["model=mlp", "dataset=mnist", "optim=sgd", "optim.lr=1e12"]


def test_divergence_stops_with_status_and_step(tmp_path):
    cfg = tiny("lstm", "adding", "optim=sgd", "optim.lr=1e12", "steps=20", "log_every=5")
    with pytest.raises(Diverged) as info:
        train(cfg, tmp_path)
    s = summary_of(tmp_path)
    assert s["status"] == "diverged" and s["diverged_at_step"] == info.value.step and 1 <= s["steps"] <= 20
    assert "test" not in s


def test_diverged_single_run_exits_1_with_one_line(tmp_path):
    r = run_cli(
        "train", *TINY_CLI, "optim=sgd", "optim.lr=1e12", "steps=20", "log_every=5", f"hydra.run.dir={tmp_path}"
    )
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("lnbench: the loss is not finite") and "diverged" in last
    assert summary_of(tmp_path)["status"] == "diverged"


@pytest.mark.slow
def test_sweep_records_a_diverged_job_and_runs_the_others(tmp_path):
    r = run_cli(
        "train",
        "-m",
        *TINY_CLI,
        "steps=6",
        "log_every=2",
        "eval_every=3",
        "optim=sgd",
        "optim.lr=1e12,0.01",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert r.returncode != 0
    assert "Traceback" not in r.stderr + r.stdout
    assert "job 0" in r.stderr and "diverged" in r.stderr
    assert summary_of(tmp_path / "0")["status"] == "diverged"
    assert summary_of(tmp_path / "1")["status"] == "completed"


# ---- the CLI: resume=<dir>, real signals -------------------------------------------------------
def cli_run_dir(run_dir, overrides, monkeypatch, stop_at=None):
    """A run made in this process as `lnbench train <overrides> hydra.run.dir=<run_dir>` would make it
    (with its .hydra/overrides.yaml), optionally stopped by SIGTERM after the train log of `stop_at`."""
    overrides = ["logger.wandb.mode=disabled", "progress=false", *overrides]
    threads = torch.get_num_threads()
    try:
        with monkeypatch.context() as m:
            if stop_at is not None:
                after_train_log(m, stop_at, lambda: os.kill(os.getpid(), signal.SIGTERM))
            try:
                train(compose_train(overrides), run_dir)
            except Interrupted:
                pass
    finally:
        torch.set_num_threads(threads)
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return run_dir


CLI_RUN = [*TINY_CLI, "steps=8", "log_every=2", "eval_every=3", "checkpoint_every=5"]


# `lnbench <args>`, counting the reads of checkpoint.pt (printed last on stderr).
COUNTING_READS = """
import atexit, sys, torch
reads = []
load = torch.load
torch.load = lambda f, *a, **k: (reads.append(str(f)) if str(f).endswith("checkpoint.pt") else None) or load(f, *a, **k)
atexit.register(lambda: print(f"checkpoint reads: {len(reads)}", file=sys.stderr))
from lnbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_resume_dir_continues_with_the_runs_own_config_and_reads_its_checkpoint_once(tmp_path, monkeypatch):
    ref = cli_run_dir(tmp_path / "ref", CLI_RUN, monkeypatch)
    run_dir = cli_run_dir(tmp_path / "run", CLI_RUN, monkeypatch, stop_at=4)
    assert summary_of(run_dir)["status"] == "interrupted"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | {"WANDB_MODE": "disabled"}
    r = subprocess.run(
        [sys.executable, "-c", COUNTING_READS, "train", f"resume={run_dir}"],  # no overrides: the run's own
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "resuming" in r.stdout + r.stderr
    assert r.stderr.rstrip().endswith("checkpoint reads: 1")  # preflight reads it, the run uses that read
    assert metrics_without_time(run_dir) == metrics_without_time(ref)
    assert results_of(summary_of(run_dir)) == results_of(summary_of(ref))


def test_resume_dir_refuses_changes_and_leaves_the_run_dir_as_it_was(tmp_path, monkeypatch):
    run_dir = cli_run_dir(tmp_path / "run", CLI_RUN, monkeypatch, stop_at=4)
    files = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    r = run_cli("train", f"resume={run_dir}", "model.hidden_size=9", "optim.lr=0.1")
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert "model.hidden_size=8 there, 9 now; optim.lr=0.001 there, 0.1 now" in r.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == files  # .hydra/ too


def wait_for_step(run_dir, proc, step, timeout=300):
    """Waits until the run has checkpointed at `step` or later; the run must still be going."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed: make it longer"
        path = run_dir / "metrics.jsonl"
        if path.exists():
            records, _ = read_jsonl(path)
            if any(r["split"] == "val" and r["step"] >= step for r in records):
                return
        time.sleep(0.05)
    raise TimeoutError


KILL_RUN = [*TINY_CLI, "steps=3000", "log_every=7", "eval_every=50", "checkpoint_every=40"]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"])
def test_killed_cli_run_resumes_to_the_uninterrupted_metrics(sig, tmp_path):
    ref = tmp_path / "ref"
    assert run_cli("train", *KILL_RUN, f"hydra.run.dir={ref}").returncode == 0
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(WANDB_MODE="disabled")
    proc = subprocess.Popen(
        [*lnbench_cmd(), "train", *KILL_RUN, f"hydra.run.dir={run_dir}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_step(run_dir, proc, 1000)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (-sig if sig == signal.SIGKILL else 128 + sig), err
    if sig != signal.SIGKILL:
        assert "Traceback" not in err and f"resume={run_dir}" in err
        assert summary_of(run_dir)["status"] == "interrupted"
    assert summary_of(run_dir)["steps"] < 3000 if (run_dir / "summary.json").exists() else True

    r = run_cli("train", f"resume={run_dir}")
    assert r.returncode == 0, r.stderr
    assert metrics_without_time(run_dir) == metrics_without_time(ref)
    assert results_of(summary_of(run_dir)) == results_of(summary_of(ref))


# ---- files a kill cannot tear -------------------------------------------------------------------
def test_write_json_leaves_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_json(path, {"status": "running"})

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dumps", boom)
    with pytest.raises(KeyboardInterrupt):
        write_json(path, {"status": "completed"})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"status": "running"}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left behind


def test_read_jsonl_skips_and_flags_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert read_jsonl(path) == ([{"step": 1}, {"step": 2}], True)
    path.write_bytes(b'{"step": 1}\n\x00\x00\x00')  # a crash can leave zeros past the last write
    assert read_jsonl(path) == ([{"step": 1}], True)
    path.write_text('{"step": 1}\n{"step": 2}\n')
    assert read_jsonl(path) == ([{"step": 1}, {"step": 2}], False)


@pytest.mark.slow
def test_parallel_sweep_jobs_get_their_own_directories(tmp_path):
    r = run_cli(
        "train",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        *TINY_CLI,
        "steps=2",
        "log_every=1",
        "eval_every=2",
        "seed=0,1",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert r.returncode == 0, r.stderr
    a, b = metrics_without_time(tmp_path / "0"), metrics_without_time(tmp_path / "1")
    assert len(a) == len(b) and a != b


def test_a_plain_run_makes_its_own_directory_under_outputs_runs(tmp_path):
    r = run_cli("train", *TINY_CLI, "steps=3", "eval_every=3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "outputs" / "runs").glob("*/*")
    assert summary_of(run_dir)["status"] == "completed"
