"""`lnbench train`, one Hydra app, as lightning-hydra-template's src/train.py: the checks before Hydra
(lnbench.launch.preflight), Hydra running the run or the sweep with `Job` as its task function, and the exit code.

What the checks learnt reaches each job as the Plan the Job holds (Hydra pickles it to joblib's workers and
submitit's jobs): no module keeps state between them. What an exception means is lnbench.launch.failures' call: a
single run exits with its code; a sweep job's failure is one line Hydra records before it goes on with the
other jobs. Each job's status is in its own summary.json.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace

import hydra
from hydra.core.hydra_config import HydraConfig

import lnbench
from lnbench import phases
from lnbench.config import launchers
from lnbench.config.renamed import rewrite_and_say
from lnbench.config.schema import register_configs
from lnbench.errors import UserError
from lnbench.launch import failures, hydra_records, start
from lnbench.launch.preflight import Plan, preflight, resume_overrides
from lnbench.launch.process import guardian, threads
from lnbench.launch.process.closed_pipe import quiet_when_closed
from lnbench.launch.sweep import stop as sweep_stop
from lnbench.runs import CRASH_LOG, RunLock

log = logging.getLogger("lnbench")
CONF_DIR = str(lnbench.CONF_DIR)  # Hydra takes config_path as a string
VERSION_BASE = "1.3"  # hydra.main's; lnbench check's in-process sweeps set the same (lnbench.check.inprocess)


def main(args: list[str]) -> int:
    """`lnbench train <args>`: bad input of any kind is refused before Hydra creates a directory (exit 2, one
    paragraph); then Hydra runs the job or the sweep."""

    timer = phases.timer()
    timer.since_process_start(phases.SWEEP_START)
    register_configs()
    typed = list(args)
    # `lnbench train steps=5 -m seed=0,1`: argparse would take -m after an override for a stray argument.
    args = [a for a in args if a in ("-m", "--multirun")] + [a for a in args if a not in ("-m", "--multirun")]
    try:
        with timer.phase(phases.SWEEP_PREFLIGHT):
            args = rewrite_and_say(resume_overrides(args))  # a resumed run's saved overrides may use old keys too
            plan = preflight(args, CONF_DIR)
    except KeyboardInterrupt:
        return stopped_before_training()
    except Exception as e:  # bad input (exit 2), or a bug of ours (a traceback, exit 1)
        if failures.full_error():
            raise
        return failures.say(e)
    if plan is None:  # --help, --cfg, ...: Hydra's own business
        return hydra_app(Plan(args, False, Path("."), launchers.BASIC, new_dir=False))()
    if plan.done:
        print(f"lnbench: {plan.done}", file=sys.stderr)
        return 0
    return sweep(plan, typed) if plan.multirun else single_run(plan)


def hydra_app(plan: Plan):
    sys.argv = ["lnbench train", *plan.args]  # Hydra reads sys.argv itself, and names the program from it
    app = hydra.main(version_base=VERSION_BASE, config_path=CONF_DIR, config_name="train")(Job(plan))
    return lambda: app() or 0


def single_run(plan: Plan) -> int:
    try:
        return hydra_app(plan)()  # the Job exits with the run's code where it did not complete
    except KeyboardInterrupt:  # before the Job began (Hydra's start-up)
        return stopped_before_training()
    finally:
        if plan.lock is not None:
            plan.lock.release()  # the Job's, once it began; released twice is released


def sweep(plan: Plan, typed: list[str]) -> int:
    """Hydra's multirun; a sweep stopped by a signal ends with one line, once its jobs' checkpoints are on disk."""
    sweep_stop.clear(plan.out_dir)
    with stop_handling(plan) as stop:
        try:
            phases.timer().mark(phases.SWEEP_HYDRA)
            code = hydra_app(plan)()
        except SystemExit as e:  # Hydra's exit 1 after a failed job
            code = e.code if isinstance(e.code, int) else 1
        except KeyboardInterrupt:  # asked twice: stopped at once
            code = 130
    signum = stop.signum or sweep_stop.stopped(plan.out_dir)
    if signum is None:
        return code
    sweep_stop.wait_for_jobs(plan.out_dir)
    print(f"lnbench: {sweep_stop.message(plan.out_dir, signum, typed)}", file=sys.stderr)
    sweep_stop.clear(plan.out_dir)
    return 128 + signum


@contextmanager
def stop_handling(plan: Plan):
    """How the sweep's process takes Ctrl-C: lnbench.launch.sweep.stop's rules where it runs the jobs (a launcher
    without a process per job). submitit's local controller processes (one per job, in the terminal's process
    group) die on Ctrl-C with a traceback and take their job down mid-checkpoint: ignored here, SIGINT stays ignored
    in them (inherited); each job installs its own handler, checkpoints and stops. SLURM's jobs are SLURM's."""
    if not plan.isolated:
        with guardian.guarding(), sweep_stop.SweepStop(plan.out_dir) as stop:
            yield stop
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if plan.local else None
    try:
        yield SimpleNamespace(signum=None)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def stopped_before_training() -> int:
    if failures.full_error():
        raise KeyboardInterrupt
    print("lnbench: interrupted before training started.", file=sys.stderr)
    return 130


class Job:
    """Hydra's task function: one run, or one job of a sweep, with what lnbench.launch.preflight learnt."""

    def __init__(self, plan: Plan):
        self.plan = plan
        hydra_records.install()  # Hydra's records of each job: atomic, a full disk the job's (hydra_records)

    def __setstate__(self, state: dict) -> None:  # in a joblib worker: the job has arrived
        self.__dict__.update(state)
        quiet_when_closed()  # the sweep's stdout may be a pipe its reader closed (`| head`)
        hydra_records.install()

    def __call__(self, cfg) -> dict:
        hc = HydraConfig.get()
        run_dir, started = Path(hc.runtime.output_dir), time.time()
        failures.quiet_full_disk_logs()  # Hydra has just set up the job's train.log
        timer = phases.timer()
        timer.job = str(run_dir)
        with timer.phase(phases.TASK):
            return self.job(cfg, hc, run_dir, started)

    def job(self, cfg, hc, run_dir: Path, started: float) -> dict:
        run_dir.mkdir(parents=True, exist_ok=True)  # Hydra made it; a caller of its own may not have
        if not self.plan.multirun:
            return self.run(cfg, hc, run_dir, started)
        if self.plan.local and sweep_stop.stopped(self.plan.out_dir):
            log.warning("job %s not started: the sweep was stopped", hc.job.num)
            return {"status": "not started"}
        if self.plan.isolated and _main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # inherited from a submitit_local sweep
        return self.sweep_job(cfg, hc, run_dir, started)

    def run(self, cfg, hc, run_dir: Path, started: float) -> dict:
        """A single run: validated, and its existing directory locked, by lnbench.launch.preflight."""

        try:
            lock = self.plan.lock or RunLock(run_dir)  # a new directory: Hydra made it just now
        except UserError as e:
            sys.exit(failures.say(e))
        with lock:
            try:
                hydra_records.write_missing(hc, cfg, run_dir)
                return self.train(cfg, hc, run_dir, self.plan.ckpt)
            except BaseException as e:  # noqa: BLE001 - lnbench.launch.failures decides
                return self.run_ended(e, run_dir, started)

    def sweep_job(self, cfg, hc, run_dir: Path, started: float) -> dict:
        """A sweep job: admitted here, in its own process, once (preflight only checked the sweep's keys)."""
        from lnbench.training.recipe import UNREAD  # noqa: PLC0415 (torch: once preflight passed)

        timer = phases.timer()
        timer.mark(phases.JOB_CHECKS)
        with ExitStack() as held:
            if refused := start.admit(cfg, run_dir, held):
                return self.job_ended(refused[1], run_dir, started, hc, record=refused[0] != start.LOCKED)
            timer.since(phases.JOB_CHECKS, phases.JOB_CHECKS)
            try:
                hydra_records.write_missing(hc, cfg, run_dir)
                return self.train(cfg, hc, run_dir, UNREAD)
            except BaseException as e:  # noqa: BLE001 - lnbench.launch.failures decides
                return self.job_ended(e, run_dir, started, hc)

    def train(self, cfg, hc, run_dir: Path, ckpt) -> dict:
        from lnbench.launch.process.warm import prepare  # noqa: PLC0415 (torch: once preflight passed)
        from lnbench.training.recipe import train  # noqa: PLC0415 (torch: once preflight passed)

        with phases.timer().phase(phases.JOB_RUNTIME):
            runtime = threads.decide(cfg, hc)  # the cores the job may use, never the load; a record, not config
            names = start.names(hc, cfg, self.plan.multirun)
        fork = self.plan.multirun and not self.plan.isolated  # a launcher that runs many jobs in one process
        return start.start(
            run_dir,
            train,
            cfg,
            run_dir,
            fork=fork,
            before_fork=lambda: prepare(cfg, runtime.threads),
            ckpt=ckpt,
            runtime=runtime,
            locked=True,  # validated, and its directory locked: by preflight, or by this job
            **names,
        )

    def run_ended(self, error: BaseException, run_dir: Path, started: float) -> dict:
        """A single run that did not complete: its summary says why, then the process exits with its code."""
        failure = failures.classify(error)
        if isinstance(error, UserError) and self.plan.new_dir:
            shutil.rmtree(run_dir, ignore_errors=True)  # bad input found only now: the directory this process made goes
        elif failure.status == "failed":
            failures.record(run_dir, error, started)
        if failures.full_error():
            raise error
        sys.exit(failures.say(error, run_dir / CRASH_LOG if failure.bug else None, run_dir))

    def job_ended(self, error: BaseException, run_dir: Path, started: float, hc, record: bool = True) -> dict:
        """A sweep job that did not complete. Interrupted: it answers, so that the launcher waits for every
        job's checkpoint (lnbench.launch.sweep.stop) and submitit's sweep gets a result; failed: one line for Hydra
        to record, and the sweep goes on."""
        failure = failures.classify(error)
        if failure.status == "interrupted" and not failures.full_error():
            if self.plan.local:
                sweep_stop.mark(self.plan.out_dir, getattr(error, "signum", signal.SIGINT))
            log.warning("job %s: %s", hc.job.num, error or "interrupted")
            return {"status": "interrupted"}
        if record and failure.status == "failed":
            failures.record(run_dir, error, started)
        if failures.full_error():
            raise error
        line = failures.one_line(hc.job.num, list(hc.overrides.task), error, run_dir)
        log.error(line)
        raise failures.JobFailed(line) from None


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
