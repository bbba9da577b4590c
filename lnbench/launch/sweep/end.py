"""A sweep as a person follows it in the terminal, and as a W&B group: a Hydra callback (conf/train.yaml).

- start: the sweep directory, printed (Hydra's basic launcher never says where it writes);
- each job: its console log lines prefixed with its number and name, so parallel jobs can be told apart
  (its own train.log stays unprefixed);
- end: a block with the sweep directory, how many jobs completed, failed and diverged, how to upload the
  W&B runs and the report command; with logger.wandb.report=true, one more W&B run in the sweep's group
  (job_type `report`) holding the report's tables and plots.

With $LNBENCH_PHASES (lnbench.phases) it also times each job from Hydra's on_job_start to its on_job_end, and a
worker's start to its first job: Hydra's only hooks around a job.
"""

from __future__ import annotations

import atexit
import logging
import os
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from lnbench import phases
from lnbench.config.overrides import shell_arg
from lnbench.launch.sweep.progress import SweepProgress
from lnbench.launch.sweep.status import sweep_of
from lnbench.runs import LOCK, OVERRIDES, check_command, find_check_record, lock_held, read_summary, run_order
from lnbench.training.tracker import job_name

log = logging.getLogger("lnbench")
IN_USE = "in use"


class SweepEnd(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        phases.timer().since(phases.SWEEP_HYDRA, phases.SWEEP_HYDRA)
        print(f"sweep: {config.hydra.sweep.dir}", flush=True)
        self.config, self.done, self.pid = config, False, os.getpid()
        # job starts and ends, and a total
        self.progress = SweepProgress(Path(str(config.hydra.sweep.dir)), title=sweep_title(config))
        self.progress.start()
        from lnbench.report.wandb_page import wants_report  # noqa: PLC0415 (lnbench.report loads scipy: not per job)

        if wants_report(config):
            try:  # now: at exit it is too late to import (it registers exit hooks of its own)
                import wandb  # noqa: F401, PLC0415 (W&B: only if a report run is asked)
            except Exception:  # noqa: BLE001 (start_wandb says why, at the end)
                pass
        # Hydra skips on_multirun_end when a job failed (the sweeper re-raises the first failure once
        # every job has run) or a signal stopped the sweep: the block then comes at exit, after the error.
        atexit.register(self.end)

    def __getstate__(self) -> dict[str, Any]:
        # Hydra's joblib launcher pickles the callbacks with each job: the progress (a thread) stays here
        return {k: v for k, v in self.__dict__.items() if k != "progress"}

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        phases.timer().since(phases.HYDRA_JOB, phases.HYDRA_JOB)
        # Exit hooks run last-registered first: keep ours ahead of those W&B registered during a job run
        # in this process (they clear the temp folder W&B writes tables and images through).
        if getattr(self, "pid", None) == os.getpid():
            atexit.unregister(self.end)
            atexit.register(self.end)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        timer = phases.timer()
        if timer.on and getattr(self, "pid", os.getpid()) != os.getpid() and not timer.seconds[phases.WORKER_START]:
            timer.since_process_start(phases.WORKER_START)  # a worker's first job (the sweep's process runs none)
        timer.mark(phases.HYDRA_JOB)
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            return

        title = sweep_title(config)
        prefix = f"[{title + ' ' if title else ''}#{config.hydra.job.num} {job_name(config.hydra)}] "
        for h in logging.getLogger().handlers:
            if type(h) is logging.StreamHandler:  # the console, not train.log
                h.setFormatter(Prefixed(prefix, h.formatter))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.end()

    def end(self) -> None:
        if getattr(self, "done", True):
            return
        self.done = True
        with phases.timer().phase(phases.SWEEP_END):
            if getattr(self, "progress", None) is not None:
                self.progress.stop()
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            jobs = job_statuses(sweep_dir)
            from lnbench.report.wandb_page import log_report, wants_report  # noqa: PLC0415 (as above)

            report_run = log_report(self.config, sweep_dir) if wants_report(self.config) and jobs else None
            print(end_of_sweep_block(sweep_dir, jobs, report_run), flush=True)


def sweep_title(config: DictConfig) -> str:
    """The preset's name where the sweep's folder is named after it (lnbench check's <out>/<preset>, and
    <preset>/<round> for its rounds: their sweeps overlap on one console), else nothing: a sweep of its own needs
    no title."""
    experiment = OmegaConf.select(config, "hydra.runtime.choices.experiment")
    folder = Path(str(config.hydra.sweep.dir))
    if isinstance(experiment, str) and folder.name == experiment:
        return experiment
    if isinstance(experiment, str) and folder.parent.name == experiment:
        return f"{experiment}/{folder.name}"
    return ""


class Prefixed(logging.Formatter):
    def __init__(self, prefix: str, inner: logging.Formatter | None):
        super().__init__()
        self.prefix, self.inner = prefix, inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(self.prefix + line for line in self.inner.format(record).split("\n"))


# ---- the end-of-sweep block -------------------------------------------------------------------
def job_statuses(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    """Job directory (relative) -> its summary.json ({} for a job that left none: killed or never ran), for this
    sweep's jobs only: a folder below it with a multirun.yaml of its own is another sweep (lnbench check's rounds
    inside a preset's tuning sweep), with its own end block. A job whose directory another process still holds
    (this sweep's jobs have all let go by now) is `in use`: this sweep did not run it, and failed it, whatever the
    other process's summary says."""
    found = {}
    jobs = [o.parent.parent for o in sweep_dir.glob(f"**/{OVERRIDES}")]
    for job in sorted(jobs, key=lambda j: run_order(j, sweep_dir)):
        if sweep_of(job, sweep_dir) not in (sweep_dir, None):
            continue
        summary = read_summary(job)
        if lock_held(job / LOCK):
            summary = {
                **summary,
                "status": IN_USE,
                "error": "its directory is in use by another lnbench process: "
                "this sweep did not run it (wait for that process, then run the sweep again)",
            }
        found[str(job.relative_to(sweep_dir))] = summary
    return found


def end_of_sweep_block(sweep_dir: Path, jobs: dict[str, dict[str, Any]], report_run: str | None = None) -> str:
    counts = Counter(s.get("status", "no summary") for s in jobs.values())
    order = ["completed", "failed", "diverged", "interrupted"]
    shown = [f"{counts.get(s, 0)} {s}" for s in order] + [f"{n} {s}" for s, n in counts.items() if s not in order]
    lines = [f"sweep done: {sweep_dir}", f"  jobs       {len(jobs)}: " + ", ".join(shown)]
    for job, s in jobs.items():
        if s.get("status") in ("failed", "diverged", IN_USE):
            why = s.get("error") or f"loss not finite at step {s.get('diverged_at_step')}"
            lines.append(f"  {s['status']:<10} {job}: {_short(why)}")
        for flag in s.get("flags") or ():  # completed, but its numbers are suspect (lnbench.training.flags.suspect)
            lines.append(f"  flagged    {job}: {_short(flag)}")
    offline = sorted(sweep_dir.glob("*/wandb/offline-run-*"))
    if offline:
        quoted = shlex.quote(str(sweep_dir))  # the globs stay outside the quotes, for the shell to expand
        extra = f" {quoted}/wandb/offline-run-*" if any(sweep_dir.glob("wandb/offline-run-*")) else ""
        lines.append(
            f"  W&B        {len(offline)} offline run folder(s); "
            f"upload all with `wandb sync {quoted}/*/wandb/offline-run-*{extra}`"
        )
    if report_run:
        lines.append(f"  W&B report {report_run}")
    if (counts.get("interrupted") or counts.get("no summary")) and (check := find_check_record(sweep_dir)):
        lines.append(f"  continue   `{check_command(check[1])}`: the check goes on, each job from its checkpoint")
    elif counts.get("interrupted") or counts.get("no summary"):
        lines.append(
            f"  continue   the same command with {shell_arg('hydra.sweep.dir', sweep_dir)}: each job goes on from its "
            "checkpoint"
        )
    lines.append(f"  next       lnbench report {shlex.quote(str(sweep_dir))}")
    return "\n".join(lines)


def _short(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"
