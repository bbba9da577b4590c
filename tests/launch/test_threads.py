"""The thread policy: threads= wins; else the cores a job may use (affinity, SLURM, the launcher's share),
never the load. A same-seed run gives the same numbers idle and beside a busy process, and a resume keeps
the thread count the run began with."""

import logging
import os
import signal
import subprocess
import sys
from contextlib import contextmanager

import pytest
from conftest import lnbench_cmd, metrics_without_time, run_cli, summary_of
from omegaconf import OmegaConf

from lnbench.config import launchers
from lnbench.config.runtime import Runtime
from lnbench.launch.process import threads


@pytest.fixture
def machine(monkeypatch):
    """A 4-core machine."""
    monkeypatch.setattr(threads, "usable_cores", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(launchers, "shareable_cores", lambda: 4)  # a parallel launcher's: affinity and quota
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)


def launched(name: str, **keys):
    """A job's Hydra config under Hydra's launcher `name`, with its keys."""
    return OmegaConf.create({"launcher": {"_target_": launchers.HYDRA[name][0], **keys}})


def test_takes_the_usable_cores(machine):
    assert threads.choose(None) == (4, "4 usable cores")


def test_more_threads_than_cores_is_allowed_with_a_warning_saying_what_happens(machine, caplog):
    with caplog.at_level(logging.WARNING, logger="lnbench"):
        assert threads.choose(1000) == (1000, "threads=1000 as configured")
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "threads=1000 is more than the 4 cores this job may use" in said and "usually slower than threads=4" in said
    caplog.clear()
    threads.choose(4)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_threads_key_overrides_the_policy(machine):
    assert threads.choose(3) == (3, "threads=3 as configured")


def test_slurm_and_launcher_share_cap_it(machine, monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert threads.choose(None) == (2, "4 usable cores; SLURM_CPUS_PER_TASK=2")
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert threads.choose(None, launched("joblib", n_jobs=4))[0] == 1
    assert threads.choose(None, launched("joblib", n_jobs=-1))[0] == 1
    assert threads.choose(None, launched("joblib", n_jobs=2))[0] == 2
    assert threads.choose(None, launched("submitit_local", cpus_per_task=3))[0] == 3
    assert threads.choose(None, launched("basic"))[0] == 4


def test_a_launchers_share_is_of_the_cores_the_process_may_use(machine, monkeypatch):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)  # a big node, of which this job may use 4 cores
    share = threads.choose(None, launched("joblib", n_jobs=2))
    assert share == (2, "4 usable cores; the launcher's share per parallel job is 2")


def test_decide_logs_the_choice_and_puts_the_runtime_in_one_record(machine, caplog, monkeypatch):
    monkeypatch.setattr(threads.heap, "keep_freed_memory", lambda: True)  # not this test process's malloc
    with caplog.at_level(logging.INFO, logger="lnbench"):
        chosen = threads.decide(OmegaConf.create({"threads": None, "threads_follow": True}))
        configured = threads.decide(OmegaConf.create({"threads": 1}))
    assert chosen == Runtime(4, "4 usable cores", keeps_freed_memory=True, follow=True, cores=(0, 1, 2, 3))
    assert (configured.threads, configured.why, configured.follow) == (1, "threads=1 as configured", None)
    assert "threads: 4 (4 usable cores)" in caplog.text
    assert "threads: 1 (threads=1 as configured)" in caplog.text


@contextmanager
def busy_neighbour():
    """One process spinning on a core for as long as the block runs."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def test_a_busy_neighbour_does_not_change_the_choice():
    alone = threads.choose(None)
    with busy_neighbour():
        assert threads.choose(None) == alone


# Big enough that torch's kernels split their work over 2 threads (LN's row sums, batch norm's statistics).
SHARED_MACHINE_RUN = [
    "model.hidden_size=64",
    "dataset=adding",
    "dataset.seq_len=10",
    "dataset.val_size=64",
    "dataset.test_size=64",
    "dataset.batch_size=32",
    "steps=40",
    "log_every=10",
    "eval_every=20",
    "device=cpu",
    "progress=false",
    "logger.wandb.mode=disabled",
]


# bn_lstm (its threads meet at barriers) with -m slow: the default suite keeps to its 3 minutes
@pytest.mark.parametrize("model", ["ln_lstm", pytest.param("bn_lstm", marks=pytest.mark.slow)])
def test_same_seed_same_numbers_idle_and_beside_a_busy_process(model, tmp_path):
    idle, busy = tmp_path / "idle", tmp_path / "busy"
    assert run_cli("train", *SHARED_MACHINE_RUN, f"model={model}", f"hydra.run.dir={idle}").returncode == 0
    with busy_neighbour():
        r = run_cli("train", *SHARED_MACHINE_RUN, f"model={model}", f"hydra.run.dir={busy}")
    assert r.returncode == 0, r.stderr
    assert metrics_without_time(busy) == metrics_without_time(idle)
    threads_of = [summary_of(d)["provenance"]["torch_threads"] for d in (idle, busy)]
    assert threads_of[0] == threads_of[1] == len(os.sched_getaffinity(0))


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to begin on 2 threads")
def test_kill_9_then_resume_under_another_load_and_thread_count_gives_the_same_numbers(tmp_path):
    """SIGKILL mid-run, then a resume beside a busy process asking for threads=1: it keeps the 2 threads
    the run began with (and says so), and ends with the uninterrupted run's metrics."""
    from tests.training.test_resume import wait_for_step

    run = [*SHARED_MACHINE_RUN, "model=ln_lstm", "steps=300", "eval_every=50", "checkpoint_every=50", "threads=2"]
    ref = tmp_path / "ref"
    assert run_cli("train", *run, f"hydra.run.dir={ref}").returncode == 0
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(WANDB_MODE="disabled")
    proc = subprocess.Popen(
        [*lnbench_cmd(), "train", *run, f"hydra.run.dir={run_dir}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_step(run_dir, proc, 100)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with busy_neighbour():
        r = run_cli("train", f"resume={run_dir}", "threads=1")
    assert r.returncode == 0, r.stderr
    assert "a resume keeps the thread count" in r.stdout + r.stderr
    assert metrics_without_time(run_dir) == metrics_without_time(ref)
