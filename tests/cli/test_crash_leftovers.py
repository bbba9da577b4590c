"""What a crash leaves is read, not tripped over (issue 40): `status`, `report` and a resume read a torn or damaged
metrics.jsonl line by line and say what they skipped; `status` believes a run's lock over its files' freshness; a
check's judging run is a run; a closed pipe ends a command quietly; a killed run leaves no empty crash.log; a sink
that cannot start is turned off and the run goes on; a destination is checked before the long work."""

import os
import signal
import socket
import subprocess
import time

import pytest
import yaml
from conftest import REPO, TINY_CLI, lnbench_cmd, run_cli, start_cli, tiny

from lnbench.atomic import read_jsonl
from lnbench.cli import main
from lnbench.launch.process.isolate import crash_log, in_child_process
from lnbench.launch.sweep import status
from lnbench.training.recipe import train
from tests.report.test_report import make_job

# Lines a crash, a full disk or a stray editor can leave in the middle of metrics.jsonl, each one no record.
DAMAGE = [
    '{"step": 20, "split": "tr',  # torn mid-line, then more lines were appended after it
    "\x00\x00\x00\x00",  # zeros where a crash left a hole
    "[1, 2, 3]",  # JSON, but not an object
    '{"step": "twenty", "split": "val"}',  # an object no reader can index by step
    '{"split": "val", "loss": 1}',  # no step at all
]


@pytest.fixture
def damaged(tmp_path):
    """A finished run whose metrics.jsonl holds one of each kind of damage between its whole lines."""
    run = make_job(tmp_path, "run", ["seed=0"])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_bytes("\n".join(lines[:2] + DAMAGE + lines[2:]).encode() + b"\n\xff\xfe not utf-8\n")
    return run


def test_status_and_report_read_a_damaged_metrics_file_line_by_line_and_say_so(damaged, capsys):
    assert main(["status", str(damaged)]) == 0
    out = capsys.readouterr().out
    assert "state      completed, step 30 of 30" in out  # the whole lines were read
    assert f"skipped    run: {len(DAMAGE) + 1} lines of metrics.jsonl could not be read" in out
    assert main(["report", str(damaged)]) == 0
    md = (damaged / "report" / "report.md").read_text()
    assert f"{len(DAMAGE) + 1} lines of metrics.jsonl could not be read" in md and "| 0.1 |" in md


def test_read_jsonl_never_raises_on_damage_anywhere(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n' + "\n".join(DAMAGE[:3]).encode() + b'\n{"step": 2}\n')
    assert read_jsonl(path) == ([{"step": 1}, {"step": 2}], 3)


def test_status_believes_the_lock_over_fresh_files(tmp_path, holding):
    """A run killed with kill -9 leaves its lock file, naming this machine, and fresh files: stopped, not
    running. A lock another machine holds (a SLURM job on a compute node) cannot be seen: fresh files decide."""
    run = make_job(tmp_path, "killed", ["seed=0"], config={"seed": 0, "steps": 100})
    (run / "summary.json").unlink()
    (run / ".lock").write_text(f"pid 999999999 on {os.uname().nodename}\n")
    assert status.lines(run)[1] == "  state      stopped, step 30 of 100"
    holding(run)
    assert status.lines(run)[1] == "  state      running, step 30 of 100"
    other = make_job(tmp_path, "elsewhere", ["seed=0"], config={"seed": 0, "steps": 100})
    (other / "summary.json").unlink()
    (other / ".lock").write_text("pid 123 on node-that-is-not-" + socket.gethostname() + "\n")
    assert status.lines(other)[1] == "  state      running, step 30 of 100"


def test_a_checks_judging_run_given_alone_is_a_run(tmp_path, capsys):
    rounds = tmp_path / "check" / "pmnist" / "judge-1"
    rounds.mkdir(parents=True)
    (rounds / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": ["seed=1000"]}}}))
    judged = {"stage": "judge", "steps": 30}
    job = make_job(rounds, "lstm_judge_s1000", ["+cell=lstm_judge", "seed=1000"], config=judged)
    assert main(["status", str(job)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run {job}" and out[1] == "  state      completed, step 30 of 30"
    assert main(["status", str(tmp_path / "check")]) == 0  # and the whole check still reads as one
    assert capsys.readouterr().out.startswith(f"check {tmp_path / 'check'}\n  pmnist  judge 1 of 1 done")


def test_a_closed_pipe_ends_every_reading_command_quietly(damaged):
    for command in (f"status {damaged}", f"report {damaged}", "presets", "--help"):
        done = subprocess.run(
            f"{' '.join(lnbench_cmd())} {command} | head -c 1",
            shell=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
        assert done.stderr == "" and len(done.stdout) == 1, (command, done.stderr)


@pytest.mark.parametrize("how", ["kill", "return"])
def test_a_forked_job_leaves_a_crash_log_only_with_something_in_it(how, tmp_path):
    def job():
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return "done"

    with crash_log(tmp_path):
        if how == "kill":
            with pytest.raises(Exception, match="SIGKILL"):
                in_child_process(tmp_path, job)
            assert "killed by SIGKILL" in (tmp_path / "crash.log").read_text()
        else:
            assert in_child_process(tmp_path, job) == "done"
            assert not (tmp_path / "crash.log").exists()


@pytest.mark.slow  # a real run started and killed (~20 s; the lock's rule itself: test_status_believes_the_lock...)
def test_a_single_run_killed_with_kill_9_is_stopped_and_leaves_no_crash_log(tmp_path):
    run_dir = tmp_path / "run"
    cli = start_cli("train", *TINY_CLI, "steps=100000", "log_every=1", f"hydra.run.dir={run_dir}")
    try:
        deadline = time.time() + 120
        while not (run_dir / "metrics.jsonl").is_file() or (run_dir / "metrics.jsonl").stat().st_size == 0:
            assert cli.poll() is None and time.time() < deadline, cli.communicate()
            time.sleep(0.2)
    finally:
        cli.kill()
        cli.communicate()
    assert not (run_dir / "crash.log").exists() and (run_dir / ".lock").exists()
    done = run_cli("status", str(run_dir), timeout=120)
    assert done.returncode == 0 and "  state      stopped, step " in done.stdout, done.stdout + done.stderr


def test_a_sink_that_cannot_start_is_turned_off_and_the_run_goes_on(tmp_path, caplog):
    (tmp_path / "taken").mkdir()  # the CSV file's name is a folder: the sink cannot write it
    cfg = tiny("ln_lstm", "adding", "logger=csv", "logger.csv.file=taken")
    summary = train(cfg, tmp_path)
    assert summary["status"] == "completed" and len(read_jsonl(tmp_path / "metrics.jsonl")[0]) > 0
    warnings = [r.getMessage() for r in caplog.records if "logger.csv" in r.getMessage()]
    assert len(warnings) == 1 and "is turned off; the run goes on" in warnings[0]


def test_a_csv_file_in_a_folder_of_the_run_is_made(tmp_path):
    train(tiny("ln_lstm", "adding", "logger=csv", "logger.csv.file=tables/metrics.csv"), tmp_path)
    assert (tmp_path / "tables" / "metrics.csv").read_text().startswith("step,split")


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--no-runner", "--no-sweep", "--no-train", "--json", "/proc/lnbench/b.json"],
        ["report", "{run}", "--out", "/proc/lnbench/report"],
        ["check", "ln_gain_init", "--out", "/proc/lnbench/check"],
    ],
    ids=["bench", "report", "check"],
)
def test_a_destination_the_file_system_refuses_is_refused_before_the_work(argv, damaged, capsys):
    """root may write anywhere but where the file system refuses: tried, not read from permissions."""
    started = time.time()
    assert main([a.format(run=damaged) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lnbench: error: ") and "/proc refuses new files" in err, err
    assert time.time() - started < 30  # nothing measured, trained or drawn first
