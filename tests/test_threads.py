"""The thread policy: threads= wins; else the usable cores, capped by SLURM and the launcher's share,
minus what other processes keep busy; idle threads spin where the cores were free at start,
sleep at once where they were busy, and a policy the user set is kept."""
import logging
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from lnbench import live_threads, threads


@pytest.fixture
def machine(monkeypatch):
    """A 4-core machine whose other processes keep `busy` cores busy."""
    state = {"busy": 0.0}
    monkeypatch.setattr(threads, "usable_cores", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cores, seconds=0: state["busy"])
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(threads, "_last_sample", None)
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


def test_apply_logs_the_choice(machine, caplog, monkeypatch):
    machine["busy"] = 1.0
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    monkeypatch.setenv("LNBENCH_WAIT_WHY", "other processes kept 1.0 cores busy at start")
    with caplog.at_level(logging.INFO, logger="lnbench"):
        assert threads.apply(None) == 3
        assert live_threads._armed == (4, [0, 1, 2, 3])  # chosen: may move up to the job's ceiling while it trains
        assert threads.apply(1) == 1
        assert live_threads._armed is None  # threads=N: stays
    assert ("threads: 3 (4 usable cores; other processes keep 1.0 of them busy); idle threads: "
            "OMP_WAIT_POLICY=passive; other processes kept 1.0 cores busy at start") in caplog.text
    assert "threads: 1 (threads=1 as configured); idle threads: none (one thread)" in caplog.text


def test_a_joblib_job_starts_at_its_share_and_may_grow_into_idle_cores(machine, caplog):
    """A joblib job starts at its share (4 cores, 4 jobs: 1 thread) but its watch may take it up to all 4
    when the sibling workers idle; submitit's cpus_per_task is a reservation and stays its ceiling."""
    try:
        with caplog.at_level(logging.INFO, logger="lnbench"):
            assert threads.apply(None, OmegaConf.create({"launcher": {"n_jobs": 4}})) == 1
            assert live_threads._armed == (4, [0, 1, 2, 3])
            assert threads.apply(None, OmegaConf.create({"launcher": {"cpus_per_task": 3}})) == 3
            assert live_threads._armed == (3, [0, 1, 2, 3])
        assert "the launcher's share per parallel job is 1; up to 4 while the other jobs leave cores idle" in caplog.text
    finally:
        live_threads.disarm()


@pytest.fixture
def no_policy(monkeypatch):
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LNBENCH_WAIT_WHY"):
        monkeypatch.delenv(k, raising=False)


@pytest.mark.parametrize("busy,policy", [(0.0, {"GOMP_SPINCOUNT": threads.SPIN_COUNT}), (0.3, {"GOMP_SPINCOUNT": threads.SPIN_COUNT}),
                                         (0.9, {"OMP_WAIT_POLICY": "passive"}), (None, {"OMP_WAIT_POLICY": "passive"})])
def test_spins_only_where_the_cores_are_free(machine, no_policy, busy, policy):
    machine["busy"] = busy
    threads.choose_wait_policy()
    got = {k: threads.os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in threads.os.environ}
    assert got == policy
    assert ("free" if busy is not None and busy < 0.5 else "busy" if busy is not None else "could not") in threads.wait_policy()


@pytest.mark.parametrize("key,value", [("OMP_WAIT_POLICY", "active"), ("OMP_WAIT_POLICY", "passive"), ("GOMP_SPINCOUNT", "1000")])
def test_a_policy_the_user_set_is_kept(machine, no_policy, monkeypatch, key, value):
    monkeypatch.setenv(key, value)
    machine["busy"] = 0.0 if value == "passive" else 2.0
    threads.choose_wait_policy()
    assert {k: threads.os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")} == {
        "OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, key: value}
    assert threads.wait_policy().endswith("as set")


def test_one_look_serves_the_policy_and_the_job(monkeypatch, no_policy):
    """A single run looks at the cores once (0.25 s): its job's thread choice reuses the policy's recent look,
    later jobs of a sweep look again."""
    looks = []
    monkeypatch.setattr(threads, "_last_sample", None)
    monkeypatch.setattr(threads, "cpu_times", lambda cores: looks.append(1) or (0.0, 100.0 * len(looks)))
    monkeypatch.setattr(threads, "usable_cores", lambda: [0, 1])
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    threads.choose_wait_policy()
    assert threads.choose(None)[0] == 2 and len(looks) == 2  # two reads of /proc/stat, both by the policy's look
    threads.choose(None)  # the next job of a sweep looks again
    assert len(looks) == 4
    monkeypatch.setattr(threads, "_last_sample", (threads.time.monotonic() - 60, 0.0))  # a stale look: look again
    threads.choose(None)
    assert len(looks) == 6


def test_cli_chooses_the_policy_before_torch_loads(tmp_path):
    """`lnbench bench|train|check` set the policy in their own process before torch is imported (libgomp reads it once)."""
    code = """
import os, sys
seen = []
class Spy:  # records the policy at the moment torch is first imported
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append((os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT")))
sys.meta_path.insert(0, Spy())
from lnbench import cli
try:
    cli.main(["bench", "--help"])  # imports torch (lnbench.bench), then argparse exits
except SystemExit:
    pass
print("POLICY", *seen[0])
"""
    env = {k: v for k, v in threads.os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LNBENCH_WAIT_WHY")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    last = next(line for line in out.splitlines() if line.startswith("POLICY")).split()
    assert last[1:] in (["None", threads.SPIN_COUNT], ["passive", "None"]), out[-500:]


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


def test_niced_neighbours_leave_the_cores_free(tmp_path, monkeypatch):
    """A nice-19 process yields its core to a nice-0 job: its time counts as free, unless this process is
    niced too (then it competes on equal terms)."""
    stat = tmp_path / "stat"
    #                   user nice system idle iowait irq softirq steal
    stat.write_text("cpu  300 500 100 1100 0 0 0 0\ncpu0 100 400 50 450 0 0 0 0\ncpu1 200 100 50 650 0 0 0 0\n")
    monkeypatch.setattr(threads.os, "getpriority", lambda *a: 0)
    assert threads.cpu_times([0, 1], str(stat)) == (400.0, 2000.0)
    assert threads.cpu_times([0], str(stat)) == (150.0, 1000.0)
    monkeypatch.setattr(threads.os, "getpriority", lambda *a: 19)
    assert threads.cpu_times([0, 1], str(stat)) == (900.0, 2000.0)
    assert threads.cpu_times([0], str(tmp_path / "missing")) is None
