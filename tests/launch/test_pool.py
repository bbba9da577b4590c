"""lnbench check's warm pool (lnbench.launch.process.pool, lnbench.check.inprocess): a sweep composed in the
check's process and run by warm workers leaves the files a `lnbench train -m` sweep of its own leaves, and its
jobs compute the same numbers as cold ones, also on a worker that ran other jobs before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_CLI

SWEEP = [*(a for a in TINY_CLI if a != "logger.wandb.mode=disabled"), "logger=none", "hydra/launcher=joblib"]
SWEEP = [a for a in SWEEP if a != "threads=1"]  # the launcher's share, as lnbench check runs its jobs
TIMES = ("time", "wall_time", "time_per_step", "eval_time", "checkpoint_time")


def cold(folder: Path, *args: str) -> None:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "lnbench.cli", "train", "-m", *args, f"hydra.sweep.dir={folder}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def warm(pool, hydra, folder: Path, *args: str) -> list:
    sweep = hydra.sweep(["-m", *args, f"hydra.sweep.dir={folder}"])
    todo, done = list(sweep.jobs), []
    while todo or pool.busy:
        for w in pool.idle:
            if todo:
                idx, overrides = todo.pop(0)
                pool.run(w, idx, sweep.context, idx, overrides)
        done += [result for _, result in pool.results(0.2)]
    assert sweep.end() == 0
    return done


def files(folder: Path) -> dict[str, str]:
    """Every text file of a sweep, the sweep's own path written as SWEEP_DIR."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix in (".yaml", ".jsonl", ".json"):
            out[str(p.relative_to(folder))] = p.read_text().replace(str(folder), "SWEEP_DIR")
    return out


def numbers(text: str) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in text.splitlines()]


@pytest.fixture(scope="module")
def pool_and_hydra():
    from lnbench.check.inprocess import InProcessHydra
    from lnbench.config.launchers import JOBLIB
    from lnbench.launch.process.pool import WarmPool, joblib_env

    workers = JOBLIB.job_slots({})
    pool, hydra = WarmPool(workers, joblib_env(workers)), InProcessHydra()
    yield pool, hydra
    pool.close()
    hydra.close()


def test_a_warm_pools_jobs_leave_a_sweeps_records_and_compute_a_cold_jobs_numbers(tmp_path, pool_and_hydra):
    pool, hydra = pool_and_hydra
    args = [*SWEEP, "model=lstm,ln_lstm", "seed=0", "steps=4", "eval_every=2", "log_every=1"]
    # the workers first run other jobs (another model, another length): a warm worker is a used one
    before = warm(
        pool, hydra, tmp_path / "before", *SWEEP, "model=gru,bn_lstm", "seed=5", "steps=3", "dataset.seq_len=6"
    )
    assert [r.status for r in before] == ["completed", "completed"]
    warm(pool, hydra, tmp_path / "warm", *args)
    cold(tmp_path / "cold", *args)
    a, b = files(tmp_path / "cold"), files(tmp_path / "warm")
    assert set(a) == set(b) and "multirun.yaml" in a and "0/.hydra/hydra.yaml" in a and "1/metrics.jsonl" in a
    for name in a:
        if name.endswith(".yaml"):  # multirun.yaml, .hydra/{config,hydra,overrides}.yaml, config.yaml: the same
            assert a[name] == b[name], name
    for job in ("0", "1"):
        assert numbers(a[f"{job}/metrics.jsonl"]) == numbers(b[f"{job}/metrics.jsonl"])
        cold_s, warm_s = (json.loads(x[f"{job}/summary.json"]) for x in (a, b))
        for key in ("status", "steps", "final_val", "test", "threads"):
            assert cold_s[key] == warm_s[key], key
        for key in ("torch_threads", "threads_chosen_by", "omp_num_threads", "malloc", "kernels"):
            assert cold_s["provenance"].get(key) == warm_s["provenance"].get(key), key  # joblib's thread limits too


def test_a_stop_reaches_the_job_a_warm_worker_runs_which_checkpoints(tmp_path, pool_and_hydra):
    pool, hydra = pool_and_hydra
    sweep = hydra.sweep(["-m", *SWEEP, "seed=0", "steps=100000", "eval_every=50000", f"hydra.sweep.dir={tmp_path}"])
    (idx, overrides), worker = sweep.jobs[0], pool.idle[0]
    pool.run(worker, "long", sweep.context, idx, overrides)
    deadline = time.time() + 120
    while not (tmp_path / "0" / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.2)
    pool.signal_busy(signal.SIGINT)
    results = []
    while not results and time.time() < deadline:
        results = pool.results(0.5)
    assert [(t, r.status) for t, r in results] == [("long", "interrupted")]
    assert json.loads((tmp_path / "0" / "summary.json").read_text())["status"] == "interrupted"
    assert (tmp_path / "0" / "checkpoint.pt").is_file() and worker in pool.idle  # the worker takes the next job
    sweep.end()
