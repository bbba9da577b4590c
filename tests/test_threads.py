"""The thread policy: threads= wins; else the usable cores, capped by SLURM and the launcher's share,
minus what other processes keep busy; idle threads wait passively."""
import logging
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from lnbench import threads


@pytest.fixture
def machine(monkeypatch):
    """A 4-core machine whose other processes keep `busy` cores busy."""
    state = {"busy": 0.0}
    monkeypatch.setattr(threads, "usable_cores", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cores, seconds=0: state["busy"])
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    return state


@pytest.mark.parametrize("busy,expected", [(0.0, 4), (0.4, 4), (1.0, 3), (2.6, 1), (4.0, 1), (7.5, 1)])
def test_takes_the_free_cores(machine, busy, expected):
    machine["busy"] = busy
    n, why = threads.choose(None)
    assert n == expected
    assert f"{busy:.1f}" in why


def test_threads_key_overrides_the_policy(machine):
    machine["busy"] = 4.0
    assert threads.choose(3) == (3, "threads=3 as configured")


def test_slurm_and_launcher_share_cap_it(machine, monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert threads.choose(None)[0] == 2
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert threads.choose(None, OmegaConf.create({"launcher": {"n_jobs": 4}}))[0] == 1
    assert threads.choose(None, OmegaConf.create({"launcher": {"cpus_per_task": 3}}))[0] == 3
    machine["busy"] = 2.0  # a share is still cut to what is free
    assert threads.choose(None, OmegaConf.create({"launcher": {"cpus_per_task": 3}}))[0] == 2


def test_apply_logs_the_choice(machine, caplog):
    machine["busy"] = 1.0
    with caplog.at_level(logging.INFO, logger="lnbench"):
        assert threads.apply(None) == 3
    assert "threads: 3 (4 usable cores; other processes keep 1.0 of them busy)" in caplog.text


def test_passive_waiting_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    threads.passive_waiting()
    assert threads.os.environ["OMP_WAIT_POLICY"] == "passive"
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    threads.passive_waiting()
    assert threads.os.environ["OMP_WAIT_POLICY"] == "active"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    threads.passive_waiting()
    assert "OMP_WAIT_POLICY" not in threads.os.environ


def test_sees_a_busy_neighbour():
    cores = threads.usable_cores()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = threads.busy_elsewhere(cores, 0.5)
    finally:
        hog.kill()
        hog.wait()
    if busy is None:
        pytest.skip("no /proc/stat here")
    assert 0.5 <= busy <= len(cores) + 0.05
