"""Progress you can read (issue 32): a run outside a terminal logs its pace at a steady interval and warns once
when it will take long; a sweep says when each job starts and ends and gives a total, in whole lines, also
under joblib on a terminal, where no job draws a bar."""

import io
import logging
import os
import pty
import re
import subprocess
from types import SimpleNamespace

import pytest
from conftest import REPO, TINY_CLI, lnbench_cmd
from omegaconf import OmegaConf

from lnbench.launch.sweep.end import sweep_title
from lnbench.launch.sweep.progress import SweepProgress
from lnbench.runs import load_run
from lnbench.training import progress
from lnbench.training.progress import Pace
from tests.launch.test_status import multirun, old
from tests.report.test_report import make_job


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def ticks(pace: Pace, clock: Clock, steps: range, seconds_per_step: float) -> None:
    for step in steps:
        clock.now += seconds_per_step
        pace.tick(step)


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_run_outside_a_terminal_logs_its_pace_every_30_s(caplog):
    clock = Clock()
    pace = Pace(steps=1000, lines=True, clock=clock)
    pace.note("loss 0.5")
    with caplog.at_level(logging.INFO, logger="lnbench"):
        ticks(pace, clock, range(1, 101), 0.5)  # 50 s: one line, at 30 s
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert lines == ["step 60/1000  loss 0.5  500.0 ms/step  ETA 7.8 min"]
    caplog.clear()
    quiet = Pace(steps=1000, lines=False, clock=clock)  # a progress bar shows it: no lines
    with caplog.at_level(logging.INFO, logger="lnbench"):
        ticks(quiet, clock, range(1, 101), 0.5)
    assert not [r for r in caplog.records if r.getMessage().startswith("step ")]


def test_a_long_run_says_so_once_after_its_first_steps(caplog):
    clock = Clock()
    pace = Pace(steps=2000, start=100, lines=False, clock=clock)
    with caplog.at_level(logging.WARNING, logger="lnbench"):
        ticks(pace, clock, range(101, 110), 24.7)  # DRAW at the paper's size on 2 cores
    assert warnings(caplog) == ["this run will take about 13.0 h more: 24.7 s a step over 1896 steps left."]
    caplog.clear()
    short = Pace(steps=2000, lines=False, clock=clock)
    with caplog.at_level(logging.WARNING, logger="lnbench"):
        ticks(short, clock, range(1, 10), 0.1)  # 3.3 min in all: under the threshold
    assert warnings(caplog) == []


def test_the_warning_names_the_experiment_that_runs_the_preset_small(monkeypatch):
    assert progress.experiments_running("ln_draw") == ["draw_mnist"]
    assert progress.experiments_running("ln_lstm") == []  # no experiment resizes it

    def job_of(**choices):
        return lambda: SimpleNamespace(runtime=SimpleNamespace(choices=choices))

    monkeypatch.setattr(progress.HydraConfig, "get", job_of(model="ln_draw"))
    assert progress.smaller_preset_hint() == (
        " +experiment=draw_mnist runs model=ln_draw smaller, at a size for a few CPU cores (`lnbench presets`)."
    )
    monkeypatch.setattr(progress.HydraConfig, "get", job_of(model="ln_draw", experiment="draw_mnist"))
    assert progress.smaller_preset_hint() == ""  # already the small one


def test_a_sweeps_lines_say_each_job_start_and_end_and_a_total(tmp_path):
    sweep = tmp_path / "sweep"
    multirun(sweep, {}, ["seed=0,1,2"])
    make_job(sweep, 0, ["seed=0"])  # ended before the sweep was first looked at: no line of its own
    clock, out = Clock(), io.StringIO()
    shown = SweepProgress(sweep, out=out, terminal=False, clock=clock)
    assert shown.look() == []
    running = make_job(sweep, 1, ["seed=1"], config={"seed": 1, "steps": 100})
    (running / "summary.json").unlink()  # its log was just written: running
    assert shown.look() == ["sweep: job 1 (seed=1) started"]
    make_job(sweep, 2, ["seed=2"], status="failed", error="RuntimeError: boom")
    clock.now += 30
    assert shown.look() == [
        "sweep: job 2 (seed=2) failed: RuntimeError: boom",
        "sweep: 2 of 3 done (1 completed, 1 failed), 1 running, ~7 s left",
    ]
    old(running)  # killed: no summary, no lock, no fresh log
    assert shown.look() == ["sweep: job 1 (seed=1) stopped at step 30 (a rerun resumes it)"]
    assert out.getvalue().splitlines()[:1] == ["sweep: job 1 (seed=1) started"]


def test_a_job_stopped_between_logs_and_one_whose_record_is_damaged_are_said_as_they_ended(tmp_path):
    sweep = tmp_path / "sweep"
    multirun(sweep, {}, ["seed=0,1"])
    shown = SweepProgress(sweep, out=io.StringIO(), terminal=False, clock=Clock())
    assert shown.look() == []
    stopped = make_job(sweep, 0, ["seed=0"], status="interrupted")  # logged at step 30, its checkpoint at 41
    (stopped / "summary.json").write_text('{"status": "interrupted", "steps": 41}')
    make_job(sweep, 1, ["seed=1"])
    (sweep / "1" / "summary.json").write_text("[]")
    said = shown.look()
    assert said[0] == "sweep: job 0 (seed=0) stopped at step 41 (a rerun resumes it)"
    assert said[1].startswith("sweep: job 1 (seed=1) unreadable: ") and "summary.json holds list" in said[1]


def test_a_checks_overlapping_sweeps_say_which_preset_each_line_is_of(tmp_path):
    def config(experiment, sweep_dir):
        choices = {"model": "ln_lstm"} | ({"experiment": experiment} if experiment else {})
        return OmegaConf.create({"hydra": {"runtime": {"choices": choices}, "sweep": {"dir": str(sweep_dir)}}})

    assert sweep_title(config("pmnist", tmp_path / "check" / "pmnist")) == "pmnist"  # lnbench check's <out>/<preset>
    assert sweep_title(config("pmnist", tmp_path / "check" / "pmnist" / "judge-2")) == "pmnist/judge-2"  # a round
    assert sweep_title(config("pmnist", tmp_path / "multirun" / "2026-11-27" / "12-00-00")) == ""
    assert sweep_title(config(None, tmp_path / "pmnist")) == ""
    sweep = tmp_path / "check" / "pmnist"
    multirun(sweep, {}, ["seed=0,1"])
    shown = SweepProgress(sweep, out=io.StringIO(), terminal=False, clock=Clock(), title="pmnist")
    assert shown.look() == []
    running = make_job(sweep, 1, ["seed=1"], config={"seed": 1, "steps": 100})
    (running / "summary.json").unlink()
    assert shown.look() == ["sweep pmnist: job 1 (seed=1) started"]


def test_on_a_terminal_the_total_comes_with_a_line_per_running_job(tmp_path):
    sweep = tmp_path / "sweep"
    multirun(sweep, {"model": "mlp,ln_mlp"}, ["seed=0"])
    for num, model in enumerate(("mlp", "ln_mlp")):
        job = make_job(sweep, num, [f"model={model}", "seed=0"], config={"seed": 0, "steps": 100})
        (job / "summary.json").unlink()
    clock = Clock()
    shown = SweepProgress(sweep, out=io.StringIO(), terminal=True, clock=clock)
    shown.look()
    clock.now += 10
    assert shown.look() == [
        "sweep: 0 of 2 done, 2 running, ~7 s left",
        "  running  0 (model=mlp): step 30 of 100, ~7 s left",
        "  running  1 (model=ln_mlp): step 30 of 100, ~7 s left",
    ]


@pytest.mark.slow
def test_a_joblib_sweep_on_a_terminal_draws_no_bar_and_writes_whole_lines(tmp_path):
    """The sweep's output on a pseudo-terminal: every line is one of Hydra's, a job's (prefixed), or the sweep's.
    (Its totals come every 10 s: shown by the tests above, on a clock of their own.)"""
    main, secondary = pty.openpty()
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    env.pop("HYDRA_FULL_ERROR", None)
    # jobs of several seconds each, so that the sweep's look every 2 s sees each one running
    args = [
        "-m",
        "seed=0,1,2",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "steps=10000",
        "log_every=500",
        *[a for a in TINY_CLI if a != "progress=false"],
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    proc = subprocess.Popen(
        [*lnbench_cmd(), "train", *args], cwd=REPO, env=env, stdout=secondary, stderr=secondary, close_fds=True
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=600) == 0
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    assert "━" not in text and "\x1b[" not in text  # no bar, no cursor moves
    whole = re.compile(r"^(\[#\d+ ln_lstm · seed=\d\] |\[\d{4}-\d\d-\d\d [\d:,]+\]\[HYDRA\] |sweep|  |\s*#\d+ : )")
    assert all(whole.match(line) for line in text.splitlines() if line.strip()), text
    for job in range(3):
        assert f"sweep: job {job} (seed={job}) started" in text, text
        assert f"sweep: job {job} (seed={job}) completed in " in text, text


def test_a_look_reads_again_only_the_jobs_whose_files_changed(tmp_path, holding, monkeypatch):
    """A sweep's process looks every 2 s: a big sweep's finished jobs are not parsed again each time. A job whose
    lock went (killed) with no file changed is still seen to stop."""
    from lnbench.launch.sweep import status

    sweep = tmp_path / "sweep"
    multirun(sweep, {}, ["seed=0,1"])
    make_job(sweep, 0, ["seed=0"])
    running = make_job(sweep, 1, ["seed=1"], config={"seed": 1, "steps": 100})
    (running / "summary.json").unlink()
    old(running)  # its log is an hour old: only its lock says it runs
    lock = holding(running)
    read = []
    monkeypatch.setattr(status, "load_run", lambda path, root: read.append(path.name) or load_run(path, root))
    shown = SweepProgress(sweep, out=io.StringIO(), terminal=False, clock=Clock())
    shown.look()
    assert sorted(read) == ["0", "1"] and shown.states == {"0": "completed", "1": "running"}
    read.clear()
    lock.close()  # killed: the lock is released, no file changes
    assert shown.look() == ["sweep: job 1 (seed=1) stopped at step 30 (a rerun resumes it)"] and read == []
