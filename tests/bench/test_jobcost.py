"""Where a job's time goes: lnbench.phases' Timer (off: it only adds up; on: one line per phase) and the job-cost
table lnbench.bench.jobcost makes of its lines. No timing is asserted, only what is recorded and how it is added."""

import json
import os

import pytest
from conftest import tiny

from lnbench import phases
from lnbench.bench import jobcost
from lnbench.training.recipe import train


def test_an_off_timer_adds_up_its_phases_and_writes_nothing_nor_reads_the_wall_clock(monkeypatch):
    monkeypatch.setattr(phases.time, "time", lambda: pytest.fail("an off timer read the wall clock"))
    timer = phases.Timer()
    for _ in range(3):
        with timer.phase(phases.EVAL_VAL):
            pass
    timer.add(phases.CHECKPOINTS, 0.25)
    timer.since_process_start(phases.SWEEP_START)  # reads /proc only when on
    assert not timer.on and set(timer.seconds) == {phases.EVAL_VAL, phases.CHECKPOINTS}
    assert 0 <= timer.seconds[phases.EVAL_VAL] < 1 and timer.seconds[phases.CHECKPOINTS] == 0.25


def test_an_on_timer_writes_a_line_per_phase_naming_its_job(tmp_path):
    path = tmp_path / "phases.jsonl"
    timer = phases.Timer(str(path), job=tmp_path / "run")
    timer.add(phases.CHECKPOINTS, 0.5)
    timer.mark("x")
    timer.since(phases.JOB_FORK, "x")
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [ln["phase"] for ln in lines] == [phases.CHECKPOINTS, phases.JOB_FORK]
    assert {ln["job"] for ln in lines} == {str(tmp_path / "run")} and {ln["pid"] for ln in lines} == {os.getpid()}
    assert lines[0]["t1"] - lines[0]["t0"] == pytest.approx(0.5)


def test_the_summarys_eval_and_checkpoint_times_are_the_timers_phases(tmp_path, monkeypatch):
    path = tmp_path / "phases.jsonl"
    monkeypatch.setenv(phases.ENV, str(path))
    summary = train(tiny("ln_lstm", "adding", "steps=4", "eval_every=2", "checkpoint_every=2", "logger=none"), tmp_path)
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert {ln["job"] for ln in lines} == {str(tmp_path)}

    def total(name):
        return sum(ln["t1"] - ln["t0"] for ln in lines if ln["phase"] == name)

    assert sum(ln["phase"] == phases.EVAL_VAL for ln in lines) == 2  # at steps 2 and 4
    assert sum(ln["phase"] == phases.CHECKPOINTS for ln in lines) == 3  # at steps 0, 2 and 4
    assert summary["eval_time"] == pytest.approx(total(phases.EVAL_VAL), abs=2e-3)
    assert summary["checkpoint_time"] == pytest.approx(total(phases.CHECKPOINTS), abs=2e-3)


def line(phase, t0, t1, pid=1, job="a"):
    return {"phase": phase, "t0": t0, "t1": t1, "pid": pid, "job": job}


def test_a_jobs_time_runs_from_its_hydra_job_start_to_the_next_ones():
    """Two jobs in one worker (pid 1), each forked into a child (pids 2 and 3); the sweep's own lines apart."""
    records = [
        line(phases.SWEEP_PREFLIGHT, 0.0, 1.0, pid=0, job=None),
        line(phases.WORKER_START, 0.0, 2.0, job=None),
        # job a: Hydra's callbacks at 10 and 11, the task 10.1-10.9, its child from 10.2 to 10.7
        line(phases.JOB_RUNTIME, 10.1, 10.15),
        line(phases.JOB_FORK, 10.2, 10.25, pid=2),
        line(phases.TRAINING_STEPS, 10.3, 10.6, pid=2),
        line(phases.JOB_EXIT, 10.7, 10.75),
        line(phases.TASK, 10.1, 10.9),
        line(phases.HYDRA_JOB, 10.0, 11.0),
        # job b: 11.5 to 12.0
        line(phases.JOB_FORK, 11.6, 11.65, pid=3, job="b"),
        line(phases.TASK, 11.55, 11.95, job="b"),
        line(phases.HYDRA_JOB, 11.5, 12.0, job="b"),
    ]
    per_job = jobcost.jobs(records)
    a, b = per_job["a"], per_job["b"]
    assert a["total"] == pytest.approx(1.5)  # 10.0 to the next job's start, 11.5
    assert a[jobcost.BETWEEN] == pytest.approx(0.5) and a[jobcost.AROUND_TASK] == pytest.approx(0.2)
    assert a[phases.TRAINING_STEPS] == pytest.approx(0.3)
    assert a[jobcost.CHILD_REST] == pytest.approx(0.5 - 0.05 - 0.3)  # fork to the child's exit, less its phases
    assert b["total"] == pytest.approx(0.5 + 0.5)  # the last job: to its end, plus the typical gap
    assert (a["first"], b["first"]) == (1.0, 0.0)
    assert jobcost.sweep_phases(records) == {phases.SWEEP_PREFLIGHT: 1.0, f"{phases.WORKER_START} (mean)": 2.0}
