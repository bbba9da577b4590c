"""`lnbench bench`'s check-throughput rows: what `lnbench check` will do on this machine, per claim preset.

For each preset, a sample of its jobs runs as `lnbench check` runs them (one `lnbench train -m` sweep, the joblib
launcher, logger none), twice: at 1 step and at `steps` steps, each job's phases recorded (lnbench.phases). From
them, seconds of a worker:
- per training step: (steps phase at `steps` - steps phase at 1) / (steps - 1), so the first step's extra
  cost stays in the fixed cost;
- per evaluation: the val evaluation, and the test (with its other lengths);
- fixed per job: a job's time at 1 step, less one step and its evaluations (compose, fork, set-up, checkpoints,
  summary, the launcher's gap: lnbench.bench.jobcost), the jobs after each worker's first;
- the sweep's own: its wall time at 1 step, less its jobs' (start-up, the workers' imports, the end).
The preset's full sweep is then predicted from each of its jobs' steps and evaluations (its config composed):
sweep = own + sum over jobs of (fixed + steps x step + evaluations) / workers. The sample is the preset's first
axes' values with the others at their first value: jobs whose step costs more (a longer sequence, a smaller
batch's more steps per epoch) are predicted at the sample's mean step time.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from rich.console import Console
from rich.table import Table

from lnbench import phases
from lnbench.bench import jobcost
from lnbench.config import overrides as hydra_args
from lnbench.config.overrides import expand
from lnbench.config.presets import read_experiment, sweeper_params
from lnbench.config.runtime import usable_cores
from lnbench.config.schema import CONF_DIR, register_configs
from lnbench.runs import read_summary

COMPOSE_AT_MOST = 64  # jobs of a preset composed for their steps; a bigger sweep is scaled from these


def sample_overrides(params: dict[str, str], jobs: int) -> tuple[list[str], int]:
    """Overrides that cut a preset's sweep to at least `jobs` jobs (where it has them): its axes in order, each
    cut to the values that bring the product up to `jobs`, the rest to their first value; (overrides, jobs)."""

    axes = hydra_args.axes([f"{k}={v}" for k, v in params.items()])
    out, n = [], 1
    for key, values in axes.items():
        keep = max(1, min(len(values), math.ceil(jobs / n)))
        vals = [v.split("=", 1)[1] for v in values[:keep]]
        out.append(f"{key}={','.join(vals)}")
        n *= keep
    return out, n


def preset_jobs(preset: str) -> list[dict[str, float]]:
    """(steps, evaluations) of each job of the preset's full sweep, from its composed config."""

    register_configs()
    params = sweeper_params(read_experiment(preset))
    jobs = expand([f"{k}={v}" for k, v in params.items()]) if params else [[]]
    step = max(1, len(jobs) // COMPOSE_AT_MOST)
    out = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for job in jobs[::step]:
            cfg = compose("train", [f"+experiment={preset}", *job])
            steps, every = int(cfg.steps), int(cfg.eval_every)
            out.append({"steps": steps, "vals": steps // every + (steps % every != 0), "n": step})
    return out


def run_sample(preset: str, overrides: list[str], steps: int, folder: Path) -> tuple[float, dict]:
    """The sample's sweep at `steps` steps: (wall seconds, its jobs' phases)."""
    phases_file = folder / f"phases-{steps}.jsonl"
    cmd = [sys.executable, "-m", "lnbench.cli", "train", "-m", f"+experiment={preset}", *overrides]
    cmd += ["hydra/launcher=joblib", "logger=none", "progress=false", f"steps={steps}", f"eval_every={steps}"]
    cmd += [f"hydra.sweep.dir={folder / f'sweep-{steps}'}"]
    env = {**os.environ, phases.ENV: str(phases_file), "WANDB_MODE": "disabled"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    # Jobs the preset itself makes fail (batch_size_sweep's BN at batch 1) are left out; the rest tell the costs.
    done = {job: ph for job, ph in jobcost.jobs(jobcost.read(phases_file)).items() if completed(job)}
    if not done:
        said = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise RuntimeError(said[-1][-300:] if said else f"exit {proc.returncode}, no job completed")
    return wall, done


def completed(run_dir: str | None) -> bool:
    try:
        return read_summary(Path(run_dir)).get("status") == "completed"
    except (OSError, TypeError, ValueError):
        return False


def mean(per_job: dict, phase: str) -> float:
    return statistics.mean(ph.get(phase, 0.0) for ph in per_job.values())


def throughput_rows(presets: list[str], jobs: int, steps: int, log) -> list[dict[str, Any]]:
    workers = len(usable_cores())  # joblib's n_jobs=-1, as lnbench check runs it
    rows = []
    for preset in presets:
        overrides, n = sample_overrides(sweeper_params(read_experiment(preset)), jobs)
        log(f"  {preset}: {n} jobs at 1 and at {steps} steps")
        try:
            with tempfile.TemporaryDirectory() as d:
                wall1, at1 = run_sample(preset, overrides, 1, Path(d))
                _, at_s = run_sample(preset, overrides, steps, Path(d))
        except RuntimeError as e:
            log(f"  {preset}: skipped, its sample sweep failed: {e}")
            continue
        full = preset_jobs(preset)
        rows.append(predict(preset, n, workers, wall1, at1, at_s, steps, full))
        r = rows[-1]
        log(
            f"    {r['jobs_per_min']:.1f} jobs/min, fixed {r['fixed_ms']:.0f} ms per job "
            f"({100 * r['fixed_share']:.1f}% of its sweep), sweep ~{r['sweep_min']:.1f} min"
        )
    return rows


def predict(preset: str, n: int, workers: int, wall1: float, at1: dict, at_s: dict, steps: int, full: list) -> dict:
    """The row: the measured costs (seconds of a worker) and the full sweep predicted from them."""
    s1, ss = jobcost.steady(at1), jobcost.steady(at_s)
    step = max(0.0, (mean(ss, phases.TRAINING_STEPS) - mean(s1, phases.TRAINING_STEPS)) / max(steps - 1, 1))
    val, test = mean(s1, phases.EVAL_VAL), mean(s1, phases.EVAL_TEST)
    fixed = mean(s1, "total") - step - val - test
    # the sweep's own: what its wall time holds beyond its jobs at a further job's cost (so each worker's first
    # job's imports count here, once per worker)
    own = max(0.0, wall1 - len(at1) * mean(s1, "total") / min(workers, max(len(at1), 1)))
    jobs_n = sum(j["n"] for j in full)
    work = sum(j["n"] * (fixed + j["steps"] * step + j["vals"] * val + test) for j in full)
    sweep = own + work / min(workers, jobs_n)
    return {
        "section": "throughput",
        "model": preset,
        "impl": "lnbench check (joblib)",
        "jobs": jobs_n,
        "steps": sum(j["n"] * j["steps"] for j in full),
        "workers": workers,
        "sampled_jobs": n,
        "step_ms": step * 1e3,
        "val_ms": val * 1e3,
        "test_ms": test * 1e3,
        "fixed_ms": fixed * 1e3,
        "sweep_own_s": own,
        "sweep_min": sweep / 60,
        "jobs_per_min": jobs_n / sweep * 60,
        "fixed_share": jobs_n * fixed / min(workers, jobs_n) / sweep,
    }


HOW = (
    "check throughput: about {n} sampled jobs per preset timed at 1 and at {steps} steps (joblib, logger none); step, "
    "evaluation and fixed cost per job (a worker's seconds, the jobs after each worker's first), and the sweep's own "
    "start and end, then the preset's full sweep predicted from its jobs' steps and evaluations over {workers} "
    "workers. fixed: compose, fork, set-up, checkpoints, summary, the launcher's gap (docs/performance.md, issue 33)."
)


def print_rows(rows: list[dict], jobs: int, steps: int) -> None:
    if not rows:
        return
    table = Table(title="lnbench check throughput per claim preset (predicted from sampled jobs)")
    heads = ("preset", "jobs", "steps", "ms/step", "ms/val", "fixed ms/job", "fixed share", "sweep s own")
    for col in (*heads, "jobs/min", "sweep min"):
        table.add_column(col, justify="left" if col == "preset" else "right")
    for r in rows:
        table.add_row(
            r["model"],
            str(r["jobs"]),
            str(r["steps"]),
            f"{r['step_ms']:.1f}",
            f"{r['val_ms']:.0f}",
            f"{r['fixed_ms']:.0f}",
            f"{100 * r['fixed_share']:.1f}%",
            f"{r['sweep_own_s']:.1f}",
            f"{r['jobs_per_min']:.1f}",
            f"{r['sweep_min']:.1f}",
        )
    console = Console(width=max(Console().width, 150))
    console.print(table)
    console.print(HOW.format(n=jobs, steps=steps, workers=rows[0]["workers"]), soft_wrap=True)
