"""Ctrl-C on a joblib sweep at a random moment: once the command has exited, every job's directory says what
the sweep said of it (issue 24: a job died mid-checkpoint, at step 0, while the exit line counted every
interrupted job as kept). Checked from the files alone, after each of many interruptions:

- exit 130, no traceback, one closing line whose counts are the directories' counts;
- no job still holds its run's lock (nothing is still being written);
- an interrupted job has a checkpoint at the step its summary gives, a completed one at its last step, a job
  with no summary has neither checkpoint nor metrics (it never started).
"""

import json
import os
import random
import re
import signal
import time

import pytest
import torch
from conftest import TINY_CLI, start_cli

from lnbench.runs import lock_held

# Three jobs on two workers: at any moment one may be starting, training, checkpointing or still queued.
SWEEP = [
    "-m",
    "seed=0,1,2",
    "steps=100000",
    "log_every=5",
    "eval_every=400",
    "checkpoint_every=200",
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
    *TINY_CLI,
]


def interrupted_sweep(sweep_dir, after: float) -> tuple[int, str]:
    """The sweep, sent SIGINT as Ctrl-C sends it (to its process group) `after` seconds in; (exit code, stderr)."""
    p = start_cli("train", *SWEEP, f"hydra.sweep.dir={sweep_dir}")
    try:
        time.sleep(after)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert "Traceback" not in out + err, err
    return p.returncode, err


def state_on_disk(job) -> str:
    """What a job's directory shows it did, checked to be consistent."""
    try:
        summary = json.loads((job / "summary.json").read_text())
    except FileNotFoundError:
        assert not (job / "checkpoint.pt").exists() and not (job / "metrics.jsonl").exists(), (
            f"{job}: files but no summary"
        )
        return "not started"
    status = summary["status"]
    assert status in ("completed", "interrupted"), (job, summary)
    ckpt = torch.load(job / "checkpoint.pt", map_location="cpu", weights_only=True)  # a job that said so has one
    assert ckpt["step"] == summary["steps"], (job, ckpt["step"], summary["steps"])
    return status


def check_one_interruption(sweep_dir, after: float) -> None:
    code, err = interrupted_sweep(sweep_dir, after)
    assert code == 130, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("lnbench: ")]
    if not sweep_dir.exists():  # stopped while the sweep was being checked, before Hydra made anything
        assert line == "lnbench: interrupted before training started.", line
        return
    jobs = sorted(p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml"))
    assert not any(lock_held(j / ".lock") for j in jobs), "a job is still running after the sweep's exit"
    states = [state_on_disk(j) for j in jobs]
    said = re.search(
        r"stopped with (\d+) job\(s\) completed and (\d+) interrupted with a checkpoint(?:, (\d+) not started)?\.", line
    )
    assert said, line
    assert [int(n or 0) for n in said.groups()] == [
        states.count(s) for s in ("completed", "interrupted", "not started")
    ], (line, states)
    assert "SIGINT received" in line and not (sweep_dir / ".stopped").exists()


def test_ctrl_c_at_two_moments_leaves_every_job_as_the_sweep_says(tmp_path):
    for i, after in enumerate((1.5, 5.0)):  # while joblib's workers start (here); while the jobs train
        check_one_interruption(tmp_path / f"sweep{i}", after)


@pytest.mark.slow
def test_ctrl_c_at_random_moments_leaves_every_job_as_the_sweep_says(tmp_path):
    seed = int(time.time())
    rng = random.Random(seed)
    for i in range(15):
        after = rng.uniform(0.3, 12.0)
        try:
            check_one_interruption(tmp_path / f"sweep{i}", after)
        except AssertionError as e:
            raise AssertionError(f"interrupted {after:.2f} s in (random seed {seed}, try {i}): {e}") from None
